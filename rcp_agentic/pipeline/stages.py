"""The ranking stages of a stored-unit retrieve, in the order they run: fuse the recall lists,
rerank the head, decay by recency, drop below ``minScore``, diversify by MMR.

Each stage is a function of the :class:`~.candidates.Query` and its
:class:`~.candidates.Candidates`, reordering ``candidates.ranked`` and recording the scores
it makes; the arithmetic lives in its own module (:mod:`.fusion`, :mod:`.recency`,
:mod:`.mmr`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from .. import units
from ..control import RequestControl
from ..models.reranker import Reranker
from ..ranking import MASS_TOLERANCE
from ..ranking import ranked as rank_scores
from ..store.docstore import Docstore
from . import fusion
from .candidates import Candidates, Query, Ranking
from .mmr import mmr_order
from .recency import decay
from .sources import unit_vectors

RERANK_SLICE = 16  # rerank in slices, so a cancel or deadline stops a long rerank part-way


def fuse(query: Query, cands: Candidates) -> None:
    """The fused ranking (``fused`` scores kept when lists were fused) and the pool's fused
    order (``pool_order``: the same fusion of each list's head, ``pool_depth`` deep; the
    ranking itself when recall ran no deeper). In a pool of several kinds (a collapsed tree)
    a chunk's rank in each list counts only the chunks above it, so the chunks keep the
    order a chunk-only retrieve gives them; a summary's rank counts every unit above it."""
    cands.ranked = _fused(query, cands, cands.lists)
    pool = cands.pool
    deeper = any(len(pool[name]) < len(ranked) for name, ranked in cands.lists.items())
    cands.pool_order = [p for p, _s in (_fused(query, cands, pool) if deeper
                                        else cands.ranked)]


def _fused(query: Query, cands: Candidates,
           lists: Mapping[str, Sequence[tuple[int, float]]]) -> Ranking:
    """``lists`` (the recall lists, or their heads) fused as the plan says; the graph list's
    weight scales with the query's subject share (``cands.lists``' graph list)."""
    plan = query.plan
    if plan.mode != "hybrid" and "graph" not in lists:
        return list(lists[plan.mode])
    weights = plan.weights
    graph = cands.lists.get("graph")
    if graph is not None and not plan.graph_weight_given:
        weights = {**weights, "graph": weights["graph"] * graph.fusion_scale}
    if plan.fusion == "rrf":
        leaf = None
        if plan.pooled:
            index, chunk = query.index, units.get("chunk").stored
            leaf = lambda p: index.units[p] == chunk  # noqa: E731
        return fusion.rrf(lists, weights, plan.rrf_k, leaf=leaf)
    union = sorted({p for ranked in lists.values() for p, _s in ranked})
    fill = cands.per_stage(union)
    return (fusion.weighted(lists, weights, fill) if plan.fusion == "weighted"
            else fusion.convex(lists, plan.alpha, fill))


def keep_fused(query: Query, cands: Candidates) -> None:
    """Remember the fused score of each unit still ranked, before any rerank (when lists were
    fused: hybrid, or with graph recall)."""
    if query.plan.mode == "hybrid" or "graph" in cands.lists:
        cands.fused = dict(cands.ranked)


def score_passages(reranker: Reranker, query: str, texts: Sequence[str],
                   ctl: RequestControl | None = None) -> list[float]:
    """The reranker's score of each text; with ``ctl``, in slices so a cancel or deadline
    stops a long rerank part-way, reporting progress."""
    if ctl is None:
        return [float(x) for x in reranker.score(query, list(texts))]
    scores: list[float] = []
    for at in range(0, len(texts), RERANK_SLICE):
        ctl.check()
        scores.extend(float(x) for x in reranker.score(query, list(texts[at:at + RERANK_SLICE]),
                                                       control=ctl))
        ctl.report(0.5 + 0.3 * len(scores) / len(texts), "rerank",
                   f"reranked {len(scores)}/{len(texts)}")
    return scores


def rerank(query: Query, cands: Candidates, reranker: Reranker, store: Docstore,
           ctl: RequestControl) -> None:
    """Rerank the ``rerank.topN`` head with the cross-encoder; the ranking becomes that head
    in rerank order."""
    plan, index = query.plan, query.index
    assert plan.rerank_top_n is not None
    head = cands.ranked[:plan.rerank_top_n]
    if not head:
        return
    rows = store.hydrate([int(index.rowids[p]) for p, _s in head])
    texts = [rows[int(index.rowids[p])]["text"] for p, _s in head]
    got = dict(zip((p for p, _s in head), score_passages(reranker, plan.query, texts, ctl)))
    cands.ranked, cands.rerank = rank_scores(got.items()), got


def recency(query: Query, cands: Candidates, store: Docstore) -> None:
    """Scores decayed by the age of the plan's date field (half-life in days)."""
    plan, index = query.plan, query.index
    assert plan.recency_field and plan.recency_half_life_days
    rowids = [int(index.rowids[p]) for p, _s in cands.ranked]
    dates = store.dates(rowids, plan.recency_field)
    factors = decay([dates.get(r) for r in rowids], time.time() * 1000.0,
                    plan.recency_half_life_days)
    cands.ranked = rank_scores([(p, s * float(f)) for (p, s), f in zip(cands.ranked, factors)],
                               tolerance=MASS_TOLERANCE, relative=True)


def min_score(query: Query, cands: Candidates) -> None:
    """Drop what scores below ``minScore``."""
    floor = query.plan.min_score
    assert floor is not None
    cands.ranked = [(p, s) for p, s in cands.ranked if s >= floor]


def mmr(query: Query, cands: Candidates, store: Docstore) -> None:
    """Maximal marginal relevance over the head of the ranking (``mmr.lambda``)."""
    plan, ranked = query.plan, cands.ranked
    assert plan.mmr_lambda is not None
    pool = ranked[:min(len(ranked), max(4 * plan.k, 50), 400)]
    if len(pool) < 2:
        return
    vecs = unit_vectors(store, query.index, np.asarray([p for p, _s in pool], dtype=np.int64))
    scores = np.asarray([s for _p, s in pool], dtype=np.float64)
    order = mmr_order(scores, vecs, plan.mmr_lambda, len(pool))
    cands.ranked = [pool[i] for i in order] + ranked[len(pool):]
