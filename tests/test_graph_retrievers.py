"""``graph_recall`` as a field of the LangChain and LlamaIndex retrievers, over real engines.

The engine indexes ``examples/wiki`` with ``build_graph`` on. The two-hop question "In
which city was the group behind the single Midnight Harbor founded?" needs the Velvet
Lanterns passage, which shares no word with it: a plain retriever misses it, one built with
``graph_recall=True`` finds it (and its hits carry the graph's score), sync and async, in
process, over a ``serve --stdio`` subprocess and over a ``serve --http`` subprocess. An
engine without a graph refuses the field before anything is sent (``OptionUnsupported``),
or degrades with ``strict=False``.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, serving_http

from rcp_agentic import Engine
from rcp_agentic.client.gating import switch_offered
from rcp_agentic.client.sync_client import default_stdio_command
from rcp_agentic.errors import OptionUnsupported
from rcp_agentic.federation import Federation
from rcp_agentic.integrations.common import HitSource
from rcp_agentic.integrations.langchain import RCPRetriever as LCRetriever
from rcp_agentic.integrations.llamaindex import RCPRetriever as LIRetriever

QUESTION = "In which city was the group behind the single Midnight Harbor founded?"
SINGLE, BRIDGE = "wiki/midnight-harbor.md", "wiki/velvet-lanterns.md"
WIRE = "x-rcp-agentic-graphRecall"
TOKEN = "graph-retrievers-token"


@pytest.fixture(scope="module")
def wiki_dir(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    """An engine directory over examples/wiki with a knowledge graph, closed again."""
    path = tmp_path_factory.mktemp("wiki-graph") / "e"
    with Engine(path, embedder=embedder, build_graph=True) as eng:
        eng.index_paths([REPO / "examples" / "wiki"])
        eng.wait_for_derived()
        assert "graph" in eng.capabilities()
    return path


@pytest.fixture(scope="module")
def wiki(wiki_dir: Path, embedder: Any) -> Iterator[Engine]:
    with Engine(wiki_dir, embedder=embedder) as eng:  # build_graph is in its config.json
        yield eng


def _copy(src: Path, factory: pytest.TempPathFactory, name: str) -> Path:
    dst = factory.mktemp(name) / "e"
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="module")
def stdio_command(wiki_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return default_stdio_command(_copy(wiki_dir, tmp_path_factory, "wiki-stdio"))


@pytest.fixture(scope="module")
def http_url(wiki_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``rcp-agentic serve --http`` subprocess over a copy of the wiki engine."""
    path = _copy(wiki_dir, tmp_path_factory, "wiki-http")
    with serving_http(path, TOKEN) as url:
        yield url


def lc_docs(docs: list[Any]) -> list[tuple[str, dict[str, float]]]:
    return [(d.metadata["doc_id"], d.metadata["scores"]) for d in docs]


def li_docs(nodes: list[Any]) -> list[tuple[str, dict[str, float]]]:
    return [(n.node.metadata["doc_id"], n.node.metadata["scores"]) for n in nodes]


def check(plain: list[tuple[str, dict[str, float]]],
          graph: list[tuple[str, dict[str, float]]]) -> None:
    """The plain list misses the bridge; the graph list has both hops, scored by the graph."""
    assert BRIDGE not in [d for d, _ in plain] and all("graph" not in s for _, s in plain)
    assert {SINGLE, BRIDGE} <= {d for d, _ in graph}
    assert all("graph" in s and "fused" in s for _, s in graph)


# --- in process ---------------------------------------------------------------------------------

def test_langchain_field_finds_the_second_hop(wiki: Engine) -> None:
    with LCRetriever.from_engine(wiki, k=2) as plain, \
            LCRetriever.from_engine(wiki, k=2, graph_recall=True) as graph:
        assert graph.graph_recall is True and plain.graph_recall is None
        check(lc_docs(plain.invoke(QUESTION)), lc_docs(graph.invoke(QUESTION)))
        # The field is the default of every call; a per-call False turns it off for that call.
        off = graph.invoke(QUESTION, graph_recall=False)
        assert [d.id for d in off] == [d.id for d in plain.invoke(QUESTION)]
        assert [d.id for d in graph.batch([QUESTION, QUESTION])[1]] == \
            [d.id for d in graph.invoke(QUESTION)]

        async def both() -> tuple[list[Any], list[Any]]:
            async with LCRetriever.from_engine(wiki, k=2) as aplain, \
                    LCRetriever.from_engine(wiki, k=2, graph_recall=True) as agraph:
                return await aplain.ainvoke(QUESTION), await agraph.ainvoke(QUESTION)

        aplain, agraph = asyncio.run(both())
        check(lc_docs(aplain), lc_docs(agraph))
        assert [d.id for d in agraph] == [d.id for d in graph.invoke(QUESTION)]


