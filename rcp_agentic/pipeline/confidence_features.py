"""The features a hit-confidence model reads (RCP §7.7.2): :func:`signals` sanitises what a
hit list and its query's recall lists give (:class:`Signals`), and :data:`FEATURES` names
each feature with its sign constraint and how it moves with each raw signal. Features of
format 2 on read a hit against its query's recall pool, format 4's (the z-scores) how far it
stands out of it. The models that weigh them: :mod:`.confidence`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Format 4: how far the hit and the query's best stand out of the pool, per mode (in the
# pool's standard deviations; which models read them: confidence.py).
Z_FEATURES: dict[str, tuple[str, ...]] = {
    "dense": ("dense_z", "top_dense_z"),
    "sparse": ("sparse_z", "top_sparse_z"),
    "hybrid": ("dense_z", "top_dense_z", "sparse_z", "top_sparse_z"),
}


@dataclass(frozen=True)
class Signals:
    """What the features of one list of hits are computed from (float arrays of equal length).

    ``d``/``s``: the hits' cosine and BM25; ``c``: the BM25 ceiling; ``r``: the hits' ranks in
    the pool's fused order; ``top_d``/``top_s``: the best cosine / BM25 of the query's recall list;
    ``rank_d``/``rank_s``: each hit's 0-based rank in that recall list (its length when absent).
    ``g``/``top_g``/``rank_g``: the same for graph recall's list of PageRank masses (the hit's
    mass, the list's best, its rank; 0, 0 and absent when graph recall did not run).
    ``docs``: how many documents each hit's leaves lie in (1 when not given). ``share``: the
    query's subject share (how much of its linked entities' weight is on entities a passage
    is about; graph recall scales its list's fusion weight by it; 1 when not given).
    """

    d: np.ndarray
    s: np.ndarray
    c: np.ndarray
    r: np.ndarray
    top_d: np.ndarray
    top_s: np.ndarray
    rank_d: np.ndarray
    rank_s: np.ndarray
    g: np.ndarray = field(default_factory=lambda: np.zeros(0))
    top_g: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rank_g: np.ndarray = field(default_factory=lambda: np.zeros(0))
    docs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    share: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # Each recall list's mean and standard deviation (the background a hit stands out of;
    # 0 and 0 when unknown, which makes every z-score 0).
    mu_d: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sd_d: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mu_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sd_s: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass(frozen=True)
class Feature:
    needs: str  # "dense" | "sparse" | "graph" | "docs" | "rank"
    sign: int  # constraint on the weight: +1 (w ≥ 0), -1 (w ≤ 0)
    fn: Callable[[Signals], np.ndarray]
    moves: dict[str, int]  # how the feature moves with each raw signal (+1 up, -1 down)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.clip(np.where(b > 0, a / np.where(b > 0, b, 1.0), 0.0), 0.0, 1.0)


Z_LIMIT = 10.0  # a z-score is clipped to ±this (a pool of near-equal scores has sd ≈ 0)


def _z(a: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """How many of the pool's standard deviations ``a`` lies above the pool's mean."""
    if not len(mu):
        return np.zeros(len(a))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sd > 1e-9, (a - mu) / np.where(sd > 1e-9, sd, 1.0), 0.0)
    return np.clip(z, -Z_LIMIT, Z_LIMIT)


FEATURES: dict[str, Feature] = {
    # Format 1: each from the hit alone.
    "dense": Feature("dense", +1, lambda x: x.d, {"dense": +1}),
    "sparse_ratio": Feature("sparse", +1, lambda x: _div(x.s, x.c),
                             {"sparse": +1, "ceiling": -1}),
    "log1p_sparse": Feature("sparse", +1, lambda x: np.log1p(x.s), {"sparse": +1}),
    "log1p_rank": Feature("rank", -1, lambda x: np.log1p(x.r), {"rank": +1}),
    "inv_rank": Feature("rank", +1, lambda x: 1.0 / (1.0 + x.r), {"rank": -1}),
    # Format 2: relative to the query's recall list (its pool), so free of a corpus' scale.
    "dense_gap": Feature("dense", -1, lambda x: x.top_d - x.d, {"dense": -1}),
    "sparse_rel": Feature("sparse", +1, lambda x: _div(x.s, x.top_s), {"sparse": +1}),
    "top_sparse_ratio": Feature("sparse", +1, lambda x: _div(x.top_s, x.c), {"ceiling": -1}),
    "log1p_dense_rank": Feature("dense", -1, lambda x: np.log1p(x.rank_d), {"dense": -1}),
    "log1p_sparse_rank": Feature("sparse", -1, lambda x: np.log1p(x.rank_s), {"sparse": -1}),
    # Format 4: how far the hit, and the query's best, stand out of the query's pool (in the
    # pool's standard deviations): free of a corpus' scale and of how crowded its top is.
    "dense_z": Feature("dense", +1, lambda x: _z(x.d, x.mu_d, x.sd_d), {"dense": +1}),
    "top_dense_z": Feature("dense", +1, lambda x: _z(x.top_d, x.mu_d, x.sd_d), {"dense": +1}),
    "sparse_z": Feature("sparse", +1, lambda x: _z(x.s, x.mu_s, x.sd_s), {"sparse": +1}),
    "top_sparse_z": Feature("sparse", +1, lambda x: _z(x.top_s, x.mu_s, x.sd_s),
                             {"sparse": +1}),
    # Format 3: graph recall's list (PageRank masses are a share of one walk: only the ratio
    # to the query's best mass and the rank transfer between graphs).
    "graph_rel": Feature("graph", +1, lambda x: _div(x.g, x.top_g), {"graph": +1}),
    "log1p_graph_rank": Feature("graph", -1, lambda x: np.log1p(x.rank_g), {"graph": -1}),
    "log1p_docs": Feature("docs", +1, lambda x: np.log1p(x.docs), {"docs": +1}),
    # The hit's relative mass, worth as much as the query's linking is about passages.
    "shared_graph_rel": Feature("graph", +1, lambda x: x.share * _div(x.g, x.top_g),
                                 {"graph": +1}),
}
MOMENT_FEATURES = frozenset(f for names in Z_FEATURES.values() for f in names)
POOL_FEATURES = frozenset({"dense_gap", "sparse_rel", "top_sparse_ratio", "log1p_dense_rank",
                           "log1p_sparse_rank", "graph_rel", "shared_graph_rel",
                           "log1p_graph_rank"}) | MOMENT_FEATURES


def _arr(x: Any, n: int, worst: float, lo: float, hi: float) -> np.ndarray:
    if x is None:
        return np.full(n, worst)
    a = np.broadcast_to(np.asarray(x, dtype=np.float64), (n,))
    return np.clip(np.nan_to_num(a, nan=worst, posinf=hi, neginf=lo), lo, hi)


_BIG = np.finfo(np.float64).max / 4


def pool_of(values: Any) -> np.ndarray:
    """A recall list's scores, finite, best first."""
    a = np.asarray(values if values is not None else [], dtype=np.float64).reshape(-1)
    return -np.sort(-a[np.isfinite(a)])


