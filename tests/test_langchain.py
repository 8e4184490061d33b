"""The LangChain retriever over real engines: in process, a stdio subprocess and a uvicorn server.

LangChain's own standard retriever suite runs first, then our checks: sources agree,
every option reaches the engine and per-call overrides win (sync and async), hit
metadata, sessions, tracing callbacks, the retriever tool, an LCEL chain with
langchain-core's fake chat model, the registry, closing, and typed errors.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import DOCS, REPO, serving_http
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnablePassthrough
from langchain_core.tools import create_retriever_tool
from langchain_tests.integration_tests import RetrieversIntegrationTests
from pydantic import ValidationError

from rcp_agentic import Engine
from rcp_agentic.client import AsyncRCPClient, RCPClient
from rcp_agentic.client.registry import load_registry
from rcp_agentic.client.sync_client import default_stdio_command
from rcp_agentic.errors import InvalidParams, OptionUnsupported
from rcp_agentic.integrations.common import RETRIEVE_OPTIONS
from rcp_agentic.integrations.langchain import RCPRetriever

TOKEN = "lc-test-token"
QUERIES = ["what is reciprocal rank fusion?", "how do dense retrievers rank passages",
           "energy in plant cells", "Wissensgraphen und Relationen"]
LANG_EN = {"field": "lang", "op": "eq", "value": "en"}
LANG_DE = {"field": "lang", "op": "eq", "value": "de"}


def ids(docs: list[Document]) -> list[str | None]:
    return [d.id for d in docs]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # the RCP clients are asyncio clients


@pytest.fixture(scope="module")
def http_url(engine_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``rcp-agentic serve --http`` subprocess over a copy of ``engine_dir``."""
    path = tmp_path_factory.mktemp("lc-http") / "http-engine"
    shutil.copytree(engine_dir, path)
    with serving_http(path, TOKEN) as url:
        yield url


@pytest.fixture(scope="module")
def local(filled_engine: Engine) -> Iterator[RCPRetriever]:
    with RCPRetriever.from_engine(filled_engine, k=3) as retriever:
        yield retriever


