"""The community builder follows writes at a cost set by the write (issue 41): after adds,
replacements and deletes, the community rows it commits by patching its last run (the
graph advanced by the rows that changed, the edges patched, only the communities reached
reported and diffed) equal those a fresh process commits from the same directory, which
reads the graph and the communities whole. Real engines and SQLite; the property test
generates write sequences over a small corpus.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rcp_agentic.graph import follow
from rcp_agentic.graph.communities.config import CommunityConfig
from rcp_agentic.graph.communities.entity_graph import EdgeArrays, EntityGraph, edge_arrays
from rcp_agentic.graph.communities.index import UNIT, CommunityIndex
from rcp_agentic.graph.communities.tracking import EntityEdges
from rcp_agentic.graph.model import Entity, GraphData, Relation, Synonym
from rcp_agentic.graph.stored import canonical, graph_units, node_uid

from rcp_agentic import Engine

WIKI = REPO / "examples" / "wiki"
POOL = [
    "Lena Varg toured Oslo with Harbor Lights Band in 1981. Oslo welcomed Harbor Lights Band.",
    "Velvet Lanterns was founded in Bergen by Oskar Brandvik. Lena Varg joined Velvet Lanterns.",
    "Copper Skyline recorded Glass Orchard with Oskar Brandvik in 1979 in Bergen.",
    "The Seaside Choir sang with Harbor Lights in Oslo. Harbor Lights Band thanked the choir.",
    "Midnight Harbor is a song by Copper Skyline. Lena Varg covered Midnight Harbor in 1990.",
    "Ingrid Solheim painted the Fjord Gallery murals. Ingrid Solheim met Oskar Brandvik.",
]
WRITES = st.lists(st.tuples(st.sampled_from(["add", "replace", "delete"]),
                            st.integers(0, len(POOL) - 1)), min_size=1, max_size=5)


@pytest.fixture(autouse=True)
def always_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Advance the graph whatever the size of the change (on a graph this small most writes
    change more than the share above which a version is read whole)."""
    monkeypatch.setattr(follow, "FULL_SHARE", float("inf"))


def open_engine(path: Path, embedder: Any) -> Engine:
    """An engine building its derived units inside each write (none at open)."""
    return Engine(path, embedder=embedder, build_graph=True, community_max_size=3,
                  derived_updates="inline", catch_up=False)


@contextmanager
def graph_only(eng: Engine) -> Iterator[None]:
    """Writes run the graph's builder only (the communities are then updated when asked)."""
    every = dict(eng.builders)
    eng.builders = {unit: b for unit, b in every.items() if unit != UNIT}
    try:
        yield
    finally:
        eng.builders = every


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    """An engine directory over the wiki with its graph and communities current (closed)."""
    path = tmp_path_factory.mktemp("communities") / "base"
    with open_engine(path, embedder) as eng:
        eng.add_documents([{"id": f"wiki/{p.stem}", "title": p.stem.replace("-", " ").title(),
                            "text": p.read_text(encoding="utf-8")}
                           for p in sorted(WIKI.glob("*.md"))])
        eng.update_derived()
    return path


def rows(eng: Engine) -> dict[str, tuple[Any, ...]]:
    return {r["uid"]: (r["level"], r["text"], r["umeta"], r["covers"])
            for r in eng.store.live_derived(UNIT)}


def builder(eng: Engine) -> CommunityIndex:
    found = eng.builders[UNIT]
    assert isinstance(found, CommunityIndex)
    return found


def unique_entities(eng: Engine, doc_id: str) -> dict[str, str]:
    """Key -> name of the entities only ``doc_id``'s chunks name."""
    graph = eng.graph_data()
    if graph is None:
        return {}
    return {k: e.name for k, e in graph.entities.items()
            if all(graph.chunk_docs.get(ck) == doc_id for ck in (*e.mentions, *e.about))}


def whole_path_rows(eng: Engine, target: Path, embedder: Any) -> dict[str, tuple[Any, ...]]:
    """The community rows a fresh process commits from a copy of ``eng``'s directory (no
    state in memory: it reads the graph and the communities whole)."""
    shutil.copytree(eng.path, target)
    with open_engine(target, embedder) as fresh:
        fresh.update_derived(only=UNIT)
        return rows(fresh)


