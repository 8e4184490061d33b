"""The retry policy of §12.2: which wire errors are retried, how often, and after how long.

-32011 (RateLimited) and -32010 (BackendUnavailable) are retried with exponential
backoff and jitter, honouring ``error.data.retryAfterMs`` (the HTTP transport
copies ``Retry-After`` there); -32603 (InternalError) once; -32001
(NotInitialized) once after a fresh ``initialize``; nothing else — in particular
never -32016 (Conflict), -32006 (Cancelled) or -32014 (Timeout: the deadline is
the caller's to extend). A write that is not idempotent (``index/add`` or ``memory/build`` of a
document without an ``id``, ``feedback``) is only repeated on -32011, where the
server refused it before doing anything. Every retry waits within the call's deadline: one
that would end past it is not made.

:class:`RetryState` decides, once per failure, whether and when to try again; the client
core's ``exchange`` turns those decisions into the steps (:class:`Send`,
:class:`Reinitialize`, :class:`Wait`) that the sync and asyncio clients perform.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import RCPError
from .transport import Message

RATE_LIMITED = -32011
BACKEND_UNAVAILABLE = -32010
INTERNAL_ERROR = -32603
NOT_INITIALIZED = -32001


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff settings: ``max_retries`` retries per call, delays ``base_delay·2^n`` capped at ``max_delay``."""

    max_retries: int = 3
    base_delay: float = 0.2
    max_delay: float = 10.0

    def backoff(self, attempt: int, error: RCPError) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based) after ``error``."""
        hint = error.data.get("retryAfterMs")
        if isinstance(hint, (int, float)) and not isinstance(hint, bool) and hint >= 0:
            # Never earlier than the server asked; a little jitter so clients spread out.
            return hint / 1000.0 * (1.0 + random.uniform(0.0, 0.1))
        cap = min(self.max_delay, self.base_delay * 2 ** attempt)
        return random.uniform(cap / 2, cap)  # "equal jitter": grows, yet never in lockstep


def repeatable(method: str, params: Mapping[str, Any]) -> bool:
    """Whether sending the request twice is harmless (§7.10: explicit ids make adds upserts)."""
    if method in ("index/add", "memory/build"):
        docs = params.get("documents")
        if method == "memory/build" and docs is None:
            return True  # a rebuild over the live index (or a session's entities): idempotent
        return isinstance(docs, list) and all(isinstance(d, Mapping) and d.get("id") for d in docs)
    return method != "feedback"


class RetryState:
    """The retry bookkeeping of one call that must end by ``deadline`` (monotonic; None: never)."""

    def __init__(self, policy: RetryPolicy, *, repeatable: bool = True,
                 deadline: float | None = None) -> None:
        self.policy = policy
        self.repeatable = repeatable
        self.deadline = deadline
        self.retries = 0
        self._internal_retried = False
        self._reinitialized = False

    def reinitialize(self, error: RCPError) -> bool:
        """True (once per call) when ``error`` asks for a fresh ``initialize`` and a retry."""
        if error.code != NOT_INITIALIZED or self._reinitialized:
            return False
        self._reinitialized = True
        return True

    def delay(self, error: RCPError) -> float | None:
        """Seconds to wait before retrying after ``error``, or None: do not retry."""
        if self.retries >= self.policy.max_retries:
            return None
        if error.code == INTERNAL_ERROR and self.repeatable and not self._internal_retried:
            self._internal_retried = True
        elif not (error.code == RATE_LIMITED
                  or (error.code == BACKEND_UNAVAILABLE and self.repeatable)):
            return None
        seconds = self.policy.backoff(self.retries, error)
        self.retries += 1
        if self.deadline is not None and time.monotonic() + seconds >= self.deadline:
            return None
        return seconds


@dataclass(frozen=True)
class Send:
    """Step: send ``message`` and give back its response (``progress``: stream notifications)."""

    message: Message
    deadline: float | None
    progress: bool


@dataclass(frozen=True)
class Reinitialize:
    """Step: negotiate a fresh session, the one numbered ``generation`` having been lost."""

    generation: int


@dataclass(frozen=True)
class Wait:
    """Step: sleep ``seconds`` before retrying after ``error`` (a cancel ends the call)."""

    seconds: float
    error: RCPError
