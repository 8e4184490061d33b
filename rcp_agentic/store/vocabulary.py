"""The term vocabulary of the BM25 postings: term ids shared by every process that opens the
engine directory, loaded into memory and kept in step with other processes' commits."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping

import numpy as np

from .connection import Connection


class Vocabulary:
    """Term ↔ id, as committed in the ``vocab`` table (ids only grow, and never change).

    A :class:`~.connection.Follower` of its connection: it loads the terms other processes
    added at each refresh and at the start of each write transaction (where no other
    writer can add to it), and forgets the terms a rolled-back transaction added.
    """

    def __init__(self, connection: Connection) -> None:
        self._conn = connection
        self._vocab: dict[str, int] = {}
        self._terms: dict[int, str] = {}
        self._max = -1
        self._committed = -1  # the largest committed id when the transaction began
        self.catch_up()

    def catch_up(self) -> None:
        """Add the terms committed since the last load (ids only grow, so only new ids)."""
        with self._conn.lock:
            rows = self._conn.db.execute("SELECT id, term FROM vocab WHERE id > ? ORDER BY id",
                                         (self._max,)).fetchall()
            if rows:
                self._vocab.update((t, i) for i, t in rows)
                self._terms.update(rows)
                self._max = int(rows[-1][0])

    def begin(self) -> None:
        self._committed = self._max
        self.catch_up()
        self._committed = self._max

    def rollback(self) -> None:
        if self._max != self._committed:
            self._vocab = {t: i for t, i in self._vocab.items() if i <= self._committed}
            self._max = self._committed

    def assign(self, db: sqlite3.Connection, terms: Iterable[str]) -> None:
        """Give every new term an id (inside a transaction, whose start loaded the vocabulary)."""
        new = [t for t in set(terms) if t not in self._vocab]
        if new:
            start = int(db.execute("SELECT COALESCE(MAX(id), -1) + 1 FROM vocab").fetchone()[0])
            rows = [(start + i, t) for i, t in enumerate(sorted(new))]
            db.executemany("INSERT INTO vocab(id, term) VALUES (?, ?)", rows)
            self._vocab.update((t, i) for i, t in rows)
            self._terms.update(rows)
            self._max = max(self._max, rows[-1][0])

    def encode(self, terms: Mapping[str, int]) -> np.ndarray:
        """The ids of ``terms`` (all assigned), in their order, as stored in a unit row."""
        return np.fromiter((self._vocab[t] for t in terms), dtype=np.uint32, count=len(terms))

    def term_id(self, term: str) -> int | None:
        return self._vocab.get(term)

    def terms_of(self, term_ids: Iterable[int]) -> list[str]:
        """The terms of vocabulary ids (ids this process has not loaded are skipped)."""
        return [self._terms[t] for t in term_ids if t in self._terms]

    def vocab_size(self) -> int:
        """One more than the largest term id known to this process."""
        return self._max + 1
