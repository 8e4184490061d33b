"""RCP/1 over HTTP (§5.2) on Starlette: ``POST /rcp/<method>`` (``POST /rcp`` for batches).

Without an ``RCP-Session`` header a request is served statelessly (implicitly initialized);
each successful ``initialize`` opens a session whose token, bound to the caller
(:func:`principal`), a later request names to have §13's lifecycle; ``stateful=True``
applies the lifecycle to every request. Before the engine sees a request: Host and Origin
(:mod:`.guard`), the bearer token, the body's type, size and pace (:mod:`.body`). Every
answer is JSON (a JSON-RPC answer is HTTP 200, a notification 204); with
``Accept: text/event-stream`` a request's progress and its response stream as server-sent
events, and a disconnect cancels it. The engine's work runs in a thread pool. The status
codes, session rules and order of the checks: docs/internals.md, "The HTTP server".
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from ..control import RequestControl
from ..engine import Engine
from ..errors import InternalError, InvalidRequest, ParseError, RCPError
from .. import jsonio
from .admission import LLMLane, handle_admitted, llm_lane, spender
from .body import DEFAULT_BODY_LIMIT, DEFAULT_BODY_TIMEOUT, BodyRefused, peek_id, read_body
from .caller import CONNECTION, Caller
from .dispatcher import CONFORMANCE_LEVEL, Dispatcher, dumps
from .guard import CLOSE, Gate, HostOriginGuard, refusal
from .listener import CONNECTION_KEY, ServerLimits, run

log = logging.getLogger(__name__)

SESSION_HEADER = "rcp-session"
MAX_SESSION_NAME = 128


def _error_response(status: int, err: RCPError, id_: Any = None) -> Response:
    return Response(dumps({"jsonrpc": "2.0", "id": id_, "error": err.to_wire()}),
                    status_code=status, media_type="application/json")


async def _body(request: Request, limit: int, timeout: float) -> bytes | Response:
    """The request body, or the JSON refusal of a body that is not acceptable."""
    try:
        return await read_body(request, limit, timeout)
    except BodyRefused as refused:
        # Only a wrong media type is refused unread; its id may be in a short body.
        id_ = await peek_id(request) if refused.status == 415 else None
        # The rest of a refused body may still be on its way: close rather than drain it.
        return refusal(request.url.path, refused.status, refused.error, CLOSE, id_)


def principal(request: Request, gate: Gate, session: str | None) -> str:
    """Whom the session ids a request names belong to (docs/server.md: "Sessions are bound to
    the caller"): the RCP-Session ``session`` it is in (issued by this server, or any name in
    stateful mode), per token holder when a token is configured; outside one, the token's
    holders (one principal), else the request's TCP connection."""
    if gate.token is not None:
        return "bearer" + (f"\0{session}" if session else "")
    if session:
        return f"rcp-session\0{session}"
    return CONNECTION + _connection(request)


def _connection(request: Request) -> str:
    """The request's TCP connection: the name our listener gives it, else (another ASGI
    server) the client's address and port, which a later connection may reuse."""
    state = request.scope.get("state")
    name = state.get(CONNECTION_KEY) if isinstance(state, dict) else None
    if isinstance(name, str):
        return name
    client = request.scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "unknown"


