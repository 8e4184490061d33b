"""Calibrated hit confidence (RCP §7.7.2): retrieval signals → P(the hit is relevant).

A hit's ``confidence`` is the output of a small logistic regression over the
hit's own signals, one model per signal set (``dense`` / ``sparse`` / ``hybrid``
mode) and unit family (``chunk`` / ``document``)::

    P(relevant) = sigmoid(b + Σ w_f · f(hit))

with these features, each computed from the hit alone (never from the other
hits of the list, so a hit's confidence does not change with ``k``, paging or
the rest of the list):

=================  ===========================================  ======  =========
feature            definition                                   sign    modes
=================  ===========================================  ======  =========
``dense``          cosine(query, unit), clipped to [-1, 1]      w ≥ 0   dense, hybrid
``sparse_ratio``   BM25 ÷ ``engine.sparse_ceiling`` in [0, 1]   w ≥ 0   sparse, hybrid
``log1p_sparse``   log(1 + BM25)                                w ≥ 0   sparse, hybrid
``log1p_rank``     log(1 + rank), rank 0-based in the list      w ≤ 0   all
``inv_rank``       1 / (1 + rank)                               w ≥ 0   all
=================  ===========================================  ======  =========

The signs are constraints of the fit, so every model is by construction
non-decreasing in ``dense`` and ``sparse`` and non-increasing in ``ceiling`` and
``rank``. Because every (mode, unit) model is calibrated against the same
event (the hit's document is judged relevant), the probabilities are comparable
across queries, modes and units — that is the §7.7.2 contract.

The shipped parameters (``rcp_agentic/data/calibration.json``) were fitted on
SciFact's training split with the engine's default embedder and BM25 settings
(see its ``fitted_on``); ``calibrate_engine`` refits them for another corpus
from BEIR-style queries and qrels. Only numpy and scipy are needed.
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

FORMAT = "rcp-agentic-calibration/1"
MODES = ("dense", "sparse", "hybrid")
# A unit without a fitted model of its own borrows this one's (pages are parts of a
# document, like chunks; SciFact has no pages to fit on).
DEFAULT_FALLBACKS = {"page": "chunk"}
DEFAULT_FEATURES: dict[str, tuple[str, ...]] = {
    "dense": ("dense", "log1p_rank", "inv_rank"),
    "sparse": ("sparse_ratio", "log1p_sparse", "log1p_rank", "inv_rank"),
    "hybrid": ("dense", "sparse_ratio", "log1p_sparse", "log1p_rank", "inv_rank"),
}


# --- features --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Feature:
    needs: str  # "dense" | "sparse" | "rank"
    sign: int  # constraint on the weight: +1 (w ≥ 0), -1 (w ≤ 0)
    fn: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    moves: dict[str, int]  # how the feature moves with each raw signal (+1 up, -1 down)


def _ratio(d: np.ndarray, s: np.ndarray, c: np.ndarray, r: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(c > 0, s / np.where(c > 0, c, 1.0), 0.0)
    return np.clip(out, 0.0, 1.0)


FEATURES: dict[str, _Feature] = {
    "dense": _Feature("dense", +1, lambda d, s, c, r: d, {"dense": +1}),
    "sparse_ratio": _Feature("sparse", +1, _ratio, {"sparse": +1, "ceiling": -1}),
    "log1p_sparse": _Feature("sparse", +1, lambda d, s, c, r: np.log1p(s), {"sparse": +1}),
    "log1p_rank": _Feature("rank", -1, lambda d, s, c, r: np.log1p(r), {"rank": +1}),
    "inv_rank": _Feature("rank", +1, lambda d, s, c, r: 1.0 / (1.0 + r), {"rank": -1}),
}


def _clean(dense: Any, sparse: Any, ceiling: Any, ranks: Any,
           n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Signals as float arrays of length n, sanitised (missing/NaN → the worst value)."""
    def arr(x: Any, worst: float, lo: float, hi: float) -> np.ndarray:
        if x is None:
            return np.full(n, worst)
        a = np.broadcast_to(np.asarray(x, dtype=np.float64), (n,))
        return np.clip(np.nan_to_num(a, nan=worst, posinf=hi, neginf=lo), lo, hi)

    d = arr(dense, -1.0, -1.0, 1.0)
    s = arr(sparse, 0.0, 0.0, np.finfo(np.float64).max / 4)
    c = arr(ceiling, 0.0, 0.0, np.finfo(np.float64).max / 4)
    r = arr(ranks, 0.0, 0.0, 1e12)
    return d, s, c, r


