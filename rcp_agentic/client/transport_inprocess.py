"""In-process transport: a :class:`~rcp_agentic.protocol.dispatcher.Dispatcher` in front of an Engine.

Messages go through a JSON round trip both ways, so results, errors and their
shapes are exactly what a wire transport would deliver. Calls run in worker
threads (the caller can time out or cancel while the engine works); progress
frames come from the dispatcher's ``send`` callback, and ``notifications/cancel``
is handed to the dispatcher directly from the caller's thread, so it never
queues behind the call it targets.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .errors import InternalError, TransportError
from .transport import (
    AsyncTransport,
    Frame,
    Message,
    Transport,
    deliver,
    encode,
    request_ids,
    settle,
    settle_response,
)

if TYPE_CHECKING:
    from ..engine import Engine
    from ..protocol.dispatcher import Dispatcher

log = logging.getLogger("rcp_agentic.client")


def _wire(message: Any) -> Any:
    """``message`` as a peer would parse it from the wire."""
    return json.loads(encode(message))


def _response_from_wire(response: Any, message: Message) -> Any:
    """The dispatcher's answer as it would arrive; a non-finite number becomes -32603, as on the wire."""
    if response is None:
        return None
    try:
        return json.loads(json.dumps(response, allow_nan=False))
    except ValueError:
        ids = request_ids(message)
        error = InternalError("the server produced a non-finite number").to_wire()
        return {"jsonrpc": "2.0", "id": ids[0] if len(ids) == 1 else None, "error": error}


class _Endpoint:
    """The dispatcher, called as a transport would: progress frames go to ``send``."""

    def __init__(self, target: Engine | Dispatcher) -> None:
        from ..protocol.dispatcher import Dispatcher

        self.dispatcher = target if isinstance(target, Dispatcher) else Dispatcher(target)

    def call(self, wire: Any, message: Message, send: Callable[[Frame], None]) -> Any:
        try:
            response = self.dispatcher.handle(wire, send=send)
        except Exception as exc:  # the dispatcher promises never to raise
            raise TransportError(f"the dispatcher raised {exc!r}") from exc
        return _response_from_wire(response, message)

    def notify(self, frame: Frame) -> None:
        self.dispatcher.handle(_wire(frame))


class InProcessTransport(Transport):
    """Synchronous in-process transport (worker threads run the dispatcher)."""

    def __init__(self, target: Engine | Dispatcher, *, max_workers: int = 4) -> None:
        super().__init__()
        self._endpoint = _Endpoint(target)
        self.dispatcher = self._endpoint.dispatcher
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="rcp-inprocess")
        self._closed = False

    def _send(self, frame: Frame) -> None:
        deliver(self.on_notification, _wire(frame))

    def submit(self, message: Message, *, timeout: float | None, progress: bool) -> Future[Any]:
        if self._closed:
            raise TransportError("the in-process client is closed")
        wire = _wire(message)
        future = self._new_future()

        def run() -> None:
            try:
                settle_response(future, self._endpoint.call(wire, message, self._send))
            except Exception as exc:  # a TransportError, or a JSON failure: the caller must hear
                settle(future, exc=exc)

        self._count_sent()
        self._pool.submit(run)
        return future

    def abandon(self, message: Message) -> None:
        pass  # the worker's answer lands on a Future that is already settled

    def notify(self, frame: Frame) -> None:
        if not self._closed:
            self._count_sent()
            self._endpoint.notify(frame)

    def close(self) -> None:
        """Stop the workers (the engine stays open: it belongs to the caller)."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._fail_pending(TransportError("the in-process client was closed"))


class AsyncInProcessTransport(AsyncTransport):
    """Asyncio in-process transport (``asyncio.to_thread`` runs the dispatcher)."""

    def __init__(self, target: Engine | Dispatcher) -> None:
        super().__init__()
        self._endpoint = _Endpoint(target)
        self.dispatcher = self._endpoint.dispatcher
        self._closed = False

    async def request(self, message: Message, *, timeout: float | None, progress: bool) -> Any:
        if self._closed:
            raise TransportError("the in-process client is closed")
        wire = _wire(message)
        loop = asyncio.get_running_loop()

        def send(frame: Frame) -> None:  # runs in the worker thread
            try:
                loop.call_soon_threadsafe(deliver, self.on_notification, _wire(frame))
            except RuntimeError:  # the loop is gone: nobody is listening any more
                pass

        self._count_sent()
        return await asyncio.to_thread(self._endpoint.call, wire, message, send)

    async def notify(self, frame: Frame) -> None:
        if not self._closed:
            self._count_sent()
            self._endpoint.notify(frame)

    async def aclose(self) -> None:
        self._closed = True