async def _watch_disconnect(request: Request, controls: list[RequestControl]) -> None:
    """Cancel the request's work when its client goes away (the body is already read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            for control in controls:
                control.cancel("client disconnected")
            return


class _Sessions:
    """The dispatcher answering each request: the one without a session (stateless by default,
    the shared default session in stateful mode), or its session's (module docstring)."""

    def __init__(self, engine: Engine, *, stateful: bool, max_sessions: int,
                 body_limit: int) -> None:
        self.engine = engine
        self.stateful = stateful
        self.max_sessions = max_sessions
        self.body_limit = body_limit
        self.shared = Dispatcher(engine, stateless=not stateful, max_body_bytes=body_limit,
                                 conformance=CONFORMANCE_LEVEL if stateful else None,
                                 open_session=None if stateful else self._open)
        self._named: OrderedDict[str, Dispatcher] = OrderedDict()
        self._lock = threading.Lock()

    def dispatcher(self, request: Request) -> Dispatcher | RCPError:
        """The request's dispatcher, or the error refusing a malformed RCP-Session header."""
        name = request.headers.get(SESSION_HEADER)
        if not name:
            return self.shared
        if len(name) > MAX_SESSION_NAME or not name.isprintable():
            return InvalidRequest(f"the RCP-Session header must be at most {MAX_SESSION_NAME} "
                                  "printable characters", field="RCP-Session")
        with self._lock:
            found = self._named.get(name)
            if found is not None:
                self._named.move_to_end(name)
                return found
            if not self.stateful:  # not issued here: a session no initialize succeeded in
                return self.shared.fork(session=None, initialized=False)
            return self._keep(name, Dispatcher(self.engine, session=name,
                                               max_body_bytes=self.body_limit))

    def _open(self, origin: Dispatcher) -> str:
        """Open a session initialized by ``origin``'s ``initialize``; its token (§5.2)."""
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._keep(token, origin.fork(session=token, initialized=True))
        return token

    def _keep(self, name: str, dispatcher: Dispatcher) -> Dispatcher:
        """Keep ``dispatcher`` as session ``name`` (the lock held); the least recently used
        session goes past ``max_sessions``."""
        self._named[name] = dispatcher
        if len(self._named) > self.max_sessions:
            self._named.popitem(last=False)
        return dispatcher


def rcp_routes(sessions: _Sessions, gate: Gate, lane: LLMLane, *,
               body_limit: int = DEFAULT_BODY_LIMIT,
               body_timeout: float = DEFAULT_BODY_TIMEOUT) -> list[BaseRoute]:
    """The RCP endpoints: ``POST /rcp`` and ``POST /rcp/<method>``; work that waits on the
    LLM runs in ``lane`` (:mod:`.admission`)."""

    async def rcp(request: Request) -> Response:
        if not gate.authorized(request):
            return gate.unauthorized(request.url.path, await peek_id(request))
        dispatcher = sessions.dispatcher(request)
        if isinstance(dispatcher, RCPError):
            return refusal(request.url.path, 400, dispatcher, CLOSE, await peek_id(request))
        body = await _body(request, body_limit, body_timeout)
        if isinstance(body, Response):
            return body
        try:
            message = jsonio.loads(body)
        except ParseError as exc:
            return _error_response(400, exc)
        url_method = request.path_params.get("method")
        if isinstance(message, dict):
            if url_method is not None and message.get("method") != url_method:
                return _error_response(200, InvalidRequest(
                    f"URL method {url_method!r} does not match the body's method"),
                    message.get("id"))
        elif not isinstance(message, list):
            return _error_response(400, InvalidRequest("the body must be a JSON-RPC object"))
        # Ids are unique per client: the credentials and the RCP-Session header name it.
        scope = (request.headers.get("authorization"), request.headers.get(SESSION_HEADER))
        caller = Caller(writes=gate.writes_open,
                        principal=principal(request, gate, dispatcher.session),
                        spender=spender(request.client.host if request.client else None,
                                        token_holder=gate.token is not None))
        if isinstance(message, dict) and "id" not in message:  # a notification: cheap
            response = dispatcher.handle(message, scope=scope, caller=caller)
            if response is None:
                return Response(status_code=204)
            return Response(dumps(response), media_type="application/json")
        if isinstance(message, dict) and "text/event-stream" in request.headers.get("accept", ""):
            return _stream(lane, dispatcher, request, message, scope, caller)
        controls: list[RequestControl] = []
        work = asyncio.ensure_future(handle_admitted(
            lane, dispatcher, message, None, scope=scope, on_start=controls.append,
            caller=caller))
        watcher = asyncio.ensure_future(_watch_disconnect(request, controls))
        try:
            response = await work
        finally:
            watcher.cancel()
        if response is None:
            return Response(status_code=204)
        return Response(dumps(response), media_type="application/json")

    return [Route("/rcp", rcp, methods=["POST"]),
            Route("/rcp/{method:path}", rcp, methods=["POST"])]


