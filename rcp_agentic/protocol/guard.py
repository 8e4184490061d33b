"""Who may call the HTTP server: Host, Origin and bearer-token checks, and their JSON refusals.

A web page can make the browser ``POST`` to a loopback server (and a DNS-rebinding page
read the answer), so before anything else: a foreign ``Host`` is 421, a foreign ``Origin``
403, a missing or wrong bearer token (when one is configured) 401 with
``WWW-Authenticate: Bearer``; without a token an anonymous caller is offered no write
unless anonymous writes were allowed. A refusal is JSON in the shape of the route and
echoes the request's id when it can be read. The rules in full: docs/internals.md,
"The HTTP server".
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import InvalidRequest, RCPError, Unauthorized
from ..jsonio import dumps
from .body import peek_id

# Closes a connection whose request body may be partly unread.
CLOSE = {"Connection": "close"}
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
CHALLENGE = {"WWW-Authenticate": "Bearer"}
REST_PREFIX = "/api/"

Endpoint = Callable[[Request], Awaitable[Response]]


def is_loopback(host: str) -> bool:
    """True for a loopback name or address (what ``--host`` binds to)."""
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(value: str) -> tuple[str | None, int | None]:
    """A ``Host`` header (or ``--allowed-host``) as (lower-case name, port); (None, None) if bad."""
    try:
        parts = urlsplit("//" + value.strip())
        return parts.hostname, parts.port
    except ValueError:
        return None, None


def refusal(path: str, status: int, error: RCPError,
            headers: Mapping[str, str] | None = None, id_: Any = None) -> Response:
    """The JSON answer refusing a request to ``path``, in that route's shape (``id_``: the
    JSON-RPC id to echo on an RCP route)."""
    body: dict[str, Any] = ({"detail": error.message} if path.startswith(REST_PREFIX) else
                            {"jsonrpc": "2.0", "id": id_, "error": error.to_wire()})
    return Response(dumps(body), status_code=status, media_type="application/json",
                    headers=dict(headers or {}))


class HostOriginGuard:
    """ASGI middleware refusing foreign ``Host`` names (421) and foreign ``Origin``s (403)."""

    def __init__(self, app: ASGIApp, *, bound_host: str, allowed_hosts: Iterable[str] = (),
                 cors_origins: Iterable[str] = ()) -> None:
        self.app = app
        allowed = [_host_name(h)[0] or h.lower() for h in allowed_hosts]
        self.any_host = "*" in allowed
        self.hosts = {*LOOPBACK_NAMES, bound_host.strip("[]").lower(), *allowed}
        self.origins = {o.rstrip("/").lower() for o in cors_origins}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self._refusal(Headers(scope=scope), scope["scheme"])
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, error = refused
        path = scope["path"]
        id_ = None if path.startswith(REST_PREFIX) else await peek_id(
            Request(scope, receive))
        await refusal(path, status, error, CLOSE, id_)(scope, receive, send)

    def _refusal(self, headers: Headers, scheme: str) -> tuple[int, RCPError] | None:
        """The status and error refusing a foreign Host or Origin, or None."""
        host, origin = headers.get("host"), headers.get("origin")
        if host is not None and not self._host_ok(host):
            name = _host_name(host)[0] or host
            return 421, InvalidRequest(f"Host {host!r} is not served here; the operator may "
                                       f"allow it with --allowed-host {name}", field="Host")
        if origin is not None and not self._origin_ok(origin, host, scheme):
            return 403, Unauthorized(f"requests from origin {origin!r} are not allowed; the "
                                     f"operator may allow it with --cors-origin {origin}")
        return None

    def _host_ok(self, host: str) -> bool:
        name = _host_name(host)[0]
        return name is not None and (self.any_host or name in self.hosts)

    def _origin_ok(self, origin: str, host: str | None, scheme: str) -> bool:
        wanted = origin.rstrip("/").lower()
        if "*" in self.origins or wanted in self.origins:
            return True
        default = {"http": 80, "https": 443}
        try:
            parts = urlsplit(wanted)
            own_name, own_port = _host_name(host or "")
            return (parts.scheme == scheme and parts.hostname is not None
                    and parts.hostname == own_name
                    and (parts.port or default.get(parts.scheme))
                    == (own_port or default.get(scheme)))
        except ValueError:  # a malformed port
            return False


class Gate:
    """The bearer-token policy shared by every route."""

    def __init__(self, token: str | None, *, allow_anonymous_writes: bool = False) -> None:
        self.token = token
        self.allow_anonymous_writes = allow_anonymous_writes

    @property
    def writes_open(self) -> bool:
        """Whether every caller let in may write: a token is configured (so every caller
        holds it) or anonymous writes are allowed."""
        return self.token is not None or self.allow_anonymous_writes

    def authorized(self, request: Request) -> bool:
        """True when no token is configured or the request carries it."""
        if self.token is None:
            return True
        scheme, _, credentials = request.headers.get("authorization", "").strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.strip().encode(), self.token.encode())

    def unauthorized(self, path: str, id_: Any = None) -> Response:
        """The 401 for a missing or wrong token (decided before the body is read)."""
        return refusal(path, 401, Unauthorized("missing or wrong bearer token"),
                       {**CHALLENGE, **CLOSE}, id_)

    def guard(self, endpoint: Endpoint) -> Endpoint:
        """``endpoint`` behind the token check (the hosted REST route: no JSON-RPC id)."""
        async def guarded(request: Request) -> Response:
            if not self.authorized(request):
                return self.unauthorized(request.url.path)
            return await endpoint(request)

        return guarded
