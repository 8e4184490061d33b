"""What calls to an LLM cost, counted per stage (``tree``, ``graph``, ``communities`` for
builds; ``global``, ``drift``, ``rewrite``, ``transform``, ``rerank`` for queries), and the
token budget a build runs under.

``calls`` are requests sent (each retry is one more call and is counted in ``retries``
too); ``cached`` are replies read from the engine's LLM cache instead; ``seconds`` adds up the
time of each call (calls overlap, so it exceeds the wall time); ``failures`` are
calls given up (retries spent or not retryable); ``fallbacks`` are replies not used (did
not parse, empty, repetitive, flagged by the injection screen), by reason. Tokens are the
server's ``usage`` when it reports it, else counted with the engine's tokenizer.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import BudgetExhausted

BUILD_STAGES = ("tree", "graph", "communities")


@dataclass
class StageUsage:
    """Counters of one stage."""

    calls: int = 0
    cached: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    fallbacks: Counter[str] = field(default_factory=Counter)

    def minus(self, before: StageUsage) -> StageUsage:
        return StageUsage(self.calls - before.calls, self.cached - before.cached,
                          self.retries - before.retries, self.failures - before.failures,
                          self.prompt_tokens - before.prompt_tokens,
                          self.completion_tokens - before.completion_tokens,
                          self.seconds - before.seconds, self.fallbacks - before.fallbacks)

    def copy(self) -> StageUsage:
        return self.minus(StageUsage())

    def wire(self) -> dict[str, Any]:
        """camelCase counters (the build report, ``status``, the CLI)."""
        return {"calls": self.calls, "cached": self.cached, "retries": self.retries,
                "failures": self.failures, "promptTokens": self.prompt_tokens,
                "completionTokens": self.completion_tokens,
                "callSeconds": round(self.seconds, 3),
                "fallbacks": dict(sorted(self.fallbacks.items()))}

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class LLMUsage:
    """Thread-safe counters by stage, over the life of one LLM door."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stages: dict[str, StageUsage] = {}

    def add(self, stage: str, *, calls: int = 0, cached: int = 0, retries: int = 0,
            failures: int = 0, prompt_tokens: int = 0, completion_tokens: int = 0,
            seconds: float = 0.0, fallback: str | None = None) -> None:
        with self._lock:
            s = self._stages.setdefault(stage, StageUsage())
            s.calls += calls
            s.cached += cached
            s.retries += retries
            s.failures += failures
            s.prompt_tokens += prompt_tokens
            s.completion_tokens += completion_tokens
            s.seconds += seconds
            if fallback:
                s.fallbacks[fallback] += 1

    def of(self, stage: str) -> StageUsage:
        """A copy of one stage's counters."""
        with self._lock:
            return self._stages.get(stage, StageUsage()).copy()

    def snapshot(self) -> dict[str, StageUsage]:
        """A copy of every stage's counters."""
        with self._lock:
            return {name: s.copy() for name, s in self._stages.items()}

    @staticmethod
    def since(before: dict[str, StageUsage], after: dict[str, StageUsage],
              stages: Iterable[str] | None = None) -> StageUsage:
        """What the chosen stages (all: None) spent between two snapshots, summed."""
        total = StageUsage()
        for name, s in after.items():
            if stages is not None and name not in stages:
                continue
            d = s.minus(before.get(name, StageUsage()))
            total = StageUsage(total.calls + d.calls, total.cached + d.cached,
                               total.retries + d.retries, total.failures + d.failures,
                               total.prompt_tokens + d.prompt_tokens,
                               total.completion_tokens + d.completion_tokens,
                               total.seconds + d.seconds, total.fallbacks + d.fallbacks)
        return total


class TokenBudget:
    """Tokens one build may spend on LLM calls (None: unbounded). Checked before each call
    that is not answered from the cache, so a build stops cleanly at the first call past
    the budget (calls already in flight finish and are kept in the cache)."""

    def __init__(self, limit: int | None) -> None:
        if limit is not None and limit < 1:
            raise ValueError("a token budget must be at least 1")
        self.limit = limit
        self._spent = 0
        self._lock = threading.Lock()

    @property
    def spent(self) -> int:
        return self._spent

    def charge(self, tokens: int) -> None:
        with self._lock:
            self._spent += tokens

    def check(self, stage: str, left: int) -> None:
        """Raise :class:`BudgetExhausted` when the budget is spent; ``left`` is how many
        calls of ``stage`` were still to be asked (named in the error)."""
        if self.limit is not None and self._spent >= self.limit:
            raise BudgetExhausted(
                f"the build's LLM token budget ({self.limit} tokens) is spent: {self._spent} "
                f"tokens used, {left} {stage} call(s) not made. What was asked is cached; run "
                "the build again (with a larger llm_build_token_budget) to go on from there",
                limit=self.limit, spent=self._spent, stage=stage, callsLeft=left)
