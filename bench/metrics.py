"""Ranking metrics (BEIR / trec_eval definitions) and latency percentiles.

Inputs everywhere:

* ``run``:   ``{query_id: [doc_id, ...]}`` ranked best first (a repeated doc
  id counts only at its first position, as trec_eval does);
* ``qrels``: ``{query_id: {doc_id: grade}}``; grades > 0 are relevant.

Each metric is averaged over the queries of ``qrels`` that have at least one
relevant doc; such a query missing from ``run`` scores 0.

* nDCG@k: gain = grade, discount = log2(rank + 1) (rank from 1), ideal DCG
  from the qrels grades sorted descending (trec_eval ``ndcg_cut``).
* Recall@k: relevant docs in the top k / all relevant docs.
* MRR@k: 1 / rank of the first relevant doc in the top k, else 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Run = Mapping[str, Sequence[str]]
Qrels = Mapping[str, Mapping[str, int]]


def _dedup(docs: Sequence[str], k: int) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for d in docs:
        if d not in seen:
            seen.add(d)
            out.append(d)
            if len(out) == k:
                break
    return out


def _judged(qrels: Qrels):
    for qid, rels in qrels.items():
        pos = {d: g for d, g in rels.items() if g > 0}
        if pos:
            yield qid, pos


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def ndcg_at_k(run: Run, qrels: Qrels, k: int = 10) -> float:
    """Mean nDCG@k with graded (linear) gains."""
    scores = []
    for qid, rels in _judged(qrels):
        top = _dedup(run.get(qid, ()), k)
        dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(top))
        ideal = sorted(rels.values(), reverse=True)[:k]
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        scores.append(dcg / idcg)
    return _mean(scores)


def recall_at_k(run: Run, qrels: Qrels, k: int = 100) -> float:
    """Mean Recall@k."""
    scores = []
    for qid, rels in _judged(qrels):
        top = _dedup(run.get(qid, ()), k)
        scores.append(sum(1 for d in top if d in rels) / len(rels))
    return _mean(scores)


def mrr_at_k(run: Run, qrels: Qrels, k: int = 10) -> float:
    """Mean reciprocal rank of the first relevant doc within the top k."""
    scores = []
    for qid, rels in _judged(qrels):
        top = _dedup(run.get(qid, ()), k)
        scores.append(next((1.0 / (i + 1) for i, d in enumerate(top) if d in rels), 0.0))
    return _mean(scores)


def percentiles(latencies_ms: Sequence[float], ps: Sequence[int] = (50, 95)) -> dict[str, float]:
    """``{"p50", "p95", "mean"}`` in ms by default, ``ps`` choosing the percentiles (linear
    interpolation, like numpy's default)."""
    xs = sorted(float(x) for x in latencies_ms)
    if not xs:
        return {**{f"p{p}": float("nan") for p in ps}, "mean": float("nan")}

    def pct(p: float) -> float:
        pos = (len(xs) - 1) * p / 100.0
        lo = math.floor(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return {**{f"p{p}": pct(p) for p in ps}, "mean": sum(xs) / len(xs)}
