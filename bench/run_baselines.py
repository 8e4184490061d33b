"""Run the framework baselines on SciFact and print one comparison table.

    python bench/run_baselines.py [--limit N] [--queries N] [--warmup N] [--json PATH]

Builds LlamaIndex's hybrid recipe and LangChain's EnsembleRetriever over the
same corpus with the same MiniLM embeddings (corpus vectors from
``bench/.cache``), times every query after a warm-up, and prints: system,
nDCG@10, Recall@100, MRR@10, p50/p95 end-to-end ms and p50/p95 ms beyond the
query embedding, plus the share of CPU other processes used meanwhile
(latencies are only trustworthy when that is ~0%: the machine has 2 cores).

Reusable pieces for the engine's own bench: ``summarize(name, timing, qrels)``
-> a row dict, ``run_baselines(corpus, queries, qrels, cache)`` -> rows, and
``format_table(rows)``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scifact
from bench.baselines import BASELINES, Timing, time_baseline
from bench.embedcache import EmbeddingCache
from bench.metrics import mrr_at_k, ndcg_at_k, percentiles, recall_at_k


def summarize(name: str, timing: Timing, qrels, build_s: float | None = None) -> dict:
    """One table row: quality metrics over ``qrels`` and latency percentiles."""
    e2e = percentiles(timing.e2e_ms)
    beyond = percentiles(timing.beyond_ms)
    return {
        "system": name,
        "ndcg@10": ndcg_at_k(timing.run, qrels, 10),
        "recall@100": recall_at_k(timing.run, qrels, 100),
        "mrr@10": mrr_at_k(timing.run, qrels, 10),
        "e2e_p50_ms": e2e["p50"],
        "e2e_p95_ms": e2e["p95"],
        "beyond_p50_ms": beyond["p50"],
        "beyond_p95_ms": beyond["p95"],
        "embed_p50_ms": percentiles(timing.embed_ms)["p50"],
        "build_s": build_s,
        "other_load": timing.other_load,
        "queries": len(timing.run),
    }


COLUMNS = [
    ("system", "system", "{:<20}"),
    ("ndcg@10", "nDCG@10", "{:>8.4f}"),
    ("recall@100", "R@100", "{:>7.4f}"),
    ("mrr@10", "MRR@10", "{:>7.4f}"),
    ("e2e_p50_ms", "e2e p50", "{:>8.2f}"),
    ("e2e_p95_ms", "e2e p95", "{:>8.2f}"),
    ("beyond_p50_ms", "beyond p50", "{:>10.2f}"),
    ("beyond_p95_ms", "beyond p95", "{:>10.2f}"),
    ("embed_p50_ms", "embed p50", "{:>9.2f}"),
    ("build_s", "build s", "{:>8.1f}"),
    ("other_load", "other CPU", "{:>9.0%}"),
]


def format_table(rows: list[dict]) -> str:
    """Fixed-width table of ``summarize`` rows (latencies in ms)."""

    def width(fmt: str) -> int:
        return int(fmt.strip("{}:<>").split(".")[0].rstrip("fs") or 0)

    header = "  ".join(
        (f"{title:<{width(fmt)}}" if key == "system" else f"{title:>{width(fmt)}}")
        for key, title, fmt in COLUMNS
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        cells = []
        for key, _, fmt in COLUMNS:
            val = row.get(key)
            cells.append(fmt.format(val) if val is not None else " " * width(fmt))
        lines.append("  ".join(cells))
    return "\n".join(lines)


def run_baselines(
    corpus, queries, qrels, cache: EmbeddingCache, warmup: int = 5, k: int = 100, log=print
):
    """Build and time every baseline; returns ``summarize`` rows."""
    rows = []
    for system in BASELINES:
        emb = system.wrap(cache)
        t0 = time.perf_counter()
        built = system.build(corpus, emb)
        build_s = time.perf_counter() - t0
        log(f"[{system.name}] built in {build_s:.1f}s; querying {len(queries)} queries")
        timing = time_baseline(system, built, queries, k=k, warmup=warmup)
        rows.append(summarize(system.name, timing, qrels, build_s))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--limit", type=int, default=None, help="corpus subset size (keeps relevant docs)"
    )
    ap.add_argument("--queries", type=int, default=None, help="first N queries with qrels")
    ap.add_argument("--warmup", type=int, default=5, help="untimed warm-up queries per system")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    corpus, queries, qrels = scifact.load_dataset(args.limit, args.queries)
    print(f"corpus {len(corpus)} docs, {len(queries)} queries with qrels")
    cache = EmbeddingCache()
    t0 = time.perf_counter()
    cache.embed_documents(list(corpus.values()))
    print(f"corpus embeddings ready in {time.perf_counter() - t0:.1f}s ({cache.path.name})")
    rows = run_baselines(corpus, queries, qrels, cache, warmup=args.warmup)
    print()
    print(format_table(rows))
    busy = [r["other_load"] for r in rows if r.get("other_load") is not None]
    if busy and max(busy) > 0.05:
        print(
            f"\nWARNING: other processes used up to {max(busy):.0%} of the CPU while timing;"
            " latencies are inflated, rerun on a quiet machine."
        )
    print(f"\ntotal wall time {time.perf_counter() - t_start:.1f}s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
