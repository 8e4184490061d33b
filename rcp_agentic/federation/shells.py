"""The two shells that perform a federated call's steps (:mod:`.core`) and decide nothing.

:class:`Threads` uses blocking clients, each engine asked in a daemon thread (an engine stuck
past the deadline never blocks exit); :class:`Tasks` uses this event loop's asyncio clients,
each engine asked in a task, cancelled at the deadline (sending ``notifications/cancel``,
§7.14); a given blocking client is run in a thread. Each opens the clients it needs and
closes the ones it opened.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, TypeVar

from ..client import AsyncRCPClient, RCPClient
from ..client.registry import EngineSpec
from ..client.steps import adrive, drive
from .core import Call, Connect, Gather, Member, Step, collect

R = TypeVar("R")


def spawn(fn: Callable[..., R], *args: Any) -> Future[R]:
    """Run ``fn(*args)`` in a daemon thread: an engine stuck past the deadline never blocks exit."""
    future: Future[R] = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - the caller gets it from the future
            future.set_exception(exc)

    threading.Thread(target=run, name="rcp-federation", daemon=True).start()
    return future


class Threads:
    """The sync shell: blocking clients (``Member.sync``), one daemon thread per engine."""

    def __init__(self, client_options: Mapping[str, Any]) -> None:
        self.client_options = client_options
        self._lock = threading.Lock()

    def run(self, steps: Generator[Any, Any, R]) -> R:
        """Perform ``steps``; their return value."""
        return drive(steps, self.perform)

    def perform(self, step: Step) -> Any:
        if isinstance(step, Gather):
            futures = {spawn(self.run, ask): m for m, ask in step.asks}
            return drive(collect(futures, step), lambda w: wait(
                w.pending, timeout=w.seconds, return_when=FIRST_COMPLETED))
        if isinstance(step, Connect):
            client = self.client(step.member)
            client.initialize()
            return client
        return step.client.call(step.method, step.params, timeout=step.timeout,
                                strict=step.strict)

    def client(self, m: Member) -> RCPClient:
        with self._lock:
            if m.sync is None:
                if isinstance(m.source, AsyncRCPClient):
                    raise TypeError(f"engine {m.id!r} is an AsyncRCPClient: use aretrieve")
                m.sync = (m.source.connect(**self.client_options)
                          if isinstance(m.source, EngineSpec)
                          else RCPClient.in_process(m.source, **self.client_options))
                m.owned = True
            return m.sync

    def close(self, members: Iterable[Member]) -> None:
        """Close the clients this shell opened."""
        for m in members:
            if m.owned and m.sync is not None:
                m.sync.close()
                m.sync, m.owned = None, False


class Tasks:
    """The asyncio shell: each event loop's own clients, one task per engine; a given blocking
    client's steps go to ``threads`` in a worker thread."""

    def __init__(self, threads: Threads) -> None:
        self._threads = threads
        self._lock = threading.Lock()
        self._clients: dict[asyncio.AbstractEventLoop, dict[str, AsyncRCPClient]] = {}
        self._cancelled: set[asyncio.Task[Any]] = set()

    async def run(self, steps: Generator[Any, Any, R]) -> R:
        """Perform ``steps``; their return value."""
        return await adrive(steps, self.perform)

    async def perform(self, step: Step) -> Any:
        if isinstance(step, Gather):
            return await self._gather(step)
        if isinstance(step, Call) and not isinstance(step.client, RCPClient):
            return await step.client.call(step.method, step.params, timeout=step.timeout,
                                          strict=step.strict)
        if isinstance(step, Connect) and (client := self.client(step.member)) is not None:
            await client.initialize()
            return client
        # A given blocking client (RCPClient): its connect or call in a worker thread.
        return await asyncio.wrap_future(spawn(self._threads.perform, step))

    async def _gather(self, step: Gather) -> Any:
        tasks = {asyncio.create_task(self.run(ask)): m for m, ask in step.asks}
        try:
            return await adrive(collect(tasks, step), lambda w: asyncio.wait(
                w.pending, timeout=w.seconds, return_when=asyncio.FIRST_COMPLETED))
        finally:
            for t in tasks:  # cancelling sends notifications/cancel (§7.14); don't wait for it
                if not t.done():
                    t.cancel()
                    self._cancelled.add(t)
                    t.add_done_callback(self._cancelled.discard)

    def client(self, m: Member) -> AsyncRCPClient | None:
        """This loop's async client for ``m`` (None: a given sync client, run in a thread)."""
        if isinstance(m.source, AsyncRCPClient):
            return m.source
        if isinstance(m.source, RCPClient):
            return None
        loop = asyncio.get_running_loop()
        with self._lock:
            for old in [lp for lp in self._clients if lp.is_closed()]:
                del self._clients[old]  # its clients died with it (subprocesses are reaped)
            clients = self._clients.setdefault(loop, {})
            if m.id not in clients:
                clients[m.id] = (m.source.connect_async(**self._threads.client_options)
                                 if isinstance(m.source, EngineSpec)
                                 else AsyncRCPClient.in_process(m.source,
                                                                **self._threads.client_options))
            return clients[m.id]

    def close(self) -> None:
        """Close the clients of every event loop that is neither closed nor running."""
        with self._lock:
            loops, self._clients = self._clients, {}
        for loop, clients in loops.items():
            if not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(asyncio.gather(*(c.close() for c in clients.values())))

    async def aclose(self) -> None:
        """Close this event loop's clients."""
        with self._lock:
            clients = self._clients.pop(asyncio.get_running_loop(), {})
        await asyncio.gather(*(c.close() for c in clients.values()))
