"""Graph-aware recall (``x-rcp-agentic-graphRecall``) and the composed ``path`` / ``subgraph`` units.

A real engine with ``build_graph`` over a small titled corpus where a two-hop question
("where did the drummer of the band behind Midnight Harbor grow up") needs a passage
that shares no word with it: hybrid alone misses it, graph recall finds it. Filters never
leak (checked against the documents' metadata and texts), sessions do not repeat, and the
composed units carry their provenance within their token budgets, with the confidence of
their best leaf chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rcp_agentic import Engine
from rcp_agentic.errors import OptionUnsupported
from rcp_agentic.analyzer import analyze
from rcp_agentic.models.tokenizer import count_tokens

GRAPH = {"x-rcp-agentic-graphRecall": True}
QUESTION = "In which city was the group behind the single Midnight Harbor founded?"
DOCS = {
    "Midnight Harbor": ("Midnight Harbor is a 1979 single recorded by Velvet Lanterns for their "
                        "second album."),
    "Velvet Lanterns": ("Velvet Lanterns began playing in Bergen during 1974. Oskar Brandvik "
                        "kept time on stage for Velvet Lanterns."),
    "Oskar Brandvik": "Oskar Brandvik grew up in Tromsø, near fjords above the Arctic Circle.",
    "Copper Skyline": ("Copper Skyline is a single about a city harbor at midnight. The group "
                       "behind it was founded by two friends."),
    "Harbor Lights Band": ("Harbor Lights Band is a group founded in a harbor city. The group "
                           "played a single at midnight."),
    "City Groups": ("A group founded in a city often names a single after that city. Which "
                    "city a group is founded in shapes its sound."),
    "Seaside Choir": ("Seaside Choir sang the single Harbor Hymn. The choir was founded in a "
                      "small city by the harbor."),
    "Glass Orchard": "Glass Orchard released the album Paper Moons with producer Lena Varg.",
}
BRIDGE = "velvet-lanterns"


def doc_id(title: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")


def corpus() -> list[dict[str, Any]]:
    return [{"id": doc_id(t), "title": t, "text": text,
             "meta": {"tenant": "a" if i % 2 == 0 else "b"}}
            for i, (t, text) in enumerate(DOCS.items())]


@pytest.fixture(scope="module")
def eng(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    engine = Engine(tmp_path_factory.mktemp("grecall") / "e", embedder=embedder,
                    build_graph=True)
    engine.add_documents(corpus())
    engine.wait_for_derived()
    yield engine
    engine.close()


def docs_of(res: Any) -> list[str]:
    return [h.chunk.doc_id if h.chunk else h.meta["doc_ids"][0] for h in res.hits]


def test_the_bridge_passage_shares_no_word_with_the_question() -> None:
    assert not set(analyze(QUESTION)) & set(analyze(DOCS["Velvet Lanterns"]))


def test_graph_recall_finds_the_second_hop_hybrid_misses(eng: Engine) -> None:
    hybrid = eng.retrieve(QUESTION, k=3)
    assert BRIDGE not in docs_of(hybrid)
    graph = eng.retrieve(QUESTION, k=3, **GRAPH)
    assert {"midnight-harbor", BRIDGE} <= set(docs_of(graph))
    assert all("graph" in (h.scores or {}) and "fused" in (h.scores or {}) for h in graph.hits)
    # The same through the wire name, and deterministic.
    again = eng.retrieve_params({"query": QUESTION, "k": 3, **GRAPH})
    assert [h.id for h in again.hits] == [h.id for h in graph.hits]


@pytest.mark.parametrize("unit", ["document", "passage"])
def test_graph_recall_serves_documents_and_passages(eng: Engine, unit: str) -> None:
    assert BRIDGE not in docs_of(eng.retrieve(QUESTION, k=3, unit=unit))
    res = eng.retrieve(QUESTION, k=3, unit=unit, **GRAPH)
    assert BRIDGE in docs_of(res) and all(h.unit == unit for h in res.hits)


def test_graph_recall_scores_nodes_and_triplets(eng: Engine) -> None:
    nodes = eng.retrieve(QUESTION, k=10, unit="node", **GRAPH)
    scored = [h for h in nodes.hits if (h.scores or {}).get("graph", 0) > 0]
    assert scored and any(h.text and h.text.startswith("Velvet Lantern") for h in nodes.hits)
    trips = eng.retrieve(QUESTION, k=5, unit="triplet", **GRAPH)
    assert trips.hits and all("graph" in (h.scores or {}) for h in trips.hits)


def test_no_entity_in_the_query_falls_back_to_hybrid(eng: Engine) -> None:
    q = "in which city was the group founded"
    plain = eng.retrieve(q, k=4)
    res = eng.retrieve(q, k=4, **GRAPH)
    assert same_but_the_bridge(res, plain)
    assert any("names no entity" in n for n in res.usage.notes or [])


def same_but_the_bridge(res: Any, plain: Any) -> bool:
    """``res`` ranks as ``plain`` (hybrid) does, but for the bridge passage its note names
    (``rcp_agentic.graph.bridge``: the first hop is hybrid's head when the graph list
    stays out)."""
    bridged = [n.split()[4] for n in res.usage.notes or [] if n.startswith("graph recall: bridge")]
    got = [h.id for h in res.hits]
    want = [h.id for h in plain.hits]
    if not bridged:
        return got == want
    slot = got.index(bridged[0])
    return got[:slot] == want[:slot] and [i for i in got if i != bridged[0]] == \
        [i for i in want if i != bridged[0]][:len(got) - 1]


def test_entities_no_passage_is_about_do_not_vote(eng: Engine) -> None:
    # Lena Varg is only mentioned (no passage is titled by her): the sparse list already
    # ranks the passages that mention her, so the graph list stays out of the fusion...
    q = "Which album did Lena Varg produce?"
    plain = eng.retrieve(q, k=4)
    res = eng.retrieve(q, k=4, **GRAPH)
    assert same_but_the_bridge(res, plain)
    assert any("no passage is about" in n for n in res.usage.notes or [])
    # ... unless the request gives the graph list a weight of its own.
    weighted = eng.retrieve(q, k=4, fusion={"method": "rrf", "weights": {"graph": 1.0}},
                            **GRAPH)
    assert any((h.scores or {}).get("graph", 0) > 0 for h in weighted.hits)
    assert not any("no passage is about" in n for n in weighted.usage.notes or [])


def test_graph_recall_needs_a_graph(tmp_path: Any, embedder: Any) -> None:
    with Engine(tmp_path / "plain", embedder=embedder) as plain:
        plain.add_documents(corpus()[:2])
        with pytest.raises(OptionUnsupported) as err:
            plain.retrieve(QUESTION, k=2, **GRAPH)
        assert err.value.option == "x-rcp-agentic-graphRecall"
        res = plain.retrieve(QUESTION, k=2, strict=False, **GRAPH)
        assert len(res.hits) == 2 and any("graphRecall" in n for n in res.usage.notes or [])


def test_convex_fusion_does_not_take_a_third_list(eng: Engine) -> None:
    with pytest.raises(OptionUnsupported):
        eng.retrieve(QUESTION, k=2, fusion={"method": "convex"}, **GRAPH)
    weighted = eng.retrieve(QUESTION, k=3, fusion={"method": "weighted"}, **GRAPH)
    assert len(weighted.hits) == 3


@pytest.mark.parametrize("tenant", ["a", "b"])
def test_filters_never_leak(eng: Engine, tenant: str) -> None:
    """Brute force: every hit, and every chunk a composed hit shows, is of an allowed document,
    and no composed text holds a sentence only an excluded document says."""
    allowed = {d["id"] for d in corpus() if d["meta"]["tenant"] == tenant}
    excluded_names = [t for t in DOCS if doc_id(t) not in allowed]
    flt = {"field": "tenant", "op": "eq", "value": tenant}
    for unit in ("chunk", "document", "node", "triplet"):
        res = eng.retrieve(QUESTION, k=10, unit=unit, filter=flt, **GRAPH)
        for h in res.hits:
            docs = {h.chunk.doc_id} if h.chunk else set(h.meta["doc_ids"])
            assert docs <= allowed, (unit, h.id)
    for unit in ("path", "subgraph"):
        res = eng.retrieve(QUESTION, k=10, unit=unit, filter=flt)
        for h in res.hits:
            assert set(h.meta["doc_ids"]) <= allowed
            leaves = {leaf.split("#")[0].removeprefix("doc:") for leaf in h.provenance.leaves}
            assert leaves <= allowed
            for name in excluded_names:  # a title only its excluded document is about
                if not any(name in DOCS[t] for t in DOCS if doc_id(t) in allowed):
                    assert name not in (h.text or ""), (unit, name)


def test_sessions_do_not_repeat(eng: Engine) -> None:
    first = eng.retrieve(QUESTION, k=3, session_id="g-s1", **GRAPH)
    second = eng.retrieve(QUESTION, k=3, session_id="g-s1", **GRAPH)
    assert not {h.id for h in first.hits} & {h.id for h in second.hits}
    p1 = eng.retrieve(QUESTION, k=2, unit="path", session_id="g-s2")
    p2 = eng.retrieve(QUESTION, k=2, unit="path", session_id="g-s2")
    assert p1.hits and not {h.id for h in p1.hits} & {h.id for h in p2.hits}


def test_a_path_whose_chunks_were_all_returned_is_not_returned(eng: Engine) -> None:
    paths = eng.retrieve(QUESTION, k=1, unit="path").hits
    assert paths
    leaves = set(paths[0].provenance.leaves)
    sid = "g-s3"
    got: set[str] = set()
    for _ in range(5):  # return chunks until every leaf of the path was returned
        got |= {h.id for h in eng.retrieve(QUESTION, k=4, session_id=sid, **GRAPH).hits}
        if leaves <= got:
            break
    assert leaves <= got
    again = eng.retrieve(QUESTION, k=50, unit="path", session_id=sid)
    assert paths[0].id not in {h.id for h in again.hits}


def test_path_shape(eng: Engine) -> None:
    res = eng.retrieve(QUESTION, k=5, unit="path")
    assert res.hits and res.usage.tokens <= sum(count_tokens(h.text or "") for h in res.hits)
    for h in res.hits:
        assert h.unit == "path" and h.id.startswith("path:")
        prov = h.provenance
        assert prov and prov.path and len(prov.path) >= 2 and prov.leaves
        assert len(prov.edges) == len(prov.path) - 1
        assert [e.src for e in prov.edges] == prov.path[:-1]
        assert [e.dst for e in prov.edges] == prov.path[1:]
        assert all(e.weight is not None and e.weight > 0 for e in prov.edges)
        assert "→" in (h.text or "") and h.citation and h.meta["citations"]
        assert {c["id"] for c in h.meta["citations"]} == set(prov.leaves)
    wire = res.hits[0].to_wire()
    assert set(wire["provenance"]) == {"path", "nodes", "edges", "leaves"}
    assert [h.id for h in eng.retrieve(QUESTION, k=5, unit="path").hits] == \
        [h.id for h in res.hits]


def test_subgraph_fits_its_share_of_the_budget(eng: Engine) -> None:
    res = eng.retrieve(QUESTION, k=3, unit="subgraph", token_budget=120)
    assert res.hits and res.usage.tokens <= 120
    for h in res.hits:
        assert h.unit == "subgraph" and count_tokens(h.text or "") <= 40
        assert h.provenance and h.provenance.nodes and h.provenance.edges
        assert " — " in (h.text or "") and h.provenance.leaves
    one = eng.retrieve(QUESTION, k=1, unit="subgraph", token_budget=500).hits
    assert one and count_tokens(one[0].text or "") > count_tokens(res.hits[0].text or "")


def test_composed_units_page_with_a_cursor(eng: Engine) -> None:
    page1 = eng.retrieve(QUESTION, k=1, unit="subgraph", token_budget=40)
    assert page1.next_cursor
    page2 = eng.retrieve(QUESTION, k=1, unit="subgraph", token_budget=40,
                         cursor=page1.next_cursor)
    assert page2.hits and page2.hits[0].id != page1.hits[0].id


def test_composed_units_refuse_what_they_cannot_do(eng: Engine) -> None:
    with pytest.raises(OptionUnsupported):
        eng.retrieve(QUESTION, k=2, unit="path", mmr={"lambda": 0.5})
    res = eng.retrieve(QUESTION, k=2, unit="path", mmr={"lambda": 0.5}, strict=False)
    assert any("mmr" in n for n in res.usage.notes or [])
    none = eng.retrieve("nothing at all to link", k=2, unit="path")
    assert none.hits == [] and any("no entity" in n for n in none.usage.notes or [])


def _leaf_confidences(eng: Engine, query: str, **scope: Any) -> dict[str, float]:
    """Each chunk's confidence in a graph-recall chunk retrieve ``candidateK`` deep."""
    depth = eng.config.candidate_k
    res = eng.retrieve(query, k=depth, candidate_k=depth, include_text=False, **scope, **GRAPH)
    got = {h.id: h.confidence for h in res.hits}
    assert got and all(c is not None for c in got.values())
    return {uid: float(c) for uid, c in got.items() if c is not None}


