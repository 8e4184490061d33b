"""Chroma server outages: writes always commit, a hung server costs at most the timeout, a server
restarted empty is refilled, and an engine opens (degraded) while its server is down.

Each test starts its own `chroma run` server (never the shared ``chroma_server``) so it
can SIGKILL, SIGSTOP or restart it. ``dense_exact_max=0`` forces Chroma-backed dense recall.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import _heartbeat, free_port, numbered_docs, retry_until_served, running_server

from rcp_agentic import BackendUnavailable, Engine
from rcp_agentic.store.chroma import CollectionLost

pytestmark = pytest.mark.chroma_server


@contextmanager
def chroma(data: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A `chroma run` server of this test alone on ``port``, storing in ``data``."""
    exe = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
    url = f"http://127.0.0.1:{port}"
    with running_server([exe, "run", "--path", str(data), "--host", "127.0.0.1", "--port",
                         str(port)], lambda: _heartbeat(url), timeout=60) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a stopped server cannot terminate


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(timeout=30)


def in_sync(eng: Engine) -> bool:
    """Chroma holds exactly the rows SQLite stores, and nothing waits in the outbox."""
    return eng.store.outbox() == [] and all(
        eng.chroma.all_ids(unit, level) == set(eng.store.rowids(unit, level))
        for unit, level in eng.store.stored_kinds())


def top_doc(eng: Engine, query: str, **options: Any) -> str:
    return str(eng.retrieve(query, k=1, unit="document", **options).hits[0].meta["doc_id"])


def assert_unavailable(exc: BackendUnavailable) -> None:
    wire = exc.to_wire()
    assert wire["code"] == -32010
    assert wire["data"]["retryable"] is True
    assert isinstance(wire["data"]["retryAfterMs"], int) and wire["data"]["retryAfterMs"] > 0
    assert "committed" not in wire["data"]


