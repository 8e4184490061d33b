"""Trajectory state for agentic retrieval: what each session has already been given.

A session is keyed by the client's opaque ``sessionId`` (RCP §7.7.3). Within one
session the engine never returns a unit twice, and never returns a unit contained
in one it already returned: a chunk whose page or document was returned whole, a
chunk a returned summary covers (a tree node's leaves), a summary whose leaves all
lie in one returned summary or in documents returned whole. The reverse is allowed
on purpose: a coarser unit may still follow finer ones it contains, because
escalating from chunks to the page, document or summary around them is how a
corrective loop widens its context. Sessions expire ``ttl_seconds`` after their last use;
at most ``max_sessions`` live at once and, together, about ``max_bytes`` of memory
(least recently used evicted first); each remembers at most ``max_items`` units
(oldest forgotten first, with a note), so no client can grow the server without limit.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from .config import EngineConfig

# Bytes charged for the containers of one session and of one remembered entry, on top of
# the strings' own size. Upper estimates: tracemalloc on CPython 3.11 measured ~0.9 KB per
# empty session, ~75 B per seen unit and ~280 B per whole document/page remembered.
SESSION_OVERHEAD = 1536
ENTRY_OVERHEAD = 128


@dataclass
class SessionState:
    """What one trajectory has received."""

    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)  # unit ids, oldest first
    whole_docs: set[str] = field(default_factory=set)
    whole_pages: set[tuple[str, int]] = field(default_factory=set)
    # Leaf sets of the derived units returned (summaries), and their union.
    summaries: list[frozenset[str]] = field(default_factory=list)
    summarised: set[str] = field(default_factory=set)
    forgotten: int = 0
    last_used: float = 0.0
    nbytes: int = 0  # approximate memory held by this session, key included


@dataclass(frozen=True)
class Candidate:
    """The parts of a unit the dedup rule looks at."""

    uid: str
    unit: str
    doc_id: str
    page_start: int | None
    page_end: int | None
    # A derived unit's leaf chunk ids and the documents they lie in (None: a per-document unit).
    leaves: frozenset[str] | None = None
    docs: frozenset[str] = frozenset()


class SessionStore:
    """Bounded, expiring, thread-safe session states shared by every transport of one engine."""

    def __init__(self, *, ttl_seconds: int = 3600, max_sessions: int = 10_000,
                 max_items: int = 10_000,
                 max_bytes: int = EngineConfig.model_fields["session_max_bytes"].default,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_sessions = max_sessions
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._clock = clock
        self._sessions: OrderedDict[str, SessionState] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Approximate memory all live sessions hold together (never above ``max_bytes``
        except while a single session alone is larger)."""
        with self._lock:
            return self._bytes

    def _drop(self, session_id: str) -> bool:
        state = self._sessions.pop(session_id, None)
        if state is not None:
            self._bytes -= state.nbytes
        return state is not None

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
            self._drop(key)

    def _get(self, session_id: str) -> SessionState:
        self._expire()
        state = self._sessions.get(session_id)
        if state is None:
            state = self._sessions[session_id] = SessionState()
            self._grow(state, sys.getsizeof(session_id) + SESSION_OVERHEAD)
            while len(self._sessions) > self.max_sessions:
                self._drop(next(iter(self._sessions)))
        self._sessions.move_to_end(session_id)
        state.last_used = self._clock()
        return state

    def _grow(self, state: SessionState, nbytes: int) -> None:
        state.nbytes += nbytes
        self._bytes += nbytes

    def _evict_for_bytes(self, keep: str) -> None:
        """Drop least recently used sessions (never ``keep``) until all fit in ``max_bytes``."""
        while self._bytes > self.max_bytes and len(self._sessions) > 1:
            oldest = next(iter(self._sessions))
            if oldest == keep:  # keep is the most recent; only it is left to drop
                break
            self._drop(oldest)

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
                if c.uid not in state.seen:
                    state.seen[c.uid] = None
                    self._grow(state, sys.getsizeof(c.uid) + ENTRY_OVERHEAD)
                if c.leaves is not None:
                    if c.leaves and c.leaves not in state.summaries:
                        state.summaries.append(c.leaves)
                        new = c.leaves - state.summarised
                        state.summarised |= new
                        self._grow(state, ENTRY_OVERHEAD + sum(
                            sys.getsizeof(x) + ENTRY_OVERHEAD for x in c.leaves))
                elif c.unit == "document" and c.doc_id not in state.whole_docs:
                    state.whole_docs.add(c.doc_id)
                    self._grow(state, sys.getsizeof(c.doc_id) + 2 * ENTRY_OVERHEAD)
                elif (c.unit == "page" and c.page_start is not None
                      and (c.doc_id, c.page_start) not in state.whole_pages):
                    state.whole_pages.add((c.doc_id, c.page_start))
                    self._grow(state, sys.getsizeof(c.doc_id) + 2 * ENTRY_OVERHEAD)
            dropped = 0
            while len(state.seen) > self.max_items:
                uid, _ = state.seen.popitem(last=False)
                self._grow(state, -(sys.getsizeof(uid) + ENTRY_OVERHEAD))
                dropped += 1
            state.forgotten += dropped
            self._evict_for_bytes(keep=session_id)
            return dropped

    def forget(self, session_id: str) -> bool:
        """Drop a session; returns whether it existed."""
        with self._lock:
            return self._drop(session_id)


def _is_new(state: SessionState, c: Candidate) -> bool:
    if c.uid in state.seen:
        return False
    if c.leaves is not None:  # a summary: new unless a returned unit contains it
        if c.docs and c.docs <= state.whole_docs:
            return False
        return not any(c.leaves <= other for other in state.summaries)
    if c.unit in ("chunk", "passage") and c.uid in state.summarised:
        return False
    if c.unit in ("chunk", "passage", "page") and c.doc_id in state.whole_docs:
        return False
    if c.unit in ("chunk", "passage") and c.page_start is not None:
        end = c.page_end if c.page_end is not None else c.page_start
        return not any((c.doc_id, p) in state.whole_pages for p in range(c.page_start, end + 1))
    return True
