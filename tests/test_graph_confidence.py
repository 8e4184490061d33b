"""Calibrated confidence for the knowledge graph: graph-recall hits and node/triplet units.

A real engine with ``build_graph`` over ``examples/wiki``, the shipped calibration. The
two-hop question needs the Velvet Lanterns passage, which only graph recall finds (it shares
no word with the question): its dense/sparse signals alone say it is irrelevant, its place
in the graph's list says otherwise. Node and triplet hits, and every hit of a graph-recall
request, carry a confidence in [0, 1]; the shipped graph models can only rise with a hit's
graph mass (a sign constraint of the fit), and the bridge passage gets more confidence from
the graph model than from the dense/sparse one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import REPO

from rcp_agentic import Engine
from rcp_agentic.pipeline.confidence import GRAPH, GRAPH_FEATURES, GRAPH_MODES, MODES, Calibrator
from rcp_agentic.pipeline.confidence_features import POOL_FEATURES

QUESTION = "In which city was the group behind the single Midnight Harbor founded?"
BRIDGE = "wiki/velvet-lanterns.md"
GRAPH_RECALL = {"x-rcp-agentic-graphRecall": True}


@pytest.fixture(scope="module")
def wiki(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    path = tmp_path_factory.mktemp("wiki-graph-confidence") / "e"
    with Engine(path, embedder=embedder, build_graph=True) as eng:
        eng.index_paths([REPO / "examples" / "wiki"])
        eng.wait_for_derived()
        assert eng.calibrator is not None  # the shipped calibration fits this embedder
        yield eng


def _doc(hit: Any) -> str:
    return hit.chunk.doc_id if hit.chunk else hit.meta["doc_ids"][0]


def _in_unit_interval(hits: list[Any]) -> bool:
    return bool(hits) and all(h.confidence is not None and 0.0 <= h.confidence <= 1.0
                              for h in hits)


def test_shipped_calibration_has_graph_models() -> None:
    cal = Calibrator.default()
    for mode in MODES:
        for family in ("node", "triplet"):
            model = cal.model_for(mode, family)
            assert model is not None, (mode, family)
            assert not set(GRAPH_FEATURES) & set(model.features)
            # A unit spanning more documents is likelier to cover a relevant one.
            assert "log1p_docs" in model.features and model.monotone()["docs"] in (0, 1)
    graph_keys = {f"{s}/{u}" for s in GRAPH_MODES for u in ("chunk", "document")} | {
        "hybrid+graph/node", "hybrid+graph/triplet"}
    for key in graph_keys:
        model = cal.models[key]
        assert set(GRAPH_FEATURES) <= set(model.features), key
        assert POOL_FEATURES & set(model.features), key
    # A node or triplet request with graph recall in dense or sparse mode: that mode's model.
    assert cal.model_for("dense", "node", graph=True) is cal.models["dense/node"]
    # Composed units stay uncalibrated.
    assert not cal.supports("hybrid", "path", graph=True)
    assert not cal.supports("hybrid", "subgraph")


@pytest.mark.parametrize("unit", ["node", "triplet"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("graph", [False, True])
def test_node_and_triplet_hits_carry_confidence(wiki: Engine, unit: str, mode: str,
                                                graph: bool) -> None:
    extra = GRAPH_RECALL if graph else {}
    res = wiki.retrieve(QUESTION, k=5, unit=unit, mode=mode, **extra)
    assert _in_unit_interval(res.hits), [(h.id, h.confidence) for h in res.hits]
    if graph:
        assert all("graph" in (h.scores or {}) for h in res.hits)
    confidences = [float(h.confidence or 0.0) for h in res.hits]
    assert confidences == sorted(confidences, reverse=True)  # never above the hit before


@pytest.mark.parametrize("unit", ["chunk", "document"])
@pytest.mark.parametrize("mode", MODES)
def test_graph_recall_hits_carry_confidence(wiki: Engine, unit: str, mode: str) -> None:
    res = wiki.retrieve(QUESTION, k=5, unit=unit, mode=mode, **GRAPH_RECALL)
    assert _in_unit_interval(res.hits)
    assert all("graph" in (h.scores or {}) for h in res.hits)


@pytest.mark.parametrize("key", sorted(k for k in Calibrator.default().models if GRAPH in k))
def test_graph_models_rise_with_the_graph_mass(key: str) -> None:
    cal = Calibrator.default()
    signal_set, family = key.split("/")
    mode = signal_set.removesuffix(GRAPH)
    says = cal.monotone(mode, family, graph=True)
    assert None not in says.values() and says["graph"] == 1, says
    # Every other signal fixed, a hit's mass swept from 0 to the list's best (graph_rel 0 → 1).
    pool = {"dense": np.linspace(0.8, -0.2, 100), "sparse": np.linspace(30.0, 0.0, 100),
            "graph": np.geomspace(0.05, 0.0025, 40)}
    masses = np.linspace(0.0, 0.05, 201)
    n = len(masses)
    p = cal.predict(mode=mode, unit=family,
                    dense=np.full(n, 0.4) if mode != "sparse" else None,
                    sparse=np.full(n, 12.0) if mode != "dense" else None,
                    ceiling=40.0 if mode != "dense" else None, ranks=np.full(n, 3),
                    pool=pool, graph=masses, docs=np.full(n, 2.0))
    assert (np.diff(p) >= -1e-12).all()
    assert p[-1] > p[0]


def test_graph_signal_without_a_graph_model_reads_the_mode_model() -> None:
    # A calibration without graph models (format 2) scores graph-recall hits as before.
    cal = Calibrator.default()
    plain = Calibrator({k: m for k, m in cal.models.items() if GRAPH not in k},
                       fallbacks=cal.fallbacks)
    sig: dict[str, Any] = {"dense": np.array([0.6, 0.2]), "sparse": np.array([20.0, 1.0]),
                           "ceiling": 30.0, "ranks": np.arange(2),
                           "pool": {"dense": np.linspace(0.7, 0.0, 50),
                                    "sparse": np.linspace(25.0, 0.5, 50),
                                    "graph": np.array([0.04, 0.01])}}
    np.testing.assert_array_equal(
        plain.predict(mode="hybrid", unit="chunk", graph=np.array([0.04, 0.01]), **sig),
        plain.predict(mode="hybrid", unit="chunk", **sig))
    with pytest.raises(ValueError, match="graph has 3 values"):
        cal.predict(mode="hybrid", unit="chunk", graph=np.ones(3), **sig)


def test_format_3_round_trip_and_format_2_still_loads(tmp_path: Any) -> None:
    cal = Calibrator.default()
    path = tmp_path / "cal.json"
    cal.save(path)
    assert Calibrator.load(path).to_json() == cal.to_json()
    old = cal.to_json()
    old["format"] = "rcp-agentic-calibration/2"
    old["models"] = {k: v for k, v in old["models"].items()
                     if GRAPH not in k and k.split("/")[1] not in ("node", "triplet")}
    back = Calibrator.from_json(old)
    assert not back.supports("hybrid", "node") and back.supports("hybrid", "chunk", graph=True)


def test_bridge_passage_gets_more_confidence_from_the_graph_model(wiki: Engine) -> None:
    hybrid = wiki.retrieve(QUESTION, k=3)
    assert BRIDGE not in [_doc(h) for h in hybrid.hits]  # only the graph finds it
    with_graph = wiki.retrieve(QUESTION, k=3, **GRAPH_RECALL)
    bridge = next(h for h in with_graph.hits if _doc(h) == BRIDGE)
    shipped = wiki.calibrator
    assert shipped is not None
    wiki.calibrator = Calibrator({k: m for k, m in shipped.models.items() if GRAPH not in k},
                                 fallbacks=shipped.fallbacks)
    try:
        before = next(h for h in wiki.retrieve(QUESTION, k=3, **GRAPH_RECALL).hits
                      if h.id == bridge.id)
    finally:
        wiki.calibrator = shipped
    assert bridge.confidence is not None and before.confidence is not None
    assert bridge.confidence > before.confidence, (bridge.confidence, before.confidence)


# --- refitting on a graph engine (rcp-agentic calibrate) ------------------------------------

ASKS = {  # query → the documents that answer it (doc ids are the example paths)
    "q1": ("Which single did Velvet Lanterns record in 1979?", ["midnight-harbor", "velvet-lanterns"]),
    "q2": ("Where did Oskar Brandvik grow up?", ["oskar-brandvik"]),
    "q3": ("Who produced the album Paper Moons?", ["glass-orchard"]),
    "q4": ("Which choir sang Harbor Hymn?", ["seaside-choir"]),
    "q5": ("Who kept time on stage for Velvet Lanterns?", ["velvet-lanterns", "oskar-brandvik"]),
    "q6": ("In which city did Velvet Lanterns begin playing?", ["velvet-lanterns"]),
    "q7": ("What is the single Copper Skyline about?", ["copper-skyline"]),
    "q8": ("Which group played a single at midnight in a harbor city?", ["harbor-lights-band"]),
    "q9": (QUESTION, ["midnight-harbor", "velvet-lanterns"]),
    "q10": ("Which album did Glass Orchard release with Lena Varg?", ["glass-orchard"]),
}


def test_calibrate_refits_the_graph_models_and_keeps_the_rest(wiki: Engine) -> None:
    from rcp_agentic.pipeline.calibration_engine import calibrate_engine, collect_graph_samples

    shipped = wiki.calibrator
    assert shipped is not None
    queries = {q: text for q, (text, _docs) in ASKS.items()}
    qrels = {q: {f"wiki/{d}.md": 1 for d in docs} for q, (_t, docs) in ASKS.items()}
    graph_samples = collect_graph_samples(wiki, queries, qrels, units=("chunk",), k=5)
    assert wiki.calibrator is shipped  # the recorder is gone again
    assert graph_samples and {x.mode for x in graph_samples} <= set(GRAPH_MODES)
    assert all(x.graph is not None and x.rank_graph is not None for x in graph_samples)
    assert 0 < sum(x.label for x in graph_samples) < len(graph_samples)

    cal, metrics = calibrate_engine(wiki, queries, qrels, units=("chunk",), k=5, folds=2)
    refit = {f"{m}/chunk" for m in MODES} | {f"{m}/chunk" for m in GRAPH_MODES}
    assert refit <= set(cal.models)
    assert cal.fitted_on["graph_recall"] is True
    for key in refit:  # fitted on these labels, not the shipped parameters
        assert cal.models[key].to_json() != shipped.models[key].to_json(), key
        assert key not in cal.fitted_on["kept"]
    # Every unit kind the labels did not cover keeps the model it had: no hit loses its
    # confidence to a refit (node, triplet, tree-node, community, document, …).
    fitted = set(cal.models) - set(cal.fitted_on["kept"])
    assert refit <= fitted
    assert set(cal.fitted_on["kept"]) == set(shipped.models) - fitted
    for key in cal.fitted_on["kept"]:
        assert cal.models[key] is shipped.models[key]
    assert metrics["cv"]["hybrid+graph/chunk"]["n"] > 0

    wiki.calibrator = cal
    try:
        for unit in ("chunk", "node", "triplet", "document"):
            res = wiki.retrieve(QUESTION, k=5, unit=unit, mode="hybrid", **GRAPH_RECALL)
            assert _in_unit_interval(res.hits), unit
    finally:
        wiki.calibrator = shipped


def test_calibrate_without_graph_keeps_the_shipped_graph_models(wiki: Engine) -> None:
    from rcp_agentic.pipeline.calibration_engine import calibrate_engine

    shipped = wiki.calibrator
    assert shipped is not None
    queries = {q: text for q, (text, _docs) in ASKS.items()}
    qrels = {q: {f"wiki/{d}.md": 1 for d in docs} for q, (_t, docs) in ASKS.items()}
    cal, _metrics = calibrate_engine(wiki, queries, qrels, units=("chunk",), k=5, folds=2,
                                     graph=False)
    assert cal.fitted_on["graph_recall"] is False
    for key in (f"{m}/chunk" for m in GRAPH_MODES):
        assert cal.models[key] is shipped.models[key] and key in cal.fitted_on["kept"]
