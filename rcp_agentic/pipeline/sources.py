"""Recall sources: each gives one named ranked list of a query's candidates.

A source is one small protocol (:class:`RecallSource`): whether a plan wants it, and its
list for a query (``candidate_k`` deep, plus what the session has seen), given the lists
of the sources before it. Dense and sparse recall run in the recall backend
(``store/recall.py``); graph recall (:mod:`.graph_recall`) walks the knowledge graph from
the query's entities, seeded with the dense and sparse lists. Each list can score any
other position exactly, for fusion and for a hit's per-stage scores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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


class ScoredList(RecallList):
    """A dense or sparse recall list; ``score(positions)`` gives the source's exact score of
    any positions (cosine with the query, or BM25 for its terms)."""

    def __init__(self, ranked: list[tuple[int, float]],
                 score: Callable[[np.ndarray], np.ndarray]) -> None:
        super().__init__(ranked)
        self._score = score

    def scores_at(self, positions: list[int]) -> dict[int, float]:
        if not positions:
            return {}
        return dict(zip(positions, self._score(np.asarray(positions, dtype=np.int64)).tolist()))


class DenseSource:
    """Nearest units by cosine, from the recall backend."""

    name = "dense"

    def __init__(self, recall: RecallBackend, store: Docstore) -> None:
        self._recall = recall
        self._store = store

    def wanted(self, plan: Plan) -> bool:
        return plan.mode in DENSE_MODES

    def recall(self, query: Query, lists: Mapping[str, RecallList], depth: int) -> ScoredList:
        qvec = query.qvec
        assert qvec is not None
        ranked = self._recall.dense(query.index, qvec, depth=depth, allowed=query.allowed,
                                    native=query.native)
        return ScoredList(ranked, lambda pos: unit_vectors(self._store, query.index, pos) @ qvec)


class SparseSource:
    """Best units by BM25, from the recall backend."""

    name = "sparse"

    def __init__(self, recall: RecallBackend) -> None:
        self._recall = recall

    def wanted(self, plan: Plan) -> bool:
        return plan.mode in SPARSE_MODES

    def recall(self, query: Query, lists: Mapping[str, RecallList], depth: int) -> ScoredList:
        ranked = self._recall.sparse(query.index, query.term_ids, depth=depth,
                                     allowed=query.allowed, native=query.native)
        return ScoredList(ranked, lambda pos: self._recall.sparse_scores(query.index,
                                                                         query.term_ids, pos))
