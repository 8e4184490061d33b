"""Calibrated hit confidence (RCP §7.7.2): retrieval signals → P(the hit is relevant).

A hit's ``confidence`` is a small logistic regression, ``sigmoid(b + Σ w_f · f(hit))``, one
model per signal set (the request's mode, or that mode ``+graph`` when graph recall ran)
and unit family (chunk, document, tree-node, node, triplet, community; a composed unit
carries its best leaf chunk's). The features read a hit against its own query's recall pool
(``candidate_k`` deep, never ``k``, the page or a session) and the BM25 ceiling, so a model
holds on a corpus it was not fitted on. The shipped models are
``rcp_agentic/data/calibration.json``; files of formats 1 to 3 still load.

This module (the models as loaded, :class:`Calibrator`) and :mod:`.confidence_features`
are what ``retrieve`` runs, with numpy only; fitting (scipy) is :mod:`.calibration_fit`.
The features, the event each family is calibrated against and where the models were fitted:
``docs/internals.md``, "Calibrated confidence".
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from ..units import calibration_family
from ..vocabulary import MODES
from .confidence_features import (FEATURES, MOMENT_FEATURES, Z_FEATURES, Signals, design_matrix,
                                  pool_of, signals)

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
# graph, breadth and community models keep the features they were fitted with (Z_FEATURES:
# confidence_features).
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
        return self.intercept + design_matrix(self.features, x) @ self.coef

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
        size = min(len(pool_of((pool or {}).get(name, dense if name == "dense" else sparse)))
                   for name in lists)
        return model if size >= Z_MIN_POOL else self.models.get(key + SMALL_POOL, model)

    def monotone(self, mode: str, unit: str, graph: bool = False) -> dict[str, int | None]:
        """What the model says: +1/-1 direction of P in each signal, 0 when it is not used."""
        model = self.model_for(mode, unit, graph)
        if model is None:
            raise ValueError(f"no calibration for mode={mode!r} unit={unit!r}")
        return model.monotone()


# The fitting names (calibration_fit, calibration_engine) resolve here too, on first use, so
# importing this module never imports scipy: for callers that import them from here and for
# samples pickled as ``rcp_agentic.pipeline.confidence.Sample`` (bench/.cache/confidence-*.pkl).
_MOVED = {**dict.fromkeys(("Sample", "MIN_SOURCE_QUERIES", "fit", "predict_samples",
                           "query_folds", "cross_validate", "leave_one_out", "ece", "auroc",
                           "evaluate"), ".calibration_fit"),
          **dict.fromkeys(("recall_pool", "collect_samples", "engine_note", "calibrate_samples",
                           "calibrate_engine"), ".calibration_engine")}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        return getattr(importlib.import_module(_MOVED[name], __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
