"""Recall sources: each gives one named ranked list of a query's candidates.

A source is one small protocol (:class:`RecallSource`): whether a plan wants it, and its
list for a query (``candidate_k`` deep, plus what the session has seen), given the lists
of the sources before it. Dense and sparse recall run in the recall backend
(``store/recall.py``); graph recall (:mod:`.graph_recall`) walks the knowledge graph from
the query's entities, seeded with the dense and sparse lists. Each list can score any
other position exactly, for fusion and for a hit's per-stage scores.
"""

from __future__ import annotations

from collections.abc import Mapping
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

    def recall(self, query: Query, lists: Mapping[str, RecallList],
               depth: int) -> RecallList | None:
        """The ``depth`` best units for ``query`` (None: this source has nothing to say, with
        a usage note); ``lists`` are the lists of the sources run before it."""


def unit_vectors(store: Docstore, index: UnitIndex, positions: np.ndarray) -> np.ndarray:
    """Vectors of the units at ``positions``: from memory, or SQLite above dense_exact_max."""
    if index.vectors is not None:
        return index.vectors[positions]
    rowids = index.rowids[positions].tolist()
    got = store.vectors(rowids)
    return np.vstack([got[r] for r in rowids])


class DenseList(RecallList):
    """Dense recall's list; any position scores its cosine with the query."""

    def __init__(self, ranked: list[tuple[int, float]], store: Docstore, query: Query) -> None:
        super().__init__(ranked)
        self._store = store
        self._query = query

    def scores_at(self, positions: list[int]) -> dict[int, float]:
        if not positions:
            return {}
        assert self._query.qvec is not None
        pos = np.asarray(positions, dtype=np.int64)
        sims = unit_vectors(self._store, self._query.index, pos) @ self._query.qvec
        return dict(zip(positions, sims.tolist()))


class SparseList(RecallList):
    """Sparse (BM25) recall's list; any position scores its BM25 for the query's terms."""

    def __init__(self, ranked: list[tuple[int, float]], recall: RecallBackend,
                 query: Query) -> None:
        super().__init__(ranked)
        self._recall = recall
        self._query = query

    def scores_at(self, positions: list[int]) -> dict[int, float]:
        if not positions:
            return {}
        pos = np.asarray(positions, dtype=np.int64)
        q = self._query
        return dict(zip(positions, self._recall.sparse_scores(q.index, q.term_ids, pos).tolist()))


class DenseSource:
    """Nearest units by cosine, from the recall backend."""

    name = "dense"

    def __init__(self, recall: RecallBackend, store: Docstore) -> None:
        self._recall = recall
        self._store = store

    def wanted(self, plan: Plan) -> bool:
        return plan.mode in DENSE_MODES

    def recall(self, query: Query, lists: Mapping[str, RecallList], depth: int) -> DenseList:
        assert query.qvec is not None
        ranked = self._recall.dense(query.index, query.qvec, depth=depth, allowed=query.allowed,
                                    native=query.native)
        return DenseList(ranked, self._store, query)


class SparseSource:
    """Best units by BM25, from the recall backend."""

    name = "sparse"

    def __init__(self, recall: RecallBackend) -> None:
        self._recall = recall

    def wanted(self, plan: Plan) -> bool:
        return plan.mode in SPARSE_MODES

    def recall(self, query: Query, lists: Mapping[str, RecallList], depth: int) -> SparseList:
        ranked = self._recall.sparse(query.index, query.term_ids, depth=depth,
                                     allowed=query.allowed, native=query.native)
        return SparseList(ranked, self._recall, query)
