"""Transport-agnostic RCP/1 JSON-RPC handling for one connection (§4, §7, §9, §11–§13).

A transport (stdio, HTTP) hands each parsed frame to :meth:`Dispatcher.handle`, possibly from
several threads at once, and writes back what it returns (``None``: nothing, notifications are
never answered); progress notifications (§9) go to the ``send`` callable it passes. Every
request runs under a :class:`~rcp_agentic.control.RequestControl` (``notifications/cancel``,
the server's deadline shortened by ``_meta.deadlineMs``) and is answered exactly once (-32006 /
-32014 when stopped). Errors are RCP error objects; an unexpected failure is -32603 without
internals. Each request comes from a :class:`~.caller.Caller`, offered what it may call.

A dispatcher is one session (§13): its capabilities are fixed once computed (§13.2), while
``initialize``/``info`` read the derived state and index version live. A transport issuing
session tokens (HTTP, §5.2) passes ``open_session``: a successful ``initialize`` opens a new
session (:meth:`Dispatcher.fork`) and answers its token in ``_meta.session``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from ..control import Progress, RequestControl
from ..version import __version__
from ..capabilities import TransportLimits, build as build_capabilities, with_status
from ..engine import Engine
from ..errors import (
    CapabilityMissing,
    InternalError,
    InvalidParams,
    InvalidRequest,
    NotInitialized,
    OptionUnsupported,
    ParseError,
    RCPError,
    UnknownMethod,
    VersionMismatch,
)
from ..pipeline.method_params import (GraphParams, MemoryBuildParams, MemoryRecallParams,
                                      MethodParams, TransformParams)
from ..pipeline.params import lone_surrogate_at
from ..pipeline.transform import FALLBACK_NOTE
from ..text import is_unicode
from .. import jsonio
from ..options import VENDOR
from .caller import (
    TRUSTED,
    UNBOUND_NOTE,
    Caller,
    bind_sessions,
    read_only,
    refuse_write,
    unbind_result,
    without_spend,
)
from .methods import PROTOCOL_VERSION, RCP_METHODS

log = logging.getLogger(__name__)

ALWAYS_ALLOWED = frozenset({"initialize", "info", "ping", "shutdown"})
# The protocol versions this server speaks (§7.1: the contiguous range 1..PROTOCOL_VERSION),
# named in the error.data of a refused initialize.
SUPPORTED_VERSIONS = tuple(range(1, PROTOCOL_VERSION + 1))
CONFORMANCE_LEVEL = "L2"

Send = Callable[[dict[str, Any]], None]
# A method's handler: its params, the request's control and the session's capabilities in.
Handler = Callable[[dict[str, Any], RequestControl, dict[str, Any]], Any]
# Given the dispatcher a successful initialize ran on: opens a session, returns its token.
OpenSession = Callable[["Dispatcher"], str]
# Why a session of a transport issuing tokens is not initialized: it names none it holds.
UNKNOWN_SESSION_HINT = (" in this session: RCP-Session names no session this server holds (it "
                        "issues them; they are forgotten least recently used first). Call "
                        "initialize and send the token of its result._meta.session")


def _versions() -> str:
    return ", ".join(map(str, SUPPORTED_VERSIONS))


def _error(id_: Any, err: RCPError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": err.to_wire()}


def _valid_id(id_: Any) -> bool:
    """A string or a finite number (an infinite one could not be echoed as JSON)."""
    if isinstance(id_, float):
        return math.isfinite(id_)
    return isinstance(id_, (str, int)) and not isinstance(id_, bool)


def request_id(message: Any) -> Any:
    """The id of a single request object to echo in its answer: None for a batch, a
    notification or an id that is not a string or a finite number."""
    if isinstance(message, dict) and _valid_id(message.get("id")):
        return message["id"]
    return None


def _id_key(id_: Any) -> tuple[str, Any]:
    """Ids compare by JSON type and value: 1 and "1" are different requests."""
    return ("s", id_) if isinstance(id_, str) else ("n", id_)


def _progress_frame(token: str | int, report: Progress) -> dict[str, Any]:
    params: dict[str, Any] = {"progressToken": token, "progress": report.progress,
                              "stage": report.stage, "message": report.message}
    if report.partial_hits is not None:
        params["partial"] = {"hits": report.partial_hits}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


class Dispatcher:
    """One RCP connection's state (initialized or not) in front of a shared Engine."""

    def __init__(self, engine: Engine, *, server_name: str = "rcp-agentic",
                 max_batch: int = 64, on_shutdown: Callable[[], None] | None = None,
                 stateless: bool = False, session: str | None = None,
                 max_body_bytes: int | None = None,
                 conformance: str | None = CONFORMANCE_LEVEL,
                 open_session: OpenSession | None = None) -> None:
        self.engine = engine
        # The level the transport's mode certifies, as _meta.conformance (None: stated nowhere).
        self.conformance = conformance
        self.open_session = open_session
        self.max_body_bytes = max_body_bytes
        self.session = session
        self.request_timeout = engine.config.request_timeout_seconds
        self.server_name = server_name
        self.max_batch = max_batch
        self.on_shutdown = on_shutdown
        # Stateless (HTTP, §5.2): every request is implicitly initialized and
        # initialize/info answer idempotently.
        self.stateless = stateless
        self.initialized = stateless
        # Fixed for the session (§13.2): computed once per kind of caller (may it write?).
        self._capabilities: dict[bool, dict[str, Any]] = {}
        # In-flight requests by (scope, id), for notifications/cancel. A list, because a
        # stateless HTTP scope may see the same id from two clients at once.
        self._inflight: dict[tuple[Hashable, tuple[str, Any]], list[RequestControl]] = {}
        self._inflight_lock = threading.Lock()
        self._handlers: dict[str, Handler] = {
            "initialize": self._initialize, "info": self._info, "ping": self._ping,
            "shutdown": self._shutdown, "retrieve": self._retrieve, "rerank": self._rerank,
            "index/add": self._index_add, "index/delete": self._index_delete,
            "embed": self._embed, "feedback": self._feedback,
            "graph": self._params_call(GraphParams),
            "memory/build": self._params_call(MemoryBuildParams),
            "memory/recall": self._params_call(MemoryRecallParams),
            "query/transform": self._params_call(TransformParams),
        }

    def fork(self, *, session: str | None, initialized: bool) -> Dispatcher:
        """A new session like this one (engine, limits, hooks, and the capabilities computed so
        far: those its ``initialize`` answered, §13.2), with a lifecycle of its own (§13)."""
        twin = Dispatcher(self.engine, server_name=self.server_name, max_batch=self.max_batch,
                          on_shutdown=self.on_shutdown, session=session,
                          max_body_bytes=self.max_body_bytes, conformance=self.conformance,
                          open_session=self.open_session)
        twin.initialized = initialized
        twin._capabilities = dict(self._capabilities)
        return twin

    # --- framing ------------------------------------------------------------------------

    def handle_text(self, text: str | bytes, send: Send | None = None) -> str | None:
        """A raw frame in, the JSON text to send back (or None)."""
        try:
            message = jsonio.loads(text)
        except ParseError as err:
            return dumps(_error(None, err))
        response = self.handle(message, send)
        return None if response is None else dumps(response)

    def handle(self, message: Any, send: Send | None = None, *, scope: Hashable = None,
               on_start: Callable[[RequestControl], None] | None = None,
               caller: Caller = TRUSTED,
               received: float | None = None) -> dict[str, Any] | list[dict[str, Any]] | None:
        """A parsed frame (object or batch array) in; response object(s) or None out.

        ``send`` receives the progress notifications of requests asking for them;
        ``scope`` names the client for cancellation (ids are unique per client);
        ``on_start`` is given each request's control (e.g. to cancel it when an HTTP
        client disconnects); ``caller`` is who sends it (what it is offered);
        ``received`` is the ``time.monotonic()`` instant the transport got it, from which
        its deadlines count (a request that waited for a thread has that much less).
        """
        waited = 0.0 if received is None else max(0.0, time.monotonic() - received)
        if isinstance(message, list):
            if not message:
                return _error(None, InvalidRequest("an empty batch is not a valid request"))
            if len(message) > self.max_batch:
                return _error(None, InvalidParams(f"batch of {len(message)} exceeds the limit of "
                                                  f"{self.max_batch}", field="batch"))
            # The batch as a whole gets the server's deadline, and a cancel of the batch (the
            # client hanging up) stops every request of it still to run.
            batch = RequestControl(timeout=self.request_timeout - waited)
            if on_start is not None:
                on_start(batch)
            out = [r for r in (self._one(m, send, scope, on_start, caller, batch, waited)
                               for m in message)
                   if r is not None]
            return out or None
        return self._one(message, send, scope, on_start, caller, waited=waited)

    def cancel(self, id_: Any, reason: str | None = None, *, scope: Hashable = None) -> bool:
        """Stop the in-flight request ``id_`` of ``scope``; False if there is none (a no-op)."""
        if not _valid_id(id_):
            return False
        with self._inflight_lock:
            controls = list(self._inflight.get((scope, _id_key(id_)), ()))
        for control in controls:
            control.cancel(reason if isinstance(reason, str) else None)
        return bool(controls)

    def _one(self, msg: Any, send: Send | None, scope: Hashable,
             on_start: Callable[[RequestControl], None] | None,
             caller: Caller, batch: RequestControl | None = None,
             waited: float = 0.0) -> dict[str, Any] | None:
        if not isinstance(msg, dict):
            return _error(None, InvalidRequest("a request must be a JSON object"))
        has_id = "id" in msg
        id_ = msg.get("id")
        if has_id and not _valid_id(id_):
            return _error(None, InvalidRequest("id must be a string or a number"))
        if msg.get("jsonrpc") != "2.0" or not isinstance(msg.get("method"), str):
            return _error(id_ if has_id else None,
                          InvalidRequest("jsonrpc must be \"2.0\" and method a string"))
        method = msg["method"]
        params = msg.get("params", {})
        if not has_id:  # a notification: act on the ones we know, never answer
            if method == "notifications/cancel" and isinstance(params, dict):
                self.cancel(params.get("id"), params.get("reason"), scope=scope)
            return None
        if method.startswith("notifications/"):
            return _error(id_, InvalidRequest(f"{method} is a notification and must not carry "
                                              "an id"))
        if params is None:
            params = {}
        if not isinstance(params, dict):
            return _error(id_, InvalidParams("params must be an object", field="params"))
        key = (scope, _id_key(id_))
        control: RequestControl | None = None
        try:
            control = self._control(params, send, batch, caller, waited)
            if on_start is not None:
                on_start(control)
            with self._inflight_lock:
                self._inflight.setdefault(key, []).append(control)
            try:
                result = self._call(method, params, control, caller)
            finally:
                with self._inflight_lock:
                    controls = self._inflight.get(key, [])
                    if control in controls:
                        controls.remove(control)
                    if not controls:
                        self._inflight.pop(key, None)
        except RCPError as err:
            if control is not None and control.llm_spent.calls:
                err.data.setdefault("llm", control.llm_spent.wire())
            return _error(id_, err)
        except Exception:  # never let a client crash the server
            log.exception("internal error in %s", method)
            return _error(id_, InternalError(f"internal error while handling {method}"))
        assert control is not None
        return {"jsonrpc": "2.0", "id": id_, "result": with_llm_spent(result, control)}

    def _control(self, params: dict[str, Any], send: Send | None,
                 batch: RequestControl | None = None,
                 caller: Caller = TRUSTED, waited: float = 0.0) -> RequestControl:
        """The request's control: the server deadline, shortened by ``_meta.deadlineMs`` (and
        by what is left of its ``batch``'s), less the ``waited`` seconds since it arrived; its
        LLM work is charged to ``caller``."""
        meta = params.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        timeout = self.request_timeout
        deadline_ms = meta.get("deadlineMs")
        if deadline_ms is not None:
            if isinstance(deadline_ms, bool) or not isinstance(deadline_ms, (int, float)) \
                    or not deadline_ms >= 0:
                raise InvalidParams("_meta.deadlineMs must be a non-negative number of "
                                    "milliseconds", field="_meta.deadlineMs")
            if deadline_ms < timeout * 1000.0:  # compared first: a huge int overflows a float
                timeout = deadline_ms / 1000.0
        token = meta.get("progressToken")
        sink = None
        if send is not None and "streaming" in self.capabilities() and (
                isinstance(token, str) or (isinstance(token, int) and not isinstance(token, bool))):
            def sink(report: Progress) -> None:
                send(_progress_frame(token, report))
        return RequestControl(timeout=timeout - waited, on_progress=sink, parent=batch,
                              spender=caller.spender)

    def _call(self, method: str, params: dict[str, Any], control: RequestControl,
              caller: Caller) -> Any:
        # An `x-` method is defined only by the server offering it (§12: prefer -32004).
        if method not in RCP_METHODS and method not in self._handlers:
            raise UnknownMethod(f"method {method!r} is not defined by RCP/1 or this server")
        if method not in ALWAYS_ALLOWED and not self.initialized:
            raise NotInitialized(f"{method} before a successful initialize"
                                 + (UNKNOWN_SESSION_HINT if self.open_session else
                                    f" (send initialize with params {{\"protocolVersion\": "
                                    f"{PROTOCOL_VERSION}}} first)"))
        if not caller.writes:
            refuse_write(method, params)  # checked by rule, not only by what caps omit
        gate = RCP_METHODS.get(method)
        handler = self._handlers.get(method)
        caps = self.capabilities(writes=caller.writes)
        if handler is None or (gate is not None and gate not in caps):
            raise CapabilityMissing(f"{method} is not offered by this server"
                                    + ("" if caller.writes else " to this caller"))
        control.check()
        if caller.principal is None:
            return handler(params, control, caps)
        bound, back = bind_sessions(method, params, caller.principal,
                                    self.engine.config.max_session_id_chars)
        result = unbind_result(handler(bound, control, caps), back)
        return with_notes(result, [UNBOUND_NOTE]) if back and caller.connection_bound \
            else result

    # --- lifecycle ----------------------------------------------------------------------

    def capabilities(self, *, writes: bool = True) -> dict[str, Any]:
        """What this session offers a caller that may write (everything), or one that may not
        (:func:`.caller.read_only`); each computed once and then fixed (§13.2)."""
        if writes not in self._capabilities:
            self._capabilities[writes] = (self._all_capabilities() if writes
                                          else read_only(self.capabilities()))
        return self._capabilities[writes]

    def _all_capabilities(self) -> dict[str, Any]:
        """The engine's capabilities as this session serves them, with its transport's limits."""
        return build_capabilities(self.engine.offer(), TransportLimits(
            self.max_batch, self.request_timeout, self.max_body_bytes))

    def _peer(self, caps: dict[str, Any]) -> dict[str, Any]:
        """The ``initialize``/``info`` result: the session's fixed ``caps`` with the derived
        state read now, the index version now, the declared level and the session's name."""
        meta: dict[str, Any] = {VENDOR: {"indexVersion": self.engine.index_version}}
        if self.conformance is not None:
            meta["conformance"] = self.conformance
        if self.session:
            meta["session"] = self.session
        return {"protocolVersion": PROTOCOL_VERSION,
                "server": {"name": self.server_name, "version": __version__},
                "capabilities": self._live(caps), "_meta": meta}

    def _live(self, caps: dict[str, Any]) -> dict[str, Any]:
        """``caps`` with the derived units' state read now; LLM spend only for a caller that
        may write (whose capabilities are the full set)."""
        status = self.engine.derived_status()
        if caps is not self._capabilities.get(True):
            status = without_spend(status)
        return with_status(caps, status)

    def _initialize(self, params: dict[str, Any], control: RequestControl,
             caps: dict[str, Any]) -> dict[str, Any]:
        if self.initialized and not self.stateless:
            raise InvalidRequest("initialize was already completed in this session")
        version = params.get("protocolVersion")
        if isinstance(version, bool) or not isinstance(version, int):
            what = ("is required: the highest RCP version the client speaks, an integer"
                    if "protocolVersion" not in params else
                    f"must be an integer, not {version!r}: the highest RCP version the client "
                    "speaks")
            raise InvalidParams(f"protocolVersion {what} (RCP/1 is version 1; this server "
                                f"supports {_versions()})",
                                field="protocolVersion", supported=list(SUPPORTED_VERSIONS))
        if version < 1:
            raise VersionMismatch(f"no common protocol version (client {version}, this server "
                                  f"supports {_versions()})", supported=list(SUPPORTED_VERSIONS))
        result = {**self._peer(caps), "protocolVersion": min(version, PROTOCOL_VERSION)}
        if self.open_session is None:
            self.initialized = True
            return result
        # The session this initialize negotiated is a new one, named by its token (§5.2).
        return {**result, "_meta": {**result["_meta"], "session": self.open_session(self)}}

    def _info(self, params: dict[str, Any], control: RequestControl,
             caps: dict[str, Any]) -> dict[str, Any]:
        return self._peer(caps)

    def _ping(self, params: dict[str, Any], control: RequestControl,
             caps: dict[str, Any]) -> dict[str, Any]:
        if "nonce" not in params:
            return {}
        nonce = params["nonce"]
        try:
            jsonio.dumps(nonce)
        except (ValueError, RecursionError):  # NaN, 1e400 (infinite), or absurdly deep
            raise InvalidParams("nonce must be finite JSON", field="nonce") from None
        return {"nonce": nonce}

    def _shutdown(self, params: dict[str, Any], control: RequestControl,
             caps: dict[str, Any]) -> dict[str, Any]:
        if self.on_shutdown is not None:
            self.on_shutdown()
        return {}

    # --- methods ------------------------------------------------------------------------

    def _retrieve(self, params: dict[str, Any], control: RequestControl,
             caps: dict[str, Any]) -> dict[str, Any]:
        return self.engine.retrieve_params(params, control).to_wire()

    def _embed(self, params: dict[str, Any], control: RequestControl,
             caps: dict[str, Any]) -> dict[str, Any]:
        inputs = params.get("inputs", params.get("texts"))  # `texts`: the legacy name (§7.3)
        if inputs is None:
            raise InvalidParams("inputs is required", field="inputs")
        kind = params.get("kind", "document")
        encoding = params.get("encoding", "json")
        if not isinstance(encoding, str):
            raise InvalidParams("encoding must be a string", field="encoding")
        if not isinstance(kind, str):
            raise InvalidParams("kind must be a string", field="kind")
        return self.engine.embed(inputs, kind=kind, encoding=encoding)

    def _rerank(self, params: dict[str, Any], control: RequestControl,
             caps: dict[str, Any]) -> dict[str, Any]:
        if "query" not in params:
            raise InvalidParams("query is required", field="query")
        # `documents` is the name some RCP clients (the reference harness) send.
        passages = params.get("passages", params.get("documents"))
        if not isinstance(passages, list):
            raise InvalidParams("passages must be an array", field="passages")
        top_n = params.get("topN")
        result = self.engine.rerank(params["query"], passages, method=params.get("method"),
                                    top_n=top_n, control=control).to_wire()
        # Also the per-passage list those clients read; additive to {scores, order}.
        result["results"] = [{"index": i, "score": result["scores"][i]} for i in result["order"]]
        return result

    def _index_add(self, params: dict[str, Any], control: RequestControl,
             caps: dict[str, Any]) -> dict[str, Any]:
        docs = params.get("documents")
        if not isinstance(docs, list) or not docs:
            raise InvalidParams("documents must be a non-empty array", field="documents")
        if params.get("contextual"):
            raise OptionUnsupported("contextual chunking is not offered", option="contextual")
        result = self.engine.add_documents(docs, control=control)
        return {"ids": result.ids, "chunks": result.chunks}

    def _index_delete(self, params: dict[str, Any], control: RequestControl,
             caps: dict[str, Any]) -> dict[str, Any]:
        ids = params.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InvalidParams("ids must be an array of strings", field="ids")
        for i, doc_id in enumerate(ids):
            if not is_unicode(doc_id):
                raise InvalidParams("a document id must be valid Unicode (no lone surrogates)",
                                    field=f"ids[{i}]")
        return {"deleted": self.engine.delete_documents(ids, missing_ok=True)}

    def _params_call(self, model: type[MethodParams]) -> Handler:
        """The handler of a method with a params model: its params parsed under the session's
        capabilities (§12: clamped to what they advertise), run by the engine, and the
        unknown params (and a transformation's fallback) named in the result's notes."""
        def handle(params: dict[str, Any], control: RequestControl,
                   caps: dict[str, Any]) -> dict[str, Any]:
            call = model.wire(params, caps, self.engine.config)
            done = self.engine.run(call, control)
            notes = call.notes
            if isinstance(call, TransformParams):
                control.check()
                notes = notes + ([FALLBACK_NOTE] if done.fallback else [])
            return with_notes(done.to_wire(), notes, call.NOTES_IN)
        return handle

    def _feedback(self, params: dict[str, Any], control: RequestControl,
             caps: dict[str, Any]) -> dict[str, Any]:
        for name in ("signals", "sessionId", "query"):  # stored as given: must be Unicode
            bad = lone_surrogate_at(params.get(name), name)
            if bad is not None:
                raise InvalidParams(f"{bad} holds a lone UTF-16 surrogate (not valid Unicode)",
                                    field=bad)
        accepted = self.engine.record_feedback(params.get("signals"),
                                               session_id=params.get("sessionId"),
                                               query=params.get("query"))
        return {"accepted": accepted}


