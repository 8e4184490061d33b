"""The bridge hop of graph recall (``rcp_agentic.graph.bridge``).

A real engine with ``build_graph`` over a titled corpus where a three-hop question ("where
did the drummer of the group behind the single Midnight Harbor grow up") needs the passage
about the drummer, whom only the band's passage names: graph recall without the bridge
never ranks it, the bridge puts it at rank ``BRIDGE_SLOT`` and the band's town, which the
band's passage also names, after it. Filters scope it, sessions do not repeat it, its
confidence does not depend on ``k``. The pieces are checked on a graph built by hand, and the
ranking surgery on generated rankings (hypothesis).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rcp_agentic.graph.model import Entity, GraphData
from rcp_agentic.graph.ppr import GraphView
from test_graph_recall import DOCS as WIKI
from test_graph_recall import doc_id

from rcp_agentic import Engine
from rcp_agentic.agentic.loop import CorrectiveRetriever
from rcp_agentic.graph import bridge
from rcp_agentic.pipeline.candidates import Candidates
from rcp_agentic.pipeline.sources import ScoredList

QUESTION = "Where did the drummer of the group behind the single Midnight Harbor grow up?"
# The wiki of test_graph_recall, with three passages about drummers who "grew up".
DOCS = {
    **WIKI,
    "Tromso Youth Band": ("Tromso Youth Band was a group of drummers who grew up together. The "
                          "drummer of the group led it."),
    "Drum Corps": ("A drummer of a group keeps time; many drummers grew up playing in a school "
                   "band behind the singer."),
    "Harbor Drummers": ("Harbor Drummers is a single by a group whose drummer grew up by the "
                        "harbor at midnight."),
    "Bergen": "Bergen is a town on the west coast of Norway, between seven mountains.",
}
DRUMMER = "oskar-brandvik"
GRAPH = {"graph_recall": True}


@pytest.fixture(scope="module")
def eng(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    engine = Engine(tmp_path_factory.mktemp("bridge") / "e", embedder=embedder,
                    build_graph=True)
    engine.add_documents([{"id": doc_id(t), "title": t, "text": text,
                           "meta": {"tenant": "b" if t == "Glass Orchard" else "a"}}
                          for t, text in DOCS.items()])
    engine.wait_for_derived()
    yield engine
    engine.close()


@pytest.fixture()
def no_bridge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bridge, "follow_bridge", lambda query, cands: None)


def docs_of(res: Any) -> list[str]:
    return [h.chunk.doc_id for h in res.hits]


def test_the_question_never_names_the_drummer() -> None:
    assert "Brandvik" not in QUESTION and "Oskar" not in QUESTION


def test_without_the_bridge_the_drummer_is_not_found(eng: Engine, no_bridge: None) -> None:
    assert DRUMMER not in docs_of(eng.retrieve(QUESTION, k=8))
    assert DRUMMER not in docs_of(eng.retrieve(QUESTION, k=8, **GRAPH))


def test_the_bridge_brings_the_passage_the_first_hop_names(eng: Engine) -> None:
    res = eng.retrieve(QUESTION, k=5, **GRAPH)
    docs = docs_of(res)
    assert docs.index(DRUMMER) == bridge.BRIDGE_SLOT
    assert docs[:2] == ["midnight-harbor", "velvet-lanterns"]  # the first hops keep their ranks
    scores = [h.score for h in res.hits]
    assert scores == sorted(scores, reverse=True)
    assert f"graph recall: bridge passage {res.hits[bridge.BRIDGE_SLOT].id} at rank " \
           f"{bridge.BRIDGE_SLOT + 1}, through an entity the first hop names" in res.usage.notes
    # Deterministic, and the same through the wire name.
    again = eng.retrieve_params({"query": QUESTION, "k": 5, "x-rcp-agentic-graphRecall": True})
    assert [h.id for h in again.hits] == [h.id for h in res.hits]


def test_each_bridge_passage_is_noted_at_its_rank_and_scored(eng: Engine) -> None:
    # The first hop names two passages outside it: the drummer's and the town's.
    res = eng.retrieve(QUESTION, k=8, **GRAPH)
    notes = res.usage.notes or []
    noted = [n for n in notes if n.startswith("graph recall: bridge passage ")]
    assert len(noted) == 2 == bridge.BRIDGE_COUNT
    assert docs_of(res)[bridge.BRIDGE_SLOT:bridge.BRIDGE_SLOT + 2] == [DRUMMER, "bergen"]
    for rank, note in enumerate(noted, start=bridge.BRIDGE_SLOT + 1):
        assert note == (f"graph recall: bridge passage {res.hits[rank - 1].id} at rank {rank}, "
                        "through an entity the first hop names")
    # Only the bridge passages carry a bridge score, on the wire too.
    wire = res.to_wire()["hits"]
    bridged = [i for i, h in enumerate(wire) if "bridge" in h["scores"]]
    assert bridged == list(range(bridge.BRIDGE_SLOT, bridge.BRIDGE_SLOT + len(noted)))
    assert all(wire[i]["scores"]["bridge"] > 0 for i in bridged)
    assert "bridge" not in eng.retrieve(QUESTION, k=8).to_wire()["hits"][0]["scores"]


def test_the_loop_ranks_the_engines_bridge_before_its_doubtful_hits(eng: Engine) -> None:
    loop = CorrectiveRetriever(eng, k=5, max_steps=1)
    evidence = loop.run(QUESTION).evidence
    upper = loop.evaluator.upper
    at = next(i for i, h in enumerate(evidence) if h["chunk"]["docId"] == DRUMMER)
    assert "bridge" in evidence[at]["scores"] and evidence[at]["confidence"] < upper
    assert all(h["confidence"] >= upper or "bridge" in h["scores"] for h in evidence[:at])
    assert all(h["confidence"] < upper for h in evidence[at + 1:])


def test_a_short_page_keeps_the_first_hops(eng: Engine) -> None:
    res = eng.retrieve(QUESTION, k=bridge.BRIDGE_SLOT, **GRAPH)
    assert DRUMMER not in docs_of(res)


def test_the_bridge_hit_confidence_does_not_depend_on_k(eng: Engine) -> None:
    seen = set()
    for k in (4, 5, 8):
        hit = next(h for h in eng.retrieve(QUESTION, k=k, **GRAPH).hits
                   if h.chunk.doc_id == DRUMMER)
        seen.add(hit.confidence)
    assert len(seen) == 1


def test_a_filter_scopes_the_bridge(eng: Engine) -> None:
    flt = {"field": "tenant", "op": "eq", "value": "b"}
    res = eng.retrieve(QUESTION, k=8, filter=flt, **GRAPH)
    assert set(docs_of(res)) <= {"glass-orchard"}
    flt_not = {"field": "tenant", "op": "eq", "value": "a"}
    assert "glass-orchard" not in docs_of(eng.retrieve(QUESTION, k=10, filter=flt_not,
                                                       **GRAPH))


def test_a_session_does_not_get_the_bridge_twice(eng: Engine) -> None:
    first = eng.retrieve(QUESTION, k=5, session_id="bridge-s1", **GRAPH)
    second = eng.retrieve(QUESTION, k=5, session_id="bridge-s1", **GRAPH)
    assert DRUMMER in docs_of(first)
    assert not {h.id for h in first.hits} & {h.id for h in second.hits}


# --- the pieces, on a graph built by hand ---------------------------------------------------

def hand_graph() -> GraphView:
    """Passages r1 (about A, mentions B, C and the year 1974), r2 (about B), r3 (mentions C),
    r4 (mentions C)."""
    ents = {
        "a": Entity("a", "A", "title", mentions={"r1": 1.0}, about=("r1",)),
        "b": Entity("b", "B", "title", mentions={"r1": 1.0, "r2": 1.0}, about=("r2",)),
        "c": Entity("c", "C", "name", mentions={"r1": 1.0, "r3": 1.0, "r4": 1.0}),
        "1974": Entity("1974", "1974", "date", mentions={"r1": 1.0, "r3": 1.0}),
    }
    return GraphView(GraphData(entities=ents, chunk_docs={f"r{i}": f"d{i}" for i in range(1, 5)}))


def test_bridge_entities_leave_out_the_query_and_dates() -> None:
    view = hand_graph()
    got = {view.entity_keys[i]: w for i, w in bridge.bridge_entities(view, ["r1"], {"a": 1.0})
           .items()}
    assert set(got) == {"b", "c"}
    # Specificity: B is in two passages, C in three.
    assert got["b"] == pytest.approx(1 / 2) and got["c"] == pytest.approx(1 / 3)


def test_bridge_weights_fall_with_the_first_hops_rank() -> None:
    view = hand_graph()
    first = bridge.bridge_entities(view, ["r1", "r2"], {})
    later = bridge.bridge_entities(view, ["r2", "r1"], {})
    b = view.e_index["b"]
    c = view.e_index["c"]
    assert first[c] == pytest.approx(1 / 3) and later[c] == pytest.approx(1 / 3 / 2)
    assert first[b] == pytest.approx(1 / 2 + 1 / 2 / 2)


def test_bridge_candidates_take_each_passages_best_entity() -> None:
    view = hand_graph()
    weights = bridge.bridge_entities(view, ["r1"], {"a": 1.0})
    got = bridge.bridge_candidates(view, weights)
    assert got == pytest.approx({"r1": 1 / 2, "r2": 1 / 2, "r3": 1 / 3, "r4": 1 / 3})


def test_relevance_reads_the_cosine_and_a_sparse_retrieve_its_bm25(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cosine = ScoredList([(0, 0.8), (1, 0.5)], lambda pos: np.full(len(pos), -0.2))
    bm25 = ScoredList([(1, 10.0), (0, 5.0)], lambda pos: np.full(len(pos), 2.5))
    at = np.array([0, 1, 2])
    monkeypatch.setattr(bridge, "BRIDGE_SPARSE", 0.0)
    hybrid = Candidates({"dense": cosine, "sparse": bm25}, 10)
    assert bridge._relevance(hybrid, at) == pytest.approx([0.8, 0.5, 0.0])  # cosine clipped
    sparse = Candidates({"sparse": bm25}, 10)
    assert bridge._relevance(sparse, at) == pytest.approx([0.5, 1.0, 0.25])
    monkeypatch.setattr(bridge, "BRIDGE_SPARSE", 0.5)
    assert bridge._relevance(hybrid, at) == pytest.approx([1.05, 1.0, 0.125])


@given(scores=st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=0, max_size=12),
       picks=st.lists(st.integers(0, 30), min_size=0, max_size=3, unique=True))
def test_insert_bridge_keeps_the_ranking_in_score_order(scores: list[float],
                                                        picks: list[int]) -> None:
    ranked = sorted(enumerate(scores), key=lambda t: (-t[1], t[0]))
    cands = Candidates({}, 10)
    cands.ranked = list(ranked)
    before = {p for p, _s in ranked}
    placed = bridge.insert_bridge(cands, picks)
    after = [p for p, _s in cands.ranked]
    assert len(after) == len(set(after))
    got = [s for _p, s in cands.ranked]
    assert got == sorted(got, reverse=True)
    # Either every pick is placed, each at its slot, or the ranking is left as it was; the
    # other units keep their order.
    if len(before - set(picks)) > bridge.BRIDGE_SLOT:
        assert placed == picks
        assert after[bridge.BRIDGE_SLOT:bridge.BRIDGE_SLOT + len(picks)] == picks
        assert set(after) == before | set(picks)
        assert [p for p in after if p not in picks] == [p for p, _s in ranked if p not in picks]
    else:
        assert placed == [] and cands.ranked == ranked
