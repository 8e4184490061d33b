"""HTTP transport (§5.2) on httpx: ``POST <base>/<method>``, batches to ``POST <base>``.

A 200 body is the JSON-RPC answer, error or not. Other statuses are transport faults: a
JSON-RPC error body is used as is (401 → -32012), otherwise the status maps to its mirror code
(429 → -32011, 503 → -32010, 500 → -32603, 413 → -32013); ``Retry-After`` becomes
``error.data.retryAfterMs``. A caller wanting progress gets ``text/event-stream`` (progress
frames, then the response, read with httpx-sse). Cancelling closes the response stream and
POSTs ``notifications/cancel``. Every request names this client's ``RCP-Session`` (random
unless given; replaced by a token the server issues in ``initialize.result._meta.session``)
so a stateful server gives each client its own lifecycle (§5.2). The sync transport runs each
request on a small worker pool so the caller can time out or cancel at once.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Generator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from httpx_sse import EventSource

from .errors import TransportError
from .steps import adrive, drive
from .transport import (AsyncTransport, Frame, Message, NotificationHandler, Transport, deliver,
                        encode, is_notification, log, request_ids, settle, settle_response)

DEFAULT_BASE_PATH = "/rcp"
NOTIFY_TIMEOUT = 5.0  # a cancel is best effort: never hold the caller long for it
SESSION_HEADER = "RCP-Session"
# Transport statuses and the JSON-RPC code each mirrors (§5.2).
STATUS_CODES = {401: -32012, 403: -32012, 413: -32013, 429: -32011, 500: -32603, 502: -32010,
                503: -32010, 504: -32010}
_ABANDONED = object()


def base_url(url: str) -> str:
    """The RCP base: ``http://host:port`` gets the default ``/rcp``; any other path is kept."""
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {url!r}")
    if parsed.path in ("", "/"):
        return url.rstrip("/") + DEFAULT_BASE_PATH
    return url.rstrip("/")


