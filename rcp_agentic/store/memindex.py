"""In-memory scoring over one kind of unit: exact cosine (numpy) and BM25 (CSC postings).

Built from the docstore's arrays and replaced whole after writes, so readers
always see one consistent snapshot. BM25 here is the Lucene/Robertson variant
(idf = ln(1 + (N − df + .5)/(df + .5)), saturation k1, length normalisation b),
with per-term impacts precomputed so a query is a sum of a few posting columns.
SQLite FTS5's ``bm25()`` measured ≈ 1 µs per matching row (≈ 3 ms a SciFact
query, most of the latency budget); this costs a fraction of that.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ranking import top
from .reads import UnitArrays


def bm25_idf(count: Any, df: Any) -> Any:
    """Lucene's BM25 idf, ln(1 + (N − df + .5)/(df + .5)), of a document frequency (or an
    array of them) among ``count`` documents."""
    return np.log1p((count - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class Ranked:
    """Top candidates of one retriever: positions into the index, scores, best first."""

    positions: np.ndarray
    scores: np.ndarray


def _top(scores: np.ndarray, k: int, candidates: np.ndarray | None = None) -> Ranked:
    """Best ``k`` of ``scores`` (restricted to ``candidates`` positions), ranked by
    :func:`~rcp_agentic.ranking.top`: ties (within float noise) by position, the rank of
    the unit id."""
    if candidates is not None:
        pool_scores = scores[candidates]
    else:
        candidates = np.arange(len(scores))
        pool_scores = scores
    picked, settled = top(pool_scores, candidates, k)
    return Ranked(candidates[picked], settled)


def _layers(units: list[str], levels: np.ndarray) -> np.ndarray:
    """Each row's layer number: one per distinct (unit, level), in order of first appearance."""
    if len(set(units)) <= 1 and (not len(levels) or levels.min() == levels.max()):
        return np.zeros(len(units), dtype=np.int64)
    seen: dict[tuple[str, int], int] = {}
    return np.fromiter((seen.setdefault((u, int(lv)), len(seen)) for u, lv in zip(units, levels)),
                       dtype=np.int64, count=len(units))