def test_server_killed_mid_add_commits_every_document_and_heals(tmp_path: Path,
                                                                embedder: Any) -> None:
    """Item 1: the server dies after the first 64-document transaction of a 100-document
    add; the call still commits all 100, Chroma-backed dense answers -32010 (not a partial
    list) while it is down, and catches up from the outbox when it is back."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    batch = numbered_docs(100)
    with ExitStack() as stack:
        server = stack.enter_context(chroma(tmp_path / "server", port))
        eng = stack.enter_context(Engine(tmp_path / "engine", embedder=embedder, chroma_url=url,
                                         dense_exact_max=0, chroma_timeout_seconds=5))
        seen: list[str] = []

        def on_document(doc_id: str) -> None:
            if not seen:  # the first transaction is committed: the server goes away
                kill(server)
            seen.append(doc_id)

        result = eng.add_documents(batch, on_document=on_document)
        assert result.ids == [d["id"] for d in batch]
        assert eng.store.document_ids() == sorted(d["id"] for d in batch)
        assert eng.store.outbox(), "the second transaction's Chroma operations were not queued"
        # Sparse serves every committed document while Chroma is down.
        assert top_doc(eng, "tok099", mode="sparse") == "o099"
        with pytest.raises(BackendUnavailable) as info:
            eng.retrieve("tok099 submarine", mode="dense")
        assert_unavailable(info.value)
        stack.enter_context(chroma(tmp_path / "server", port))
        # Same engine, no reopen: the next Chroma-backed query replays the outbox first.
        assert retry_until_served(lambda: top_doc(eng, batch[99]["text"], mode="dense")) == "o099"
        assert in_sync(eng)


def test_hung_server_times_out_and_never_blocks_writers(tmp_path: Path, embedder: Any) -> None:
    """Item 3: with the server SIGSTOPped, a dense query answers -32010 within the timeout,
    two writes commit (one of them while the other is still waiting on the server), sparse
    keeps answering; after SIGCONT, dense recall sees every write."""
    port = free_port()
    timeout = 4.0
    with ExitStack() as stack:
        server = stack.enter_context(chroma(tmp_path / "server", port))
        eng = stack.enter_context(Engine(tmp_path / "engine", embedder=embedder,
                                         chroma_url=f"http://127.0.0.1:{port}",
                                         dense_exact_max=0, chroma_timeout_seconds=timeout))
        eng.add_documents(numbered_docs(10))
        assert top_doc(eng, numbered_docs(1, 3)[0]["text"], mode="dense") == "o003"
        os.kill(server.pid, signal.SIGSTOP)
        outcome: dict[str, Any] = {}

        def run(name: str, call: Callable[[], Any]) -> threading.Thread:
            def body() -> None:
                started = time.monotonic()
                try:
                    outcome[name] = call()
                except Exception as exc:  # noqa: BLE001 - inspected below
                    outcome[name] = exc
                outcome[name + ".s"] = time.monotonic() - started

            thread = threading.Thread(target=body, daemon=True)
            thread.start()
            return thread

        first = run("add1", lambda: eng.add_documents(numbered_docs(2, 10)))
        time.sleep(1.0)  # the first write now waits on the hung server, outside the write lock
        second = run("add2", lambda: eng.add_documents(numbered_docs(2, 12)))
        second.join(timeout=timeout - 1.0)
        assert not second.is_alive(), "a write waited for another write's hung Chroma sync"
        query = run("dense", lambda: eng.retrieve("tok011 penguin", mode="dense"))
        delete = run("delete", lambda: eng.delete_documents(["o000"]))
        for thread in (first, query, delete):
            thread.join(timeout=3 * timeout + 10)
            assert not thread.is_alive(), f"a call hung with Chroma stopped: {outcome}"
        for name in ("add1", "add2"):
            assert not isinstance(outcome[name], Exception), outcome[name]
        assert outcome["delete"] == 1
        assert outcome["add1.s"] < 2 * timeout + 5, outcome
        assert isinstance(outcome["dense"], BackendUnavailable), outcome["dense"]
        assert_unavailable(outcome["dense"])
        assert outcome["dense.s"] < 2 * timeout + 5, outcome
        assert top_doc(eng, "tok013", mode="sparse") == "o013"
        assert "o000" not in eng.store.document_ids()
        os.kill(server.pid, signal.SIGCONT)
        hits = retry_until_served(lambda: eng.retrieve(numbered_docs(1, 13)[0]["text"], k=20,
                                                       mode="dense", unit="document").hits)
        got = [h.meta["doc_id"] for h in hits]
        assert got[0] == "o013" and "o000" not in got
        assert in_sync(eng)


def test_server_restarted_empty_is_refilled_without_reopening(tmp_path: Path,
                                                              embedder: Any) -> None:
    """Item 4: the server is killed and restarted on an empty directory on the same port;
    the open engine says so truthfully, recreates its collections and refills them from
    SQLite on the next query (and on the next write)."""
    port = free_port()
    with ExitStack() as stack:
        server = stack.enter_context(chroma(tmp_path / "server-a", port))
        eng = stack.enter_context(Engine(tmp_path / "engine", embedder=embedder,
                                         chroma_url=f"http://127.0.0.1:{port}",
                                         dense_exact_max=0, chroma_timeout_seconds=5))
        eng.add_documents(numbered_docs(20))
        assert top_doc(eng, numbered_docs(1, 7)[0]["text"], mode="dense") == "o007"
        kill(server)
        stack.enter_context(chroma(tmp_path / "server-b", port))
        with pytest.raises(CollectionLost) as info:
            eng.chroma.count("chunk", 0)
        assert info.value.code == -32010
        assert "restarted" in info.value.message and "refilled from SQLite" in info.value.message
        assert "reopen" not in info.value.message
        # The query heals the engine in place and is answered in full.
        assert top_doc(eng, numbered_docs(1, 7)[0]["text"], mode="dense") == "o007"
        assert in_sync(eng)
        eng.add_documents(numbered_docs(2, 20))
        assert top_doc(eng, numbered_docs(1, 21)[0]["text"], mode="dense") == "o021"
        assert in_sync(eng)


def test_server_restarted_empty_is_refilled_by_the_next_write(tmp_path: Path,
                                                              embedder: Any) -> None:
    """Item 4, write first: a write after an empty restart commits, and its sync refills
    the recreated collections with every stored row, not only the new ones."""
    port = free_port()
    with ExitStack() as stack:
        server = stack.enter_context(chroma(tmp_path / "server-a", port))
        eng = stack.enter_context(Engine(tmp_path / "engine", embedder=embedder,
                                         chroma_url=f"http://127.0.0.1:{port}",
                                         dense_exact_max=0, chroma_timeout_seconds=5))
        eng.add_documents(numbered_docs(12))
        kill(server)
        stack.enter_context(chroma(tmp_path / "server-b", port))
        eng.add_documents(numbered_docs(1, 12))
        assert in_sync(eng), "the write's sync did not refill the restarted server"
        assert top_doc(eng, numbered_docs(1, 5)[0]["text"], mode="dense") == "o005"


def test_open_while_server_down_is_degraded_then_heals(tmp_path: Path, embedder: Any) -> None:
    """Item 5: an engine opens while its server is down; sparse, exact dense and writes
    work, Chroma-backed dense answers -32010, and it heals once the server is up."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    path = tmp_path / "engine"
    with chroma(tmp_path / "server", port):
        with Engine(path, embedder=embedder, chroma_url=url) as eng:
            eng.add_documents(numbered_docs(8))
    started = time.monotonic()
    with Engine(path, embedder=embedder, chroma_url=url, dense_exact_max=0) as eng:
        assert time.monotonic() - started < 15
        assert top_doc(eng, "tok004", mode="sparse") == "o004"
        eng.add_documents(numbered_docs(2, 8))
        eng.delete_documents(["o001"])
        with pytest.raises(BackendUnavailable) as info:
            eng.retrieve("tok009 penguin", mode="dense")
        assert_unavailable(info.value)
        assert url in info.value.message
        with pytest.raises(BackendUnavailable):
            eng.reconcile()
        with Engine(path, embedder=embedder, chroma_url=url) as exact:  # dense_exact_max default
            assert top_doc(exact, numbered_docs(1, 9)[0]["text"], mode="dense") == "o009"
        with chroma(tmp_path / "server", port):
            doc = retry_until_served(lambda: top_doc(eng, numbered_docs(1, 9)[0]["text"], mode="dense"))
            assert doc == "o009"
            assert in_sync(eng)
            assert "o001" not in {h.meta["doc_id"] for h in eng.retrieve(
                numbered_docs(1, 1)[0]["text"], k=20, mode="dense", unit="document").hits}


