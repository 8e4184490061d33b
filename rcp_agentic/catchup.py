"""Derived units catch up after a crash: a background thread that folds committed documents
into the derived kinds whose builders did not run.

A write commits its documents, then runs the derived builders (tree, graph, communities)
inline, each in its own commit. A process that dies in between leaves
``derived.<kind>.version`` behind ``data_version``: reads serve the derived units as they
were and say so in ``usage.notes``. An engine that owns builders starts a
:class:`CatchUp` when it opens and finds a kind lagging; it runs the lagging builders,
in the engine's order (the graph before its communities), off the opening thread
(the community builder can take minutes on a large graph), and reads report the lag
until each builder commits.

* **One at a time.** One thread per engine. Across processes (and engines) on one
  directory a catch-up holds ``derived.lock`` (``flock``; released by the OS if the
  process dies): a second opener waits for it, then finds nothing left to do. Without
  ``fcntl`` the lock is skipped; correctness never depends on it: a builder commits only
  on the index version it read (``Docstore.write_derived``) and recomputes otherwise.
* **Writes.** Each builder runs under the engine's write lock, like a write's own update:
  a write during catch-up waits for the builder running, then updates the rest itself.
* **Close.** :meth:`stop` asks the thread to stop and joins it: the builder running
  finishes its commit (a builder cannot be cut mid-way; a commit is all or nothing), the
  others are left for the next open or write.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .derived import DerivedReport

try:
    import fcntl
except ImportError:  # not POSIX: no cross-process lock (see the module doc)
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

LOCK_FILE = "derived.lock"
POLL_SECONDS = 0.2  # how often a waiting catch-up tries the lock (and checks for stop)


class CatchUp:
    """One background catch-up of the derived kinds ``lagging()`` names (builder units),
    each brought up to date by ``update(unit)``."""

    def __init__(self, directory: Path, lagging: Callable[[], list[str]],
                 update: Callable[[str], list[DerivedReport]]) -> None:
        self._lock_path = directory / LOCK_FILE
        self._lagging = lagging
        self._update = update
        self._stop = threading.Event()
        self.reports: list[DerivedReport] = []  # what the builders did, in order
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="rcp-agentic-catch-up",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the catch-up to end; returns whether it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self) -> None:
        """Run no further builder, and wait for the one running (if any) to commit."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        try:
            with self._directory_lock() as held:
                if not held:
                    return  # stopped while another catch-up held the directory
                for unit in self._lagging():  # again: another process may have caught up
                    if self._stop.is_set():
                        return
                    self.reports.extend(self._update(unit))
        except Exception as exc:  # noqa: BLE001 - a thread has no caller to raise to
            self.error = exc
            log.warning("derived units did not catch up (the next write retries): %s", exc)

    @contextmanager
    def _directory_lock(self) -> Iterator[bool]:
        if fcntl is None:
            yield True
            return
        with open(self._lock_path, "a+b") as handle:
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if self._stop.wait(POLL_SECONDS):
                        yield False
                        return
            try:
                yield True
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