def _stream(lane: LLMLane, dispatcher: Dispatcher, request: Request, message: dict[str, Any],
            scope: tuple[str | None, str | None], caller: Caller) -> StreamingResponse:
    """Answer one request as SSE: progress frames as they happen, then the response."""
    loop = asyncio.get_running_loop()
    frames: asyncio.Queue[Any] = asyncio.Queue()
    controls: list[RequestControl] = []

    def send(frame: dict[str, Any]) -> None:  # called from the worker thread
        loop.call_soon_threadsafe(frames.put_nowait, frame)

    async def events() -> AsyncIterator[str]:
        work = asyncio.ensure_future(handle_admitted(
            lane, dispatcher, message, send, scope=scope, on_start=controls.append,
            caller=caller))
        work.add_done_callback(lambda _f: frames.put_nowait(None))
        watcher = asyncio.ensure_future(_watch_disconnect(request, controls))
        try:
            while True:
                frame = await frames.get()
                if frame is None:
                    break
                yield f"data: {dumps(frame)}\n\n"
            response = await work
            if response is not None:
                yield f"data: {dumps(response)}\n\n"
        finally:
            watcher.cancel()
            if not work.done():  # the client went away mid-stream
                for control in controls:
                    control.cancel("client disconnected")

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store"})


def _json_errors() -> dict[Any, Callable[[Request, Exception], Any]]:
    """Exception handlers answering every failure as JSON in the route's shape."""
    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return refusal(request.url.path, exc.status_code, InvalidRequest(str(exc.detail)),
                       exc.headers)

    async def server_error(request: Request, exc: Exception) -> Response:
        log.error("unexpected failure on %s", request.url.path, exc_info=exc)
        return refusal(request.url.path, 500, InternalError("internal server error"))

    return {HTTPException: http_error, Exception: server_error}


def create_app(engine: Engine, *, token: str | None = None,
               body_limit: int = DEFAULT_BODY_LIMIT, cors_origins: Sequence[str] = (),
               hosted_engines: Mapping[str, Engine] | None = None, stateful: bool = False,
               max_sessions: int = 1024, bound_host: str = "127.0.0.1",
               allowed_hosts: Sequence[str] = (), allow_anonymous_writes: bool = False,
               body_timeout: float = DEFAULT_BODY_TIMEOUT) -> Starlette:
    """The ASGI application serving ``engine`` over RCP (and the hosted-API route when
    ``hosted_engines`` maps index ids to engines).

    ``bound_host`` and ``allowed_hosts`` are the ``Host`` names served (loopback names
    always are); ``cors_origins`` the browser origins allowed besides the server's own.
    """
    gate = Gate(token, allow_anonymous_writes=allow_anonymous_writes)
    routes = rcp_routes(_Sessions(engine, stateful=stateful, max_sessions=max_sessions,
                                  body_limit=body_limit), gate, llm_lane(engine),
                        body_limit=body_limit, body_timeout=body_timeout)
    if hosted_engines:
        from .hosted import hosted_routes

        routes += hosted_routes(hosted_engines, wrap=gate.guard, body_limit=body_limit,
                                body_timeout=body_timeout)
    # Outermost first: Host and Origin are refused before CORS answers a preflight.
    middleware = [Middleware(HostOriginGuard, bound_host=bound_host,
                             allowed_hosts=allowed_hosts, cors_origins=cors_origins)]
    if cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(cors_origins),
                                     allow_methods=["POST", "OPTIONS"],
                                     allow_headers=["authorization", "content-type", "accept",
                                                    SESSION_HEADER]))
    return Starlette(routes=routes, middleware=middleware, exception_handlers=_json_errors())


def serve_http(engine: Engine, *, host: str = "127.0.0.1", port: int = 8750,
               token: str | None = None, cors_origins: Sequence[str] = (),
               hosted_engines: Mapping[str, Engine] | None = None,
               stateful: bool = False, allowed_hosts: Sequence[str] = (),
               allow_anonymous_writes: bool = False, limits: ServerLimits = ServerLimits(),
               on_listening: Callable[[str], None] | None = None) -> None:
    """Run the HTTP server until interrupted (loopback by default); ``on_listening`` is
    given the base URL once the socket is bound."""
    app = create_app(engine, token=token, cors_origins=cors_origins,
                     hosted_engines=hosted_engines, stateful=stateful, bound_host=host,
                     allowed_hosts=allowed_hosts, allow_anonymous_writes=allow_anonymous_writes,
                     body_timeout=limits.body_timeout)
    run(app, host=host, port=port, limits=limits, on_listening=on_listening)
