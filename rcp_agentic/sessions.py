"""Trajectory state for agentic retrieval: what each session has already been given.

A session is keyed by the client's opaque ``sessionId`` (RCP §7.7.3). Within one
session the engine never returns a unit twice, and never returns a unit contained
in one it already returned: a chunk whose page or document was returned whole, a
chunk a returned summary covers (a tree node's leaves), a summary whose leaves all
lie in one returned summary or in documents returned whole. The reverse is allowed
on purpose: a coarser unit may still follow finer ones it contains, because
escalating from chunks to the page, document or summary around them is how a
corrective loop widens its context. Sessions expire ``ttl_seconds`` after their last use;
at most ``max_sessions`` live at once and, together with the engine's other
session-scoped state (graph memory, DRIFT frontiers), at most ``session_max_bytes``
(:mod:`.bounded`: least recently used evicted first); each remembers at most
``max_items`` units and ``max_items`` leaf ids of summaries (oldest forgotten first, with
a note), so no client can grow the server without limit.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from .bounded import DEFAULT_MAX_BYTES, BoundedStore, ByteBudget

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
    summary_leaves: int = 0  # leaf ids in ``summaries``, counted with repeats
    forgotten: int = 0
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
    """Bounded, expiring, thread-safe session states shared by every transport of one engine
    (a :class:`~.bounded.BoundedStore`; ``budget``: the engine's session budget, shared with
    the graph memory and DRIFT frontiers; without one, a budget of ``max_bytes`` of its own)."""

    def __init__(self, *, ttl_seconds: int = 3600, max_sessions: int = 10_000,
                 max_items: int = 10_000,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 budget: ByteBudget | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_items = max_items
        self._store: BoundedStore[SessionState] = BoundedStore(
            lambda _key, state: state.nbytes, budget=budget, max_bytes=max_bytes,
            max_entries=max_sessions, ttl_seconds=ttl_seconds, clock=clock)

    @property
    def nbytes(self) -> int:
        """Approximate memory the live sessions hold together (within the shared budget)."""
        return self._store.nbytes

    def __len__(self) -> int:
        return len(self._store)

    def is_new(self, session_id: str, c: Candidate) -> bool:
        """Whether ``c`` may still be returned in this session."""
        return self._store.peek(session_id, lambda state: state is None or _is_new(state, c))

    def filter_new(self, session_id: str, candidates: list[Candidate]) -> list[bool]:
        """``is_new`` for many candidates under one lock."""
        return self._store.peek(session_id, lambda state: [True] * len(candidates)
                                if state is None else [_is_new(state, c) for c in candidates])

    def seen_count(self, session_id: str) -> int:
        return self._store.peek(session_id, lambda state: len(state.seen) if state else 0)

    def record(self, session_id: str, returned: list[Candidate]) -> int:
        """Remember what was returned; returns how many old entries were forgotten for room
        (every unit of the session when it alone is larger than the whole budget)."""
        held: list[SessionState] = []

        def change(state: SessionState) -> int:
            held.append(state)
            return self._remember(state, returned)

        dropped = self._store.update(session_id, change, lambda: SessionState(
            nbytes=sys.getsizeof(session_id) + SESSION_OVERHEAD))
        if session_id not in self._store:
            return dropped + len(held[0].seen)
        return dropped

    def _remember(self, state: SessionState, returned: list[Candidate]) -> int:
        for c in returned:
            if c.uid not in state.seen:
                state.seen[c.uid] = None
                state.nbytes += sys.getsizeof(c.uid) + ENTRY_OVERHEAD
            if c.leaves is not None:
                if c.leaves and c.leaves not in state.summaries:
                    state.summaries.append(c.leaves)
                    state.summary_leaves += len(c.leaves)
                    state.summarised |= c.leaves - state.summarised
                    state.nbytes += _summary_bytes(c.leaves)
            elif c.unit == "document" and c.doc_id not in state.whole_docs:
                state.whole_docs.add(c.doc_id)
                state.nbytes += sys.getsizeof(c.doc_id) + 2 * ENTRY_OVERHEAD
            elif (c.unit == "page" and c.page_start is not None
                  and (c.doc_id, c.page_start) not in state.whole_pages):
                state.whole_pages.add((c.doc_id, c.page_start))
                state.nbytes += sys.getsizeof(c.doc_id) + 2 * ENTRY_OVERHEAD
        dropped = 0
        while len(state.seen) > self.max_items:
            uid, _ = state.seen.popitem(last=False)
            state.nbytes -= sys.getsizeof(uid) + ENTRY_OVERHEAD
            dropped += 1
        # The summaries' leaf ids count against max_items too (oldest summary first), so a
        # session returning large summaries does not grow past its bound either.
        if state.summary_leaves > self.max_items:
            while state.summary_leaves > self.max_items:
                old = state.summaries.pop(0)
                state.summary_leaves -= len(old)
                state.nbytes -= _summary_bytes(old)
                dropped += 1
            state.summarised = set().union(*state.summaries)
        state.forgotten += dropped
        return dropped

    def forget(self, session_id: str) -> bool:
        """Drop a session; returns whether it existed."""
        return self._store.forget(session_id)


def _summary_bytes(leaves: frozenset[str]) -> int:
    """What remembering one summary's leaf set costs (the frozenset and its share of
    ``summarised``)."""
    return ENTRY_OVERHEAD + sum(sys.getsizeof(x) + ENTRY_OVERHEAD for x in leaves)


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
