"""``rcp-agentic calibrate QUERIES QRELS``: refit hit confidence on your own relevance labels
(BEIR files), save it with the engine, and print how well it fits."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import InvalidParams
from .engines import open_engine
from .output import say


def add_command(sub: Any) -> None:
    """The ``calibrate`` sub-parser."""
    cal = sub.add_parser("calibrate", help="refit hit confidence on your own relevance labels")
    cal.add_argument("queries", metavar="QUERIES", help="BEIR queries.jsonl")
    cal.add_argument("qrels", metavar="QRELS", help="BEIR qrels TSV (query-id, doc-id, grade)")
    cal.add_argument("--engine", metavar="DIR")
    cal.add_argument("--k", type=int, default=20, help="hits per query used for fitting")
    cal.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Fit, save and print the fit's error (ECE) and ranking (AUROC) per model."""
    from ..engine import CALIBRATION_FILE
    from ..pipeline.calibration_engine import calibrate_engine

    engine = open_engine(args, create=False)
    queries, qrels = read_beir(args.queries, args.qrels)
    calibrator, metrics = calibrate_engine(engine, queries, qrels, k=args.k)
    target = engine.path / CALIBRATION_FILE
    calibrator.save(target)
    say(f"Fitted confidence on {len(queries)} judged queries; saved to {target}")
    held_out = metrics.get("cv") or metrics.get("train") or {}
    for key, m in sorted(held_out.items()):
        if isinstance(m, dict) and "ece" in m:
            say(f"  {key:<18} ECE {m['ece']:.4f}  AUROC {m['auroc']:.4f}  (n={m['n']})")
    kept = calibrator.fitted_on.get("kept") or []
    if kept:
        say(f"  kept {len(kept)} models your labels did not cover "
            f"({', '.join(sorted({k.split('/')[1].split(':')[0] for k in kept}))})")
    return 0


def read_beir(queries_path: str,
              qrels_path: str) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """BEIR files: queries.jsonl (``{"_id", "text"}``) and a qrels TSV (query, doc, grade);
    the judged queries and their judgements."""
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    try:
        with open(queries_path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    rec = json.loads(line)
                    queries[str(rec["_id"])] = str(rec["text"])
        with open(qrels_path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                cols = line.rstrip("\n").split("\t")
                if len(cols) < 3 or (n == 1 and not cols[2].strip().lstrip("-").isdigit()):
                    continue  # header or blank line
                qrels.setdefault(cols[0], {})[cols[1]] = int(cols[2])
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidParams(f"cannot read BEIR files: {exc}", field="queries") from None
    judged = {q: t for q, t in queries.items() if q in qrels}
    if not judged:
        raise InvalidParams("no query in QUERIES has judgements in QRELS", field="qrels")
    return judged, {q: qrels[q] for q in judged}