def with_llm_spent(result: Any, control: RequestControl) -> Any:
    """``result`` saying what the request's LLM calls cost, when it made or read any: in
    ``usage.llm`` where the result has a ``usage``, else in ``_meta.llm``."""
    spent = control.llm_spent
    if not (spent.calls or spent.cached) or not isinstance(result, dict):
        return result
    key = "usage" if "usage" in result else "_meta"
    return {**result, key: {**(result.get(key) or {}), "llm": spent.wire()}}


def with_notes(result: dict[str, Any], notes: list[str], key: str = "usage") -> dict[str, Any]:
    """``result`` with ``notes`` appended to its ``usage.notes`` (``key``: ``_meta.notes``, for
    a result without a usage), the object added if needed."""
    if not notes:
        return result
    holder = dict(result.get(key) or {})
    holder["notes"] = [*(holder.get("notes") or []), *notes]
    return {**result, key: holder}


def dumps(response: dict[str, Any] | list[dict[str, Any]]) -> str:
    """Compact JSON for the wire (:func:`jsonio.dumps`); never raises.

    A response that cannot be JSON (a NaN/Infinity or a non-JSON value that slipped
    through) becomes -32603 for the same id, so the request is still answered once.
    """
    if isinstance(response, list):  # one bad answer of a batch spoils only itself
        return "[" + ",".join(dumps(one) for one in response) + "]"
    try:
        return jsonio.dumps(response)
    except (ValueError, TypeError, RecursionError):
        log.exception("a response that is not JSON")
        id_ = response.get("id") if isinstance(response, dict) else None
        bad = _error(id_ if _valid_id(id_) else None,
                     InternalError("the server produced a response that is not JSON"))
        return jsonio.dumps(bad)
