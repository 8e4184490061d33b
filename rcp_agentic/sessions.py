"""Trajectory state for agentic retrieval: what each session has already been given.

A session is keyed by the client's opaque ``sessionId`` (RCP §7.7.3). Within one
session the engine never returns a unit twice, and never returns a chunk whose
page or document it already returned whole. The reverse is allowed on purpose: a
page or document may still be returned after some of its chunks were, because
escalating from chunks to the page or document around them is how a corrective
loop widens its context. Sessions expire ``ttl_seconds`` after their last use;
at most ``max_sessions`` live at once (least recently used evicted first) and each
remembers at most ``max_items`` units (oldest forgotten first, with a note), so no
client can grow the server without limit.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class SessionState:
    """What one trajectory has received."""

    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)  # unit ids, oldest first
    whole_docs: set[str] = field(default_factory=set)
    whole_pages: set[tuple[str, int]] = field(default_factory=set)
    forgotten: int = 0
    last_used: float = 0.0


@dataclass(frozen=True)
class Candidate:
    """The parts of a unit the dedup rule looks at."""

    uid: str
    unit: str
    doc_id: str
    page_start: int | None
    page_end: int | None


class SessionStore:
    """Bounded, expiring, thread-safe session states shared by every transport of one engine."""

    def __init__(self, *, ttl_seconds: int = 3600, max_sessions: int = 10_000,
                 max_items: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_sessions = max_sessions
        self.max_items = max_items
        self._clock = clock
        self._sessions: OrderedDict[str, SessionState] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._sessions)

    def _expire(self) -> None:
        now = self._clock()
        while self._sessions:
            key, state = next(iter(self._sessions.items()))
            if now - state.last_used <= self.ttl_seconds:
                break
            del self._sessions[key]

    def _get(self, session_id: str) -> SessionState:
        self._expire()
        state = self._sessions.get(session_id)
        if state is None:
            state = self._sessions[session_id] = SessionState()
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(session_id)
        state.last_used = self._clock()
        return state

    def is_new(self, session_id: str, c: Candidate) -> bool:
        """Whether ``c`` may still be returned in this session."""
        with self._lock:
            state = self._sessions.get(session_id)
            if state is None:
                return True
            return _is_new(state, c)

    def filter_new(self, session_id: str, candidates: list[Candidate]) -> list[bool]:
        """``is_new`` for many candidates under one lock."""
        with self._lock:
            state = self._sessions.get(session_id)
            if state is None:
                return [True] * len(candidates)
            return [_is_new(state, c) for c in candidates]

    def seen_count(self, session_id: str) -> int:
        with self._lock:
            state = self._sessions.get(session_id)
            return len(state.seen) if state else 0

    def record(self, session_id: str, returned: list[Candidate]) -> int:
        """Remember what was returned; returns how many old entries were forgotten for room."""
        with self._lock:
            state = self._get(session_id)
            for c in returned:
                state.seen[c.uid] = None
                if c.unit == "document":
                    state.whole_docs.add(c.doc_id)
                elif c.unit == "page" and c.page_start is not None:
                    state.whole_pages.add((c.doc_id, c.page_start))
            dropped = 0
            while len(state.seen) > self.max_items:
                state.seen.popitem(last=False)
                dropped += 1
            state.forgotten += dropped
            return dropped

    def forget(self, session_id: str) -> bool:
        """Drop a session; returns whether it existed."""
        with self._lock:
            return self._sessions.pop(session_id, None) is not None


def _is_new(state: SessionState, c: Candidate) -> bool:
    if c.uid in state.seen:
        return False
    if c.unit in ("chunk", "passage", "page") and c.doc_id in state.whole_docs:
        return False
    if c.unit in ("chunk", "passage") and c.page_start is not None:
        end = c.page_end if c.page_end is not None else c.page_start
        return not any((c.doc_id, p) in state.whole_pages for p in range(c.page_start, end + 1))
    return True
