"""Trajectory-scoped graph memory (``memory/build`` with ``scope: "session"``, RCP §7.17).

The corpus-wide memory is the knowledge graph itself. A session's memory is the set
of entities its trajectory touched — linked in the texts it built from, in the queries
it recalled with, and in the clues it was given — each with a weight, newest kept.
Recall seeds PageRank with them (at a smaller share than the query's own entities), so
an agent's later steps stay near what it was following.

Bounded like :class:`~rcp_agentic.sessions.SessionStore`: at most ``max_sessions``
sessions (least recently used evicted first), ``max_entities`` entities each (oldest
forgotten first) and ``ttl_seconds`` after last use.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping


class SessionMemory:
    """Entities by session id: ``{entity key: weight}``, bounded and expiring, thread-safe."""

    def __init__(self, *, max_sessions: int = 10_000, max_entities: int = 256,
                 ttl_seconds: int = 3600, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_sessions = max_sessions
        self.max_entities = max_entities
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._sessions: OrderedDict[str, tuple[float, OrderedDict[str, float]]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._sessions)

    def _expire(self) -> None:
        now = self._clock()
        while self._sessions:
            key, (used, _e) = next(iter(self._sessions.items()))
            if now - used <= self.ttl_seconds:
                break
            del self._sessions[key]

    def add(self, session_id: str, entities: Mapping[str, float]) -> int:
        """Remember ``entities`` (a weight kept at its maximum) for ``session_id``; returns how
        many entities the session holds."""
        with self._lock:
            self._expire()
            _used, held = self._sessions.pop(session_id, (0.0, OrderedDict()))
            for key, w in entities.items():
                if w <= 0:
                    continue
                held[key] = max(w, held.pop(key, 0.0))  # re-inserted: now the newest
            while len(held) > self.max_entities:
                held.popitem(last=False)
            self._sessions[session_id] = (self._clock(), held)
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
            return len(held)

    def get(self, session_id: str) -> dict[str, float]:
        """The session's entities and weights ({} for an unknown or expired session)."""
        with self._lock:
            self._expire()
            got = self._sessions.get(session_id)
            if got is None:
                return {}
            self._sessions.move_to_end(session_id)
            self._sessions[session_id] = (self._clock(), got[1])
            return dict(got[1])

    def forget(self, session_id: str) -> bool:
        """Drop a session's memory; returns whether it existed."""
        with self._lock:
            return self._sessions.pop(session_id, None) is not None
