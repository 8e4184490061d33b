"""Hit confidence (§7.7.2): the shipped calibrator, predict's contract, metrics by hand, fitting."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcp_agentic.pipeline.calibration_engine import calibrate_engine
from rcp_agentic.pipeline.calibration_fit import (Sample, auroc, cross_validate, ece, evaluate, fit,
                                                  leave_one_out, predict_samples)
from rcp_agentic.pipeline.confidence import HIT_FEATURES, SIGNAL_SETS, Calibrator, LogisticModel
from rcp_agentic.pipeline.confidence_features import ABSENT_RANK, FEATURES, POOL_FEATURES

MODES = ("dense", "sparse", "hybrid")
UNITS = ("chunk", "passage", "page", "document")
HIT = HIT_FEATURES


def signals(mode: str, n: int, rng: np.random.Generator) -> dict[str, Any]:
    ceiling = float(rng.uniform(1.0, 40.0))
    return {
        "dense": rng.uniform(-0.2, 0.95, n) if mode != "sparse" else None,
        "sparse": rng.uniform(0.0, ceiling, n) if mode != "dense" else None,
        "ceiling": ceiling if mode != "dense" else None,
        "ranks": np.arange(n),
        # The query's recall lists: every hit's score is in them, and better ones besides.
        "pool": {"dense": rng.uniform(-0.2, 0.97, 100), "sparse": rng.uniform(0, ceiling, 100)},
    }


# --- the shipped parameters ------------------------------------------------------------

def test_default_loads_and_is_cached() -> None:
    cal = Calibrator.default()
    assert cal is Calibrator.default()
    families = ("chunk", "document", "tree-node", "node", "triplet", "community")
    graph = {f"{m}+graph/{u}" for m in MODES for u in ("chunk", "document")} | {
        "hybrid+graph/node", "hybrid+graph/triplet"}
    small = {f"{m}/{u}:small-pool" for m in MODES for u in ("chunk", "document")}
    assert set(cal.models) == {f"{m}/{u}" for m in MODES for u in families} | graph | small
    note = cal.fitted_on
    assert set(note["sets"]) == {"scifact", "hotpotqa", "2wikimultihopqa"} and note["date"]
    # Per signal set, and per group where a family has features of its own (node, triplet).
    assert set(note["features"]) == set(SIGNAL_SETS) | {
        k for k in cal.models if k.split("/")[1] in ("node", "triplet")} | {
        f"{m}/document" for m in MODES}
    # The chunk and document models read a hit against its query's recall lists.
    for mode in MODES:
        for family in ("chunk", "document"):
            assert POOL_FEATURES & set(cal.models[f"{mode}/{family}"].features), (mode, family)
    for unit in UNITS:
        for mode in MODES:
            assert cal.supports(mode, unit)
    assert not cal.supports("dense", "path")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", UNITS)
def test_predict_in_range_and_finite(mode: str, unit: str) -> None:
    rng = np.random.default_rng(1)
    p = Calibrator.default().predict(mode=mode, unit=unit, **signals(mode, 200, rng))
    assert p.shape == (200,)
    assert np.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()
    # Extreme and broken inputs still give finite probabilities.
    n = 6
    bad: dict[str, Any] = {
        "dense": np.array([np.nan, np.inf, -np.inf, 5.0, -5.0, 1.0]) if mode != "sparse" else None,
        "sparse": np.array([np.nan, np.inf, -1.0, 1e300, 0.0, 3.0]) if mode != "dense" else None,
        "ceiling": 0.0 if mode != "dense" else None,
        "ranks": np.array([0, -3, 10**9, 5, 1, 2]),
    }
    for pool in (None, {}, {"dense": [np.nan, np.inf, 2.0], "sparse": [-np.inf, np.nan, 7.0]}):
        p = Calibrator.default().predict(mode=mode, unit=unit, pool=pool, **bad)
        assert p.shape == (n,) and np.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()


def test_top_hit_is_confident_and_tail_is_not() -> None:
    cal = Calibrator.default()
    # A query whose best match stands out of a background of weak ones, as real pools do.
    pool = {"dense": np.r_[0.8, np.linspace(0.35, 0.05, 99)],
            "sparse": np.r_[30.0, np.linspace(9.0, 0.5, 99)]}
    strong = cal.predict(mode="hybrid", unit="document", dense=np.array([0.8, 0.1]),
                         sparse=np.array([30.0, 1.0]), ceiling=35.0, ranks=np.array([0, 19]),
                         pool=pool)
    assert strong[0] > 0.7 and strong[1] < 0.05


def test_the_same_scores_mean_less_when_the_query_has_better_matches() -> None:
    # Scale-free: a hit well below its query's best is less likely relevant than the same
    # scores at the top of a weaker query's recall lists.
    cal = Calibrator.default()
    one: dict[str, Any] = {"dense": np.array([0.45]), "sparse": np.array([12.0]),
                           "ceiling": 30.0, "ranks": np.array([0])}
    alone = {"dense": np.array([0.45, 0.3]), "sparse": np.array([12.0, 8.0])}
    beaten = {"dense": np.array([0.8, 0.75, 0.7, 0.45]), "sparse": np.array([28.0, 25, 20, 12])}
    # (Sparse mode reads BM25 against the ceiling; the pool's best BM25 there says how well
    # the query matches at all, which the fit found to raise every hit a little.)
    for mode in ("dense", "hybrid"):
        sig: dict[str, Any] = {**one, "dense": one["dense"] if mode != "sparse" else None,
               "sparse": one["sparse"] if mode != "dense" else None,
               "ceiling": one["ceiling"] if mode != "dense" else None}
        top = cal.predict(mode=mode, unit="chunk", pool=alone, **sig)
        low = cal.predict(mode=mode, unit="chunk", pool=beaten, **sig)
        assert top[0] > low[0], mode


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", ("chunk", "document"))
def test_predict_monotone_where_the_model_says_so(mode: str, unit: str) -> None:
    cal = Calibrator.default()
    says = cal.monotone(mode, unit)
    assert None not in says.values()  # the sign-constrained fit is monotone in every signal
    if mode != "sparse":
        assert says["dense"] == 1
    if mode != "dense":
        # The ceiling may carry no weight once the pool's best BM25 is known.
        assert says["sparse"] == 1 and says["ceiling"] in (0, -1)
    # Never increasing in rank; rank may carry no weight once the pool's z-scores say how
    # far the hit stands out.
    assert says["rank"] in (0, -1)
    base = {"dense": 0.5, "sparse": 10.0, "ceiling": 20.0, "rank": 3}
    grids = {"dense": np.linspace(-1, 1, 101), "sparse": np.linspace(0, 25, 101),
             "ceiling": np.linspace(1, 60, 101), "rank": np.arange(101)}

    pool = {"dense": np.linspace(1.0, -1.0, 100), "sparse": np.linspace(25.0, 0.0, 100)}

    def p_at(signal: str, value: float) -> float:
        v = {**base, signal: value}
        return float(cal.predict(
            mode=mode, unit=unit, dense=np.array([v["dense"]]) if mode != "sparse" else None,
            sparse=np.array([v["sparse"]]) if mode != "dense" else None,
            ceiling=v["ceiling"] if mode != "dense" else None, ranks=np.array([v["rank"]]),
            pool=pool)[0])

    for signal, direction in says.items():
        if direction == 0:
            continue
        p = np.array([p_at(signal, x) for x in grids[signal]])
        assert (np.diff(p) * direction >= -1e-12).all(), (mode, unit, signal)
        assert p[-1] != p[0], (mode, unit, signal)


def test_predict_depends_only_on_each_hit_and_its_query() -> None:
    cal = Calibrator.default()
    rng = np.random.default_rng(2)
    sig = signals("hybrid", 20, rng)
    full = cal.predict(mode="hybrid", unit="chunk", **sig)
    again = cal.predict(mode="hybrid", unit="chunk", **sig)
    part = cal.predict(mode="hybrid", unit="chunk", dense=sig["dense"][5:9],
                       sparse=sig["sparse"][5:9], ceiling=sig["ceiling"], ranks=sig["ranks"][5:9],
                       pool=sig["pool"])
    np.testing.assert_array_equal(full, again)
    np.testing.assert_allclose(part, full[5:9], rtol=0, atol=1e-15)
    # Without a pool the hits given stand in for it: then the rest of the list matters.
    alone = cal.predict(mode="hybrid", unit="chunk", **{**sig, "pool": None})
    assert alone.shape == full.shape and np.isfinite(alone).all()
    # passage is scored as a chunk; page borrows the chunk model
    for unit in ("passage", "page"):
        np.testing.assert_array_equal(cal.predict(mode="hybrid", unit=unit, **sig), full)


def test_predict_rejects_bad_calls() -> None:
    cal = Calibrator.default()
    r = np.arange(3)
    with pytest.raises(ValueError, match="dense"):
        cal.predict(mode="dense", unit="chunk", dense=None, sparse=None, ceiling=None, ranks=r)
    with pytest.raises(ValueError, match="ceiling"):
        cal.predict(mode="sparse", unit="chunk", dense=None, sparse=np.ones(3), ceiling=None,
                    ranks=r)
    with pytest.raises(ValueError, match="3 ranks"):
        cal.predict(mode="dense", unit="chunk", dense=np.ones(4), sparse=None, ceiling=None,
                    ranks=r)
    with pytest.raises(ValueError, match="no calibration"):
        cal.predict(mode="dense", unit="path", dense=np.ones(3), sparse=None, ceiling=None,
                    ranks=r)
    with pytest.raises(ValueError, match="no calibration"):
        cal.predict(mode="colbert", unit="chunk", dense=np.ones(3), sparse=None, ceiling=None,
                    ranks=r)
    empty = cal.predict(mode="dense", unit="chunk", dense=np.zeros(0), sparse=None, ceiling=None,
                        ranks=np.zeros(0))
    assert empty.shape == (0,)


def test_save_load_round_trip(tmp_path) -> None:
    cal = Calibrator.default()
    path = tmp_path / "cal.json"
    cal.save(path)
    back = Calibrator.load(path)
    assert back.to_json() == cal.to_json()
    assert json.loads(path.read_text())["format"] == "rcp-agentic-calibration/4"
    rng = np.random.default_rng(3)
    for mode in MODES:
        sig = signals(mode, 50, rng)
        np.testing.assert_allclose(back.predict(mode=mode, unit="document", **sig),
                                   cal.predict(mode=mode, unit="document", **sig), atol=1e-12)


def test_format_1_files_still_load_and_predict_as_before(tmp_path) -> None:
    # A format-1 model: hit-only features, as rcp-agentic calibrate wrote them before.
    old = {"format": "rcp-agentic-calibration/1", "fitted_on": {}, "fallbacks": {"page": "chunk"},
           "models": {"dense/chunk": {"features": ["dense", "log1p_rank", "inv_rank"],
                                      "coef": [6.5, -1.3, 0.0], "intercept": -3.3}}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    cal = Calibrator.load(path)
    assert not POOL_FEATURES & set(cal.models["dense/chunk"].features)
    d, r = np.array([0.7, 0.2]), np.array([0, 7])
    want = 1 / (1 + np.exp(-(-3.3 + 6.5 * d - 1.3 * np.log1p(r))))
    for pool in (None, {"dense": np.array([0.99, 0.9])}):  # a hit-only model ignores the pool
        got = cal.predict(mode="dense", unit="chunk", dense=d, sparse=None, ceiling=None,
                          ranks=r, pool=pool)
        np.testing.assert_allclose(got, want, atol=1e-12)


def test_load_rejects_other_formats(tmp_path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"format": "something-else", "models": {}}))
    with pytest.raises(ValueError, match="rcp-agentic-calibration/2"):
        Calibrator.load(path)
    with pytest.raises(ValueError):
        LogisticModel(("dense", "no_such_feature"), np.zeros(2), 0.0)


# --- metrics by hand -------------------------------------------------------------------

def test_ece_by_hand() -> None:
    # bin 1: p 0.1 vs 1/2 relevant → 0.4 × 2/4; bin 9: p 0.9 vs 1 → 0.1 × 2/4
    assert ece([0.1, 0.1, 0.9, 0.9], [0, 1, 1, 1]) == pytest.approx(0.25)
    assert ece([0.5, 0.5], [0, 1]) == pytest.approx(0.0)
    assert ece([1.0, 0.0], [1, 0]) == pytest.approx(0.0)  # p = 1 lands in the last bin
    assert ece([0.3], [1]) == pytest.approx(0.7)
    # bins are per-bin averages: 0.05 and 0.15 are different bins of 10, the same bin of 2
    assert ece([0.05, 0.15], [0, 0], bins=10) == pytest.approx(0.10)
    assert ece([0.05, 0.15], [1, 0], bins=2) == pytest.approx(abs(0.1 - 0.5))
    assert ece([], []) == 0.0


def test_auroc_by_hand() -> None:
    assert auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert auroc([0.9, 0.8, 0.1], [1, 1, 0]) == pytest.approx(1.0)
    assert auroc([0.1, 0.2], [1, 0]) == pytest.approx(0.0)
    assert auroc([0.5, 0.5, 0.5], [1, 0, 0]) == pytest.approx(0.5)  # ties count half
    assert auroc([0.2, 0.5, 0.5, 0.7], [0, 1, 0, 1]) == pytest.approx((1 + 0.5 + 1 + 1) / 4)
    assert math.isnan(auroc([0.2, 0.3], [1, 1]))


# --- fitting ------------------------------------------------------------------------------

def synthetic(n_queries: int, per_query: int, rng: np.random.Generator, *,
              w_dense: float = 6.0, w_lrank: float = -1.0, w_inv: float = 0.5,
              b: float = -4.0) -> list[Sample]:
    out = []
    for q in range(n_queries):
        dense = np.sort(rng.uniform(-0.2, 0.9, per_query))[::-1]
        ranks = np.arange(per_query)
        z = b + w_dense * dense + w_lrank * np.log1p(ranks) + w_inv / (1 + ranks)
        labels = rng.random(per_query) < 1 / (1 + np.exp(-z))
        out += [Sample(f"q{q}", "dense", "document", int(r), float(d), None, None, int(y))
                for r, d, y in zip(ranks, dense, labels)]
    return out


def test_fit_recovers_a_known_relation() -> None:
    rng = np.random.default_rng(4)
    samples = synthetic(1500, 20, rng)
    cal = fit(samples, l2=1e-3, features=HIT)
    model = cal.models["dense/document"]
    assert model.features == ("dense", "log1p_rank", "inv_rank")
    np.testing.assert_allclose(model.coef, [6.0, -1.0, 0.5], atol=0.6)
    assert model.intercept == pytest.approx(-4.0, abs=0.6)
    # the fitted probabilities track the true ones
    d = np.linspace(-0.2, 0.9, 12)
    r = np.arange(12)
    true = 1 / (1 + np.exp(-(-4 + 6 * d - np.log1p(r) + 0.5 / (1 + r))))
    got = cal.predict(mode="dense", unit="document", dense=d, sparse=None, ceiling=None, ranks=r)
    assert np.abs(got - true).max() < 0.05
    assert cal.fitted_on["features"]["dense"] == ["dense", "log1p_rank", "inv_rank"]


def test_fit_enforces_the_sign_constraints() -> None:
    # relevance falls with the dense score here: the monotone model can only flatten it
    rng = np.random.default_rng(5)
    model = fit(synthetic(200, 20, rng, w_dense=-5.0), features=HIT).models["dense/document"]
    assert model.coef[0] == pytest.approx(0.0, abs=1e-9)
    assert model.monotone()["dense"] in (0, 1)


def test_cross_validation_is_calibrated_on_synthetic_data() -> None:
    rng = np.random.default_rng(6)
    samples = synthetic(400, 20, rng)
    oof = cross_validate(samples, folds=5, features=HIT)
    assert np.isfinite(oof).all()
    report = evaluate(samples, oof)
    assert report["dense/document"]["ece"] < 0.03
    assert report["all"]["auroc"] > 0.8
    np.testing.assert_allclose(predict_samples(fit(samples, features=HIT), samples)[:3],
                               fit(samples, features=HIT).predict(mode="dense", unit="document",
                                                    dense=np.array([s.dense for s in samples[:3]]),
                                                    sparse=None, ceiling=None,
                                                    ranks=np.arange(3)))


def test_fit_skips_groups_without_both_classes() -> None:
    rng = np.random.default_rng(7)
    good = synthetic(100, 10, rng)
    only_negatives = [Sample("q0", "sparse", "chunk", 0, None, 1.0, 2.0, 0)]
    cal = fit(good + only_negatives, features=HIT)
    assert "sparse/chunk" not in cal.models and cal.fitted_on["skipped"] == ["sparse/chunk"]
    with pytest.raises(ValueError):
        fit(only_negatives, features=HIT)
    with pytest.raises(ValueError, match="dense score"):
        fit([Sample("q", "dense", "chunk", 0, None, None, None, 1),
             Sample("q", "dense", "chunk", 1, 0.1, None, None, 0)])


def test_features_declare_directions() -> None:
    for name, feat in FEATURES.items():
        assert feat.sign in (1, -1) and feat.moves, name


def synthetic_pool(n_queries: int, rng: np.random.Generator, *, offset: float,
                   source: str, per_query: int = 20) -> list[Sample]:
    """Relevance set by a hit's gap to its query's best cosine; ``offset`` shifts every
    cosine of the data set (another corpus, another scale)."""
    out = []
    for q in range(n_queries):
        pool = np.sort(rng.uniform(0.0, 0.4, 100) + rng.uniform(0.0, 0.2))[::-1] + offset
        gap = pool[0] - pool[:per_query]
        labels = rng.random(per_query) < 1 / (1 + np.exp(-(1.0 - 25.0 * gap)))
        for r, (d, y) in enumerate(zip(pool[:per_query], labels)):
            out.append(Sample(f"{source}{q}", "dense", "chunk", r, float(d), None, None, int(y),
                              source=source, **Sample.pool_stats({"dense": pool}, float(d), None)))
    return out


def test_pool_features_transfer_across_score_scales_and_raw_scores_do_not() -> None:
    rng = np.random.default_rng(8)
    samples = (synthetic_pool(300, rng, offset=0.0, source="a") +
               synthetic_pool(300, rng, offset=0.35, source="b"))
    y = np.array([x.label for x in samples])
    raw = leave_one_out(samples, features={"dense": ("dense", "log1p_rank", "inv_rank")})
    pooled = leave_one_out(samples, features={"dense": ("dense_gap", "log1p_rank", "inv_rank")})
    for src in ("a", "b"):
        m = np.array([x.source == src for x in samples])
        assert ece(pooled[m], y[m]) < 0.03, src
        # The raw cosine carries the other set's scale.
        assert ece(raw[m], y[m]) > max(0.05, 3 * ece(pooled[m], y[m])), src
    with pytest.raises(ValueError, match="two data sets"):
        leave_one_out([x for x in samples if x.source == "a"])


def test_pool_statistics_of_samples_match_predict_with_a_pool() -> None:
    rng = np.random.default_rng(9)
    pool = {"dense": rng.uniform(0, 0.8, 50), "sparse": rng.uniform(0, 20, 50)}
    stats = Sample.pool_stats(pool, float(pool["dense"][7]), 100.0)
    assert stats["top_dense"] == pytest.approx(pool["dense"].max())
    assert stats["rank_dense"] == (pool["dense"] > pool["dense"][7]).sum()
    assert stats["top_sparse"] == 100.0 and stats["rank_sparse"] == 0  # above the whole list
    assert Sample.pool_stats(pool, None, None)["rank_dense"] is None
    # Missing from a list (below its end, or no BM25 match): ranked at the recall depth.
    absent = Sample.pool_stats(pool, -0.5, 0.0)
    assert absent["rank_dense"] == absent["rank_sparse"] == ABSENT_RANK
    samples = [Sample("q", "hybrid", "chunk", r, float(d), float(s), 25.0, 0,
                      **Sample.pool_stats(pool, float(d), float(s)))
               for r, (d, s) in enumerate(zip(pool["dense"][:10], pool["sparse"][:10]))]
    cal = Calibrator.default()
    want = cal.predict(mode="hybrid", unit="chunk", dense=pool["dense"][:10],
                       sparse=pool["sparse"][:10], ceiling=25.0, ranks=np.arange(10), pool=pool)
    np.testing.assert_allclose(predict_samples(cal, samples), want, atol=1e-12)
    # Pool features cannot be fitted from samples that lack the pool statistics.
    bare = [Sample("q", "dense", "chunk", r, 0.5 - r / 10, None, None, int(r < 2))
            for r in range(6)]
    with pytest.raises(ValueError, match="top_dense"):
        fit(bare, features={"dense": ("dense_gap",)})
    assert POOL_FEATURES <= set(FEATURES)


# --- calibrate_engine on a stub engine ----------------------------------------------------

class StubEngine:
    """Documents d0..d29; the relevant ones score high on both retrievers."""

    config = SimpleNamespace(bm25_k1=1.2, bm25_b=0.75, chunk_size=200, chunk_overlap=30,
                             rrf_k=60)
    embedder = SimpleNamespace(identity="stub")
    calibrator = None  # nothing to keep: every model is refit

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def sparse_ceiling(self, query: str, unit: str = "chunk") -> float:
        return 20.0

    def retrieve(self, query: str, k: int = 10, **opts):
        rel = {f"d{int(query[1:]) % 30}", f"d{(int(query[1:]) + 1) % 30}"}
        hits = []
        for i in range(30):
            doc = f"d{i}"
            boost = 1.0 if doc in rel else 0.0
            dense = float(np.clip(0.2 + 0.4 * boost + self.rng.normal(0, 0.12), -1, 1))
            sparse = float(max(0.0, 4 + 8 * boost + self.rng.normal(0, 2.5)))
            scores = {"dense": dense, "sparse": sparse}
            key = dense if opts["mode"] == "dense" else sparse if opts["mode"] == "sparse" else \
                dense + sparse / 20
            hits.append((key, SimpleNamespace(chunk=SimpleNamespace(doc_id=doc), meta={},
                                              scores=scores)))
        hits.sort(key=lambda kh: -kh[0])
        return SimpleNamespace(hits=[h for _k, h in hits[:k]])


def test_calibrate_engine_on_a_stub() -> None:
    queries = {f"q{i}": f"q{i}" for i in range(40)}
    qrels = {f"q{i}": {f"d{i % 30}": 1, f"d{(i + 1) % 30}": 1} for i in range(40)}
    qrels["q39"] = {"d5": 0}  # judged, nothing relevant: negatives only
    cal, metrics = calibrate_engine(StubEngine(), queries, qrels, units=("document",), k=10,
                                    graph=False)
    assert set(cal.models) == {f"{m}/document{s}" for m in MODES for s in ("", ":small-pool")}
    assert metrics["queries"] == 40 and metrics["samples"] == 40 * 3 * 10
    assert metrics["cv"]["all"]["auroc"] > 0.85
    assert metrics["cv"]["all"]["ece"] < 0.1
    assert cal.fitted_on["embedder"] == "stub" and cal.fitted_on["k"] == 10
    p = cal.predict(mode="sparse", unit="document", dense=None, sparse=np.array([15.0, 2.0]),
                    ceiling=20.0, ranks=np.array([0, 9]))
    assert p[0] > p[1]


# --- z-scores: a hit read against its own pool's spread (format 4) ---------------------------

@settings(max_examples=60, deadline=None)
@given(pool=st.lists(st.floats(-0.5, 0.5, allow_nan=False), min_size=2, max_size=60),
       scale=st.floats(0.2, 1.0), shift=st.floats(-0.45, 0.45))
def test_z_scores_do_not_see_the_corpus_scale(pool: list[float], scale: float,
                                              shift: float) -> None:
    """Rescaling a query's whole pool (a corpus whose cosines sit higher or spread wider)
    leaves every z-score as it was: they read a hit's standing, not the corpus' scale."""
    from rcp_agentic.pipeline.confidence_features import signals as make_signals

    base = np.array(pool)
    hits = base[:5]
    one = make_signals(hits, hits * 10, 100.0, np.arange(len(hits)), len(hits),
                       pool={"dense": base, "sparse": base * 10 - base.min() * 10})
    moved = base * scale + shift
    two = make_signals(moved[:5], hits * 10, 100.0, np.arange(len(hits)), len(hits),
                       pool={"dense": moved, "sparse": base * 10 - base.min() * 10})
    for name in ("dense_z", "top_dense_z"):
        a, b = FEATURES[name].fn(one), FEATURES[name].fn(two)
        if np.ptp(base) > 1e-6:   # a flat pool gives 0 either way
            np.testing.assert_allclose(a, b, atol=1e-6)
        assert np.all(np.abs(a) <= 10.0)


def test_document_models_leave_out_the_raw_cosine() -> None:
    from rcp_agentic.pipeline.confidence import DEFAULT_FEATURES
    from rcp_agentic.pipeline.confidence_features import Z_FEATURES

    for mode in MODES:
        assert set(Z_FEATURES[mode]) <= set(DEFAULT_FEATURES[mode])
        assert "dense" not in DEFAULT_FEATURES[f"{mode}/document"]
        assert set(DEFAULT_FEATURES[f"{mode}/document"]) == set(DEFAULT_FEATURES[mode]) - {"dense"}
    cal = Calibrator.default()
    for mode in MODES:
        assert "dense" not in cal.models[f"{mode}/document"].features
        assert set(Z_FEATURES[mode]) <= set(cal.models[f"{mode}/chunk"].features)
    # The graph models keep the features they were fitted with (no z-scores).
    assert not set(cal.models["hybrid+graph/chunk"].features) & set(Z_FEATURES["hybrid"])


def test_a_pool_too_small_for_a_spread_is_scored_without_z_scores() -> None:
    """A corpus of a few chunks has no spread to stand out of: its hits are scored by the
    model's companion fitted without the z-scores, a full pool by the model itself."""
    from rcp_agentic.pipeline.confidence import SMALL_POOL, Z_MIN_POOL
    from rcp_agentic.pipeline.confidence_features import signals as make_signals

    cal = Calibrator.default()
    hits: dict[str, Any] = {"dense": np.array([0.63, 0.54]), "sparse": np.array([2.1, 1.6]),
                            "ceiling": 9.0, "ranks": np.arange(2)}
    for size, key in ((3, "hybrid/chunk" + SMALL_POOL), (Z_MIN_POOL, "hybrid/chunk")):
        pool = {"dense": np.r_[0.63, 0.54, np.linspace(0.3, 0.0, size - 2)],
                "sparse": np.r_[2.1, 1.6, np.linspace(1.0, 0.1, size - 2)]}
        got = cal.predict(mode="hybrid", unit="chunk", pool=pool, **hits)
        sig = make_signals(hits["dense"], hits["sparse"], hits["ceiling"], hits["ranks"], 2,
                           pool=pool)
        want = 1 / (1 + np.exp(-cal.models[key].logit(sig)))
        np.testing.assert_allclose(got, want, atol=1e-9)
    assert not set(cal.models["hybrid/chunk" + SMALL_POOL].features) & {
        "dense_z", "top_dense_z", "sparse_z", "top_sparse_z"}


