"""Derived units catch up after a crash (``rcp_agentic/catchup.py``), and the community ops
report the lag meanwhile.

A worker process (tests/ingest_worker.py) commits documents into an engine with a graph
and communities and is SIGKILLed before the derived builders run; reopening catches the
graph and communities up without any write, to what the normal write path builds, and an
engine that was open all along catches them up at its next reads. The lag
itself is made the honest way for the notes: an engine opened without builders
(``build_graph=False``) commits documents and leaves the derived kinds behind.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from test_durability import run_worker, worker

from rcp_agentic import Engine
from rcp_agentic.catchup import LOCK_FILE, POLL_SECONDS

# These tests read a crash between a write and its builders, against the units an inline write builds as the write returns.
pytestmark = pytest.mark.inline_derived

WIKI = REPO / "examples" / "wiki"
GRAPH = {"build_graph": True, "community_max_size": 3}
NEW_DOCS = [{"id": "wiki/harbor-lights.md",
             "text": "Harbor Lights Band toured Oslo with Lena Varg in 1981. Oslo welcomed "
                     "Harbor Lights Band. Lena Varg later joined Velvet Lanterns in Bergen."}]
QUESTION = "Where did Lena Varg tour with the Harbor Lights Band?"
DERIVED = ("node", "triplet", "community")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    """An engine directory over the wiki with its graph and communities current."""
    path = tmp_path_factory.mktemp("catchup") / "base"
    with Engine(path, embedder=embedder, **GRAPH, **worker.ENGINE_OPTIONS) as eng:
        eng.index_paths([WIKI])
        assert eng.lagging_builders() == [] and eng.catch_up is None
    return path


def copy_of(built: Path, tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(built, target)
    return target


def lag(path: Path) -> set[str]:
    """The derived kinds whose stored version is behind ``data_version`` (read straight from
    SQLite, no engine opened)."""
    with sqlite3.connect(path / "engine.db") as db:
        info = dict(db.execute("SELECT key, value FROM info"))
    data = int(info["data_version"])
    return {k for k in DERIVED if int(info.get(f"derived.{k}.version", 0)) < data}


def index_version(path: Path) -> int:
    """The directory's last committed version (read straight from SQLite)."""
    with sqlite3.connect(path / "engine.db") as db:
        return int(db.execute("SELECT value FROM info WHERE key = 'index_version'").fetchone()[0])


def derived_rows(eng: Engine) -> set[tuple[str, str, str]]:
    return set(eng.store.query(
        "SELECT unit, uid, text FROM units WHERE v_to IS NULL AND unit IN (?, ?, ?)", DERIVED))


