"""Hit confidence (§7.7.2): the shipped calibrator, predict's contract, metrics by hand, fitting."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from rcp_agentic.pipeline.confidence import (FEATURES, Calibrator, LogisticModel, Sample, auroc,
                                             calibrate_engine, cross_validate, ece, evaluate, fit,
                                             predict_samples)

MODES = ("dense", "sparse", "hybrid")
UNITS = ("chunk", "passage", "page", "document")


def signals(mode: str, n: int, rng: np.random.Generator) -> dict:
    ceiling = float(rng.uniform(1.0, 40.0))
    return {
        "dense": rng.uniform(-0.2, 0.95, n) if mode != "sparse" else None,
        "sparse": rng.uniform(0.0, ceiling, n) if mode != "dense" else None,
        "ceiling": ceiling if mode != "dense" else None,
        "ranks": np.arange(n),
    }


# --- the shipped parameters ------------------------------------------------------------

def test_default_loads_and_is_cached() -> None:
    cal = Calibrator.default()
    assert cal is Calibrator.default()
    families = ("chunk", "document", "tree-node")
    assert set(cal.models) == {f"{m}/{u}" for m in MODES for u in families}
    note = cal.fitted_on
    assert "SciFact" in note["dataset"] and note["split"] == "train" and note["date"]
    assert set(note["features"]) == set(MODES)
    for unit in UNITS:
        for mode in MODES:
            assert cal.supports(mode, unit)
    assert not cal.supports("dense", "triplet")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", UNITS)
def test_predict_in_range_and_finite(mode: str, unit: str) -> None:
    rng = np.random.default_rng(1)
    p = Calibrator.default().predict(mode=mode, unit=unit, **signals(mode, 200, rng))
    assert p.shape == (200,)
    assert np.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()
    # Extreme and broken inputs still give finite probabilities.
    n = 6
    bad = {
        "dense": np.array([np.nan, np.inf, -np.inf, 5.0, -5.0, 1.0]) if mode != "sparse" else None,
        "sparse": np.array([np.nan, np.inf, -1.0, 1e300, 0.0, 3.0]) if mode != "dense" else None,
        "ceiling": 0.0 if mode != "dense" else None,
        "ranks": np.array([0, -3, 10**9, 5, 1, 2]),
    }
    p = Calibrator.default().predict(mode=mode, unit=unit, **bad)
    assert p.shape == (n,) and np.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()


def test_top_hit_is_confident_and_tail_is_not() -> None:
    cal = Calibrator.default()
    strong = cal.predict(mode="hybrid", unit="document", dense=np.array([0.8, 0.1]),
                         sparse=np.array([30.0, 1.0]), ceiling=35.0, ranks=np.array([0, 19]))
    assert strong[0] > 0.8 and strong[1] < 0.05


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", ("chunk", "document"))
def test_predict_monotone_where_the_model_says_so(mode: str, unit: str) -> None:
    cal = Calibrator.default()
    says = cal.monotone(mode, unit)
    assert None not in says.values()  # the sign-constrained fit is monotone in every signal
    if mode != "sparse":
        assert says["dense"] == 1
    if mode != "dense":
        assert says["sparse"] == 1 and says["ceiling"] == -1
    assert says["rank"] == -1
    base = {"dense": 0.5, "sparse": 10.0, "ceiling": 20.0, "rank": 3}
    grids = {"dense": np.linspace(-1, 1, 101), "sparse": np.linspace(0, 25, 101),
             "ceiling": np.linspace(1, 60, 101), "rank": np.arange(101)}

    def p_at(signal: str, value: float) -> float:
        v = {**base, signal: value}
        return float(cal.predict(
            mode=mode, unit=unit, dense=np.array([v["dense"]]) if mode != "sparse" else None,
            sparse=np.array([v["sparse"]]) if mode != "dense" else None,
            ceiling=v["ceiling"] if mode != "dense" else None, ranks=np.array([v["rank"]]))[0])

    for signal, direction in says.items():
        if direction == 0:
            continue
        p = np.array([p_at(signal, x) for x in grids[signal]])
        assert (np.diff(p) * direction >= -1e-12).all(), (mode, unit, signal)
        assert p[-1] != p[0], (mode, unit, signal)


def test_predict_depends_only_on_each_hit() -> None:
    cal = Calibrator.default()
    rng = np.random.default_rng(2)
    sig = signals("hybrid", 20, rng)
    full = cal.predict(mode="hybrid", unit="chunk", **sig)
    again = cal.predict(mode="hybrid", unit="chunk", **sig)
    part = cal.predict(mode="hybrid", unit="chunk", dense=sig["dense"][5:9],
                       sparse=sig["sparse"][5:9], ceiling=sig["ceiling"], ranks=sig["ranks"][5:9])
    np.testing.assert_array_equal(full, again)
    np.testing.assert_allclose(part, full[5:9], rtol=0, atol=1e-15)
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
        cal.predict(mode="dense", unit="triplet", dense=np.ones(3), sparse=None, ceiling=None,
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
    assert json.loads(path.read_text())["format"] == "rcp-agentic-calibration/1"
    rng = np.random.default_rng(3)
    for mode in MODES:
        sig = signals(mode, 50, rng)
        np.testing.assert_allclose(back.predict(mode=mode, unit="document", **sig),
                                   cal.predict(mode=mode, unit="document", **sig), atol=1e-12)


def test_load_rejects_other_formats(tmp_path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"format": "something-else", "models": {}}))
    with pytest.raises(ValueError):
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
    cal = fit(samples, l2=1e-3)
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
    model = fit(synthetic(200, 20, rng, w_dense=-5.0)).models["dense/document"]
    assert model.coef[0] == pytest.approx(0.0, abs=1e-9)
    assert model.monotone()["dense"] in (0, 1)


def test_cross_validation_is_calibrated_on_synthetic_data() -> None:
    rng = np.random.default_rng(6)
    samples = synthetic(400, 20, rng)
    oof = cross_validate(samples, folds=5)
    assert np.isfinite(oof).all()
    report = evaluate(samples, oof)
    assert report["dense/document"]["ece"] < 0.03
    assert report["all"]["auroc"] > 0.8
    np.testing.assert_allclose(predict_samples(fit(samples), samples)[:3],
                               fit(samples).predict(mode="dense", unit="document",
                                                    dense=np.array([s.dense for s in samples[:3]]),
                                                    sparse=None, ceiling=None,
                                                    ranks=np.arange(3)))


def test_fit_skips_groups_without_both_classes() -> None:
    rng = np.random.default_rng(7)
    good = synthetic(100, 10, rng)
    only_negatives = [Sample("q0", "sparse", "chunk", 0, None, 1.0, 2.0, 0)]
    cal = fit(good + only_negatives)
    assert "sparse/chunk" not in cal.models and cal.fitted_on["skipped"] == ["sparse/chunk"]
    with pytest.raises(ValueError):
        fit(only_negatives)
    with pytest.raises(ValueError, match="dense score"):
        fit([Sample("q", "dense", "chunk", 0, None, None, None, 1),
             Sample("q", "dense", "chunk", 1, 0.1, None, None, 0)])


def test_features_declare_directions() -> None:
    for name, feat in FEATURES.items():
        assert feat.sign in (1, -1) and feat.moves, name


# --- calibrate_engine on a stub engine ----------------------------------------------------

class StubEngine:
    """Documents d0..d29; the relevant ones score high on both retrievers."""

    config = SimpleNamespace(bm25_k1=1.2, bm25_b=0.75, chunk_size=200, chunk_overlap=30,
                             rrf_k=60)
    embedder = SimpleNamespace(identity="stub")

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
    cal, metrics = calibrate_engine(StubEngine(), queries, qrels, units=("document",), k=10)
    assert set(cal.models) == {"dense/document", "sparse/document", "hybrid/document"}
    assert metrics["queries"] == 40 and metrics["samples"] == 40 * 3 * 10
    assert metrics["cv"]["all"]["auroc"] > 0.85
    assert metrics["cv"]["all"]["ece"] < 0.1
    assert cal.fitted_on["embedder"] == "stub" and cal.fitted_on["k"] == 10
    p = cal.predict(mode="sparse", unit="document", dense=None, sparse=np.array([15.0, 2.0]),
                    ceiling=20.0, ranks=np.array([0, 9]))
    assert p[0] > p[1]
