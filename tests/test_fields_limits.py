"""What a remote writer cannot do to filter fields — flood them, lock a field's type for good,
crash ingest with deep metadata — and pinned index versions that cannot be served."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DOCS, initialized, rpc_call

from rcp_agentic import BackendUnavailable, Engine, InvalidParams


# --- filter fields -------------------------------------------------------------------------------


def test_metadata_keys_per_document_are_capped(tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, max_meta_keys=5)
    rpc = initialized(eng)
    ok = {f"k{i}": i for i in range(5)}
    assert "result" in rpc_call(rpc, "index/add", {"documents": [{"id": "ok", "text": "Fine.",
                                                               "meta": ok}]})
    for meta in ({f"k{i}": i for i in range(6)}, {"a": {f"n{i}": i for i in range(5)}}):
        out = rpc_call(rpc, "index/add", {"documents": [
            {"id": "fine", "text": "Fine too."},
            {"id": "wide", "text": "Too many keys.", "meta": meta}]})
        assert out["error"]["code"] == -32602, out
        assert out["error"]["data"]["field"] == "documents[1].meta"
        assert "max_meta_keys" in out["error"]["message"]
    assert eng.store.document_ids() == ["ok"]
    assert set(eng.filter_fields()) >= set(ok) and "k5" not in eng.filter_fields()
    eng.close()


def test_filter_fields_per_engine_are_capped(tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, max_filter_fields=3,
                 filter_fields={"lang": "keyword"})
    eng.add_documents([{"id": "a", "text": "First.", "meta": {"lang": "en", "year": 2020,
                                                               "tags": ["x"]}}])
    before = (eng.filter_fields(), eng.index_version, eng.stats())
    with pytest.raises(InvalidParams) as err:
        eng.add_documents([{"id": "b", "text": "Second.", "meta": {"lang": "de", "year": 2021}},
                           {"id": "c", "text": "Third.", "meta": {"colour": "red"}}])
    assert err.value.code == -32602 and err.value.field == "meta.colour"
    assert "max_filter_fields" in err.value.message
    assert (eng.filter_fields(), eng.index_version, eng.stats()) == before
    assert eng.store.document_ids() == ["a"]
    # Known fields stay usable at the cap, and capabilities stay small.
    eng.add_documents([{"id": "b", "text": "Second.", "meta": {"lang": "de", "year": 2021}}])
    caps = eng.capabilities()["filter"]["fields"]
    assert {"lang", "year", "tags"} <= set(caps) and "colour" not in caps
    eng.close()


def test_an_inferred_field_no_document_uses_is_dropped(tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, snapshots_retained=1,
                 filter_fields={"lang": "keyword"})
    eng.add_documents([{"id": "x", "text": "A first value.", "meta": {"year": "x", "lang": "en"}},
                       {"id": "y", "text": "Another.", "meta": {"colour": "red"}}])
    assert eng.filter_fields()["year"] == "keyword"
    eng.delete_documents(["x"])
    fields = eng.filter_fields()
    assert "year" not in fields and fields["lang"] == "keyword" and fields["colour"] == "keyword"
    eng.add_documents([{"id": "z", "text": "A numeric year.", "meta": {"year": 2020}}])
    assert eng.filter_fields()["year"] == "int"
    hits = eng.retrieve("year", k=5, mode="dense",
                        filter={"field": "year", "op": "gte", "value": 2000}).hits
    assert {h.id for h in hits} == {"doc:z#c0"}
    # Replacing a document without the field drops it too; declared fields never go.
    eng.add_documents([{"id": "y", "text": "Another, now plain."}])
    assert "colour" not in eng.filter_fields()
    eng.delete_documents(["y", "z"])
    assert eng.filter_fields()["lang"] == "keyword" and "year" not in eng.filter_fields()
    eng.close()


def test_a_field_stays_while_a_retained_snapshot_uses_it(tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, snapshots_retained=2)
    eng.add_documents([{"id": "x", "text": "Once upon a time.", "meta": {"year": "x"}}])
    pinned = eng.index_version
    eng.delete_documents(["x"])
    assert eng.filter_fields()["year"] == "keyword"  # v1 is still readable
    res = eng.retrieve("time", k=3, index_version=pinned,
                       filter={"field": "year", "op": "eq", "value": "x"})
    assert [h.id for h in res.hits] == ["doc:x#c0"]
    eng.add_documents([{"id": "w", "text": "Later."}])  # v1 leaves retention
    assert "year" not in eng.filter_fields()
    eng.close()


def test_a_write_whose_field_type_changed_meanwhile_is_refused(tmp_path: Path,
                                                               embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder)
    eng.add_documents([{"id": "x", "text": "A keyword year.", "meta": {"year": "x"}}])
    # As another process would: metadata typed before that commit, written after it.
    with pytest.raises(InvalidParams) as err:
        eng.store.write_documents([], {"year": "int"})
    assert err.value.field == "meta.year"
    assert eng.filter_fields()["year"] == "keyword" and eng.index_version == "v1"
    eng.close()


def test_deep_metadata_is_invalid_params_not_recursion_error(tmp_path: Path,
                                                            embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder)

    def nested(depth: int) -> Any:
        value: Any = 1
        for i in range(depth - 1):
            value = {"n": value} if i % 2 else [value]
        return value

    for depth in (17, 5000, 200_000):
        with pytest.raises(InvalidParams) as err:
            eng.add_documents([{"id": "ok", "text": "Fine."},
                               {"id": "deep", "text": "Deep.", "meta": {"deep": nested(depth)}}])
        assert err.value.field == "meta.deep" and "max_meta_depth" in err.value.message
    assert eng.store.document_ids() == []
    # The metadata object itself is level 1, so a value 15 levels down is at the limit.
    eng.add_documents([{"id": "deep", "text": "Deep enough.", "meta": {"deep": nested(15)}}])
    assert eng.store.document_ids() == ["deep"]
    eng.close()


# --- pinned index versions -----------------------------------------------------------------------


@pytest.mark.parametrize("token", ["latest", "v01", "v-1", "v999", "v" + "9" * 5000, "v\u0661",
                                   "", "1", "V1", "v1 ", "v1\x00", "v1\ud800"],
                         ids=lambda t: ascii(t)[:12])
def test_a_pinned_version_that_cannot_be_served_is_backend_unavailable(
        filled_engine: Engine, token: str) -> None:
    with pytest.raises(BackendUnavailable) as err:
        filled_engine.retrieve("energy", index_version=token)
    assert err.value.code == -32010 and err.value.data["field"] == "indexVersion"
    assert err.value.data["retryable"] is False
    assert len(err.value.message) < 300
    out = initialized(filled_engine).handle_text(json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "retrieve",
         "params": {"query": "energy", "indexVersion": token}}))
    assert json.loads(out or "")["error"]["code"] == -32010


def test_a_collected_version_is_not_retryable(tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, snapshots_retained=1)
    eng.add_documents(DOCS[:2])
    eng.add_documents(DOCS[2:4])
    assert eng.retrieve("energy", index_version="v2").index_version == "v2"
    with pytest.raises(BackendUnavailable) as err:
        eng.retrieve("energy", index_version="v1")
    assert err.value.data["retryable"] is False and "no longer retained" in err.value.message
    eng.close()


# --- a call that fails part-way --------------------------------------------------------------


def test_a_bad_document_anywhere_in_a_list_writes_nothing(tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, max_meta_keys=5)
    docs: list[dict[str, Any]] = [{"id": f"d{i}", "text": f"Record {i}."} for i in range(100)]
    docs[80]["meta"] = {f"k{i}": i for i in range(6)}  # past the first transaction of 64
    with pytest.raises(InvalidParams) as err:
        eng.add_documents(docs)
    assert err.value.field == "documents[80].meta"
    assert eng.stats()["documents"] == 0 and eng.index_version == "v0"
    eng.close()


def test_an_error_after_a_commit_names_committed_and_pending_ids(tmp_path: Path,
                                                                 embedder: Any) -> None:
    """The engine-wide field cap is checked in each write transaction: the second one fails."""
    eng = Engine(tmp_path / "e", embedder=embedder, max_filter_fields=2)
    docs: list[dict[str, Any]] = [{"id": f"d{i}", "text": f"Record {i}.", "meta": {"a": i}}
                                  for i in range(100)]
    for i in range(64, 70):
        docs[i]["meta"] = {"a": i, "b": i, "c": i}
    with pytest.raises(InvalidParams) as err:
        eng.add_documents(docs)
    assert err.value.data["committedIds"] == [f"d{i}" for i in range(64)]
    assert err.value.data["pendingIds"] == [f"d{i}" for i in range(64, 100)]
    assert sorted(eng.store.document_ids()) == sorted(f"d{i}" for i in range(64))
    eng.close()


def test_index_paths_skips_an_invalid_record_and_indexes_the_rest(tmp_path: Path,
                                                                  embedder: Any) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    lines = [{"id": "good1", "text": "A fine record."}, {"id": "x" * 600, "text": "Bad id."},
             {"id": "good2", "text": "Another fine record.", "meta": {f"k{i}": i for i in range(3)}},
             {"id": "deep", "text": "Deep meta.", "meta": {"a": [[[[[[[[1]]]]]]]]}}]
    (folder / "records.jsonl").write_text("\n".join(json.dumps(x) for x in lines), "utf-8")
    eng = Engine(tmp_path / "e", embedder=embedder, max_meta_depth=4)
    result = eng.index_paths([folder])
    assert eng.stats()["documents"] == 2
    assert len(result.skipped) == 2
    assert all("records.jsonl#L" in s.path and s.reason for s in result.skipped)
    eng.close()