@pytest.mark.parametrize("unit", ["path", "subgraph"])
@pytest.mark.parametrize("scope", [{}, {"filter": {"field": "tenant", "op": "eq",
                                                   "value": "a"}}])
def test_composed_confidence_is_its_best_leafs(eng: Engine, unit: str,
                                               scope: dict[str, Any]) -> None:
    assert eng.calibrator is not None  # the shipped calibration fits the bundled embedder
    res = eng.retrieve(QUESTION, k=5, unit=unit, **scope)
    assert res.hits
    chunks = _leaf_confidences(eng, QUESTION, **scope)
    floor = min(chunks.values())
    ceiling = 1.0
    for i, h in enumerate(res.hits):
        assert h.provenance and h.provenance.leaves
        best = max(chunks.get(uid, floor) for uid in h.provenance.leaves)
        if i == 0:  # the first hit is its best leaf's confidence exactly
            assert h.confidence == pytest.approx(best, abs=1e-6)
        ceiling = min(ceiling, best)  # never above the hit ranked before it
        assert h.confidence == pytest.approx(ceiling, abs=1e-6), (h.id, h.confidence, best)
        assert 0.0 <= ceiling <= 1.0


def test_composed_units_without_calibration_carry_no_confidence(eng: Engine) -> None:
    shipped = eng.calibrator
    eng.calibrator = None
    try:
        for unit in ("path", "subgraph"):
            hits = eng.retrieve(QUESTION, k=3, unit=unit).hits
            assert hits and all(h.confidence is None for h in hits)
    finally:
        eng.calibrator = shipped
