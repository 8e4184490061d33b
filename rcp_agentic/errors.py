"""One exception hierarchy for the whole package, each class carrying its RCP/1 error code.

Every failure a caller can act on is an :class:`RCPError`; the protocol layer
turns it into a JSON-RPC error object with ``code``, ``message`` and ``data``
(``field`` for bad params, ``option`` for unsupported options, §12.1).
"""

from __future__ import annotations

from typing import Any


class RCPError(Exception):
    """Base class: an error with an RCP/1 code and structured ``data``."""

    code: int = -32603

    def __init__(self, message: str, *, field: str | None = None, option: str | None = None,
                 **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = {k: v for k, v in data.items() if v is not None}
        if field is not None:
            self.data["field"] = field
        if option is not None:
            self.data["option"] = option

    @property
    def field(self) -> str | None:
        return self.data.get("field")

    @property
    def option(self) -> str | None:
        return self.data.get("option")

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data:
            err["data"] = self.data
        return err

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code}, data={self.data!r})"


class ParseError(RCPError):
    """A frame that is not JSON."""

    code = -32700


class InvalidRequest(RCPError):
    """A frame that is not a valid JSON-RPC request, or a second ``initialize``."""

    code = -32600


class NotInitialized(RCPError):
    """A gated method called before a successful ``initialize``."""

    code = -32001


class VersionMismatch(RCPError):
    """No protocol version both peers support."""

    code = -32002


class UnknownMethod(RCPError):
    """A method RCP/1 does not define."""

    code = -32004


class InvalidParams(RCPError):
    """A parameter is missing, of the wrong type, out of range, or names an unknown field."""

    code = -32602


class InternalError(RCPError):
    """A server-side failure that is not the caller's fault."""

    code = -32603


class CapabilityMissing(RCPError):
    """The method exists in RCP but this engine does not offer it."""

    code = -32003


class OptionUnsupported(RCPError):
    """A requested option value (mode, fusion method, unit, operator) is not offered."""

    code = -32005


class Cancelled(RCPError):
    """The request was abandoned after a ``notifications/cancel`` (§7.14)."""

    code = -32006


class BackendUnavailable(RCPError):
    """A backend (model, Chroma server, snapshot) cannot serve the request."""

    code = -32010


class RateLimited(RCPError):
    """The server is shedding load; back off and retry."""

    code = -32011


class Unauthorized(RCPError):
    """The caller did not present valid credentials."""

    code = -32012


class PayloadTooLarge(RCPError):
    """A request exceeds a server limit (body bytes, batch size)."""

    code = -32013


class Timeout(RCPError):
    """The request's deadline elapsed before it finished (§13.1)."""

    code = -32014


class NotFound(RCPError):
    """A referenced entity (document id, session, cursor) does not exist."""

    code = -32015


class Conflict(RCPError):
    """The request conflicts with stored state, e.g. an index built with another embedding model."""

    code = -32016


class EmbeddingMismatch(Conflict):
    """The engine directory was built with another embedding model than the one given."""


ERRORS_BY_CODE: dict[int, type[RCPError]] = {
    cls.code: cls for cls in (ParseError, InvalidRequest, NotInitialized, VersionMismatch,
                              CapabilityMissing, UnknownMethod, OptionUnsupported, Cancelled,
                              InvalidParams, InternalError, BackendUnavailable, RateLimited,
                              Unauthorized, PayloadTooLarge, Timeout, NotFound, Conflict)}


def error_from_wire(error: dict[str, Any]) -> RCPError:
    """The exception for a JSON-RPC ``error`` object (an unknown code keeps its code)."""
    code = error.get("code")
    message = str(error.get("message", "error"))
    data = error.get("data")
    cls = ERRORS_BY_CODE.get(code) if isinstance(code, int) else None
    exc = (cls or RCPError)(message)
    if isinstance(data, dict):
        exc.data = dict(data)
    elif data is not None:
        exc.data = {"detail": data}
    if cls is None and isinstance(code, int):
        exc.code = code
    return exc


class BudgetExhausted(BackendUnavailable):
    """A build's LLM token budget is spent: the build stopped before its next LLM call.
    The units of the last good build stay served; what was asked is in the LLM cache, so
    running the build again goes on from where it stopped. On the wire it is
    ``BackendUnavailable`` (RCP defines no code of its own for it) with ``data.reason``
    ``"llm-budget"``."""

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message, reason="llm-budget", **data)
