"""Graph recall, the third recall source (``x-rcp-agentic-graphRecall``), and the graph scope
of a request.

HippoRAG's personalised PageRank from the query's linked entities (weighted by
specificity) plus a small share on the dense/sparse passage prior, over the graph the
request's filter allows (:func:`graph_scope`). The masses score the plan's unit: a chunk
its passage mass; a page or document the best mass of its chunks; in a collapsed tree only
the chunks; a node its entity's mass; a triplet the mean of its two entities'; a community
the sum of its members'. By default the list's fusion weight scales with the query's
subject share (``GraphView.subject_share``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from .. import units
from ..ranking import MASS_TOLERANCE, top
from ..store.memindex import UnitIndex
from ..store.recall import RecallBackend
from ..pipeline import fusion
from ..pipeline.candidates import Query, RecallList, Snapshot
from ..pipeline.params import Plan
from ..vocabulary import DENSE_MODES, SPARSE_MODES
from .compose import (chunk_masses, chunk_positions, community_masses, node_masses,
                      scoped_view, triplet_masses)
from .ppr import GraphView

if TYPE_CHECKING:
    from ..pipeline.confidence import Calibrator

# Graph recall's passage prior: the best chunks of the fused dense/sparse lists (HippoRAG seeds
# PageRank with the query's entities; a small share of the reset on these passages).
GRAPH_PRIOR_DEPTH = 20
# A unit joins the graph's list only with at least this share of the best unit's mass: the
# prior alone gives every dense/sparse hit a little mass, and in a rank fusion (RRF) that
# membership would count as a graph vote for passages the query's entities never reach.
# Measured through the engine (bench/graph.py engine; R@5 HotpotQA / 2Wiki): share 0 gives
# 0.895 / 0.764, 0.05 gives 0.915 / 0.916, 0.1 gives 0.908 / 0.819, 0.2 gives 0.868 / 0.747.
GRAPH_MIN_SHARE = 0.05


class PositionScores(Mapping[int, float]):
    """Scores by index position, held as two arrays (a dict of every passage PageRank reached
    costs more than the PageRank itself at 50k chunks)."""

    def __init__(self, positions: np.ndarray, scores: np.ndarray) -> None:
        order = np.argsort(positions, kind="stable")
        self._positions = positions[order]
        self._scores = scores[order]

    def __getitem__(self, position: int) -> float:
        i = int(np.searchsorted(self._positions, position))
        if i < len(self._positions) and self._positions[i] == position:
            return float(self._scores[i])
        raise KeyError(position)

    def __iter__(self) -> Iterator[int]:
        return iter(self._positions.tolist())

    def __len__(self) -> int:
        return len(self._positions)


class GraphList(RecallList):
    """The graph's ranked recall list (positions, PageRank mass, best first, cut to the recall
    depth), with the mass of every position PageRank reached (``scores``: fills the ``graph``
    stage score of units beyond the cut) and the query's subject share (``share``: the part
    of its link weight on entities some passage is about, which scales the list's default
    fusion weight); also the query's linked entities and the graph the request may see
    (``links``, ``view``: the bridge hop, :mod:`.bridge`, walks from them)."""

    def __init__(self, ranked: list[tuple[int, float]], scores: Mapping[int, float],
                 share: float = 1.0, links: Mapping[str, float] | None = None,
                 view: GraphView | None = None) -> None:
        super().__init__(ranked)
        self.scores = scores
        self.share = share
        self.fusion_scale = share
        self.links = links
        self.view = view

    def scores_at(self, positions: list[int]) -> dict[int, float]:
        return {p: float(self.scores.get(p, 0.0)) for p in positions}


def graph_scope(plan: Plan, snapshot: Snapshot
                ) -> tuple[GraphView | None, frozenset[str] | None]:
    """The graph this request may see in ``snapshot`` (restricted to the chunks its filter
    allows) and those chunk keys (None without a filter); (None, None) without a graph,
    with a usage note."""
    view, allowed = scoped_graph(plan, snapshot)
    if view is None:
        plan.notes.append(f"index version {snapshot.token} holds no knowledge graph: no graph "
                          "recall")
    return view, allowed


def scoped_graph(plan: Plan, snapshot: Snapshot
                 ) -> tuple[GraphView | None, frozenset[str] | None]:
    """:func:`graph_scope` without its note."""
    view = snapshot.graph_view()
    if view is None:
        return None, None
    allowed = snapshot.chunk_scope(plan.filter)
    return scoped_view(view, allowed), allowed


def chunk_prior(recall: RecallBackend, plan: Plan, snapshot: Snapshot,
                lists: Mapping[str, list[tuple[int, float]]], index: UnitIndex | None,
                qvec: np.ndarray | None, term_ids: list[int],
                allowed: frozenset[str] | None) -> dict[str, float]:
    """Graph recall's passage prior: the best ``GRAPH_PRIOR_DEPTH`` chunks (by key) of the
    dense/sparse lists of the plan's mode, RRF-fused; read from ``lists`` when the pool
    (``index``) holds the chunks, else recalled from the chunk index (within ``allowed``)."""
    chunk_lists: dict[str, list[tuple[int, float]]]
    if index is not None and ("chunk", 0) in plan.kinds:
        ci = index
        chunk_lists = {name: [(p, s) for p, s in ranked if index.units[p] == "chunk"]
                       for name, ranked in lists.items() if name in ("dense", "sparse")}
    else:
        ci = snapshot.index([("chunk", 0)])
        inside = (ci.positions_of(np.array([int(k[1:]) for k in allowed], dtype=np.int64))
                  if allowed is not None else None)
        chunk_lists = {}
        if qvec is not None and plan.mode in DENSE_MODES:
            chunk_lists["dense"] = recall.dense(ci, qvec, depth=GRAPH_PRIOR_DEPTH,
                                                allowed=inside)
        if plan.mode in SPARSE_MODES and (inside is None or len(inside)):
            chunk_lists["sparse"] = recall.sparse(ci, term_ids, depth=GRAPH_PRIOR_DEPTH,
                                                  allowed=inside)
    fused = fusion.rrf({n: r for n, r in chunk_lists.items() if r},
                       {n: 1.0 for n in chunk_lists}, plan.rrf_k)
    return {f"r{int(ci.rowids[p])}": float(s) for p, s in fused[:GRAPH_PRIOR_DEPTH]}


class GraphSource:
    """Personalised PageRank from the query's entities, as a recall list (module doc)."""

    name = "graph"

    def __init__(self, recall: RecallBackend, calibrator: Calibrator | None) -> None:
        self._recall = recall
        self.calibrator = calibrator

    def wanted(self, plan: Plan) -> bool:
        return plan.graph_recall

    def recall(self, query: Query, lists: Mapping[str, RecallList],
               depth: int) -> GraphList | None:
        """The graph's list; None (hybrid alone, with a note) when there is no graph, the query
        names no entity of it, or no passage is about the entities it names."""
        plan, snapshot = query.plan, query.snapshot
        view, allowed_keys = graph_scope(plan, snapshot)
        if view is None:
            return None
        links = view.link(plan.query)
        if not links:
            plan.notes.append("graph recall: the query names no entity of the graph; "
                              "dense/sparse recall only")
            return None
        share = 1.0 if plan.graph_weight_given else view.subject_share(links)
        if share <= 0:
            plan.notes.append("graph recall: no passage is about the entities the query names "
                              "(they are only mentioned); dense/sparse recall only")
            return None
        prior = chunk_prior(self._recall, plan, snapshot, lists, query.index, query.qvec,
                            query.term_ids, allowed_keys)
        positions, masses = graph_positions(plan, query.index, snapshot, view,
                                            view.mass(links, prior))
        if query.allowed is not None:
            inside = np.isin(positions, query.allowed)
            positions, masses = positions[inside], masses[inside]
        best = top(masses, positions, depth, tolerance=MASS_TOLERANCE, relative=True)[0]
        floor = GRAPH_MIN_SHARE * float(masses.max()) if len(masses) else 0.0
        ranked = [(int(positions[i]), float(masses[i])) for i in best[:depth]
                  if masses[i] >= floor]
        self._note_uncalibrated(plan, bool(ranked))
        return GraphList(ranked, PositionScores(positions, masses), share, links, view)

    def _note_uncalibrated(self, plan: Plan, found: bool) -> None:
        model = (self.calibrator.model_for(plan.mode, units.calibration_family(plan.unit), True)
                 if self.calibrator is not None else None)
        if model is not None and "graph" not in model.needs and found:
            plan.notes.append(f"confidence of {plan.mode}/{plan.unit} hits is calibrated on "
                              "dense/sparse signals only: a hit that graph recall found "
                              "through a bridge entity may be relevant despite a low one")