def _design(names: Sequence[str], d: np.ndarray, s: np.ndarray, c: np.ndarray,
            r: np.ndarray) -> np.ndarray:
    return np.column_stack([FEATURES[f].fn(d, s, c, r) for f in names]) if names else \
        np.zeros((len(d), 0))


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

    def logit(self, d: np.ndarray, s: np.ndarray, c: np.ndarray, r: np.ndarray) -> np.ndarray:
        return self.intercept + _design(self.features, d, s, c, r) @ self.coef

    def monotone(self) -> dict[str, int | None]:
        """Direction of P in each raw signal: +1 non-decreasing, -1 non-increasing, 0 unused,
        None when the weights disagree (not monotone; impossible with the fitted sign bounds)."""
        out: dict[str, int | None] = {"dense": 0, "sparse": 0, "ceiling": 0, "rank": 0}
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
    """Maps retrieval signals to P(relevant): one logistic model per (mode, unit family)."""

    def __init__(self, models: Mapping[str, LogisticModel], *,
                 fallbacks: Mapping[str, str] | None = None,
                 fitted_on: Mapping[str, Any] | None = None) -> None:
        for key in models:
            mode, _, unit = key.partition("/")
            if mode not in MODES or not unit:
                raise ValueError(f"calibration model key {key!r} is not '<mode>/<unit>'")
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
        if obj.get("format") != FORMAT:
            raise ValueError(f"not a calibration file of format {FORMAT!r}")
        models = {k: LogisticModel.from_json(v) for k, v in obj["models"].items()}
        return cls(models, fallbacks=obj.get("fallbacks"), fitted_on=obj.get("fitted_on"))

    # --- prediction -----------------------------------------------------------------

    def model_for(self, mode: str, unit: str) -> LogisticModel | None:
        """The model scoring hits of this mode and unit (after passage→chunk, fallbacks)."""
        u = calibration_family(unit)
        seen = set()
        while u not in seen:
            seen.add(u)
            model = self.models.get(_key(mode, u))
            if model is not None:
                return model
            if u not in self.fallbacks:
                break
            u = self.fallbacks[u]
        return None

    def supports(self, mode: str, unit: str) -> bool:
        return self.model_for(mode, unit) is not None

    def predict(self, *, mode: str, unit: str, dense: np.ndarray | None,
                sparse: np.ndarray | None, ceiling: float | None,
                ranks: np.ndarray) -> np.ndarray:
        """One probability per hit, in [0, 1] and finite.

        ``dense``: cosine similarities (required in dense/hybrid mode); ``sparse``: BM25
        scores and ``ceiling`` = ``engine.sparse_ceiling(query, unit)`` (both required in
        sparse/hybrid mode); ``ranks``: 0-based positions in the returned list. Signals a
        mode does not use are ignored; NaN is read as the worst value of its signal.
        Raises ValueError for an unknown mode/unit, a missing signal or mismatched lengths.
        """
        model = self.model_for(mode, unit)
        if model is None:
            raise ValueError(f"no calibration for mode={mode!r} unit={unit!r} "
                             f"(have: {', '.join(sorted(self.models)) or 'none'})")
        r = np.asarray(ranks, dtype=np.float64).reshape(-1)
        n = len(r)
        if "dense" in model.needs and dense is None:
            raise ValueError(f"{mode} confidence needs the dense scores")
        if "sparse" in model.needs and (sparse is None or ceiling is None):
            raise ValueError(f"{mode} confidence needs the sparse scores and the sparse ceiling")
        for name, x in (("dense", dense), ("sparse", sparse)):
            if x is not None and np.ndim(x) and np.shape(x)[0] != n:
                raise ValueError(f"{name} has {np.shape(x)[0]} values for {n} ranks")
        if n == 0:
            return np.zeros(0)
        d, s, c, rr = _clean(dense, sparse, ceiling, r, n)
        p = expit(model.logit(d, s, c, rr))
        return np.clip(np.nan_to_num(p, nan=0.0), 0.0, 1.0)

    def monotone(self, mode: str, unit: str) -> dict[str, int | None]:
        """What the model says: +1/-1 direction of P in each signal, 0 when it is not used."""
        model = self.model_for(mode, unit)
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


