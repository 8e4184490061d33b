"""RCP/1 over HTTP (§5.2) on Starlette: ``POST /rcp/<method>`` (``POST /rcp`` for batches).

Stateless: every request is implicitly initialized. A well-formed JSON-RPC answer,
error or not, is HTTP 200; a body that is not JSON is 400 (-32700), not a request
400 (-32600); a notification 204; a missing or wrong bearer token (when one is
configured) 401 with -32012, checked before anything else; a body over the limit
413 with -32013. The engine's work runs in a thread pool so requests overlap.
Server-sent events are not offered yet (``streaming`` is not advertised), so a
client asking for ``text/event-stream`` gets the buffered JSON answer.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..engine import Engine
from ..errors import InvalidRequest, ParseError, PayloadTooLarge, RCPError
from .dispatcher import Dispatcher

DEFAULT_BODY_LIMIT = 8 * 1024 * 1024


class Unauthorized(RCPError):
    """The caller did not present the configured bearer token."""

    code = -32012


def _error_response(status: int, err: RCPError, id_: Any = None) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": id_, "error": err.to_wire()}, status_code=status)


def create_app(engine: Engine, *, token: str | None = None,
               body_limit: int = DEFAULT_BODY_LIMIT) -> Starlette:
    """The ASGI application serving ``engine``."""
    dispatcher = Dispatcher(engine, stateless=True)

    async def rcp(request: Request) -> Response:
        if token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return _error_response(401, Unauthorized("missing or wrong bearer token"))
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > body_limit:
            return _error_response(413, PayloadTooLarge(f"body exceeds {body_limit} bytes"))
        body = b""
        async for part in request.stream():
            body += part
            if len(body) > body_limit:
                return _error_response(413, PayloadTooLarge(f"body exceeds {body_limit} bytes"))
        try:
            message = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            return _error_response(400, ParseError(f"invalid JSON: {exc}"))
        url_method = request.path_params.get("method")
        if isinstance(message, dict):
            if url_method is not None and message.get("method") != url_method:
                return JSONResponse({"jsonrpc": "2.0", "id": message.get("id"), "error":
                                     InvalidRequest(f"URL method {url_method!r} does not match "
                                                    "the body's method").to_wire()})
        elif not isinstance(message, list):
            return _error_response(400, InvalidRequest("the body must be a JSON-RPC object"))
        response = await run_in_threadpool(dispatcher.handle, message)
        if response is None:
            return Response(status_code=204)
        try:
            text = json.dumps(response, ensure_ascii=False, allow_nan=False)
        except ValueError:
            return _error_response(500, RCPError("the server produced a non-finite number"))
        return Response(text, media_type="application/json")

    return Starlette(routes=[Route("/rcp", rcp, methods=["POST"]),
                             Route("/rcp/{method:path}", rcp, methods=["POST"])])


def serve_http(engine: Engine, *, host: str = "127.0.0.1", port: int = 8750,
               token: str | None = None) -> None:
    """Run the HTTP server until interrupted (loopback by default)."""
    import uvicorn

    uvicorn.run(create_app(engine, token=token), host=host, port=port, log_level="warning")
