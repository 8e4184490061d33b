"""``rcp_agentic.integrations.llamaindex.RCPRetriever`` against real engines and real servers.

One corpus (DOCS, a long multi-chunk text and a three-page PDF) is indexed once
and served three ways: an in-process Engine, a real ``serve --stdio`` subprocess
and a real uvicorn ``serve --http`` subprocess (each spawned once per module).
LlamaIndex is used as an application would: ``retrieve``/``aretrieve``,
``RetrieverQueryEngine`` with node postprocessors and llama-index-core's own
``MockLLM``, and the instrumentation dispatcher.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import DOCS, free_port, running_server
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent, RetrievalStartEvent
from llama_index.core.llms.mock import MockLLM
from llama_index.core.postprocessor import MetadataReplacementPostProcessor, SimilarityPostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import (
    BaseNode,
    NodeRelationship,
    NodeWithScore,
    ObjectType,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from pydantic import Field
from test_loaders import write_pdf

from rcp_agentic import Engine
from rcp_agentic.client import AsyncRCPClient, RCPClient
from rcp_agentic.client.sync_client import default_stdio_command
from rcp_agentic.errors import BackendUnavailable, InvalidParams, OptionUnsupported
from rcp_agentic.integrations.common import RETRIEVE_OPTIONS, hit_metadata
from rcp_agentic.integrations.llamaindex import EXCLUDED_METADATA_KEYS, RCPRetriever, unit_ids

TOKEN = "llamaindex-test-token"
TRANSPORTS = ("inprocess", "stdio", "http")

# Wider context for MetadataReplacementPostProcessor, on one document only.
WINDOW = "WINDOW: reciprocal rank fusion (Cormack et al., 2009) sums 1/(k + rank)."
CORPUS: list[dict[str, Any]] = json.loads(json.dumps(DOCS))
CORPUS[4]["meta"]["window"] = WINDOW
assert CORPUS[4]["id"] == "d5"

TOPICS = {
    "volcano": "Volcanoes erupt when magma rises through the crust and vents lava, ash and gas.",
    "jazz": "Jazz musicians improvise over chord changes, swing rhythms and blue notes.",
    "honeybee": "Honeybees forage for nectar and communicate flower locations with a waggle "
                "dance.",
    "glacier": "Glaciers carve valleys as compacted snow turns to ice and slowly flows downhill.",
    "chess": "Chess openings such as the Sicilian Defence fight for control of the centre.",
    "lighthouse": "Lighthouses guide ships at night with rotating lamps and Fresnel lenses.",
    "sourdough": "Sourdough bread rises thanks to a starter of wild yeast and lactic acid "
                 "bacteria fermenting the dough.",
    "satellite": "Satellites in geostationary orbit circle the Earth once a day above the "
                 "equator.",
}
# Long enough for several chunks, so chunk spans start past 0.
LONG_TEXT = "\n\n".join(" ".join(f"{sentence} (note {i} on {topic})." for i in range(6))
                        for topic, sentence in TOPICS.items())
PDF_PAGES = [
    ["Orchard report.", "Apple trees need pruning in late winter before buds break."],
    ["Irrigation schedule.", "Drip lines water the pear rows every third morning in summer."],
    ["Pest control.", "Codling moth traps are hung in May to monitor the first flight."],
]


# --- real engines and servers (once per module) --------------------------------------------

@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    root = tmp_path_factory.mktemp("llamaindex")
    path = root / "engine"
    with Engine(path, embedder=embedder, filter_fields={"published": "date"}) as eng:
        eng.add_documents([*CORPUS, {"id": "long", "text": LONG_TEXT,
                                     "meta": {"lang": "en", "year": 2024}}])
        res = eng.index_paths([write_pdf(root / "orchard.pdf", PDF_PAGES)])
        assert res.documents == 1 and res.pages == 3
    return path


def _copy(src: Path, factory: pytest.TempPathFactory, name: str) -> Path:
    """Servers get their own copy: the same data, so the same ids, without sharing files."""
    dst = factory.mktemp(name) / "engine"
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="module")
def engine(corpus_dir: Path, embedder: Any) -> Iterator[Engine]:
    eng = Engine(corpus_dir, embedder=embedder)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def stdio_dir(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy(corpus_dir, tmp_path_factory, "li-stdio")


@pytest.fixture(scope="module")
def http_url(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = _copy(corpus_dir, tmp_path_factory, "li-http")
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with RCPClient.http(url, TOKEN, timeout=2, max_retries=0) as c:
                c.ping()
            return True
        except OSError:  # TransportError / ClientTimeout until uvicorn listens
            return False

    env = {**os.environ, "RCP_AGENTIC_TOKEN": TOKEN}
    with running_server([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http", "--engine",
                         str(path), "--port", str(port)], ready, timeout=120, env=env):
        yield url


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop for the module's async calls, so each retriever opens one async client."""
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def retrievers(engine: Engine, stdio_dir: Path, http_url: str,
               loop: asyncio.AbstractEventLoop) -> Iterator[dict[str, RCPRetriever]]:
    """A retriever per transport (k=4); stdio and HTTP servers behind them run all module long."""
    out = {"inprocess": RCPRetriever.from_engine(engine, k=4),
           "stdio": RCPRetriever.from_stdio(engine_dir=stdio_dir, k=4),
           "http": RCPRetriever.from_url(http_url, TOKEN, k=4)}
    yield out
    for r in out.values():
        loop.run_until_complete(r.aclose())


