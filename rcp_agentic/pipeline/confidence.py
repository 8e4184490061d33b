"""Calibrated hit confidence (RCP §7.7.2): retrieval signals → P(the hit is relevant).

A hit's ``confidence`` is a small logistic regression, ``sigmoid(b + Σ w_f · f(hit))``, one
model per signal set (the request's mode, or that mode ``+graph`` when graph recall ran)
and unit family (chunk, document, tree-node, node, triplet, community; a composed unit
carries its best leaf chunk's). The features read a hit against its own query's recall pool
(``candidate_k`` deep, never ``k``, the page or a session) and the BM25 ceiling, so a model
holds on a corpus it was not fitted on. The shipped models are
``rcp_agentic/data/calibration.json``; files of formats 1 to 3 still load.

This module is what ``retrieve`` runs: the features, the models as loaded and
:class:`Calibrator`; it needs numpy only. Fitting (scipy) lives in :mod:`.calibration_fit`.
The features, the event each family is calibrated against and where the models were fitted:
``docs/internals.md``, "Calibrated confidence".
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from ..units import calibration_family
from ..vocabulary import MODES

FORMAT = "rcp-agentic-calibration/4"
# Older files read unchanged: every feature and model key of formats 1–3 still exists
# (format 3 adds the graph features and the ``<mode>+graph`` signal sets, format 4 the
# pool z-scores).
READABLE_FORMATS = ("rcp-agentic-calibration/1", "rcp-agentic-calibration/2",
                    "rcp-agentic-calibration/3", FORMAT)
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
# Format 2: read against the query's recall lists (docs/internals.md, "Calibrated confidence").
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


def _expit(x: Any) -> np.ndarray:
    """The logistic function, ``1 / (1 + exp(-x))`` elementwise, as ``scipy.special.expit``
    computes it: with the C library's ``exp``, so a confidence is bit for bit what it was when
    scipy computed it (numpy's ``exp`` may be a SIMD one, a unit in the last place apart)."""
    a = np.asarray(x, dtype=np.float64)
    flat = a.reshape(-1).tolist()
    return np.fromiter(map(_expit1, flat), dtype=np.float64, count=len(flat)).reshape(a.shape)


def _expit1(v: float) -> float:
    try:
        return 1.0 / (1.0 + math.exp(-v))
    except OverflowError:  # exp(-v) beyond the largest float: C's exp gives inf, so 1 / inf
        return 0.0


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
        sparse/hybrid mode); ``ranks``: 0-based ranks in the pool's fused order (what the
        engine passes; a page's own positions would make a hit's confidence depend on the
        page). ``pool``: the query's recall lists as recalled, before fusion and packing
        (``{"dense": cosines, "sparse": BM25 scores, "graph": PageRank masses}``, any
        order), holding each hit's score exactly as given here; models of format 2 and 3
        read a hit's score relative to them (gap to the best, rank in each list). Without
        it the hits given stand in for the pool, which is exact only when they are the head
        of each recall list. ``graph``: the hits' PageRank masses when the
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
        p = _expit(model.logit(signals(dense, sparse, ceiling, r, n, pool=pool, graph=graph,
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


# The fitting names (calibration_fit) resolve here too, on first use, so importing this module
# never imports scipy: for callers that import them from here and for samples pickled as
# ``rcp_agentic.pipeline.confidence.Sample`` (bench/.cache/confidence-*.pkl).
_MOVED = frozenset({"Sample", "MIN_SOURCE_QUERIES", "fit", "predict_samples", "query_folds",
                    "cross_validate", "leave_one_out", "ece", "auroc", "evaluate", "recall_pool",
                    "collect_samples", "engine_note", "calibrate_samples", "calibrate_engine"})


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        return getattr(importlib.import_module(".calibration_fit", __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
