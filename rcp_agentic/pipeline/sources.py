"""Recall sources: each gives one named ranked list of a query's candidates.

A source is one small protocol (:class:`RecallSource`): whether a plan wants it, and its
list for a query (``candidate_k`` deep, plus what the session has seen), given the heads
of the lists of the sources before it. Dense and sparse recall run in the recall backend
(``store/recall.py``); graph recall (``graph/recall.py``, a plug-in) walks the knowledge graph from
the query's entities, seeded with the dense and sparse lists. Each list can score any
other position exactly, for fusion and for a hit's per-stage scores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from ..store.docstore import Docstore
from ..store.memindex import UnitIndex
from ..store.recall import RecallBackend
from ..vocabulary import DENSE_MODES, SPARSE_MODES
from .candidates import Query, RecallList
from .params import Plan


class RecallSource(Protocol):
    """One named recall list of the fusion."""

    name: str

    def wanted(self, plan: Plan) -> bool:
        """Whether the plan recalls through this source."""

    def recall(self, query: Query, lists: Mapping[str, Sequence[tuple[int, float]]],
               depth: int) -> RecallList | None:
        """The ``depth`` best units for ``query`` (None: this source has nothing to say, with
        a usage note); ``lists`` are the heads of the lists of the sources run before it
        (``Plan.pool_depth`` deep: the query's pool)."""


def unit_vectors(store: Docstore, index: UnitIndex, positions: np.ndarray) -> np.ndarray:
    """Vectors of the units at ``positions``: from memory, or SQLite above dense_exact_max."""
    if index.vectors is not None:
        return index.vectors[positions]
    rowids = index.rowids[positions].tolist()
    got = store.vectors(rowids)
    return np.vstack([got[r] for r in rowids])


def cosines(vectors: np.ndarray, qvec: np.ndarray) -> np.ndarray:
    """Each row's dot product with ``qvec`` (unit vectors: the cosine), row by row: a BLAS
    matrix-vector product sums a row in an order that depends on how many rows it is given,
    so its last bits would depend on the batch; einsum's loop sums each row the same way."""
    return np.einsum("ij,j->i", vectors, qvec)


class ScoredList(RecallList):
    """A dense or sparse recall list; ``score(positions)`` gives the source's exact score of
    any positions (cosine with the query, or BM25 for its terms), each independent of the
    other positions asked for.

    A unit the list holds is scored by the list's own score: the score it was ranked by and
    the one the query's pool holds, so a hit's place in its pool is read from the same
    number (a cosine computed again, by the recall backend's index or in another batch, can
    differ in its last bits and move the hit a place in the pool)."""

    def __init__(self, ranked: list[tuple[int, float]],
                 score: Callable[[np.ndarray], np.ndarray]) -> None:
        super().__init__(ranked)
        self._score = score
        self._listed = dict(ranked)

    def scores_at(self, positions: list[int]) -> dict[int, float]:
        rest = [p for p in positions if p not in self._listed]
        got = (dict(zip(rest, self._score(np.asarray(rest, dtype=np.int64)).tolist()))
               if rest else {})
        return {p: float(self._listed[p]) if p in self._listed else got[p] for p in positions}


class DenseSource:
    """Nearest units by cosine, from the recall backend."""

    name = "dense"

    def __init__(self, recall: RecallBackend, store: Docstore) -> None:
        self._recall = recall
        self._store = store

    def wanted(self, plan: Plan) -> bool:
        return plan.mode in DENSE_MODES

    def recall(self, query: Query, lists: Mapping[str, Sequence[tuple[int, float]]],
               depth: int) -> ScoredList:
        qvec = query.qvec
        assert qvec is not None
        ranked = self._recall.dense(query.index, qvec, depth=depth, allowed=query.allowed,
                                    native=query.native)
        return ScoredList(ranked, lambda pos: cosines(unit_vectors(self._store, query.index, pos),
                                                      qvec))


class SparseSource:
    """Best units by BM25, from the recall backend."""

    name = "sparse"

    def __init__(self, recall: RecallBackend) -> None:
        self._recall = recall

    def wanted(self, plan: Plan) -> bool:
        return plan.mode in SPARSE_MODES

    def recall(self, query: Query, lists: Mapping[str, Sequence[tuple[int, float]]],
               depth: int) -> ScoredList:
        ranked = self._recall.sparse(query.index, query.term_ids, depth=depth,
                                     allowed=query.allowed, native=query.native)
        return ScoredList(ranked, lambda pos: self._recall.sparse_scores(query.index,
                                                                         query.term_ids, pos))
