"""The docstore's ``info`` table: engine-wide keys (identity, embedding, builder state) and the
index version with the versions still retained."""

from __future__ import annotations

import sqlite3

from .connection import Connection

# How many versions behind the newest a derived kind may hold retired rows from collection
# (:meth:`InfoTable.collect_through`). A builder that follows a write stream folds in the
# rows retired since the version its kind reflects; at one write a second a pass over three
# builders at 46k chunks spans ~10-30 versions, past the 8 kept for readers. A kind no
# longer built (its key stays behind) holds rows at most this long.
FOLLOW_VERSIONS = 256


def capped_reflects(reflects: int, at_most: int | None, data_version: int) -> int:
    """The version a derived kind reflects: ``reflects``, or ``at_most`` (what the derived
    units it was made from reflect) when that is lower and lags the documents
    (``data_version``)."""
    if at_most is not None and at_most < data_version:
        return min(reflects, at_most)
    return reflects


class InfoTable:
    """Keys of the ``info`` table and the index versions they record."""

    def __init__(self, connection: Connection, *, retain: int) -> None:
        self._conn = connection
        self.retain = retain

    def info(self, key: str) -> str | None:
        rows = self._conn.query("SELECT value FROM info WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    @staticmethod
    def put(db: sqlite3.Connection, key: str, value: str) -> None:
        """Store ``key`` in the caller's transaction."""
        db.execute("INSERT OR REPLACE INTO info(key, value) VALUES (?, ?)", (key, value))

    def set_info(self, key: str, value: str) -> None:
        with self._conn.transaction() as db:
            self.put(db, key, value)

    def set_info_if(self, key: str, value: str, *, base_version: int) -> bool:
        """Store ``key`` only if no write committed since ``base_version``; whether it did."""
        with self._conn.transaction() as db:
            if self.index_version() != base_version:
                return False
            self.put(db, key, value)
            return True

    def info_default(self, key: str, value: str) -> str:
        """The stored value of ``key``, storing ``value`` first if there is none (atomic, so
        processes opening a new engine directory at once agree on it)."""
        with self._conn.transaction() as db:
            db.execute("INSERT OR IGNORE INTO info(key, value) VALUES (?, ?)", (key, value))
            return str(db.execute("SELECT value FROM info WHERE key = ?", (key,)).fetchone()[0])

    def index_version(self) -> int:
        return int(self.info("index_version") or 0)

    @staticmethod
    def record_version(db: sqlite3.Connection, version: int, *, data: bool) -> None:
        """Make ``version`` the index version in the caller's transaction; ``data``: the write
        changed documents (not only derived units), so it is the data version too."""
        db.execute("INSERT OR REPLACE INTO info(key, value) VALUES ('index_version', ?)",
                   (str(version),))
        if data:
            db.execute("INSERT OR REPLACE INTO info(key, value) VALUES ('data_version', ?)",
                       (str(version),))

    def oldest_retained(self, version: int | None = None) -> int:
        """The oldest index version still readable."""
        current = self.index_version() if version is None else version
        return max(0, current - self.retain + 1)

    def collect_through(self, version: int) -> int:
        """Up to which version retired rows may be deleted by the commit of ``version``: the
        oldest retained one, or lower while a derived kind reflects an older version (within
        :data:`FOLLOW_VERSIONS`) and so has yet to fold in the rows retired since."""
        floor = self.oldest_retained(version)
        for (value,) in self._conn.query(
                "SELECT value FROM info WHERE key LIKE 'derived.%.version'"):
            # One below: a builder follows from the version it read, which is one below the
            # version its commit records when no document was written in between.
            kept = int(value) - 1
            if version - FOLLOW_VERSIONS <= kept < floor:
                floor = max(0, kept)
        return floor

    def readable_since(self, version: int) -> bool:
        """Whether every row retired after ``version`` is still stored, so the changes since
        it can be read (no collection went past it)."""
        collected = self.info("collected_through")
        return version >= (int(collected) if collected is not None else self.oldest_retained())
