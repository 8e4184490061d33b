"""RCP/1 client: one interface over in-process, stdio and HTTP transports, sync and async.

>>> from rcp_agentic.client import RCPClient
>>> with RCPClient.http("http://127.0.0.1:8750", token="…") as rcp:    # doctest: +SKIP
...     rcp.retrieve("what is reciprocal rank fusion?", k=5, token_budget=800).hits
>>> async with AsyncRCPClient.stdio(engine="./my-engine") as rcp:      # doctest: +SKIP
...     await rcp.embed(["a", "b"], encoding="f32-base64", as_numpy=True)

``retrieve``, ``rerank``, ``graph``, ``transform`` and ``memory_*`` return the typed results
an :class:`~rcp_agentic.Engine` returns (:mod:`.results`); the other methods, ``call`` and
``batch`` return wire dicts. Errors are :class:`~rcp_agentic.errors.RCPError` subclasses by
code, plus :class:`ClientTimeout` and :class:`TransportError`. A client initializes on first
use, gates every call on the advertised capabilities before any I/O (§14.4), clamps ``k`` to
``maxK``, retries per §12.2, sends the deadline as ``_meta.deadlineMs``, routes progress to
``on_progress`` (§9) and cancels what it stops waiting for (§7.14).
"""

from .async_client import AsyncRCPClient
from .cancel import CancelToken
from .errors import (BackendUnavailable, Cancelled, CapabilityMissing, ClientTimeout, Conflict,
                     InternalError, InvalidParams, InvalidRequest, NotFound, NotInitialized,
                     OptionUnsupported, PayloadTooLarge, RateLimited, RCPError, Timeout,
                     TransportError, Unauthorized, UnknownMethod, VersionMismatch)
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
