"""Graph-recall confidence on the multi-hop sets: the shipped models against a refit on the
set's own labels (what ``rcp-agentic calibrate`` does on a graph engine), held out.

    python bench/graph_calibration.py [--sets hotpotqa 2wikimultihopqa musique-train] [--k 10]

Each set's graph engine (``bench/graph.py``'s ``graph_engine``) answers every question with
one hybrid graph-recall chunk retrieve (``k`` hits); each hit is labelled by whether its
passage supports the question and carries the signals the engine scored it with
(``calibration_engine.collect_graph_samples``). Reported per set, for all hits and for the
bridge hop's hits (``scores.bridge``) apart: ECE / AUROC / mean confidence / base rate of

* ``shipped``: the shipped ``hybrid+graph/chunk`` model, as served (capped down the pool);
* ``k-fold``: the model refit on the set's own questions alone, 5 folds by question;
* ``leave-one-set-out``: refit on the other multi-hop sets' questions only.

The refit probabilities are the model's own (not capped down the pool). Results go to
``bench/results/graph_calibration.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.graph import graph_engine, load_set  # noqa: E402
from rcp_agentic.pipeline import calibration_engine as collecting  # noqa: E402
from rcp_agentic.pipeline import calibration_fit as fitting  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "graph_calibration.json"
SETS = ("hotpotqa", "2wikimultihopqa", "musique-train")


def set_samples(name: str, k: int) -> tuple[list[fitting.Sample], np.ndarray, np.ndarray]:
    """The set's labelled graph-recall hits, the served confidence and a bridge flag of each."""
    docs, questions = load_set(name)
    engine = graph_engine(name, docs)
    queries = {q["_id"]: q["question"] for q in questions}
    qrels = {q["_id"]: {d: 1 for d in q["supporting_ids"]} for q in questions}
    t0 = time.perf_counter()
    samples = collecting.collect_graph_samples(engine, queries, qrels, modes=("hybrid",),
                                            units=("chunk",), k=k, source=name)
    served: dict[tuple[str, int], tuple[float, bool]] = {}
    for qid, text in queries.items():
        res = engine.retrieve(text, k=k, mode="hybrid", graph_recall=True, include_text=False)
        for j, h in enumerate(res.hits):
            served[(qid, j)] = (float(h.confidence or 0.0), "bridge" in (h.scores or {}))
    engine.close()
    nth: dict[str, int] = {}
    conf, bridge = [], []
    for x in samples:
        j = nth.get(x.query_id, 0)
        nth[x.query_id] = j + 1
        c, b = served[(x.query_id, j)]
        conf.append(c)
        bridge.append(b)
    print(f"  {name}: {len(queries)} questions, {len(samples)} hits "
          f"({sum(bridge)} bridge) in {time.perf_counter() - t0:.0f} s", flush=True)
    return samples, np.asarray(conf), np.asarray(bridge, dtype=bool)


def cell(p: np.ndarray, y: np.ndarray) -> dict[str, float]:
    return {"n": int(len(y)), "ece": round(fitting.ece(p, y), 4),
            "auroc": round(fitting.auroc(p, y), 4), "mean_p": round(float(p.mean()), 4),
            "base_rate": round(float(y.mean()), 4)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    samples: list[fitting.Sample] = []
    served, bridge = [], []
    for name in args.sets:
        s, c, b = set_samples(name, args.k)
        samples += s
        served.append(c)
        bridge.append(b)
    conf = np.concatenate(served)
    is_bridge = np.concatenate(bridge)
    y = np.array([x.label for x in samples], dtype=float)
    src = np.array([x.source for x in samples])
    kfold = np.full(len(samples), np.nan)
    for name in args.sets:  # 5 folds by question within the set: its own labels only
        at = np.flatnonzero(src == name)
        kfold[at] = fitting.cross_validate([samples[i] for i in at], folds=5)
    probs = {"shipped": conf, "k-fold": kfold}
    if len(args.sets) > 1:
        probs["leave-one-set-out"] = fitting.leave_one_out(samples)
    out: dict[str, Any] = {"k": args.k, "sets": {}}
    for name in args.sets:
        row: dict[str, Any] = {}
        for label, p in probs.items():
            m = src == name
            row[label] = {"all": cell(p[m], y[m]), "bridge": cell(p[m & is_bridge],
                                                                 y[m & is_bridge]),
                          "other": cell(p[m & ~is_bridge], y[m & ~is_bridge])}
        out["sets"][name] = row
        print(f"{name}:")
        for label, r in row.items():
            print(f"  {label:<18} " + "  ".join(
                f"{part} ECE {c['ece']:.3f} AUROC {c['auroc']:.3f} p {c['mean_p']:.3f}/"
                f"{c['base_rate']:.3f}" for part, c in r.items()))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--key", default="graph_calibration")
    args = ap.parse_args(argv)
    result = run(args)
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    saved[args.key] = result
    RESULTS.write_text(json.dumps(saved, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