def retry_after_ms(value: str | None) -> int | None:
    """``Retry-After`` (seconds or an HTTP date) in milliseconds."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value) * 1000
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0, int((when - datetime.now(timezone.utc)).total_seconds() * 1000))


def _with_retry_after(response: Any, headers: httpx.Headers) -> Any:
    hint = retry_after_ms(headers.get("retry-after"))
    if hint is not None and isinstance(response, dict) and isinstance(response.get("error"), dict):
        error = dict(response["error"])
        data = dict(error["data"]) if isinstance(error.get("data"), dict) else {}
        data.setdefault("retryAfterMs", hint)
        error["data"] = data
        response = {**response, "error": error}
    return response


def interpret(status: int, headers: httpx.Headers, body: bytes, message: Message) -> Any:
    """The JSON-RPC response carried by an HTTP answer (synthesised for transport faults)."""
    ids = request_ids(message)
    if status == 204:
        if ids:
            raise TransportError("HTTP 204 (no body) for a request that expects a response")
        return None
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    if status == 200:
        if not isinstance(parsed, (dict, list)):
            raise TransportError("HTTP 200 without a JSON-RPC body")
        return _with_retry_after(parsed, headers)
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        error = parsed["error"]
    elif status in STATUS_CODES:
        error = {"code": STATUS_CODES[status], "message": f"HTTP {status}"}
    else:
        raise TransportError(f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}")
    response = {"jsonrpc": "2.0", "id": ids[0] if isinstance(message, dict) and ids else None,
                "error": error}
    return _with_retry_after(response, headers)


def _close_quietly(response: httpx.Response) -> None:
    """Close a response another thread may be reading; it complains, yet is closed either way."""
    try:
        response.close()
    except (httpx.HTTPError, OSError, RuntimeError) as exc:
        log.debug("closing an abandoned response: %r", exc)


def _content_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "").partition(";")[0].strip().lower()


def _sse_frame(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise TransportError(f"an SSE event is not JSON: {data[:200]!r}") from None


class _Http:
    """URLs, headers and timeouts shared by the sync and async transports."""

    def __init__(self, url: str, token: str | None, headers: Mapping[str, str] | None,
                 connect_timeout: float, session: str | bool) -> None:
        self.base = base_url(url)
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        if session:
            self.headers[SESSION_HEADER] = session if isinstance(session, str) \
                else secrets.token_hex(12)
        self.connect_timeout = connect_timeout

    def url(self, message: Message) -> str:
        return self.base if isinstance(message, list) else f"{self.base}/{message['method']}"

    def request_headers(self, progress: bool) -> dict[str, str]:
        accept = "text/event-stream, application/json" if progress else "application/json"
        return {**self.headers, "Accept": accept}

    def timeout(self, seconds: float | None) -> httpx.Timeout:
        # The client enforces the deadline; this only keeps an abandoned worker from hanging.
        total = None if seconds is None else seconds + 5.0
        return httpx.Timeout(total, connect=self.connect_timeout if total is None
                             else min(self.connect_timeout, total))

    def notification(self, frame: Frame) -> Generator[dict[str, Any], httpx.Response, None]:
        """A notification as one step, the POST's arguments (sent back: its response); a
        failure is a TransportError."""
        url = self.url(frame)
        try:
            response = yield {"url": url, "content": encode(frame), "headers": self.headers,
                              "timeout": NOTIFY_TIMEOUT}
        except httpx.HTTPError as exc:
            raise TransportError(f"HTTP notification to {url} failed: {exc!r}") from exc
        if response.status_code not in (200, 202, 204):
            raise TransportError(f"HTTP {response.status_code} for the notification to {url}")

    def on_initialized(self, result: dict[str, Any]) -> None:
        meta = result.get("_meta")
        session = meta.get("session") if isinstance(meta, dict) else None
        if isinstance(session, str):  # a stateful server's session token (§5.2)
            self.headers[SESSION_HEADER] = session


class _Session:
    """The base URL and the session both HTTP transports keep in their :class:`_Http`."""

    _cfg: _Http

    @property
    def base(self) -> str:
        """The RCP base URL (``<base>/<method>`` is each method's)."""
        return self._cfg.base

    @property
    def session(self) -> str | None:
        """The ``RCP-Session`` this client sends."""
        return self._cfg.headers.get(SESSION_HEADER)

    def on_initialized(self, result: dict[str, Any]) -> None:
        self._cfg.on_initialized(result)


class HttpTransport(_Session, Transport):
    """Synchronous HTTP transport on ``httpx.Client``."""

    def __init__(self, url: str, *, token: str | None = None,
                 headers: Mapping[str, str] | None = None, client: httpx.Client | None = None,
                 session: str | bool = True, connect_timeout: float = 10.0,
                 max_workers: int = 8) -> None:
        super().__init__()
        self._cfg = _Http(url, token, headers, connect_timeout, session)
        self._http = client or httpx.Client()
        self._owns_client = client is None
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="rcp-http")
        self._lock = threading.Lock()
        # In-flight requests by id(message): None until the response starts, then its
        # stream; _ABANDONED once the caller stopped waiting.
        self._inflight: dict[int, Any] = {}

    def submit(self, message: Message, *, timeout: float | None, progress: bool) -> Future[Any]:
        body = encode(message)
        future = self._new_future()
        with self._lock:
            self._inflight[id(message)] = None
        self._pool.submit(self._run, message, body, timeout, progress, future)
        return future

    def _track(self, message: Message, response: httpx.Response) -> bool:
        """Register the open stream so ``abandon`` can close it; False if already abandoned."""
        with self._lock:
            if self._inflight.get(id(message)) is _ABANDONED:
                return False
            self._inflight[id(message)] = response
            return True

    def _run(self, message: Message, body: bytes, timeout: float | None, progress: bool,
             future: Future[Any]) -> None:
        try:
            self._count_sent()
            with self._http.stream("POST", self._cfg.url(message), content=body,
                                   headers=self._cfg.request_headers(progress),
                                   timeout=self._cfg.timeout(timeout)) as response:
                if self._track(message, response):
                    settle_response(future, self._read(response, message))
        except httpx.HTTPError as exc:
            settle(future, exc=TransportError(f"HTTP request to {self._cfg.url(message)} "
                                              f"failed: {exc!r}"))
        except Exception as exc:  # incl. errors from a stream closed under our feet
            settle(future, exc=exc if isinstance(exc, TransportError)
                   else TransportError(f"HTTP response could not be read: {exc!r}"))
        finally:
            with self._lock:
                self._inflight.pop(id(message), None)

    def _read(self, response: httpx.Response, message: Message) -> Any:
        if response.status_code == 200 and _content_type(response) == "text/event-stream":
            for event in EventSource(response).iter_sse():
                if event.data:
                    frame = _sse_frame(event.data)
                    if not is_notification(frame):
                        return frame
                    deliver(self.on_notification, frame)
            raise TransportError("the event stream ended before the response")
        return interpret(response.status_code, response.headers, response.read(), message)

    def abandon(self, message: Message) -> None:
        with self._lock:
            if id(message) not in self._inflight:
                return
            stream = self._inflight[id(message)]
            self._inflight[id(message)] = _ABANDONED
        if isinstance(stream, httpx.Response):
            _close_quietly(stream)

    def notify(self, frame: Frame) -> None:
        drive(self._cfg.notification(frame), self._post)

    def _post(self, request: dict[str, Any]) -> httpx.Response:
        response = self._http.post(**request)
        self._count_sent()
        return response

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            streams = [s for s in self._inflight.values() if isinstance(s, httpx.Response)]
        for stream in streams:
            _close_quietly(stream)
        self._fail_pending(TransportError("the HTTP client was closed"))
        if self._owns_client:
            self._http.close()


