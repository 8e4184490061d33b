"""The corrective retrieval loop: verdicts, refinement, re-query, bridge following, escalation,
fallback, bounds."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import FakeListChatModel

from conftest import DOCS
from rcp_agentic import Engine
from rcp_agentic.agentic import ConfidenceEvaluator, CorrectiveRetriever
from rcp_agentic.agentic.bridge import about, attests, bridge_entities, coverage, question_terms
from rcp_agentic.agentic.rewrite import expand_query
from test_loaders import write_pdf

OFF_TOPIC = "quantum gravity near black hole horizons"


@pytest.fixture(scope="module")
def paged(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Any:
    """DOCS plus a two-page PDF, so the engine has chunk, page and document units."""
    root = tmp_path_factory.mktemp("corrective")
    pdf = write_pdf(root / "guide.pdf", [["Token budgets bound the context a reader sees."],
                                         ["Packing skips passages larger than the room left."]])
    eng = Engine(root / "e", embedder=embedder)
    eng.add_documents(DOCS)
    eng.index_paths([pdf])
    yield eng
    eng.close()


def test_confident_first_step_stops_and_refines(paged: Engine) -> None:
    loop = CorrectiveRetriever(paged, k=3, min_evidence=1, refine_first=True)
    res = loop.run("what links vitamin D to multiple sclerosis?")
    assert [s.action for s in res.trace] == ["retrieve"] and res.calls == 1
    assert res.verdict == "correct" and res.stop_reason.startswith("correct")
    assert res.evidence[0]["id"] == "doc:d1#c0"
    lower = loop.evaluator.lower
    assert all(h["confidence"] >= lower for h in res.evidence)
    assert res.trace[0].returned == 3 and res.trace[0].kept == len(res.evidence)
    assert res.tokens == sum(s.tokens for s in res.trace) > 0


def test_first_step_is_kept_whole_unless_refine_first(paged: Engine) -> None:
    question = "what links vitamin D to multiple sclerosis?"
    first = [h.to_wire() for h in paged.retrieve(question, k=3).hits]
    confidences = sorted(h["confidence"] for h in first)
    assert confidences[0] < confidences[-1]
    # The weakest first hit falls below ``lower``; the best reaches ``upper``.
    evaluator = ConfidenceEvaluator(upper=confidences[-1],
                                    lower=(confidences[0] + confidences[1]) / 2)
    whole = CorrectiveRetriever(paged, k=3, min_evidence=1, evaluator=evaluator).run(question)
    assert [h["id"] for h in whole.evidence] == [h["id"] for h in first]
    assert whole.calls == 1 and whole.trace[0].kept == 3
    refined = CorrectiveRetriever(paged, k=3, min_evidence=1, evaluator=evaluator,
                                  refine_first=True).run(question)
    assert [h["id"] for h in refined.evidence] == \
        [h["id"] for h in first if h["confidence"] >= evaluator.lower]
    assert len(refined.evidence) < 3


def test_an_incorrect_first_step_keeps_nothing(paged: Engine) -> None:
    first = [h.to_wire() for h in paged.retrieve(OFF_TOPIC, k=3).hits]
    above = min(1.0, max(h["confidence"] for h in first) + 1e-6)
    res = CorrectiveRetriever(paged, k=3, max_steps=1,
                              evaluator=ConfidenceEvaluator(upper=above, lower=above)
                              ).run(OFF_TOPIC)
    assert res.trace[0].verdict == "incorrect" and res.evidence == []


def test_incorrect_escalates_through_every_unit(paged: Engine) -> None:
    res = CorrectiveRetriever(paged, k=3, max_steps=6).run(OFF_TOPIC)
    assert [(s.action, s.unit) for s in res.trace[:3]] == [
        ("retrieve", "chunk"), ("escalate", "page"), ("escalate", "document")]
    assert all(s.verdict == "incorrect" for s in res.trace)
    assert res.evidence == [] and res.verdict == "incorrect"
    assert "chunk → page" in res.trace[1].reason


def test_one_session_never_repeats_a_hit(paged: Engine) -> None:
    # Thresholds nothing reaches: the loop keeps re-querying the same trajectory.
    loop = CorrectiveRetriever(paged, k=3, max_steps=5,
                               evaluator=ConfidenceEvaluator(upper=1.0, lower=0.0))
    res = loop.run("dense retrieval and rank fusion")
    seen = [i for s in res.trace for i in s.hit_ids]
    assert len(seen) == len(set(seen)) and len(res.trace) == 5
    assert len({s.query for s in res.trace if s.action == "expand"}) >= 1


def test_min_evidence_keeps_looking(paged: Engine) -> None:
    one = CorrectiveRetriever(paged, k=3, min_evidence=1).run(
        "knowledge graphs store relations as triplets")
    default = CorrectiveRetriever(paged, k=3)
    assert default.min_evidence == 2      # what a multi-hop question needs (issue 22)
    two = default.run("knowledge graphs store relations as triplets")
    assert one.calls == 1 and two.calls > 1
    assert "confident hit(s) needed" in two.trace[1].reason


def test_evidence_puts_the_questions_own_hits_first(paged: Engine) -> None:
    question = "knowledge graphs store relations as triplets"
    first = [h.to_wire() for h in paged.retrieve(question, k=3).hits]
    lower = (first[-1]["confidence"] + first[-2]["confidence"]) / 2
    assert first[-1]["confidence"] < lower
    res = CorrectiveRetriever(paged, k=3, max_steps=3, min_evidence=10,
                              evaluator=ConfidenceEvaluator(upper=1.0, lower=lower)).run(question)
    asked = {s.index: s.query for s in res.trace}

    def tier(hit: dict[str, Any]) -> int:
        if asked[hit["meta"]["step"]] != question:
            follows = hit["meta"].get("follows")
            return 4 if not follows else 1 if about(hit, follows) else 3
        if hit["confidence"] >= 1.0:
            return 0
        return 1 if "bridge" in hit["scores"] else 2 if hit["confidence"] >= lower else 5

    tiers = [tier(h) for h in res.evidence]
    assert tiers == sorted(tiers) and {2, 5} <= set(tiers)
    assert res.evidence[-1]["id"] == first[-1]["id"]      # kept, but behind the rest
    found = [i for s in res.trace for i in s.hit_ids]
    for t in set(tiers):                                  # the order found within a tier
        ids = [h["id"] for h, k in zip(res.evidence, tiers) if k == t]
        assert ids == sorted(ids, key=found.index)


def test_a_follow_up_that_adds_nothing_confident_stops_saturated(paged: Engine) -> None:
    question = "what links vitamin D to multiple sclerosis?"
    first = paged.retrieve(question, k=3).to_wire()["hits"]
    # Only the best first hit counts as confident; the session never returns it again, and
    # no later hit of this small corpus scores as high.
    evaluator = ConfidenceEvaluator(upper=first[0]["confidence"], lower=0.0)
    res = CorrectiveRetriever(paged, k=3, max_steps=4, min_evidence=2,
                              evaluator=evaluator).run(question)
    assert len(res.trace) == 2 and res.calls == 2
    assert "1 of 2 confident hit(s) needed" in res.trace[1].reason
    assert res.stop_reason == "saturated: step 2 added no confident hit (1 held)"
    assert res.evidence[0]["id"] == first[0]["id"]


def test_llm_rewrites_and_decomposes(paged: Engine) -> None:
    llm = FakeListChatModel(responses=["1. reciprocal rank fusion\n- vitamin D deficiency"])
    loop = CorrectiveRetriever(paged, k=2, llm=llm, max_steps=3,
                               evaluator=ConfidenceEvaluator(1.0, 0.0))
    res = loop.run("two unrelated things")
    follow = [s for s in res.trace if s.action == "decompose"]
    assert [s.query for s in follow] == ["reciprocal rank fusion", "vitamin D deficiency"]
    ids = {h["id"] for h in res.evidence}
    assert {"doc:d5#c0", "doc:d1#c0"} <= ids


def test_fallback_to_another_engine(tmp_path: Path, paged: Engine, embedder: Any) -> None:
    other = Engine(tmp_path / "other", embedder=embedder)
    other.add_documents([{"id": "bh", "text": "Black holes bend spacetime; quantum gravity "
                                             "studies horizons and Hawking radiation."}])
    try:
        # cover=0: a correct step ends the loop (no bridge to follow in this corpus).
        loop = CorrectiveRetriever(paged, fallbacks=[other], names=["main", "physics"], k=3,
                                   max_steps=6, min_evidence=1, cover=0.0,
                                   options={"unit": "chunk"})
        res = loop.run(OFF_TOPIC)
        assert [s.action for s in res.trace][-1] == "fallback"
        assert res.trace[-1].engine == "physics"
        assert res.evidence[0]["id"] == "doc:bh#c0" and res.evidence[0]["meta"]["engine"] == "physics"
    finally:
        other.close()


def test_failing_engine_falls_back(paged: Engine) -> None:
    dead = [sys.executable, "-c", "import sys; sys.exit(3)"]
    loop = CorrectiveRetriever(dead, fallbacks=[paged], names=["dead", "main"], k=2)
    res = loop.run("vitamin D and sclerosis")
    assert res.trace[0].error and res.trace[0].engine == "dead"
    assert res.trace[1].action == "fallback" and res.evidence[0]["id"] == "doc:d1#c0"
    loop.close()
    with pytest.raises(Exception):  # nothing to fall back to: the engine's error surfaces
        CorrectiveRetriever(dead, k=2).run("vitamin D")


def test_bounds_on_steps_and_tokens(paged: Engine) -> None:
    never = ConfidenceEvaluator(upper=1.0, lower=0.0)
    res = CorrectiveRetriever(paged, k=3, max_steps=2, evaluator=never).run("rank fusion")
    assert res.calls == 2 and "step limit" in res.stop_reason
    res = CorrectiveRetriever(paged, k=5, max_tokens=40, evaluator=never).run("rank fusion")
    assert 0 < res.tokens <= 40
    with pytest.raises(ValueError):
        CorrectiveRetriever(paged, max_steps=0)
    with pytest.raises(ValueError):
        ConfidenceEvaluator(upper=0.1, lower=0.5)


def test_coarser_unit_replaces_the_chunks_it_holds(paged: Engine) -> None:
    res = CorrectiveRetriever(paged, k=3, min_evidence=2).run(
        "how do knowledge graphs store relations and how does rank fusion work")
    docs = [(h["chunk"] or {}).get("docId") for h in res.evidence]
    assert len(docs) == len(set(docs))  # never a chunk beside the document holding it


def test_no_confidence_keeps_everything(tmp_path: Path) -> None:
    eng = Engine(tmp_path / "e", embedder=DeterministicFakeEmbedding(size=16))
    eng.add_documents(DOCS)
    try:
        res = CorrectiveRetriever(eng, k=2, max_steps=2, follow=0).run("vitamin")
        assert res.trace[0].verdict == "ambiguous" and "no confidence" in res.trace[1].reason
        assert res.trace[1].action == "expand"
        assert len(res.evidence) == 4  # two steps, two hits each, nothing refined away
        # Following a bridge keeps the hits that name it, confidence or not.
        res = CorrectiveRetriever(eng, k=2, max_steps=2).run("vitamin")
        assert res.trace[1].action == "follow" and res.trace[1].followed
        later = [h for h in res.evidence if h["meta"]["step"] == 2]
        assert len(later) == res.trace[1].kept
        assert all(any(attests(h["text"], n) for n in res.trace[1].followed) for h in later)
    finally:
        eng.close()


def test_async_loop_matches_sync(paged: Engine) -> None:
    loop = CorrectiveRetriever(paged, k=3, min_evidence=2)
    query = "knowledge graphs store relations as triplets"
    sync = loop.run(query)
    res = asyncio.run(loop.arun(query))
    assert [(s.action, s.unit, s.query) for s in res.trace] == [
        (s.action, s.unit, s.query) for s in sync.trace]
    assert [h["id"] for h in res.evidence] == [h["id"] for h in sync.evidence]
    assert res.session_id != sync.session_id


def test_expansion_adds_the_new_entities_of_the_best_hits() -> None:
    first = {"text": "The painting hangs in the Louvre, bought by Louis XIV of France."}
    second = {"text": "Claude Monet was born in Paris."}
    third = {"text": "Nothing Here Matters."}
    expanded = expand_query("Where is the painting bought by Louis XIV?", [first, second, third])
    # "The" is a stopword, "Louis XIV" is asked already, the third hit is not read.
    assert expanded == ("Where is the painting bought by Louis XIV? Louvre Louis XIV of France "
                        "Claude Monet Paris")
    lower = {"text": "reciprocal rank fusion sums reciprocal ranks", "citation": {"title": ""}}
    assert expand_query("how does rrf work", [lower]).startswith("how does rrf work reciprocal")


def test_langchain_retriever_and_langgraph_node(paged: Engine) -> None:
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    from rcp_agentic.agentic.langchain import CorrectiveRCPRetriever, corrective_node

    loop = CorrectiveRetriever(paged, k=3, min_evidence=2)
    question = "knowledge graphs store relations as triplets"
    expected = loop.run(question)
    docs = CorrectiveRCPRetriever(loop=loop).invoke(question)
    assert [d.id for d in docs] == [h["id"] for h in expected.evidence]
    assert all(d.metadata["step"] >= 1 for d in docs)
    adocs = asyncio.run(CorrectiveRCPRetriever(loop=loop).ainvoke(question))
    assert [d.id for d in adocs] == [d.id for d in docs]

    class State(TypedDict, total=False):
        question: str
        documents: list[Any]
        trace: list[dict[str, Any]]

    graph = StateGraph(State)
    graph.add_node("retrieve", corrective_node(loop))
    graph.add_edge(START, "retrieve")
    graph.add_edge("retrieve", END)
    out = graph.compile().invoke({"question": question})
    assert [d.id for d in out["documents"]] == [d.id for d in docs]
    assert [s["action"] for s in out["trace"]] == [s.action for s in expected.trace]


def test_llamaindex_retriever(paged: Engine) -> None:
    from rcp_agentic.agentic.llamaindex import CorrectiveLlamaRetriever

    loop = CorrectiveRetriever(paged, k=3)
    nodes = CorrectiveLlamaRetriever(loop).retrieve("vitamin D and multiple sclerosis")
    assert nodes[0].node.node_id == "doc:d1#c0" and nodes[0].score == nodes[0].node.metadata[
        "confidence"]
    anodes = asyncio.run(CorrectiveLlamaRetriever(loop).aretrieve("vitamin D and sclerosis"))
    assert anodes[0].node.node_id == "doc:d1#c0" and anodes[0].node.metadata["step"] == 1


# --- escalation to the knowledge graph ----------------------------------------------------------

@pytest.fixture(scope="module")
def multihop(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Any:
    """A graph engine over test_graph_recall's corpus: the second hop of its question lies in
    a passage that shares no word with it."""
    from test_graph_recall import corpus

    eng = Engine(tmp_path_factory.mktemp("corrective-graph") / "e", embedder=embedder,
                 build_graph=True)
    eng.add_documents(corpus())
    eng.wait_for_derived()
    yield eng
    eng.close()


def test_loop_escalates_to_graph_recall(multihop: Engine) -> None:
    from test_graph_recall import BRIDGE, QUESTION

    loop = CorrectiveRetriever(multihop, k=2, max_steps=3, min_evidence=2, graph="escalate")
    assert loop.ladder(0) == ["chunk", "page", "document", "node", "path", "subgraph", "community"]
    res = loop.run(QUESTION)
    first, second = res.trace[0], res.trace[1]
    assert (first.action, first.graph) == ("retrieve", False)
    assert f"doc:{BRIDGE}#c0" not in first.hit_ids  # hybrid alone misses the second hop
    assert (second.action, second.unit, second.graph) == ("graph", "chunk", True)
    assert "recall through the knowledge graph" in second.reason
    assert f"doc:{BRIDGE}#c0" in second.hit_ids  # the graph reaches it
    assert all(s.graph for s in res.trace[1:])  # once on, it stays on
    seen = [i for s in res.trace for i in s.hit_ids]
    assert len(seen) == len(set(seen))  # one session across the switch


def test_graph_false_keeps_the_loop_off_the_graph(multihop: Engine) -> None:
    from test_graph_recall import QUESTION

    loop = CorrectiveRetriever(multihop, k=2, max_steps=4, min_evidence=2, graph=False)
    assert loop.ladder(0) == ["chunk", "page", "document"]
    res = loop.run(QUESTION)
    assert res.calls > 1 and not any(s.graph or s.action == "graph" for s in res.trace)
    assert all(h["unit"] == "chunk" for h in res.evidence)


def test_graph_recall_from_the_first_step(multihop: Engine) -> None:
    from test_graph_recall import BRIDGE, QUESTION

    # The default on an engine that offers graph recall, and forced by the options.
    for loop in (CorrectiveRetriever(multihop, k=2, max_steps=2, min_evidence=2),
                 CorrectiveRetriever(multihop, k=2, max_steps=2, min_evidence=2,
                                     graph="escalate", options={"graph_recall": True})):
        res = loop.run(QUESTION)
        assert res.trace[0].graph and f"doc:{BRIDGE}#c0" in res.trace[0].hit_ids
        assert "graph" not in [s.action for s in res.trace]
    with pytest.raises(ValueError):
        CorrectiveRetriever(multihop, graph="always")  # type: ignore[arg-type]


def test_llm_requery_keeps_graph_recall_on(multihop: Engine) -> None:
    from test_graph_recall import QUESTION

    llm = FakeListChatModel(responses=["1. Velvet Lanterns drummer\n- Bergen founding"])
    loop = CorrectiveRetriever(multihop, k=2, llm=llm, max_steps=4,
                               evaluator=ConfidenceEvaluator(1.0, 0.0), graph="escalate")
    res = loop.run(QUESTION)
    assert [(s.action, s.graph) for s in res.trace] == [
        ("retrieve", False), ("graph", True), ("decompose", True), ("decompose", True)]
    assert [s.query for s in res.trace[2:]] == ["Velvet Lanterns drummer", "Bergen founding"]
    ares = asyncio.run(loop.arun(QUESTION))
    assert [(s.action, s.graph) for s in ares.trace] == [(s.action, s.graph) for s in res.trace]


def test_graph_units_never_stand_in_for_their_chunks(multihop: Engine) -> None:
    from rcp_agentic.agentic.trajectory import _contains

    question = "Velvet Lanterns Bergen"
    chunks = multihop.retrieve(question, k=3).to_wire()["hits"]
    for unit in ("node", "triplet", "path", "subgraph"):
        for hit in multihop.retrieve(question, k=2, unit=unit).to_wire()["hits"]:
            leaves = set(hit["provenance"]["leaves"])
            inside = [c for c in chunks if c["id"] in leaves]
            assert inside or unit != "node", unit  # the entity's own chunks are its leaves
            # An entity, a fact or a path is attested by its chunks, not made of them: it
            # never replaces them in the evidence, and they never hide it.
            assert not any(_contains(hit, c) or _contains(c, hit) for c in chunks), unit
    document = multihop.retrieve(question, k=1, unit="document").to_wire()["hits"][0]
    node = multihop.retrieve(question, k=1, unit="node").to_wire()["hits"][0]
    assert not _contains(document, node)


# --- following the bridge ----------------------------------------------------------------------

BRIDGE_QUESTION = ("Who was the first president of the association that publishes the Journal "
                   "of Quiet Minds?")
# The journal's passage names its publisher, the Northfield Society, which the question never
# names; the society's passage shares no word of the question's second hop ("founding head",
# not "first president"), so no retrieve of the question reaches it before its look-alikes.
BRIDGE_DOCS = {
    "Journal of Quiet Minds": ("The Journal of Quiet Minds is a peer-reviewed journal of "
                               "psychology published by the Northfield Society since 1952."),
    "Northfield Society": ("The Northfield Society was formed in 1901 by teachers in Leeds. Its "
                           "founding head was Clara Venn, who led it for ten years."),
    "Journal of Loud Minds": ("The Journal of Loud Minds is a journal of psychology published by "
                              "a university press."),
    "Presidents of associations": ("The first president of an association is usually elected "
                                   "by its founding members."),
    "Psychology association": ("An association of psychology publishes journals and elects a "
                               "president every year."),
    "Clara Venn": "Clara Venn was a teacher in Leeds and wrote two books on reading.",
}


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Any:
    eng = Engine(tmp_path_factory.mktemp("bridge") / "e", embedder=embedder)
    eng.add_documents([{"id": t.lower().replace(" ", "-"), "title": t, "text": x}
                       for t, x in BRIDGE_DOCS.items()])
    yield eng
    eng.close()


def test_the_loop_follows_the_bridge_its_evidence_names(chain: Engine) -> None:
    single = [h.id for h in chain.retrieve(BRIDGE_QUESTION, k=4).hits]
    assert "doc:northfield-society#c0" not in single     # a wider retrieve misses the bridge
    res = CorrectiveRetriever(chain, k=2, max_steps=4, graph=False, hops=2).run(BRIDGE_QUESTION)
    first, second = res.trace[0], res.trace[1]
    assert first.hit_ids[0] == "doc:journal-of-quiet-minds#c0" and first.hop == 0
    assert (second.action, second.hop, second.followed) == ("follow", 1, ["Northfield Society"])
    assert second.query == f"{BRIDGE_QUESTION} Northfield Society"
    assert "follow Northfield Society" in second.reason
    found = {h["id"]: h for h in res.evidence}
    assert found["doc:northfield-society#c0"]["meta"] == {
        **found["doc:northfield-society#c0"]["meta"], "step": 2, "follows": ["Northfield Society"]}
    # The follow-up's look-alike names no bridge: it stays out, however confident.
    assert "doc:journal-of-loud-minds#c0" in second.hit_ids
    assert "doc:journal-of-loud-minds#c0" not in found
    # The passages about the bridges rank after the question's confident hit, before its
    # other hits (whose confidence the calibration doubts).
    assert found["doc:journal-of-quiet-minds#c0"]["confidence"] >= 0.6
    assert found[first.hit_ids[1]]["confidence"] < 0.6
    assert [h["id"] for h in res.evidence] == [
        "doc:journal-of-quiet-minds#c0", "doc:northfield-society#c0", "doc:clara-venn#c0",
        first.hit_ids[1]]
    # It names the next hop, followed one bridge deeper.
    third = res.trace[2]
    assert third.action == "follow" and third.hop == 2 and "Clara Venn" in third.followed
    assert found["doc:clara-venn#c0"]["meta"]["follows"]


def test_the_release_loop_neither_follows_nor_filters(chain: Engine) -> None:
    res = CorrectiveRetriever(chain, k=2, max_steps=4, graph=False, follow=0, cover=0.0
                              ).run(BRIDGE_QUESTION)
    assert [s.action for s in res.trace][:2] == ["retrieve", "expand"]
    assert not any(s.followed or s.hop for s in res.trace)
    assert not any(h["meta"].get("follows") for h in res.evidence)
    assert "doc:journal-of-loud-minds#c0" in {h["id"] for h in res.evidence}  # kept by confidence


def test_hops_and_cover_bound_the_chain(chain: Engine) -> None:
    none = CorrectiveRetriever(chain, k=2, max_steps=4, graph=False, hops=0).run(BRIDGE_QUESTION)
    assert none.calls == 1 and none.stop_reason.startswith("hops: 0 bridge(s) followed")
    one = CorrectiveRetriever(chain, k=2, max_steps=4, graph=False, hops=1).run(BRIDGE_QUESTION)
    assert [s.hop for s in one.trace] == [0, 1] and one.stop_reason.startswith("hops: 1")
    # The question's terms are never all covered here ("first president" is nowhere): with
    # cover 1 the loop goes on; with a share the evidence reaches, the bridge ends it.
    held = one.trace[-1].coverage
    assert held is not None and 0 < held < 1
    assert held == pytest.approx(coverage(question_terms(BRIDGE_QUESTION),
                                          [h["text"] for h in one.evidence
                                           if h["confidence"] >= 0.6 or h["meta"].get("follows")]),
                                 abs=1e-4)
    enough = CorrectiveRetriever(chain, k=2, max_steps=4, graph=False, cover=held
                                 ).run(BRIDGE_QUESTION)
    assert enough.calls == 2 and enough.stop_reason.startswith("correct: ")
    assert "passages name Northfield Society" in enough.stop_reason
    with pytest.raises(ValueError):
        CorrectiveRetriever(chain, cover=1.5)
    with pytest.raises(ValueError):
        CorrectiveRetriever(chain, hops=-1)


def test_bridge_entities_are_the_names_the_question_does_not_give() -> None:
    question = "Who founded the label that released Harbor Songs?"
    hits = [
        {"text": "Harbor Songs is an album by Velvet Lanterns, released by Northwind Records "
                 "in 1979.", "confidence": 0.9, "citation": {"title": "Harbor Songs"}},
        {"text": "Northwind Records Ltd. was founded by Ada Byrne in Bergen.",
         "confidence": 0.3, "citation": {"title": "Northwind Records"}},
    ]
    names = [b.name for b in bridge_entities(question, hits, limit=5)]
    # The question's own entity is no bridge; a hit's own subject under another name
    # ("Northwind Records Ltd." in the passage titled "Northwind Records") is not either.
    assert names[:2] == ["Velvet Lanterns", "Northwind Records"]
    assert "Harbor Songs" not in names and "Northwind Records Ltd" not in names
    assert set(names[2:]) == {"Ada Byrne", "Bergen"}
    # The naming sentence's share of the question's terms and the hit's
    # confidence score a name; names already followed, or held by one, are skipped.
    scored = bridge_entities(question, hits, limit=5)
    assert scored[0].score == pytest.approx(0.9 * (1 + 3 / 5))  # harbor, song, releas
    assert [b.name for b in bridge_entities(question, hits, skip=["Velvet Lanterns", "Bergen"],
                                            limit=5)] == ["Northwind Records", "Ada Byrne"]
    assert bridge_entities(question, [], limit=3) == []


def test_attestation_and_coverage_read_words() -> None:
    assert attests("Anna Pálsdóttir was born in Reykjavík.", "Anna Palsdottir")
    assert not attests("Annapolis is a city.", "Anna")
    assert attests("It was published by the American Psychological Association.",
                   "American Psychological Association")
    terms = question_terms("Who was the first president of the association?")
    assert terms == {"first", "presid", "associ"}
    assert coverage(terms, ["The association elected its president."]) == pytest.approx(2 / 3)
    assert coverage(frozenset(), ["anything"]) == 1.0


def test_replayed_stops_match_real_runs(chain: Engine) -> None:
    """bench/corrective.py tunes ``cover`` and ``hops`` by replaying one long trajectory;
    the replay must stop where the loop itself stops."""
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("corrective_bench",
                                                  REPO / "bench" / "corrective.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up while it loads
    spec.loader.exec_module(bench)
    questions = [BRIDGE_QUESTION, "Which teacher from Leeds wrote books on reading?",
                 "What does the Journal of Loud Minds publish?"]
    for question in questions:
        long = bench.Trajectory.of(CorrectiveRetriever(
            chain, k=2, max_steps=4, graph=False, cover=1.0, hops=3).run(question))
        for cover, hops in ((0.0, 3), (0.5, 1), (0.6, 2), (1.0, 0), (1.0, 1)):
            real = CorrectiveRetriever(chain, k=2, max_steps=4, graph=False, cover=cover,
                                       hops=hops).run(question)
            steps, why = long.cut(cover=cover, hops=hops)
            assert steps == real.calls, (question, cover, hops)
            assert real.stop_reason.startswith(why)
            assert long.upto(steps) == (bench.ranked_docs(real.evidence), real.tokens)