def _arrays(samples: Sequence[Sample]) -> tuple[np.ndarray, ...]:
    def col(name: str) -> np.ndarray:
        return np.array([np.nan if getattr(x, name) is None else getattr(x, name)
                         for x in samples], dtype=np.float64)

    y = np.array([1.0 if x.label > 0 else 0.0 for x in samples])
    return col("dense"), col("sparse"), col("ceiling"), col("rank"), y


def _group(samples: Iterable[Sample]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, x in enumerate(samples):
        if x.mode not in MODES:
            raise ValueError(f"sample {i}: unknown mode {x.mode!r}")
        groups.setdefault(_key(x.mode, calibration_family(x.unit)), []).append(i)
    return groups


def _fit_logistic(X: np.ndarray, y: np.ndarray, signs: Sequence[int],
                  l2: float) -> tuple[np.ndarray, float]:
    """L2-penalised logistic regression with sign-constrained weights (L-BFGS-B).

    Minimises Σ log-loss + ½·l2·‖w‖² on standardised features (intercept not
    penalised) and returns the weights on the raw features.
    """
    mu = X.mean(axis=0)
    sd = X.std(axis=0)
    sd[sd < 1e-12] = 1.0
    Z = (X - mu) / sd
    m = X.shape[1]

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:m], theta[m]
        z = Z @ w + b
        value = float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * l2 * (w @ w))
        g = expit(z) - y
        return value, np.concatenate([Z.T @ g + l2 * w, [g.sum()]])

    prior = min(max(y.mean(), 1e-6), 1 - 1e-6)
    theta0 = np.concatenate([np.zeros(m), [math.log(prior / (1 - prior))]])
    bounds = [(0.0, None) if s > 0 else (None, 0.0) for s in signs] + [(None, None)]
    res = minimize(loss, theta0, jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"maxiter": 2000, "gtol": 1e-8})
    w_std, b_std = res.x[:m], float(res.x[m])
    coef = w_std / sd
    return coef, b_std - float(coef @ mu)


def fit(samples: Sequence[Sample], *, features: Mapping[str, Sequence[str]] | None = None,
        l2: float = 1.0, fitted_on: Mapping[str, Any] | None = None,
        fallbacks: Mapping[str, str] | None = None) -> Calibrator:
    """Fit one model per (mode, unit family) present in ``samples``.

    ``features`` maps a mode to its feature names (default ``DEFAULT_FEATURES``).
    A group without both relevant and non-relevant samples cannot be fitted and is
    skipped (named in ``fitted_on["skipped"]``); ValueError if nothing could be fitted.
    """
    feats = {**DEFAULT_FEATURES, **(features or {})}
    samples = list(samples)
    d, s, c, r, y = _arrays(samples)
    models: dict[str, LogisticModel] = {}
    skipped: list[str] = []
    for key, idx in sorted(_group(samples).items()):
        mode = key.split("/", 1)[0]
        names = tuple(feats[mode])
        ix = np.asarray(idx)
        yy = y[ix]
        if yy.min() == yy.max():
            skipped.append(key)
            continue
        needs = {FEATURES[f].needs for f in names}
        if "dense" in needs and np.isnan(d[ix]).any():
            raise ValueError(f"{key}: every {mode} sample needs a dense score")
        if "sparse" in needs and (np.isnan(s[ix]).any() or np.isnan(c[ix]).any()):
            raise ValueError(f"{key}: every {mode} sample needs a sparse score and ceiling")
        dd, ss, cc, rr = _clean(d[ix], s[ix], c[ix], r[ix], len(ix))
        X = _design(names, dd, ss, cc, rr)
        coef, b = _fit_logistic(X, yy, [FEATURES[f].sign for f in names], l2)
        models[key] = LogisticModel(names, coef, b,
                                    {"n": int(len(ix)), "positives": int(yy.sum())})
    if not models:
        raise ValueError("no (mode, unit) group has both relevant and non-relevant hits")
    note = dict(fitted_on or {})
    note.setdefault("date", _dt.date.today().isoformat())
    note.setdefault("features", {m: list(feats[m]) for m in MODES})
    note.setdefault("model", "logistic regression per (mode, unit), L2 "
                             f"{l2:g} on standardised features, sign-constrained weights")
    if skipped:
        note["skipped"] = skipped
    return Calibrator(models, fallbacks=fallbacks, fitted_on=note)