# --- the runtime needs numpy only ---------------------------------------------------------

# Runs in a fresh interpreter: the shipped calibrator scores hits, then an engine retrieves
# with it (a numpy embedder under the shipped calibration's identity: sentence-transformers
# imports scipy itself), and scipy is never imported; the fitting module brings it in.
NO_SCIPY_PROBE = """
import sys, zlib
import numpy as np
from rcp_agentic.pipeline import confidence
from rcp_agentic import Engine

cal = confidence.Calibrator.default()
p = cal.predict(mode="hybrid", unit="chunk", dense=np.array([0.7, 0.4]),
                sparse=np.array([9.0, 2.0]), ceiling=12.0, ranks=np.arange(2))
assert p.shape == (2,) and p[0] > p[1], p


class Embedder:
    identity = cal.fitted_on["embedder"]
    dimension = 32

    def embed_query(self, text):
        v = np.full(32, 0.01, dtype=np.float32)
        for word in text.lower().split():
            v[zlib.crc32(word.encode()) % 32] += 1.0
        return v / np.linalg.norm(v)

    def embed_documents(self, texts):
        return np.stack([self.embed_query(t) for t in texts])


with Engine(sys.argv[1], embedder=Embedder()) as eng:
    eng.add_documents([{"id": "a", "text": "Vitamin D deficiency and multiple sclerosis."},
                       {"id": "b", "text": "BM25 ranks documents by term frequency."}])
    for mode in ("dense", "sparse", "hybrid"):
        for unit in ("chunk", "document"):
            hits = eng.retrieve("vitamin sclerosis", k=2, mode=mode, unit=unit).hits
            assert hits and all(h.confidence is not None for h in hits), (mode, unit)
assert "scipy" not in sys.modules, "the runtime calibrator or retrieve imported scipy"
from rcp_agentic.pipeline import calibration_fit
assert "scipy" in sys.modules
assert confidence.fit is calibration_fit.fit and confidence.Sample is calibration_fit.Sample
print("ok")
"""


def test_the_runtime_calibrator_and_retrieve_never_import_scipy(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", NO_SCIPY_PROBE, str(tmp_path / "engine")],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_the_runtime_logistic_is_scipys_bit_for_bit() -> None:
    from scipy.special import expit

    from rcp_agentic.pipeline.confidence import _expit

    rng = np.random.default_rng(7)
    x = np.concatenate([rng.normal(0.0, 6.0, 20_000), rng.uniform(-800.0, 800.0, 2_000),
                        [0.0, -0.0, 709.8, -709.8, 745.2, -745.2, 1e308, -1e308, np.inf,
                         -np.inf]])
    np.testing.assert_array_equal(_expit(x), expit(x))
    np.testing.assert_array_equal(_expit(x.reshape(-1, 2)), expit(x.reshape(-1, 2)))
    assert np.isnan(_expit(np.array([np.nan]))).all()
