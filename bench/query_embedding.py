"""One query's embedding, torch against onnxruntime, quiet and with one core taken.

    python bench/query_embedding.py [--queries N] [--json PATH]

Three query paths over the same bundled MiniLM weights, each timed on the same ``N`` SciFact
queries (unique, one at a time, after a warm-up), in one run:

* ``torch default`` — sentence-transformers with torch's default intra-op threads;
* ``torch 1 thread`` — the same after ``torch.set_num_threads(1)``;
* ``onnx 1 thread`` — the engine's query path (:mod:`rcp_agentic.models.onnx_query`).

Each under two loads: ``quiet``, and ``one core busy`` (another process spinning on one
core, as a second job on a two-core server does). Prints p50 / p95 ms and each path's p50
as a ratio to ``torch default`` quiet. The torch paths run in child processes (torch's
thread count is set once per process); the busy process is started and stopped around each.

Then ingest throughput (quiet): ``--docs`` SciFact abstracts embedded in batches of 64 with
two intra-op threads, by torch (sentence-transformers, which sorts a batch list by length)
and by the ONNX export (the same length-sorted batches), in texts per second.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench import scifact  # noqa: E402


def _spin(stop: mp.Event) -> None:  # type: ignore[valid-type]
    while not stop.is_set():  # type: ignore[attr-defined]
        pass


def _time_path(path: str, queries: list[str], out: mp.Queue) -> None:  # type: ignore[type-arg]
    from rcp_agentic.models.embedder import SentenceTransformerEmbedder

    if path == "onnx 1 thread":
        emb = SentenceTransformerEmbedder(query_backend="onnx", query_threads=1)
    else:
        emb = SentenceTransformerEmbedder(query_backend="torch",
                                          torch_threads=1 if path == "torch 1 thread" else None)
    for q in queries[:10]:
        emb.embed_query(q)  # warm-up: model, kernels
    ms = []
    for q in queries:
        t0 = time.perf_counter()
        emb.embed_query(q)
        ms.append((time.perf_counter() - t0) * 1000)
    out.put(ms)


def _ingest_rate(path: str, texts: list[str], out: mp.Queue) -> None:  # type: ignore[type-arg]
    from rcp_agentic.models.embedder import SentenceTransformerEmbedder
    from rcp_agentic.models.onnx_query import load_or_export

    emb = SentenceTransformerEmbedder(torch_threads=2, ingest_nice=0)
    if path == "torch":
        run = emb.embed_documents
    else:
        encoder = load_or_export(emb.model_path, emb._load, threads=2)

        def run(batch: list[str]) -> np.ndarray:
            order = sorted(range(len(batch)), key=lambda i: -len(batch[i]))
            rows = [encoder.encode([batch[i] for i in order[j:j + 64]])
                    for j in range(0, len(order), 64)]
            out_ = np.empty((len(batch), rows[0].shape[1]), dtype=np.float32)
            out_[order] = np.concatenate(rows)
            return out_
    run(texts[:64])  # warm-up
    t0 = time.perf_counter()
    run(texts)
    out.put(len(texts) / (time.perf_counter() - t0))


def ingest_rate(path: str, texts: list[str]) -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_ingest_rate, args=(path, texts, out))
    child.start()
    rate = float(out.get())
    child.join()
    return rate


def measure(path: str, queries: list[str], busy: bool) -> list[float]:
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    spinner = ctx.Process(target=_spin, args=(stop,)) if busy else None
    if spinner:
        spinner.start()
    try:
        out = ctx.Queue()
        child = ctx.Process(target=_time_path, args=(path, queries, out))
        child.start()
        ms = out.get()
        child.join()
        return ms
    finally:
        if spinner:
            stop.set()
            spinner.join()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--docs", type=int, default=640, help="abstracts for the ingest rate")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    corpus, queries, _qrels = scifact.load_dataset(None, None)
    texts = list(dict.fromkeys(queries.values()))[:args.queries]
    rows = []
    for load in ("quiet", "one core busy"):
        for path in ("torch default", "torch 1 thread", "onnx 1 thread"):
            ms = measure(path, texts, busy=load != "quiet")
            rows.append({"load": load, "path": path, "p50_ms": round(float(np.median(ms)), 2),
                         "p95_ms": round(float(np.percentile(ms, 95)), 2), "n": len(ms)})
    base = next(r["p50_ms"] for r in rows if r["load"] == "quiet" and r["path"] == "torch default")
    print(f"query embedding, {len(texts)} unique SciFact queries, one at a time")
    print(f"{'load':<15}{'path':<16}{'p50 ms':>9}{'p95 ms':>9}{'p50 ÷ torch default quiet':>28}")
    for r in rows:
        print(f"{r['load']:<15}{r['path']:<16}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}"
              f"{r['p50_ms'] / base:>28.2f}")
    docs = list(corpus.values())[:args.docs]
    ingest = {path: round(ingest_rate(path, docs), 1) for path in ("torch", "onnx")}
    print(f"ingest, {len(docs)} abstracts, batches of 64, 2 threads: torch "
          f"{ingest['torch']} texts/s, onnx {ingest['onnx']} texts/s "
          f"({ingest['onnx'] / ingest['torch']:.2f}x)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "queries": len(texts), "ingest": ingest,
                                         "date": time.strftime("%Y-%m-%d")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
