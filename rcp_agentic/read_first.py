"""Reads first: a derived build in this process pauses at its checkpoints while a read runs.

A background builder (the graph, its communities, the RAPTOR tree) is pure-Python work of
seconds per write, and Python runs one thread at a time: a retrieve that comes while it runs
waits for the interpreter lock at every step, up to the switch interval (5 ms) each time.
The engine counts the reads in flight (:meth:`ReadFirst.reading`); a builder runs under
:meth:`ReadFirst.building` and calls :func:`checkpoint` in its loops, which waits while a
read is in flight, so reads run as on an idle process. A builder cannot be starved by a
steady stream of reads: after a pause it runs at least as long as it waited (at most
:data:`MAX_PAUSE`) before it pauses again, so it keeps at least half of the time.
:func:`checkpoint` outside a build returns at once. Measured: ``bench/RESULTS.md``, "Stop
34: a commit prepares the reads after it; builds yield to reads".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

MAX_PAUSE = 0.1  # the longest a builder waits for reads at one checkpoint (seconds)

_local = threading.local()


class ReadFirst:
    """The reads in flight in one engine, and the pauses of its builds (module doc)."""

    def __init__(self, max_pause: float = MAX_PAUSE) -> None:
        self.max_pause = max_pause
        self._cond = threading.Condition()
        self._reads = 0
        self.paused_seconds = 0.0  # time builds spent waiting for reads (for benchmarks)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Mark a read in flight for the duration of the block."""
        with self._cond:
            self._reads += 1
        try:
            yield
        finally:
            with self._cond:
                self._reads -= 1
                if not self._reads:
                    self._cond.notify_all()

    @contextmanager
    def building(self) -> Iterator[None]:
        """Run the block as a build: its :func:`checkpoint` calls yield to reads."""
        outer = getattr(_local, "build", None)
        _local.build = _Build(self)
        try:
            yield
        finally:
            _local.build = outer

    def wait_for_reads(self) -> float:
        """Wait until no read is in flight, at most ``max_pause``; returns the time waited."""
        started = time.monotonic()
        with self._cond:
            self._cond.wait_for(lambda: not self._reads, timeout=self.max_pause)
        waited = time.monotonic() - started
        self.paused_seconds += waited
        return waited

    @property
    def reads_in_flight(self) -> bool:
        return self._reads > 0


class _Build:
    """One thread's build under a :class:`ReadFirst`: when it may run without pausing."""

    __slots__ = ("gate", "run_until")

    def __init__(self, gate: ReadFirst) -> None:
        self.gate = gate
        self.run_until = 0.0

    def checkpoint(self) -> None:
        if not self.gate.reads_in_flight:
            return
        now = time.monotonic()
        if now < self.run_until:
            return  # owed run time after the last pause
        waited = self.gate.wait_for_reads()
        self.run_until = time.monotonic() + waited


def checkpoint() -> None:
    """In a build (:meth:`ReadFirst.building`), wait while a read is in flight (bounded, see
    the module doc); elsewhere return at once. Builders call it once per item of their loops."""
    build = getattr(_local, "build", None)
    if build is not None:
        build.checkpoint()
