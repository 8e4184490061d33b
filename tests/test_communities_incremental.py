"""The community builder follows writes at a cost set by the write (issue 41): after adds,
replacements and deletes, the community rows it commits by patching its last run (the
graph advanced by the rows that changed, the edges patched, only the communities reached
reported and diffed) equal those a fresh process commits from the same directory, which
reads the graph and the communities whole. Real engines and SQLite; the property test
generates write sequences over a small corpus.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rcp_agentic.graph import follow
from rcp_agentic.graph.communities.index import UNIT, CommunityIndex
from rcp_agentic.graph.stored import node_uid

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
