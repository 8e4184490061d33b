"""The graph follows writes (``graph/follow.py``, ``graph/view_patch.py``): after adds,
replacements and deletes, with inline and background derived updates and with filters, the
graph and PageRank view each version gets by patching the previous one equal a full load
of that version, and so do graph-recall retrieves. Real engines and SQLite; the property
test generates write sequences over a small corpus.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rcp_agentic.graph import follow, view_patch
from rcp_agentic.graph.extract import Lexicon
from rcp_agentic.graph.stored import load_graph
from rcp_agentic.graph.ppr import GraphView

from rcp_agentic import Engine
from rcp_agentic import catalog as catalog_module
from rcp_agentic.catalog import Catalog
from rcp_agentic.store.memindex import UnitIndex

WIKI = REPO / "examples" / "wiki"
GRAPH = {"build_graph": True, "graph_communities": False}
QUERIES = ["Where did Lena Varg tour with the Harbor Lights Band?",
           "Who founded Velvet Lanterns in Bergen?",
           "What did Copper Skyline record with Oskar Brandvik?"]
POOL = [
    "Lena Varg toured Oslo with Harbor Lights Band in 1981. Oslo welcomed Harbor Lights Band.",
    "Velvet Lanterns was founded in Bergen by Oskar Brandvik. Lena Varg joined Velvet Lanterns.",
    "Copper Skyline recorded Glass Orchard with Oskar Brandvik in 1979 in Bergen.",
    "The Seaside Choir sang with Harbor Lights in Oslo. Harbor Lights Band thanked the choir.",
    "Midnight Harbor is a song by Copper Skyline. Lena Varg covered Midnight Harbor in 1990.",
    "Oskar Brandvik left Copper Skyline in 1983 and moved to Oslo with Lena Varg.",
]


@pytest.fixture(autouse=True)
def always_patch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Patch whatever the size of the change (on a graph this small most writes change more
    than the share above which a version is read whole), unless a test keeps the limits."""
    if "keeps_limits" not in request.keywords:
        monkeypatch.setattr(follow, "FULL_SHARE", float("inf"))
        monkeypatch.setattr(view_patch, "DEAD_SHARE", 1.0)
        monkeypatch.setattr(catalog_module, "MERGE_SHARE", float("inf"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    """An engine directory over the wiki with its graph current (closed again)."""
    path = tmp_path_factory.mktemp("follow") / "base"
    with Engine(path, embedder=embedder, derived_updates="inline", **GRAPH) as eng:
        eng.index_paths([WIKI])
    return path


def opened(built: Path, target: Path, embedder: Any, updates: str = "inline") -> Engine:
    shutil.copytree(built, target)
    return Engine(target, embedder=embedder, derived_updates=updates, **GRAPH)


@contextmanager
def full_loads(eng: Engine) -> Iterator[None]:
    """The engine's catalog reading each graph whole, with none of its caches (restored
    after)."""
    catalog = eng.catalog
    saved = catalog._per_version
    catalog._per_version = {name: type(cache)() for name, cache in saved.items()}
    catalog.follow_writes = False
    try:
        yield
    finally:
        catalog._per_version, catalog.follow_writes = saved, True


def edges_by_key(view: GraphView) -> dict[tuple[str, str], float]:
    """The view's adjacency by node key (entities and passages), whatever its numbering."""
    names = [("e", k) for k in view.entity_keys] + [("c", k) for k in view.chunk_keys]
    coo = view.adjacency.tocoo()
    return {(names[i][1], names[j][1]): float(w) for i, j, w in zip(coo.row, coo.col, coo.data)}


def lexicon_leaves(trie: dict[str, Any], path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for token, child in trie.items():
        if token == "":
            out[path] = child
        else:
            out.update(lexicon_leaves(child, (*path, token)))
    return out


def assert_same_view(view: GraphView, full: GraphView) -> None:
    assert set(view.e_index) == set(full.e_index)
    assert set(view.c_index) == set(full.c_index)
    got, want = edges_by_key(view), edges_by_key(full)
    assert got.keys() == want.keys()
    for edge, w in want.items():
        assert got[edge] == pytest.approx(w, rel=1e-12)
    assert all(view.df[view.e_index[k]] == full.df[i] for k, i in full.e_index.items())
    assert view.lexicon.titles == full.lexicon.titles
    assert lexicon_leaves(view.lexicon.trie) == lexicon_leaves(full.lexicon.trie)
    assert {w: set(ks) for w, ks in view.by_word.items()} == {
        w: set(ks) for w, ks in full.by_word.items()}
    for query in QUERIES:
        links = full.link(query)
        assert view.link(query) == links
        got_mass, want_mass = view.mass(links), full.mass(links)
        for k, i in full.e_index.items():
            assert got_mass[view.e_index[k]] == pytest.approx(want_mass[i], rel=1e-9, abs=1e-15)
        for ck, j in full.c_index.items():
            assert got_mass[view.n_entities + view.c_index[ck]] == pytest.approx(
                want_mass[full.n_entities + j], rel=1e-9, abs=1e-15)
        assert_same_ranking(view.recall(links=links), full.recall(links=links))


def assert_same_ranking(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    """The same keys in the same order, scores equal up to float noise (a sum in another
    order)."""
    assert [k for k, _s in got] == [k for k, _s in want]
    assert [s for _k, s in got] == pytest.approx([s for _k, s in want], rel=1e-9)


def assert_same_index(eng: Engine, version: int) -> None:
    """The chunk index merged from the previous version's equals one read whole."""
    catalog = eng.catalog
    got = catalog.index([("chunk", 0)], version)
    arrays = eng.store.unit_arrays([("chunk", 0)], version,
                                   with_vectors=got.vectors is not None)
    want = UnitIndex("chunk/0", arrays, eng.store.vocab_size(), k1=catalog.config.bm25_k1,
                     b=catalog.config.bm25_b, kinds=(("chunk", 0),), version=version)
    for name in ("rowids", "term_ids", "term_tfs", "offsets", "lengths", "page_start",
                 "page_end", "tokens", "levels"):
        assert np.array_equal(getattr(got.arrays, name), getattr(arrays, name)), name
    assert (got.arrays.uids, got.arrays.doc_ids, got.arrays.units) == (
        arrays.uids, arrays.doc_ids, arrays.units)
    if arrays.vectors is not None:
        assert np.array_equal(got.vectors, arrays.vectors)
    assert np.array_equal(got.indptr, want.indptr)
    assert np.array_equal(got.post_rows, want.post_rows)
    assert np.array_equal(got.post_impact, want.post_impact)


def hits(eng: Engine, version: int, **options: Any) -> list[tuple[str, float]]:
    res = eng.retrieve(QUERIES[0], k=8, graph_recall=True, index_version=f"v{version}",
                       **options)
    return [(h.id, h.score) for h in res.hits]


def assert_follows(eng: Engine, since: int, **options: Any) -> None:
    """Every version after ``since``, in order (so each is patched from the one before),
    equals a full load: graph, view and graph-recall hits."""
    catalog = eng.catalog
    for v in range(since + 1, eng.store.index_version() + 1):
        state = catalog.graph_state(v)
        assert state.graph == load_graph(eng.store, v)
        assert_same_index(eng, v)
        view = catalog.graph_view(v)
        got = hits(eng, v, **options)
        if state.graph is None:
            assert view is None
            continue
        assert view is not None
        assert_same_view(view, GraphView(state.graph, word_df=view.word_df))
        with full_loads(eng):
            assert_same_ranking(got, hits(eng, v, **options))


def test_adds_replacements_deletes_inline(built: Path, tmp_path: Path, embedder: Any) -> None:
    with opened(built, tmp_path / "e", embedder) as eng:
        v = eng.store.index_version()
        eng.catalog.graph_view(v)
        eng.add_documents([{"id": "new/a", "text": POOL[0]}, {"id": "new/b", "text": POOL[1]}])
        assert_follows(eng, v)
        patched = eng.catalog.graph_state(eng.store.index_version())
        assert patched.change is not None  # followed, not read whole
        assert eng.catalog._bases[(("chunk", 0),)].version == eng.store.index_version()
        v = eng.store.index_version()
        eng.add_documents([{"id": "new/a", "text": POOL[2]}])  # a replacement
        eng.delete_documents(["wiki/velvet-lanterns.md", "new/b"])
        assert_follows(eng, v)


def test_background_updates_lag_then_follow(built: Path, tmp_path: Path,
                                            embedder: Any) -> None:
    with opened(built, tmp_path / "e", embedder, "background") as eng:
        v = eng.store.index_version()
        eng.catalog.graph_view(v)
        for i, text in enumerate(POOL[:3]):
            eng.add_documents([{"id": f"bg/{i}", "text": text}])
            assert_follows(eng, v)  # right after the write: the graph lags
            v = eng.store.index_version()
            eng.wait_for_derived(300)
            assert_follows(eng, v)
            v = eng.store.index_version()


def test_filtered_graph_recall_follows(built: Path, tmp_path: Path, embedder: Any) -> None:
    with opened(built, tmp_path / "e", embedder) as eng:
        v = eng.store.index_version()
        eng.catalog.graph_view(v)
        eng.add_documents([{"id": "new/a", "text": POOL[0], "meta": {"lang": "no"}},
                           {"id": "new/b", "text": POOL[4], "meta": {"lang": "en"}}])
        assert_follows(eng, v, filter={"field": "lang", "op": "eq", "value": "no"})
        v = eng.store.index_version()
        eng.add_documents([{"id": "new/a", "text": POOL[5], "meta": {"lang": "no"}}])
        assert_follows(eng, v, filter={"field": "lang", "op": "eq", "value": "no"})


@pytest.mark.parametrize("updates", ["inline", "background"])
def test_a_commit_prepares_the_reads_after_it(built: Path, tmp_path: Path, embedder: Any,
                                              monkeypatch: pytest.MonkeyPatch,
                                              updates: str) -> None:
    """The committer prepares the version it committed (``Catalog.follow``): the graph-recall
    retrieve after a write (inline builders) and after the background graph caught up
    builds no scoring index and no PageRank view, and returns what a full load does."""
    with opened(built, tmp_path / "e", embedder, updates) as eng:
        eng.retrieve(QUERIES[0], k=8, graph_recall=True)  # the chunk pool and view are hot
        built_now: list[tuple[str, int]] = []
        build_index, make_view = Catalog._build_index, Catalog._make_graph_view

        def counted_index(self: Catalog, kinds: Any, version: int) -> Any:
            built_now.append(("index", version))
            return build_index(self, kinds, version)

        def counted_view(self: Catalog, version: int) -> Any:
            built_now.append(("view", version))
            return make_view(self, version)

        monkeypatch.setattr(Catalog, "_build_index", counted_index)
        monkeypatch.setattr(Catalog, "_make_graph_view", counted_view)
        for i, text in enumerate(POOL[:3]):
            eng.add_documents([{"id": f"prep/{i}", "text": text}])
            eng.wait_for_derived(300)
            v = eng.store.index_version()
            assert ("view", v) in built_now  # prepared by the commit ...
            mark = len(built_now)
            got = hits(eng, v)
            assert built_now[mark:] == []    # ... so the read built nothing
            with full_loads(eng):
                assert_same_ranking(got, hits(eng, v))


@pytest.mark.keeps_limits
def test_large_change_loads_whole(built: Path, tmp_path: Path, embedder: Any) -> None:
    with opened(built, tmp_path / "e", embedder) as eng:
        v = eng.store.index_version()
        eng.catalog.graph_view(v)
        eng.add_documents([{"id": f"big/{i}", "text": t} for i, t in enumerate(POOL)])
        last = eng.store.index_version()
        assert eng.catalog.graph_state(last).change is None
        assert_follows(eng, v)


def test_older_versions_load_whole(built: Path, tmp_path: Path, embedder: Any) -> None:
    """A version older than the newest cached one, or asked after the newest state handed
    its rows on, is read whole and equals a full load."""
    with opened(built, tmp_path / "e", embedder) as eng:
        v = eng.store.index_version()
        eng.add_documents([{"id": "new/a", "text": POOL[0]}])
        last = eng.store.index_version()
        assert eng.catalog.graph_state(last).graph == load_graph(eng.store, last)
        assert eng.catalog.graph_state(v).graph == load_graph(eng.store, v)
        assert eng.catalog.graph_state(v).change is None


WRITES = st.lists(st.tuples(st.sampled_from(["add", "replace", "delete"]),
                            st.integers(0, len(POOL) - 1)), min_size=1, max_size=5)


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(writes=WRITES)
def test_write_sequences_follow(built: Path, tmp_path_factory: pytest.TempPathFactory,
                                embedder: Any, writes: list[tuple[str, int]]) -> None:
    with opened(built, tmp_path_factory.mktemp("seq") / "e", embedder) as eng:
        v = eng.store.index_version()
        eng.catalog.graph_view(v)
        ids: list[str] = []
        for n, (op, i) in enumerate(writes):
            if op == "delete" and ids:
                eng.delete_documents([ids.pop(i % len(ids))])
            elif op == "replace" and ids:
                eng.add_documents([{"id": ids[i % len(ids)], "text": POOL[i]}])
            else:
                ids.append(f"seq/{n}")
                eng.add_documents([{"id": ids[-1], "text": POOL[i]}])
            assert_follows(eng, v)
            v = eng.store.index_version()


def test_lexicon_changed_equals_a_new_one() -> None:
    titles = ["Harbor Lights Band", "Toto (band)", "Toto", "the", "free guy", "Oslo",
              "Oslo (city)", "A"]
    rng = np.random.default_rng(7)
    for _ in range(50):
        removed = list(rng.choice(titles, 3, replace=False))
        added = list(rng.choice(["Bergen", "Toto (album)", "Free Guy", "Oslo", "x y"], 2))
        rest = list(titles)
        for t in removed:
            rest.remove(t)
        got = Lexicon(titles).changed(removed, added)
        want = Lexicon(rest + added)
        assert got.titles == want.titles
        assert lexicon_leaves(got.trie) == lexicon_leaves(want.trie)
        assert lexicon_leaves(Lexicon(titles).trie) == lexicon_leaves(
            Lexicon(titles).changed([], []).trie)
