"""SciFact, side by side in one run: our engine (dense / sparse / hybrid) against the framework baselines.

    python bench/scifact_engine.py [--limit N] [--queries N] [--engine DIR] [--skip-baselines]

Prints nDCG@10, Recall@100, MRR@10 and p50/p95 latency end to end and beyond the
query embedding for each system, the ratio of our hybrid's overhead to
LlamaIndex's, and the ingest numbers of our engine (total time ÷ time inside the
embedding model, peak RSS). Every system uses the same all-MiniLM-L6-v2 model and
retrieves whole abstracts (our ``unit="document"``).
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scifact  # noqa: E402
from bench.baselines import time_queries  # noqa: E402
from bench.embedcache import EmbeddingCache  # noqa: E402
from bench.run_baselines import format_table, run_baselines, summarize  # noqa: E402
from rcp_agentic import Engine  # noqa: E402


class _QueryClock:
    """Adapter for ``time_queries``: time the engine's embedder spent on the last query."""

    def __init__(self, engine: Engine) -> None:
        self.embedder = engine.embedder
        self._mark = 0.0

    def reset_query_time(self) -> None:
        self._mark = self.embedder.seconds_in_model

    @property
    def query_ms(self) -> float:
        return (self.embedder.seconds_in_model - self._mark) * 1000.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def ingest(engine_dir: Path, corpus: dict[str, str]) -> dict[str, float]:
    """Index the corpus with the real model; returns timing and memory."""
    engine = Engine(engine_dir)
    docs = ({"id": did, "text": text, "title": text.split("\n\n", 1)[0]}
            for did, text in corpus.items())
    start = time.perf_counter()
    res = engine.add_documents(docs)
    total = time.perf_counter() - start
    stats = engine.stats()
    engine.close()
    return {"documents": res.documents, "chunks": res.chunks, "seconds": total,
            "embedding_seconds": res.seconds_embedding, "ratio": total / res.seconds_embedding,
            "units": sum(v for k, v in stats.items() if k != "documents"),
            "peak_rss_mb": peak_rss_mb()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="corpus subset (keeps relevant docs)")
    ap.add_argument("--queries", type=int, default=None, help="first N queries with qrels")
    ap.add_argument("--engine", type=Path, default=None,
                    help="reuse (or create) this engine directory instead of a temporary one")
    ap.add_argument("--skip-baselines", action="store_true")
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args(argv)

    corpus, queries, qrels = scifact.load_dataset(args.limit, args.queries)
    print(f"SciFact train: {len(corpus)} docs, {len(queries)} queries with qrels")
    tmp = tempfile.TemporaryDirectory(prefix="rcp-bench-")
    engine_dir = args.engine or Path(tmp.name) / "engine"
    if not (engine_dir / "engine.db").exists():
        ing = ingest(engine_dir, corpus)
        print(f"ingest: {ing['documents']} docs → {ing['chunks']} chunks ({ing['units']} units) in "
              f"{ing['seconds']:.1f}s, {ing['embedding_seconds']:.1f}s inside the model → "
              f"ratio {ing['ratio']:.3f} (target ≤ 1.25); peak RSS {ing['peak_rss_mb']:.0f} MB")

    engine = Engine(engine_dir, query_cache_size=0)
    clock = _QueryClock(engine)
    rows = []
    for mode in ("dense", "sparse", "hybrid"):
        def search(text: str, mode: str = mode) -> list[str]:
            res = engine.retrieve(text, k=100, mode=mode, unit="document", include_text=False)
            return [h.chunk.doc_id for h in res.hits if h.chunk]

        timing = time_queries(search, queries, clock, warmup=args.warmup)
        rows.append(summarize(f"rcp-agentic {mode}", timing, qrels))
    engine.close()

    if not args.skip_baselines:
        cache = EmbeddingCache(show_progress=False)
        cache.embed_documents(list(corpus.values()))
        rows += run_baselines(corpus, queries, qrels, cache, warmup=args.warmup,
                              log=lambda m: print(m, file=sys.stderr))
    print()
    print(format_table(rows))
    ours = next(r for r in rows if r["system"] == "rcp-agentic hybrid")
    for row in rows:
        if row["system"].startswith("llamaindex") or row["system"].startswith("LlamaIndex"):
            ratio = ours["beyond_p50_ms"] / row["beyond_p50_ms"]
            print(f"\nhybrid overhead beyond the query embedding, p50: ours "
                  f"{ours['beyond_p50_ms']:.2f} ms vs {row['system']} {row['beyond_p50_ms']:.2f} ms"
                  f" → ratio {ratio:.2f} (target ≤ 0.33)")
    print(f"peak RSS {peak_rss_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
