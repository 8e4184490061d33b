"""Calibrated hit confidence (RCP §7.7.2): retrieval signals → P(the hit is relevant).

A hit's ``confidence`` is the output of a small logistic regression, one model per
signal set and unit family::

    P(relevant) = sigmoid(b + Σ w_f · f(hit))

A signal set is the request's mode (``dense`` / ``sparse`` / ``hybrid``) or, when graph
recall ran (``x-rcp-agentic-graphRecall`` and the query linked an entity of the graph),
that mode plus graph recall's list (``hybrid+graph`` …). The families are ``chunk``
(also ``passage``; ``page`` borrows it), ``document``, ``tree-node``, the knowledge
graph's stored units ``node`` and ``triplet``, and its Leiden ``community`` reports. A
graph-recall request is scored by its mode's graph model when there is one, else by its
mode's own (which reads the dense and sparse signals only).

Raw scores do not transfer between corpora (a cosine of 0.5 is a strong match in one
and a weak one in another; BM25 grows with the corpus and the query; a PageRank mass is
a share of one walk over one graph), so the features of formats 2 and 3 read a hit
against its own query: against the query's recall lists (its *pool*: the dense, sparse
and graph candidates ``retrieve`` recalled, before fusion and packing) and against the
BM25 ceiling. They depend on the hit and its query, never on ``k``, paging or the other
hits returned:

=======================  ==============================================  ======  ============
feature                  definition                                      sign    signal sets
=======================  ==============================================  ======  ============
``dense``                cosine(query, unit), clipped to [-1, 1]         w ≥ 0   dense, hybrid
``dense_gap``            the pool's best cosine − the hit's              w ≤ 0   dense, hybrid
``log1p_dense_rank``     log(1 + the hit's rank in the dense pool)       w ≤ 0   hybrid
``sparse_ratio``         BM25 ÷ ``engine.sparse_ceiling`` in [0, 1]      w ≥ 0   sparse, hybrid
``sparse_rel``           BM25 ÷ the pool's best BM25 in [0, 1]           w ≥ 0   sparse, hybrid
``top_sparse_ratio``     the pool's best BM25 ÷ the ceiling              w ≥ 0   sparse
``log1p_sparse_rank``    log(1 + the hit's rank in the sparse pool)      w ≤ 0   hybrid
``graph_rel``            PageRank mass ÷ the graph list's best, [0, 1]   w ≥ 0   ``*+graph``
``shared_graph_rel``     ``graph_rel`` × the query's subject share       w ≥ 0   ``*+graph``
``log1p_graph_rank``     log(1 + the hit's rank in the graph list)       w ≤ 0   ``*+graph``
``dense_z``              (cosine − the dense pool's mean) ÷ its s.d.     w ≥ 0   dense, hybrid
``top_dense_z``          ``dense_z`` of the pool's best cosine           w ≥ 0   dense, hybrid
``sparse_z``             (BM25 − the sparse pool's mean) ÷ its s.d.      w ≥ 0   sparse, hybrid
``top_sparse_z``         ``sparse_z`` of the pool's best BM25            w ≥ 0   sparse, hybrid
``log1p_docs``           log(1 + documents of the unit's leaves)         w ≥ 0   node, triplet
``log1p_sparse``         log(1 + BM25) (format 1; scale-bound)           w ≥ 0   —
``log1p_rank``           log(1 + rank), rank 0-based in the list         w ≤ 0   all
``inv_rank``             1 / (1 + rank)                                  w ≥ 0   all
=======================  ==============================================  ======  ============

The z-scores (clipped to ±``Z_LIMIT``) say how far a hit, and the query's best, stand out
of the pool in the pool's own spread, free of a corpus' scale and of how crowded the top of
its pools is; they are what let one model hold on a corpus it was not fitted on (issue 22:
without them, models fitted on two sets were over-confident on the third). The graph,
breadth and community models keep the features of format 3. The document models leave out
the raw ``dense`` cosine (a corpus' scale: a one-passage document and a many-chunk abstract
sit at different cosines for the same standing in their pools). A pool too small to have a
spread (fewer than ``Z_MIN_POOL`` scores: a corpus of a few dozen chunks) is scored by each
model's companion fitted without the z-scores (``<key>:small-pool``). A ``*+graph`` set has its mode's
features (without the z-scores) plus the three graph ones; the node and
triplet models add their unit's breadth (a unit spanning more documents is likelier to
cover a relevant one). The subject share is the part of the query's link weight on
entities some passage is about (``GraphList.share``: graph recall scales its list's
fusion weight by it), so graph mass counts for less when the query only names generic
entities. A hit missing from a recall list (below its cut, or never reached: BM25 0,
PageRank mass 0) ranks at the list's length or ``ABSENT_RANK``, whichever is deeper. The
signs are constraints of the fit, so every model is by construction non-decreasing in
``dense``, ``sparse``, ``graph`` (the hit's mass) and ``docs`` and non-increasing in
``ceiling`` and ``rank``.
Every model is calibrated against the same event — the hit covers a relevant document: a
chunk or page lies in one, a document is one, a tree-node, node or triplet has one among
the documents of its leaves (``provenance.leaves``) — so the probabilities are
comparable across queries, modes and units; that is the §7.7.2 contract. One exception: a
``community`` covers so many documents that covering a relevant one says little, and its
report is an extract far narrower than those documents, so its event is what a reader of the
report gets — its text holds a sentence of a relevant (supporting) passage
(``bench/confidence.py --community``; fitted on HotpotQA and 2Wiki). Composed units
(``path``, ``subgraph``) have no model of their own: a composed hit carries its best leaf
chunk's confidence (``Retrieval._retrieve_composed``).

The shipped parameters (``rcp_agentic/data/calibration.json``) were fitted on
SciFact's training split and the HotpotQA and 2WikiMultiHopQA dev sets together, each
set weighted equally, with the engine's default embedder and BM25 settings (see its
``fitted_on``); the graph models on engines of the same sets built with
``build_graph=True``. ``bench/confidence.py`` (``--graph`` for the graph models) measures
their transfer by leaving one set out. ``calibrate_engine`` refits the chunk and
document models for another corpus from BEIR-style queries and qrels. Files of format 1
(hit-only features), 2 (no graph models) and 3 (no z-scores) still load. Only numpy and scipy are needed.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from scipy.stats import rankdata

from ..units import calibration_family

FORMAT = "rcp-agentic-calibration/4"
# Older files read unchanged: every feature and model key of formats 1–3 still exists
# (format 3 adds the graph features and the ``<mode>+graph`` signal sets, format 4 the
# pool z-scores).
READABLE_FORMATS = ("rcp-agentic-calibration/1", "rcp-agentic-calibration/2",
                    "rcp-agentic-calibration/3", FORMAT)
MODES = ("dense", "sparse", "hybrid")
# A request with graph recall (a third, fused recall list) is scored by the model of its
# mode's graph signal set when there is one (``hybrid+graph/chunk``), else by its mode's.
GRAPH = "+graph"
GRAPH_MODES = tuple(m + GRAPH for m in MODES)
SIGNAL_SETS = MODES + GRAPH_MODES
# A unit without a fitted model of its own borrows this one's (pages are parts of a
# document, like chunks; SciFact has no pages to fit on).
DEFAULT_FALLBACKS = {"page": "chunk"}
# Format 1: each feature from the hit alone (kept for the tree-node family and old files).
HIT_FEATURES: dict[str, tuple[str, ...]] = {
    "dense": ("dense", "log1p_rank", "inv_rank"),
    "sparse": ("sparse_ratio", "log1p_sparse", "log1p_rank", "inv_rank"),
    "hybrid": ("dense", "sparse_ratio", "log1p_sparse", "log1p_rank", "inv_rank"),
}
# Format 2: read against the query's recall lists (see the module docstring).
DEFAULT_FEATURES: dict[str, tuple[str, ...]] = {
    "dense": ("dense", "dense_gap", "log1p_rank", "inv_rank"),
    "sparse": ("sparse_ratio", "sparse_rel", "top_sparse_ratio", "log1p_rank", "inv_rank"),
    "hybrid": ("dense", "dense_gap", "sparse_ratio", "sparse_rel", "log1p_dense_rank",
               "log1p_sparse_rank", "log1p_rank", "inv_rank"),
}
# Format 3: with graph recall, each mode's features plus the hit's place in the graph's list.
GRAPH_FEATURES = ("graph_rel", "shared_graph_rel", "log1p_graph_rank")
DEFAULT_FEATURES.update({m + GRAPH: DEFAULT_FEATURES[m] + GRAPH_FEATURES for m in MODES})
# A graph unit (an entity, a fact) is relevant when any document of its leaves is: the more
# documents it spans, the likelier (its breadth; a feature of these families only).
BREADTH_FAMILIES = ("node", "triplet")
DEFAULT_FEATURES.update({f"{m}/{u}": DEFAULT_FEATURES[m] + ("log1p_docs",)
                         for m in SIGNAL_SETS for u in BREADTH_FAMILIES})
# Format 4: the chunk and document models (and every family that borrows its mode's list)
# also read how far the hit and the query's best stand out of the pool, in the pool's
# standard deviations. Fitted on two corpora, the models of format 2 were over-confident on
# the third (SciFact documents) and under-confident on multi-hop passages: how many units
# crowd the top of a pool is what tells those apart (bench/confidence.py, issue 22). The
# graph, breadth and community models keep the features they were fitted with.
Z_FEATURES: dict[str, tuple[str, ...]] = {
    "dense": ("dense_z", "top_dense_z"),
    "sparse": ("sparse_z", "top_sparse_z"),
    "hybrid": ("dense_z", "top_dense_z", "sparse_z", "top_sparse_z"),
}
DEFAULT_FEATURES.update({f"{m}/community": DEFAULT_FEATURES[m] for m in SIGNAL_SETS})
# A z-score needs a pool with a spread: in a pool of n scores the best stands at most
# (n - 1) / sqrt(n) deviations out, so a corpus of a few chunks would read as a weak match
# to a model fitted on pools 100 deep. Below this many scores in the list a model's
# z-scores read, its companion fitted without them (key + SMALL_POOL) scores the hits.
Z_MIN_POOL = 50
SMALL_POOL = ":small-pool"
DEFAULT_FEATURES.update({m: DEFAULT_FEATURES[m] + Z_FEATURES[m] for m in MODES})
# A document's raw cosine is the corpus' scale, not the hit's standing: fitted on the
# multi-hop sets' one-passage documents it made SciFact's abstracts over-confident
# (held-out ECE 0.060 with it, 0.012 without; bench/confidence.py, issue 22). The
# document models read the cosine only against the query's pool.
DEFAULT_FEATURES.update({f"{m}/document": tuple(f for f in DEFAULT_FEATURES[m] if f != "dense")
                         for m in MODES})


def base_mode(signal_set: str) -> str:
    """The retrieval mode of a signal set (``hybrid+graph`` → ``hybrid``)."""
    return signal_set.removesuffix(GRAPH)


# --- features --------------------------------------------------------------------------

@dataclass(frozen=True)
class Signals:
    """What the features of one list of hits are computed from (float arrays of equal length).

    ``d``/``s``: the hits' cosine and BM25; ``c``: the BM25 ceiling; ``r``: the hits' ranks in
    the returned list; ``top_d``/``top_s``: the best cosine / BM25 of the query's recall list;
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
class _Feature:
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