def test_fresh_engine_created_while_server_down(tmp_path: Path, embedder: Any) -> None:
    """Item 5: creating a new engine against a server that is down succeeds too."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Engine(tmp_path / "engine", embedder=embedder, chroma_url=url,
                dense_exact_max=0) as eng:
        eng.add_documents(numbered_docs(3))
        assert top_doc(eng, "tok002", mode="sparse") == "o002"
        with chroma(tmp_path / "server", port):
            assert retry_until_served(lambda: top_doc(eng, numbered_docs(1, 2)[0]["text"],
                                                      mode="dense")) == "o002"
            assert in_sync(eng)


def test_open_against_a_hung_server_is_bounded_by_the_timeout(tmp_path: Path,
                                                              embedder: Any) -> None:
    """Items 3 and 5: connecting to a SIGSTOPped server (chromadb's client constructor has
    no timeout of its own) costs at most the timeout; the engine opens degraded and heals
    after SIGCONT."""
    port = free_port()
    timeout = 2.0
    with chroma(tmp_path / "server", port) as server:
        os.kill(server.pid, signal.SIGSTOP)
        opened: dict[str, Any] = {}

        def open_engine() -> None:
            try:
                opened["engine"] = Engine(tmp_path / "engine", embedder=embedder,
                                          chroma_url=f"http://127.0.0.1:{port}",
                                          dense_exact_max=0, chroma_timeout_seconds=timeout)
            except Exception as exc:  # noqa: BLE001 - inspected below
                opened["error"] = exc

        started = time.monotonic()
        opener = threading.Thread(target=open_engine, daemon=True)
        opener.start()
        opener.join(timeout=3 * timeout + 10)
        assert not opener.is_alive(), "opening an engine hung on a stopped Chroma server"
        assert "error" not in opened, opened.get("error")
        assert time.monotonic() - started < 3 * timeout + 10
        eng = opened["engine"]
        try:
            eng.add_documents(numbered_docs(3))
            with pytest.raises(BackendUnavailable) as info:
                eng.retrieve("tok001", mode="dense")
            assert_unavailable(info.value)
            os.kill(server.pid, signal.SIGCONT)
            assert retry_until_served(lambda: top_doc(eng, numbered_docs(1, 1)[0]["text"],
                                                      mode="dense")) == "o001"
            assert in_sync(eng)
        finally:
            eng.close()
