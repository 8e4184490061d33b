"""RCP/1 client: one interface over in-process, stdio and HTTP transports, sync and async.

>>> from rcp_agentic.client import RCPClient
>>> with RCPClient.http("http://127.0.0.1:8750", token="…") as rcp:    # doctest: +SKIP
...     rcp.retrieve("what is reciprocal rank fusion?", k=5, token_budget=800).hits
>>> async with AsyncRCPClient.stdio(engine="./my-engine") as rcp:      # doctest: +SKIP
...     await rcp.embed(["a", "b"], encoding="f32-base64", as_numpy=True)

``retrieve``, ``rerank``, ``graph``, ``transform``, ``memory_build`` and
``memory_recall`` return the typed results an :class:`~rcp_agentic.Engine` returns (the
pydantic models of :mod:`rcp_agentic.wire`, parsed from the wire result; ``to_wire()``
gives it back, see :mod:`.results`); ``info``, ``ping``, ``embed`` (vectors decoded),
``index_add``, ``index_delete``, ``feedback``, ``call`` and ``batch`` return wire dicts.
Errors are :class:`~rcp_agentic.errors.RCPError` subclasses chosen by code, plus
:class:`ClientTimeout` and :class:`TransportError`. The client sends ``initialize`` on
first use, gates every call on the advertised capabilities before any I/O (§14.4),
pre-clamps ``k`` to ``maxK``, retries per §12.2, sends the remaining deadline as
``_meta.deadlineMs``, routes progress notifications to ``on_progress`` callbacks (§9),
and cancels what it stops waiting for (§7.14).
"""

from .async_client import AsyncRCPClient
from .cancel import CancelToken
from .errors import (
                     BackendUnavailable,
                     Cancelled,
                     CapabilityMissing,
                     ClientTimeout,
                     Conflict,
                     InternalError,
                     InvalidParams,
                     InvalidRequest,
                     NotFound,
                     NotInitialized,
                     OptionUnsupported,
                     PayloadTooLarge,
                     RateLimited,
                     RCPError,
                     Timeout,
                     TransportError,
                     Unauthorized,
                     UnknownMethod,
                     VersionMismatch,
)
from .retry import RetryPolicy
from .sync_client import RCPClient
from .transport import AsyncTransport, Transport

__all__ = [
    "AsyncRCPClient", "AsyncTransport", "BackendUnavailable", "CancelToken", "Cancelled",
    "CapabilityMissing", "ClientTimeout", "Conflict", "InternalError", "InvalidParams",
    "InvalidRequest", "NotFound", "NotInitialized", "OptionUnsupported", "PayloadTooLarge",
    "RCPClient", "RCPError", "RateLimited", "RetryPolicy", "Timeout", "Transport",
    "TransportError", "Unauthorized", "UnknownMethod", "VersionMismatch",
]