@pytest.fixture(scope="module")
def registry_file(engine_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ``rcp.json`` naming a stdio engine over ``engine_dir``."""
    path = tmp_path_factory.mktemp("lc-registry") / "rcp.json"
    path.write_text(json.dumps({"engines": [
        {"id": "docs", "transport": "stdio", "cwd": str(REPO),
         "command": default_stdio_command(engine_dir)}]}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def stdio(registry_file: Path) -> Iterator[RCPRetriever]:
    """The module's sync stdio server, reached through the registry (one subprocess)."""
    with RCPRetriever.from_registry(registry_file, "docs", k=3) as retriever:
        retriever._hits.sync_client()  # spawn now: the server loads while the others start
        yield retriever


@pytest.fixture(scope="module")
def http(http_url: str) -> Iterator[RCPRetriever]:
    with RCPRetriever.from_url(http_url, token=TOKEN, k=3) as retriever:
        yield retriever


class EngineSpy:
    """Records the wire params every retrieve reaching a real engine carries."""

    def __init__(self, eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
        self.params: list[dict[str, Any]] = []
        inner = eng.retrieve_params

        def spy(params: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            self.params.append({k: v for k, v in params.items() if k != "_meta"})
            return inner(params, *args, **kwargs)

        monkeypatch.setattr(eng, "retrieve_params", spy)


@pytest.fixture()
def spy(filled_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> EngineSpy:
    return EngineSpy(filled_engine, monkeypatch)


class Recorder(BaseCallbackHandler):
    """A callback handler keeping what tracing would see of retriever and chat-model runs."""

    def __init__(self) -> None:
        self.starts: list[dict[str, Any]] = []
        self.ends: list[list[Document]] = []
        self.errors: list[BaseException] = []
        self.prompts: list[str] = []

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: Any,
                           parent_run_id: Any = None, tags: list[str] | None = None,
                           metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.starts.append({"query": query, "tags": tags, "metadata": dict(metadata or {}),
                            "parent": parent_run_id, "name": kwargs.get("name")})

    def on_retriever_end(self, documents: Any, **kwargs: Any) -> None:
        self.ends.append(list(documents))

    def on_retriever_error(self, error: BaseException, **kwargs: Any) -> None:
        self.errors.append(error)

    def on_chat_model_start(self, serialized: Any, messages: list[list[Any]],
                            **kwargs: Any) -> None:
        self.prompts.extend(str(m.content) for batch in messages for m in batch)


# --- LangChain's standard suite ---------------------------------------------------------------

@pytest.mark.anyio
class TestStandardRetriever(RetrieversIntegrationTests):
    """langchain-tests' RetrieversIntegrationTests over the module's real engine."""

    @pytest.fixture(autouse=True)
    def _engine(self, filled_engine: Engine) -> None:
        self.engine = filled_engine  # one engine for every retriever the suite constructs

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return RCPRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"source": self.engine}

    @property
    def retriever_query_example(self) -> str:
        return "how do retrievers rank documents?"


# --- construction ----------------------------------------------------------------------------

def test_fields(filled_engine: Engine) -> None:
    fields = RCPRetriever.model_fields
    for name in ("k", *RETRIEVE_OPTIONS):
        assert name in fields and fields[name].description, name
    with pytest.raises(ValidationError):
        RCPRetriever(source=filled_engine, k=0)
    with pytest.raises(ValidationError):
        RCPRetriever(source=filled_engine, mode="colbert")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        RCPRetriever(source="./not-a-url")
    retriever = RCPRetriever(source=filled_engine, tags=["mine"], metadata={"team": "ir"},
                             client_options={"timeout": 30, "client_name": "lc-test"})
    assert len(retriever.invoke(QUERIES[0])) == 4  # k defaults to 4
    assert retriever.tags == ["rcp", "mine"]
    assert retriever.metadata == {"rcp_engine": "engine", "rcp_transport": "in-process",
                                  "team": "ir"}


# --- sources ---------------------------------------------------------------------------------

def test_sources_agree(local: RCPRetriever, stdio: RCPRetriever, http: RCPRetriever,
                       engine_dir: Path) -> None:
    expected = {q: local.invoke(q) for q in QUERIES}
    assert all(len(docs) == 3 for docs in expected.values())
    for retriever in (stdio, http):
        for q, docs in expected.items():
            got = retriever.invoke(q)
            assert ids(got) == ids(docs), (retriever.metadata, q)
            assert [d.page_content for d in got] == [d.page_content for d in docs]

    async def main() -> dict[str, list[list[str | None]]]:
        # Fresh retrievers: their async clients are bound to this loop and closed with it.
        sources = {"local": RCPRetriever.from_engine(local.source, k=3),
                   "stdio": RCPRetriever.from_stdio(engine_dir=engine_dir, k=3),
                   "http": RCPRetriever.from_url(http.source, token=TOKEN, k=3)}
        out = {}
        for name, retriever in sources.items():
            async with retriever:
                out[name] = [ids(await retriever.ainvoke(q)) for q in QUERIES]
                assert retriever._hits._sync is None  # no sync client: really async
                client = retriever._hits.async_client()
            if name == "stdio":  # aclose() stopped the server subprocess it started
                assert client.transport.process.returncode == 0
        return out

    want = [ids(expected[q]) for q in QUERIES]
    assert asyncio.run(main()) == {"local": want, "stdio": want, "http": want}


def test_constructors_describe_their_source(stdio: RCPRetriever, http: RCPRetriever,
                                            http_url: str, engine_dir: Path,
                                            registry_file: Path) -> None:
    assert stdio.metadata == {"rcp_engine": "docs", "rcp_transport": "stdio"}
    assert stdio.source == load_registry(registry_file)["docs"]
    assert http.metadata == {"rcp_engine": http_url, "rcp_transport": "http"}
    assert http.token is not None and TOKEN not in repr(http)
    by_dir = RCPRetriever.from_stdio(engine_dir=engine_dir)
    assert by_dir.source == default_stdio_command(engine_dir)
    assert by_dir.metadata == {"rcp_engine": engine_dir.name, "rcp_transport": "stdio"}
    by_command = RCPRetriever.from_stdio(["rcp-agentic", "serve", "--stdio"], engine_name="mine")
    assert (by_command.metadata or {})["rcp_engine"] == "mine"
    # A parsed registry works too; an unknown id is a KeyError naming the known ones.
    parsed = json.loads(registry_file.read_text(encoding="utf-8"))
    assert RCPRetriever.from_registry(parsed, "docs").source == stdio.source
    with pytest.raises(KeyError, match="docs"):
        RCPRetriever.from_registry(parsed, "nope")


def test_given_clients_stay_open(filled_engine: Engine) -> None:
    with RCPClient.in_process(filled_engine) as client:
        retriever = RCPRetriever.from_client(client, k=1)
        assert retriever.metadata == {"rcp_engine": "rcp", "rcp_transport": "in-process"}
        first = retriever.invoke(QUERIES[0])
        retriever.close()
        assert ids(retriever.invoke(QUERIES[0])) == ids(first) == ["doc:d5#c0"]
        assert client.retrieve(QUERIES[0], 1).hits[0].id == "doc:d5#c0"

    async def main() -> list[str | None]:
        async with AsyncRCPClient.in_process(filled_engine) as aclient:
            retriever = RCPRetriever.from_client(aclient, k=1)
            with pytest.raises(TypeError):
                retriever.invoke(QUERIES[0])  # an async client serves only ainvoke
            docs = await retriever.ainvoke(QUERIES[0])
            await retriever.aclose()
            assert (await aclient.retrieve(QUERIES[0], 1)).hits  # still open
            return ids(docs)

    assert asyncio.run(main()) == ["doc:d5#c0"]


# --- documents -------------------------------------------------------------------------------

def test_documents_and_metadata(local: RCPRetriever) -> None:
    top = local.invoke(QUERIES[0])[0]
    assert top.id == "doc:d5#c0" and top.page_content == DOCS[4]["text"]
    meta = top.metadata
    assert meta["hit_id"] == "doc:d5#c0" and meta["unit"] == "chunk"
    assert isinstance(meta["score"], float) and 0.0 <= meta["confidence"] <= 1.0
    assert meta["citation"]["source"] == "d5" and meta["chunk"] == {"docId": "d5", "index": 0}
    assert meta["trust"]["level"] in ("trusted", "community", "untrusted")
    assert set(meta["scores"]) >= {"dense", "sparse"}
    # Document and static fields flattened to the top, where LangChain filters look.
    assert (meta["lang"], meta["year"], meta["tags"]) == ("en", 2009, ["ir", "fusion"])
    assert (meta["doc_id"], meta["chunk_index"], meta["chunk_token_count"]) == ("d5", 0, 16)
    bare = local.invoke(QUERIES[0], include_text=False)
    assert ids(bare) == ids(local.invoke(QUERIES[0]))
    assert [d.page_content for d in bare] == ["", "", ""]


# --- options ---------------------------------------------------------------------------------

def _index_version(eng: Engine) -> str:
    with RCPClient.in_process(eng) as client:
        return str(client.retrieve("x", 1).index_version)


def _wire(options: dict[str, Any]) -> dict[str, Any]:
    """What the engine should receive for snake_case ``options``.

    None is absent, and so is ``strict=True``: the client applies it (gating before
    sending) and the wire default is strict anyway; only ``strict=False`` travels.
    """
    names = {"token_budget": "tokenBudget", "session_id": "sessionId", "min_score": "minScore",
             "candidate_k": "candidateK", "include_text": "includeText",
             "index_version": "indexVersion", "graph_recall": "x-rcp-agentic-graphRecall"}
    nested = {"rrf_k": "rrfK", "half_life_days": "halfLifeDays"}
    return {names.get(n, n): ({nested.get(a, a): b for a, b in v.items()} if isinstance(v, dict)
                              and n != "filter" else v)
            for n, v in options.items() if v is not None and (n, v) != ("strict", True)}


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
def test_every_option_reaches_the_engine_and_overrides_win(
        filled_engine: Engine, spy: EngineSpy, use_async: bool) -> None:
    fields: dict[str, Any] = {
        "mode": "dense", "unit": "passage", "level": 0, "token_budget": 500, "filter": LANG_EN,
        "session_id": f"s-{uuid.uuid4()}", "mmr": {"lambda": 0.5}, "rerank": False,
        "recency": {"field": "modified", "half_life_days": 30}, "min_score": -1.0,
        "candidate_k": 50, "fusion": {"method": "rrf", "rrf_k": 60}, "include_text": True,
        "index_version": _index_version(filled_engine), "seed": 7, "strict": True,
        "graph_recall": False,  # no graph here; True: test_graph_retrievers.py
        "rewrite": False}  # no LLM here; a method: test_transform.py
    assert set(fields) == set(RETRIEVE_OPTIONS)  # a new option needs a case here
    overrides: dict[str, Any] = {
        "mode": "sparse", "unit": "document", "level": None, "token_budget": 300,
        "filter": LANG_DE, "session_id": f"s-{uuid.uuid4()}", "mmr": {"lambda": 0.9},
        "rerank": None, "recency": None, "min_score": -2.0, "candidate_k": 20,
        "fusion": {"method": "weighted", "weights": {"dense": 0.2, "sparse": 0.8}},
        "include_text": False, "index_version": None, "seed": 8, "strict": False,
        "graph_recall": None, "rewrite": None}
    retriever = RCPRetriever.from_engine(filled_engine, k=3, **fields)

    def run(query: str, **kw: Any) -> list[Document]:
        if not use_async:
            return retriever.invoke(query, **kw)

        async def main() -> list[Document]:
            async with retriever:
                return await retriever.ainvoke(query, **kw)
        return asyncio.run(main())

    plain = run("energy")
    assert spy.params[-1] == {"query": "energy", "k": 3, **_wire(fields)}
    assert plain and all(d.metadata["unit"] == "passage" and d.metadata["lang"] == "en"
                         and d.page_content for d in plain)

    over = run("energy", k=1, **overrides)
    assert spy.params[-1] == {"query": "energy", "k": 1, **_wire(overrides)}
    assert ids(over) == ["doc:d3"] and over[0].page_content == ""  # de-only, whole document
    assert retriever.unit == "passage" and retriever.k == 3  # overrides do not stick
    retriever.close()


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
def test_options_shape_results(local: RCPRetriever, use_async: bool) -> None:
    def run(**kw: Any) -> list[Document]:
        if not use_async:
            return local.invoke(QUERIES[0], **kw)

        async def main() -> list[Document]:
            retriever = RCPRetriever.from_engine(local.source, k=3)
            async with retriever:
                return await retriever.ainvoke(QUERIES[0], **kw)
        return asyncio.run(main())

    chunks = run()
    assert len(chunks) == 3 and chunks[0].id == "doc:d5#c0"
    whole = run(k=5, unit="document")
    assert len(whole) == 5 and whole[0].id == "doc:d5"
    assert all(d.id == f"doc:{d.metadata['doc_id']}" and d.metadata["unit"] == "document"
               for d in whole)
    budget = run(k=8, token_budget=40)
    assert 0 < len(budget) < 8
    assert sum(d.metadata["chunk_token_count"] for d in budget) <= 40
    assert [d.metadata["lang"] for d in run(k=8, filter=LANG_DE)] == ["de"]
    dense = run(k=8, mode="dense")
    assert len(dense) == 8 and all(set(d.metadata["scores"]) == {"dense"} for d in dense)
    assert all(set(d.metadata["scores"]) == {"sparse"} for d in run(mode="sparse"))
    floor = run(k=8, mode="dense", min_score=0.2)
    assert 0 < len(floor) < 8 and all(d.metadata["score"] >= 0.2 for d in floor)
    assert ids(floor) == ids(dense)[:len(floor)]


def test_batch_passes_overrides(local: RCPRetriever) -> None:
    got = local.batch(QUERIES[:2], k=1, unit="document")
    assert [ids(docs) for docs in got] == [["doc:d5"], ["doc:d4"]]
    # Runnable keywords that BaseRetriever.invoke leaves in kwargs are not retrieve options.
    assert ids(local.invoke(QUERIES[0], verbose=True, k=1)) == ["doc:d5#c0"]


# --- sessions --------------------------------------------------------------------------------

def test_session_never_repeats_a_hit(local: RCPRetriever, stdio: RCPRetriever,
                                     filled_engine: Engine) -> None:
    session = f"s-{uuid.uuid4()}"
    threaded = RCPRetriever.from_engine(filled_engine, k=3, session_id=session)
    first, second = ids(threaded.invoke(QUERIES[0])), ids(threaded.invoke(QUERIES[0]))
    assert len(first) == len(second) == 3 and not set(first) & set(second)
    assert ids(local.invoke(QUERIES[0])) == first  # without the session nothing is hidden
    # A per-call session, over a stdio server (the state lives in the server process).
    other = f"s-{uuid.uuid4()}"
    a = ids(stdio.invoke(QUERIES[1], session_id=other))
    b = ids(stdio.invoke(QUERIES[1], session_id=other))
    assert len(a) == len(b) == 3 and not set(a) & set(b)

    async def main() -> tuple[list[str | None], list[str | None]]:
        async with RCPRetriever.from_engine(filled_engine, k=3) as retriever:
            sid = f"s-{uuid.uuid4()}"
            return (ids(await retriever.ainvoke(QUERIES[2], session_id=sid)),
                    ids(await retriever.ainvoke(QUERIES[2], session_id=sid)))

    c, d = asyncio.run(main())
    assert len(c) == len(d) == 3 and not set(c) & set(d)


# --- tracing ---------------------------------------------------------------------------------

def test_callbacks_see_tracing_metadata(local: RCPRetriever) -> None:
    recorder = Recorder()
    docs = local.invoke(QUERIES[0], {"callbacks": [recorder]}, unit="passage", k=2)
    start = recorder.starts[-1]
    assert start["query"] == QUERIES[0] and start["name"] == "RCPRetriever"
    assert "rcp" in start["tags"]
    meta = start["metadata"]
    assert meta["ls_retriever_name"] == "rcp"
    assert (meta["rcp_engine"], meta["rcp_transport"]) == ("engine", "in-process")
    assert (meta["rcp_k"], meta["rcp_unit"]) == (2, "passage") and "rcp_mode" not in meta
    assert ids(recorder.ends[-1]) == ids(docs) and len(docs) == 2

    async def main() -> None:
        async with RCPRetriever.from_engine(local.source, k=3, mode="dense",
                                            session_id="trace-me") as retriever:
            await retriever.ainvoke(QUERIES[1], {"callbacks": [recorder]})
            with pytest.raises(InvalidParams):
                await retriever.ainvoke(QUERIES[1], {"callbacks": [recorder]},
                                        filter={"field": "nope", "op": "eq", "value": 1})

    asyncio.run(main())
    meta = recorder.starts[-2]["metadata"]
    assert (meta["rcp_k"], meta["rcp_mode"], meta["rcp_session_id"]) == (3, "dense", "trace-me")
    assert len(recorder.ends[-1]) == 3
    assert len(recorder.errors) == 1 and isinstance(recorder.errors[0], InvalidParams)


# --- LangChain building blocks ---------------------------------------------------------------

def test_retriever_tool(local: RCPRetriever) -> None:
    tool = create_retriever_tool(local, "search_corpus", "Search the research notes.")
    out = tool.invoke({"query": QUERIES[0]})
    assert isinstance(out, str) and out.startswith(str(DOCS[4]["text"]))
    assert out.split("\n\n") == [d.page_content for d in local.invoke(QUERIES[0])]
    assert asyncio.run(tool.ainvoke({"query": QUERIES[0]})) == out

    artifact_tool = create_retriever_tool(local, "search_corpus", "Search.",
                                          response_format="content_and_artifact")
    message = artifact_tool.invoke({"type": "tool_call", "id": "call-1", "name": "search_corpus",
                                    "args": {"query": QUERIES[0]}})
    assert isinstance(message, ToolMessage) and message.content == out
    assert ids(message.artifact) == ids(local.invoke(QUERIES[0]))


def test_lcel_chain_with_fake_llm(local: RCPRetriever) -> None:
    def format_docs(docs: list[Document]) -> str:
        return "\n".join(f"[{d.id}] {d.page_content}" for d in docs)

    prompt = ChatPromptTemplate.from_messages([
        ("system", "Answer only from this context:\n{context}"), ("human", "{question}")])
    llm = FakeListChatModel(responses=["RRF fuses rankings by rank position.", "again"])
    chain = ({"context": local | format_docs, "question": RunnablePassthrough()}
             | prompt | llm | StrOutputParser())
    recorder = Recorder()
    answer = chain.invoke(QUERIES[0], {"callbacks": [recorder]})
    assert answer == "RRF fuses rankings by rank position."
    system, human = recorder.prompts
    assert f"[doc:d5#c0] {DOCS[4]['text']}" in system and human == QUERIES[0]
    assert recorder.starts[0]["parent"] is not None  # traced as a step of the chain
    assert asyncio.run(chain.ainvoke(QUERIES[0])) == "again"


# --- errors ----------------------------------------------------------------------------------

def test_typed_errors(local: RCPRetriever, stdio: RCPRetriever, http: RCPRetriever) -> None:
    for retriever in (local, stdio, http):
        with pytest.raises(InvalidParams) as err:
            retriever.invoke("x", filter={"field": "nope", "op": "eq", "value": 1})
        assert err.value.field == "filter.nope"
        with pytest.raises(InvalidParams) as err:
            retriever.invoke("x", filter={"field": "year", "op": "gt", "value": "recent"})
        assert err.value.field == "filter.year"
        with pytest.raises(OptionUnsupported):
            retriever.invoke("x", unit="triplet")
    # strict=False lets the engine degrade instead, noting it.
    assert {d.metadata["unit"] for d in local.invoke("x", unit="triplet", strict=False)} == {
        "chunk"}
    with pytest.raises(TypeError, match="top_k"):
        local.invoke("x", top_k=3)

    async def main() -> None:
        async with RCPRetriever.from_engine(local.source, unit="triplet") as retriever:
            with pytest.raises(OptionUnsupported):
                await retriever.ainvoke("x")
            with pytest.raises(InvalidParams) as err:
                await retriever.ainvoke("x", unit=None, filter={"field": "nope", "op": "eq",
                                                                "value": 1})
            assert err.value.field == "filter.nope"

    asyncio.run(main())


# --- closing (last: it stops the module's stdio server) ---------------------------------------

def test_close_stops_the_server_it_started(stdio: RCPRetriever, local: RCPRetriever) -> None:
    assert ids(stdio.invoke(QUERIES[0])) == ids(local.invoke(QUERIES[0]))
    process = stdio._hits.sync_client().transport.process
    assert process.poll() is None
    stdio.close()  # EOF on the server's stdin: it shuts down cleanly
    assert process.wait(timeout=30) == 0


# --- tree-node hits (wire-shaped, as the engine's RAPTOR tree will return them) --------------

def test_tree_node_links_and_leaves_reach_document_metadata() -> None:
    from rcp_agentic.integrations.langchain import hit_to_document

    hit = {"id": "tree:2:ab12", "score": 0.8, "confidence": 0.7, "unit": "tree-node",
           "level": 2, "text": "Summary of two documents.",
           "provenance": {"leaves": ["doc:a#c0", "doc:a#c1", "doc:b#c0"]},
           "meta": {"parent_ids": ["tree:3:ff00"], "child_ids": ["tree:1:aa", "tree:1:bb"],
                    "doc_ids": ["a", "b"]},
           "citation": {"source": "a"}}
    doc = hit_to_document(hit)
    assert doc.id == "tree:2:ab12" and doc.page_content == "Summary of two documents."
    md = doc.metadata
    assert (md["hit_id"], md["unit"], md["level"]) == ("tree:2:ab12", "tree-node", 2)
    assert md["provenance"] == {"leaves": ["doc:a#c0", "doc:a#c1", "doc:b#c0"]}
    assert md["parent_ids"] == ["tree:3:ff00"]
    assert md["child_ids"] == ["tree:1:aa", "tree:1:bb"]
    assert md["doc_ids"] == ["a", "b"] and "chunk" not in md
    # A leaf of the collapsed tree: level 0 is kept, and its tree parents travel too.
    leaf = hit_to_document({"id": "doc:a#c0", "score": 0.5, "unit": "tree-node", "level": 0,
                            "text": "leaf", "chunk": {"docId": "a", "index": 0},
                            "meta": {"doc_id": "a", "parent_ids": ["tree:1:aa"]}})
    assert leaf.metadata["level"] == 0 and leaf.metadata["parent_ids"] == ["tree:1:aa"]
    assert leaf.metadata["chunk"] == {"docId": "a", "index": 0}


def test_unit_field_is_the_wire_literal(filled_engine: Engine) -> None:
    RCPRetriever(source=filled_engine, unit="tree-node", level=1)
    with pytest.raises(ValidationError):
        RCPRetriever(source=filled_engine, unit="sentence")  # type: ignore[arg-type]


# --- the knowledge graph's units and graph recall ----------------------------------------------

@pytest.fixture(scope="module")
def graph_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    from test_graph_index import corpus

    with Engine(tmp_path_factory.mktemp("lc-graph") / "e", embedder=embedder,
                build_graph=True) as eng:
        eng.add_documents(corpus())
        eng.wait_for_derived()
        yield eng


GRAPH_QUESTION = "Where was the drummer of Toto born?"


def test_graph_units_become_documents_with_their_provenance(graph_engine: Engine) -> None:
    with RCPRetriever.from_engine(graph_engine, k=2, unit="path") as retriever:
        docs = retriever.invoke(GRAPH_QUESTION)
        assert docs and all(d.metadata["unit"] == "path" for d in docs)
        prov = docs[0].metadata["provenance"]
        assert len(prov["path"]) >= 2 and all(n.startswith("node:") for n in prov["path"])
        assert [e["src"] for e in prov["edges"]] == prov["path"][:-1]  # hop by hop
        assert all(e["weight"] > 0 for e in prov["edges"]) and prov["leaves"]
        assert docs[0].page_content.count("→") == len(prov["edges"])
        # Per call: another graph unit, and the node's name leads its text.
        nodes = retriever.invoke(GRAPH_QUESTION, unit="node", k=1)
        assert nodes[0].metadata["unit"] == "node" and nodes[0].id.startswith("node:")
        assert nodes[0].metadata["provenance"]["leaves"]


def test_graph_recall_per_call_in_both_invoke_and_ainvoke(graph_engine: Engine) -> None:
    with RCPRetriever.from_engine(graph_engine, k=3) as retriever:
        plain = retriever.invoke(GRAPH_QUESTION)
        graph = retriever.invoke(GRAPH_QUESTION, graph_recall=True)
        agraph = asyncio.run(retriever.ainvoke(GRAPH_QUESTION, graph_recall=True))
        assert all("graph" not in d.metadata["scores"] for d in plain)
        assert all("graph" in d.metadata["scores"] for d in graph)
        assert [d.id for d in agraph] == [d.id for d in graph]
        assert "jeff-porcaro" in {d.metadata["doc_id"] for d in graph}


def test_graph_recall_is_refused_where_not_advertised(filled_engine: Engine) -> None:
    with RCPRetriever.from_engine(filled_engine, k=2) as retriever:
        with pytest.raises(OptionUnsupported) as err:
            retriever.invoke("vitamin D", graph_recall=True)
        assert err.value.option == "x-rcp-agentic-graphRecall"
