"""Reads first (``rcp_agentic/read_first.py``) and the docstore's read connections
(``store/connection.py``): a derived build pauses at its checkpoints while a read runs,
never for longer than its bound and never so long that reads starve it; a read is not held
up by another thread's write transaction; and on a real engine, reads that never stop
during a background graph build neither deadlock nor keep the build from finishing.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from rcp_agentic import Engine
from rcp_agentic.read_first import ReadFirst, checkpoint
from rcp_agentic.store.connection import Connection

WAIT = 30.0  # generous bound on an event that must come (a hang fails, not blocks)


def test_checkpoint_outside_a_build_never_waits() -> None:
    gate = ReadFirst(max_pause=60.0)
    with gate.reading():
        checkpoint()  # no build on this thread: returns at once
    assert gate.paused_seconds == 0.0


def test_a_build_waits_for_the_read_in_flight() -> None:
    gate = ReadFirst(max_pause=60.0)
    order: list[str] = []
    at_checkpoint, read_done = threading.Event(), threading.Event()

    def build() -> None:
        with gate.building():
            at_checkpoint.set()
            checkpoint()
            order.append("build resumed")

    with gate.reading():
        worker = threading.Thread(target=build)
        worker.start()
        assert at_checkpoint.wait(WAIT)
        worker.join(0.2)  # still paused: the read is in flight
        order.append("read done")
        read_done.set()
    worker.join(WAIT)
    assert not worker.is_alive()
    assert order == ["read done", "build resumed"]
    assert gate.paused_seconds > 0


def test_reads_that_never_stop_cannot_starve_a_build() -> None:
    """A pause is bounded, and after it the build runs as long as it waited before it may
    pause again."""
    gate = ReadFirst(max_pause=0.05)
    with gate.reading(), gate.building():  # a read that outlasts the build
        checkpoint()
        waited = gate.paused_seconds
        assert waited > 0
        checkpoint()  # owed run time: no second pause right away
        assert gate.paused_seconds == waited


def test_nested_builds_restore_the_outer_one() -> None:
    gate = ReadFirst(max_pause=0.05)
    with gate.building():
        with gate.building():
            pass
        with gate.reading():
            checkpoint()  # the outer build is still this thread's
        assert gate.paused_seconds > 0


def test_a_read_is_not_held_up_by_a_write_transaction(tmp_path: Path) -> None:
    """While one thread holds a write transaction (uncommitted row), another thread reads
    at once (a read connection, the committed state); the writer's own reads see its row."""
    conn = Connection(tmp_path / "db.sqlite")
    conn.db.execute("CREATE TABLE t (x INTEGER)")
    conn.db.execute("INSERT INTO t VALUES (1)")
    inside, read = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def writer() -> None:
        with conn.transaction() as db:
            db.execute("INSERT INTO t VALUES (2)")
            seen["writer"] = conn.query("SELECT x FROM t ORDER BY x")
            inside.set()
            seen["reader finished inside"] = read.wait(WAIT)

    thread = threading.Thread(target=writer)
    thread.start()
    assert inside.wait(WAIT)
    seen["reader"] = conn.query("SELECT x FROM t ORDER BY x")
    read.set()
    thread.join(WAIT)
    assert seen == {"writer": [(1,), (2,)], "reader": [(1,)], "reader finished inside": True}
    assert conn.query("SELECT x FROM t ORDER BY x") == [(1,), (2,)]
    conn.close()
    with pytest.raises(sqlite3.ProgrammingError):
        conn.query("SELECT 1")


def test_read_connections_refuse_writes(tmp_path: Path) -> None:
    conn = Connection(tmp_path / "db.sqlite")
    conn.db.execute("CREATE TABLE t (x INTEGER)")
    with pytest.raises(sqlite3.OperationalError):
        conn.query("INSERT INTO t VALUES (1)")
    assert conn.query("SELECT COUNT(*) FROM t") == [(0,)]
    conn.close()


def test_reads_during_a_background_build(tmp_path: Path, embedder: Any) -> None:
    """A thread retrieving without pause while the background graph builds: every read
    answers, the build finishes, and a read after it finds the new document's entity."""
    docs = [{"id": f"d{i}", "text": f"Mira Olsen{i} founded the Quill Harbor Press in "
             f"Tromsø in 19{i:02d}. Quill Harbor Press printed maps."} for i in range(12)]
    with Engine(tmp_path / "e", embedder=embedder, build_graph=True, graph_communities=False,
                derived_updates="background") as eng:
        eng.add_documents(docs)
        assert eng.wait_for_derived(300)
        stop = threading.Event()
        answered: list[int] = []
        errors: list[BaseException] = []

        def reads() -> None:
            while not stop.is_set():
                try:
                    answered.append(len(eng.retrieve("Who founded Quill Harbor Press?", k=3,
                                                     graph_recall=True).hits))
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)
                    return

        reader = threading.Thread(target=reads)
        reader.start()
        try:
            eng.add_documents([{"id": "late", "text": "Ansel Brekke bought the Quill Harbor "
                                "Press from Mira Olsen3 in 1990."}])
            assert eng.wait_for_derived(300)
        finally:
            stop.set()
            reader.join(WAIT)
        assert not errors and answered and all(n == 3 for n in answered)
        names = {e.name for e in eng.graph_data().entities.values()}
        assert "Ansel Brekke" in names
