"""The docstore's SQLite connections, shared by its parts: one for writes behind a lock (WAL
mode), a few for reads, write transactions that wait for other processes, and notice of
their commits.

Reads go to a small pool of their own connections (WAL lets them read beside a writer), so
a derived builder reading every live unit does not hold up a retrieve's reads; a thread
inside a write transaction reads through the writer's connection, where its own uncommitted
rows are. Several processes may open one engine directory (a server open while
``rcp-agentic index`` writes into it): a write is one ``BEGIN IMMEDIATE`` transaction that
waits up to ``busy_timeout`` seconds for another process's write, without blocking this
process's readers, and past that raises BackendUnavailable (-32010, retryable).
:meth:`Connection.refresh` notices another connection's commit (``PRAGMA data_version``) and
has the in-memory state that follows the database catch up.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from ..errors import BackendUnavailable
from .schema import install

# How long a write waits for another process's write transaction before giving up.
BUSY_TIMEOUT_SECONDS = 30.0
# SQLite's own wait per attempt (ms): short, because this process's lock is held meanwhile.
_BUSY_SLICE_MS = 100
# Read connections beside the writer's: one for a builder's long reads, one for requests.
READERS = 2


class Follower(Protocol):
    """In-memory state kept in step with the database (the term vocabulary)."""

    def catch_up(self) -> None:
        """Load what other connections committed since the last call."""

    def begin(self) -> None:
        """A write transaction started: catch up (no other writer can commit meanwhile)."""

    def rollback(self) -> None:
        """The transaction rolled back: forget what it added."""


class Connection:
    """Thread-safe SQLite in WAL mode: the writer's connection behind a lock, and a pool of
    :data:`READERS` read connections (module doc)."""

    def __init__(self, path: Path, *, busy_timeout: float = BUSY_TIMEOUT_SECONDS) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.lock = threading.RLock()
        self._writing: int | None = None  # the thread inside a write transaction
        self._readers: queue.LifoQueue[sqlite3.Connection] = queue.LifoQueue()
        self._opened: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        # Opening may meet another process creating the schema: wait for it in full.
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None,
                                  timeout=busy_timeout)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        install(self.db)
        self.db.execute(f"PRAGMA busy_timeout={_BUSY_SLICE_MS}")
        self._followers: list[Follower] = []
        self._data_version = self._read_data_version()

    def follow(self, follower: Follower) -> None:
        """Keep ``follower`` in step with commits: at :meth:`refresh` and in transactions."""
        self._followers.append(follower)

    def close(self) -> None:
        with self.lock:
            self.db.close()
        with self._readers_lock:
            for reader in self._opened:
                reader.close()
            self._opened.clear()

    def _read_data_version(self) -> int:
        return int(self.db.execute("PRAGMA data_version").fetchone()[0])

    def refresh(self) -> bool:
        """Catch up with commits of other processes; True if there were any since the last call.

        Cheap (one pragma) when nothing changed; call it at the start of each read.
        """
        with self.lock:
            current = self._read_data_version()
            if current == self._data_version:
                return False
            self._data_version = current
            for follower in self._followers:
                follower.catch_up()
            return True

    def _begin(self) -> None:
        """BEGIN IMMEDIATE, waiting for another process's write; returns holding ``lock``.

        The lock is released between attempts so this process's readers are not held up
        by a writer elsewhere.
        """
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.005
        while True:
            self.lock.acquire()
            try:
                self.db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                self.lock.release()
                if not _is_busy(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise _busy_error(self.busy_timeout) from exc
            except BaseException:
                self.lock.release()
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write, serialised with every other connection (other processes too).

        The followers catch up inside the transaction, where no other writer can commit;
        on rollback they forget what this transaction added.
        """
        self._begin()
        outer, self._writing = self._writing, threading.get_ident()
        try:
            try:
                for follower in self._followers:
                    follower.begin()
                yield self.db
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                for follower in self._followers:
                    follower.rollback()
                raise
        finally:
            self._writing = outer
            self.lock.release()

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of one read: on a read connection, or on the writer's inside a write
        transaction of this thread (which sees its own rows)."""
        if self._writing == threading.get_ident():
            with self.lock:
                return _fetch(self.db, sql, params)
        reader = self._reader()
        try:
            return _fetch(reader, sql, params)
        finally:
            self._readers.put(reader)

    def _reader(self) -> sqlite3.Connection:
        """A read connection from the pool (opened on first need, at most :data:`READERS`)."""
        try:
            return self._readers.get_nowait()
        except queue.Empty:
            pass
        with self._readers_lock:
            if len(self._opened) < READERS:
                reader = sqlite3.connect(str(self.path), check_same_thread=False,
                                         isolation_level=None, timeout=self.busy_timeout)
                reader.execute(f"PRAGMA busy_timeout={_BUSY_SLICE_MS}")
                reader.execute("PRAGMA query_only=ON")
                self._opened.append(reader)
                return reader
        return self._readers.get()


def _fetch(db: sqlite3.Connection, sql: str, params: Iterable[Any]) -> list[tuple[Any, ...]]:
    try:
        return db.execute(sql, tuple(params)).fetchall()
    except sqlite3.OperationalError as exc:
        if _is_busy(exc):  # WAL readers wait only while another process recovers
            raise _busy_error(_BUSY_SLICE_MS / 1000.0, write=False) from exc
        raise


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused because another connection holds the lock."""
    name = getattr(exc, "sqlite_errorname", "")
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc)


def _busy_error(waited: float, *, write: bool = True) -> BackendUnavailable:
    what = ("no write lock within {:g} s; nothing of this write was stored" if write
            else "the database stayed locked for {:g} s")
    return BackendUnavailable(
        f"the engine directory is busy (another process is writing): {what.format(waited)}",
        retryable=True, retryAfterMs=1000)
