"""Per-request control threaded through the engine: cancellation, a deadline, progress reports.

The protocol layer creates one :class:`RequestControl` per request; the engine calls
:meth:`RequestControl.check` between stages (so a cancel or an expired deadline
stops the work at the next stage boundary) and :meth:`RequestControl.report` to
emit progress (§9). Engine calls made without one run uncontrolled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import Cancelled, Timeout


@dataclass(frozen=True)
class Spender:
    """Whom a request's LLM calls are charged to (:mod:`rcp_agentic.models.llm_spend`):
    ``key`` names the caller; ``anonymous`` picks the anonymous limits."""

    key: str
    anonymous: bool = False


@dataclass
class LLMSpent:
    """What one request's LLM calls cost (every attempt is a call; ``cached`` replies were
    read from the engine's cache instead)."""

    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def wire(self) -> dict[str, int]:
        """camelCase counters for ``usage.llm``."""
        return {"calls": self.calls, "cached": self.cached, "promptTokens": self.prompt_tokens,
                "completionTokens": self.completion_tokens}


@dataclass(frozen=True)
class Progress:
    """One progress report: ``progress`` in [0, 1], the pipeline ``stage``, optional partial hits."""

    progress: float
    stage: str
    message: str
    partial_hits: list[dict[str, Any]] | None = None


class RequestControl:
    """Cancellation flag, deadline and progress sink of one request (thread-safe)."""

    def __init__(self, *, timeout: float | None = None,
                 on_progress: Callable[[Progress], None] | None = None,
                 parent: RequestControl | None = None,
                 spender: Spender | None = None) -> None:
        self.deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        # A request of a batch lives inside the batch's control: never past its deadline,
        # and cancelled with it (a client that hangs up cancels the whole batch).
        self.parent = parent
        if parent is not None and parent.deadline is not None:
            self.deadline = (parent.deadline if self.deadline is None
                             else min(self.deadline, parent.deadline))
        self.on_progress = on_progress
        # None: a trusted caller, whose LLM work no allowance limits.
        self.spender = spender
        self.llm_spent = LLMSpent()
        self._spent_lock = threading.Lock()
        self._cancelled = threading.Event()
        self.reason: str | None = None

    @property
    def wants_progress(self) -> bool:
        return self.on_progress is not None

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set() or (self.parent is not None and self.parent.cancelled)

    def cancel(self, reason: str | None = None) -> None:
        self.reason = reason
        self._cancelled.set()

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: no deadline)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def check(self) -> None:
        """Raise Cancelled or Timeout if the request should stop now."""
        if self.parent is not None:
            self.parent.check()
        if self._cancelled.is_set():
            raise Cancelled("the request was cancelled" + (f": {self.reason}" if self.reason
                                                           else ""))
        left = self.remaining()
        if left is not None and left <= 0:
            raise Timeout("the request's deadline elapsed", retryable=True)

    def charge_llm(self, *, calls: int = 0, cached: int = 0, prompt_tokens: int = 0,
                   completion_tokens: int = 0) -> None:
        """Add LLM work done for this request (thread-safe: a batch of calls runs in a pool)."""
        with self._spent_lock:
            s = self.llm_spent
            s.calls += calls
            s.cached += cached
            s.prompt_tokens += prompt_tokens
            s.completion_tokens += completion_tokens

    def report(self, progress: float, stage: str, message: str,
               partial_hits: list[dict[str, Any]] | None = None) -> None:
        """Emit a progress report (a no-op when nobody listens)."""
        if self.on_progress is not None:
            self.on_progress(Progress(min(1.0, max(0.0, progress)), stage, message, partial_hits))


def checked(control: RequestControl | None) -> RequestControl:
    """``control`` or an inert one, so engine code never tests for None."""
    return control if control is not None else RequestControl()
