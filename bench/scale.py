"""Hybrid latency as the corpus grows: about 5k, 50k and 200k chunks.

    python bench/scale.py [--sizes 5000 50000 200000] [--queries 200]

SciFact is replicated with perturbed ids (``<id>~r<n>``); each chunk's vector
comes from the real MiniLM model once per distinct text (memoised in
``bench/.cache``, seeded from the engine ``scifact_engine.py --engine
bench/.cache/engine-scifact`` built) plus small seeded noise for every replica, so
ingest at 200k chunks does not re-run the model 17 times. Queries use the real
model.
Prints p50/p95 end to end and beyond the query embedding, per size, with the
growth factor against the smallest size.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scifact  # noqa: E402
from bench.metrics import percentiles  # noqa: E402
from rcp_agentic import Engine  # noqa: E402
from rcp_agentic.models.embedder import SentenceTransformerEmbedder, normalize_rows  # noqa: E402

CACHE = Path(__file__).resolve().parent / ".cache" / "chunk-vectors.npz"
SCIFACT_ENGINE = Path(__file__).resolve().parent / ".cache" / "engine-scifact" / "engine.db"


class ReplicaEmbedder:
    """The real model once per distinct text, memoised; every repeat gets seeded noise."""

    def __init__(self, noise: float = 0.02) -> None:
        self.model = SentenceTransformerEmbedder()
        self.identity = self.model.identity
        self.noise = noise
        self.rng = np.random.default_rng(0)
        self.memo: dict[str, np.ndarray] = {}
        if CACHE.exists():
            data = np.load(CACHE, allow_pickle=False)
            self.memo = dict(zip(data["keys"].tolist(), data["vecs"]))
        elif SCIFACT_ENGINE.exists():
            with sqlite3.connect(SCIFACT_ENGINE) as db:
                for text, vec in db.execute("SELECT text, vec FROM units WHERE unit = 'chunk'"):
                    self.memo[text] = np.frombuffer(vec, dtype=np.float32)
        self.seen: set[str] = set()

    @property
    def dimension(self) -> int:
        return self.model.dimension

    def save(self) -> None:
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        keys = list(self.memo)
        np.savez(CACHE, keys=np.array(keys), vecs=np.vstack([self.memo[k] for k in keys]))

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        missing = sorted({t for t in texts if t not in self.memo})
        if missing:
            for key, vec in zip(missing, self.model.embed_documents(missing)):
                self.memo[key] = vec
        vecs = np.vstack([self.memo[t] for t in texts])
        repeat = np.array([t in self.seen for t in texts])
        self.seen.update(texts)
        if repeat.any():
            vecs[repeat] += self.noise * self.rng.standard_normal(
                (int(repeat.sum()), vecs.shape[1])).astype(np.float32)
        return normalize_rows(vecs)

    def embed_query(self, text: str) -> np.ndarray:
        return self.model.embed_query(text)


def build(engine_dir: Path, corpus: dict[str, str], target_chunks: int,
          embedder: ReplicaEmbedder) -> tuple[Engine, int, float]:
    engine = Engine(engine_dir, embedder=embedder, query_cache_size=0)
    embedder.seen.clear()
    start = time.perf_counter()
    chunks, replica = 0, 0
    while chunks < target_chunks:
        batch = []
        for did, text in corpus.items():
            batch.append({"id": did if replica == 0 else f"{did}~r{replica}", "text": text})
            if len(batch) == 256:
                chunks += engine.add_documents(batch).chunks
                batch = []
                if chunks >= target_chunks:
                    break
        if batch and chunks < target_chunks:
            chunks += engine.add_documents(batch).chunks
        replica += 1
    return engine, chunks, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5_000, 50_000, 200_000])
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args(argv)

    corpus = scifact.load_corpus()
    queries = list(scifact.load_queries().values())[:args.queries]
    embedder = ReplicaEmbedder()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rcp-scale-") as tmp:
        for size in args.sizes:
            engine, chunks, secs = build(Path(tmp) / f"e{size}", corpus, size, embedder)
            embedder.save()
            path = "exact (numpy)" if chunks <= engine.config.dense_exact_max else "HNSW (Chroma)"
            for q in queries[:5]:
                engine.retrieve(q, k=10)
            e2e, beyond = [], []
            for q in queries:
                mark = engine.embedder.seconds_in_model
                t0 = time.perf_counter()
                engine.retrieve(q, k=10, include_text=True)
                total = (time.perf_counter() - t0) * 1000.0
                e2e.append(total)
                beyond.append(total - (engine.embedder.seconds_in_model - mark) * 1000.0)
            rows.append((chunks, path, secs, percentiles(e2e), percentiles(beyond)))
            print(f"{chunks} chunks built in {secs:.0f}s; dense path {path}", file=sys.stderr)
            engine.close()
    base = rows[0]
    print(f"{'chunks':>8}  {'dense path':<14} {'e2e p50':>8} {'e2e p95':>8} {'beyond p50':>10} "
          f"{'beyond p95':>10}  {'size x':>6} {'p50 x':>6} {'beyond x':>8}")
    for chunks, path, _secs, e, b in rows:
        print(f"{chunks:>8}  {path:<14} {e['p50']:>8.2f} {e['p95']:>8.2f} {b['p50']:>10.2f} "
              f"{b['p95']:>10.2f}  {chunks / base[0]:>6.1f} {e['p50'] / base[3]['p50']:>6.2f} "
              f"{b['p50'] / base[4]['p50']:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
