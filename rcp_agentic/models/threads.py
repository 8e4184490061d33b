"""Thread budgets of the two model paths, so a query never waits behind an ingest's threads.

* **The query path** runs on the request's own thread with a small fixed budget
  (``query_threads``, default 1): the ONNX query encoder has that many intra-op threads, and
  torch work at query time (a cross-encoder rerank, the torch fallback of a query embedding)
  runs under :func:`caller_torch_threads`; torch's thread count belongs to the calling
  thread, so setting it there leaves every other path alone.
* **The ingest path** (document embedding for writes and the derived builders) runs on one
  process-wide thread, the :class:`IngestLane`, with ``torch_threads`` intra-op threads at a
  lower CPU priority (``ingest_nice``): an ingest on an idle machine gets every core, and a
  query thread that wants one gets it instead of waiting for a spinning team. Batches from
  several writers or engines queue on the lane instead of stacking thread teams.

Why: ``docs/internals.md``, "Thread budgets".
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


@contextmanager
def caller_torch_threads(threads: int) -> Iterator[None]:
    """Run the block's torch work on ``threads`` intra-op threads of the calling thread (its
    previous count is restored after)."""
    import torch

    before = torch.get_num_threads()
    if before != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if before != threads:
            torch.set_num_threads(before)


class IngestLane:
    """One thread running document embedding with its own torch thread count, niced."""

    def __init__(self, torch_threads: int | None, nice: int) -> None:
        self.torch_threads = torch_threads
        self.nice = nice
        self.niced = False  # whether the lane thread's priority could be lowered
        self._ident: int | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rcp-ingest",
                                        initializer=self._enter)

    def _enter(self) -> None:
        self._ident = threading.get_ident()
        if self.nice > 0 and hasattr(os, "setpriority"):
            tid = threading.get_native_id()
            try:  # on Linux a PRIO_PROCESS of a thread id sets that thread's niceness
                os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid)
                               + self.nice)
                self.niced = True
            except OSError:
                pass
        if self.torch_threads:
            import torch

            torch.set_num_threads(self.torch_threads)

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the lane (directly when already on it), its result or exception."""
        if threading.get_ident() == self._ident:
            return fn(*args)
        return self._pool.submit(fn, *args).result()


_lanes: dict[tuple[int | None, int], IngestLane] = {}
_lanes_lock = threading.Lock()


def ingest_lane(torch_threads: int | None, nice: int) -> IngestLane:
    """The process's lane for these settings (made on first use, then shared)."""
    with _lanes_lock:
        lane = _lanes.get((torch_threads, nice))
        if lane is None:
            lane = _lanes[(torch_threads, nice)] = IngestLane(torch_threads, nice)
        return lane
