"""Transport-agnostic RCP/1 JSON-RPC handling for one connection (§4, §7, §11, §12, §13).

A transport (stdio, HTTP) hands each parsed frame to :meth:`Dispatcher.handle` and
writes back whatever it returns (``None`` means nothing: notifications are never
answered). Errors are RCP error objects; unexpected failures become -32603 without
leaking internals, and nothing a client sends can crash the dispatcher.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..engine import Engine
from ..errors import (CapabilityMissing, InternalError, InvalidParams, InvalidRequest,
                      NotInitialized, OptionUnsupported, ParseError, RCPError, UnknownMethod,
                      VersionMismatch)

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
# Every method RCP/1 defines, and the capability that gates it (None: always offered).
RCP_METHODS: dict[str, str | None] = {
    "initialize": None, "info": None, "ping": None, "shutdown": None, "embed": "embed",
    "embed/sparse": "sparseEmbed", "embed/multi": "multiVector", "rerank": "rerank",
    "retrieve": "retrieve", "query/transform": "transform", "graph": "graph",
    "index/add": "index", "index/delete": "index", "catalog/list": "catalog",
    "feedback": "feedback", "memory/build": "memory", "memory/recall": "memory",
}
ALWAYS_ALLOWED = frozenset({"initialize", "info", "ping", "shutdown"})


def _error(id_: Any, err: RCPError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": err.to_wire()}


def _valid_id(id_: Any) -> bool:
    return (isinstance(id_, str) or (isinstance(id_, (int, float)) and not isinstance(id_, bool)))


class Dispatcher:
    """One RCP connection's state (initialized or not) in front of a shared Engine."""

    def __init__(self, engine: Engine, *, server_name: str = "rcp-agentic",
                 max_batch: int = 64, on_shutdown: Callable[[], None] | None = None,
                 stateless: bool = False) -> None:
        self.engine = engine
        self.server_name = server_name
        self.max_batch = max_batch
        self.on_shutdown = on_shutdown
        # Stateless (HTTP, §5.2): every request is implicitly initialized and
        # initialize/info answer idempotently.
        self.stateless = stateless
        self.initialized = stateless
        # Fixed for the session (§13.2): computed once, at the first initialize or info.
        self._capabilities: dict[str, Any] | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "initialize": self._initialize, "info": self._info, "ping": self._ping,
            "shutdown": self._shutdown, "retrieve": self._retrieve, "rerank": self._rerank,
            "index/add": self._index_add, "index/delete": self._index_delete,
            "embed": self._embed,
        }

    # --- framing ------------------------------------------------------------------------

    def handle_text(self, text: str | bytes) -> str | None:
        """A raw frame in, the JSON text to send back (or None)."""
        try:
            message = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            return json.dumps(_error(None, ParseError(f"invalid JSON: {exc}")))
        response = self.handle(message)
        if response is None:
            return None
        try:
            return json.dumps(response, ensure_ascii=False, allow_nan=False)
        except ValueError:  # a NaN/Infinity slipped through: never put it on the wire
            log.exception("non-finite number in a response")
            bad = _error(response.get("id") if isinstance(response, dict) else None,
                         InternalError("the server produced a non-finite number"))
            return json.dumps(bad)

    def handle(self, message: Any) -> dict[str, Any] | list[dict[str, Any]] | None:
        """A parsed frame (object or batch array) in; response object(s) or None out."""
        if isinstance(message, list):
            if not message:
                return _error(None, InvalidRequest("an empty batch is not a valid request"))
            if len(message) > self.max_batch:
                return _error(None, InvalidParams(f"batch of {len(message)} exceeds the limit of "
                                                  f"{self.max_batch}", field="batch"))
            out = [r for r in (self._one(m) for m in message) if r is not None]
            return out or None
        return self._one(message)

    def _one(self, msg: Any) -> dict[str, Any] | None:
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
            return None
        if params is None:
            params = {}
        if not isinstance(params, dict):
            return _error(id_, InvalidParams("params must be an object", field="params"))
        try:
            result = self._call(method, params)
        except RCPError as err:
            return _error(id_, err)
        except Exception:  # never let a client crash the server
            log.exception("internal error in %s", method)
            return _error(id_, InternalError(f"internal error while handling {method}"))
        return {"jsonrpc": "2.0", "id": id_, "result": result}

    def _call(self, method: str, params: dict[str, Any]) -> Any:
        if method not in RCP_METHODS and not method.startswith("x-"):
            raise UnknownMethod(f"method {method!r} is not defined by RCP/1")
        if method not in ALWAYS_ALLOWED and not self.initialized:
            raise NotInitialized(f"{method} before a successful initialize")
        gate = RCP_METHODS.get(method)
        handler = self._handlers.get(method)
        if handler is None or (gate is not None and gate not in self.capabilities()):
            raise CapabilityMissing(f"{method} is not offered by this server")
        return handler(params)

    # --- lifecycle ----------------------------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        if self._capabilities is None:
            caps = self.engine.capabilities()
            caps["index"] = {"writable": True, "chunking": True}
            self._capabilities = caps
        return self._capabilities

    def _peer(self) -> dict[str, Any]:
        return {"protocolVersion": PROTOCOL_VERSION,
                "server": {"name": self.server_name, "version": __version__},
                "capabilities": self.capabilities()}

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.initialized and not self.stateless:
            raise InvalidRequest("initialize was already completed on this connection")
        version = params.get("protocolVersion")
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidParams("protocolVersion must be an integer", field="protocolVersion")
        if version < 1:
            raise VersionMismatch(f"no common protocol version (client {version}, server 1)")
        self.initialized = True
        return {**self._peer(), "protocolVersion": min(version, PROTOCOL_VERSION)}

    def _info(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._peer()

    def _ping(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"nonce": params["nonce"]} if "nonce" in params else {}

    def _shutdown(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.on_shutdown is not None:
            self.on_shutdown()
        return {}

    # --- methods ------------------------------------------------------------------------

    def _retrieve(self, params: dict[str, Any]) -> dict[str, Any]:
        return self.engine.retrieve_params(params).to_wire()

    def _embed(self, params: dict[str, Any]) -> dict[str, Any]:
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

    def _rerank(self, params: dict[str, Any]) -> dict[str, Any]:
        if "query" not in params:
            raise InvalidParams("query is required", field="query")
        passages = params.get("passages")
        if not isinstance(passages, list):
            raise InvalidParams("passages must be an array", field="passages")
        top_n = params.get("topN")
        return self.engine.rerank(params["query"], passages,
                                  method=params.get("method"), top_n=top_n).to_wire()

    def _index_add(self, params: dict[str, Any]) -> dict[str, Any]:
        docs = params.get("documents")
        if not isinstance(docs, list) or not docs:
            raise InvalidParams("documents must be a non-empty array", field="documents")
        if params.get("contextual"):
            raise OptionUnsupported("contextual chunking is not offered", option="contextual")
        result = self.engine.add_documents(docs)
        return {"ids": result.ids, "chunks": result.chunks}

    def _index_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        ids = params.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InvalidParams("ids must be an array of strings", field="ids")
        return {"deleted": self.engine.delete_documents(ids, missing_ok=True)}