def wait_current(eng: Engine, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while eng.lagging_builders():
        assert time.monotonic() < deadline, f"still lagging: {eng.lagging_builders()}"
        time.sleep(0.2)
    assert eng.catch_up is None or eng.catch_up.join(timeout)
    status = eng.derived_status()
    assert all(status[k]["current"] for k in DERIVED), status


def commit_without_builders(path: Path, embedder: Any) -> None:
    """Documents committed by an engine that has no builders: the derived kinds lag."""
    with Engine(path, embedder=embedder, build_graph=False, **worker.ENGINE_OPTIONS) as eng:
        assert eng.builders == {} and eng.catch_up is None
        eng.add_documents(NEW_DOCS)


def test_a_write_killed_before_its_derived_update_catches_up_on_reopen(
        built: Path, tmp_path: Path, embedder: Any) -> None:
    crashed = copy_of(built, tmp_path, "crashed")
    reference = copy_of(built, tmp_path, "reference")
    docs = tmp_path / "docs.json"
    docs.write_text(json.dumps(NEW_DOCS))
    acknowledged = run_worker(crashed, 0, tmp_path / "worker.log",
                              die_at="0:before-derived", extra=["--docs", str(docs)])
    assert acknowledged == []  # killed inside the call, after its documents' commit
    assert lag(crashed) == set(DERIVED)
    with Engine(crashed, embedder=embedder, **GRAPH, **worker.ENGINE_OPTIONS) as eng:
        assert eng.catch_up is not None  # started by opening, no write made
        assert "wiki/harbor-lights.md" in eng.store.document_ids()
        wait_current(eng)
        assert [(r.unit, r.mode) for r in eng.catch_up.reports] == [
            ("node", "incremental"), ("community", "incremental")]
        assert eng.catch_up.error is None
        caught_up = derived_rows(eng)
        version = eng.index_version
    assert lag(crashed) == set()
    # The same as the normal write path builds from the same start.
    with Engine(reference, embedder=embedder, **GRAPH, **worker.ENGINE_OPTIONS) as ref:
        ref.add_documents(NEW_DOCS)
        assert derived_rows(ref) == caught_up
        assert ref.index_version == version
    assert any(unit == "node" and "Lena Varg" in text for unit, _u, text in caught_up)
    # Reopening a current engine starts nothing.
    with Engine(crashed, embedder=embedder, **GRAPH, **worker.ENGINE_OPTIONS) as eng:
        assert eng.catch_up is None


def test_a_server_open_while_a_writer_dies_catches_up_without_a_write(
        built: Path, tmp_path: Path, embedder: Any) -> None:
    """A server (an engine with builders, opened before) outlives a writer SIGKILLed between
    its documents' commit and its builders: its reads notice the commit, and its worker
    catches the lagging kinds up with no further write and no reopening."""
    path = copy_of(built, tmp_path, "server")
    docs = tmp_path / "docs.json"
    docs.write_text(json.dumps(NEW_DOCS))
    with Engine(path, embedder=embedder, derived_updates="background", **GRAPH,
                **worker.ENGINE_OPTIONS) as server:
        assert server.catch_up is None and server.derived_status()["node"]["current"]
        acknowledged = run_worker(path, 0, tmp_path / "worker.log",
                                  die_at="0:before-derived", extra=["--docs", str(docs)])
        assert acknowledged == [] and lag(path) == set(DERIVED)
        deadline = time.monotonic() + 120
        while not all(server.derived_status()[k]["current"] for k in DERIVED):  # reads only
            assert time.monotonic() < deadline, server.derived_status()
            time.sleep(POLL_SECONDS)
        assert server.catch_up is not None and server.catch_up.join(60)  # its reports kept
        assert server.catch_up.error is None
        assert [r.unit for r in server.catch_up.reports] == ["node", "community"]
        hits = server.retrieve(QUESTION, k=10, unit="node")
        assert not any("reflect" in n for n in hits.usage.notes or [])
        assert any("Lena Varg" in (h.text or "") for h in hits.hits)
    assert lag(path) == set()


def test_an_inline_write_builds_under_the_directory_lock(built: Path, tmp_path: Path,
                                                       embedder: Any) -> None:
    """An inline write's builders hold ``derived.lock`` as a worker's pass does (so a server
    that noticed the commit waits instead of building it too): while another process holds
    the lock, the write has committed its documents and waits to build them."""
    import fcntl

    path = copy_of(built, tmp_path, "inline")
    errors: list[BaseException] = []

    def write(eng: Engine) -> None:
        try:
            eng.add_documents(NEW_DOCS)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    with open(path / LOCK_FILE, "a+b") as held, \
            Engine(path, embedder=embedder, derived_updates="inline", **GRAPH,
                   **worker.ENGINE_OPTIONS) as eng:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        writing = threading.Thread(target=write, args=(eng,))
        writing.start()
        deadline = time.monotonic() + 120
        while lag(path) != set(DERIVED):  # the documents' commit
            assert time.monotonic() < deadline and writing.is_alive(), errors
            time.sleep(POLL_SECONDS)
        time.sleep(5 * POLL_SECONDS)
        assert writing.is_alive() and lag(path) == set(DERIVED)
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
        writing.join(300)
        assert not writing.is_alive() and errors == []
    assert lag(path) == set()


def test_two_openers_run_one_catch_up(built: Path, tmp_path: Path, embedder: Any) -> None:
    path = copy_of(built, tmp_path, "two")
    commit_without_builders(path, embedder)
    assert lag(path) == set(DERIVED)
    start = index_version(path)  # before either worker can commit
    first = Engine(path, embedder=embedder, **GRAPH, **worker.ENGINE_OPTIONS)
    second = Engine(path, embedder=embedder, **GRAPH, **worker.ENGINE_OPTIONS)
    try:
        assert first.catch_up is not None  # the second may open after the first is done
        for eng in (first, second):
            wait_current(eng)
        builders = [eng for eng in (first, second)
                    if eng.catch_up is not None and eng.catch_up.reports]
        assert len(builders) == 1  # the other waited for the directory lock, then had no work
        catch_up = builders[0].catch_up
        assert catch_up is not None and catch_up.error is None
        assert [(r.unit, r.version is not None) for r in catch_up.reports] == [
            ("node", True), ("community", True)]
        assert second.store.index_version() == start + 2  # one commit per builder, no more
        assert derived_rows(first) == derived_rows(second)
    finally:
        first.close()
        second.close()
    assert lag(path) == set()


def test_a_write_during_catch_up_is_serialised_with_it(built: Path, tmp_path: Path,
                                                      embedder: Any) -> None:
    path = copy_of(built, tmp_path, "write")
    commit_without_builders(path, embedder)
    with Engine(path, embedder=embedder, **GRAPH, **worker.ENGINE_OPTIONS) as eng:
        assert eng.catch_up is not None
        eng.add_documents([{"id": "wiki/late.md", "text": "Nora Quist sang with Velvet "
                            "Lanterns in Tromsø in 1990."}])
        wait_current(eng)
        assert eng.catch_up.error is None
        rows = eng.store.query("SELECT unit, uid FROM units WHERE v_to IS NULL AND unit IN "
                               "(?, ?, ?)", DERIVED)
        assert len(rows) == len(set(rows))  # no unit written twice
        nodes = {text for unit, _u, text in derived_rows(eng) if unit == "node"}
        assert any("Nora Quist" in t for t in nodes) and any("Lena Varg" in t for t in nodes)


def test_close_stops_a_catch_up_waiting_for_another(built: Path, tmp_path: Path,
                                                    embedder: Any) -> None:
    """While another process holds the directory's catch-up lock, an opener's catch-up waits
    (reads report the lag); close() stops it at once and leaves the lag for the next open."""
    import fcntl

    path = copy_of(built, tmp_path, "stop")
    commit_without_builders(path, embedder)
    with open(path / LOCK_FILE, "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        eng = Engine(path, embedder=embedder, **GRAPH, **worker.ENGINE_OPTIONS)
        try:
            assert eng.catch_up is not None
            time.sleep(3 * POLL_SECONDS)
            assert eng.catch_up.running and eng.lagging_builders() == ["node", "community"]
            notes = eng.retrieve(QUESTION, k=3, unit="community").usage.notes or []
            assert any("community units reflect" in n for n in notes)
        finally:
            began = time.monotonic()
            eng.close()
        assert time.monotonic() - began < 10 * POLL_SECONDS
        assert not eng.catch_up.running and eng.catch_up.reports == []
    assert lag(path) == set(DERIVED)


@pytest.fixture()
def lagging(built: Path, tmp_path: Path, embedder: Any) -> Iterator[Engine]:
    """An engine (no builders) serving communities one write behind the documents."""
    path = copy_of(built, tmp_path, "lagging")
    eng = Engine(path, embedder=embedder, build_graph=False, **worker.ENGINE_OPTIONS)
    eng.add_documents(NEW_DOCS)
    yield eng
    eng.close()


def test_the_community_ops_report_the_lag_retrieve_reports(lagging: Engine,
                                                           embedder: Any) -> None:
    eng = lagging
    assert eng.lagging_builders() == []  # it has no builders: nothing to catch up here
    ranked = eng.retrieve(QUESTION, k=3, unit="community")
    note = next(n for n in ranked.usage.notes or [] if "community units reflect" in n)
    for op, params in (("communities", {}), ("global", {"query": QUESTION, "k": 3}),
                       ("drift", {"query": QUESTION, "k": 3})):
        res = eng.graph(op, **params)
        assert res.usage is not None and note in (res.usage.notes or []), (op, res.usage)
    # Once an engine with builders has caught up, the notes are gone.
    with Engine(eng.path, embedder=embedder, **GRAPH, **worker.ENGINE_OPTIONS) as fresh:
        wait_current(fresh)
    for op, params in (("communities", {}), ("global", {"query": QUESTION, "k": 3}),
                       ("drift", {"query": QUESTION, "k": 3})):
        res = eng.graph(op, **params)
        assert not any("reflect" in n for n in (res.usage.notes if res.usage else None) or [])