FEATURES: dict[str, _Feature] = {
    # Format 1: each from the hit alone.
    "dense": _Feature("dense", +1, lambda x: x.d, {"dense": +1}),
    "sparse_ratio": _Feature("sparse", +1, lambda x: _div(x.s, x.c),
                             {"sparse": +1, "ceiling": -1}),
    "log1p_sparse": _Feature("sparse", +1, lambda x: np.log1p(x.s), {"sparse": +1}),
    "log1p_rank": _Feature("rank", -1, lambda x: np.log1p(x.r), {"rank": +1}),
    "inv_rank": _Feature("rank", +1, lambda x: 1.0 / (1.0 + x.r), {"rank": -1}),
    # Format 2: relative to the query's recall list (its pool), so free of a corpus' scale.
    "dense_gap": _Feature("dense", -1, lambda x: x.top_d - x.d, {"dense": -1}),
    "sparse_rel": _Feature("sparse", +1, lambda x: _div(x.s, x.top_s), {"sparse": +1}),
    "top_sparse_ratio": _Feature("sparse", +1, lambda x: _div(x.top_s, x.c), {"ceiling": -1}),
    "log1p_dense_rank": _Feature("dense", -1, lambda x: np.log1p(x.rank_d), {"dense": -1}),
    "log1p_sparse_rank": _Feature("sparse", -1, lambda x: np.log1p(x.rank_s), {"sparse": -1}),
    # Format 4: how far the hit, and the query's best, stand out of the query's pool (in the
    # pool's standard deviations): free of a corpus' scale and of how crowded its top is.
    "dense_z": _Feature("dense", +1, lambda x: _z(x.d, x.mu_d, x.sd_d), {"dense": +1}),
    "top_dense_z": _Feature("dense", +1, lambda x: _z(x.top_d, x.mu_d, x.sd_d), {"dense": +1}),
    "sparse_z": _Feature("sparse", +1, lambda x: _z(x.s, x.mu_s, x.sd_s), {"sparse": +1}),
    "top_sparse_z": _Feature("sparse", +1, lambda x: _z(x.top_s, x.mu_s, x.sd_s),
                             {"sparse": +1}),
    # Format 3: graph recall's list (PageRank masses are a share of one walk: only the ratio
    # to the query's best mass and the rank transfer between graphs).
    "graph_rel": _Feature("graph", +1, lambda x: _div(x.g, x.top_g), {"graph": +1}),
    "log1p_graph_rank": _Feature("graph", -1, lambda x: np.log1p(x.rank_g), {"graph": -1}),
    "log1p_docs": _Feature("docs", +1, lambda x: np.log1p(x.docs), {"docs": +1}),
    # The hit's relative mass, worth as much as the query's linking is about passages.
    "shared_graph_rel": _Feature("graph", +1, lambda x: x.share * _div(x.g, x.top_g),
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


def _pool_of(values: Any) -> np.ndarray:
    """A recall list's scores, finite, best first."""
    a = np.asarray(values if values is not None else [], dtype=np.float64).reshape(-1)
    return -np.sort(-a[np.isfinite(a)])


# A hit missing from a recall list (below its last entry, or no BM25 match at all) ranks
# here or at the list's end, whichever is deeper: the engine's default recall depth.
ABSENT_RANK = 100.0


def _moments(pool: np.ndarray) -> tuple[float, float]:
    """A recall list's mean and standard deviation (0, 0 for an empty list)."""
    pool = np.clip(pool, -1e12, 1e12)  # a hostile score must not overflow the square
    return (float(pool.mean()), float(pool.std())) if len(pool) else (0.0, 0.0)


def _in_pool(x: np.ndarray, pool: np.ndarray,
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
            mu, sd = _moments(_pool_of(pool[name]))
        elif moments is not None and name in moments:
            mu, sd = moments[name]
        else:
            mu, sd = _moments(_pool_of(x if name == "dense" else x[x > 0]))
        spread[name] = (_arr(mu, n, 0.0, -_BIG, _BIG), _arr(sd, n, 0.0, 0.0, _BIG))
    for name, x, top, rank in (("dense", d, top_dense, rank_dense),
                               ("sparse", s, top_sparse, rank_sparse),
                               ("graph", g, top_graph, rank_graph)):
        # BM25 recall keeps only units that match a query term (score > 0); graph recall
        # only units PageRank reached.
        matched = None if name == "dense" else x > 0
        if pool is not None and name in pool:
            stats[name] = _in_pool(x, _pool_of(pool[name]), matched)
        elif top is not None and rank is not None:
            stats[name] = (np.maximum(_arr(top, n, -1.0 if name == "dense" else 0.0, -1.0, _BIG),
                                      x), _arr(rank, n, 0.0, 0.0, 1e12))
        else:
            stats[name] = _in_pool(x, _pool_of(x), matched)
    # Cosines are clipped to [-1, 1] like the hit's own, so the gap is never negative.
    return Signals(d, s, c, r, np.clip(stats["dense"][0], -1.0, 1.0), stats["sparse"][0],
                   stats["dense"][1], stats["sparse"][1], g, stats["graph"][0],
                   stats["graph"][1], _arr(docs, n, 1.0, 1.0, 1e12),
                   _arr(1.0 if graph_share is None else graph_share, n, 1.0, 0.0, 1.0),
                   *spread["dense"], *spread["sparse"])


def _design(names: Sequence[str], x: Signals) -> np.ndarray:
    return np.column_stack([FEATURES[f].fn(x) for f in names]) if names else \
        np.zeros((len(x.d), 0))


# --- the model ---------------------------------------------------------------------------

@dataclass
class LogisticModel:
    """``P = sigmoid(intercept + features · coef)`` over named features (raw, unscaled)."""

    features: tuple[str, ...]
    coef: np.ndarray
    intercept: float
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.features = tuple(self.features)
        unknown = [f for f in self.features if f not in FEATURES]
        if unknown:
            raise ValueError(f"unknown calibration feature(s): {', '.join(unknown)}")
        self.coef = np.asarray(self.coef, dtype=np.float64).reshape(-1)
        if len(self.coef) != len(self.features):
            raise ValueError("calibration model: one coefficient per feature is required")
        if not (np.isfinite(self.coef).all() and math.isfinite(self.intercept)):
            raise ValueError("calibration model: coefficients must be finite")

    @property
    def needs(self) -> set[str]:
        return {FEATURES[f].needs for f in self.features}

    @property
    def uses_pool(self) -> bool:
        return bool(POOL_FEATURES.intersection(self.features))

    def logit(self, x: Signals) -> np.ndarray:
        return self.intercept + _design(self.features, x) @ self.coef

    def monotone(self) -> dict[str, int | None]:
        """Direction of P in each raw signal: +1 non-decreasing, -1 non-increasing, 0 unused,
        None when the weights disagree (not monotone; impossible with the fitted sign bounds)."""
        out: dict[str, int | None] = {"dense": 0, "sparse": 0, "ceiling": 0, "rank": 0,
                                      "graph": 0, "docs": 0}
        for f, w in zip(self.features, self.coef):
            if w == 0:
                continue
            for signal, direction in FEATURES[f].moves.items():
                d = direction * (1 if w > 0 else -1)
                cur = out[signal]
                out[signal] = d if cur in (0, d) else None
        return out

    def to_json(self) -> dict[str, Any]:
        return {"features": list(self.features),
                "coef": [float(round(w, 10)) for w in self.coef],
                "intercept": float(round(self.intercept, 10)), **self.info}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "LogisticModel":
        info = {k: v for k, v in obj.items() if k not in ("features", "coef", "intercept")}
        return cls(tuple(obj["features"]), np.asarray(obj["coef"], dtype=np.float64),
                   float(obj["intercept"]), info)


def _key(mode: str, unit: str) -> str:
    return f"{mode}/{unit}"


class Calibrator:
    """Maps retrieval signals to P(relevant): one logistic model per (signal set, unit family).

    A signal set is a retrieval mode (``dense``, ``sparse``, ``hybrid``), or a mode with graph
    recall (``hybrid+graph``: the mode's lists and graph recall's, fused).
    """

    def __init__(self, models: Mapping[str, LogisticModel], *,
                 fallbacks: Mapping[str, str] | None = None,
                 fitted_on: Mapping[str, Any] | None = None) -> None:
        for key in models:
            mode, _, unit = key.partition("/")
            if mode not in SIGNAL_SETS or not unit:
                raise ValueError(f"calibration model key {key!r} is not '<mode>/<unit>' "
                                 f"(mode one of {', '.join(SIGNAL_SETS)})")
        self.models = dict(models)
        self.fallbacks = dict(DEFAULT_FALLBACKS if fallbacks is None else fallbacks)
        self.fitted_on = dict(fitted_on or {})

    # --- persistence ---------------------------------------------------------------

    @classmethod
    @functools.cache
    def default(cls) -> "Calibrator":
        """The parameters shipped with the package (fitted on SciFact train); loaded once."""
        path = resources.files("rcp_agentic") / "data" / "calibration.json"
        return cls.from_json(json.loads(path.read_text(encoding="utf-8")))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Calibrator":
        with open(path, encoding="utf-8") as fh:
            return cls.from_json(json.load(fh))

    def save(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_json(), fh, indent=2)
            fh.write("\n")

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "fitted_on": self.fitted_on, "fallbacks": self.fallbacks,
                "models": {k: m.to_json() for k, m in sorted(self.models.items())}}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Calibrator":
        if obj.get("format") not in READABLE_FORMATS:
            raise ValueError(f"not a calibration file of format {' or '.join(READABLE_FORMATS)} "
                             f"(got {obj.get('format')!r})")
        models = {k: LogisticModel.from_json(v) for k, v in obj["models"].items()}
        return cls(models, fallbacks=obj.get("fallbacks"), fitted_on=obj.get("fitted_on"))

    # --- prediction -----------------------------------------------------------------

    def _lookup(self, signal_set: str, unit: str) -> str | None:
        u = calibration_family(unit)
        seen = set()
        while u not in seen:
            seen.add(u)
            if _key(signal_set, u) in self.models:
                return _key(signal_set, u)
            if u not in self.fallbacks:
                break
            u = self.fallbacks[u]
        return None

    def _key_for(self, mode: str, unit: str, graph: bool) -> str | None:
        if graph and not mode.endswith(GRAPH):
            key = self._lookup(mode + GRAPH, unit)
            if key is not None:
                return key
        return self._lookup(mode, unit)

    def model_for(self, mode: str, unit: str, graph: bool = False) -> LogisticModel | None:
        """The model scoring hits of this mode and unit (after passage→chunk, fallbacks).

        ``graph``: the request ran graph recall; its mode's graph model scores it when there
        is one, else its mode's (which reads the dense/sparse signals only). ``mode`` may
        also name a signal set outright (``hybrid+graph``).
        """
        key = self._key_for(mode, unit, graph)
        return None if key is None else self.models[key]

    def supports(self, mode: str, unit: str, graph: bool = False) -> bool:
        return self.model_for(mode, unit, graph) is not None

    def predict(self, *, mode: str, unit: str, dense: np.ndarray | None,
                sparse: np.ndarray | None, ceiling: float | None,
                ranks: np.ndarray, pool: Mapping[str, Any] | None = None,
                graph: np.ndarray | None = None, docs: np.ndarray | None = None,
                graph_share: float | None = None) -> np.ndarray:
        """One probability per hit, in [0, 1] and finite.

        ``dense``: cosine similarities (required in dense/hybrid mode); ``sparse``: BM25
        scores and ``ceiling`` = ``engine.sparse_ceiling(query, unit)`` (both required in
        sparse/hybrid mode); ``ranks``: 0-based positions in the returned list. ``pool``:
        the query's recall lists as recalled, before fusion and packing (``{"dense":
        cosines, "sparse": BM25 scores, "graph": PageRank masses}``, any order); models of
        format 2 and 3 read a hit's score relative to them (gap to the best, rank in each
        list). Without it the hits given stand in for the pool, which is exact only when
        they are the head of each recall list. ``graph``: the hits' PageRank masses when the
        request ran graph recall (0 for a unit PageRank did not reach); then the mode's
        graph model scores them, if there is one; ``graph_share``: the query's subject share
        (``GraphList.share``, 1 when not given). ``docs``: how many documents each hit's
        leaves lie in (required by the node and triplet models). Signals a model does not use
        are ignored;
        NaN is read as the worst value of its signal. Raises ValueError for an unknown
        mode/unit, a missing signal or mismatched lengths.
        """
        key = self._key_for(mode, unit, graph is not None)
        if key is None:
            raise ValueError(f"no calibration for mode={mode!r} unit={unit!r} "
                             f"(have: {', '.join(sorted(self.models)) or 'none'})")
        model = self.models[key]
        r = np.asarray(ranks, dtype=np.float64).reshape(-1)
        n = len(r)
        if "dense" in model.needs and dense is None:
            raise ValueError(f"{mode} confidence needs the dense scores")
        if "sparse" in model.needs and (sparse is None or ceiling is None):
            raise ValueError(f"{mode} confidence needs the sparse scores and the sparse ceiling")
        if "docs" in model.needs and docs is None:
            raise ValueError(f"{unit} confidence needs each hit's document count (docs)")
        for name, x in (("dense", dense), ("sparse", sparse), ("graph", graph), ("docs", docs)):
            if x is not None and np.ndim(x) and np.shape(x)[0] != n:
                raise ValueError(f"{name} has {np.shape(x)[0]} values for {n} ranks")
        if pool is not None and not isinstance(pool, Mapping):
            raise ValueError("pool must map a retriever name ('dense', 'sparse', 'graph') to "
                             "its scores")
        if n == 0:
            return np.zeros(0)
        model = self._for_pool(key, pool, dense, sparse)
        p = expit(model.logit(signals(dense, sparse, ceiling, r, n, pool=pool, graph=graph,
                                      docs=docs, graph_share=graph_share)))
        return np.clip(np.nan_to_num(p, nan=0.0), 0.0, 1.0)

    def _for_pool(self, key: str, pool: Mapping[str, Any] | None, dense: Any,
                  sparse: Any) -> LogisticModel:
        """The model at ``key``, or its small-pool companion when a list its z-scores read
        holds fewer than ``Z_MIN_POOL`` scores (the hits stand in for a missing pool)."""
        model = self.models[key]
        lists = {FEATURES[f].needs for f in MOMENT_FEATURES.intersection(model.features)}
        if not lists:
            return model
        size = min(len(_pool_of((pool or {}).get(name, dense if name == "dense" else sparse)))
                   for name in lists)
        return model if size >= Z_MIN_POOL else self.models.get(key + SMALL_POOL, model)

    def monotone(self, mode: str, unit: str, graph: bool = False) -> dict[str, int | None]:
        """What the model says: +1/-1 direction of P in each signal, 0 when it is not used."""
        model = self.model_for(mode, unit, graph)
        if model is None:
            raise ValueError(f"no calibration for mode={mode!r} unit={unit!r}")
        return model.monotone()


# --- samples and fitting -------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Sample:
    """One labelled hit: the signals the engine passes to ``predict`` plus relevance."""

    query_id: str
    mode: str
    unit: str
    rank: int
    dense: float | None
    sparse: float | None
    ceiling: float | None
    label: int
    doc_id: str | None = None
    # The query's recall lists (format-2 features): each list's best score and the hit's
    # 0-based rank in it (the list's length when the hit is not in it).
    top_dense: float | None = None
    rank_dense: float | None = None
    top_sparse: float | None = None
    rank_sparse: float | None = None
    source: str = ""  # the data set, for leave-one-out and per-set weights
    # Graph recall (format 3; ``mode`` is then a graph signal set such as ``hybrid+graph``):
    # the hit's PageRank mass, the graph list's best and the hit's rank in it.
    graph: float | None = None
    top_graph: float | None = None
    rank_graph: float | None = None
    docs: float | None = None  # how many documents the hit's leaves lie in
    graph_share: float | None = None  # the query's subject share (graph recall)
    # Each recall list's mean and standard deviation (the z-score features).
    mean_dense: float | None = None
    sd_dense: float | None = None
    mean_sparse: float | None = None
    sd_sparse: float | None = None

    @staticmethod
    def pool_stats(pool: Mapping[str, Any], dense: float | None,
                   sparse: float | None, graph: float | None = None) -> dict[str, Any]:
        """``top_*``/``rank_*`` of a hit with these scores against the query's recall lists
        (floats, None for a score not given), as keyword arguments of ``Sample``."""
        out: dict[str, Any] = {}
        for name, x in (("dense", dense), ("sparse", sparse), ("graph", graph)):
            if x is None or name not in pool:
                if name != "graph":
                    out[f"top_{name}"] = out[f"rank_{name}"] = None
                continue
            if name != "graph":
                out[f"mean_{name}"], out[f"sd_{name}"] = _moments(_pool_of(pool[name]))
            top, rank = _in_pool(np.array([float(x)]), _pool_of(pool[name]),
                                 None if name == "dense" else np.array([float(x) > 0]))
            out[f"top_{name}"], out[f"rank_{name}"] = float(top[0]), float(rank[0])
        return out


def _col(samples: Sequence[Sample], name: str) -> np.ndarray:
    # getattr with a default: samples pickled before a field existed lack it.
    values = [getattr(x, name, None) for x in samples]
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _labels(samples: Sequence[Sample]) -> np.ndarray:
    return np.array([1.0 if x.label > 0 else 0.0 for x in samples])


def _sample_signals(samples: Sequence[Sample], model_features: Sequence[str],
                    key: str) -> Signals:
    """The Signals of a batch of samples of one group (pool statistics as recorded)."""
    names = set(model_features)
    needs = {FEATURES[f].needs for f in names}
    d, s, c = _col(samples, "dense"), _col(samples, "sparse"), _col(samples, "ceiling")
    if "dense" in needs and np.isnan(d).any():
        raise ValueError(f"{key}: every sample needs a dense score")
    if "sparse" in needs and (np.isnan(s).any() or np.isnan(c).any()):
        raise ValueError(f"{key}: every sample needs a sparse score and ceiling")
    g = _col(samples, "graph")
    if "graph" in needs and np.isnan(g).any():
        raise ValueError(f"{key}: every sample needs its graph mass (0 where PageRank did "
                         "not reach it)")
    pool_needs = {FEATURES[f].needs for f in names & POOL_FEATURES}
    pooled = {}
    for name in ("dense", "sparse", "graph"):
        top, rank = _col(samples, f"top_{name}"), _col(samples, f"rank_{name}")
        if name in pool_needs and (np.isnan(top).any() or np.isnan(rank).any()):
            raise ValueError(f"{key}: pool features need every sample's top_{name} and "
                             f"rank_{name} (collect them with the query's recall lists)")
        pooled[name] = (np.nan_to_num(top, nan=-1.0 if name == "dense" else 0.0),
                        np.nan_to_num(rank, nan=ABSENT_RANK if name == "graph" else 0.0))
    docs = _col(samples, "docs")
    if "docs" in needs and np.isnan(docs).any():
        raise ValueError(f"{key}: every sample needs its document count (docs)")
    moments = {}
    for name in ("dense", "sparse"):
        mu, sd = _col(samples, f"mean_{name}"), _col(samples, f"sd_{name}")
        wanted = any(FEATURES[f].needs == name for f in names & MOMENT_FEATURES)
        if wanted and (np.isnan(mu).any() or np.isnan(sd).any()):
            raise ValueError(f"{key}: z-score features need every sample's mean_{name} and "
                             f"sd_{name} (collect them with the query's recall lists)")
        moments[name] = (np.nan_to_num(mu, nan=0.0), np.nan_to_num(sd, nan=0.0))
    return signals(d, s, c, _col(samples, "rank"), len(samples), moments=moments,
                   top_dense=pooled["dense"][0], rank_dense=pooled["dense"][1],
                   top_sparse=pooled["sparse"][0], rank_sparse=pooled["sparse"][1],
                   graph=np.nan_to_num(g, nan=0.0), top_graph=pooled["graph"][0],
                   rank_graph=pooled["graph"][1], docs=np.nan_to_num(docs, nan=1.0),
                   graph_share=np.nan_to_num(_col(samples, "graph_share"), nan=1.0))


def _group(samples: Iterable[Sample]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, x in enumerate(samples):
        if x.mode not in SIGNAL_SETS:
            raise ValueError(f"sample {i}: unknown mode {x.mode!r}")
        groups.setdefault(_key(x.mode, calibration_family(x.unit)), []).append(i)
    return groups


def _fit_logistic(X: np.ndarray, y: np.ndarray, signs: Sequence[int],
                  l2: float, weights: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """L2-penalised logistic regression with sign-constrained weights (L-BFGS-B).

    Minimises Σ weight·log-loss + ½·l2·‖w‖² on standardised features (intercept not
    penalised) and returns the weights on the raw features.
    """
    sw = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
    mu = X.mean(axis=0)
    sd = X.std(axis=0)
    sd[sd < 1e-12] = 1.0
    Z = (X - mu) / sd
    m = X.shape[1]

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:m], theta[m]
        z = Z @ w + b
        value = float(np.sum(sw * (np.logaddexp(0.0, z) - y * z)) + 0.5 * l2 * (w @ w))
        g = sw * (expit(z) - y)
        return value, np.concatenate([Z.T @ g + l2 * w, [g.sum()]])

    prior = min(max(float(np.average(y, weights=sw)), 1e-6), 1 - 1e-6)
    theta0 = np.concatenate([np.zeros(m), [math.log(prior / (1 - prior))]])
    bounds = [(0.0, None) if s > 0 else (None, 0.0) for s in signs] + [(None, None)]
    res = minimize(loss, theta0, jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"maxiter": 2000, "gtol": 1e-8})
    w_std, b_std = res.x[:m], float(res.x[m])
    coef = w_std / sd
    return coef, b_std - float(coef @ mu)


# With equal weights per data set, a set that gives a group only a handful of queries (graph
# recall on SciFact claims, which seldom name an entity a passage is about) would weigh as
# much as a set of hundreds: within a group, a set with fewer queries is left out.
MIN_SOURCE_QUERIES = 20


def _source_weights(samples: Sequence[Sample],
                    min_queries: int = MIN_SOURCE_QUERIES) -> tuple[np.ndarray, list[str]]:
    """Per-sample weights giving every data set (``Sample.source``) the same total weight,
    0 for a set with fewer than ``min_queries`` queries unless every set is that small;
    and the sets left out."""
    counts: dict[str, int] = {}
    queries: dict[str, set[str]] = {}
    for x in samples:
        counts[x.source] = counts.get(x.source, 0) + 1
        queries.setdefault(x.source, set()).add(x.query_id)
    small = sorted(s for s, q in queries.items() if len(q) < min_queries)
    if len(small) == len(counts):
        small = []
    kept = len(counts) - len(small)
    n = sum(c for s, c in counts.items() if s not in small)
    return (np.array([0.0 if x.source in small else n / (kept * counts[x.source])
                      for x in samples]), small)


def fit(samples: Sequence[Sample], *, features: Mapping[str, Sequence[str]] | None = None,
        l2: float = 1.0, fitted_on: Mapping[str, Any] | None = None,
        fallbacks: Mapping[str, str] | None = None, balance: bool = True) -> Calibrator:
    """Fit one model per (mode, unit family) present in ``samples``.

    ``features`` maps a signal set (a mode, or a mode with graph recall such as
    ``hybrid+graph``) or one of its groups (``hybrid/node``) to feature names (default
    ``DEFAULT_FEATURES``; a group's entry wins over its signal set's, and a signal set
    given here replaces the default entries of its groups).
    ``balance`` weighs each data set (``Sample.source``) equally within a group, so the
    largest one does not set the base rate (a set with fewer than ``MIN_SOURCE_QUERIES``
    queries in the group is left out of it, named in the model's ``left_out``). A group without both relevant and
    non-relevant samples cannot be fitted and is skipped (named in
    ``fitted_on["skipped"]``); ValueError if nothing could be fitted.
    """
    given = dict(features or {})
    # A signal set the caller gives replaces the default entries of its groups as well.
    feats = {**{k: v for k, v in DEFAULT_FEATURES.items() if k.split("/", 1)[0] not in given},
             **given}
    samples = list(samples)
    y = _labels(samples)
    models: dict[str, LogisticModel] = {}
    skipped: list[str] = []
    for key, idx in sorted(_group(samples).items()):
        mode = key.split("/", 1)[0]
        names = tuple(feats.get(key) or feats[mode])
        ix = np.asarray(idx)
        yy = y[ix]
        if yy.min() == yy.max():
            skipped.append(key)
            continue
        group = [samples[i] for i in idx]
        X = _design(names, _sample_signals(group, names, key))
        weights, small = _source_weights(group) if balance else (None, [])
        coef, b = _fit_logistic(X, yy, [FEATURES[f].sign for f in names], l2, weights)
        info: dict[str, Any] = {"n": int(len(ix)), "positives": int(yy.sum())}
        sources = sorted({x.source for x in group if x.source} - set(small))
        if sources:
            info["sources"] = sources
        if small:
            info["left_out"] = small
        models[key] = LogisticModel(names, coef, b, info)
        # The small-pool companion (see Z_MIN_POOL): its signal set's features without the
        # z-scores. A document's keeps the raw cosine: with no spread to read a hit against,
        # the cosine is all that tells a match from the best of nothing.
        plain = tuple(f for f in (feats.get(mode) or names) if f not in MOMENT_FEATURES)
        if MOMENT_FEATURES.intersection(names):
            X = _design(plain, _sample_signals(group, plain, key))
            coef, b = _fit_logistic(X, yy, [FEATURES[f].sign for f in plain], l2, weights)
            models[key + SMALL_POOL] = LogisticModel(plain, coef, b, info)
    if not models:
        raise ValueError("no (mode, unit) group has both relevant and non-relevant hits")
    note = dict(fitted_on or {})
    note.setdefault("date", _dt.date.today().isoformat())
    present = {key.split("/", 1)[0] for key in models}
    note.setdefault("features", {
        **{m: list(feats[m]) for m in SIGNAL_SETS if m in MODES or m in present},
        **{key: list(feats[key]) for key in sorted(models) if key in feats}})
    note.setdefault("model", "logistic regression per (mode, unit), L2 "
                             f"{l2:g} on standardised features, sign-constrained weights"
                             + (", each data set weighted equally" if balance else ""))
    if skipped:
        note["skipped"] = skipped
    return Calibrator(models, fallbacks=fallbacks, fitted_on=note)


def predict_samples(calibrator: Calibrator, samples: Sequence[Sample]) -> np.ndarray:
    """``predict`` for a batch of mixed samples (each with its own signals), in input order."""
    samples = list(samples)
    out = np.full(len(samples), np.nan)
    for key, idx in _group(samples).items():
        mode, unit = key.split("/", 1)
        model = calibrator.model_for(mode, unit)
        if model is None and mode.endswith(GRAPH):  # as predict: the mode's own model
            model = calibrator.model_for(base_mode(mode), unit)
        if model is None:
            continue
        x = _sample_signals([samples[i] for i in idx], model.features, key)
        out[np.asarray(idx)] = np.clip(expit(model.logit(x)), 0.0, 1.0)
    return out


def query_folds(query_ids: Iterable[str], folds: int, seed: int = 0) -> dict[str, int]:
    """A deterministic query → fold assignment (shuffled, round-robin)."""
    qids = sorted(set(query_ids))
    order = np.random.default_rng(seed).permutation(len(qids))
    return {qids[j]: i % folds for i, j in enumerate(order)}


def _query_key(x: Sample) -> str:
    # Query ids of different data sets may collide.
    return f"{x.source}\x00{x.query_id}" if x.source else x.query_id


def cross_validate(samples: Sequence[Sample], *, folds: int = 5, seed: int = 0,
                   **fit_kw: Any) -> np.ndarray:
    """Out-of-fold probabilities (folds by query), aligned with ``samples``."""
    samples = list(samples)
    fold_of = query_folds((_query_key(x) for x in samples), folds, seed)
    f = np.array([fold_of[_query_key(x)] for x in samples])
    out = np.full(len(samples), np.nan)
    for k in range(folds):
        test = np.flatnonzero(f == k)
        if not len(test):
            continue
        model = fit([samples[i] for i in np.flatnonzero(f != k)], **fit_kw)
        out[test] = predict_samples(model, [samples[i] for i in test])
    return out


def leave_one_out(samples: Sequence[Sample], **fit_kw: Any) -> np.ndarray:
    """Probabilities of each data set's samples (``Sample.source``) from a model fitted on
    the other data sets only — transfer to a corpus the fit never saw; aligned with
    ``samples`` (NaN where a group could not be fitted without the held-out set)."""
    samples = list(samples)
    out = np.full(len(samples), np.nan)
    sources = sorted({x.source for x in samples})
    if len(sources) < 2:
        raise ValueError("leave-one-out needs samples of at least two data sets (Sample.source)")
    for held in sources:
        train = [x for x in samples if x.source != held]
        test = [i for i, x in enumerate(samples) if x.source == held]
        out[np.asarray(test)] = predict_samples(fit(train, **fit_kw), [samples[i] for i in test])
    return out


# --- metrics -------------------------------------------------------------------------

def ece(probs: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray,
        bins: int = 10) -> float:
    """Expected calibration error: Σ_b (n_b/N)·|mean p − mean y| over equal-width bins.

    Bin b holds p in [b/bins, (b+1)/bins); p = 1 falls in the last bin. 0 for no samples.
    """
    p = np.asarray(probs, dtype=np.float64).reshape(-1)
    y = (np.asarray(labels, dtype=np.float64).reshape(-1) > 0).astype(np.float64)
    if len(p) != len(y):
        raise ValueError("probs and labels differ in length")
    if not len(p):
        return 0.0
    idx = np.clip((p * bins).astype(np.int64), 0, bins - 1)
    sum_p = np.bincount(idx, weights=p, minlength=bins)
    sum_y = np.bincount(idx, weights=y, minlength=bins)
    return float(np.abs(sum_p - sum_y).sum() / len(p))


def auroc(probs: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> float:
    """Area under the ROC curve (Mann–Whitney U; ties count ½). NaN without both classes."""
    p = np.asarray(probs, dtype=np.float64).reshape(-1)
    y = np.asarray(labels, dtype=np.float64).reshape(-1) > 0
    if len(p) != len(y):
        raise ValueError("probs and labels differ in length")
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(p)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _summary(p: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    return {"n": int(len(y)), "positives": int(y.sum()), "ece": round(ece(p, y), 5),
            "auroc": round(auroc(p, y), 5), "mean_p": round(float(p.mean()), 5) if len(p) else 0,
            "base_rate": round(float(y.mean()), 5) if len(y) else 0}


def evaluate(samples: Sequence[Sample], probs: np.ndarray) -> dict[str, dict[str, Any]]:
    """ECE / AUROC per ``mode/unit`` and over everything (``"all"``); NaN probs are skipped."""
    y = np.array([1.0 if x.label > 0 else 0.0 for x in samples])
    probs = np.asarray(probs, dtype=np.float64)
    ok = ~np.isnan(probs)
    out = {key: _summary(probs[np.asarray(ix)][ok[ix]], y[np.asarray(ix)][ok[ix]])
           for key, ix in sorted(_group(samples).items())}
    out["all"] = _summary(probs[ok], y[ok])
    return out


# --- from a live engine ----------------------------------------------------------------

def recall_pool(engine: Any, query: str, unit: str, depth: int) -> dict[str, np.ndarray]:
    """The query's dense and sparse recall lists (their scores), ``depth`` deep, as the
    engine recalls them for ``retrieve`` (what the engine passes to ``predict`` as ``pool``)."""
    out = {}
    for mode in ("dense", "sparse"):
        res = engine.retrieve(query, k=depth, mode=mode, unit=unit, include_text=False)
        out[mode] = np.array([float((h.scores or {}).get(mode, np.nan)) for h in res.hits])
    return out


def collect_samples(engine: Any, queries: Mapping[str, str],
                    qrels: Mapping[str, Mapping[str, int]], *,
                    modes: Sequence[str] = MODES, units: Sequence[str] = ("chunk", "document"),
                    k: int = 20, source: str = "", pool_depth: int | None = None) -> list[Sample]:
    """Labelled top-``k`` hits of every judged query in every mode and unit.

    A hit is relevant iff its document has grade > 0 in the query's qrels (a chunk
    or page inherits its document's judgement). Queries absent from ``qrels`` are
    skipped (unjudged); judged queries without a relevant document count as negatives.
    Each hit carries its place in the query's recall lists (``pool_depth`` deep; the
    engine's ``candidate_k`` by default, as ``retrieve`` recalls) and ``source``.
    """
    depth = pool_depth or max(k, int(getattr(getattr(engine, "config", None), "candidate_k",
                                             100)))
    out: list[Sample] = []
    for qid, text in queries.items():
        rels = qrels.get(qid)
        if rels is None:
            continue
        for unit in units:
            ceiling = float(engine.sparse_ceiling(text, calibration_family(unit)))
            pool = recall_pool(engine, text, unit, depth)
            for mode in modes:
                res = engine.retrieve(text, k=k, mode=mode, unit=unit, include_text=False)
                for rank, h in enumerate(res.hits):
                    doc_id = h.chunk.doc_id if h.chunk else (h.meta or {}).get("doc_id")
                    scores = h.scores or {}
                    dense = scores.get("dense") if mode != "sparse" else None
                    sparse = scores.get("sparse") if mode != "dense" else None
                    out.append(Sample(
                        query_id=str(qid), mode=mode, unit=unit, rank=rank, dense=dense,
                        sparse=sparse, ceiling=ceiling if mode != "dense" else None,
                        label=int(rels.get(str(doc_id), 0) > 0), doc_id=doc_id, source=source,
                        **Sample.pool_stats(pool, dense, sparse)))
    return out


def engine_note(engine: Any) -> dict[str, Any]:
    """What a calibration depends on besides the data: the embedder and the scoring settings."""
    cfg = getattr(engine, "config", None)
    note: dict[str, Any] = {"embedder": getattr(getattr(engine, "embedder", None), "identity",
                                                None)}
    if cfg is not None:
        note["engine"] = {name: getattr(cfg, name, None) for name in
                          ("bm25_k1", "bm25_b", "chunk_size", "chunk_overlap", "rrf_k")}
    return note


def calibrate_samples(samples: Sequence[Sample], *, folds: int = 5, l2: float = 1.0,
                      seed: int = 0, fitted_on: Mapping[str, Any] | None = None,
                      features: Mapping[str, Sequence[str]] | None = None,
                      ) -> tuple[Calibrator, dict[str, Any], np.ndarray | None]:
    """Fit on every sample; measure on held-out folds by query.

    Returns ``(calibrator, metrics, out_of_fold_probs)``; metrics hold ECE/AUROC per
    ``mode/unit`` and overall (``"all"``) on the training data (``"train"``) and,
    given at least ``folds`` ≥ 2 queries, on held-out folds (``"cv"``).
    """
    samples = list(samples)
    judged = sorted({_query_key(x) for x in samples})
    note = {"queries": len(judged), **(fitted_on or {})}
    calibrator = fit(samples, l2=l2, fitted_on=note, features=features)
    metrics: dict[str, Any] = {"queries": len(judged), "samples": len(samples),
                               "train": evaluate(samples, predict_samples(calibrator, samples))}
    oof = None
    if folds >= 2 and len(judged) >= folds:
        oof = cross_validate(samples, folds=folds, seed=seed, l2=l2, features=features)
        metrics["folds"] = folds
        metrics["cv"] = evaluate(samples, oof)
        for key, model in calibrator.models.items():
            if key in metrics["cv"]:
                model.info["cv"] = {m: metrics["cv"][key][m] for m in ("ece", "auroc")}
        calibrator.fitted_on["cv"] = {"folds": folds, **{m: metrics["cv"]["all"][m]
                                                         for m in ("ece", "auroc")}}
    return calibrator, metrics, oof


def calibrate_engine(engine: Any, queries: Mapping[str, str],
                     qrels: Mapping[str, Mapping[str, int]], *,
                     units: Sequence[str] = ("chunk", "document"), k: int = 20, folds: int = 5,
                     l2: float = 1.0, fitted_on: Mapping[str, Any] | None = None,
                     ) -> tuple[Calibrator, dict[str, Any]]:
    """Fit a Calibrator on a live engine's top-``k`` hits for BEIR-style queries and qrels.

    ``queries`` is ``{query_id: text}``, ``qrels`` ``{query_id: {doc_id: grade}}``
    (grade > 0 is relevant). Every mode (dense, sparse, hybrid) and each of ``units``
    is retrieved for every judged query. Returns the calibrator (fitted on all of
    them; save it with ``.save(path)``) and metrics: ``queries``, ``samples``, ``k`` and
    per ``mode/unit`` plus overall (``"all"``) ``{n, positives, ece, auroc, mean_p,
    base_rate}`` on held-out folds by query (``"cv"``; only with ≥ ``folds`` judged
    queries) and on the training data (``"train"``).
    """
    samples = collect_samples(engine, queries, qrels, units=units, k=k)
    if not samples:
        raise ValueError("no judged query returned any hit: check that the query ids of "
                         "QUERIES and QRELS match and that the engine holds the corpus")
    note = {"k": k, "units": list(units), **engine_note(engine), **(fitted_on or {})}
    calibrator, metrics, _oof = calibrate_samples(samples, folds=folds, l2=l2, fitted_on=note)
    metrics["k"] = k
    return calibrator, metrics
