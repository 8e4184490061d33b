"""What the recall backends copy from the docstore: the outbox of Chroma operations each write
queues, and the rows of each kind by version (added, retired, visible) that a Milvus
collection is synced from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .connection import Connection
from .schema import load_json, visible


@dataclass(frozen=True)
class OutboxOp:
    """A queued Chroma operation."""

    seq: int
    op: str
    unit: str
    level: int
    urow: int


class RecallFeed:
    """The outbox and the per-kind row streams a recall backend mirrors."""

    def __init__(self, connection: Connection) -> None:
        self._conn = connection

    def outbox(self) -> list[OutboxOp]:
        return [OutboxOp(*r) for r in self._conn.query(
            "SELECT seq, op, unit, level, urow FROM outbox ORDER BY seq")]

    def last_seq(self) -> int | None:
        """The newest queued operation's ``seq`` (None when the outbox is empty)."""
        last = self._conn.query("SELECT MAX(seq) FROM outbox")[0][0]
        return None if last is None else int(last)

    def clear_outbox(self, up_to_seq: int) -> None:
        with self._conn.transaction() as db:
            db.execute("DELETE FROM outbox WHERE seq <= ?", (up_to_seq,))

    def stored_count(self, unit: str, level: int) -> int:
        """Rows of a kind in any retained version."""
        return int(self._conn.query("SELECT COUNT(*) FROM units WHERE unit = ? AND level = ?",
                                    (unit, level))[0][0])

    def stored_kinds(self) -> list[tuple[str, int]]:
        """Every (unit, level) with stored rows in any retained version."""
        return self._conn.query("SELECT DISTINCT unit, level FROM units")

    def rowids(self, unit: str, level: int) -> list[int]:
        """Every stored rowid of a kind, in any retained version (what Chroma must hold)."""
        return [r for (r,) in self._conn.query(
            "SELECT rowid FROM units WHERE unit = ? AND level = ? ORDER BY rowid", (unit, level))]

    _SYNC_COLUMNS = (
        "SELECT u.rowid, u.uid, u.idx, u.page_start, u.page_end, u.v_from, u.v_to, u.text,"
        " u.vec, d.id, d.source, d.title, d.file_type, d.modified_ms, d.fmeta"
        " FROM units u LEFT JOIN documents d ON d.drow = u.doc_row")

    def added_rows(self, unit: str, level: int, after: int, upto: int,
                   after_rowid: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        """Rows of a kind added in versions ``after < v_from <= upto`` and still stored, in
        rowid order from ``after_rowid`` (exclusive), with their vector, text and document
        fields (``doc`` is None for a derived unit)."""
        return self._sync_rows(self._conn.query(
            f"{self._SYNC_COLUMNS} WHERE u.unit = ? AND u.level = ? AND u.v_from > ?"
            " AND u.v_from <= ? AND u.rowid > ? ORDER BY u.rowid LIMIT ?",
            (unit, level, after, upto, after_rowid, limit)))

    def rows_at(self, unit: str, level: int, version: int, after_rowid: int = 0,
                limit: int = 1000) -> list[dict[str, Any]]:
        """Rows of a kind visible at ``version``, as :meth:`added_rows` gives them."""
        return self._sync_rows(self._conn.query(
            f"{self._SYNC_COLUMNS} WHERE u.unit = ? AND u.level = ? AND {visible('u')}"
            " AND u.rowid > ? ORDER BY u.rowid LIMIT ?",
            (unit, level, version, version, after_rowid, limit)))

    def visible_signature(self, unit: str, level: int, version: int) -> tuple[int, int]:
        """(newest ``v_from``, row count) of a kind's rows visible at ``version``: it changes
        whenever that set of rows does (a write adds rows at a new version, or retires some)."""
        newest, count = self._conn.query(
            f"SELECT COALESCE(MAX(v_from), 0), COUNT(*) FROM units u WHERE unit = ? AND level = ?"
            f" AND {visible('u')}", (unit, level, version, version))[0]
        return int(newest), int(count)

    @staticmethod
    def _sync_rows(rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        return [{"rowid": r[0], "uid": r[1], "idx": r[2], "page_start": r[3], "page_end": r[4],
                 "v_from": r[5], "v_to": r[6], "text": r[7],
                 "vector": np.frombuffer(r[8], dtype=np.float32),
                 "doc": None if r[9] is None else {
                     "id": r[9], "source": r[10], "title": r[11], "file_type": r[12],
                     "modified_ms": r[13], "fmeta": load_json(r[14]) if r[14] else {}}}
                for r in rows]

    def retired_rows(self, unit: str, level: int, after: int, upto: int) -> list[tuple[int, int]]:
        """(rowid, v_to) of the rows of a kind added at or before ``after`` and retired in
        ``after < v_to <= upto``."""
        return self._conn.query(
            "SELECT rowid, v_to FROM units WHERE unit = ? AND level = ? AND v_from <= ?"
            " AND v_to > ? AND v_to <= ? ORDER BY rowid", (unit, level, after, after, upto))
