"""Confidence of the composed graph units (``path``, ``subgraph``) on the multi-hop sets.

    python bench/composed_confidence.py [--sets hotpotqa 2wikimultihopqa] [--k 5] [--limit N]

A composed hit's confidence is its best leaf chunk's calibrated confidence in the engine's
own graph-recall chunk retrieve for the same query (``Retriever._retrieve_composed``). For
every question of ``../shared/data/multihop/<set>/questions.jsonl`` this retrieves the top
``k`` path and subgraph hits (hybrid, the default mode) from the set's graph engine
(``bench/.cache/corrective-graph-engine-<set>``, only read), labels a hit relevant when a
document of its ``provenance.leaves`` is one of the question's supporting passages, and
prints, per set and unit, the mean confidence against the positive rate, ECE (10
equal-width bins) and AUROC (targets: ECE ≤ 0.05, AUROC ≥ 0.85), and the same for the
best-leaf confidence before the "never above the hit ranked before" rule (recomputed from a
chunk retrieve of its own: a diagnostic of what that rule costs). A question whose text
links no entity of the graph gives no hit. Results go to
``bench/results/composed_confidence.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.data import data_path  # noqa: E402
from rcp_agentic import Engine  # noqa: E402
from rcp_agentic.pipeline.calibration_fit import auroc, ece  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "bench" / ".cache"
SETS = ("hotpotqa", "2wikimultihopqa")
UNITS = ("path", "subgraph")
ECE_TARGET, AUROC_TARGET = 0.05, 0.85


def questions(name: str) -> list[dict[str, Any]]:
    with open(data_path("multihop", name, "questions.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def best_leaf(engine: Engine, query: str) -> dict[str, float]:
    """Each chunk's confidence in a graph-recall chunk retrieve ``candidateK`` deep (as the
    engine reads a composed hit's leaves)."""
    depth = engine.config.candidate_k
    hits = engine.retrieve(query, k=depth, candidate_k=depth, include_text=False,
                           **{"x-rcp-agentic-graphRecall": True}).hits
    return {h.id: float(h.confidence) for h in hits if h.confidence is not None}


def collect(engine: Engine, qs: list[dict[str, Any]], unit: str, k: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(confidences, the same before the never-above-the-hit-before rule, labels, hits
    without a confidence) of the top ``k`` ``unit`` hits."""
    doc_of = {uid: doc for _r, uid, doc, *_rest in engine.store.live_leaves("chunk")}
    probs: list[float] = []
    raw: list[float] = []
    labels: list[int] = []
    missing = 0
    for q in qs:
        supporting = set(q["supporting_ids"])
        hits = engine.retrieve(q["question"], k=k, unit=unit, include_text=False).hits
        chunks = best_leaf(engine, q["question"]) if hits else {}
        floor = min(chunks.values(), default=0.0)
        for h in hits:
            if h.confidence is None:
                missing += 1
                continue
            leaves = (h.provenance.leaves if h.provenance else None) or []
            probs.append(float(h.confidence))
            raw.append(max((chunks.get(uid, floor) for uid in leaves), default=floor))
            labels.append(int(any(doc_of.get(uid) in supporting for uid in leaves)))
    return np.array(probs), np.array(raw), np.array(labels), missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--limit", type=int, default=None, help="first N questions per set")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {"k": args.k}
    print(f"{'set':16} {'unit':9} {'hits':>5} {'mean p':>7} {'pos':>6} {'ECE':>7} "
          f"{'AUROC':>7}  met")
    for name in args.sets:
        path = CACHE / f"corrective-graph-engine-{name}"
        if not (path / "engine.db").exists():
            raise SystemExit(f"no graph engine at {path}")
        qs = questions(name)[:args.limit]
        with Engine(path, build_graph=True) as engine:
            if engine.calibrator is None:
                raise SystemExit(f"{path}: no calibration for its embedder")
            for unit in UNITS:
                t0 = time.perf_counter()
                p, raw, y, missing = collect(engine, qs, unit, args.k)
                e, a = ece(p, y), auroc(p, y)
                row: dict[str, Any] = {
                    "questions": len(qs), "hits": len(p), "no_confidence": missing,
                    "mean_p": round(float(p.mean()), 4) if len(p) else None,
                    "positive_rate": round(float(y.mean()), 4) if len(y) else None,
                    "ece": round(e, 4), "auroc": round(a, 4),
                    "unclamped": {"mean_p": round(float(raw.mean()), 4) if len(raw) else None,
                                  "ece": round(ece(raw, y), 4),
                                  "auroc": round(auroc(raw, y), 4)},
                    "seconds": round(time.perf_counter() - t0, 1)}
                out.setdefault(name, {})[unit] = row
                met = "yes" if e <= ECE_TARGET and a >= AUROC_TARGET else "no"
                print(f"{name:16} {unit:9} {len(p):5d} {row['mean_p'] or 0:7.3f} "
                      f"{row['positive_rate'] or 0:6.3f} {e:7.4f} {a:7.4f}  {met}"
                      f"  ({missing} without confidence, {row['seconds']} s)", flush=True)
                u = row["unclamped"]
                print(f"{'':16} {'unclamped':9} {'':5} {u['mean_p'] or 0:7.3f} {'':6} "
                      f"{u['ece']:7.4f} {u['auroc']:7.4f}  (best leaf, no ceiling down the "
                      "list)", flush=True)
    if args.limit is None:
        dest = ROOT / "bench" / "results" / "composed_confidence.json"
        dest.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    # As a script, derived units are built inside each write (as before background
    # updates): this bench reads each build's report and queries the units right after
    # the write. Set here, not on import, so a module importing this one keeps its mode.
    os.environ.setdefault("RCP_AGENTIC_DERIVED_UPDATES", "inline")
    raise SystemExit(main())
