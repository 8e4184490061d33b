"""Running an ASGI app on uvicorn with limits against slow and greedy clients.

uvicorn arms no timer before a connection's first response, so a client that never
finishes its request head keeps its connection, and a file descriptor, for ever (a
slow-loris). :func:`slow_client_protocol` closes a connection that has not delivered a
complete request head within ``header_timeout`` seconds of connecting or of its
previous response, or that sends more than ``max_head_bytes`` without completing one,
and names each connection (:data:`CONNECTION_KEY`) for binding sessions to it.
The body has its own deadline (:func:`.body.read_body`, ``body_timeout``); idle
keep-alive connections close after ``keep_alive_timeout``; past ``max_connections``
open connections uvicorn answers new requests with 503. At start-up the soft limit on
open files is raised towards the hard one, so the connection limit, not the
descriptor limit, is what a flood of connections runs into.
"""

from __future__ import annotations

import asyncio
import resource
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Descriptors kept back for SQLite, Chroma, model files and logs.
FD_RESERVE = 128
DEFAULT_MAX_CONNECTIONS = 4096
OPEN_FILES_WANTED = 65536
# The key, in each request's ``scope["state"]``, of a random name of its TCP connection (a
# client's host and port can come back on a later connection; this cannot).
CONNECTION_KEY = "rcp_agentic.connection"


@dataclass(frozen=True)
class ServerLimits:
    """Timeouts (seconds) and sizes guarding the HTTP server; None: derived at start-up."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    # Longer than common client pools keep an idle connection (httpx: 5 s), so the client
    # drops it first: with equal timeouts the server closes a connection the client has
    # just reused, and that request fails (measured in bench/load.py).
    keep_alive_timeout: float = 10.0
    max_connections: int | None = None
    max_head_bytes: int = 64 * 1024


def raise_open_file_limit(wanted: int = OPEN_FILES_WANTED) -> int:
    """Raise the soft RLIMIT_NOFILE towards ``wanted`` (never past the hard limit); the new soft."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # keep the soft limit we have
    return soft


def max_connections(limits: ServerLimits, open_files: int) -> int:
    """The connection limit: the configured one, else what the descriptors allow (≤ 4096)."""
    if limits.max_connections is not None:
        return limits.max_connections
    return max(16, min(DEFAULT_MAX_CONNECTIONS, open_files - FD_RESERVE))


def slow_client_protocol(limits: ServerLimits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class with a deadline and a size cap on each request head."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class SlowClientProtocol(base):  # type: ignore[misc, valid-type]
        _head_timer: asyncio.TimerHandle | None = None
        _head_bytes = 0
        app_state: dict[str, Any]  # uvicorn's; copied into each request's scope["state"]

        def _awaiting_head(self) -> bool:
            # uvicorn sets `cycle` when a request head is complete; between requests (and
            # while an unread body still drains after its response) none is running.
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_bytes = 0
            self._head_timer = self.loop.call_later(limits.header_timeout, self._expire)

        def _expire(self) -> None:
            self._head_timer = None
            if self._awaiting_head() and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            # Every request's scope["state"] is a copy of app_state: this names the connection.
            self.app_state = {**self.app_state, CONNECTION_KEY: secrets.token_hex(16)}
            self._arm()

        def data_received(self, data: bytes) -> None:
            awaiting = self._awaiting_head()
            super().data_received(data)
            if awaiting and self._awaiting_head() and not self.transport.is_closing():
                self._head_bytes += len(data)
                if self._head_bytes > limits.max_head_bytes:
                    self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

    return SlowClientProtocol


def run(app: Any, *, host: str, port: int, limits: ServerLimits,
        on_listening: Callable[[str], None] | None = None) -> None:
    """Serve ``app`` on ``host:port`` until interrupted; ``on_listening`` gets the base URL
    once the socket is bound (port 0 picks a free port, and the URL names it)."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            http=slow_client_protocol(limits),
                            timeout_keep_alive=limits.keep_alive_timeout,  # type: ignore[arg-type]
                            limit_concurrency=max_connections(limits, raise_open_file_limit()))
    sock = config.bind_socket()
    # Listen before saying so: a client that connects as soon as it reads the start-up line
    # must not be refused while uvicorn is still starting (asyncio listens again, harmlessly).
    sock.listen(config.backlog)
    if on_listening is not None:
        bound = sock.getsockname()[1]
        name = f"[{host}]" if ":" in host else host
        on_listening(f"http://{name}:{bound}")
    uvicorn.Server(config).run(sockets=[sock])
