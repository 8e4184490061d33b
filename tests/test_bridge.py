"""The bridge hop of graph recall (``rcp_agentic.pipeline.bridge``).

A real engine with ``build_graph`` over a titled corpus where a three-hop question ("where
did the drummer of the group behind the single Midnight Harbor grow up") needs the passage
about the drummer, whom only the band's passage names: graph recall without the bridge
never ranks it, the bridge puts it at rank ``BRIDGE_SLOT``. Filters scope it, sessions do
not repeat it, its confidence does not depend on ``k``. The pieces are checked on a graph
built by hand, and the ranking surgery on generated rankings (hypothesis).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rcp_agentic.graph.model import Entity, GraphData
from rcp_agentic.graph.ppr import GraphView
from test_graph_recall import DOCS as WIKI
from test_graph_recall import doc_id

from rcp_agentic import Engine
from rcp_agentic.pipeline import bridge, retriever
from rcp_agentic.pipeline.candidates import Candidates

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
    monkeypatch.setattr(retriever, "follow_bridge", lambda query, cands: None)


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


@given(scores=st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=0, max_size=12),
       pick=st.integers(0, 30))
def test_insert_bridge_keeps_the_ranking_in_score_order(scores: list[float], pick: int) -> None:
    ranked = sorted(enumerate(scores), key=lambda t: (-t[1], t[0]))
    cands = Candidates({}, 10)
    cands.ranked = list(ranked)
    before = {p for p, _s in ranked}
    bridge.insert_bridge(cands, pick)
    after = [p for p, _s in cands.ranked]
    assert len(after) == len(set(after))
    got = [s for _p, s in cands.ranked]
    assert got == sorted(got, reverse=True)
    if len(before - {pick}) > bridge.BRIDGE_SLOT:
        assert after[bridge.BRIDGE_SLOT] == pick and set(after) == before | {pick}
        assert [p for p in after if p != pick] == [p for p, _s in ranked if p != pick]
    else:
        assert cands.ranked == ranked
