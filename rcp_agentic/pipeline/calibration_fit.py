"""Fitting the hit-confidence calibration offline (RCP §7.7.2): labelled hits → a Calibrator.

The runtime side (features, models, :class:`~rcp_agentic.pipeline.confidence.Calibrator`)
lives in :mod:`rcp_agentic.pipeline.confidence` and needs numpy only; this module adds what
fitting and measuring need (scipy): a :class:`Sample` per labelled hit, collected from a
live engine (:mod:`.calibration_engine`) or built by a bench; ``fit`` (one sign-constrained,
L2-penalised logistic regression per signal set and unit family, each data set weighted
equally, with the small-pool companions); out-of-fold and leave-one-set-out probabilities
(``cross_validate``, ``leave_one_out``); the metrics (``ece``, ``auroc``, ``evaluate``).
Calibrating a live engine, behind ``rcp-agentic calibrate``: :mod:`.calibration_engine`.
``bench/confidence.py`` fits the shipped parameters with it.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from scipy.stats import rankdata

from ..units import calibration_family
from ..vocabulary import RECALL_SOURCES
from .confidence import (DEFAULT_FEATURES, GRAPH, MODES, SIGNAL_SETS, SMALL_POOL, Calibrator,
                         LogisticModel, _key, base_mode)
from .confidence_features import (ABSENT_RANK, FEATURES, MOMENT_FEATURES, POOL_FEATURES, Signals,
                                  design_matrix, in_pool, pool_moments, pool_of, signals)

# --- samples ---------------------------------------------------------------------------

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
                out[f"mean_{name}"], out[f"sd_{name}"] = pool_moments(pool_of(pool[name]))
            top, rank = in_pool(np.array([float(x)]), pool_of(pool[name]),
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
    for name in RECALL_SOURCES:
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
        X = design_matrix(names, _sample_signals(group, names, key))
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
            X = design_matrix(plain, _sample_signals(group, plain, key))
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


def query_key(x: Sample) -> str:
    # Query ids of different data sets may collide.
    return f"{x.source}\x00{x.query_id}" if x.source else x.query_id


def cross_validate(samples: Sequence[Sample], *, folds: int = 5, seed: int = 0,
                   **fit_kw: Any) -> np.ndarray:
    """Out-of-fold probabilities (folds by query), aligned with ``samples``."""
    samples = list(samples)
    fold_of = query_folds((query_key(x) for x in samples), folds, seed)
    f = np.array([fold_of[query_key(x)] for x in samples])
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

