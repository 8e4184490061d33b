"""Calibrated hit confidence on SciFact train: held-out calibration and learned re-ranking.

    python bench/confidence.py [--engine DIR] [--k 20] [--folds 5] [--rerank-k 20 100]
                               [--plot bench/results/reliability.png] [--write-params]
                               [--tree-node]

For every judged query, retrieves the top ``k`` hits in each mode (dense, sparse,
hybrid) and unit (chunk, document) from a built SciFact engine, labels a hit
relevant iff its document is in the query's qrels, fits the confidence model
(``rcp_agentic.pipeline.confidence``) on 4/5 of the queries and scores the other
fifth (5 folds by query). Prints, per mode and unit, ECE (10 equal-width bins)
and AUROC of the held-out probabilities on the top ``k`` and the top 10 (the
engine's default ``k``), plus ECE among hits with p ≥ 0.1 (where thresholds sit);
writes a reliability diagram; and compares nDCG@10 / MRR@10 of plain RRF with the
top ``--rerank-k`` hybrid document candidates re-ranked by the held-out
probability. ``--write-params`` refits on every query and writes the package's
``rcp_agentic/data/calibration.json``.

``--tree-node`` (an engine built with ``build_tree=True``) also fits the
``tree-node`` family on the top ``k`` hits of the collapsed tree (chunks and every
summary level in one pool): a node is relevant when a document it covers is. The
signals are recorded exactly as the engine scores them (``RecordingCalibrator``:
the pooled BM25 ceiling and the hit's rank in the pooled list, which counts the
hits packing passed over as contained). It prints the held-out ECE / AUROC of the
tree-node hits and of the pool's chunk hits under the shipped chunk models, and
with ``--write-params`` writes the tree-node models too (``bench/raptor.py scifact
--write-params`` adds them to the shipped file without touching the other models).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scifact  # noqa: E402
from bench.metrics import mrr_at_k, ndcg_at_k  # noqa: E402
from rcp_agentic import units as unit_kinds  # noqa: E402
from rcp_agentic import Engine  # noqa: E402
from rcp_agentic.pipeline import confidence as conf  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ECE_TARGET, AUROC_TARGET = 0.05, 0.85
UNITS = ("chunk", "document")
CALIBRATION = ROOT / "rcp_agentic" / "data" / "calibration.json"
CONF_K = 20  # hits per query and mode the tree-node models are fitted on


def _fmt_row(cols: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))


def calibration_table(samples: list[conf.Sample], probs: np.ndarray, k_top: int) -> list[str]:
    y = np.array([x.label for x in samples], dtype=float)
    rank = np.array([x.rank for x in samples])
    groups: dict[str, np.ndarray] = {}
    for mode in conf.MODES:
        for unit in UNITS:
            groups[f"{mode}/{unit}"] = np.array([x.mode == mode and x.unit == unit
                                                 for x in samples])
    groups["all (pooled)"] = np.ones(len(samples), bool)
    head = ["mode/unit", "hits", "base", "mean p", f"ECE@{k_top}", f"AUROC@{k_top}", "ECE@10",
            "AUROC@10", "ECE p≥.1", "target"]
    widths = [16, 6, 6, 6, 8, 8, 7, 8, 8, 6]
    lines = [_fmt_row(head, widths), "-" * (sum(widths) + 2 * (len(widths) - 1))]
    for name, m in groups.items():
        p, t = probs[m], y[m]
        top10 = rank[m] < 10
        hi = p >= 0.1
        e, a = conf.ece(p, t), conf.auroc(p, t)
        ok = e <= ECE_TARGET and a >= AUROC_TARGET
        lines.append(_fmt_row([name, str(len(t)), f"{t.mean():.3f}", f"{p.mean():.3f}",
                               f"{e:.4f}", f"{a:.4f}", f"{conf.ece(p[top10], t[top10]):.4f}",
                               f"{conf.auroc(p[top10], t[top10]):.4f}",
                               f"{conf.ece(p[hi], t[hi]):.4f}", "ok" if ok else "MISS"],
                              widths))
    return lines


def reliability_plot(samples: list[conf.Sample], probs: np.ndarray, path: Path,
                     bins: int = 10) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = np.array([x.label for x in samples], dtype=float)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5), sharex=True,
                             gridspec_kw={"height_ratios": [3, 1]})
    edges = np.linspace(0, 1, bins + 1)
    for col, unit in enumerate(UNITS):
        ax, hax = axes[0, col], axes[1, col]
        ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="perfect")
        for mode, color in zip(conf.MODES, ("tab:blue", "tab:orange", "tab:green")):
            m = np.array([x.mode == mode and x.unit == unit for x in samples])
            p, t = probs[m], y[m]
            idx = np.clip((p * bins).astype(int), 0, bins - 1)
            xs, ys, ns = [], [], []
            for b in range(bins):
                sel = idx == b
                if sel.any():
                    xs.append(p[sel].mean())
                    ys.append(t[sel].mean())
                    ns.append(sel.sum())
            ax.plot(xs, ys, marker="o", color=color,
                    label=f"{mode} (ECE {conf.ece(p, t):.3f}, AUROC {conf.auroc(p, t):.3f})")
            hax.hist(p, bins=edges, histtype="step", color=color, lw=1.5)
        ax.set_title(f"unit = {unit} (held-out, 5 folds by query)")
        ax.set_ylabel("fraction relevant")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.legend(loc="upper left", fontsize=8)
        hax.set_yscale("log")
        hax.set_xlabel("predicted confidence")
        hax.set_ylabel("hits")
    fig.suptitle("rcp-agentic hit confidence — SciFact train, top-20 hits")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rerank_table(engine: Engine, queries: dict[str, str], qrels: dict[str, dict[str, int]],
                 depths: list[int], folds: int, seed: int, train: list[conf.Sample],
                 l2: float) -> list[str]:
    """nDCG@10 / MRR@10 of RRF vs re-ranking the top-K hybrid documents by held-out P."""
    kmax = max(depths)
    cands = conf.collect_samples(engine, queries, qrels, modes=("hybrid",), units=("document",),
                                 k=kmax)
    fold_of = conf.query_folds((x.query_id for x in train), folds, seed)
    probs = np.full(len(cands), np.nan)
    for f in range(folds):
        model = conf.fit([x for x in train if fold_of[x.query_id] != f], l2=l2)
        ix = [i for i, x in enumerate(cands) if fold_of.get(x.query_id) == f]
        probs[ix] = conf.predict_samples(model, [cands[i] for i in ix])
    by_q: dict[str, list[tuple[int, float, str]]] = {}
    for x, p in zip(cands, probs):
        by_q.setdefault(x.query_id, []).append((x.rank, float(p), str(x.doc_id)))
    head = ["ranking (unit=document)", "nDCG@10", "MRR@10"]
    widths = [36, 8, 8]
    lines = [_fmt_row(head, widths), "-" * (sum(widths) + 4)]
    rrf = {q: [d for _r, _p, d in sorted(v)] for q, v in by_q.items()}
    lines.append(_fmt_row(["hybrid RRF (engine order)", f"{ndcg_at_k(rrf, qrels, 10):.4f}",
                           f"{mrr_at_k(rrf, qrels, 10):.4f}"], widths))
    for depth in depths:
        run = {q: [d for _r, _p, d in sorted((h for h in v if h[0] < depth),
                                             key=lambda h: (-h[1], h[0]))]
               for q, v in by_q.items()}
        lines.append(_fmt_row([f"re-ranked by confidence, top {depth}",
                               f"{ndcg_at_k(run, qrels, 10):.4f}",
                               f"{mrr_at_k(run, qrels, 10):.4f}"], widths))
    # Calibration beyond the fitted depth (ranks k..kmax-1), if any.
    k_fit = 1 + max(x.rank for x in train)
    deep = np.array([x.rank >= k_fit for x in cands])
    if deep.any():
        y = np.array([x.label for x in cands], dtype=float)
        lines.append("")
        lines.append(f"hybrid/document ranks {k_fit}–{kmax - 1} (beyond the fitted top {k_fit}): "
                     f"ECE {conf.ece(probs[deep], y[deep]):.4f}, mean p "
                     f"{probs[deep].mean():.4f} vs base rate {y[deep].mean():.4f}")
    return lines


# --- tree-node hits (the collapsed RAPTOR tree) ------------------------------------------

class RecordingCalibrator:
    """Stands in for the engine's calibrator to record the exact signals it would score.

    The engine calls ``predict`` once per calibration family with that family's hits in
    list order; each call is kept with its signals (pooled ceiling and pooled ranks
    included) and answered by the real model when there is one (else 0.5).
    """

    def __init__(self, inner: conf.Calibrator | None) -> None:
        self.inner = inner
        self.calls: list[dict[str, Any]] = []

    def supports(self, mode: str, unit: str) -> bool:
        return True

    def predict(self, *, mode: str, unit: str, dense: Any, sparse: Any, ceiling: Any,
                ranks: Any) -> np.ndarray:
        self.calls.append({"mode": mode, "family": unit, "dense": dense, "sparse": sparse,
                           "ceiling": ceiling, "ranks": np.asarray(ranks)})
        if self.inner is not None and self.inner.supports(mode, unit):
            return self.inner.predict(mode=mode, unit=unit, dense=dense, sparse=sparse,
                                      ceiling=ceiling, ranks=ranks)
        return np.full(len(np.asarray(ranks)), 0.5)


def collect_pool_samples(engine: Engine, queries: dict[str, str],
                         qrels: dict[str, dict[str, int]], k: int = CONF_K) -> list[conf.Sample]:
    """Labelled top-``k`` hits of the collapsed tree in every mode, with the engine's signals.

    A tree-node is relevant when one of the documents it covers is; a chunk when its
    document is.
    """
    shipped = engine.calibrator
    recorder = RecordingCalibrator(shipped)
    engine.calibrator = recorder  # type: ignore[assignment]
    samples: list[conf.Sample] = []
    try:
        for qid, text in queries.items():
            rels = {d for d, g in qrels.get(qid, {}).items() if g > 0}
            for mode in conf.MODES:
                recorder.calls.clear()
                res = engine.retrieve(text, k=k, mode=mode, unit="tree-node", include_text=False)
                by_family: dict[str, list[Any]] = {}
                for h in res.hits:
                    by_family.setdefault(unit_kinds.calibration_family(str(h.unit)), []).append(h)
                if sum(len(c["ranks"]) for c in recorder.calls) != len(res.hits):
                    raise RuntimeError("the engine did not score every hit's confidence")
                for call in recorder.calls:
                    hits = by_family.get(call["family"], [])
                    assert len(hits) == len(call["ranks"]), "hits and recorded signals differ"
                    for j, h in enumerate(hits):
                        docs = [h.chunk.doc_id] if h.chunk else list(h.meta.get("doc_ids") or [])
                        samples.append(conf.Sample(
                            query_id=str(qid), mode=mode, unit=h.unit, rank=int(call["ranks"][j]),
                            dense=None if call["dense"] is None else float(call["dense"][j]),
                            sparse=None if call["sparse"] is None else float(call["sparse"][j]),
                            ceiling=None if call["ceiling"] is None else float(call["ceiling"]),
                            label=int(any(d in rels for d in docs)),
                            doc_id=docs[0] if docs else None))
    finally:
        engine.calibrator = shipped
    return samples


def fit_tree_node(samples: list[conf.Sample], engine: Engine, folds: int, seed: int,
                  l2: float, k: int = CONF_K, corpus: str = "all documents",
                  ) -> tuple[conf.Calibrator, dict[str, Any]]:
    """Fit the tree-node models (held-out folds by query); score the pool's chunk hits with
    the shipped chunk models. Returns the tree-node calibrator (all queries) and metrics;
    ``corpus`` says what the engine indexed (noted in ``fitted_on``)."""
    tree = [x for x in samples if x.unit == "tree-node"]
    chunks = [x for x in samples if x.unit != "tree-node"]
    note = {"dataset": "SciFact (BEIR), train split", "split": "train", "corpus": corpus,
            "k": k, "units": ["tree-node"],
            "labels": "relevant iff a document the node covers has qrels grade > 0",
            "ranks": "0-based position in the collapsed tree's ranked pool (chunks and nodes)",
            "sparse_ceiling": "over the collapsed tree's pool (chunks and every level)",
            **conf.engine_note(engine),
            "tree": {name: getattr(engine.config, name) for name in
                     ("tree_summary_tokens", "tree_cluster_tokens", "tree_top_size",
                      "tree_max_levels", "tree_seed")}}
    calibrator, metrics, oof = conf.calibrate_samples(tree, folds=folds, l2=l2, seed=seed,
                                                      fitted_on=note)
    out: dict[str, Any] = {"tree_node_cv": metrics.get("cv"), "tree_node_train": metrics["train"]}
    shipped = conf.Calibrator.default()
    if chunks:
        p = conf.predict_samples(shipped, chunks)
        out["pool_chunk_shipped"] = conf.evaluate(chunks, p)
    if oof is not None:
        y = np.array([x.label for x in tree], dtype=float)
        rank = np.array([x.rank for x in tree])
        top10 = rank < 10
        out["tree_node_cv_rank_lt_10"] = {
            mode: {"ece": round(conf.ece(oof[m & top10], y[m & top10]), 5),
                   "auroc": round(conf.auroc(oof[m & top10], y[m & top10]), 5)}
            for mode in conf.MODES
            for m in [np.array([x.mode == mode for x in tree])]}
    return calibrator, out


def print_tree_table(metrics: dict[str, Any]) -> None:
    print(f"{'group (held-out unless noted)':42s} {'hits':>6s} {'base':>6s} {'mean p':>7s} "
          f"{'ECE':>7s} {'AUROC':>7s}")
    for key, r in (metrics.get("tree_node_cv") or {}).items():
        print(f"{'tree-node ' + key:42s} {r['n']:6d} {r['base_rate']:6.3f} {r['mean_p']:7.3f} "
              f"{r['ece']:7.4f} {r['auroc']:7.4f}")
    for key, r in (metrics.get("pool_chunk_shipped") or {}).items():
        print(f"{'pool chunk ' + key + ' (shipped model)':42s} {r['n']:6d} {r['base_rate']:6.3f} "
              f"{r['mean_p']:7.3f} {r['ece']:7.4f} {r['auroc']:7.4f}")


def merge_tree_models(base: conf.Calibrator, tree: conf.Calibrator) -> conf.Calibrator:
    """``base`` with the ``*/tree-node`` models of ``tree`` added (its own models unchanged);
    the tree fit's note goes under ``fitted_on["tree-node"]``."""
    if tree.fitted_on.get("embedder") != base.fitted_on.get("embedder"):
        raise SystemExit("the tree-node models were fitted with another embedder than the others "
                         f"({tree.fitted_on.get('embedder')!r} vs "
                         f"{base.fitted_on.get('embedder')!r})")
    for key, model in tree.models.items():
        if key.endswith("/tree-node"):
            base.models[key] = model
    base.fitted_on["tree-node"] = {k: v for k, v in tree.fitted_on.items() if k != "embedder"}
    return base