def graph_positions(plan: Plan, index: UnitIndex, snapshot: Snapshot, view: GraphView,
                    scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PageRank masses mapped onto the positions of ``index``: the positions reached and
    their masses. Chunks (also a collapsed tree's, the only units of its pool that score)
    map through a cached array: at 50k chunks a dict of every passage reached costs more
    than the PageRank."""
    if ("chunk", 0) in plan.kinds:
        at = chunk_positions(view, index.position)
        passage = scores[view.n_entities:]
        reached = (at >= 0) & (passage > 0)
        return at[reached], passage[reached]
    out = graph_masses(plan, index, snapshot, view, scores)
    return (np.fromiter(out.keys(), dtype=np.int64, count=len(out)),
            np.fromiter(out.values(), dtype=np.float64, count=len(out)))


def graph_masses(plan: Plan, index: UnitIndex, snapshot: Snapshot, view: GraphView,
                 scores: np.ndarray) -> dict[int, float]:
    """PageRank masses of a pool without chunks, by position: a node its entity's, a
    triplet the mean of its two entities', a community the sum of its members', a
    document or page the best of its chunks'."""

    stored = plan.stored_unit
    if stored in ("node", "triplet"):
        by_uid = (node_masses if stored == "node" else triplet_masses)(view, scores)
        found = index.positions_of_uids(list(by_uid))
        return {int(p): by_uid[index.uids[p]] for p in found}
    if stored == "community":  # the query's PageRank mass on its members
        stored_communities = snapshot.communities()
        by_uid = community_masses(view, scores, stored_communities.by_id.values()
                                  if stored_communities else ())
        return {int(p): by_uid[index.uids[p]]
                for p in index.positions_of_uids(list(by_uid))}
    chunks = chunk_masses(view, scores)
    if stored == "document":
        return _document_masses(index, view, chunks)
    if stored == "page":
        return _page_masses(index, snapshot.index([("chunk", 0)]), chunks)
    plan.notes.append(f"graph recall does not score {plan.unit} units")
    return {}


def _document_masses(index: UnitIndex, view: GraphView,
                     chunks: Mapping[str, float]) -> dict[int, float]:
    """Each document's best chunk mass, by position."""
    out: dict[int, float] = {}
    where = {index.doc_ids[p]: int(p) for p in index.kind_positions("document", 0)}
    for key, m in chunks.items():
        p = where.get(view.graph.chunk_docs.get(key, ""))
        if p is not None and m > out.get(p, 0.0):
            out[p] = m
    return out


def _page_masses(index: UnitIndex, ci: UnitIndex, chunks: Mapping[str, float]
                 ) -> dict[int, float]:
    """Each page's best mass of the chunks on it, by position (``ci``: the chunk index)."""
    out: dict[int, float] = {}
    pages = {(index.doc_ids[p], int(index.page_start[p])): int(p)
             for p in index.kind_positions("page", 0)}
    for key, m in chunks.items():
        c = ci.position.get(int(key[1:]))
        if c is None or int(ci.page_start[c]) < 0:
            continue
        first = int(ci.page_start[c])
        last = max(first, int(ci.page_end[c]))
        for page in range(first, last + 1):
            p = pages.get((ci.doc_ids[c], page))
            if p is not None and m > out.get(p, 0.0):
                out[p] = m
    return out
