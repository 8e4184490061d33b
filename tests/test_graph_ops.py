"""``graph`` (§7.9) and ``memory/build`` / ``memory/recall`` (§7.17) through GraphOps on a real engine.

The corpus of test_graph_recall: local hits are anchored on the query's entities, neighbours
are bounded and validated, the later ops are refused clearly, the memory id is stable per
corpus version, and recall returns clues whose bridging fact leads to the passage the
question shares no word with.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pathlib import Path

import pytest
from test_graph_recall import BRIDGE, QUESTION, corpus

from rcp_agentic import Engine
from rcp_agentic.errors import CapabilityMissing, InvalidParams, NotFound, OptionUnsupported
from rcp_agentic.graph.stored import node_uid
from rcp_agentic.graph.memory import SessionMemory
from rcp_agentic.graph.ops import MAX_HOPS, MAX_SEEDS, GraphOps


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[GraphOps]:
    # The graph alone: the community ops are tested in test_graph_community_ops.py.
    engine = Engine(tmp_path_factory.mktemp("gops") / "e", embedder=embedder, build_graph=True,
                    graph_communities=False)
    engine.add_documents(corpus())
    assert engine.wait_for_derived()
    yield engine.graph_ops
    engine.close()


def test_local_hits_are_anchored_on_the_query_entities(ops: GraphOps) -> None:
    res = ops.graph("local", query=QUESTION, k=3)
    assert res.hits and all(h.unit == "chunk" for h in res.hits)
    docs = [h.chunk.doc_id for h in res.hits if h.chunk]
    assert BRIDGE in docs
    first = res.hits[0]
    assert first.provenance and node_uid("midnight harbor") in (first.provenance.nodes or [])
    wire = ops.graph_params({"op": "local", "query": QUESTION, "k": 3}).to_wire()
    assert [h["id"] for h in wire["hits"]] == [h.id for h in res.hits]
    assert ops.ops() == ["local", "neighbors"]


def test_local_with_a_session_does_not_repeat(ops: GraphOps) -> None:
    a = ops.graph("local", query=QUESTION, k=2, session_id="o1")
    b = ops.graph("local", query=QUESTION, k=2, session_id="o1")
    assert a.hits and not {h.id for h in a.hits} & {h.id for h in (b.hits or [])}


def test_neighbors_are_bounded_and_weighted(ops: GraphOps) -> None:
    seed = node_uid("velvet lantern")
    one = ops.graph("neighbors", seed_ids=[seed], hops=1, k=50)
    ids = [n.id for n in one.nodes or []]
    assert ids[0] == seed and node_uid("oskar brandvik") in ids
    assert one.edges and all(e.weight and e.weight > 0 for e in one.edges)
    assert all(e.src in ids and e.dst in ids for e in one.edges)
    two = ops.graph("neighbors", seed_ids=[seed], hops=2, k=50)
    assert set(ids) <= {n.id for n in two.nodes or []}
    small = ops.graph("neighbors", seed_ids=[seed], hops=2, k=2)
    assert len(small.nodes or []) <= 2
    wire = small.to_wire()
    assert set(wire) >= {"nodes", "edges"} and {"id", "score"} <= set(wire["nodes"][0])


@pytest.mark.parametrize("kwargs, field", [
    ({"seed_ids": ["node:nope"]}, "seedIds[0]"),
    ({"seed_ids": []}, "seedIds"),
    ({"seed_ids": "node:x"}, "seedIds"),
    ({"seed_ids": ["node:x"] * (MAX_SEEDS + 1)}, "seedIds"),
    ({"seed_ids": [node_uid("velvet lantern")], "hops": MAX_HOPS + 1}, "hops"),
    ({"seed_ids": [node_uid("velvet lantern")], "hops": 0}, "hops"),
    ({"seed_ids": [node_uid("velvet lantern")], "k": 0}, "k"),
    ({}, "seedIds"),
])
def test_neighbors_reject_bad_input(ops: GraphOps, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidParams) as err:
        ops.graph("neighbors", **kwargs)
    assert err.value.field == field


def test_ops_that_need_communities_are_refused(ops: GraphOps) -> None:
    for op in ("global", "drift", "communities"):
        with pytest.raises(OptionUnsupported) as err:
            ops.graph(op, query=QUESTION)
        assert err.value.option == "op"
    with pytest.raises(InvalidParams):
        ops.graph("sideways")
    with pytest.raises(InvalidParams):
        ops.graph("local")


def test_memory_build_is_stable_per_corpus_version(ops: GraphOps) -> None:
    built = ops.memory_build()
    assert built.memory_id == f"graph@v{ops.ctx.store.index_version()}" and (built.tokens or 0) > 0
    assert ops.memory_build(memory_id=built.memory_id).memory_id == built.memory_id
    with pytest.raises(NotFound):  # §12: an unknown memoryId is -32015
        ops.memory_build(memory_id="someone-else")
    with pytest.raises(InvalidParams):
        ops.memory_build(scope="galaxy")
    with pytest.raises(InvalidParams):
        ops.memory_build(scope="session")


def test_memory_recall_gives_bridging_clues(ops: GraphOps) -> None:
    res = ops.memory_recall(QUESTION, n=4)
    # n=4 asks for more than the tiny wiki holds: the query entity and its two bridges
    assert len(res.clues) == 3
    first = res.clues[0]
    assert first.seed_ids == [node_uid("midnight harbor")] and first.weight == 1.0
    bridges = [c for c in res.clues[1:] if node_uid("velvet lantern") in (c.seed_ids or [])]
    assert bridges and "Velvet Lantern" in (bridges[0].query or "")
    assert all(0 < (c.weight or 0) <= 1 for c in res.clues)
    # The bridging clue, fed back to retrieve, reaches the passage the question never names
    # (among the first 3: it ties in RRF with another passage for the second place, and a
    # tie falls by unit id).
    hits = ops.ctx.retriever.retrieve(bridges[0].query or "", k=3).hits
    assert BRIDGE in [h.chunk.doc_id for h in hits if h.chunk]
    assert res.hits and len(res.hits) <= 4
    with pytest.raises(InvalidParams):
        ops.memory_recall(QUESTION, n=0)
    with pytest.raises(NotFound):  # a memory id this engine never gave (§12: -32015)
        ops.memory_recall(QUESTION, memory_id="graph@banana")


def test_session_memory_steers_recall(ops: GraphOps) -> None:
    built = ops.memory_build([{"text": "Oskar Brandvik and Tromsø"}], scope="session",
                             session_id="m1")
    assert built.memory_id == "session:m1" and (built.tokens or 0) > 0
    plain = ops.memory_recall("Glass Orchard", n=5)
    steered = ops.memory_recall("Glass Orchard", n=5, session_id="m1")
    seeds = {s for c in steered.clues for s in c.seed_ids or []}
    assert node_uid("oskar brandvik") not in {s for c in plain.clues for s in c.seed_ids or []}
    assert seeds & {node_uid("oskar brandvik"), node_uid("tromsø"), node_uid("arctic circle"),
                    node_uid("velvet lantern")}


def test_session_memory_is_bounded() -> None:
    mem = SessionMemory(max_sessions=2, max_entities=3)
    assert mem.add("a", {"x": 1, "y": 1, "z": 1, "w": 1}) == 3
    assert set(mem.get("a")) == {"y", "z", "w"}
    mem.add("b", {"x": 1})
    mem.add("c", {"x": 1})
    assert mem.get("a") == {} and len(mem) == 2


def test_memory_needs_a_graph(tmp_path: Any, embedder: Any) -> None:
    with Engine(tmp_path / "plain", embedder=embedder) as plain:
        plain.add_documents(corpus()[:2])
        g = plain.graph_ops
        with pytest.raises(CapabilityMissing):
            g.memory_build()
        with pytest.raises(CapabilityMissing):
            g.graph("local", query=QUESTION)
        assert g.ops() == []


def test_memory_ids_unknown_or_collected(ops: GraphOps, tmp_path: Path) -> None:
    """Issue 21.10 (§12): an unknown memory is -32015, a collected snapshot -32010 (as a
    pinned indexVersion), a session memoryId that was never built -32015."""
    from rcp_agentic.errors import BackendUnavailable

    with pytest.raises(NotFound) as err:
        ops.memory_recall(QUESTION, memory_id="graph@v99999")
    assert err.value.code == -32015 and err.value.data["field"] == "memoryId"
    with pytest.raises(NotFound):
        ops.memory_recall(QUESTION, memory_id="session:never-built")
    ops.memory_build([{"text": QUESTION}], scope="session", session_id="built")
    assert ops.memory_recall(QUESTION, memory_id="session:built").clues
    # A version this engine has collected: one snapshot retained, three writes.
    small = Engine(tmp_path / "one-snapshot", embedder=ops.ctx.embedder.inner,
                   build_graph=True, snapshots_retained=1)
    try:
        for i in range(3):
            small.add_documents([{"id": f"d{i}", "text": f"Velvet Lanterns played in Bergen {i}."}])
        assert small.store.oldest_retained() > 1
        with pytest.raises(BackendUnavailable) as gone:
            small.memory_recall(QUESTION, memory_id="graph@v1")
        assert gone.value.code == -32010 and not gone.value.data.get("retryable", False)
    finally:
        small.close()
