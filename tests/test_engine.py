"""Engine core: ingest, every mode × unit, the wire shape, options and their bad values."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import DOCS, REPO, backend_overrides
from rcp_agentic import (BackendUnavailable, EmbeddingMismatch, Engine, InvalidParams,
                         OptionUnsupported)

SCHEMA_PATH = REPO / "tests" / "schema" / "rcp-1.0.json"


@pytest.fixture(scope="module")
def result_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_PATH.read_text("utf-8"))
    sub = {"$schema": schema["$schema"], "$defs": schema["$defs"],
           "$ref": "#/$defs/RetrieveResult"}
    return jsonschema.Draft202012Validator(sub)


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
@pytest.mark.parametrize("unit", ["chunk", "passage", "document"])
def test_every_mode_and_unit(recall_engine: Engine, result_validator: Any, mode: str,
                             unit: str) -> None:
    res = recall_engine.retrieve("how does rank fusion combine rankings", k=3, mode=mode, unit=unit)
    assert len(res.hits) == 3  # every mode finds 3: d5, d2 and d4 all contain "rank"
    assert res.hits[0].chunk and res.hits[0].chunk.doc_id == "d5"
    scores = [h.score for h in res.hits]
    assert scores == sorted(scores, reverse=True)
    assert all(math.isfinite(s) for s in scores)
    for h in res.hits:
        assert h.unit == unit and h.level == 0
        assert h.citation and h.citation.source
        assert set(h.scores or {}) >= ({"dense", "sparse"} & {mode} | ({"dense", "sparse", "fused"}
                                                                       if mode == "hybrid" else set()))
    wire = res.to_wire()
    result_validator.validate(wire)
    assert json.loads(json.dumps(wire, allow_nan=False)) == wire
    assert wire["indexVersion"] == recall_engine.index_version
    assert set(wire["usage"]) >= {"candidates", "reranked", "tokens", "latencyMs"}


def test_hit_carries_static_fields_and_citation(recall_engine: Engine) -> None:
    hit = recall_engine.retrieve("vitamin D multiple sclerosis", k=1).hits[0]
    assert hit.id == "doc:d1#c0"
    meta = hit.meta or {}
    assert meta["doc_id"] == "d1" and meta["chunk_index"] == 0
    assert meta["chunk_start_char"] == 0 and meta["chunk_end_char"] == len(DOCS[0]["text"])
    assert meta["chunk_token_count"] > 5
    assert meta["lang"] == "en" and meta["tags"] == ["health", "neuro"]
    assert hit.citation and hit.citation.start == 0 and hit.citation.end == len(DOCS[0]["text"])
    assert hit.text == DOCS[0]["text"]


def test_pages_units_from_pdf_and_files(tmp_path: Path, embedder: Any, backend: str) -> None:
    path = tmp_path / "e"
    with Engine(path, embedder=embedder, **backend_overrides(backend, path)) as engine:
        (tmp_path / "bad.bin").write_bytes(b"\x00\x01binary")
        (tmp_path / "empty.txt").write_text("")
        res = engine.index_paths([REPO / "examples" / "docs", tmp_path / "bad.bin",
                                  tmp_path / "empty.txt"])
        assert res.documents == 5 and res.pages == 2
        assert {Path(s.path).name: s.reason for s in res.skipped} == {
            "bad.bin": "unsupported extension .bin", "empty.txt": "empty file"}
        pages = engine.retrieve("packing skips a passage larger than the remaining budget", k=2,
                                unit="page")
        top = pages.hits[0]
        assert top.id == "doc:docs/guides/token-budgets.pdf#p2" and top.unit == "page"
        assert top.citation and top.citation.page == 2
        assert top.citation.uri and top.citation.uri.startswith("file://")
        assert (top.meta or {})["page_range_start"] == 2 == (top.meta or {})["page_range_end"]
        chunk = engine.retrieve("token budget context window", k=1, unit="chunk",
                                filter={"field": "file_type", "op": "eq", "value": "pdf"}).hits[0]
        assert (chunk.meta or {})["page_range_start"] == 1
        doc = engine.retrieve("token budgets", k=1, unit="document",
                              filter={"field": "file_type", "op": "eq", "value": "pdf"}).hits[0]
        assert doc.id == "doc:docs/guides/token-budgets.pdf"
        assert (doc.meta or {})["page_range_end"] == 2


def test_options_include_text_vectors_min_score(recall_engine: Engine) -> None:
    res = recall_engine.retrieve("cells and energy", k=4, mode="dense", include_text=False,
                                 include_vectors=True)
    assert all(h.text is None and h.vector is not None and len(h.vector) == 384 for h in res.hits)
    cut = res.hits[1].score
    kept = recall_engine.retrieve("cells and energy", k=4, mode="dense", min_score=cut)
    assert [h.id for h in kept.hits] == [h.id for h in res.hits[:2]]


def test_wire_names_are_accepted(recall_engine: Engine) -> None:
    res = recall_engine.retrieve_params({"query": "BM25 term frequency", "k": 2, "mode": "hybrid",
                                         "candidateK": 5, "includeText": False,
                                         "fusion": {"method": "rrf", "rrfK": 10},
                                         "_meta": {"x": 1}, "unknownField": True})
    assert res.hits[0].id == "doc:d2#c0" and res.hits[0].text is None
    assert res.usage and res.usage.candidates <= 10


@pytest.mark.parametrize("method", ["rrf", "weighted", "convex"])
def test_fusion_methods(recall_engine: Engine, method: str) -> None:
    res = recall_engine.retrieve("dense retrievers cosine similarity bi-encoder", k=3,
                                 fusion={"method": method, "weights": {"dense": 1.0, "sparse": 0.5},
                                         "alpha": 0.7})
    assert res.hits[0].id == "doc:d4#c0"
    if method != "rrf":
        assert 0.0 <= res.hits[-1].score <= res.hits[0].score <= 1.5


def test_k_is_clamped_and_noted(recall_engine: Engine) -> None:
    res = recall_engine.retrieve("energy", k=10_000, candidate_k=10_000)
    assert len(res.hits) <= recall_engine.config.max_k
    assert any("maxK" in n for n in res.usage.notes or [])


def test_index_version_pin(recall_engine: Engine) -> None:
    current = recall_engine.index_version
    assert recall_engine.retrieve("energy", index_version=current).index_version == current
    for missing in ("v999", "v-1"):
        with pytest.raises(BackendUnavailable) as err:
            recall_engine.retrieve("energy", index_version=missing)
        assert err.value.data["field"] == "indexVersion"
    with pytest.raises(BackendUnavailable) as err:
        recall_engine.retrieve("energy", index_version="latest")
    assert err.value.data == {"field": "indexVersion", "retryable": False}


BAD = [
    ({"k": 0}, InvalidParams, "k"),
    ({"k": "5"}, InvalidParams, "k"),
    ({"k": 1.5}, InvalidParams, "k"),
    ({"k": True}, InvalidParams, "k"),
    ({"mode": "semantic"}, OptionUnsupported, "mode"),
    ({"mode": 3}, InvalidParams, "mode"),
    ({"unit": "node"}, OptionUnsupported, "unit"),
    ({"unit": "paragraph"}, InvalidParams, "unit"),
    ({"level": 2}, OptionUnsupported, "level"),
    ({"level": -1}, InvalidParams, "level"),
    ({"candidate_k": 2, "k": 5}, InvalidParams, "candidateK"),
    ({"fusion": {"method": "borda"}}, OptionUnsupported, "fusion.method"),
    ({"fusion": {"weights": {"colbert": 1.0}}}, InvalidParams, "fusion.weights.colbert"),
    ({"fusion": {"weights": {"dense": -1.0}}}, InvalidParams, "fusion.weights.dense"),
    ({"fusion": {"alpha": 2.0}}, InvalidParams, "fusion.alpha"),
    ({"fusion": {"rrf_k": 0}}, InvalidParams, "fusion.rrfK"),
    ({"min_score": "high"}, InvalidParams, "minScore"),
    ({"include_text": "yes"}, InvalidParams, "includeText"),
    ({"rerank": {"method": "cross-encoder"}}, OptionUnsupported, "rerank"),
    ({"mmr": {"lambda": 1.5}}, InvalidParams, "mmr.lambda"),
    ({"mmr": {"lambda": "high"}}, InvalidParams, "mmr.lambda"),
    ({"token_budget": 0}, InvalidParams, "tokenBudget"),
    ({"token_budget": 1.5}, InvalidParams, "tokenBudget"),
    ({"recency": {"field": "lang", "halfLifeDays": 3}}, InvalidParams, "recency.field"),
    ({"recency": {"field": "nope", "halfLifeDays": 3}}, InvalidParams, "recency.field"),
    ({"recency": {"field": "modified", "halfLifeDays": 0}}, InvalidParams,
     "recency.halfLifeDays"),
    ({"session_id": ""}, InvalidParams, "sessionId"),
    ({"session_id": 5}, InvalidParams, "sessionId"),
    ({"cursor": "abc"}, InvalidParams, "cursor"),
    ({"cursor": "abc", "session_id": "s"}, InvalidParams, "cursor"),
    ({"modality": "image"}, OptionUnsupported, "modality"),
    ({"filter": "lang = en"}, InvalidParams, "filter"),
]


@pytest.mark.parametrize("options,exc,where", BAD)
def test_bad_options(filled_engine: Engine, options: dict[str, Any], exc: type, where: str) -> None:
    k = options.pop("k", 3)
    with pytest.raises(exc) as err:
        filled_engine.retrieve("energy", k=k, **options)
    key = "option" if exc is OptionUnsupported else "field"
    assert err.value.data[key] == where
    assert err.value.code == (-32005 if exc is OptionUnsupported else -32602)


@pytest.mark.parametrize("query", ["", "   ", {"type": "image", "mimeType": "image/png",
                                                "data": "AAAA"}, 42, None])
def test_bad_queries(filled_engine: Engine, query: Any) -> None:
    with pytest.raises((InvalidParams, OptionUnsupported)):
        filled_engine.retrieve(query)


def test_content_block_query_and_unicode(recall_engine: Engine) -> None:
    res = recall_engine.retrieve({"type": "text", "text": "Photosynthese Lichtenergie"}, k=1)
    assert res.hits[0].id == "doc:d3#c0"
    assert recall_engine.retrieve("réseaux de neurones 漢字 🙂", k=1).hits


def test_unknown_python_option_is_an_error(filled_engine: Engine) -> None:
    with pytest.raises(InvalidParams) as err:
        filled_engine.retrieve("energy", min_scor=0.5)
    assert err.value.field == "min_scor"


def test_strict_false_degrades_with_notes(filled_engine: Engine) -> None:
    res = filled_engine.retrieve("energy", k=2, strict=False, rerank={"method": "llm"},
                                 mode="semantic", unit="tree-node")
    notes = " ".join(res.usage.notes or [])
    assert "rerank" in notes and "mode" in notes and "unit" in notes
    assert res.hits and res.hits[0].unit == "chunk"


def test_query_embedding_cache(filled_engine: Engine) -> None:
    filled_engine.retrieve("a query asked twice", mode="dense")
    before = filled_engine.embedder.seconds_in_model
    filled_engine.retrieve("a query asked twice", mode="dense")
    assert filled_engine.embedder.seconds_in_model == before


def test_minted_ids_are_stable_and_upsert(engine: Engine) -> None:
    a = engine.add_documents([{"text": "An untitled note about graphs."}])
    b = engine.add_documents([{"text": "An untitled note about graphs."}])
    assert a.ids == b.ids and engine.stats()["documents"] == 1
    engine.add_documents([{"id": "x", "text": "First version about apples."}])
    engine.add_documents([{"id": "x", "text": "Second version about oranges."}])
    hits = engine.retrieve("apples oranges", k=5, mode="sparse", unit="document").hits
    assert [h.text for h in hits if h.id == "doc:x"] == ["Second version about oranges."]


@pytest.mark.parametrize("doc,field", [
    ({"id": "a", "text": 5}, "documents[0].text"),
    ({"id": "a", "text": "   "}, "documents[0].text"),
    ({"id": "a", "text": "ok", "meta": ["x"]}, "documents[0].meta"),
    ({"id": "a", "text": "ok", "meta": {"v": float("nan")}}, "documents[0].meta"),
    ({"id": "", "text": "ok"}, "documents[0].id"),
    ({"id": 7, "text": "ok"}, "documents[0].id"),
    ("just a string", "documents[0]"),
])
def test_bad_documents_store_nothing(engine: Engine, doc: Any, field: str) -> None:
    engine.add_documents([{"id": "keep", "text": "Stored before the bad batch."}])
    with pytest.raises(InvalidParams) as err:
        engine.add_documents([doc])
    assert err.value.field == field
    assert engine.store.document_ids() == ["keep"]


def test_mistyped_metadata_rejects_whole_batch(engine: Engine) -> None:
    engine.add_documents([{"id": "a", "text": "alpha", "meta": {"year": 2020}}])
    with pytest.raises(InvalidParams) as err:
        engine.add_documents([{"id": "b", "text": "beta", "meta": {"year": 2021}},
                              {"id": "c", "text": "gamma", "meta": {"year": "last year"}}])
    assert err.value.field == "meta.year"
    assert engine.store.document_ids() == ["a"]


def test_langchain_and_llamaindex_embedders(tmp_path: Path, embedder: Any) -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from llama_index.core.embeddings import MockEmbedding

    lc = Engine(tmp_path / "lc", embedder=DeterministicFakeEmbedding(size=32))
    lc.add_documents(DOCS[:3])
    assert lc.retrieve(DOCS[1]["text"], k=1, mode="dense").hits[0].id == "doc:d2#c0"
    lc.close()
    with pytest.raises(EmbeddingMismatch) as err:
        Engine(tmp_path / "lc", embedder=embedder)
    assert err.value.code == -32016 and "DeterministicFakeEmbedding" in err.value.message
    li = Engine(tmp_path / "li", embedder=MockEmbedding(embed_dim=16))
    li.add_documents(DOCS[:2])
    assert len(li.retrieve("anything", k=2, mode="dense").hits) == 2
    li.close()


def test_reopen_keeps_config_and_data(tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, chunk_size=40, chunk_overlap=5)
    eng.add_documents(DOCS[:2])
    version = eng.index_version
    eng.close()
    again = Engine(tmp_path / "e", embedder=embedder)
    assert again.config.chunk_size == 40 and again.index_version == version
    assert again.retrieve("BM25", k=1).hits[0].chunk.doc_id == "d2"  # type: ignore[union-attr]
    again.close()
