"""The corrective loop against a single retrieve on multi-hop QA (HotpotQA, 2Wiki) and SciFact.

    python bench/corrective.py [--sets hotpotqa 2wikimultihopqa scifact] [--limit N]

For each question: a single hybrid retrieve (top 5 chunks) and the corrective loop
(``CorrectiveRetriever``: k=5 a step, at most 4 steps and 2,000 evidence tokens,
2 confident hits wanted, no LLM — re-queries expand the question with words from
the confident evidence). Reports Recall@2 and Recall@5 of the labelled supporting
passages (SciFact: relevant abstracts) in the ranked result / evidence set, recall
of the whole set (R@set; a single retrieve at k=10 is the same-token baseline), the
evidence tokens, the engine calls, and the loop's trace statistics, at two
threshold settings. Engines are built once into ``bench/.cache/engine-<set>``
(multi-hop corpora take about a minute each; SciFact reuses the cache engine of
``bench/scifact_engine.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scifact  # noqa: E402
from bench.data import data_path  # noqa: E402
from rcp_agentic import Engine  # noqa: E402
from rcp_agentic.agentic import ConfidenceEvaluator, CorrectiveRetriever  # noqa: E402
from rcp_agentic.models.tokenizer import count_tokens  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "bench" / ".cache"
SETTINGS = {"upper 0.6 / lower 0.2": (0.6, 0.2), "upper 0.6 / lower 0.05 (default)": (0.6, 0.05)}


def load_set(name: str) -> tuple[list[dict[str, Any]], list[tuple[str, set[str]]]]:
    """Corpus documents and (question, relevant doc ids) pairs."""
    if name == "scifact":
        qrels = scifact.load_qrels()
        queries = scifact.load_queries()
        return [], [(queries[q], set(rel)) for q, rel in qrels.items() if q in queries]
    root = data_path("multihop", name)
    docs = [json.loads(line) for line in (root / "corpus.jsonl").open(encoding="utf-8")]
    questions = [json.loads(line) for line in (root / "questions.jsonl").open(encoding="utf-8")]
    corpus = [{"id": d["_id"], "title": d["title"], "text": f"{d['title']}\n\n{d['text']}"}
              for d in docs]
    return corpus, [(q["question"], set(q["supporting_ids"])) for q in questions]


def engine_for(name: str, corpus: list[dict[str, Any]]) -> Engine:
    if name == "scifact":
        return Engine(CACHE / "engine-scifact")
    path = CACHE / f"engine-{name}"
    fresh = not (path / "engine.db").exists()
    eng = Engine(path)
    if fresh:
        t0 = time.perf_counter()
        eng.add_documents(corpus)
        print(f"  indexed {len(corpus)} passages of {name} in {time.perf_counter() - t0:.0f} s")
    return eng


def doc_of(hit: dict[str, Any]) -> str:
    return (hit.get("chunk") or {}).get("docId") or hit["meta"]["doc_id"]


def recall(ranked_docs: list[str], relevant: set[str], at: int) -> float:
    seen: list[str] = []
    for d in ranked_docs:
        if d not in seen:
            seen.append(d)
    return len(set(seen[:at]) & relevant) / len(relevant)


def run_set(name: str, limit: int | None) -> dict[str, Any]:
    corpus, questions = load_set(name)
    questions = questions[:limit] if limit else questions
    eng = engine_for(name, corpus)
    out: dict[str, Any] = {"questions": len(questions)}
    for k in (5, 10):
        single: dict[str, list[float]] = {"r2": [], "r5": [], "rset": [], "tokens": [], "ms": []}
        for q, rel in questions:
            t0 = time.perf_counter()
            hits = [h.to_wire() for h in eng.retrieve(q, k=k).hits]
            single["ms"].append((time.perf_counter() - t0) * 1000)
            docs = [doc_of(h) for h in hits]
            single["r2"].append(recall(docs, rel, 2))
            single["r5"].append(recall(docs, rel, 5))
            single["rset"].append(recall(docs, rel, len(docs)))
            single["tokens"].append(sum(count_tokens(h.get("text") or "") for h in hits))
        row = out[f"single k={k}"] = _summary(single)
        print(f"  {name:<16} single retrieve k={k:<2}{'':<25}R@2 {row['R@2']:.3f}  "
              f"R@5 {row['R@5']:.3f}  R@set {row['R@set']:.3f}  tokens {row['tokens']:.0f}  "
              "calls 1", flush=True)
    for label, (upper, lower) in SETTINGS.items():
        loop = CorrectiveRetriever(eng, k=5, max_steps=4, max_tokens=2000, min_evidence=2,
                                   evaluator=ConfidenceEvaluator(upper, lower))
        stats: dict[str, list[float]] = {"r2": [], "r5": [], "rset": [], "tokens": [], "ms": [],
                                         "calls": [], "evidence": []}
        actions: Counter[str] = Counter()
        verdicts: Counter[str] = Counter()
        for q, rel in questions:
            t0 = time.perf_counter()
            res = loop.run(q)
            stats["ms"].append((time.perf_counter() - t0) * 1000)
            docs = [doc_of(h) for h in res.evidence]
            stats["r2"].append(recall(docs, rel, 2))
            stats["r5"].append(recall(docs, rel, 5))
            stats["rset"].append(recall(docs, rel, len(docs)))
            stats["tokens"].append(res.tokens)
            stats["calls"].append(res.calls)
            stats["evidence"].append(len(res.evidence))
            actions.update(s.action for s in res.trace)
            verdicts[res.trace[0].verdict or "error"] += 1
        summary = _summary(stats)
        summary["actions"] = dict(actions)
        summary["first verdicts"] = dict(verdicts)
        out[f"corrective {label}"] = summary
        print(f"  {name:<16} corrective {label:<22} R@2 {summary['R@2']:.3f}  "
              f"R@5 {summary['R@5']:.3f}  R@set {summary['R@set']:.3f}  "
              f"tokens {summary['tokens']:.0f}  "
              f"calls {summary['calls']:.2f}  evidence {summary['evidence']:.1f}  "
              f"first verdicts {dict(verdicts)}", flush=True)
    eng.close()
    return out


def _summary(stats: dict[str, list[float]]) -> dict[str, float]:
    out = {"R@2": statistics.mean(stats["r2"]), "R@5": statistics.mean(stats["r5"]),
           "R@set": statistics.mean(stats["rset"]),
           "tokens": statistics.mean(stats["tokens"]), "p50_ms": statistics.median(stats["ms"])}
    if "calls" in stats:
        out["calls"] = statistics.mean(stats["calls"])
        out["evidence"] = statistics.mean(stats["evidence"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", default=["hotpotqa", "2wikimultihopqa", "scifact"])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--out", default=str(REPO / "bench/results/corrective.json"))
    args = ap.parse_args()
    results = {}
    for name in args.sets:
        results[name] = run_set(name, args.limit)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
