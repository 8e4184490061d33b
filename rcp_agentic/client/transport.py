"""The transport interface a client drives, sync and async, and the framing helpers all share.

A transport moves JSON-RPC messages (one request object, or a batch array) and
hands back the response message; it knows nothing of capabilities, retries or
deadlines beyond the hint it is given. Notifications the server sends while a
request runs (``notifications/progress``) go to ``on_notification``, which the
client sets.
"""

from __future__ import annotations

import json
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from .errors import InvalidParams

log = logging.getLogger("rcp_agentic.client")

Frame = dict[str, Any]
Message = Frame | list[Frame]
NotificationHandler = Callable[[Frame], object]


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def encode(message: Any) -> bytes:
    """Compact single-line JSON (§5.1); InvalidParams for NaN/Infinity or unserialisable values."""
    try:
        return json.dumps(message, separators=(",", ":"), allow_nan=False,
                          default=_jsonable).encode("utf-8")
    except ValueError as exc:
        raise InvalidParams(f"params contain a non-finite number: {exc}", field="params") from None
    except TypeError as exc:
        raise InvalidParams(f"params are not JSON: {exc}", field="params") from None


def request_ids(message: Message) -> list[Any]:
    """The ids of the requests in ``message`` (notifications have none)."""
    frames = message if isinstance(message, list) else [message]
    return [f["id"] for f in frames if "id" in f]


def is_notification(frame: Any) -> bool:
    """A frame with a method and no id (§4.5)."""
    return isinstance(frame, dict) and "method" in frame and "id" not in frame


def settle(future: Future[Any], *, result: Any = None,
           exc: BaseException | None = None) -> bool:
    """Complete ``future`` unless something else already did (first answer wins); True if this did."""
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)
    except InvalidStateError:
        return False
    return True


def settle_response(future: Future[Any], response: Any) -> None:
    """Complete ``future`` with a response; one nobody waits for any more is dropped (§13.1)."""
    if not settle(future, result=response):
        log.debug("discarded a late or unknown response: %.300s", response)


def deliver(handler: NotificationHandler | None, frame: Frame) -> None:
    """Hand ``frame`` to ``handler``; a failing handler is logged, never breaks the transport."""
    if handler is None:
        return
    try:
        handler(frame)
    except Exception:
        log.exception("notification handler failed on %s", frame.get("method"))


class _Counted:
    """``frames_sent``: messages put on the wire (over HTTP: POSTs attempted), for diagnostics."""

    def __init__(self) -> None:
        self.on_notification: NotificationHandler | None = None
        self.frames_sent = 0
        self._count_lock = threading.Lock()

    def _count_sent(self) -> None:
        with self._count_lock:
            self.frames_sent += 1

    def on_initialized(self, result: dict[str, Any]) -> None:
        """Hook: the session's ``initialize`` result (e.g. an HTTP session token)."""


class Transport(_Counted, ABC):
    """A synchronous transport: ``submit`` returns a Future the transport completes."""

    def __init__(self) -> None:
        super().__init__()
        self._unsettled: set[Future[Any]] = set()

    def _new_future(self) -> Future[Any]:
        """A Future remembered until settled, so :meth:`_fail_pending` can release its waiter."""
        future: Future[Any] = Future()
        self._unsettled.add(future)
        future.add_done_callback(self._unsettled.discard)
        return future

    def _fail_pending(self, exc: BaseException) -> None:
        """Fail every request still waiting (the transport is closing)."""
        for future in list(self._unsettled):
            settle(future, exc=exc)

    @abstractmethod
    def submit(self, message: Message, *, timeout: float | None, progress: bool) -> Future[Any]:
        """Send a request or batch; the Future gets the response message or a TransportError.

        ``timeout`` is the caller's remaining deadline (a hint: the client enforces
        it); ``progress`` says the caller wants progress notifications.
        """

    @abstractmethod
    def abandon(self, message: Message) -> None:
        """Stop waiting for ``message``'s response (deadline or cancel); a late one is dropped."""

    @abstractmethod
    def notify(self, frame: Frame) -> None:
        """Send a notification (no response)."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection; requests still in flight fail with TransportError."""


class AsyncTransport(_Counted, ABC):
    """An asyncio transport: ``request`` is a coroutine; cancelling it abandons the request."""

    @abstractmethod
    async def request(self, message: Message, *, timeout: float | None, progress: bool) -> Any:
        """Send a request or batch and return its response message."""

    @abstractmethod
    async def notify(self, frame: Frame) -> None:
        """Send a notification (no response)."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release the connection; requests still in flight fail with TransportError."""
