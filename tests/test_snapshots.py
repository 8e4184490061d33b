"""Reproducibility: determinism, pinned snapshots and their garbage collection, cursor pagination."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import BACKENDS, DOCS, backend_overrides
from rcp_agentic import BackendUnavailable, Engine, InvalidParams

# Where the pinned-snapshot test keeps its vectors: in memory, in Chroma, in Milvus Lite.
STORES = ("exact", "chroma", "milvus")


def _view(res: Any) -> list[tuple[str, float, str | None]]:
    return [(h.id, h.score, h.text) for h in res.hits]


def _milvus_rowids(eng: Engine, unit: str) -> tuple[set[int], set[int]]:
    """(every rowid the engine's Milvus Lite snapshot collections of ``unit`` hold, the
    rowids of the one the last commit's read searches)."""
    from pymilvus import MilvusClient

    recall: Any = eng.recall
    version = int(eng.index_version[1:])
    recall.sync(version, [(unit, 0)])
    current = recall.collections.target(unit, 0, version)
    prefix = recall.collection(unit, 0) + "_s"
    client = MilvusClient(uri=eng.config.milvus_uri or "")
    try:
        held: dict[str, set[int]] = {}
        for name in client.list_collections():
            if name.startswith(prefix):
                rows = client.query(name, filter="rowid >= 0", output_fields=["rowid"])
                held[name] = {int(r["rowid"]) for r in rows}
    finally:
        client.close()
    return set().union(*held.values()), held[current]


@pytest.mark.parametrize("store", STORES)
def test_pinned_version_is_served_exactly_then_collected(tmp_path: Path, embedder: Any,
                                                         store: str) -> None:
    path = tmp_path / "e"
    where = (backend_overrides("milvus", path) if store == "milvus"
             else {"dense_exact_max": 50_000 if store == "exact" else 0})
    eng = Engine(path, embedder=embedder, snapshots_retained=3, **where)
    eng.add_documents(DOCS)
    v1 = eng.index_version
    before = {mode: eng.retrieve("rank fusion and BM25 scoring", k=5, mode=mode)
              for mode in ("dense", "sparse", "hybrid")}
    eng.add_documents([{"id": "d5", "text": "Fusion of rankings was rewritten entirely."}])
    eng.delete_documents(["d2"])
    assert eng.index_version == "v3"
    for mode, res in before.items():
        pinned = eng.retrieve("rank fusion and BM25 scoring", k=5, mode=mode, index_version=v1)
        assert pinned.index_version == v1
        assert _view(pinned) == _view(res), mode
    now = eng.retrieve("rank fusion and BM25 scoring", k=5, mode="sparse")
    assert "doc:d2#c0" not in {h.id for h in now.hits}
    eng.add_documents([{"id": "z", "text": "A fourth write pushes v1 out of retention."}])
    with pytest.raises(BackendUnavailable) as err:
        eng.retrieve("rank fusion", index_version=v1)
    assert err.value.code == -32010 and err.value.data["field"] == "indexVersion"
    # Rows no retained version sees are gone from SQLite and from Chroma or Milvus.
    live = eng.store.query("SELECT COUNT(*) FROM units WHERE v_to IS NULL")[0][0]
    stored = eng.store.query("SELECT COUNT(*) FROM units")[0][0]
    assert stored > live  # v2/v3 retired rows are still retained
    version = int(eng.index_version[1:])
    for unit in ("chunk", "document"):
        eng.retrieve("rank fusion", k=1, unit=unit)  # a read syncs Chroma / builds Lite's copy
        if store != "milvus":
            assert eng.chroma.all_ids(unit, 0) == set(eng.store.rowids(unit, 0)), unit
            continue
        # Milvus Lite: the current read searches exactly the rows visible now, and no
        # snapshot collection keeps a row no retained version sees.
        held, current = _milvus_rowids(eng, unit)
        assert current == {r for (r,) in eng.store.query(
            "SELECT rowid FROM units WHERE unit = ? AND level = 0 AND v_from <= ?"
            " AND (v_to IS NULL OR v_to > ?)", (unit, version, version))}, unit
        rowids = set(eng.store.rowids(unit, 0))
        assert held <= rowids, (unit, held - rowids)
    eng.close()


def test_backends_rank_alike_after_a_replace_and_a_delete(tmp_path: Path, embedder: Any) -> None:
    """Rows written by later commits (a replaced document, rows a delete retires) are ranked
    by each backend alike, at every version as it is served: the same ids in the same order.
    (Milvus Lite keeps BM25 statistics per segment; written incrementally, later rows scored
    with the statistics of a segment of one or two rows.)"""
    queries = ("rank fusion and BM25 scoring", "fusion of rankings", "document length")
    writes = [lambda eng: eng.add_documents(DOCS),
              lambda eng: eng.add_documents([{"id": "d5", "text": "Fusion of rankings was "
                                              "rewritten entirely."}]),
              lambda eng: eng.delete_documents(["d2"])]
    ranked: dict[str, list[list[str]]] = {}
    for backend in BACKENDS:
        path = tmp_path / backend
        ranked[backend] = []
        with Engine(path, embedder=embedder, **backend_overrides(backend, path)) as eng:
            for write in writes:
                write(eng)
                ranked[backend] += [[h.id for h in eng.retrieve(q, k=5, mode=mode).hits]
                                    for q in queries for mode in ("dense", "sparse", "hybrid")]
    assert ranked["milvus"] == ranked["embedded"]


def test_garbage_collection_with_one_snapshot(tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, snapshots_retained=1)
    eng.add_documents(DOCS[:3])
    eng.add_documents([{"id": "d1", "text": "Replaced text."}])
    assert eng.store.query("SELECT COUNT(*) FROM units WHERE v_to IS NOT NULL")[0][0] == 0
    with pytest.raises(BackendUnavailable):
        eng.retrieve("x", index_version="v1")
    eng.close()


def test_identical_requests_give_identical_results(paged: Engine) -> None:
    opts = dict(k=6, mode="hybrid", seed=7, mmr={"lambda": 0.6}, fusion={"method": "convex"})
    a = paged.retrieve("neural networks and retrieval", **opts).to_wire()
    b = paged.retrieve("neural networks and retrieval", **opts).to_wire()
    a["usage"].pop("latencyMs"), b["usage"].pop("latencyMs")
    assert a == b


@pytest.fixture(scope="module")
def paged(tmp_path_factory: pytest.TempPathFactory, embedder: Any, backend: str) -> Any:
    """A long document of many small chunks, and DOCS, in each recall backend."""
    path = tmp_path_factory.mktemp(f"paged-{backend}") / "e"
    eng = Engine(path, embedder=embedder, chunk_size=20, chunk_overlap=0, candidate_k=40,
                 **backend_overrides(backend, path))
    text = " ".join(f"Sentence {i} is about rivers, lakes and the water cycle number {i}."
                    for i in range(60))
    eng.add_documents([{"id": "w", "text": text}] + DOCS)
    yield eng
    eng.close()


def _all_pages(eng: Engine, query: str, **opts: Any) -> list[Any]:
    pages = [eng.retrieve(query, **opts)]
    while pages[-1].next_cursor:
        pages.append(eng.retrieve(query, cursor=pages[-1].next_cursor, **opts))
        assert len(pages) < 100
    return pages


def test_pages_cover_the_ranked_list_once(paged: Engine) -> None:
    full = paged.retrieve("water cycle rivers", k=200, candidate_k=200)
    pages = _all_pages(paged, "water cycle rivers", k=7, candidate_k=200)
    ids = [h.id for p in pages for h in p.hits]
    assert ids == [h.id for h in full.hits]
    assert all(len(p.hits) == 7 for p in pages[:-1]) and pages[-1].next_cursor is None


@settings(max_examples=25, deadline=None)
@given(k=st.integers(1, 12), budget=st.integers(10, 120))
def test_pages_with_budget_never_repeat_or_lose(paged: Engine, k: int, budget: int) -> None:
    pages = _all_pages(paged, "water cycle rivers", k=k, token_budget=budget, candidate_k=200)
    ids = [h.id for p in pages for h in p.hits]
    assert len(ids) == len(set(ids))
    full = paged.retrieve("water cycle rivers", k=200, candidate_k=200)
    fits = {h.id for h in full.hits if (h.meta or {})["chunk_token_count"] <= budget}
    assert set(ids) == fits
    for p in pages:
        assert (p.usage.tokens if p.usage else 0) <= budget


def test_pages_stay_on_their_snapshot(tmp_path: Path, embedder: Any, backend: str) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, **backend_overrides(backend, tmp_path / "e"))
    eng.add_documents(DOCS)
    first = eng.retrieve("energy and cells", k=3)
    eng.add_documents([{"id": "new", "text": "Cells make energy; a brand new document."}])
    second = eng.retrieve("energy and cells", k=3, cursor=first.next_cursor)
    assert second.index_version == first.index_version != eng.index_version
    assert "doc:new#c0" not in {h.id for h in second.hits}
    assert not {h.id for h in first.hits} & {h.id for h in second.hits}
    eng.close()


