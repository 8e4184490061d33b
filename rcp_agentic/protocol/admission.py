"""Which worker threads an HTTP request may run on: work that waits on the LLM has its own
lane, so a slow or hung model never holds the threads that plain requests run on.

A request needs the LLM (:func:`needs_llm`) when it is ``query/transform``, ``graph``
``global`` or ``drift``, a ``retrieve`` with a ``rewrite``, or a rerank by an LLM judge, and
the engine has an LLM; a batch needs it when any of its requests does. Such work runs on
at most ``workers`` threads of its own; while they are busy it waits without holding a
thread, at most ``queue`` of it, each no longer than its deadline. Past either it is
refused at once with -32011 ``RateLimited`` and a ``retryAfterMs`` hint. Everything else
runs on the server's shared thread pool, where no LLM work ever queues.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import anyio
from starlette.concurrency import run_in_threadpool

from ..control import Spender
from ..engine import Engine
from ..errors import RateLimited
from .dispatcher import Dispatcher, Send, request_id

T = TypeVar("T")
LLM_GRAPH_OPS = frozenset({"global", "drift"})
RETRY_AFTER_MS = 1000


def _needs(engine: Engine, method: Any, params: Any) -> bool:
    if not isinstance(params, Mapping):
        return False
    judge = engine.reranker is not None and engine.reranker.method == "llm"
    if method == "query/transform":
        return True
    if method == "graph":
        return params.get("op") in LLM_GRAPH_OPS
    if method == "retrieve":
        return params.get("rewrite") not in (None, False) or (
            judge and params.get("rerank") not in (None, False))
    return method == "rerank" and judge


def needs_llm(engine: Engine, message: Any) -> bool:
    """Whether a request (or any request of a batch) may wait on the engine's LLM."""
    if engine.chat is None:
        return False
    frames = message if isinstance(message, list) else [message]
    return any(isinstance(f, Mapping) and _needs(engine, f.get("method"), f.get("params", {}))
               for f in frames)


def deadline_seconds(message: Any, server_timeout: float) -> float:
    """How long a request (the shortest of a batch) may wait: the server's timeout,
    shortened by ``_meta.deadlineMs``. A malformed value is left for the dispatcher to
    refuse."""
    frames = message if isinstance(message, list) else [message]
    wait = server_timeout
    for frame in frames:
        params = frame.get("params") if isinstance(frame, Mapping) else None
        meta = params.get("_meta") if isinstance(params, Mapping) else None
        ms = meta.get("deadlineMs") if isinstance(meta, Mapping) else None
        if isinstance(ms, (int, float)) and not isinstance(ms, bool) and math.isfinite(ms) \
                and ms >= 0:
            wait = min(wait, ms / 1000.0)
    return wait


class LLMLane:
    """The worker threads of LLM work (see the module doc)."""

    def __init__(self, workers: int, queue: int) -> None:
        if workers < 1 or queue < 0:
            raise ValueError("an LLM lane needs at least one worker and a queue >= 0")
        self.workers = workers
        self.queue = queue
        self._slots = anyio.Semaphore(workers)
        self._threads = anyio.CapacityLimiter(workers)
        self.waiting = 0

    async def run(self, wait: float, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on a lane thread, or RateLimited when none comes free in
        ``wait`` seconds or too many requests already wait."""
        if self._slots.value == 0 and self.waiting >= self.queue:
            raise RateLimited(f"{self.waiting} requests already wait for the LLM: retry later",
                              retryable=True, retryAfterMs=RETRY_AFTER_MS)
        self.waiting += 1
        try:
            with anyio.move_on_after(max(0.0, wait)) as waited:
                await self._slots.acquire()
            if waited.cancelled_caught:
                raise RateLimited("no LLM worker came free before the request's deadline",
                                  retryable=True, retryAfterMs=RETRY_AFTER_MS)
        finally:
            self.waiting -= 1
        try:
            return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs),
                                                  limiter=self._threads)
        finally:
            self._slots.release()


def refused(message: Any, err: RateLimited) -> dict[str, Any] | list[dict[str, Any]] | None:
    """The JSON-RPC answer refusing ``message`` (every request of a batch) with ``err``."""
    frames = message if isinstance(message, list) else [message]
    out = [{"jsonrpc": "2.0", "id": request_id(f), "error": err.to_wire()}
           for f in frames if not (isinstance(f, Mapping) and "id" not in f)]
    if not out:
        return None
    return out if isinstance(message, list) else out[0]


async def run_admitted(engine: Engine, lane: LLMLane, message: Any, server_timeout: float,
                       fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` for ``message`` on the LLM lane when it needs the LLM, else on the shared
    thread pool."""
    if needs_llm(engine, message):
        return await lane.run(deadline_seconds(message, server_timeout), fn, *args, **kwargs)
    return await run_in_threadpool(fn, *args, **kwargs)


async def handle_admitted(lane: LLMLane, dispatcher: Dispatcher, message: Any,
                          send: Send | None, **kwargs: Any) -> Any:
    """``dispatcher.handle(message, send, **kwargs)`` on the thread its work may take, or
    the refusal when the LLM lane is full (:func:`refused`)."""
    received = time.monotonic()
    try:
        return await run_admitted(dispatcher.engine, lane, message, dispatcher.request_timeout,
                                  dispatcher.handle, message, send, received=received,
                                  **kwargs)
    except RateLimited as err:
        return refused(message, err)


def spender(client_host: str | None, *, token_holder: bool) -> Spender:
    """Whom an HTTP request's LLM work is charged to: the holders of the server's token (one
    caller), else the anonymous caller at ``client_host``."""
    if token_holder:
        return Spender("bearer")
    return Spender(f"anonymous\0{client_host or 'unknown'}", anonymous=True)


def llm_lane(engine: Engine) -> LLMLane:
    """The lane for ``engine``: twice its LLM's calls in flight as workers (a request also
    retrieves around its calls), and four times that waiting."""
    workers = 2 * engine.config.llm_concurrency
    return LLMLane(workers, 4 * workers)