class AsyncHttpTransport(_Session, AsyncTransport):
    """Asyncio HTTP transport on ``httpx.AsyncClient`` (no threads)."""

    def __init__(self, url: str, *, token: str | None = None,
                 headers: Mapping[str, str] | None = None,
                 client: httpx.AsyncClient | None = None, session: str | bool = True,
                 connect_timeout: float = 10.0) -> None:
        super().__init__()
        self._cfg = _Http(url, token, headers, connect_timeout, session)
        self._http = client or httpx.AsyncClient()
        self._owns_client = client is None

    async def request(self, message: Message, *, timeout: float | None, progress: bool) -> Any:
        body = encode(message)
        url = self._cfg.url(message)
        self._count_sent()
        try:
            # Cancelling the awaiting task leaves this block: httpx closes the stream.
            async with self._http.stream("POST", url, content=body,
                                         headers=self._cfg.request_headers(progress),
                                         timeout=self._cfg.timeout(timeout)) as response:
                return await self._read(response, message, self.on_notification)
        except httpx.HTTPError as exc:
            raise TransportError(f"HTTP request to {url} failed: {exc!r}") from exc

    @staticmethod
    async def _read(response: httpx.Response, message: Message,
                    handler: NotificationHandler | None) -> Any:
        if response.status_code == 200 and _content_type(response) == "text/event-stream":
            async for event in EventSource(response).aiter_sse():
                if event.data:
                    frame = _sse_frame(event.data)
                    if not is_notification(frame):
                        return frame
                    deliver(handler, frame)
            raise TransportError("the event stream ended before the response")
        return interpret(response.status_code, response.headers, await response.aread(), message)

    async def notify(self, frame: Frame) -> None:
        await adrive(self._cfg.notification(frame), self._post)

    async def _post(self, request: dict[str, Any]) -> httpx.Response:
        response = await self._http.post(**request)
        self._count_sent()
        return response

    async def aclose(self) -> None:
        if self._owns_client:
            await self._http.aclose()