def fresh(r: RCPRetriever, **options: Any) -> RCPRetriever:
    """A retriever with other defaults sharing ``r``'s (already open) source."""
    new = RCPRetriever(r.hit_source.source, k=options.pop("k", r.k), **options)
    new.hit_source = r.hit_source
    return new


def text_node(n: NodeWithScore) -> TextNode:
    assert isinstance(n.node, TextNode)
    return n.node


def rel(node: BaseNode, kind: NodeRelationship) -> RelatedNodeInfo:
    info = node.relationships[kind]
    assert isinstance(info, RelatedNodeInfo)
    return info


def ids(nodes: list[NodeWithScore]) -> list[str]:
    return [n.node.node_id for n in nodes]


def run(r: RCPRetriever, loop: asyncio.AbstractEventLoop, how: str, query: Any,
        **overrides: Any) -> list[NodeWithScore]:
    if how == "sync":
        return r.retrieve_with(query, **overrides) if overrides else r.retrieve(query)
    coro = r.aretrieve_with(query, **overrides) if overrides else r.aretrieve(query)
    return loop.run_until_complete(coro)


def wire_hits(engine: Engine, query: str, k: int = 4, **options: Any) -> list[dict[str, Any]]:
    return [h for h in engine.retrieve(query, k, **options).to_wire()["hits"]]


# --- transports, sync and async ------------------------------------------------------------

QUERIES = ["reciprocal rank fusion", "sourdough starter wild yeast", "codling moth traps"]