class UnitIndex:
    """Scoring arrays for one pool of units: one (unit, level), or several (a collapsed tree).

    ``unit`` names the pool; ``units`` and ``levels`` give each row's own kind. Without
    ``postings`` (a recall backend scores BM25 elsewhere) the index keeps only each term's
    document frequency and largest impact, for :meth:`doc_freq` and :meth:`sparse_ceiling`.
    """

    def __init__(self, unit: str, arrays: UnitArrays, vocab_size: int, *, k1: float,
                 b: float, postings: bool = True, kinds: tuple[tuple[str, int], ...] = (),
                 version: int = 0) -> None:
        self.unit = unit
        self.kinds = kinds or ((unit, 0),)  # the (unit, level) pairs pooled here
        self.version = version  # the index version this index is a snapshot of
        self.arrays = arrays  # what an index of a later version is merged from
        self.rowids = arrays.rowids
        self.position = {int(r): i for i, r in enumerate(arrays.rowids)}
        self.vectors = arrays.vectors
        self.uids = arrays.uids
        self.doc_ids = arrays.doc_ids
        self.page_start = arrays.page_start
        self.page_end = arrays.page_end
        self.tokens = arrays.tokens
        n = len(arrays.rowids)
        self.units = arrays.units or [unit] * n
        self.levels = arrays.levels if len(arrays.levels) == n else np.zeros(n, dtype=np.int64)
        self._uid_position: dict[str, int] | None = None
        self.size = n
        rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(arrays.offsets))
        cols = arrays.term_ids.astype(np.int64)
        # Another process may have added terms after this process loaded its vocabulary.
        vocab_size = max(vocab_size, int(cols.max()) + 1 if len(cols) else 0)
        tf = arrays.term_tfs
        # Each kind of a pool (chunks, each tree level) keeps its own BM25 statistics, so
        # a chunk scores as it does in a chunk-only index whatever else shares the pool.
        layer = self.layer = _layers(self.units, self.levels)
        layers = int(layer.max()) + 1 if n else 0
        if layers == 1:  # one kind (the usual pool): the same sums without per-layer masks
            df = np.bincount(cols, minlength=vocab_size).astype(np.float64)
            norm = k1 * (1.0 - b + b * arrays.lengths / max(float(arrays.lengths.mean()), 1e-9))
            impact = bm25_idf(n, df)[cols] * tf * (k1 + 1.0) / (tf + norm[rows])
        else:
            impact = np.zeros(len(cols), dtype=np.float64)
        for k in range(layers if layers > 1 else 0):
            mine = layer == k
            count = int(mine.sum())
            at = mine[rows]
            df = np.bincount(cols[at], minlength=vocab_size).astype(np.float64)
            idf = bm25_idf(count, df)
            avgdl = float(arrays.lengths[mine].mean())
            norm = k1 * (1.0 - b + b * arrays.lengths / max(avgdl, 1e-9))
            impact[at] = idf[cols[at]] * tf[at] * (k1 + 1.0) / (tf[at] + norm[rows[at]])
        # CSC layout: postings of term t are rows[indptr[t]:indptr[t+1]], by row (a stable
        # sort of the term ids; numpy only: the query path does not import scipy).
        order = np.argsort(cols, kind="stable")
        self.indptr = np.zeros(vocab_size + 1, dtype=np.int64)
        np.cumsum(np.bincount(cols, minlength=vocab_size), out=self.indptr[1:])
        self.postings = postings
        self.term_max = np.zeros(vocab_size, dtype=np.float32)
        if postings:
            self.post_rows = rows[order].astype(np.int32)
            self.post_impact = impact[order].astype(np.float32)
        else:
            present = np.flatnonzero(np.diff(self.indptr))
            if len(present):
                self.term_max[present] = np.maximum.reduceat(impact[order],
                                                             self.indptr[present])
            self.post_rows = np.zeros(0, dtype=np.int32)
            self.post_impact = np.zeros(0, dtype=np.float32)

    def at_version(self, version: int) -> UnitIndex:
        """This index as the snapshot of a later ``version`` at which none of its rows
        changed (its arrays shared, not copied)."""
        later = copy.copy(self)
        later.version = version
        return later

    def kind_positions(self, unit: str, level: int) -> np.ndarray:
        """Positions of the rows of one (unit, level) in this pool."""
        return np.flatnonzero((np.asarray(self.units) == unit) & (self.levels == level))

    def positions_of_uids(self, uids: list[str]) -> np.ndarray:
        """Positions of the given unit ids that this index holds, in position order."""
        if self._uid_position is None:
            self._uid_position = {u: i for i, u in enumerate(self.uids)}
        found = {self._uid_position[u] for u in uids if u in self._uid_position}
        return np.array(sorted(found), dtype=np.int64)

    def positions_of(self, rowids: np.ndarray) -> np.ndarray:
        """Positions of the given rowids that this index holds."""
        pos = [self.position.get(int(r)) for r in rowids]
        return np.fromiter((p for p in pos if p is not None), dtype=np.int64)

    def dense(self, query: np.ndarray, k: int, candidates: np.ndarray | None = None) -> Ranked:
        """Exact cosine top-``k`` (vectors are unit length, so a dot product)."""
        if self.vectors is None:
            raise RuntimeError("this index holds no vectors")
        if candidates is not None:
            scores = np.zeros(self.size, dtype=np.float32)
            scores[candidates] = self.vectors[candidates] @ query
        else:
            scores = self.vectors @ query
        return _top(scores, k, candidates)

    def _need_postings(self) -> None:
        if not self.postings:
            raise RuntimeError("this index holds no BM25 postings (the recall backend scores)")

    def sparse(self, term_ids: list[int], k: int, candidates: np.ndarray | None = None) -> Ranked:
        """BM25 top-``k`` among units matching at least one query term."""
        self._need_postings()
        spans = [(self.indptr[t], self.indptr[t + 1]) for t in term_ids
                 if t + 1 < len(self.indptr)]
        if not spans:
            return Ranked(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        rows = np.concatenate([self.post_rows[s:e] for s, e in spans])
        weights = np.concatenate([self.post_impact[s:e] for s, e in spans])
        scores = np.bincount(rows, weights=weights, minlength=self.size)
        matched = np.flatnonzero(scores > 0)
        if candidates is not None:
            matched = np.intersect1d(matched, candidates, assume_unique=True)
        return _top(scores, k, matched)

    def doc_freq(self, term_id: int | None) -> int:
        """How many units hold the term (0 for an unknown one)."""
        if term_id is None or term_id + 1 >= len(self.indptr):
            return 0
        return int(self.indptr[term_id + 1] - self.indptr[term_id])

    def sparse_scores(self, term_ids: list[int], positions: np.ndarray) -> np.ndarray:
        """BM25 of the units at ``positions`` (postings of a term are sorted by row)."""
        self._need_postings()
        scores = np.zeros(len(positions), dtype=np.float64)
        for t in term_ids:
            if t + 1 >= len(self.indptr) or self.indptr[t + 1] == self.indptr[t]:
                continue
            s, e = self.indptr[t], self.indptr[t + 1]
            rows = self.post_rows[s:e]
            at = np.minimum(np.searchsorted(rows, positions), len(rows) - 1)
            found = rows[at] == positions
            scores[found] += self.post_impact[s:e][at[found]]
        return scores

    def sparse_ceiling(self, term_ids: list[int]) -> float:
        """The largest BM25 any unit could reach for these terms: Σ of each term's largest impact.

        A query-dependent but corpus-anchored scale: BM25 ÷ ceiling is in [0, 1].
        """
        total = 0.0
        for t in term_ids:
            if not self.postings:
                total += float(self.term_max[t]) if t < len(self.term_max) else 0.0
            elif t + 1 < len(self.indptr) and self.indptr[t + 1] > self.indptr[t]:
                total += float(self.post_impact[self.indptr[t]:self.indptr[t + 1]].max())
        return total