def predict_samples(calibrator: Calibrator, samples: Sequence[Sample]) -> np.ndarray:
    """``predict`` for a batch of mixed samples (each with its own ceiling), in input order."""
    samples = list(samples)
    d, s, c, r, _y = _arrays(samples)
    out = np.full(len(samples), np.nan)
    for key, idx in _group(samples).items():
        mode, unit = key.split("/", 1)
        model = calibrator.model_for(mode, unit)
        if model is None:
            continue
        ix = np.asarray(idx)
        out[ix] = np.clip(expit(model.logit(*_clean(d[ix], s[ix], c[ix], r[ix], len(ix)))),
                          0.0, 1.0)
    return out


def query_folds(query_ids: Iterable[str], folds: int, seed: int = 0) -> dict[str, int]:
    """A deterministic query → fold assignment (shuffled, round-robin)."""
    qids = sorted(set(query_ids))
    order = np.random.default_rng(seed).permutation(len(qids))
    return {qids[j]: i % folds for i, j in enumerate(order)}


def cross_validate(samples: Sequence[Sample], *, folds: int = 5, seed: int = 0,
                   **fit_kw: Any) -> np.ndarray:
    """Out-of-fold probabilities (folds by query), aligned with ``samples``."""
    samples = list(samples)
    fold_of = query_folds((x.query_id for x in samples), folds, seed)
    f = np.array([fold_of[x.query_id] for x in samples])
    out = np.full(len(samples), np.nan)
    for k in range(folds):
        test = np.flatnonzero(f == k)
        if not len(test):
            continue
        model = fit([samples[i] for i in np.flatnonzero(f != k)], **fit_kw)
        out[test] = predict_samples(model, [samples[i] for i in test])
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

def collect_samples(engine: Any, queries: Mapping[str, str],
                    qrels: Mapping[str, Mapping[str, int]], *,
                    modes: Sequence[str] = MODES, units: Sequence[str] = ("chunk", "document"),
                    k: int = 20) -> list[Sample]:
    """Labelled top-``k`` hits of every judged query in every mode and unit.

    A hit is relevant iff its document has grade > 0 in the query's qrels (a chunk
    or page inherits its document's judgement). Queries absent from ``qrels`` are
    skipped (unjudged); judged queries without a relevant document count as negatives.
    """
    out: list[Sample] = []
    for qid, text in queries.items():
        rels = qrels.get(qid)
        if rels is None:
            continue
        for unit in units:
            ceiling = float(engine.sparse_ceiling(text, calibration_family(unit)))
            for mode in modes:
                res = engine.retrieve(text, k=k, mode=mode, unit=unit, include_text=False)
                for rank, h in enumerate(res.hits):
                    doc_id = h.chunk.doc_id if h.chunk else (h.meta or {}).get("doc_id")
                    scores = h.scores or {}
                    out.append(Sample(
                        query_id=str(qid), mode=mode, unit=unit, rank=rank,
                        dense=scores.get("dense") if mode != "sparse" else None,
                        sparse=scores.get("sparse") if mode != "dense" else None,
                        ceiling=ceiling if mode != "dense" else None,
                        label=int(rels.get(str(doc_id), 0) > 0), doc_id=doc_id))
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
                      ) -> tuple[Calibrator, dict[str, Any], np.ndarray | None]:
    """Fit on every sample; measure on held-out folds by query.

    Returns ``(calibrator, metrics, out_of_fold_probs)``; metrics hold ECE/AUROC per
    ``mode/unit`` and overall (``"all"``) on the training data (``"train"``) and,
    given at least ``folds`` ≥ 2 queries, on held-out folds (``"cv"``).
    """
    samples = list(samples)
    judged = sorted({x.query_id for x in samples})
    note = {"queries": len(judged), **(fitted_on or {})}
    calibrator = fit(samples, l2=l2, fitted_on=note)
    metrics: dict[str, Any] = {"queries": len(judged), "samples": len(samples),
                               "train": evaluate(samples, predict_samples(calibrator, samples))}
    oof = None
    if folds >= 2 and len(judged) >= folds:
        oof = cross_validate(samples, folds=folds, seed=seed, l2=l2)
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
