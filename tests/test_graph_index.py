"""The knowledge graph on the unit seam: node and triplet units built, stored and read back.

A real engine over a small wiki-like corpus whose titled documents mention each
other (two tenants): the graph round-trips through the store, filters never leak a
unit derived from an excluded document (checked against brute force), a pinned
version sees the graph of its snapshot, an incremental update gives the units a
rebuild gives, extraction is cached per chunk, a lagging graph is folded in by the
next write, and LLM extraction goes through a framework's fake chat model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from rcp_agentic import Engine, units
from rcp_agentic.errors import OptionUnsupported
from rcp_agentic.graph.build import build_graph
from rcp_agentic.graph.build_state import GraphCache
from rcp_agentic.graph.extract_rules import BuiltinExtractor
from rcp_agentic.graph.index import GraphIndex
from rcp_agentic.graph.stored import (KINDS, canonical, live_chunks, load_graph, node_uid,
                                      triplet_uid)
from rcp_agentic.graph.model import GraphData
from rcp_agentic.store.writes import UnitRecord

# These tests read the graph each write builds as the write returns.
pytestmark = pytest.mark.inline_derived

WIKI = {
    "Toto (band)": "Toto is an American rock band formed in Los Angeles in 1977. Jeff Porcaro "
                   "was the drummer of Toto until 1992. The band released the album Toto IV in "
                   "1982, which won Grammy Awards.",
    "Jeff Porcaro": "Jeff Porcaro was an American drummer born in Hartford, Connecticut in "
                    "1954. He co-founded Toto with David Paich. Jeff Porcaro played on many "
                    "albums recorded in Los Angeles.",
    "David Paich": "David Paich is an American keyboardist and songwriter. David Paich wrote "
                   "the song Africa for Toto. He was born in Los Angeles in 1954.",
    "Africa (song)": "Africa is a song by Toto from the album Toto IV. The song Africa reached "
                     "number one in the United States in 1983. David Paich and Jeff Porcaro "
                     "wrote Africa.",
    "Los Angeles": "Los Angeles is a city in California in the United States. Many session "
                   "musicians such as Jeff Porcaro worked in Los Angeles studios.",
    "Hartford, Connecticut": "Hartford is the capital city of Connecticut in the United "
                             "States. Jeff Porcaro was born in Hartford.",
    "Grammy Awards": "The Grammy Awards are music awards presented by the Recording Academy "
                     "in the United States. Toto won several Grammy Awards in 1983.",
    "Toto IV": "Toto IV is the fourth studio album by Toto, released in 1982 by Columbia "
               "Records. Toto IV contains the song Africa and the song Rosanna.",
    "Rosanna": "Rosanna is a song by Toto from Toto IV. Jeff Porcaro created the Rosanna "
               "shuffle drum groove.",
    "Columbia Records": "Columbia Records is an American record label founded in 1889. "
                        "Columbia Records released Toto IV in 1982.",
}


def doc_id(title: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")


def corpus(titles: list[str] | None = None) -> list[dict[str, Any]]:
    """The wiki documents (all, or those titled), alternately of tenant a and b."""
    out = []
    for i, (title, text) in enumerate(WIKI.items()):
        if titles is None or title in titles:
            out.append({"id": doc_id(title), "title": title, "text": text,
                        "meta": {"tenant": "a" if i % 2 == 0 else "b"}})
    return out


@pytest.fixture(scope="module")
def graph_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Any:
    eng = Engine(tmp_path_factory.mktemp("graph") / "e", embedder=embedder, build_graph=True)
    eng.add_documents(corpus())
    yield eng
    eng.close()


def live(eng: Engine) -> dict[str, dict[str, Any]]:
    """Live node and triplet rows by uid."""
    return {row["uid"]: row for kind in KINDS for row in eng.store.live_derived(kind)}


def leaf_docs(eng: Engine) -> dict[int, str]:
    return {r: doc for r, _u, doc, _s, _t, _x in eng.store.live_leaves("chunk")}


def by_uid(graph: GraphData, eng: Engine) -> GraphData:
    """The graph with chunk keys (row numbers, engine-specific) replaced by chunk ids."""
    uid = {f"r{r}": u for r, u, _d, _s, _t, _x in eng.store.live_leaves("chunk")}
    g = canonical(graph)
    for e in g.entities.values():
        e.mentions = {uid[k]: w for k, w in sorted(e.mentions.items(), key=lambda x: uid[x[0]])}
        e.about = tuple(sorted(uid[k] for k in e.about))
    g.relations = [type(r)(r.subject, r.object, r.relation, r.evidence, r.span,
                           tuple(sorted(uid[k] for k in r.chunks)), r.weight, r.typed)
                   for r in g.relations]
    g.chunk_docs = {uid[k]: d for k, d in sorted(g.chunk_docs.items(), key=lambda x: uid[x[0]])}
    return g


# --- registry and capabilities ---------------------------------------------------------

def test_registry_places_the_graph_kinds() -> None:
    assert units.get("node").derived and units.get("triplet").derived
    assert units.get("path").composed and units.get("subgraph").composed
    assert units.derived_kinds() == ("tree-node", "node", "triplet", "community")
    assert units.stored_kinds() == ("chunk", "page", "document", "tree-node", "node", "triplet",
                                    "community")
    assert units.composed_kinds() == ("path", "subgraph")
    offered = ["subgraph", "triplet", "node", "document", "tree-node", "chunk", "page", "path"]
    assert units.ladder(offered) == ["chunk", "page", "document", "tree-node", "node", "path",
                                     "subgraph"]
    assert units.rank("triplet") is None  # narrower than a chunk: never escalated to
    assert units.calibration_family("node") == "node"
    assert not units.get("node").contains_leaves and units.get("tree-node").contains_leaves
    assert all(units.get(n).enabled_by == "build_graph" for n in ("node", "triplet", "path",
                                                                     "subgraph"))


def test_graph_is_built_and_advertised(graph_engine: Engine) -> None:
    caps = graph_engine.capabilities()
    assert {"node", "triplet"} <= set(caps["retrieve"]["units"])
    # The engine installs the path/subgraph composers when it opens with a graph.
    assert {"path", "subgraph"} <= set(caps["retrieve"]["units"])
    assert caps["graph"]["ops"] == ["local", "neighbors", "global", "drift", "communities"]
    assert caps["memory"] == {"scopes": ["global", "session"], "clues": True}
    status = caps["x-rcp-agentic"]["units"]
    assert status["node"]["current"] and status["triplet"]["current"]
    assert status["node"]["reflects"] == status["triplet"]["reflects"]  # one commit wrote both
    # The communities of that graph were committed right after it.
    assert status["community"]["reflects"] == graph_engine.index_version
    assert caps["x-rcp-agentic"]["units"]["path"] == {
        "composed": True, "reflects": status["node"]["reflects"], "current": True}
    composer = graph_engine.composers.pop("subgraph")
    try:  # a composed kind is offered only while its composer is set
        units_now = graph_engine.capabilities()["retrieve"]["units"]
        assert "path" in units_now and "subgraph" not in units_now
    finally:
        graph_engine.composers["subgraph"] = composer
    assert "subgraph" in graph_engine.capabilities()["retrieve"]["units"]


def test_no_graph_no_graph_units(engine: Engine) -> None:
    engine.add_documents(corpus(["Rosanna", "Toto IV"]))
    engine.composers["path"] = lambda *a, **k: []  # a composer alone offers nothing
    caps = engine.capabilities()
    assert not {"node", "triplet", "path", "subgraph"} & set(caps["retrieve"]["units"])
    assert engine.graph_data() is None and engine.graph_view() is None
    for unit in ("node", "triplet", "path", "subgraph"):
        with pytest.raises(OptionUnsupported):
            engine.retrieve("Rosanna", k=3, unit=unit)


def test_a_graph_without_relations_has_an_empty_triplet_list(tmp_path: Path,
                                                              embedder: Any) -> None:
    """A kind the engine builds but whose build made no unit is offered, empty: a graph of
    one entity and no relation answers ``unit: triplet`` with no hit and a note, not -32005."""
    from rcp_agentic.client import RCPClient

    question = "Which country is Oslo in?"
    with Engine(tmp_path / "e", embedder=embedder, build_graph=True,
                graph_communities=False) as eng:
        eng.add_documents([{"id": "oslo",
                            "text": "Oslo is a city in Norway. It is cold in winter."}])
        status = eng.derived_status()
        assert status["node"]["counts"] == {"0": 1} and "triplet" not in status
        assert {"node", "triplet"} <= set(eng.capabilities()["retrieve"]["units"])
        result = eng.retrieve(question, k=3, unit="triplet")
        assert result.hits == [] and result.usage is not None and result.usage.notes
        assert "builds triplet units" in result.usage.notes[0]
        assert [h.unit for h in eng.retrieve(question, k=3, unit="node").hits] == ["node"]
        with RCPClient.in_process(eng) as client:  # advertised, so a client sends it
            assert client.retrieve(question, k=3, unit="triplet").hits == []
        # A graph build that found no entity made no graph: none of its kinds is offered.
        eng.delete_documents(["oslo"])
        eng.add_documents([{"id": "wet", "text": "Oslo is cold. Bergen is wet."}])
        assert eng.graph_data() is None
        assert not {"node", "triplet"} & set(eng.capabilities()["retrieve"]["units"])
        with pytest.raises(OptionUnsupported):
            eng.retrieve(question, k=3, unit="triplet")


# --- what is stored, and read back ------------------------------------------------------

def test_load_round_trips_the_graph_written(graph_engine: Engine) -> None:
    version = graph_engine.store.index_version()
    loaded = graph_engine.graph_data()
    assert loaded is not None and graph_engine.graph_data(version) is loaded  # cached
    builder = graph_engine.builders["node"]
    assert isinstance(builder, GraphIndex)
    chunks = live_chunks(graph_engine.store)
    fresh = canonical(build_graph(chunks, BuiltinExtractor(),
                                  embed=graph_engine.embedder.embed_documents,
                                  config=builder.graph_config, cache=GraphCache()))
    assert loaded == fresh
    assert load_graph(graph_engine.store, version) == loaded
    assert "jeff porcaro" in loaded.entities and loaded.relations


def test_units_carry_text_meta_covers_and_stable_ids(graph_engine: Engine) -> None:
    graph = graph_engine.graph_data()
    assert graph is not None
    rows = live(graph_engine)
    porcaro = rows[node_uid("jeff porcaro")]
    e = graph.entities["jeff porcaro"]
    assert porcaro["text"].startswith("Jeff Porcaro") and e.description in porcaro["text"]
    assert porcaro["umeta"]["kind"] == "title" and porcaro["umeta"]["name"] == "Jeff Porcaro"
    assert set(porcaro["covers"]) == {int(k[1:]) for k in (*e.mentions, *e.about)}
    assert {"mentions", "about", "synonyms", "spans", "aliases"} <= set(porcaro["umeta"])
    docs = leaf_docs(graph_engine)
    assert [docs[r] for r in porcaro["umeta"]["about"]] == ["jeff-porcaro"]
    for span in porcaro["umeta"]["spans"]:  # each description sentence is placed in the text
        text = next(d["text"] for d in corpus() if d["id"] == span["doc_id"])
        a, b = span["at"]
        assert porcaro["text"][a:b] == " ".join(text[span["start"]:span["end"]].split())
    for r in graph.relations:
        row = rows[triplet_uid(r.subject, r.relation, r.object)]
        assert r.relation in row["text"].split("\n")[0] and r.evidence in row["text"]
        assert row["covers"] == sorted(int(k[1:]) for k in r.chunks)
        assert row["umeta"]["subject"] == node_uid(r.subject)
    kinds = {row["uid"].split(":")[0] for row in rows.values()}
    assert kinds == {"node", "triplet"}


def test_node_and_triplet_hits_through_retrieve(graph_engine: Engine) -> None:
    nodes = graph_engine.retrieve("the drummer Jeff Porcaro", k=5, unit="node").hits
    assert nodes and all(h.unit == "node" and h.provenance and h.provenance.leaves
                         for h in nodes)
    assert nodes[0].id == node_uid("jeff porcaro")
    assert nodes[0].chunk is None and "jeff-porcaro" in nodes[0].meta["doc_ids"]
    assert nodes[0].trust and nodes[0].trust.level == "community"
    triplets = graph_engine.retrieve("who was the drummer of Toto", k=5, unit="triplet",
                                     mode="sparse").hits
    assert triplets and all(h.unit == "triplet" and " — " in (h.text or "") for h in triplets)
    assert any("drummer" in (h.text or "") for h in triplets)
    budget = graph_engine.retrieve("Toto albums", k=20, unit="triplet", token_budget=60)
    assert sum(h.meta.get("chunk_token_count", 0) for h in budget.hits) <= 60


@pytest.mark.parametrize("unit", ["node", "triplet"])
@pytest.mark.parametrize("tenant", ["a", "b"])
def test_filters_never_leak_a_unit_derived_from_an_excluded_document(
        graph_engine: Engine, unit: str, tenant: str) -> None:
    docs = leaf_docs(graph_engine)
    tenant_of = {d["id"]: d["meta"]["tenant"] for d in corpus()}
    rows = [r for r in live(graph_engine).values() if r["uid"].startswith(unit)]
    # Brute force: a unit may be returned only if every chunk it covers is the tenant's.
    allowed = {r["uid"] for r in rows if all(tenant_of[docs[c]] == tenant for c in r["covers"])}
    flt = {"field": "tenant", "op": "eq", "value": tenant}
    for mode in ("hybrid", "dense", "sparse"):
        hits = graph_engine.retrieve("Toto Porcaro album song Los Angeles 1982", k=200,
                                     unit=unit, mode=mode, filter=flt).hits
        assert {h.id for h in hits} <= allowed
        assert all(tenant_of[d] == tenant for h in hits for d in h.meta["doc_ids"])
    everything = {h.id for h in graph_engine.retrieve("Toto", k=200, unit=unit, mode="dense",
                                                      filter=flt).hits}
    assert everything == allowed  # the filter holds back exactly the mixed units
    assert any(r["uid"] not in allowed for r in rows)  # which exist


def test_sessions_never_repeat_a_graph_unit(graph_engine: Engine) -> None:
    sid = "graph-session"
    first = graph_engine.retrieve("Toto", k=4, unit="node", session_id=sid).hits
    second = graph_engine.retrieve("Toto", k=4, unit="node", session_id=sid).hits
    assert first and second and not {h.id for h in first} & {h.id for h in second}
    third = graph_engine.retrieve("Toto", k=4, unit="triplet", session_id=sid).hits
    fourth = graph_engine.retrieve("Toto", k=4, unit="triplet", session_id=sid).hits
    assert third and not {h.id for h in third} & {h.id for h in fourth}


def test_graph_view_is_built_from_the_stored_graph_and_cached(graph_engine: Engine) -> None:
    view = graph_engine.graph_view()
    assert view is not None and view is graph_engine.graph_view()
    assert view.graph is graph_engine.graph_data()
    ranked = view.recall("Where was the drummer of Toto born?")
    docs = leaf_docs(graph_engine)
    assert ranked and {docs[int(k[1:])] for k, _s in ranked[:3]} & {"jeff-porcaro", "toto--band"}


# --- versions, updates, lag ---------------------------------------------------------------

LATER = {"id": "steve-lukather", "title": "Steve Lukather", "meta": {"tenant": "a"},
         "text": "Steve Lukather is the guitarist of Toto. Steve Lukather played on Toto IV "
                 "and sang on Rosanna."}


def test_pinned_version_sees_the_graph_of_its_snapshot(tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, build_graph=True)
    eng.add_documents(corpus())
    before = eng.index_version
    old_nodes = {h.id for h in eng.retrieve("Toto", k=200, unit="node").hits}
    old_graph = eng.graph_data()
    result = eng.add_documents([LATER])
    assert result.derived[0].mode == "incremental" and result.derived[0].added
    now = eng.graph_data()
    assert now is not None and "steve lukather" in now.entities
    assert old_graph is not None and "steve lukather" not in old_graph.entities
    pinned = int(before[1:])
    assert eng.graph_data(pinned) == old_graph
    assert {h.id for h in eng.retrieve("Toto", k=200, unit="node",
                                       index_version=before).hits} == old_nodes
    assert node_uid("steve lukather") in {
        h.id for h in eng.retrieve("Steve Lukather guitarist", k=200, unit="node").hits}
    assert eng.graph_view(pinned) is not eng.graph_view()
    eng.close()


def test_incremental_add_and_delete_give_the_units_a_rebuild_gives(tmp_path: Path,
                                                                   embedder: Any) -> None:
    titles = list(WIKI)
    inc = Engine(tmp_path / "inc", embedder=embedder, build_graph=True,
                 graph_weight_tolerance=0.0)
    inc.add_documents(corpus(titles[:6]))
    inc.add_documents(corpus(titles[6:]) + [LATER])
    report = inc.add_documents(corpus(["Grammy Awards"]))  # the same text again: a new row
    assert report.derived[0].counts["extracted"] == 1
    inc.delete_documents([doc_id("Grammy Awards")])
    full = Engine(tmp_path / "full", embedder=embedder, build_graph=True)
    full.add_documents([d for d in corpus() if d["id"] != doc_id("Grammy Awards")] + [LATER])

    def units_of(eng: Engine) -> dict[str, str]:
        return {uid: row["text"] for uid, row in live(eng).items()}

    assert units_of(inc) == units_of(full)
    g_inc, g_full = inc.graph_data(), full.graph_data()
    assert g_inc is not None and g_full is not None
    assert by_uid(g_inc, inc) == by_uid(g_full, full)  # weights too (tolerance 0)
    # The deleted document's own entities are gone; what others mention stays, not as a title.
    assert "recording academy" not in g_inc.entities
    assert "grammy award" in g_inc.entities and not g_inc.entities["grammy award"].about
    inc.close()
    full.close()


def test_unchanged_units_keep_their_rows_and_weights_move_within_tolerance(
        tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, build_graph=True)
    eng.add_documents(corpus())
    rows = {uid: r["rowid"] for uid, r in live(eng).items()}
    report = eng.add_documents([LATER]).derived[0]
    after = live(eng)
    kept = [uid for uid in rows if uid in after and after[uid]["rowid"] == rows[uid]]
    assert len(kept) == report.kept and report.kept > len(rows) // 2
    assert report.counts["embedded"] <= report.added  # a rewrite of the same text is not embedded
    nothing = eng.update_derived()[0]
    assert nothing.mode == "none" and nothing.version is None
    exact = eng.update_derived(full=True)[0]
    assert exact.mode == "full" and exact.counts["extracted"] == 0  # read from the leaf cache
    builder = eng.builders["node"]
    assert isinstance(builder, GraphIndex)
    fresh = canonical(build_graph(live_chunks(eng.store), BuiltinExtractor(),
                                  embed=eng.embedder.embed_documents,
                                  config=builder.graph_config))
    assert eng.graph_data() == fresh
    eng.close()


def test_a_lagging_graph_hides_changed_chunks_and_the_next_write_folds_it_in(
        tmp_path: Path, embedder: Any) -> None:
    path = tmp_path / "e"
    eng = Engine(path, embedder=embedder, build_graph=True)
    eng.add_documents(corpus())
    porcaro = node_uid("jeff porcaro")
    # A crash between the data commit and the graph commit: the data is written, the graph not.
    eng.builders = {}
    eng.add_documents([{"id": "jeff-porcaro", "title": "Jeff Porcaro", "meta": {"tenant": "a"},
                        "text": "Jeff Porcaro was a session drummer from Hartford."}])
    lagging = eng.retrieve("Jeff Porcaro drummer", k=50, unit="node")
    assert any("reflect" in n for n in lagging.usage.notes or [])
    assert porcaro not in {h.id for h in lagging.hits}  # it covers a replaced chunk
    assert eng.derived_status()["node"]["current"] is False
    graph = eng.graph_data()
    assert graph is not None and "jeff porcaro" not in graph.entities
    eng.close()
    # build_graph is in the saved configuration; no catch-up at open: the write folds it in.
    again = Engine(path, embedder=embedder, catch_up=False)
    report = again.add_documents([LATER]).derived[0]
    assert report.version is not None
    assert again.derived_status()["node"]["current"] is True
    graph = again.graph_data()
    assert graph is not None and "session drummer" in graph.entities["jeff porcaro"].description
    assert "steve lukather" in graph.entities
    hits = again.retrieve("Jeff Porcaro drummer", k=50, unit="node")
    assert porcaro in {h.id for h in hits.hits}
    assert not any("reflect" in n for n in hits.usage.notes or [])
    again.close()


def test_write_derived_commits_several_kinds_at_once_or_nothing(graph_engine: Engine,
                                                              tmp_path: Path,
                                                              embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder)
    eng.add_documents(corpus(["Rosanna"]))
    store = eng.store
    chunk = store.live_leaves("chunk")[0][0]

    def record(uid: str, unit: str) -> UnitRecord:
        return UnitRecord(uid=uid, unit=unit, level=0, idx=0, start=None, end=None,
                          page_start=None, page_end=None, tokens=2, text=f"{unit} text",
                          vector=eng.embedder.embed_documents([uid])[0], terms={unit: 1},
                          nterms=1, meta={}, covers=[chunk])

    base = store.index_version()
    assert store.write_derived(KINDS, [record("node:x", "node")], [],
                               base_version=base - 1) is None
    with pytest.raises(ValueError):
        store.write_derived(KINDS, [record("tree:x", "tree-node")], [], base_version=base)
    version = store.write_derived(KINDS, [record("node:x", "node"), record("triplet:y", "triplet")],
                                  [], base_version=base)
    assert version == base + 1
    assert {(u, n) for u, _lv, n in store.unit_kinds(version) if u in KINDS} == {
        ("node", 1), ("triplet", 1)}
    version = store.write_derived(KINDS, [], ["node:x", "triplet:y"], base_version=version)
    assert not [u for u, _lv, _n in store.unit_kinds(version) if u in KINDS]
    eng.close()


# --- extractors --------------------------------------------------------------------------

def test_llm_extractor_writes_typed_triplets_and_is_kept_without_an_llm(
        tmp_path: Path, embedder: Any) -> None:
    reply = ('{"entities": [{"name": "Rosanna", "type": "work", "description": "A song by '
             'Toto."}, {"name": "Toto", "type": "organization", "description": "A rock band."}],'
             ' "relations": [{"subject": "Rosanna", "relation": "performed by", "object": '
             '"Toto", "description": "Rosanna is a song by Toto.", "strength": 9}]}')
    llm = FakeListChatModel(responses=[reply])
    path = tmp_path / "e"
    eng = Engine(path, embedder=embedder, build_graph=True, graph_extractor="llm", llm=llm)
    report = eng.add_documents(corpus(["Rosanna", "Toto IV"])).derived[0]
    assert report.mode == "full" and report.counts["extracted"] == 2
    graph = eng.graph_data()
    assert graph is not None
    typed = [r for r in graph.relations if r.typed]
    assert typed and typed[0].relation == "performed by"
    hits = eng.retrieve("Rosanna performed by", k=5, unit="triplet", mode="sparse").hits
    assert any("performed by" in (h.text or "") for h in hits)
    version = eng.index_version
    eng.close()
    again = Engine(path, embedder=embedder)  # no LLM given: the graph is served, not rebuilt
    report = again.add_documents([LATER]).derived[0]
    assert report.mode == "none" and "LLM" in report.reason
    assert again.graph_data(int(version[1:])) == graph
    assert again.derived_status()["node"]["current"] is False
    again.close()


def test_an_unknown_extractor_is_a_configuration_error(tmp_path: Path, embedder: Any) -> None:
    from rcp_agentic.errors import InvalidParams

    with pytest.raises(InvalidParams) as err:
        Engine(tmp_path / "e", embedder=embedder, build_graph=True, graph_extractor="magic")
    assert err.value.data.get("field") == "graph_extractor"


def test_deleting_every_document_empties_the_graph(tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, build_graph=True)
    eng.add_documents(corpus(["Rosanna", "Toto IV"]))
    assert eng.graph_data() is not None
    eng.delete_documents([doc_id("Rosanna"), doc_id("Toto IV")])
    assert not live(eng) and eng.graph_data() is None and eng.graph_view() is None
    assert not {"node", "triplet"} & set(eng.capabilities()["retrieve"]["units"])
    eng.close()


def test_unit_vectors_from_sources_average_their_chunks_and_a_change_rebuilds(
        tmp_path: Path, embedder: Any) -> None:
    import numpy as np

    path = tmp_path / "e"
    # Without the name part (tests/test_node_vectors.py checks the blend).
    eng = Engine(path, embedder=embedder, build_graph=True, graph_unit_vectors="sources",
                 graph_node_name_weight=0)
    eng.add_documents(corpus(["Rosanna", "Toto IV", "Africa (song)"]))
    row = live(eng)[node_uid("toto iv")]
    chunks = eng.store.vectors(row["covers"])
    want = np.sum([chunks[int(r)] * w for r, w in row["umeta"]["mentions"].items()], axis=0)
    got = eng.store.vectors([row["rowid"]])[row["rowid"]]
    assert np.allclose(got, want / np.linalg.norm(want), atol=1e-5)
    triplet = next(r for uid, r in live(eng).items() if uid.startswith("triplet:"))
    assert np.allclose(eng.store.vectors([triplet["rowid"]])[triplet["rowid"]],
                       np.mean([chunks.get(c, eng.store.vectors([c])[c])
                                 for c in triplet["covers"]], axis=0)
                       / np.linalg.norm(np.mean([eng.store.vectors([c])[c]
                                                 for c in triplet["covers"]], axis=0)),
                       atol=1e-5)
    eng.close()
    again = Engine(path, embedder=embedder, graph_unit_vectors="text")
    report = again.update_derived()[0]
    assert report.mode == "full" and "settings changed" in report.reason
    row = live(again)[node_uid("toto iv")]
    assert np.allclose(again.store.vectors([row["rowid"]])[row["rowid"]],
                       embedder.embed_documents([row["text"]])[0], atol=1e-5)
    again.close()
