"""Community hierarchy: the entity graph, the size cap, complete levels, stable ids,
determinism, incremental updates and the JSON form (real leidenalg)."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcp_agentic.errors import InvalidParams
from rcp_agentic.graph import (BuiltinExtractor, ChunkText, Entity, GraphCache, GraphData,
                               Relation, Synonym, build_graph, update_graph)
from rcp_agentic.graph.communities.build import (CommunityHierarchy, build_communities,
                                                 community_id, entity_edges, modularity,
                                                 update_communities)
from rcp_agentic.graph.communities.config import CommunityConfig


def graph_of(nodes: list[str], edges: list[tuple[str, str, float]],
             synonyms: Sequence[tuple[str, str, float]] = ()) -> GraphData:
    """Entities joined only by relations (and synonyms): no passages."""
    ents = {k: Entity(key=k, name=k, kind="name") for k in nodes}
    rels = [Relation(a, b, "and", "", None, (), w) for a, b, w in edges]
    return GraphData(entities=ents, relations=rels,
                     synonyms=[Synonym(a, b, s) for a, b, s in synonyms])


def clique(prefix: str, n: int, w: float = 1.0) -> list[tuple[str, str, float]]:
    return [(f"{prefix}{i}", f"{prefix}{j}", w) for i in range(n) for j in range(i + 1, n)]


def check(h: CommunityHierarchy, entities: set[str], cap: int) -> None:
    """Every structural promise of a hierarchy."""
    comms = h.communities
    for level in range(h.top_level + 1):
        members = [m for c in h.level(level) for m in c.members]
        assert len(members) == len(set(members)), f"overlap at level {level}"
        assert set(members) == entities, f"level {level} does not cover every entity"
    for c in comms.values():
        assert c.id == community_id(c.members)
        assert list(c.members) == sorted(set(c.members))
        assert c.size >= 1
        if c.children:
            kids = [comms[x] for x in c.children]
            assert len(kids) >= 2
            assert sorted(m for k in kids for m in k.members) == list(c.members)
            assert all(k.parent == c.id for k in kids)
            assert c.height == 1 + max(k.height for k in kids)
        else:
            assert c.height == 0
            assert c.size <= cap
        if c.parent is not None:
            assert c.id in comms[c.parent].children
        lv = h.levels(c.id)
        assert lv.start == c.height and len(lv) >= 1
    assert all(c.size <= cap for c in h.level(0))


# --- hand-made graphs -------------------------------------------------------------------------

def two_cliques() -> GraphData:
    edges = clique("a", 6) + clique("b", 6) + [("a0", "b0", 0.1)] + clique("c", 3)
    nodes = sorted({x for e in edges for x in e[:2]} | {"lonely"})
    return graph_of(nodes, edges)


def test_two_cliques_split_at_the_bridge_and_isolated_entities_are_kept() -> None:
    g = two_cliques()
    h = build_communities(g, CommunityConfig(max_community_size=6))
    check(h, set(g.entities), 6)
    roots = sorted(tuple(c.members) for c in h.roots())
    assert roots == [("a0", "a1", "a2", "a3", "a4", "a5"), ("b0", "b1", "b2", "b3", "b4", "b5"),
                     ("c0", "c1", "c2"), ("lonely",)]
    assert h.top_level == 0
    lonely = h.membership(0)["lonely"]
    assert h.communities[lonely].members == ("lonely",)


def test_cap_forces_a_hierarchy_and_levels_count_from_the_leaves() -> None:
    g = two_cliques()
    h = build_communities(g, CommunityConfig(max_community_size=4))
    check(h, set(g.entities), 4)
    assert h.top_level >= 1
    top = {tuple(c.members) for c in h.level(h.top_level)}
    assert ("a0", "a1", "a2", "a3", "a4", "a5") in top       # coarsest: the cliques
    assert len(h.level(0)) > len(h.level(h.top_level))       # finest: more, smaller
    small = h.communities[h.membership(0)["c0"]]              # unsplit: every level, same id
    assert small.members == ("c0", "c1", "c2")
    assert list(h.levels(small.id)) == list(range(h.top_level + 1))
    assert all(h.membership(level)["c1"] == small.id for level in range(h.top_level + 1))


def test_a_star_that_leiden_keeps_whole_is_still_cut_to_the_cap() -> None:
    edges = [("hub", f"s{i:02d}", 1.0) for i in range(20)]
    g = graph_of(sorted({"hub"} | {f"s{i:02d}" for i in range(20)}), edges)
    h = build_communities(g, CommunityConfig(max_community_size=5))
    check(h, set(g.entities), 5)
    assert max(c.size for c in h.level(0)) <= 5


def test_last_resort_cut_covers_every_entity_in_pieces_of_the_cap() -> None:
    from rcp_agentic.graph.communities.entity_graph import EntityGraph
    from rcp_agentic.graph.communities.split import chunks

    edges = {("hub", f"s{i:02d}"): 1.0 + i for i in range(12)}
    nodes = sorted({"hub", "lone"} | {f"s{i:02d}" for i in range(12)})
    pieces = [[nodes[i] for i in p] for p in chunks(EntityGraph.of(nodes, edges).graph, 4)]
    assert sorted(m for p in pieces for m in p) == nodes
    assert [len(p) for p in pieces] == [4, 4, 4, 2]
    assert pieces[0] == ["hub", "s09", "s10", "s11"]          # strongest first, by weight


def test_cap_of_one_gives_singleton_leaves() -> None:
    g = two_cliques()
    h = build_communities(g, CommunityConfig(max_community_size=1))
    check(h, set(g.entities), 1)
    assert all(c.size == 1 for c in h.level(0))


def test_empty_graph_and_graph_without_edges() -> None:
    h = build_communities(GraphData())
    assert h.communities == {} and h.top_level == 0 and h.level(0) == []
    g = graph_of(["x", "y", "z"], [])
    h = build_communities(g)
    check(h, {"x", "y", "z"}, 10)
    assert sorted(c.members for c in h.level(0)) == [("x",), ("y",), ("z",)]


def test_synonym_edges_join_entities() -> None:
    g = graph_of(["p", "q", "r"], [("p", "q", 1.0)], synonyms=[("q", "r", 0.95)])
    assert entity_edges(g) == {("p", "q"): 1.0, ("q", "r"): 0.95}
    assert entity_edges(g, CommunityConfig(synonym=0.0)) == {("p", "q"): 1.0}
    assert len(build_communities(g).roots()) == 1


def test_passage_edges_about_and_comention() -> None:
    ents = {
        "topic": Entity("topic", "Topic", "title", mentions={"r1": 1.0}, about=("r1",)),
        "x": Entity("x", "X", "name", mentions={"r1": 1.0, "r2": 1.0}),
        "y": Entity("y", "Y", "name", mentions={"r1": 2.0}),
        "1999": Entity("1999", "1999", "date", mentions={"r2": 1.0}),
    }
    g = GraphData(entities=ents, chunk_docs={"r1": "d1", "r2": "d2"})
    e = entity_edges(g, CommunityConfig(comention=0.0))
    assert e == {("topic", "x"): 1.0, ("topic", "y"): 2.0}
    e = entity_edges(g, CommunityConfig(about=0.0))
    # r1 has three entities (1/2 each pair), r2 two (1 each); dates are scaled by 0.1
    assert e == {("topic", "x"): 0.5, ("topic", "y"): 0.5, ("x", "y"): 0.5, ("1999", "x"): 0.1}
    assert entity_edges(g, CommunityConfig(about=0.0, comention=0.0)) == {}


def test_bad_config_is_a_typed_error() -> None:
    with pytest.raises(InvalidParams):
        CommunityConfig(max_community_size=0)
    with pytest.raises(InvalidParams):
        CommunityConfig(resolution=0)
    with pytest.raises(InvalidParams):
        CommunityConfig(about=-1)
    with pytest.raises(InvalidParams):
        build_communities(two_cliques()).level(7)


# --- random graphs: coverage, cap, determinism ------------------------------------------------

def random_graph(seed: int, n: int, m: int) -> GraphData:
    rng = random.Random(seed)
    nodes = [f"e{i:03d}" for i in range(n)]
    edges = []
    for _ in range(m):
        a, b = rng.sample(nodes, 2) if n > 1 else (nodes[0], nodes[0])
        if a != b:
            edges.append((a, b, round(rng.uniform(0.05, 2.0), 3)))
    return graph_of(nodes, edges)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 70), density=st.floats(0.0, 4.0),
       cap=st.integers(1, 12))
def test_every_level_is_a_complete_partition_on_random_graphs(seed: int, n: int,
                                                              density: float,
                                                              cap: int) -> None:
    g = random_graph(seed, n, int(n * density))
    cfg = CommunityConfig(max_community_size=cap)
    h = build_communities(g, cfg)
    check(h, set(g.entities), cap)
    assert build_communities(g, cfg).to_dict() == h.to_dict()       # deterministic


def test_same_input_in_another_order_gives_the_same_hierarchy() -> None:
    g = random_graph(7, 120, 300)
    h = build_communities(g, CommunityConfig(max_community_size=8))
    rng = random.Random(1)
    keys = list(g.entities)
    rng.shuffle(keys)
    rels = list(g.relations)
    rng.shuffle(rels)
    shuffled = GraphData(entities={k: g.entities[k] for k in keys}, relations=rels)
    assert build_communities(shuffled, CommunityConfig(max_community_size=8)) == h
    other_seed = build_communities(g, CommunityConfig(max_community_size=8, seed=3))
    check(other_seed, set(g.entities), 8)


def test_modularity_is_higher_for_the_coarse_partition_of_clear_clusters() -> None:
    edges = clique("a", 8) + clique("b", 8) + clique("c", 8) + [("a0", "b0", 0.2),
                                                                  ("b1", "c1", 0.2)]
    g = graph_of(sorted({x for e in edges for x in e[:2]}), edges)
    cfg = CommunityConfig(max_community_size=5)
    h = build_communities(g, cfg)
    top = modularity(h, g, h.top_level, cfg)
    assert top > 0.6
    assert modularity(h, g, 0, cfg) < top


# --- stable ids and incremental updates --------------------------------------------------------

def test_rebuild_with_another_component_keeps_the_old_ids() -> None:
    g = random_graph(3, 60, 150)
    cfg = CommunityConfig(max_community_size=6)
    h = build_communities(g, cfg)
    edges = [(a, b, w) for a, b, w in clique("new", 4)]
    bigger = graph_of(sorted(set(g.entities) | {f"new{i}" for i in range(4)}),
                      [(r.subject, r.object, r.weight) for r in g.relations] + edges)
    h2 = build_communities(bigger, cfg)
    assert set(h.communities) <= set(h2.communities)
    assert all(h2.communities[c] == h.communities[c] for c in h.communities)


def test_update_of_an_unchanged_graph_keeps_everything() -> None:
    g = random_graph(5, 80, 200)
    cfg = CommunityConfig(max_community_size=7)
    h = build_communities(g, cfg)
    h2, rep = update_communities(h, g, g, cfg)
    assert h2 == h
    assert (rep.mode, rep.kept, rep.added, rep.retired, rep.entities_reclustered,
            rep.entities_touched) == ("incremental", len(h.communities), 0, 0, 0, 0)


def test_update_touching_one_component_keeps_the_others_byte_identical() -> None:
    base = clique("a", 7) + clique("b", 9) + [("b0", "b8", 3.0)] + clique("c", 12, 0.5)
    nodes = sorted({x for e in base for x in e[:2]} | {"solo"})
    g = graph_of(nodes, base)
    cfg = CommunityConfig(max_community_size=5)
    h = build_communities(g, cfg)
    # a new entity joined to the b clique
    g2 = graph_of(nodes + ["b9"], base + [("b9", "b1", 2.0), ("b9", "b2", 2.0)])
    h2, rep = update_communities(h, g, g2, cfg)
    check(h2, set(g2.entities), 5)
    untouched = [c for c in h.communities.values() if not c.members[0].startswith("b")]
    assert untouched and all(h2.communities.get(c.id) == c for c in untouched)
    assert rep.entities_touched == 3                        # b9 and its two neighbours
    assert (rep.entities_added, rep.entities_removed) == (1, 0)
    assert rep.untouched == sum(not {"b1", "b2", "b9"} & set(c.members)
                                for c in h.communities.values())
    old_root = {m: r for r in h.roots() for m in r.members}
    hit = {old_root["b1"].id, old_root["b2"].id}
    # only the roots of the touched entities are re-clustered, plus the new entity
    assert rep.entities_reclustered == 1 + sum(h.communities[r].size for r in hit) < 10
    assert rep.roots_kept == len(h.roots()) - len(hit)
    assert all(r.id in h2.communities for r in h.roots() if r.id not in hit)
    assert rep.added >= 1 and rep.retired >= 1
    assert rep.kept + rep.retired == len(h.communities)
    assert rep.kept + rep.added == len(h2.communities)


def test_update_keeps_untouched_communities_inside_a_touched_root() -> None:
    g = random_graph(21, 150, 260)
    cfg = CommunityConfig(max_community_size=4)
    h = build_communities(g, cfg)
    biggest = max(h.roots(), key=lambda c: c.size)
    assert biggest.height >= 2
    anchor = biggest.members[0]
    g2 = graph_of(sorted(g.entities) + ["zz"],
                  [(r.subject, r.object, r.weight) for r in g.relations] + [("zz", anchor, 5.0)])
    h2, rep = update_communities(h, g, g2, cfg)
    check(h2, set(g2.entities), 4)
    assert rep.entities_touched == 2
    # communities of the touched root without zz or its anchor mostly survive (Leiden is
    # warm-started from them; one survives unless a touched entity joins it) ...
    inside = [c for c in h.communities.values()
              if set(c.members) <= set(biggest.members) and anchor not in c.members]
    assert sum(c.id in h2.communities for c in inside) >= len(inside) / 2
    # ... and an untouched one that survives keeps its subtree
    for c in h.communities.values():
        if c.id in h2.communities and anchor not in c.members:
            new = h2.communities[c.id]
            assert (new.members, new.children, new.height) == (c.members, c.children, c.height)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 60), cap=st.integers(1, 8),
       add=st.integers(0, 5), drop=st.integers(0, 5), rewire=st.integers(0, 10))
def test_updates_keep_every_level_complete_on_random_graphs(seed: int, n: int, cap: int,
                                                            add: int, drop: int,
                                                            rewire: int) -> None:
    g = random_graph(seed, n, 2 * n)
    cfg = CommunityConfig(max_community_size=cap)
    h = build_communities(g, cfg)
    rng = random.Random(seed + 1)
    nodes = sorted(g.entities)
    gone = set(rng.sample(nodes, min(drop, n - 1)))
    keep = [k for k in nodes if k not in gone] + [f"new{i}" for i in range(add)]
    edges = [(r.subject, r.object, r.weight) for r in g.relations
             if r.subject not in gone and r.object not in gone]
    for _ in range(rewire + add):
        a, b = rng.sample(keep, 2) if len(keep) > 1 else (keep[0], keep[0])
        if a != b:
            edges.append((a, b, round(rng.uniform(0.1, 3.0), 3)))
    g2 = graph_of(keep, edges)
    h2, rep = update_communities(h, g, g2, cfg)
    check(h2, set(g2.entities), cap)
    assert rep.kept + rep.added == len(h2.communities)
    assert update_communities(h2, g2, g2, cfg)[0] == h2


def test_update_removing_entities_and_edges() -> None:
    g = random_graph(11, 90, 180)
    cfg = CommunityConfig(max_community_size=6)
    h = build_communities(g, cfg)
    gone = {"e000", "e001", "e002"}
    g2 = graph_of(sorted(set(g.entities) - gone),
                  [(r.subject, r.object, r.weight) for r in g.relations
                   if r.subject not in gone and r.object not in gone])
    h2, rep = update_communities(h, g, g2, cfg)
    check(h2, set(g2.entities), 6)
    assert rep.entities_reclustered < len(g2.entities)
    assert not gone & h2.entities()


def test_small_weight_drift_is_ignored_and_a_large_one_reclusters() -> None:
    g = random_graph(2, 50, 120)
    cfg = CommunityConfig(max_community_size=6)
    h = build_communities(g, cfg)
    drift = graph_of(sorted(g.entities), [(r.subject, r.object, r.weight * 1.1)
                                          for r in g.relations])
    h2, rep = update_communities(h, g, drift, cfg)
    assert h2 == h and rep.entities_reclustered == 0
    jump = graph_of(sorted(g.entities), [(r.subject, r.object, r.weight * 3)
                                         for r in g.relations])
    h3, rep = update_communities(h, g, jump, cfg)
    check(h3, set(g.entities), 6)
    assert rep.entities_reclustered > 0


def test_update_with_another_config_or_a_foreign_hierarchy_rebuilds() -> None:
    g = random_graph(4, 40, 90)
    h = build_communities(g, CommunityConfig(max_community_size=6))
    cfg = CommunityConfig(max_community_size=4)
    h2, rep = update_communities(h, g, g, cfg)
    assert rep.mode == "full" and rep.reason == "config changed"
    assert h2 == build_communities(g, cfg)
    other = random_graph(4, 30, 50)
    h3, rep = update_communities(h, other, g, CommunityConfig(max_community_size=6))
    assert rep.mode == "full" and h3 == h


# --- a graph built from text --------------------------------------------------------------------

MUSIC = {
    "Steely Dan": "Steely Dan is an American rock band founded by Walter Becker and Donald "
                  "Fagen. Their album \"Katy Lied\" was produced by Gary Katz.",
    "Walter Becker": "Walter Becker was a co-founder of Steely Dan with Donald Fagen. Becker "
                     "played bass on \"Katy Lied\".",
    "Katy Lied": "Katy Lied is an album by Steely Dan, produced by Gary Katz for ABC Records.",
}
CHEMISTRY = {
    "Benzene": "Benzene is an aromatic hydrocarbon studied by Michael Faraday. August Kekule "
               "proposed the ring structure of Benzene.",
    "August Kekule": "August Kekule was a German chemist. Kekule worked at the University of "
                     "Ghent on Benzene.",
    "Michael Faraday": "Michael Faraday isolated Benzene at the Royal Institution in London.",
}


def chunks_of(passages: dict[str, str], first_row: int = 1) -> list[ChunkText]:
    return [ChunkText(f"r{first_row + i}", f"{t}#0", t, t, f"{t}\n\n{x}", 0)
            for i, (t, x) in enumerate(passages.items())]


def test_built_graph_communities_and_an_added_document() -> None:
    chunks = chunks_of({**MUSIC, **CHEMISTRY})
    cache = GraphCache()
    g = build_graph(chunks, BuiltinExtractor(), cache=cache)
    cfg = CommunityConfig(max_community_size=6)
    h = build_communities(g, cfg)
    check(h, set(g.entities), 6)
    member = h.membership(h.top_level)
    assert member["steely dan"] != member["benzene"]          # two topics, two components
    assert modularity(h, g, h.top_level, cfg) > 0.3
    chem = [c for c in h.communities.values()
            if "benzene" in h.communities[_root(h, c.id)].members]
    assert chem
    added = chunks_of({"Donald Fagen": "Donald Fagen co-founded Steely Dan with Walter "
                                       "Becker and sang on \"Katy Lied\"."}, first_row=10)
    g2 = update_graph(cache, BuiltinExtractor(), added=added)
    h2, rep = update_communities(h, g, g2, cfg)
    check(h2, set(g2.entities), 6)
    assert "donald fagen" in h2.entities()
    assert all(h2.communities.get(c.id) == c for c in chem)   # chemistry untouched
    assert rep.roots_kept >= 1 and rep.entities_reclustered < len(g2.entities)


def _root(h: CommunityHierarchy, cid: str) -> str:
    while (p := h.communities[cid].parent) is not None:
        cid = p
    return cid


# --- JSON form ------------------------------------------------------------------------------------

def test_json_round_trip_and_malformed_input() -> None:
    g = random_graph(9, 70, 160)
    h = build_communities(g, CommunityConfig(max_community_size=5))
    data = json.loads(json.dumps(h.to_dict()))
    back = CommunityHierarchy.from_dict(data)
    assert back == h
    row = data["communities"][0]
    assert row["levels"] == [h.levels(row["id"]).start, h.levels(row["id"]).stop - 1]
    with pytest.raises(InvalidParams):
        CommunityHierarchy.from_dict({"format": "other"})
    with pytest.raises(InvalidParams):
        CommunityHierarchy.from_dict({**data, "communities": [{"id": "x"}]})
    broken = json.loads(json.dumps(data))
    broken["communities"][0]["parent"] = "community:missing"
    with pytest.raises(InvalidParams):
        CommunityHierarchy.from_dict(broken)
