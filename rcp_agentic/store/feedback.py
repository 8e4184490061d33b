"""Client feedback signals (RCP ``feedback``, §7.16), kept in the engine's SQLite database.

Signals are untrusted, advisory input: they are validated, recorded and queryable,
and retrieval never reads them, so they cannot alter any result.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidParams
from .connection import Connection

MAX_SIGNALS = 1000
MAX_TEXT = 10_000
FLAGS = ("used", "cited", "helpful", "poisonSuspected", "injectionSuspected")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS feedback (
    seq INTEGER PRIMARY KEY, at REAL NOT NULL, session_id TEXT, query TEXT,
    hit_id TEXT NOT NULL, used INTEGER, cited INTEGER, helpful INTEGER, reward REAL,
    poison_suspected INTEGER, injection_suspected INTEGER);
CREATE INDEX IF NOT EXISTS feedback_session ON feedback(session_id);
CREATE INDEX IF NOT EXISTS feedback_hit ON feedback(hit_id);
"""
_COLUMNS = ("used", "cited", "helpful", "reward", "poison_suspected", "injection_suspected")


@dataclass(frozen=True)
class FeedbackSignal:
    """One recorded signal about a hit; a flag or reward left unset is None."""

    hit_id: str
    at: float
    session_id: str | None = None
    query: str | None = None
    used: bool | None = None
    cited: bool | None = None
    helpful: bool | None = None
    reward: float | None = None
    poison_suspected: bool | None = None
    injection_suspected: bool | None = None


def _text(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise InvalidParams(f"{field} must be a string of at most {MAX_TEXT} characters",
                            field=field)
    return value


def _signal_values(raw: Any, i: int) -> tuple[str, list[Any]]:
    where = f"signals[{i}]"
    if not isinstance(raw, dict):
        raise InvalidParams(f"{where} must be an object", field=where)
    hit_id = raw.get("hitId")
    if not isinstance(hit_id, str) or not hit_id or len(hit_id) > MAX_TEXT:
        raise InvalidParams(f"{where}.hitId must be a non-empty string", field=f"{where}.hitId")
    flags = {}
    for name in FLAGS:
        value = raw.get(name)
        if value is not None and not isinstance(value, bool):
            raise InvalidParams(f"{where}.{name} must be a boolean", field=f"{where}.{name}")
        flags[name] = value
    reward = raw.get("reward")
    if reward is not None:
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) \
                or not math.isfinite(reward) or not -1.0 <= reward <= 1.0:
            raise InvalidParams(f"{where}.reward must be a number in [-1, 1]",
                                field=f"{where}.reward")
        reward = float(reward)
    return hit_id, [flags["used"], flags["cited"], flags["helpful"], reward,
                    flags["poisonSuspected"], flags["injectionSuspected"]]


class FeedbackLog:
    """Append-only log of feedback signals beside the docstore's tables."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        with connection.transaction() as db:
            for statement in _SCHEMA.strip().split(";"):
                if statement.strip():
                    db.execute(statement)

    def record(self, signals: Any, *, session_id: Any = None, query: Any = None) -> int:
        """Validate and store ``signals`` (all or none); returns how many were recorded."""
        if not isinstance(signals, list):
            raise InvalidParams("signals must be an array", field="signals")
        if len(signals) > MAX_SIGNALS:
            raise InvalidParams(f"at most {MAX_SIGNALS} signals per call", field="signals")
        session = _text(session_id, "sessionId")
        text = _text(query, "query")
        rows = [_signal_values(raw, i) for i, raw in enumerate(signals)]
        now = time.time()
        with self.connection.transaction() as db:
            db.executemany(
                f"INSERT INTO feedback(at, session_id, query, hit_id, {', '.join(_COLUMNS)}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(now, session, text, hit_id, *values) for hit_id, values in rows])
        return len(rows)

    def signals(self, *, session_id: str | None = None, hit_id: str | None = None,
                limit: int = 1000) -> list[FeedbackSignal]:
        """Recorded signals, oldest first, optionally for one session and/or one hit."""
        where, params = [], []
        if session_id is not None:
            where.append("session_id = ?")
            params.append(session_id)
        if hit_id is not None:
            where.append("hit_id = ?")
            params.append(hit_id)
        sql = ("SELECT hit_id, at, session_id, query, " + ", ".join(_COLUMNS) + " FROM feedback"
               + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY seq LIMIT ?")
        out = []
        for row in self.connection.query(sql, [*params, int(limit)]):
            hit, at, session, text, used, cited, helpful, reward, poison, injection = row
            out.append(FeedbackSignal(
                hit_id=hit, at=at, session_id=session, query=text,
                used=None if used is None else bool(used),
                cited=None if cited is None else bool(cited),
                helpful=None if helpful is None else bool(helpful), reward=reward,
                poison_suspected=None if poison is None else bool(poison),
                injection_suspected=None if injection is None else bool(injection)))
        return out
