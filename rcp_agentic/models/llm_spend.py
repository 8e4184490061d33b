"""What query-time LLM work a caller may spend: calls and tokens per minute, per caller and
in total, as token buckets (each refills its per-minute allowance evenly over a minute).

Every attempt of a query-time call (a retry is one more) reserves one call and its
estimated tokens (the prompt's plus the completion cap) from the caller's bucket and from
the total's, or is refused with :class:`~rcp_agentic.errors.RateLimited` (-32011) and a
``retryAfterMs`` hint; the estimate is settled against what the server reports when the
reply arrives. Anonymous callers have their own, lower limits; trusted callers (in
process, the stdio parent) spend without limit. Builds have their own budget
(:class:`~.llm_usage.TokenBudget`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..control import Spender
from ..errors import RateLimited

# Callers remembered at most (the least recently seen forgotten first: a forgotten caller
# comes back with a full bucket, so this only needs to exceed the callers of one minute).
MAX_CALLERS = 10_000


@dataclass(frozen=True)
class SpendLimits:
    """Calls and tokens (prompt + completion) per minute; None: unlimited."""

    calls_per_minute: int | None = None
    tokens_per_minute: int | None = None

    def __post_init__(self) -> None:
        for value in (self.calls_per_minute, self.tokens_per_minute):
            if value is not None and value < 1:
                raise ValueError("a per-minute limit must be at least 1 (None: unlimited)")


class _Bucket:
    """One token bucket of ``capacity`` refilled at ``capacity`` per minute."""

    def __init__(self, capacity: int | None, now: float) -> None:
        self.capacity = capacity
        self.level = float(capacity or 0)
        self.stamp = now

    def _refill(self, now: float) -> None:
        if self.capacity is not None:
            self.level = min(float(self.capacity),
                             self.level + (now - self.stamp) * self.capacity / 60.0)
        self.stamp = now

    def wait(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` is available (0: now; inf: never, it exceeds capacity)."""
        if self.capacity is None:
            return 0.0
        self._refill(now)
        if amount <= self.level:
            return 0.0
        if amount > self.capacity:
            return math.inf
        return (amount - self.level) * 60.0 / self.capacity

    def take(self, amount: float) -> None:
        if self.capacity is not None:
            self.level -= amount


class _Account:
    """A caller's (or the total's) call and token buckets."""

    def __init__(self, limits: SpendLimits, now: float) -> None:
        self.calls = _Bucket(limits.calls_per_minute, now)
        self.tokens = _Bucket(limits.tokens_per_minute, now)

    def wait(self, tokens: int, now: float) -> float:
        return max(self.calls.wait(1, now), self.tokens.wait(tokens, now))

    def take(self, calls: int, tokens: int) -> None:
        self.calls.take(calls)
        self.tokens.take(tokens)


@dataclass(frozen=True)
class Reservation:
    """What one attempt reserved, to settle when its reply is in."""

    spender: Spender
    tokens: int


class SpendGovernor:
    """The query-time allowance of one LLM door (see the module doc)."""

    def __init__(self, *, total: SpendLimits = SpendLimits(),
                 caller: SpendLimits = SpendLimits(),
                 anonymous: SpendLimits = SpendLimits(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = {"total": total, "caller": caller, "anonymous": anonymous}
        self._now = clock
        self._lock = threading.Lock()
        self._total = _Account(total, self._now())
        self._callers: OrderedDict[str, _Account] = OrderedDict()

    def _account(self, spender: Spender, now: float) -> _Account:
        account = self._callers.get(spender.key)
        if account is None:
            limits = self.limits["anonymous" if spender.anonymous else "caller"]
            account = self._callers[spender.key] = _Account(limits, now)
            while len(self._callers) > MAX_CALLERS:
                self._callers.popitem(last=False)
        self._callers.move_to_end(spender.key)
        return account

    def reserve(self, spender: Spender | None, tokens: int) -> Reservation | None:
        """Reserve one call of about ``tokens`` for ``spender`` (None: trusted, unlimited),
        or raise RateLimited saying when to come back."""
        if spender is None:
            return None
        with self._lock:
            now = self._now()
            account = self._account(spender, now)
            own, total = account.wait(tokens, now), self._total.wait(tokens, now)
            if own or total:
                raise self._refusal(spender, own, total)
            account.take(1, tokens)
            self._total.take(1, tokens)
        return Reservation(spender, tokens)

    def settle(self, reservation: Reservation | None, tokens: int) -> None:
        """Charge what the call really cost instead of its estimate (a refund when less)."""
        if reservation is None:
            return
        delta = tokens - reservation.tokens
        with self._lock:
            account = self._account(reservation.spender, self._now())
            account.take(0, delta)
            self._total.take(0, delta)

    def _refusal(self, spender: Spender, own: float, total: float) -> RateLimited:
        whose = "this caller's" if own >= total else "the server's"
        if own >= total and spender.anonymous:
            whose = "an anonymous caller's"
        wait = max(own, total)
        if math.isinf(wait):
            return RateLimited(f"the LLM work asked for is larger than {whose} per-minute "
                               "allowance: ask for less (a smaller k or tokenBudget)",
                               retryable=False)
        ms = max(1, math.ceil(wait * 1000))
        return RateLimited(f"{whose} LLM allowance for this minute is spent: retry in "
                           f"{ms} ms", retryable=True, retryAfterMs=ms)
