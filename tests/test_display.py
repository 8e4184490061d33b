"""Rich displays: results, hits, graph results, the tree, communities and the engine render
as HTML that parses, shows what it should, escapes every text and runs nothing."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from html_check import parsed, visible
from rcp_agentic import Engine
from rcp_agentic.display.cards import EngineFacts, engine_card
from rcp_agentic.display.html import esc, highlight, query_terms
from rcp_agentic.models.embedder import SentenceTransformerEmbedder
from rcp_agentic.raptor.outline import outline
from rcp_agentic.wire import GraphResult, Hit, RetrieveResult

pytestmark = pytest.mark.inline_derived

HOSTILE = ('<script>alert(1)</script><img src=x onerror="alert(2)"> '
           '"><svg onload=alert(3)> javascript:alert(4) & </details></td></table>')


WIKI = {
    "Midnight Harbor": "Midnight Harbor is a 1979 single recorded by Velvet Lanterns for "
                       "their second album.",
    "Velvet Lanterns": "Velvet Lanterns began playing in Bergen during 1974. Oskar Brandvik "
                       "kept time on stage for Velvet Lanterns.",
    "Oskar Brandvik": "Oskar Brandvik grew up in Tromsø, near fjords above the Arctic Circle.",
    "Glass Orchard": "Glass Orchard released the album Paper Moons with producer Lena Varg.",
}
QUESTION = "In which city was the group behind the single Midnight Harbor founded?"


@pytest.fixture(scope="module")
def graph_engine(tmp_path_factory: pytest.TempPathFactory,
                 embedder: SentenceTransformerEmbedder) -> Iterator[Engine]:
    """The wiki with a graph, communities and a tree, plus a hostile document."""
    eng = Engine(tmp_path_factory.mktemp("display") / "e", embedder=embedder, build_graph=True,
                 build_tree=True, community_max_size=3)
    docs: list[dict[str, Any]] = [
        {"id": t.lower().replace(" ", "-"), "title": t, "text": x,
         "meta": {"team": "music" if t != "Glass Orchard" else "other"}}
        for t, x in WIKI.items()]
    docs.append({"id": "hostile", "title": HOSTILE,
                 "text": f"Hostile Sample holds markup. {HOSTILE} Velvet Lanterns tour.",
                 "meta": {"team": "other", "uri": "javascript:alert(5)"}})
    eng.add_documents(docs)
    eng.wait_for_derived()
    yield eng
    eng.close()


def test_a_result_shows_rank_unit_score_confidence_text_source_and_usage(
        graph_engine: Engine) -> None:
    result = graph_engine.retrieve(QUESTION, k=3)
    markup = result._repr_html_()
    page = parsed(markup)
    text = visible(markup)
    assert f"{len(result.hits)} hits for {QUESTION}" in text
    for rank, hit in enumerate(result.hits, 1):
        assert hit.id in text and f"{hit.score:.4f}" in text
        assert f"{hit.confidence:.2f}" in text
    assert "Midnight Harbor" in text and "chars 0–" in text  # the citation and its span
    assert f"{result.usage.candidates:,} candidates" in text and "tokens" in text
    assert page.tags.get("tr", 0) == len(result.hits) + 1  # a header and a row per hit
    assert "dense" in text and "sparse" in text  # each stage's score


def test_the_query_terms_are_marked(graph_engine: Engine) -> None:
    markup = graph_engine.retrieve("the single Midnight Harbor", k=1).html()
    assert '<mark style="' in markup
    marked = [m.split(">", 1)[1] for m in markup.split("<mark ")[1:]]
    words = {m.split("</mark>", 1)[0] for m in marked}
    assert {"Midnight", "Harbor", "single"} <= words
    assert "the" not in words  # a stopword is not a term
    # Stemming: "packs" and "Packing" are the query's "packing".
    assert highlight("Packing packs pack.", query_terms("packing")).count("<mark") == 3
    assert "<mark" not in highlight("nothing here", query_terms(None))


def test_hostile_text_title_and_uri_render_as_text_and_run_nothing(graph_engine: Engine) -> None:
    result = graph_engine.retrieve("Hostile Sample markup", k=10)
    hostile = [h for h in result.hits if h.id.startswith("doc:hostile")]
    assert hostile, "the hostile document should be found"
    for markup in (result._repr_html_(), hostile[0]._repr_html_(),
                   graph_engine.graph("local", query="Hostile Sample Velvet Lanterns",
                                      k=10)._repr_html_(),
                   graph_engine._repr_html_()):
        parsed(markup)
        assert "<script" not in markup.lower().replace("&lt;script", "")
        assert "onerror=" not in markup.replace("onerror=&quot;", "")
    text = visible(result._repr_html_())
    assert "<script>alert(1)</script>" in text  # shown, as text
    assert 'href="javascript' not in result._repr_html_()


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=300), title=st.text(max_size=60), query=st.text(max_size=40),
       conf=st.floats(allow_nan=True, allow_infinity=True),
       score=st.floats(allow_nan=False, allow_infinity=False),
       uri=st.sampled_from([None, "https://example.org/a?b=1&c=<x>", "javascript:alert(1)",
                            "data:text/html,<script>alert(1)</script>", "file:///tmp/x.txt",
                            " JAVASCRIPT:alert(1)"]))
def test_any_hit_renders_to_html_that_parses_and_keeps_its_text(
        text: str, title: str, query: str, conf: float, score: float, uri: str | None) -> None:
    hit = Hit.model_validate({
        "id": "doc:x#c0", "score": score, "text": text, "unit": "chunk",
        "confidence": conf if 0 <= conf <= 1 else None,
        "citation": {"source": "x", "title": title or None, "uri": uri, "start": 0, "end": 5},
        "trust": {"level": "untrusted", "injectionSuspected": True}})
    markup = RetrieveResult(hits=[hit]).html(query=query)
    shown = visible(markup)
    cleaned = " ".join(esc(text[:400]).split())  # what survives: XML-legal characters
    import html as html_module
    assert " ".join(html_module.unescape(cleaned).split())[:200] in shown
    assert "untrusted" in shown and "injection suspected" in shown


def test_a_path_hit_draws_its_hops_in_order(graph_engine: Engine) -> None:
    hit = graph_engine.retrieve(QUESTION, k=1, unit="path").hits[0]
    assert hit.meta and hit.meta["names"] and len(hit.meta["relations"]) == len(
        hit.provenance.edges)
    markup = hit._repr_html_()
    parsed(markup)
    svg = markup[markup.index("<svg"):markup.index("</svg>") + 6]
    names = [hit.meta["names"][n] for n in hit.provenance.path]
    positions = [svg.index(f">{name}<") for name in names]  # labels drawn in path order
    assert positions == sorted(positions)


def test_a_subgraph_hit_draws_its_entities(graph_engine: Engine) -> None:
    hit = graph_engine.retrieve(QUESTION, k=1, unit="subgraph").hits[0]
    markup = hit._repr_html_()
    parsed(markup)
    assert "<svg" in markup
    for name in set(hit.meta["names"].values()):
        assert esc(name)[:20] in markup


def test_neighbors_draw_with_the_seed_marked(graph_engine: Engine) -> None:
    seed = graph_engine.retrieve("Velvet Lanterns", k=1, unit="node").hits[0]
    result = graph_engine.graph("neighbors", seed_ids=[seed.id], hops=1, k=10)
    assert [n.id for n in result.nodes if n.seed] == [seed.id]
    assert result.to_wire()["nodes"][0]["seed"] is True
    assert "seed" not in result.to_wire()["nodes"][1]  # absent, never false or null
    markup = result._repr_html_()
    parsed(markup)
    assert markup.count("<svg") == 1 and "1 seed" in markup
    assert "candidates" not in visible(markup)  # counts the op does not keep are not shown


def test_local_names_its_entities_within_the_filter(graph_engine: Engine) -> None:
    result = graph_engine.graph("local", query=QUESTION, k=3)
    assert result.nodes and any(n.seed for n in result.nodes)
    assert {n.name for n in result.nodes} >= {"Midnight Harbor", "Velvet Lanterns"}
    ids = {n.id for n in result.nodes}
    assert all(e.src in ids and e.dst in ids for e in result.edges or [])
    markup = result._repr_html_()
    parsed(markup)
    assert "passages" in markup and "<svg" in markup

    # The query names entities of both teams; under the filter only the other team's are
    # linked, drawn or joined.
    scoped = graph_engine.graph("local", query="Midnight Harbor, Bergen and Glass Orchard",
                                k=5, filter={"field": "team", "op": "eq", "value": "other"})
    shown = {n.name for n in scoped.nodes or []}
    assert "Glass Orchard" in shown
    music_only = {"Midnight Harbor", "Bergen", "Oskar Brandvik", "Tromsø", "1979", "1974"}
    assert not shown & music_only, shown
    assert all(h.id.startswith(("doc:glass-orchard", "doc:hostile")) for h in scoped.hits or [])


def test_global_and_communities_render(graph_engine: Engine) -> None:
    answer = graph_engine.graph("global", query="Which bands does this wiki describe?",
                                token_budget=120)
    text = visible(answer._repr_html_())
    assert answer.summary and " ".join(answer.summary.split())[:40] in text
    assert "community" in text
    store = graph_engine.communities()
    assert store is not None
    markup = store._repr_html_()
    page = parsed(markup)
    top = store.level(store.top_level)
    assert f"{len(store.by_id):,} communities over {store.top_level + 1} levels" in visible(markup)
    assert page.tags.get("details", 0) >= len(top)
    for level in range(store.top_level + 1):
        assert f"{len(store.level(level))}" in visible(markup)


def test_the_tree_outline_nests_children_under_their_parents(graph_engine: Engine) -> None:
    tree = outline(graph_engine)
    markup = tree._repr_html_()
    page = parsed(markup)
    nodes = {n["uid"]: n for n in tree.nodes}
    assert page.tags.get("details", 0) == len(nodes)  # every node once (a small tree)
    top = max(n["level"] for n in nodes.values())
    for node in nodes.values():
        assert node["uid"] in markup
        if node["level"] == top:
            continue
        parent = next(p for p in nodes.values() if node["uid"] in p["umeta"].get("children", []))
        assert markup.index(parent["uid"]) < markup.index(node["uid"])


def test_the_engine_card_counts_units_and_shows_derived_state(graph_engine: Engine) -> None:
    markup = graph_engine._repr_html_()
    text = visible(markup)
    stats = graph_engine.stats()
    assert f"{stats['documents']} documents" in text and graph_engine.index_version in text
    for kind in ("chunk", "node", "triplet", "community", "tree-node", "path"):
        assert kind in text
    assert "composed per query" in text and "current" in text
    lagging = engine_card(EngineFacts(
        path="/x", index_version="v9", backend="milvus", embedder="m", dimension=3,
        counts={"documents": 1, "chunk": 2, "node": 4},
        derived={"node": {"levels": [0], "counts": {"0": 4}, "reflects": "v7",
                          "current": False, "error": "BackendUnavailable: <b>down</b>"}}))
    text = visible(lagging)
    assert "lagging" in text and "reflects v7" in text and "<b>down</b>" in text
    assert "L0: 4" in text and "backend milvus" in text


def test_a_dataframe_has_one_row_per_hit(graph_engine: Engine) -> None:
    result = graph_engine.retrieve(QUESTION, k=3)
    frame = result.to_dataframe()
    assert list(frame["rank"]) == [1, 2, 3]
    assert list(frame["id"]) == [h.id for h in result.hits]
    assert {"confidence", "doc_id", "title", "score_dense", "score_sparse"} <= set(frame.columns)
    assert frame["doc_id"][0] == result.hits[0].chunk.doc_id
    assert GraphResult().to_dataframe().empty


def test_without_pandas_a_dataframe_is_a_clear_import_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"rcp-agentic\[notebook\]"):
        RetrieveResult().to_dataframe()


def test_the_query_shown_is_not_part_of_the_result(graph_engine: Engine) -> None:
    result = graph_engine.retrieve(QUESTION, k=2)
    again = RetrieveResult.model_validate(result.to_wire())
    assert again == result  # equal fields, equal results, whatever query each display marks
    assert "<mark" not in again.html() and "<mark" in result.html()
    assert "<mark" in again.with_query(QUESTION).html()
    assert "Harbor</mark>" in again.html(query="harbor")


def test_results_from_a_client_render_the_same(graph_engine: Engine, tmp_path: Path) -> None:
    from rcp_agentic.client import RCPClient

    with RCPClient.in_process(graph_engine) as client:
        theirs = client.retrieve(QUESTION, k=2)
        nb = client.graph("neighbors", seed_ids=[graph_engine.retrieve(
            "Velvet Lanterns", k=1, unit="node").hits[0].id], k=5)
    ours = graph_engine.retrieve(QUESTION, k=2)
    assert isinstance(theirs, RetrieveResult) and isinstance(nb, GraphResult)
    # The same table, to the usage line (whose latency differs per call), the query marked.
    assert visible(theirs.html()).split(" ms")[0][:200] == visible(ours.html()).split(" ms")[0][:200]
    assert "<mark" in theirs.html()
    assert "<svg" in nb.html()


def test_composed_hits_name_only_entities_the_filter_lets_through(graph_engine: Engine) -> None:
    other = {"field": "team", "op": "eq", "value": "other"}
    music = {"Midnight Harbor", "Bergen", "Oskar Brandvik", "Tromsø", "1979", "1974"}
    seen = set()
    for unit in ("path", "subgraph"):
        for hit in graph_engine.retrieve("Midnight Harbor, Bergen, Glass Orchard and Lena Varg",
                                         k=5, unit=unit, filter=other).hits:
            names = set(hit.meta["names"].values())
            assert not names & music, (unit, names)
            seen |= names
            parsed(hit.html())
    assert "Glass Orchard" in seen  # the filter's own side is named and drawn


def test_a_huge_tree_outline_stays_bounded_and_counts_what_it_leaves_out() -> None:
    from rcp_agentic.display.cards import MAX_ENTRIES, tree_html
    from rcp_agentic.raptor.outline import LevelOutline, TreeOutline

    nodes: list[dict[str, Any]] = []
    for a in range(30):  # 30 roots, 30 children each, 30 grandchildren each: 27,930 nodes
        kids = []
        for b in range(30):
            grand = [f"tree:1:{a}-{b}-{c}" for c in range(30)]
            nodes += [{"uid": g, "level": 1, "text": "<b>x</b>", "tokens": 5, "covers": [1],
                       "umeta": {}} for g in grand]
            kids.append(f"tree:2:{a}-{b}")
            nodes.append({"uid": kids[-1], "level": 2, "text": "y", "tokens": 5,
                          "covers": [1] * 30, "umeta": {"children": grand}})
        nodes.append({"uid": f"tree:3:{a}", "level": 3, "text": "z", "tokens": 5,
                      "covers": [1] * 900, "umeta": {"children": kids}})
    levels = tuple(LevelOutline(level=lv, nodes=n, mean_tokens=5.0, leaves_covered=1,
                                samples=()) for lv, n in ((1, 27000), (2, 900), (3, 30)))
    tree = TreeOutline(leaves=1, documents=1, leaf_tokens=5.0, levels=levels, reflects="v1",
                       current=True, nodes=tuple(nodes))
    markup = tree_html(tree, tree.nodes)
    page = parsed(markup)
    assert page.tags["details"] == MAX_ENTRIES
    assert "and 10 more" in visible(markup)  # roots past the first 20
    assert "&lt;b&gt;x&lt;/b&gt;" in markup and len(markup) < 400_000