def test_bad_cursors(paged: Engine, tmp_path: Path, embedder: Any) -> None:
    cur = paged.retrieve("water cycle rivers", k=3).next_cursor
    assert cur
    body, sig = cur.split(".")
    for bad in (body + "." + ("0" if sig[0] != "0" else "1") + sig[1:], body[:-2] + "." + sig,
                "garbage", ""):
        with pytest.raises(InvalidParams) as err:
            paged.retrieve("water cycle rivers", k=3, cursor=bad)
        assert err.value.field == "cursor"
    with pytest.raises(InvalidParams):
        paged.retrieve("another query", k=3, cursor=cur)
    with pytest.raises(InvalidParams):
        paged.retrieve("water cycle rivers", k=4, cursor=cur)
    other = Engine(tmp_path / "other", embedder=embedder)
    other.add_documents(DOCS)
    with pytest.raises(InvalidParams):
        other.retrieve("water cycle rivers", k=3, cursor=cur)
    other.close()


def test_a_lagging_derived_kind_holds_retired_rows_until_it_folds_them_in(
        tmp_path: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Collection stops at the version a derived kind still reflects (not past the readers'
    window alone), for at most ``FOLLOW_VERSIONS`` versions; ``readable_since`` says which
    versions' changes can still be read."""
    from rcp_agentic.store import info

    monkeypatch.setattr(info, "FOLLOW_VERSIONS", 6)
    eng = Engine(tmp_path / "e", embedder=embedder, snapshots_retained=1)
    store = eng.store
    eng.add_documents(DOCS[:3])
    pinned = int(eng.index_version[1:])
    store.set_info("derived.tree-node.version", str(pinned))   # a kind that lags from here
    for n in range(3):
        eng.add_documents([{"id": "d1", "text": f"Replaced text {n}."}])
    retired = store.query("SELECT COUNT(*) FROM units WHERE v_to IS NOT NULL")[0][0]
    assert retired >= 3 and store.readable_since(pinned)
    with pytest.raises(BackendUnavailable):      # readers keep their own window
        eng.retrieve("x", index_version=f"v{pinned}")
    for n in range(3, 8):                        # past FOLLOW_VERSIONS: no longer held
        eng.add_documents([{"id": "d1", "text": f"Replaced text {n}."}])
    assert store.query("SELECT COUNT(*) FROM units WHERE v_to IS NOT NULL")[0][0] == 0
    assert not store.readable_since(pinned)
    eng.close()
