"""The clients' ``graph``, ``memory_build`` and ``memory_recall``, sync and async: gated on the
advertised capabilities before any I/O, clamped to the advertised limits, retried only when
harmless, and their results the typed results the engine returns.

A real engine with ``build_graph`` over the wiki corpus of ``test_graph_index``, reached
in process through a dispatcher whose frames are recorded (what the client actually sent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from test_graph_index import corpus

from rcp_agentic import Engine
from rcp_agentic.client import AsyncRCPClient, RCPClient
from rcp_agentic.client import results
from rcp_agentic.client.gating import check_method, check_options, clamp
from rcp_agentic.client.retry import repeatable
from rcp_agentic.errors import CapabilityMissing, InvalidParams, OptionUnsupported
from rcp_agentic import wire
from rcp_agentic.protocol.dispatcher import Dispatcher
from rcp_agentic.wire import GraphResult, MemoryBuildResult, MemoryRecallResult

QUESTION = "Which album contains the song Africa?"


@pytest.fixture(scope="module")
def eng(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    # The graph alone: the community ops are tested in test_graph_community_ops.py.
    with Engine(tmp_path_factory.mktemp("graph-client") / "e", embedder=embedder,
                build_graph=True, graph_communities=False) as engine:
        engine.add_documents(corpus())
        engine.wait_for_derived()
        yield engine


class Recorder:
    """A dispatcher over ``eng`` that keeps every frame a client sends it."""

    def __init__(self, eng: Engine) -> None:
        self.dispatcher = Dispatcher(eng)
        self.frames: list[dict[str, Any]] = []
        inner = self.dispatcher.handle

        def handle(message: Any, *args: Any, **kwargs: Any) -> Any:
            self.frames.extend(message if isinstance(message, list) else [message])
            return inner(message, *args, **kwargs)

        self.dispatcher.handle = handle  # type: ignore[method-assign]

    def sent(self, method: str) -> list[dict[str, Any]]:
        """The params of each ``method`` frame, without the ``_meta`` the client adds."""
        return [{k: v for k, v in f["params"].items() if k != "_meta"} for f in self.frames
                if f.get("method") == method]


def test_sync_client_graph_and_memory(eng: Engine) -> None:
    rec = Recorder(eng)
    with RCPClient.in_process(rec.dispatcher) as client:
        local = client.graph("local", QUESTION, k=3)
        assert isinstance(local, GraphResult) and local.hits  # what Engine.graph returns
        assert [h.unit for h in local.hits] == ["chunk"] * 3
        assert "toto-iv" in {h.chunk.doc_id for h in local.hits if h.chunk}
        # ... and what it sent: to_wire() is the wire result (call() returns it as received)
        raw = client.call("graph", {"op": "local", "query": QUESTION, "k": 3})
        wire = local.to_wire()
        for result in (raw, wire):
            result["usage"].pop("latencyMs")
        assert wire == raw
        assert local.hits[0].provenance and local.hits[0].provenance.nodes
        seeds = local.hits[0].provenance.nodes[:2]
        near = client.graph("neighbors", seed_ids=seeds, hops=1, k=4)
        assert near.nodes is not None and near.edges is not None
        assert {n.id for n in near.nodes} >= set(seeds) and len(near.nodes) <= 4
        assert all(set(e.to_wire()) == {"src", "dst", "weight"} for e in near.edges)
        assert rec.sent("graph")[-1] == {"op": "neighbors", "seedIds": seeds, "hops": 1, "k": 4}

        built = client.memory_build()
        assert isinstance(built, MemoryBuildResult)
        recalled = client.memory_recall(QUESTION, memory_id=built.memory_id, n=2)
        assert isinstance(recalled, MemoryRecallResult)
        # n=2: the query's entity, then one bridging fact joining it to a neighbour
        assert [len(c.seed_ids or []) for c in recalled.clues] == [1, 2]
        assert rec.sent("memory/recall")[-1] == {"query": QUESTION,
                                                 "memoryId": built.memory_id, "n": 2}
        session = client.memory_build([{"text": "Columbia Records released Toto IV"}],
                                      scope="session", session_id="s-1")
        assert session.memory_id == "session:s-1"
        assert rec.sent("memory/build")[-1] == {
            "documents": [{"text": "Columbia Records released Toto IV"}], "scope": "session",
            "sessionId": "s-1"}
        # Graph recall through retrieve, under its vendor wire name.
        hits = client.retrieve(QUESTION, k=2, graph_recall=True).hits
        assert all("graph" in (h.scores or {}) for h in hits)
        assert rec.sent("retrieve")[-1]["x-rcp-agentic-graphRecall"] is True


def test_sync_client_gates_and_clamps_before_sending(eng: Engine) -> None:
    rec = Recorder(eng)
    with RCPClient.in_process(rec.dispatcher) as client:
        caps = client.initialize()["capabilities"]
        limits = caps["x-rcp-agentic"]["limits"]
        for op in ("global", "drift", "communities", "nonsense"):
            with pytest.raises(OptionUnsupported) as err:
                client.graph(op, "x")
            assert err.value.option == "op"
        with pytest.raises(OptionUnsupported):
            client.memory_build(scope="forever")
        assert rec.sent("graph") == [] and rec.sent("memory/build") == []
        # Above an advertised bound: clamped by the client, as the server would.
        seed = client.graph("local", QUESTION, k=10 ** 6).to_wire()["hits"][0]["provenance"][
            "nodes"][0]
        assert rec.sent("graph")[-1]["k"] == caps["retrieve"]["maxK"]
        client.graph("neighbors", seed_ids=[seed], hops=99, k=10 ** 6)
        assert rec.sent("graph")[-1] == {"op": "neighbors", "seedIds": [seed],
                                         "hops": limits["maxGraphHops"],
                                         "k": limits["maxGraphNodes"]}
        client.memory_recall(QUESTION, n=10 ** 6)
        assert rec.sent("memory/recall")[-1]["n"] == limits["maxClues"]
        # Malformed values are the server's to refuse, with the field named.
        with pytest.raises(InvalidParams) as bad:
            client.graph("local", "x", k=0)
        assert bad.value.field == "k"


def test_gating_rules_on_capabilities_alone() -> None:
    none: dict[str, Any] = {"retrieve": {"maxK": 50}}
    for method in ("graph", "memory/build", "memory/recall"):
        with pytest.raises(CapabilityMissing):
            check_method(method, none)
    caps = {"graph": {"ops": ["neighbors"]}, "memory": {"scopes": ["global"]},
            "retrieve": {"maxK": 50},
            "x-rcp-agentic": {"limits": {"maxGraphHops": 2, "maxClues": 7}}}
    check_method("graph", caps)
    check_options("graph", {"op": "neighbors"}, caps)
    with pytest.raises(OptionUnsupported):
        check_options("graph", {"op": "local"}, caps)
    with pytest.raises(OptionUnsupported):
        check_options("memory/build", {"scope": "session"}, caps)
    with pytest.raises(OptionUnsupported):  # graph recall, unadvertised
        check_options("retrieve", {"query": "q", "x-rcp-agentic-graphRecall": True}, caps)
    check_options("retrieve", {"query": "q", "x-rcp-agentic-graphRecall": False}, caps)
    check_options("retrieve", {"query": "q", "x-rcp-agentic-graphRecall": True},
                  {"x-rcp-agentic": {"graphRecall": True}})
    with pytest.raises(OptionUnsupported):  # advertised somewhere else: not advertised
        check_options("retrieve", {"query": "q", "x-rcp-agentic-graphRecall": True},
                      {"retrieve": {"x-rcp-agentic-graphRecall": True}})
    assert clamp("graph", {"op": "local", "k": 80}, caps)["k"] == 50
    assert clamp("graph", {"op": "neighbors", "k": 80, "hops": 5}, caps) == {
        "op": "neighbors", "k": 80, "hops": 2}  # no node limit advertised: k as given
    assert clamp("memory/recall", {"query": "q", "n": 9}, caps)["n"] == 7
    assert clamp("memory/recall", {"query": "q", "n": True}, caps)["n"] is True  # not a count


def test_memory_build_is_retried_only_when_harmless() -> None:
    assert repeatable("memory/build", {})  # a rebuild over the index
    assert repeatable("memory/build", {"scope": "session", "sessionId": "s"})
    assert repeatable("memory/build", {"documents": [{"id": "a", "text": "x"}]})
    assert not repeatable("memory/build", {"documents": [{"text": "x"}]})
    assert repeatable("graph", {"op": "local"}) and repeatable("memory/recall", {"query": "q"})


def test_results_are_typed_as_the_engine_types_them() -> None:
    for method in ("retrieve", "rerank", "graph", "memory_build", "memory_recall"):
        engine_returns = getattr(wire, getattr(Engine, method).__annotations__["return"])
        for cls in (RCPClient, AsyncRCPClient):
            assert get_type_hints(getattr(cls, method))["return"] is engine_returns, (cls, method)
    for cls in (RCPClient, AsyncRCPClient):  # the engine's Transformed, as the wire has it
        assert get_type_hints(cls.transform)["return"] is results.TransformResult
    assert results.GraphResult is GraphResult


def test_async_client_graph_and_memory(eng: Engine) -> None:
    rec = Recorder(eng)

    async def main() -> None:
        async with AsyncRCPClient.in_process(rec.dispatcher) as client:
            local = await client.graph("local", QUESTION, k=2)
            assert isinstance(local, GraphResult) and local.hits and local.hits[0].provenance
            seed = (local.hits[0].provenance.nodes or [])[0]
            near, clues = await asyncio.gather(
                client.graph("neighbors", seed_ids=[seed], hops=2, k=6),
                client.memory_recall(QUESTION, n=3))
            assert near.nodes and near.nodes[0].id == seed and len(near.nodes) <= 6
            assert clues.clues and clues.clues[0].seed_ids
            assert (await client.memory_build()).memory_id.startswith("graph@v")
            with pytest.raises(OptionUnsupported):
                await client.graph("communities")
            with pytest.raises(InvalidParams) as bad:
                await client.graph("neighbors", seed_ids=[])
            assert bad.value.field == "seedIds"

    asyncio.run(main())
    assert [p["op"] for p in rec.sent("graph")] == ["local", "neighbors", "neighbors"]


def test_async_client_never_calls_an_unadvertised_graph(tmp_path: Path, embedder: Any) -> None:
    with Engine(tmp_path / "e", embedder=embedder) as plain:
        plain.add_documents(corpus(["Toto (band)"]))
        rec = Recorder(plain)

        async def main() -> None:
            async with AsyncRCPClient.in_process(rec.dispatcher) as client:
                with pytest.raises(CapabilityMissing):
                    await client.graph("neighbors", seed_ids=["node:x"])
                with pytest.raises(CapabilityMissing):
                    await client.memory_build()
                with pytest.raises(OptionUnsupported):
                    await client.retrieve("Toto", graph_recall=True)

        asyncio.run(main())
        assert {f["method"] for f in rec.frames} == {"initialize"}