def write_tree_models(tree: conf.Calibrator, path: Path = CALIBRATION) -> None:
    """Add the ``*/tree-node`` models to the shipped calibration, leaving the rest as it was."""
    shipped = conf.Calibrator.from_json(json.loads(path.read_text(encoding="utf-8")))
    merge_tree_models(shipped, tree).save(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", type=Path, default=ROOT / "bench" / ".cache" / "engine-scifact")
    ap.add_argument("--k", type=int, default=20, help="hits per query, mode and unit to fit on")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--rerank-k", type=int, nargs="+", default=[20, 100])
    ap.add_argument("--plot", type=Path, default=ROOT / "bench" / "results" / "reliability.png")
    ap.add_argument("--write-params", action="store_true",
                    help="refit on every query and write rcp_agentic/data/calibration.json")
    ap.add_argument("--tree-node", action="store_true",
                    help="also fit the tree-node family on the collapsed tree's hits")
    args = ap.parse_args(argv)

    _corpus, queries, qrels = scifact.load_dataset()
    if not (args.engine / "engine.db").exists():
        print(f"no engine at {args.engine}: build it with bench/scifact_engine.py --engine DIR",
              file=sys.stderr)
        return 2
    engine = Engine(args.engine)
    print(f"SciFact train: {len(queries)} queries with qrels; engine {args.engine}")

    start = time.perf_counter()
    samples = conf.collect_samples(engine, queries, qrels, units=UNITS, k=args.k)
    print(f"collected {len(samples)} labelled hits in {time.perf_counter() - start:.1f}s")
    start = time.perf_counter()
    note = {"dataset": "SciFact (BEIR), train split",
            "files": "corpus.jsonl, train_queries.jsonl, train_qrels.tsv", "split": "train",
            "k": args.k, "units": list(UNITS),
            "labels": "relevant iff the hit's document has qrels grade > 0 (chunks inherit)",
            "ranks": "0-based position in the returned list; hybrid = RRF order",
            **conf.engine_note(engine)}
    calibrator, _metrics, oof = conf.calibrate_samples(samples, folds=args.folds, l2=args.l2,
                                                       seed=args.seed, fitted_on=note)
    assert oof is not None
    print(f"fitted {args.folds} folds + the full model in {time.perf_counter() - start:.1f}s\n")

    print(f"Held-out calibration ({args.folds} folds by query; targets ECE ≤ {ECE_TARGET}, "
          f"AUROC ≥ {AUROC_TARGET})")
    print("\n".join(calibration_table(samples, oof, args.k)))

    reliability_plot(samples, oof, args.plot)
    print(f"\nreliability diagram: {args.plot}")

    print("\nRanking quality, 505 queries (held-out probabilities)")
    print("\n".join(rerank_table(engine, queries, qrels, args.rerank_k, args.folds, args.seed,
                                 samples, args.l2)))

    if args.tree_node:
        if "tree-node" not in engine.derived_status():
            print(f"no tree in {args.engine}: build the engine with build_tree=True",
                  file=sys.stderr)
            return 2
        start = time.perf_counter()
        pool = collect_pool_samples(engine, queries, qrels, k=args.k)
        print(f"\ncollected {len(pool)} labelled hits of the collapsed tree in "
              f"{time.perf_counter() - start:.1f}s")
        tree, _tree_metrics = fit_tree_node(pool, engine, args.folds, args.seed, args.l2, args.k)
        print_tree_table(_tree_metrics)
        calibrator = merge_tree_models(calibrator, tree)

    print("\nModels fitted on all queries (raw-feature weights; P = sigmoid(b + Σ w·f))")
    for key, model in sorted(calibrator.models.items()):
        terms = ", ".join(f"{f} {w:+.3f}" for f, w in zip(model.features, model.coef))
        print(f"  {key:16s} b {model.intercept:+.3f}, {terms}")
    if args.write_params:
        out = ROOT / "rcp_agentic" / "data" / "calibration.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        calibrator.save(out)
        print(f"\nwrote {out}")
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
