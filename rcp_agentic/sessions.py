"""Trajectory state for agentic retrieval: what each session has already been given.

A session is keyed by the client's opaque ``sessionId`` (RCP §7.7.3). Within one session the
engine never returns a unit twice, nor a unit contained in one it already returned (a chunk
whose page, document or covering summary was returned; a summary whose leaves all lie in one
returned summary or in documents returned whole). The reverse is allowed on purpose: a
coarser unit may still follow finer ones it contains, because escalating from chunks to the
page, document or summary around them is how a corrective loop widens its context. Sessions
expire ``ttl_seconds`` after their last use; at most ``max_sessions`` live at once, within
``session_max_bytes`` shared with the engine's other session state (:mod:`.bounded`); each
remembers at most ``max_items`` units and ``max_items`` leaf ids of summaries (oldest
forgotten first, with a note), so no client can grow the server without limit.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .bounded import DEFAULT_MAX_BYTES, ByteBudget, SessionKeyed
from .containment import Extent, Held

# Bytes charged for the containers of one session and of one remembered entry, on top of
# the strings' own size. Upper estimates: tracemalloc on CPython 3.11 measured ~0.9 KB per
# empty session, ~75 B per seen unit and ~280 B per whole document/page remembered.
SESSION_OVERHEAD = 1536
ENTRY_OVERHEAD = 128


@dataclass
class SessionState:
    """What one trajectory has received: the units it holds (:class:`~.containment.Held`)
    and what remembering them costs."""

    held: Held = field(default_factory=Held)
    summary_leaves: int = 0  # leaf ids in ``held.summaries``, counted with repeats
    forgotten: int = 0
    nbytes: int = 0  # approximate memory held by this session, key included


# What the dedup rule looks at of a unit (the containment module's extent).
Candidate = Extent


class SessionStore(SessionKeyed[SessionState]):
    """Bounded, expiring, thread-safe session states shared by every transport of one engine
    (a :class:`~.bounded.SessionKeyed`; ``budget``: the engine's session budget, shared with
    the graph memory and DRIFT frontiers; without one, a budget of ``max_bytes`` of its own)."""

    def __init__(self, *, ttl_seconds: int = 3600, max_sessions: int = 10_000,
                 max_items: int = 10_000,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 budget: ByteBudget | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(lambda _key, state: state.nbytes, max_sessions=max_sessions,
                         ttl_seconds=ttl_seconds, budget=budget, max_bytes=max_bytes,
                         clock=clock)
        self.max_items = max_items

    def is_new(self, session_id: str, c: Candidate) -> bool:
        """Whether ``c`` may still be returned in this session (no unit it returned holds it)."""
        return self._store.peek(session_id,
                                lambda state: state is None or not state.held.holds(c))

    def filter_new(self, session_id: str, candidates: list[Candidate]) -> list[bool]:
        """``is_new`` for many candidates under one lock."""
        return self._store.peek(session_id, lambda state: [True] * len(candidates)
                                if state is None else [not state.held.holds(c)
                                                       for c in candidates])

    def seen_count(self, session_id: str) -> int:
        return self._store.peek(session_id, lambda state: len(state.held.seen) if state else 0)

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
            return dropped + len(held[0].held.seen)
        return dropped

    def _remember(self, state: SessionState, returned: list[Candidate]) -> int:
        held = state.held
        for c in returned:
            state.nbytes += _cost(held, c)
            if c.leaves and c.leaves not in held.summaries:
                state.summary_leaves += len(c.leaves)
            held.add(c)
        dropped = 0
        while len(held.seen) > self.max_items:
            uid = next(iter(held.seen))
            del held.seen[uid]
            state.nbytes -= sys.getsizeof(uid) + ENTRY_OVERHEAD
            dropped += 1
        # The summaries' leaf ids count against max_items too (oldest summary first), so a
        # session returning large summaries does not grow past its bound either.
        if state.summary_leaves > self.max_items:
            while state.summary_leaves > self.max_items:
                old = held.summaries.pop(0)
                state.summary_leaves -= len(old)
                state.nbytes -= _summary_bytes(old)
                dropped += 1
            held.summarised = set().union(*held.summaries)
        state.forgotten += dropped
        return dropped


def _summary_bytes(leaves: frozenset[str]) -> int:
    """What remembering one summary's leaf set costs (the frozenset and its share of
    ``summarised``)."""
    return ENTRY_OVERHEAD + sum(sys.getsizeof(x) + ENTRY_OVERHEAD for x in leaves)


def _cost(held: Held, c: Candidate) -> int:
    """The bytes remembering ``c`` adds to ``held`` (0 for what it holds already)."""
    nbytes = 0 if c.uid in held.seen else sys.getsizeof(c.uid) + ENTRY_OVERHEAD
    if c.leaves is not None:
        if c.leaves and c.leaves not in held.summaries:
            nbytes += _summary_bytes(c.leaves)
    elif c.unit == "document" and c.doc_id not in held.whole_docs:
        nbytes += sys.getsizeof(c.doc_id) + 2 * ENTRY_OVERHEAD
    elif (c.unit == "page" and c.page_start is not None
          and (c.doc_id, c.page_start) not in held.whole_pages):
        nbytes += sys.getsizeof(c.doc_id) + 2 * ENTRY_OVERHEAD
    return nbytes
