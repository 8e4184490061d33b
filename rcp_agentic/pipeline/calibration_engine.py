"""Calibrating a live engine (``rcp-agentic calibrate``): labelled hits collected from its
recall pools (``collect_samples``; the graph's through a recording calibrator,
``collect_graph_samples``), refitted with :mod:`.calibration_fit` (``calibrate_samples``)
and set on the engine (``calibrate_engine``), keeping the models a refit does not cover."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..units import calibration_family
from .calibration_fit import Sample, query_key, cross_validate, evaluate, fit, predict_samples
from .confidence import GRAPH, MODES, Calibrator, LogisticModel


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


class RecordingCalibrator:
    """Stands in for an engine's calibrator to record the exact signals it would score.

    The engine calls ``predict`` once per calibration family with that family's hits in
    list order first, then any unit fused above a hit that the page does not hold (they cap
    the hits' confidence and are no sample); each call is kept with its signals (pooled
    ceiling, pooled ranks, graph masses) and answered by the wrapped model when there is
    one (else 0.5).
    """

    def __init__(self, inner: Calibrator | None) -> None:
        self.inner = inner
        self.calls: list[dict[str, Any]] = []

    def supports(self, mode: str, unit: str, graph: bool = False) -> bool:
        return True

    def model_for(self, mode: str, unit: str, graph: bool = False) -> LogisticModel | None:
        return None if self.inner is None else self.inner.model_for(mode, unit, graph)

    def predict(self, *, mode: str, unit: str, dense: Any, sparse: Any, ceiling: Any,
                ranks: Any, pool: Any = None, graph: Any = None, docs: Any = None,
                graph_share: Any = None) -> np.ndarray:
        self.calls.append({"mode": mode, "family": unit, "dense": dense, "sparse": sparse,
                           "ceiling": ceiling, "ranks": np.asarray(ranks), "pool": pool,
                           "graph": graph, "graph_share": graph_share})
        if self.inner is not None and self.inner.supports(mode, unit, graph is not None):
            model = self.inner.model_for(mode, unit, graph is not None)
            if model is not None and "docs" in model.needs and docs is None:
                docs = np.ones(len(np.asarray(ranks)))  # the recorder asked for none
            return self.inner.predict(mode=mode, unit=unit, dense=dense, sparse=sparse,
                                      ceiling=ceiling, ranks=ranks, pool=pool, graph=graph,
                                      docs=docs, graph_share=graph_share)
        return np.full(len(np.asarray(ranks)), 0.5)


def recorded_sample(call: Mapping[str, Any], j: int, **fields: Any) -> Sample:
    """The Sample of the ``j``-th hit of one recorded ``predict`` call."""
    def at(name: str) -> float | None:
        x = call[name]
        return None if x is None else float(np.asarray(x, dtype=float).reshape(-1)[j])

    dense, sparse, graph = at("dense"), at("sparse"), at("graph")
    ceiling = None if call["ceiling"] is None else float(call["ceiling"])
    share = call.get("graph_share")
    return Sample(rank=int(call["ranks"][j]), dense=dense, sparse=sparse, ceiling=ceiling,
                  graph=graph, graph_share=None if share is None else float(share), **fields,
                  **Sample.pool_stats(call["pool"] or {}, dense, sparse, graph))


def has_graph(engine: Any) -> bool:
    """Whether the engine holds a knowledge graph that graph recall can run over."""
    status = engine.derived_status()
    return "node" in status and bool(sum((status["node"].get("counts") or {}).values()))


def collect_graph_samples(engine: Any, queries: Mapping[str, str],
                          qrels: Mapping[str, Mapping[str, int]], *,
                          modes: Sequence[str] = MODES, units: Sequence[str] = ("chunk", "document"),
                          k: int = 20, source: str = "") -> list[Sample]:
    """Labelled top-``k`` hits of graph-recall requests, each mode and unit, with the signals
    exactly as the engine scores them (its recall lists and graph masses, recorded by a
    :class:`RecordingCalibrator` around the engine's own calibrator). A request whose query
    links no entity of the graph runs without graph recall and gives no sample (the mode's
    own model scores it). Judging as in :func:`collect_samples`."""
    own = engine.calibrator
    recorder = RecordingCalibrator(own)
    engine.calibrator = recorder
    out: list[Sample] = []
    try:
        for qid, text in queries.items():
            rels = qrels.get(qid)
            if rels is None:
                continue
            for unit in units:
                for mode in modes:
                    recorder.calls.clear()
                    res = engine.retrieve(text, k=k, mode=mode, unit=unit, include_text=False,
                                          graph_recall=True)
                    calls = [c for c in recorder.calls if c["graph"] is not None]
                    if not calls:
                        continue  # no entity linked: no graph list
                    call = calls[0]  # the hits' own call comes first (one family per request)
                    for j, h in enumerate(res.hits[:len(call["ranks"])]):
                        doc_id = h.chunk.doc_id if h.chunk else (h.meta or {}).get("doc_id")
                        out.append(recorded_sample(
                            call, j, query_id=str(qid), mode=mode + GRAPH, unit=unit,
                            label=int(rels.get(str(doc_id), 0) > 0), doc_id=doc_id,
                            source=source))
    finally:
        engine.calibrator = own
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
    judged = sorted({query_key(x) for x in samples})
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
                     graph: bool | None = None) -> tuple[Calibrator, dict[str, Any]]:
    """Fit a Calibrator on a live engine's top-``k`` hits for BEIR-style queries and qrels.

    ``queries`` is ``{query_id: text}``, ``qrels`` ``{query_id: {doc_id: grade}}``
    (grade > 0 is relevant). Every mode (dense, sparse, hybrid) and each of ``units``
    is retrieved for every judged query; with ``graph`` (default: when the engine holds a
    knowledge graph) also with graph recall, which fits the ``<mode>+graph`` models. Models
    of the engine's current calibration that the labels did not refit are kept
    (:func:`keeping`). Returns the calibrator (save it with ``.save(path)``) and metrics: ``queries``, ``samples``, ``k`` and
    per ``mode/unit`` plus overall (``"all"``) ``{n, positives, ece, auroc, mean_p,
    base_rate}`` on held-out folds by query (``"cv"``; only with ≥ ``folds`` judged
    queries) and on the training data (``"train"``).
    """
    samples = collect_samples(engine, queries, qrels, units=units, k=k)
    if not samples:
        raise ValueError("no judged query returned any hit: check that the query ids of "
                         "QUERIES and QRELS match and that the engine holds the corpus")
    if graph is None:
        graph = has_graph(engine)
    if graph:
        samples += collect_graph_samples(engine, queries, qrels, units=units, k=k)
    note = {"k": k, "units": list(units), "graph_recall": bool(graph), **engine_note(engine),
            **(fitted_on or {})}
    calibrator, metrics, _oof = calibrate_samples(samples, folds=folds, l2=l2, fitted_on=note)
    metrics["k"] = k
    return keeping(calibrator, engine.calibrator), metrics


def keeping(refit: Calibrator, base: Calibrator | None) -> Calibrator:
    """``refit`` with every model of ``base`` it did not refit (its graph, breadth, tree-node
    and community models, and any other family), so a unit kind the labels did not cover
    keeps the confidence it had instead of losing it; the kept keys are named in
    ``fitted_on["kept"]``."""
    if base is None:
        return refit
    kept = {key: m for key, m in base.models.items() if key not in refit.models}
    if not kept:
        return refit
    note = {**refit.fitted_on, "kept": sorted(kept),
            "kept_from": {k: base.fitted_on.get(k) for k in ("date", "embedder") if
                          base.fitted_on.get(k) is not None}}
    return Calibrator({**kept, **refit.models}, fallbacks=refit.fallbacks, fitted_on=note)
