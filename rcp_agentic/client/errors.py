"""Client errors: the project's one hierarchy (:mod:`rcp_agentic.errors`) plus two local failures.

Wire errors map to the ``RCPError`` subclass of their code via
:func:`rcp_agentic.errors.error_from_wire` (an unknown code stays a plain
``RCPError`` keeping its code, §12). Only a client can observe the two classes
defined here: its own deadline elapsing and the connection itself failing.
"""

from __future__ import annotations

from ..errors import (
    BackendUnavailable,
    Cancelled,
    CapabilityMissing,
    Conflict,
    InternalError,
    InvalidParams,
    InvalidRequest,
    NotFound,
    NotInitialized,
    OptionUnsupported,
    ParseError,
    PayloadTooLarge,
    RateLimited,
    RCPError,
    Timeout,
    Unauthorized,
    UnknownMethod,
    VersionMismatch,
    error_from_wire,
)


class ClientTimeout(Timeout, TimeoutError):
    """The client's own deadline elapsed before the response arrived (§13.1).

    A ``notifications/cancel`` was sent for the request and its late response, if
    any, is discarded. ``except Timeout`` catches this and the server's -32014 alike.
    """


class TransportError(RCPError, ConnectionError):
    """The connection failed: the server process died, HTTP was refused or reset (§13.1).

    Requests in flight are failed locally; whether they took effect is unknown.
    Carries code -32010 (the engine is unreachable) but is never retried by the client.
    """

    code = -32010


__all__ = [
    "BackendUnavailable", "Cancelled", "CapabilityMissing", "ClientTimeout", "Conflict",
    "InternalError", "InvalidParams", "InvalidRequest", "NotFound", "NotInitialized",
    "OptionUnsupported", "ParseError", "PayloadTooLarge", "RCPError", "RateLimited", "Timeout",
    "TransportError", "Unauthorized", "UnknownMethod", "VersionMismatch", "error_from_wire",
]
