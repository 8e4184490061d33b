"""Derived units catch up off the write path: one long-lived worker per engine that folds
committed documents into the derived kinds (the RAPTOR tree, the graph, its communities).

A write commits its documents and returns; with ``derived_updates="background"`` (the
default) it then wakes this worker, which runs the lagging builders in the engine's order,
each in its own commit, while reads serve the derived units as they were and say so. The
worker also catches up after a crash: on open when a kind lags, and when a read meets a
version another process committed (:meth:`~.derived_updates.DerivedUpdates.notice`). Wake-ups
coalesce into one more pass; one pass runs at a time per directory (``derived.lock``,
:func:`directory_lock`), though correctness never depends on the lock; a builder that raises
ends the pass and its error is kept (``failures``) until it next succeeds; :meth:`stop` lets
the running builder finish its commit. Each rule in full: ``docs/internals.md``, "Catching
up".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from .build_failures import BuildFailures
from .derived import DerivedReport

if TYPE_CHECKING:
    from .builder_set import BuilderSet

try:
    import fcntl
except ImportError:  # not POSIX: no cross-process lock (see the module doc)
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

LOCK_FILE = "derived.lock"
POLL_SECONDS = 0.2  # how often a waiting worker tries the lock (and checks for stop)
# How long a commit another process made is left to that process's own builders (they take
# the lock as its write returns) before this worker tries the lock.
GRACE_SECONDS = 1.0


@contextmanager
def directory_lock(directory: Path,
                   give_up: Callable[[float], bool] | None = None) -> Iterator[bool]:
    """Hold ``derived.lock`` of ``directory`` (yields True), waiting while another process
    or engine holds it. ``give_up(seconds)`` is called between tries: it waits up to that long
    and returns True to stop waiting (yields False); without it the wait blocks. Without
    ``fcntl`` this yields True at once."""
    if fcntl is None:
        yield True
        return
    with open(directory / LOCK_FILE, "a+b") as handle:
        if give_up is None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        else:
            while not _try_lock(handle.fileno()):
                if give_up(POLL_SECONDS):
                    yield False
                    return
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class CatchUp:
    """The derived-unit worker of one engine: on each :meth:`wake`, the builders that lag
    (``builders.lagging()``, in run order) are brought up to date, one pass for every
    wake-up received before the pass began. A builder's failure is recorded in
    ``failures`` (the catalog reports it) until it next succeeds."""

    def __init__(self, directory: Path, builders: BuilderSet, *,
                 failures: BuildFailures) -> None:
        self._directory = directory
        self._builders = builders
        self._cond = threading.Condition()
        self._wanted = False   # a wake-up not yet taken by a pass
        self._due = 0.0        # when that pass may start (time.monotonic)
        self._busy = False     # a pass is running
        self._stopping = False
        self.passes = 0        # passes run (each may run several builders)
        self.reports: list[DerivedReport] = []  # what the builders did, in order
        self.failures = failures
        self.error: BaseException | None = None  # the last failure of any builder
        self._thread = threading.Thread(target=self._run, name="rcp-agentic-derived",
                                        daemon=True)

    def start(self) -> None:
        """Start the thread (once); it waits for :meth:`wake`."""
        if not self._thread.is_alive() and not self._stopping:
            self._thread.start()

    def wake(self, delay: float = 0.0) -> None:
        """Ask for a pass over the lagging builders (after a commit, or at open), ``delay``
        seconds from now at the earliest (a pass already asked for keeps its earlier time)."""
        with self._cond:
            self._want(time.monotonic() + delay)

    def _want(self, due: float) -> None:
        """Mark a pass wanted from ``due`` on (the caller holds ``_cond``)."""
        self._due = min(self._due, due) if self._wanted else due
        self._wanted = True
        self._cond.notify_all()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        """:meth:`stop` was called: no further builder starts."""
        return self._stopping

    def join(self, timeout: float | None = None) -> bool:
        """Wait until no pass runs or is asked for; returns whether that happened in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while (self._busy or self._wanted) and self._thread.is_alive():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no builder lags (True) or ``timeout`` passes (False). A builder that
        still lags after its last failure raises that failure; lag this worker was not
        told about (another process's write) gets a pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if not self._busy and not self._wanted:
                    lagging = self._builders.lagging()
                    failed = [exc for exc in map(self.failures.of_builder, lagging)
                              if exc is not None]
                    if failed:
                        raise failed[0]
                    if not lagging:
                        return True
                    if self._stopping or not self._thread.is_alive():
                        return False
                    self._want(time.monotonic())
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)

    def stop(self) -> None:
        """Run no further builder, and wait for the one running (if any) to commit."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._is_due():
                    self._cond.wait(max(0.0, self._due - time.monotonic())
                                    if self._wanted else None)
                if self._stopping:
                    return
                self._wanted = False
                self._busy = True
            try:
                self._pass()
            finally:
                with self._cond:
                    self._busy = False
                    self.passes += 1
                    self._cond.notify_all()

    def _is_due(self) -> bool:
        return self._wanted and time.monotonic() >= self._due

    def _pass(self) -> None:
        try:
            with directory_lock(self._directory, self._stopped_within) as held:
                if not held:
                    return  # stopped while another worker held the directory
                for unit in self._builders.lagging():  # again: another process may have caught up
                    if self._stopping:
                        return
                    # The builder set keeps (and clears) each builder's failure.
                    self.reports.extend(self._builders.update(only=unit))
        except Exception as exc:  # noqa: BLE001 - a thread has no caller to raise to
            self.error = exc
            log.warning("derived units did not catch up (the next write retries): %s", exc)

    def _stopped_within(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for :meth:`stop`; whether it was called."""
        with self._cond:
            return self._cond.wait_for(lambda: self._stopping, seconds)