def no_whole_reads(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail if ``eng``'s community builder takes the whole path again."""
    def whole(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the community builder read the communities whole")

    monkeypatch.setattr(builder(eng), "_cluster", whole)


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(writes=WRITES)
def test_write_sequences_equal_the_whole_path(built: Path,
                                             tmp_path_factory: pytest.TempPathFactory,
                                             embedder: Any, writes: list[tuple[str, int]]
                                             ) -> None:
    root = tmp_path_factory.mktemp("seq")
    shutil.copytree(built, root / "e")
    with pytest.MonkeyPatch.context() as patch, open_engine(root / "e", embedder) as eng:
        # The first run in a process reads whole; the builder tracks from there.
        eng.add_documents([{"id": "seq/warm", "text": "Warm Hall hosted Lena Varg in 1985."}])
        eng.update_derived()
        assert builder(eng)._tracked is not None
        no_whole_reads(eng, patch)
        ids = eng.store.document_ids()
        gone: dict[str, str] = {}
        for n, (op, i) in enumerate(writes):
            with graph_only(eng):
                if op == "delete" and ids:
                    doc = ids.pop(i % len(ids))
                    gone.update(unique_entities(eng, doc))
                    eng.delete_documents([doc])
                elif op == "replace" and ids:
                    eng.add_documents([{"id": ids[i % len(ids)], "text": POOL[i]}])
                else:
                    ids.append(f"seq/{n}")
                    eng.add_documents([{"id": ids[-1], "text": POOL[i]}])
            want = whole_path_rows(eng, root / f"whole-{n}", embedder)
            eng.update_derived(only=UNIT)
            got = rows(eng)
            assert got == want
            tracked = builder(eng)._tracked
            assert tracked is not None
            whole = EntityEdges.of(tracked.graph.data,
                                   edge_arrays(tracked.graph.data, builder(eng).config))
            assert tracked.edges == whole  # the patched edges are the whole computation's
            assert all(list(near) == list(whole.adjacency[k])  # in key order, as whole
                       for k, near in tracked.edges.adjacency.items())
            graph = eng.graph_data()
            alive = set(graph.entities) if graph is not None else set()
            texts = " ".join(t for (t,) in eng.store.query(
                "SELECT text FROM documents WHERE v_to IS NULL"))
            for key, name in gone.items():
                if key in alive:
                    continue  # another document names it now
                for level, text, umeta, _covers in got.values():
                    assert key not in umeta["members"]
                    assert node_uid(key) not in umeta["entities"]
                    if name not in texts:
                        assert name not in text


def test_a_failed_commit_reads_whole_next_time(built: Path, tmp_path: Path,
                                               embedder: Any) -> None:
    """A run whose commit lost the race hands on the tracked graph's rows: the builder
    forgets its state and the next run reads whole, committing what a fresh process does."""
    shutil.copytree(built, tmp_path / "e")
    with open_engine(tmp_path / "e", embedder) as eng:
        eng.add_documents([{"id": "x/0", "text": POOL[4]}])
        eng.update_derived()
        index = builder(eng)
        assert index._tracked is not None
        write_derived = eng.store.write_derived
        with graph_only(eng):
            eng.add_documents([{"id": "x/1", "text": POOL[5]}])
        calls: list[int] = []

        def refused(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                return None
            return write_derived(*args, **kwargs)

        eng.store.write_derived = refused  # type: ignore[method-assign]
        want = whole_path_rows(eng, tmp_path / "whole", embedder)
        eng.update_derived(only=UNIT)
        assert len(calls) == 2 and index._tracked is not None
        assert rows(eng) == want


@pytest.mark.parametrize("seed", range(20))
def test_a_part_of_the_graph_is_cut_as_igraph_cuts_it(seed: int) -> None:
    """The igraph of some entities alone equals (edge order included) what igraph's
    ``induced_subgraph`` cuts from the graph of all: an update clusters the same graph."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 200))
    keys = [f"e{i:03d}" for i in range(n)]
    edges = {(keys[a], keys[b]): round(float(rng.random()), 9)
             for a, b in rng.integers(0, n, size=(3 * n, 2)).tolist() if a < b}
    part = sorted(str(k) for k in rng.choice(keys, int(rng.integers(1, n + 1)), replace=False))
    inside = set(part)
    whole = EntityGraph.of(keys, edges).graph.induced_subgraph([keys.index(k) for k in part])
    cut = EntityGraph(EdgeArrays.of(part, {p: w for p, w in edges.items()
                                           if p[0] in inside and p[1] in inside}),
                      total=n).as_induced()
    assert cut.get_edgelist() == whole.get_edgelist()
    assert cut.es["weight"] == whole.es["weight"]


def random_graph(rng: np.random.Generator, keys: list[str], chunks: int) -> GraphData:
    """A canonical graph over some of ``keys``: mentions, titles, relations, synonyms."""
    entities = {}
    for k in keys:
        if rng.random() < 0.2:
            continue
        mentions = {f"r{c}": float(rng.choice([0.5, 1.0, 2.0]))
                    for c in rng.choice(chunks, int(rng.integers(1, 4)), replace=False) + 1}
        about = tuple(f"r{c}" for c in [int(rng.integers(1, chunks + 1))] if rng.random() < 0.2)
        entities[k] = Entity(k, k.title(), str(rng.choice(["name", "date", "title"])),
                             mentions=mentions, about=about)
    present = sorted(entities)
    relations = [Relation(str(a), str(b), "rel", f"{a} and {b}.", None, ("r1",),
                          float(rng.choice([0.3, 0.7])))
                 for a, b in rng.choice(present, size=(len(present) // 2, 2)).tolist() if a != b]
    synonyms = [Synonym(str(a), str(b), 0.9)
                for a, b in rng.choice(present, size=(len(present) // 4, 2)).tolist() if a != b]
    return canonical(GraphData(entities, relations, synonyms,
                               {f"r{c}": f"d{c}" for c in range(1, chunks + 1)}))


def changed(rng: np.random.Generator, graph: GraphData, keys: list[str], chunks: int
            ) -> GraphData:
    """``graph`` with a few entities changed (a mention more or less, another kind), added
    or removed, and a relation and a synonym more or less."""
    entities = dict(graph.entities)
    for k in rng.choice(keys, int(rng.integers(1, 4)), replace=False).tolist():
        e = entities.get(k)
        if e is None:
            entities[k] = Entity(k, k.title(), "name", mentions={"r1": 1.0})
        elif rng.random() < 0.2:
            del entities[k]
        else:
            mentions = dict(e.mentions)
            c = f"r{int(rng.integers(1, chunks + 1))}"
            if c in mentions and len(mentions) > 1:
                del mentions[c]
            else:
                mentions[c] = 1.0
            kind = str(rng.choice(["name", "date"])) if rng.random() < 0.3 else e.kind
            entities[k] = replace(e, mentions=mentions, kind=kind)
    relations, synonyms = list(graph.relations[1:]), list(graph.synonyms[1:])
    present = sorted(entities)
    if len(present) > 1:
        a, b = rng.choice(present, 2, replace=False).tolist()
        relations.append(Relation(a, b, "new", f"{a} met {b}.", None, ("r2",), 0.5))
        synonyms.append(Synonym(a, b, 0.8))
    return canonical(GraphData(entities, relations, synonyms, dict(graph.chunk_docs)))


def rows_of(graph: GraphData, first: int) -> list[tuple[int, str, str, str, str]]:
    """The graph's units as ``Docstore.derived_delta`` reads them, rowids from ``first``."""
    return [(first + i, u.uid, u.unit, u.text, json.dumps(u.meta))
            for i, u in enumerate(graph_units(graph))]


@pytest.mark.parametrize("seed", range(40))
def test_patched_edges_equal_the_whole_computation(seed: int) -> None:
    """Edges patched for a random change of entities, mentions, kinds, relations and
    synonyms equal, weight for weight, the edges computed over the whole new graph."""
    rng = np.random.default_rng(seed)
    keys = [f"k{i:02d}" for i in range(int(rng.integers(3, 30)))]
    config = CommunityConfig()
    old_graph = random_graph(rng, keys, 12)
    new_graph = changed(rng, old_graph, keys, 12) if seed % 4 else random_graph(rng, keys, 12)
    docs = [(int(c[1:]), d) for c, d in old_graph.chunk_docs.items()]
    empty = follow.GraphState(0, GraphData(), None, [], [])
    before = follow._Patch(empty, follow.GraphRows()).apply(1, rows_of(old_graph, 1000), [],
                                                           docs, [])
    # A unit whose text and umeta did not change keeps its row; every other row is replaced.
    old_rows = {row[1:]: row[0] for row in rows_of(old_graph, 1000)}
    new_rows = rows_of(new_graph, 5000)
    kept = {row[1:] for row in new_rows} & old_rows.keys()
    entered = [row for row in new_rows if row[1:] not in kept]
    left = [rowid for unit, rowid in old_rows.items() if unit not in kept]
    assert before.rows is not None
    after = follow._Patch(before, before.rows).apply(2, entered, left, [], [])
    assert after.data.entities == new_graph.entities
    edges = EntityEdges.of(before.data, edge_arrays(before.data, config))
    patched, _moved = edges.patched(after, config)
    assert patched == EntityEdges.of(after.data, edge_arrays(after.data, config))
    assert all(list(near) == sorted(near) for near in patched.adjacency.values())
    assert edges == EntityEdges.of(before.data, edge_arrays(before.data, config))  # unchanged
