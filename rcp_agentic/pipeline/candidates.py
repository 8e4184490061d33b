"""One request, its query and its candidates: the values every retrieve stage reads and updates.

:class:`Request` is a validated ``retrieve``: its plan, the snapshot it reads, the cursor
it continues and its control. :class:`Query` is what the stages of a stored-unit retrieve
know once it is planned: the scoring index of its pool, the query vector and analysed
terms, and the units its filter allows. :class:`Candidates` holds what recall found — each recall
source's ranked list (:class:`RecallList`, which can score any other position exactly) —
and what the stages made of it: the ranking they reorder, the fused, rerank and learned
scores. Its *pool* — each list's head, ``Plan.pool_depth`` deep, and their fusion — is what
a hit's confidence is read against; it does not depend on ``k``, the page or the session.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..control import RequestControl
from ..store.memindex import UnitIndex
from .cursor import CursorState
from .params import Plan

Ranking = list[tuple[int, float]]
Kinds = list[tuple[str, int]]


class Snapshot(Protocol):
    """The served index version a request reads, as the stages see it (the catalog's
    ``Snapshot`` is one): its version and token, its filterable fields, the scoring index
    of a pool of kinds, the lag of derived kinds, and what graph recall reads of it."""

    @property
    def version(self) -> int: ...

    @property
    def token(self) -> str: ...

    @property
    def fields(self) -> dict[str, str]: ...

    def index(self, kinds: Kinds) -> UnitIndex: ...

    def lag(self, kinds: Kinds) -> str | None: ...

    def graph_view(self) -> Any: ...

    def communities(self) -> Any: ...

    def chunk_scope(self, filter_: Mapping[str, Any] | None) -> frozenset[str] | None: ...


@dataclass
class Request:
    """A validated ``retrieve``: its plan, whether options it cannot honour are errors
    (``strict``), the cursor state it continues (None: the first page), the snapshot it
    reads, the hash its cursors are bound to, when it started and its control; with a
    ``rewrite``, the query it searches with (hyde: the passage), which its cursors carry."""

    plan: Plan
    strict: bool
    cursor: CursorState | None
    snapshot: Snapshot
    qhash: str
    started: float
    ctl: RequestControl
    rewritten: str | None = None


@dataclass
class Query:
    """A planned retrieve over stored units: its request, the pool's scoring index, the query
    vector (dense modes, tree traversal), the analysed query terms (sparse modes), and the
    positions its filter or level allows (``allowed``; None: all) or the recall backend's
    own filter (``native``)."""

    request: Request
    index: UnitIndex
    qvec: np.ndarray | None = None
    term_ids: list[int] = field(default_factory=list)
    allowed: np.ndarray | None = None
    native: Any = None

    @property
    def plan(self) -> Plan:
        return self.request.plan

    @property
    def snapshot(self) -> Snapshot:
        return self.request.snapshot


class RecallList(list[tuple[int, float]], ABC):
    """One recall source's ranked list (positions of the query's index, best first) that can
    score positions it did not return (:meth:`scores_at`). ``fusion_scale`` scales the list's
    default fusion weight (graph recall's: the query's subject share)."""

    fusion_scale: float = 1.0

    @abstractmethod
    def scores_at(self, positions: list[int]) -> dict[int, float]:
        """This source's exact score of each position (0 where it gives none)."""


class Candidates:
    """What recall found for a query and what the stages made of it (module doc).

    ``pool_depth``: how deep each list is read as the query's pool (``Plan.pool_depth``;
    the lists may run deeper). ``pool_order`` is the fusion of the pool's lists, before
    session dedup, rerank, recency, ``minScore`` and MMR (set by ``stages.fuse``).
    """

    def __init__(self, lists: Mapping[str, RecallList], pool_depth: int) -> None:
        self.lists = dict(lists)
        self.pool_depth = pool_depth
        self.ranked: Ranking = []
        self._pool_order: list[int] = []
        self._pool_rank: dict[int, int] = {}
        self.fused: dict[int, float] = {}
        self.rerank: dict[int, float] = {}
        # Bridge passages graph recall put in (``graph.bridge``): position -> bridge score.
        self.bridged: dict[int, float] = {}
        self.learned: dict[int, float] | None = None
        self._per_stage: dict[tuple[int, ...], dict[str, dict[int, float]]] = {}

    @property
    def pool(self) -> dict[str, Ranking]:
        """Each recall list's head, ``pool_depth`` deep: the query's pool."""
        return {name: list(ranked[:self.pool_depth]) for name, ranked in self.lists.items()}

    @property
    def pool_order(self) -> list[int]:
        """The pool's units in fused order (class doc)."""
        return self._pool_order

    @pool_order.setter
    def pool_order(self, order: list[int]) -> None:
        self._pool_order = list(order)
        self._pool_rank = {p: i for i, p in enumerate(self._pool_order)}

    def pool_ranks(self, positions: list[int]) -> list[int]:
        """Each position's 0-based rank in ``pool_order``; a unit outside the pool (recalled
        deeper than ``pool_depth``) ranks after all of it."""
        return [self._pool_rank.get(p, len(self._pool_order)) for p in positions]

    def per_stage(self, positions: list[int]) -> dict[str, dict[int, float]]:
        """Every source's exact score of ``positions``, by source, scored once per list of
        positions (the hits' confidence and their ``scores`` read the same). A source's
        score of a unit does not depend on the other positions asked for (its list's own
        score where it listed the unit: :class:`~.sources.ScoredList`)."""
        key = tuple(positions)
        got = self._per_stage.get(key)
        if got is None:
            got = self._per_stage[key] = {name: ranked.scores_at(positions)
                                          for name, ranked in self.lists.items()}
        return got

    @property
    def count(self) -> int:
        """Distinct units recalled by any source."""
        return len({p for ranked in self.lists.values() for p, _s in ranked})