# A hit missing from a recall list (below its last entry, or no BM25 match at all) ranks
# here or at the list's end, whichever is deeper: the engine's default recall depth.
ABSENT_RANK = 100.0


def pool_moments(pool: np.ndarray) -> tuple[float, float]:
    """A recall list's mean and standard deviation (0, 0 for an empty list)."""
    pool = np.clip(pool, -1e12, 1e12)  # a hostile score must not overflow the square
    return (float(pool.mean()), float(pool.std())) if len(pool) else (0.0, 0.0)


def in_pool(x: np.ndarray, pool: np.ndarray,
             matched: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The pool's best score (at least the hit's own) and each hit's rank in the pool."""
    top = np.maximum(pool[0], x) if len(pool) else x
    # Ties count in the hit's favour (its rank is the number of strictly better scores).
    rank = len(pool) - np.searchsorted(pool[::-1], x, side="right").astype(np.float64)
    absent = rank >= len(pool)
    if len(pool):
        absent &= x < pool[-1]
    if matched is not None:
        absent |= ~matched
    return top, np.where(absent, max(float(len(pool)), ABSENT_RANK), np.maximum(rank, 0.0))


def signals(dense: Any, sparse: Any, ceiling: Any, ranks: Any, n: int, *,
            pool: Mapping[str, Any] | None = None, top_dense: Any = None, top_sparse: Any = None,
            rank_dense: Any = None, rank_sparse: Any = None, graph: Any = None,
            top_graph: Any = None, rank_graph: Any = None, docs: Any = None,
            graph_share: Any = None,
            moments: Mapping[str, tuple[Any, Any]] | None = None) -> Signals:
    """Sanitised signals (missing/NaN → the worst value of each).

    The pool statistics come from ``pool`` (the query's recall lists: ``{"dense": cosines,
    "sparse": BM25 scores, "graph": PageRank masses}``), else from ``top_*``/``rank_*``
    (and ``moments``: ``{"dense": (means, sds), "sparse": …}``) given per hit, else from
    the hits themselves (their best score, their rank among themselves — exact when they
    are the head of each recall list).
    """
    d = _arr(dense, n, -1.0, -1.0, 1.0)
    s = _arr(sparse, n, 0.0, 0.0, _BIG)
    g = _arr(graph, n, 0.0, 0.0, _BIG)
    c = _arr(ceiling, n, 0.0, 0.0, _BIG)
    r = _arr(ranks, n, 0.0, 0.0, 1e12)
    stats = {}
    spread: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, x in (("dense", d), ("sparse", s)):
        if pool is not None and name in pool:
            mu, sd = pool_moments(pool_of(pool[name]))
        elif moments is not None and name in moments:
            mu, sd = moments[name]
        else:
            mu, sd = pool_moments(pool_of(x if name == "dense" else x[x > 0]))
        spread[name] = (_arr(mu, n, 0.0, -_BIG, _BIG), _arr(sd, n, 0.0, 0.0, _BIG))
    for name, x, top, rank in (("dense", d, top_dense, rank_dense),
                               ("sparse", s, top_sparse, rank_sparse),
                               ("graph", g, top_graph, rank_graph)):
        # BM25 recall keeps only units that match a query term (score > 0); graph recall
        # only units PageRank reached.
        matched = None if name == "dense" else x > 0
        if pool is not None and name in pool:
            stats[name] = in_pool(x, pool_of(pool[name]), matched)
        elif top is not None and rank is not None:
            stats[name] = (np.maximum(_arr(top, n, -1.0 if name == "dense" else 0.0, -1.0, _BIG),
                                      x), _arr(rank, n, 0.0, 0.0, 1e12))
        else:
            stats[name] = in_pool(x, pool_of(x), matched)
    # Cosines are clipped to [-1, 1] like the hit's own, so the gap is never negative.
    return Signals(d, s, c, r, np.clip(stats["dense"][0], -1.0, 1.0), stats["sparse"][0],
                   stats["dense"][1], stats["sparse"][1], g, stats["graph"][0],
                   stats["graph"][1], _arr(docs, n, 1.0, 1.0, 1e12),
                   _arr(1.0 if graph_share is None else graph_share, n, 1.0, 0.0, 1.0),
                   *spread["dense"], *spread["sparse"])


def design_matrix(names: Sequence[str], x: Signals) -> np.ndarray:
    return np.column_stack([FEATURES[f].fn(x) for f in names]) if names else \
        np.zeros((len(x.d), 0))