@pytest.mark.parametrize("how", ["sync", "async"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_same_nodes_on_every_transport(retrievers: dict[str, RCPRetriever], engine: Engine,
                                       loop: asyncio.AbstractEventLoop, transport: str,
                                       how: str) -> None:
    r = retrievers[transport]
    for query in QUERIES:
        expected = wire_hits(engine, query)
        nodes = run(r, loop, how, query)
        assert ids(nodes) == [h["id"] for h in expected] and len(nodes) == 4
        for node, hit in zip(nodes, expected):
            assert isinstance(node, NodeWithScore)
            assert node.score == pytest.approx(hit["confidence"])
            assert node.node.get_content() == hit["text"]
            assert node.node.metadata == hit_metadata(hit)
        units = run(r, loop, how, QueryBundle(query), unit="document", k=2)
        assert ids(units) == [h["id"] for h in wire_hits(engine, query, 2, unit="document")]


def test_async_path_is_really_async(engine: Engine, loop: asyncio.AbstractEventLoop) -> None:
    """An AsyncRCPClient serves only awaited calls: aretrieve works, so it never went sync."""
    client = AsyncRCPClient.in_process(engine)
    r = RCPRetriever.from_client(client, k=2)
    assert type(r)._aretrieve is not BaseRetriever._aretrieve
    nodes = loop.run_until_complete(r.aretrieve("reciprocal rank fusion"))
    assert ids(nodes)[0] == "doc:d5#c0"
    with pytest.raises(TypeError, match="only async"):
        r.retrieve("reciprocal rank fusion")
    loop.run_until_complete(client.close())


def test_concurrent_async_calls(retrievers: dict[str, RCPRetriever], engine: Engine,
                                loop: asyncio.AbstractEventLoop) -> None:
    r = retrievers["stdio"]
    tops = [wire_hits(engine, q, 1)[0]["id"] for q in QUERIES]

    async def many() -> list[list[NodeWithScore]]:
        return await asyncio.gather(*(r.aretrieve_with(q, k=1) for q in QUERIES * 3))

    got = loop.run_until_complete(many())
    assert [ids(n)[0] for n in got] == tops * 3
    assert tops[0] == "doc:d5#c0" and tops[1].startswith("doc:long#c")
    assert tops[2].startswith("doc:orchard.pdf#c")


# --- options ------------------------------------------------------------------------------

ALL_OPTIONS: dict[str, Any] = {
    "mode": "hybrid", "unit": "chunk", "level": 0, "token_budget": 400,
    "filter": {"field": "lang", "op": "eq", "value": "en"}, "session_id": "li-all-options",
    "mmr": {"lambda": 0.7}, "rerank": False,
    "recency": {"field": "published", "half_life_days": 365}, "min_score": -5.0,
    "candidate_k": 40, "fusion": {"method": "rrf", "rrf_k": 30}, "include_text": True,
    "index_version": None, "seed": 7, "strict": True,
    "graph_recall": False,  # this engine has no graph; True is tested in test_graph_retrievers
    "rewrite": False}  # no LLM either; a method is tested in test_transform
WIRE_NAMES = {"token_budget": "tokenBudget", "session_id": "sessionId", "min_score": "minScore",
              "candidate_k": "candidateK", "include_text": "includeText",
              "index_version": "indexVersion", "graph_recall": "x-rcp-agentic-graphRecall"}


@pytest.fixture()
def seen_params(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The raw params each retrieve hands the engine (after the client and the dispatcher)."""
    seen: list[dict[str, Any]] = []
    inner = engine.retrieve_params

    def spy(raw: dict[str, Any], control: Any = None) -> Any:
        seen.append(json.loads(json.dumps(raw)))
        return inner(raw, control)

    monkeypatch.setattr(engine, "retrieve_params", spy)
    return seen


def test_every_option_reaches_the_engine_and_overrides_win(
        retrievers: dict[str, RCPRetriever], engine: Engine, seen_params: list[dict[str, Any]],
        loop: asyncio.AbstractEventLoop) -> None:
    options = {**ALL_OPTIONS, "index_version": engine.index_version}
    assert set(options) == set(RETRIEVE_OPTIONS)
    r = fresh(retrievers["inprocess"], k=3, **options)
    assert all(getattr(r, name) == value for name, value in options.items())
    nodes = r.retrieve("energy in cells")
    sent = seen_params[-1]
    assert sent["k"] == 3 and sent["query"] == "energy in cells"
    assert sent["fusion"] == {"method": "rrf", "rrfK": 30}
    assert sent["recency"] == {"field": "published", "halfLifeDays": 365}
    for name, value in options.items():
        if name not in ("fusion", "recency", "strict"):
            assert sent[WIRE_NAMES.get(name, name)] == value, name
    assert "strict" not in sent  # strict=True gates in the client; true is the wire default
    assert nodes and all(n.node.metadata["lang"] == "en" for n in nodes)

    overrides = {"k": 2, "mode": "sparse", "unit": "document", "token_budget": 5000,
                 "session_id": "li-override", "min_score": 0.0, "candidate_k": 20,
                 "seed": 8, "filter": {"field": "lang", "op": "eq", "value": "de"},
                 "strict": False}
    nodes = loop.run_until_complete(r.aretrieve_with("Photosynthese Lichtenergie", **overrides))
    sent = seen_params[-1]
    for name, value in overrides.items():
        assert sent[WIRE_NAMES.get(name, name)] == value, name
    assert sent["mmr"] == {"lambda": 0.7}  # not overridden: the attribute still applies
    assert ids(nodes) == ["doc:d3"] and set(nodes[0].node.metadata["scores"]) == {"sparse"}
    # None unsets an attribute for one call; nothing leaks into the next call.
    r.retrieve_with("Photosynthese", similarity_top_k=1, filter=None, session_id=None,
                    recency=None)
    assert "filter" not in seen_params[-1] and "sessionId" not in seen_params[-1]
    assert seen_params[-1]["k"] == 1
    r.retrieve("Photosynthese")
    assert seen_params[-1]["filter"] == ALL_OPTIONS["filter"] and seen_params[-1]["k"] == 3


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_options_take_effect_on_every_transport(retrievers: dict[str, RCPRetriever],
                                                engine: Engine, transport: str,
                                                loop: asyncio.AbstractEventLoop) -> None:
    base = retrievers[transport]
    r = fresh(base, k=3, unit="document", mode="sparse")
    assert all("#" not in i for i in ids(r.retrieve("rank fusion")))
    chunks = r.retrieve_with("rank fusion", unit="chunk", mode="hybrid")
    assert all("#c" in i for i in ids(chunks))
    assert set(chunks[0].node.metadata["scores"]) == {"dense", "sparse", "fused"}
    assert set(r.retrieve("rank fusion")[0].node.metadata["scores"]) == {"sparse"}
    german = r.retrieve_with("Energie", filter={"field": "lang", "op": "eq", "value": "de"})
    assert ids(german) == ["doc:d3"]
    blank = fresh(base, k=2, include_text=False).retrieve("rank fusion")
    assert [n.node.get_content() for n in blank] == ["", ""]
    assert text_node(blank[0]).start_char_idx == 0  # the span survives without the text
    assert len(base.retrieve_with("energy", similarity_top_k=7)) == 7
    budget = base.retrieve_with("energy", k=10, token_budget=60)
    packed = engine.retrieve("energy", k=10, token_budget=60).hits  # the engine's own packing
    assert ids(budget) == [h.id for h in packed] and 0 < len(budget) < 10
    assert sum(n.node.metadata["chunk_token_count"] for n in budget) <= 60
    # Session dedup: the second call in a session returns units not seen yet.
    session = fresh(base, k=2, session_id=f"li-{transport}")
    first, second = session.retrieve("energy"), session.retrieve("energy")
    assert not set(ids(first)) & set(ids(second))
    # strict=False lets the engine degrade instead of refusing an unknown mode.
    lax = loop.run_until_complete(base.aretrieve_with("rank fusion", mode="colbert",
                                                      strict=False, k=1))
    assert ids(lax) == ["doc:d5#c0"]


def test_similarity_top_k_alias_and_bad_arguments(engine: Engine) -> None:
    r = RCPRetriever.from_engine(engine, similarity_top_k=2)
    assert r.k == 2 == r.similarity_top_k
    r.similarity_top_k = 5
    assert r.k == 5 and len(r.retrieve("energy")) == 5
    assert RCPRetriever(engine).k == 4  # as the LangChain retriever
    bad_ks: list[Any] = [0, -1, True, "3"]
    for bad in bad_ks:
        with pytest.raises(ValueError, match="positive integer"):
            RCPRetriever(engine, k=bad)
    with pytest.raises(TypeError, match="same option"):
        RCPRetriever(engine, k=2, similarity_top_k=3)
    with pytest.raises(TypeError, match="same option"):
        r.retrieve_with("energy", k=2, similarity_top_k=3)
    with pytest.raises(TypeError, match="unknown RCPRetriever option"):
        RCPRetriever(engine, top_k=3)
    with pytest.raises(TypeError, match="unknown retrieve option"):
        r.retrieve_with("energy", cursor="x")
    with pytest.raises(ValueError, match="score_mode"):
        RCPRetriever(engine, score_mode="rank")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="source is required"):
        RCPRetriever()
    with pytest.raises(TypeError, match="http"):
        RCPRetriever("not-a-url")


# --- typed errors -------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["sync", "async"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_engine_errors_are_typed(retrievers: dict[str, RCPRetriever], transport: str, how: str,
                                 loop: asyncio.AbstractEventLoop) -> None:
    r = retrievers[transport]
    with pytest.raises(InvalidParams) as err:
        run(r, loop, how, "energy", token_budget=0)
    assert err.value.field == "tokenBudget"
    with pytest.raises(InvalidParams):
        run(r, loop, how, "energy", k=5, candidate_k=2)
    with pytest.raises(OptionUnsupported) as unsupported:
        run(r, loop, how, "energy", mode="colbert")
    assert unsupported.value.option == "mode"
    with pytest.raises(OptionUnsupported):
        run(r, loop, how, "energy", unit="triplet")
    with pytest.raises(BackendUnavailable):
        run(r, loop, how, "energy", index_version="v999")
    assert len(run(r, loop, how, "energy")) == 4  # still usable afterwards


# --- scores -------------------------------------------------------------------------------

def test_score_modes(retrievers: dict[str, RCPRetriever], engine: Engine) -> None:
    query = "reciprocal rank fusion"
    hits = wire_hits(engine, query)
    assert all(h.get("confidence") is not None for h in hits)
    by_conf = retrievers["http"].retrieve(query)
    by_score = fresh(retrievers["http"], score_mode="score").retrieve(query)
    assert [n.score for n in by_conf] == pytest.approx([h["confidence"] for h in hits])
    assert [n.score for n in by_score] == pytest.approx([h["score"] for h in hits])
    assert [n.score for n in by_conf] != pytest.approx([n.score for n in by_score])
    assert all(0.0 <= (n.score or 0) <= 1.0 for n in by_conf)


def test_scores_fall_back_without_confidence(tmp_path: Path) -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    with Engine(tmp_path / "fake", embedder=DeterministicFakeEmbedding(size=16)) as eng:
        eng.add_documents(DOCS)
        hits = wire_hits(eng, "vitamin", 3)
        assert hits and all("confidence" not in h for h in hits)
        for mode in ("confidence", "score"):
            r = RCPRetriever.from_engine(eng, k=3, score_mode=mode)  # type: ignore[arg-type]
            nodes = r.retrieve("vitamin")
            assert all(n.score is not None for n in nodes)
            assert [n.score for n in nodes] == pytest.approx([h["score"] for h in hits])
            r.close()


# --- nodes: text, spans, metadata, relationships --------------------------------------------

def test_char_offsets_match_the_source_text(retrievers: dict[str, RCPRetriever]) -> None:
    r = fresh(retrievers["stdio"], k=50, filter={"field": "doc_id", "op": "eq", "value": "long"})
    chunks = r.retrieve("notes on topics")
    assert len(chunks) >= 3 and {n.node.node_id for n in chunks} == {
        f"doc:long#c{i}" for i in range(len(chunks))}
    assert any((text_node(n).start_char_idx or 0) > 0 for n in chunks)
    for n in chunks:
        start, end = text_node(n).start_char_idx, text_node(n).end_char_idx
        assert start is not None and end is not None
        assert LONG_TEXT[start:end] == n.node.get_content()
        assert (start, end) == (n.node.metadata["chunk_start_char"],
                                n.node.metadata["chunk_end_char"])
    (doc,) = r.retrieve_with("notes on topics", unit="document")
    assert doc.node.get_content() == LONG_TEXT
    assert (text_node(doc).start_char_idx, text_node(doc).end_char_idx) == (0, len(LONG_TEXT))


def test_metadata_is_json_and_kept_out_of_the_llm_view(retrievers: dict[str, RCPRetriever]
                                                       ) -> None:
    (node,) = [text_node(n) for n in retrievers["http"].retrieve_with("vitamin D sclerosis", k=1)]
    meta = node.metadata
    assert json.loads(json.dumps(meta, allow_nan=False)) == meta
    assert meta["hit_id"] == node.node_id == "doc:d1#c0" and meta["unit"] == "chunk"
    assert meta["citation"]["start"] == 0 and meta["trust"]["level"] == "community"
    assert meta["tags"] == ["health", "neuro"] and meta["doc_id"] == "d1"
    llm_view = node.get_content(metadata_mode="llm")  # type: ignore[arg-type]
    embed_view = node.get_content(metadata_mode="embed")  # type: ignore[arg-type]
    for view in (llm_view, embed_view):
        assert "lang: en" in view and str(DOCS[0]["text"]) in view
        assert "citation" not in view and "scores" not in view and "hit_id" not in view
    assert set(node.excluded_llm_metadata_keys) == set(EXCLUDED_METADATA_KEYS)
    # A round trip through LlamaIndex's own serialisation keeps the node intact.
    again = type(node).from_json(node.to_json())
    assert again.metadata == meta and again.relationships == node.relationships


def test_relationships_of_plain_chunks_and_documents(retrievers: dict[str, RCPRetriever]
                                                     ) -> None:
    r = retrievers["inprocess"]
    chunk = text_node(r.retrieve_with("sourdough starter wild yeast", k=1)[0])
    assert chunk.node_id.startswith("doc:long#c")
    source = rel(chunk, NodeRelationship.SOURCE)
    parent = rel(chunk, NodeRelationship.PARENT)
    assert source.node_id == parent.node_id == "doc:long" == chunk.ref_doc_id
    assert source.node_type == ObjectType.DOCUMENT
    assert NodeRelationship.CHILD not in chunk.relationships
    # The id the relation names is the id that unit really has.
    doc = text_node(r.retrieve_with("sourdough starter wild yeast", k=1, unit="document")[0])
    assert doc.node_id == "doc:long"
    assert rel(doc, NodeRelationship.SOURCE).node_id == "doc:long"
    assert set(doc.relationships) == {NodeRelationship.SOURCE}  # no parent, no faked children


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_relationships_of_pdf_chunks_pages_and_document(retrievers: dict[str, RCPRetriever],
                                                        transport: str) -> None:
    r = fresh(retrievers[transport], k=1)
    doc_id = "doc:orchard.pdf"
    chunk = text_node(r.retrieve("drip lines water the pear rows")[0])
    assert chunk.node_id.startswith(doc_id + "#c") and chunk.metadata["page_range_start"] == 2
    assert rel(chunk, NodeRelationship.SOURCE).node_id == doc_id
    parent = rel(chunk, NodeRelationship.PARENT)
    assert parent.node_id == f"{doc_id}#p2" and parent.node_type == ObjectType.TEXT
    assert parent.metadata["page"] == 2

    page = text_node(r.retrieve_with("drip lines water the pear rows", unit="page")[0])
    assert page.node_id == parent.node_id and page.metadata["unit"] == "page"
    assert rel(page, NodeRelationship.PARENT).node_id == doc_id
    assert rel(page, NodeRelationship.SOURCE).node_id == doc_id
    assert "Drip lines water the pear rows" in page.get_content()

    doc = text_node(r.retrieve_with("drip lines water the pear rows", unit="document")[0])
    assert doc.node_id == doc_id and set(doc.relationships) == {NodeRelationship.SOURCE}
    # The page's span cuts its text out of the document; the chunk lies inside its page.
    assert page.start_char_idx is not None and page.end_char_idx is not None
    assert doc.get_content()[page.start_char_idx:page.end_char_idx] == page.get_content()
    assert chunk.start_char_idx is not None and chunk.end_char_idx is not None
    assert page.start_char_idx <= chunk.start_char_idx < chunk.end_char_idx <= page.end_char_idx
    assert doc.get_content()[chunk.start_char_idx:chunk.end_char_idx] == chunk.get_content()


def test_unit_ids_do_not_guess_foreign_ids() -> None:
    hit = {"id": "doc:a#c3", "score": 1.0, "chunk": {"docId": "a", "index": 3},
           "meta": {"page_range_start": 4, "page_range_end": 4}}
    assert unit_ids(hit) == ("doc:a", "doc:a#p4")
    assert unit_ids({**hit, "meta": {"page_range_start": 4, "page_range_end": 5}}) == (
        "doc:a", None)
    assert unit_ids({**hit, "id": "other-engine-42"}) == (None, None)
    assert unit_ids({"id": 7, "score": 1.0}) == (None, None)


# --- LlamaIndex machinery -------------------------------------------------------------------

def test_query_engine_with_postprocessors_and_mock_llm(retrievers: dict[str, RCPRetriever],
                                                       loop: asyncio.AbstractEventLoop) -> None:
    r = retrievers["stdio"]
    query = "reciprocal rank fusion"
    raw = r.retrieve(query)
    assert sum((n.score or 0) >= 0.5 for n in raw) == 1  # the cutoff below drops three
    qe = RetrieverQueryEngine.from_args(
        r, llm=MockLLM(), node_postprocessors=[
            SimilarityPostprocessor(similarity_cutoff=0.5),
            MetadataReplacementPostProcessor(target_metadata_key="window")])
    for response in (qe.query(query), loop.run_until_complete(qe.aquery(query))):
        assert [n.node.node_id for n in response.source_nodes] == ["doc:d5#c0"]
        (kept,) = response.source_nodes
        assert kept.score == raw[0].score and kept.node.get_content() == WINDOW
        assert kept.node.ref_doc_id == "doc:d5"
        assert WINDOW in str(response)  # MockLLM echoes the prompt it got: our context


class Recorder(BaseEventHandler):
    events: list[BaseEvent] = Field(default_factory=list)

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.events.append(event)


def test_instrumentation_events_fire(retrievers: dict[str, RCPRetriever],
                                     loop: asyncio.AbstractEventLoop) -> None:
    root = get_dispatcher()
    recorder = Recorder()
    root.add_event_handler(recorder)
    try:
        r = retrievers["http"]
        sync_nodes = r.retrieve("rank fusion")
        async_nodes = loop.run_until_complete(r.aretrieve_with("glaciers", k=2))
    finally:
        root.event_handlers.remove(recorder)
    got = [e for e in recorder.events if isinstance(e, (RetrievalStartEvent, RetrievalEndEvent))]
    assert [type(e) for e in got] == [RetrievalStartEvent, RetrievalEndEvent] * 2
    assert got[0].str_or_query_bundle == "rank fusion" and got[2].str_or_query_bundle == "glaciers"
    ends = [e for e in got if isinstance(e, RetrievalEndEvent)]
    assert [ids(e.nodes) for e in ends] == [ids(sync_nodes), ids(async_nodes)]
    assert len(async_nodes) == 2


# --- registry -------------------------------------------------------------------------------

def test_from_registry(stdio_dir: Path, http_url: str, engine: Engine, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop) -> None:
    monkeypatch.setenv("LI_TEST_TOKEN", TOKEN)
    registry = {"engines": [
        {"id": "local", "transport": "stdio", "command": default_stdio_command(stdio_dir)},
        {"id": "remote", "transport": "http", "url": http_url, "tokenEnv": "LI_TEST_TOKEN"}]}
    path = tmp_path / "rcp.json"
    path.write_text(json.dumps(registry))
    expected = [h["id"] for h in wire_hits(engine, "glaciers carve valleys", 3)]
    with RCPRetriever.from_registry(registry, "local", k=3, unit="document") as local:
        assert ids(local.retrieve("glaciers carve valleys"))[0] == "doc:long"

    async def remote_calls() -> tuple[list[NodeWithScore], list[NodeWithScore]]:
        async with RCPRetriever.from_registry(path, "remote", k=3) as remote:
            return (await asyncio.to_thread(remote.retrieve, "glaciers carve valleys"),
                    await remote.aretrieve("glaciers carve valleys"))

    sync_nodes, async_nodes = loop.run_until_complete(remote_calls())
    assert ids(sync_nodes) == ids(async_nodes) == expected
    with pytest.raises(KeyError, match="no engine 'nope'"):
        RCPRetriever.from_registry(registry, "nope")
    with pytest.raises(InvalidParams):
        RCPRetriever.from_registry({"engines": [{"id": "x", "transport": "smoke"}]}, "x")
    with pytest.raises(InvalidParams):
        RCPRetriever.from_registry(tmp_path / "missing.json", "x")


# --- tree-node hits (wire-shaped, as the engine's RAPTOR tree will return them) --------------

TREE_HIT: dict[str, Any] = {
    "id": "tree:2:ab12", "score": 0.8, "confidence": 0.7, "unit": "tree-node", "level": 2,
    "text": "Summary: glaciers carve valleys; volcanoes vent lava.",
    "provenance": {"leaves": ["doc:a#c0", "doc:a#c1", "doc:b#c0"]},
    "meta": {"parent_ids": ["tree:3:ff00", "tree:3:ee11"], "child_ids": ["tree:1:aa", "tree:1:bb"],
             "doc_ids": ["a", "b"]},
    "citation": {"source": "a"}}


def test_tree_node_hit_links_its_parent_and_children() -> None:
    from llama_index.core.schema import MetadataMode

    from rcp_agentic.integrations.llamaindex import hit_to_node

    scored = hit_to_node(TREE_HIT)
    node = scored.node
    assert scored.score == 0.7 and node.node_id == "tree:2:ab12"
    parent = node.parent_node
    assert parent is not None and parent.node_id == "tree:3:ff00"  # the first of its parents
    assert parent.metadata == {"unit": "tree-node", "level": 3}
    children = node.child_nodes or []
    assert [c.node_id for c in children] == ["tree:1:aa", "tree:1:bb"]
    assert all(c.metadata == {"unit": "tree-node", "level": 1} for c in children)
    # It covers two documents: no SOURCE, so no ref_doc_id to group it under one of them.
    assert NodeRelationship.SOURCE not in node.relationships and node.ref_doc_id is None
    assert unit_ids(TREE_HIT) == (None, None)
    assert node.metadata["doc_ids"] == ["a", "b"]
    assert node.metadata["provenance"]["leaves"] == ["doc:a#c0", "doc:a#c1", "doc:b#c0"]
    assert node.metadata["parent_ids"] == ["tree:3:ff00", "tree:3:ee11"]
    llm_view = node.get_content(metadata_mode=MetadataMode.LLM)
    assert "tree:3:ff00" not in llm_view and "tree:1:aa" not in llm_view
    again = TextNode.model_validate_json(node.model_dump_json())
    assert again.relationships == node.relationships


def test_tree_node_of_one_document_has_it_as_source() -> None:
    from rcp_agentic.integrations.llamaindex import hit_to_node

    hit = {**TREE_HIT, "id": "tree:1:aa", "level": 1,
           "provenance": {"leaves": ["doc:a#c0", "doc:a#c1"]},
           "meta": {"parent_ids": ["tree:2:ab12"], "child_ids": ["doc:a#c0", "doc:a#c1"],
                    "doc_ids": ["a"]}}
    node = hit_to_node(hit).node
    source = rel(node, NodeRelationship.SOURCE)
    assert source.node_id == "doc:a" and source.node_type == ObjectType.DOCUMENT
    assert node.ref_doc_id == "doc:a"
    assert rel(node, NodeRelationship.PARENT).node_id == "tree:2:ab12"
    # Level 1's children are the leaf chunks (level 0 of a tree is its chunks).
    assert [(c.node_id, c.metadata) for c in node.child_nodes or []] == [
        ("doc:a#c0", {"unit": "chunk"}), ("doc:a#c1", {"unit": "chunk"})]
    # Leaves outside this engine's id scheme: no SOURCE is guessed from meta.doc_ids.
    foreign = hit_to_node({**hit, "provenance": {"leaves": ["x-17", "x-18"]}}).node
    assert NodeRelationship.SOURCE not in foreign.relationships
    # No meta links (a tree built without them): no PARENT or CHILD either.
    bare = hit_to_node({**hit, "meta": {"doc_ids": ["a"]}}).node
    assert set(bare.relationships) == {NodeRelationship.SOURCE}


@pytest.mark.parametrize("unit", ["chunk", "tree-node"])
def test_leaf_chunk_in_a_tree_query_has_its_tree_parent(unit: str) -> None:
    from rcp_agentic.integrations.llamaindex import hit_to_node

    hit = {"id": "doc:a#c3", "score": 0.5, "unit": unit, "level": 0, "text": "leaf",
           "chunk": {"docId": "a", "index": 3},
           "meta": {"doc_id": "a", "page_range_start": 4, "page_range_end": 4,
                    "parent_ids": ["tree:1:aa", "tree:1:bb"]}}
    node = hit_to_node(hit).node
    assert unit_ids(hit) == ("doc:a", "doc:a#p4")
    assert rel(node, NodeRelationship.SOURCE).node_id == "doc:a"
    parent = rel(node, NodeRelationship.PARENT)
    assert parent.node_id == "tree:1:aa"  # the tree node, not the page
    assert parent.metadata == ({"unit": "tree-node", "level": 1} if unit == "tree-node" else {})
    assert NodeRelationship.CHILD not in node.relationships
    # Without tree links the same chunk keeps its page as parent.
    plain = hit_to_node({**hit, "meta": {"doc_id": "a", "page_range_start": 4,
                                         "page_range_end": 4}}).node
    assert rel(plain, NodeRelationship.PARENT).node_id == "doc:a#p4"


# --- the knowledge graph's units -----------------------------------------------------------------

@pytest.fixture(scope="module")
def graph_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    from test_graph_index import corpus

    with Engine(tmp_path_factory.mktemp("li-graph") / "e", embedder=embedder,
                build_graph=True) as eng:
        eng.add_documents(corpus())
        eng.wait_for_derived()
        yield eng


def test_graph_units_as_nodes(graph_engine: Engine) -> None:
    from llama_index.core.schema import MetadataMode

    question = "Where was the drummer of Toto born?"
    with RCPRetriever.from_engine(graph_engine, k=3) as retriever:
        for unit in ("node", "triplet", "path", "subgraph"):
            found = retriever.retrieve_with(question, unit=unit)
            assert found, unit
            for scored in found:
                node = scored.node
                md = node.metadata
                assert md["unit"] == unit and node.node_id.startswith(f"{unit}:")
                assert md["provenance"]["leaves"]
                # Attested by chunks, not made of them: no parent/child links invented.
                assert NodeRelationship.PARENT not in node.relationships
                assert NodeRelationship.CHILD not in node.relationships
                docs = md.get("doc_ids") or []
                source = node.relationships.get(NodeRelationship.SOURCE)
                if source is not None:  # only when all its evidence is one document's
                    assert isinstance(source, RelatedNodeInfo)
                    assert len(docs) == 1 and source.node_id == f"doc:{docs[0]}"
                # Provenance and citations stay out of what the LLM reads.
                llm_text = node.get_content(metadata_mode=MetadataMode.LLM)
                assert "provenance" not in llm_text and "citations" not in llm_text
        paths = retriever.retrieve_with(question, unit="path")
        prov = paths[0].node.metadata["provenance"]
        assert len(prov["path"]) >= 2 and len(prov["edges"]) == len(prov["path"]) - 1
        # Graph recall per call: the same chunks retrieve_with gives, scored by the graph too.
        chunks = retriever.retrieve_with(question, graph_recall=True)
        assert all("graph" in s.node.metadata["scores"] for s in chunks)
        assert "jeff-porcaro" in {s.node.metadata["doc_id"] for s in chunks}
        triplets = asyncio.run(retriever.aretrieve_with(question, unit="triplet", k=1))
        assert triplets[0].node.metadata["unit"] == "triplet"
