"""Trajectory-scoped graph memory (``memory/build`` with ``scope: "session"``, RCP §7.17).

The corpus-wide memory is the knowledge graph itself. A session's memory is the set
of entities its trajectory touched — linked in the texts it built from, in the queries
it recalled with, and in the clues it was given — each with a weight, newest kept.
Recall seeds PageRank with them (at a smaller share than the query's own entities), so
an agent's later steps stay near what it was following.

Bounded like :class:`~rcp_agentic.sessions.SessionStore`, in the same byte budget
(:mod:`rcp_agentic.bounded`): at most ``max_sessions`` sessions (least recently used
evicted first), ``max_entities`` entities each (oldest forgotten first), ``ttl_seconds``
after last use, and every byte charged to the engine's ``session_max_bytes``.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from ..bounded import DEFAULT_MAX_BYTES, ByteBudget, SessionKeyed

# Bytes charged for one session's entity map and for each entity in it, on top of the
# strings' own size. Upper estimates: tracemalloc on CPython 3.11 measured ~140 B for an
# empty OrderedDict and ~100 B per entry (its node, hash slot and float weight).
MEMORY_OVERHEAD = 256
ENTITY_OVERHEAD = 160


def memory_bytes(session_id: str, held: Mapping[str, float]) -> int:
    """What one session's memory holds, key included (an upper estimate: the entity keys
    are usually the graph's own strings)."""
    return (MEMORY_OVERHEAD + sys.getsizeof(session_id)
            + sum(sys.getsizeof(k) + ENTITY_OVERHEAD for k in held))


class SessionMemory(SessionKeyed[OrderedDict[str, float]]):
    """Entities by session id: ``{entity key: weight}``, bounded and expiring, thread-safe."""

    def __init__(self, *, max_sessions: int = 10_000, max_entities: int = 256,
                 ttl_seconds: int = 3600, budget: ByteBudget | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(memory_bytes, max_sessions=max_sessions, ttl_seconds=ttl_seconds,
                         budget=budget, max_bytes=max_bytes, clock=clock)
        self.max_entities = max_entities

    def add(self, session_id: str, entities: Mapping[str, float]) -> int:
        """Remember ``entities`` (a weight kept at its maximum) for ``session_id``; returns how
        many entities the session holds (0 when it could not be kept)."""
        def change(held: OrderedDict[str, float]) -> int:
            for key, w in entities.items():
                if w <= 0:
                    continue
                held[key] = max(w, held.pop(key, 0.0))  # re-inserted: now the newest
            while len(held) > self.max_entities:
                held.popitem(last=False)
            return len(held)

        n = self._store.update(session_id, change, OrderedDict)
        return n if session_id in self._store else 0

    def get(self, session_id: str) -> dict[str, float]:
        """The session's entities and weights ({} for an unknown or expired session)."""
        with self._store.lock:
            held = self._store.get(session_id)
            return {} if held is None else dict(held)