def test_llamaindex_field_finds_the_second_hop(wiki: Engine) -> None:
    with LIRetriever.from_engine(wiki, k=2) as plain, \
            LIRetriever.from_engine(wiki, k=2, graph_recall=True) as graph:
        assert graph.graph_recall is True and plain.graph_recall is None
        check(li_docs(plain.retrieve(QUESTION)), li_docs(graph.retrieve(QUESTION)))
        off = graph.retrieve_with(QUESTION, graph_recall=False)
        assert [n.node.node_id for n in off] == [n.node.node_id for n in plain.retrieve(QUESTION)]

        async def both() -> tuple[list[Any], list[Any]]:
            async with LIRetriever.from_engine(wiki, k=2) as aplain, \
                    LIRetriever.from_engine(wiki, k=2, graph_recall=True) as agraph:
                return await aplain.aretrieve(QUESTION), await agraph.aretrieve(QUESTION)

        aplain, agraph = asyncio.run(both())
        check(li_docs(aplain), li_docs(agraph))


@pytest.mark.parametrize("unit", ["document", "node"])
def test_the_field_composes_with_other_fields(wiki: Engine, unit: str) -> None:
    with LCRetriever.from_engine(wiki, k=3, unit=unit, graph_recall=True) as graph, \
            LCRetriever.from_engine(wiki, k=3, unit=unit) as plain:
        docs, base = graph.invoke(QUESTION), plain.invoke(QUESTION)
        assert docs and all(d.metadata["unit"] == unit for d in docs)
        assert all("graph" in d.metadata["scores"] for d in docs)
        assert [d.id for d in docs] != [d.id for d in base]
        if unit == "document":
            assert f"doc:{BRIDGE}" in [d.id for d in docs]
            assert f"doc:{BRIDGE}" not in [d.id for d in base]


# --- over RCP subprocesses -------------------------------------------------------------------

@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_the_field_over_rcp_servers(transport: str, stdio_command: list[str],
                                    http_url: str, wiki: Engine) -> None:
    def make(cls: Any, **fields: Any) -> Any:
        if transport == "stdio":
            return cls.from_stdio(stdio_command, k=2, **fields)
        return cls.from_url(http_url, token=TOKEN, k=2, **fields)

    with LIRetriever.from_engine(wiki, k=2, graph_recall=True) as local:
        want = [n.node.node_id for n in local.retrieve(QUESTION)]
    with make(LCRetriever) as plain, make(LCRetriever, graph_recall=True) as graph:
        check(lc_docs(plain.invoke(QUESTION)), lc_docs(graph.invoke(QUESTION)))
        assert [d.id for d in graph.invoke(QUESTION)] == want  # same engine, same answer
    with make(LIRetriever, graph_recall=True) as li:
        assert [n.node.node_id for n in li.retrieve(QUESTION)] == want

        async def run() -> list[Any]:
            async with make(LCRetriever, graph_recall=True) as agraph:
                docs = await agraph.ainvoke(QUESTION)
                assert agraph._hits._sync is None  # really async
                return docs

        agraph = asyncio.run(run())
        assert [d.id for d in agraph] == want and all("graph" in d.metadata["scores"]
                                                       for d in agraph)


# --- an engine without a graph -------------------------------------------------------------

def test_an_engine_without_a_graph_refuses_the_field(filled_engine: Engine) -> None:
    lc = LCRetriever.from_engine(filled_engine, k=2, graph_recall=True)
    li = LIRetriever.from_engine(filled_engine, k=2, graph_recall=True)
    with lc, li:
        with pytest.raises(OptionUnsupported) as err:
            lc.invoke("vitamin D")
        assert err.value.option == WIRE and err.value.code == -32005
        with pytest.raises(OptionUnsupported):
            asyncio.run(lc.ainvoke("vitamin D"))
        with pytest.raises(OptionUnsupported) as err:
            li.retrieve("vitamin D")
        assert err.value.option == WIRE
        # Per call False, or strict=False (the engine degrades, ignoring it): plain results.
        plain = [d.id for d in LCRetriever.from_engine(filled_engine, k=2).invoke("vitamin D")]
        assert [d.id for d in lc.invoke("vitamin D", graph_recall=False)] == plain
        lax = lc.invoke("vitamin D", strict=False)
        assert [d.id for d in lax] == plain and all("graph" not in d.metadata["scores"]
                                                    for d in lax)
        assert [n.node.node_id for n in li.retrieve_with("vitamin D", strict=False)] == plain


def test_the_field_over_a_federation(wiki: Engine, filled_engine: Engine) -> None:
    """Through a federation the engine with a graph uses it; the other gets strict=false."""
    with Federation({"wiki": wiki, "docs": filled_engine}) as fed:
        with LCRetriever.from_client(fed, k=4, graph_recall=True) as graph:
            docs = graph.invoke(QUESTION)
        wiki_docs = [d for d in docs if d.metadata["engine"] == "wiki"]
        assert BRIDGE in {d.metadata["doc_id"] for d in wiki_docs}
        assert all("graph" in d.metadata["scores"] for d in wiki_docs)
        result = fed.retrieve(QUESTION, k=4, graph_recall=True)
        assert result.usage is not None
        assert any("'docs'" in n and WIRE in n for n in result.usage.notes or [])
        # What the agentic loop sees of a federation: its effective (union) capabilities.
        caps = HitSource(fed).capabilities
        assert caps["x-rcp-agentic"]["graphRecall"] is True and "node" in caps["retrieve"]["units"]
        assert switch_offered(WIRE, caps) and "graph" in caps
