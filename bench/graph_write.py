"""Graph-recall retrieve right after a write: the graph reloaded whole vs followed (issue 24).

On the latency engines of ``bench/graph.py`` (``latency-engine-<small|large>-hashed``: a
~5k-chunk seeded subset and the ~50k-chunk SciFact + HotpotQA + 2Wiki corpus at 64/8,
``build_graph=True``, :class:`bench.graph.HashedEmbeddings` so the build does not wait for
MiniLM), a copy of each is opened with background derived updates and timed, in one run:

* warm: ``retrieve(q, k=10, graph_recall=True)`` over a few HotpotQA and 2Wiki questions,
  repeated (median);
* for each of ``--writes`` writes (alternately a new document and a replacement of an
  indexed one): the first graph-recall retrieve right after the write (the graph lags: the
  units covering the changed chunks are hidden), then the first one after the graph caught
  up (``wait_for_derived``);

first with ``Catalog.follow_writes = False`` (every new version's graph read whole and its
PageRank view built again, by the first read: the behaviour before) and then with it on
(patched from the last version by the commit, ``Catalog.follow``). With it on, a last phase
writes ``--writes`` more documents and retrieves back to back while each background build
runs: the reads' p50 / p90 / max, how long the build took and how long it paused for reads
(``rcp_agentic/read_first.py``). Prints the medians and writes
``bench/results/graph_write.json``. No timed assertion: numbers only. To compare with an
earlier checkout in the same run, run its own copy of this file with ``RCP_ROOT`` set to it.

    python bench/graph_write.py [--sizes small large] [--writes 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.graph import (
    LATENCY_CHUNKING,
    SETS,
    HashedEmbeddings,
    latency_corpora,
    latency_engine,
    load_set,
)
from rcp_agentic import Engine

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "graph_write.json"
SMALL = 5000


def questions(per_set: int) -> list[str]:
    """The first ``per_set`` HotpotQA and 2Wiki questions (they name entities)."""
    return [q["question"] for name in SETS for q in load_set(name)[1][:per_set]]


def timed(engine: Engine, query: str) -> float:
    t0 = time.perf_counter()
    engine.retrieve(query, k=10, graph_recall=True)
    return (time.perf_counter() - t0) * 1000


def write_docs(indexed: list[dict[str, Any]], spare: list[dict[str, Any]],
               n: int) -> list[dict[str, Any]]:
    """``n`` writes: alternately a document not indexed yet and a replacement of an
    indexed one (its text with a sentence added)."""
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append(spare[i])
        else:
            doc = indexed[i * 7 % len(indexed)]
            out.append({**doc, "text": doc["text"] + f" It was revised in {1900 + i}."})
    return out


def measure(engine: Engine, queries: list[str], writes: list[dict[str, Any]],
            follow: bool) -> dict[str, Any]:
    """Warm, right-after-write and after-catch-up graph-recall retrieve times (ms)."""
    engine.catalog.follow_writes = follow
    engine.wait_for_derived(3600)
    for q in queries:
        timed(engine, q)
    warm = [timed(engine, q) for _ in range(3) for q in queries]
    after, caught_up = [], []
    for i, doc in enumerate(writes):
        engine.add_documents([doc])
        after.append(timed(engine, queries[i % len(queries)]))
        engine.wait_for_derived(3600)
        caught_up.append(timed(engine, queries[(i + 1) % len(queries)]))
    out = {"warm_median_ms": statistics.median(warm),
           "after_write_median_ms": statistics.median(after),
           "after_catch_up_median_ms": statistics.median(caught_up),
           "after_write_ms": [round(x, 1) for x in after],
           "after_catch_up_ms": [round(x, 1) for x in caught_up]}
    out["after_write_over_warm"] = out["after_write_median_ms"] / out["warm_median_ms"]
    return out


def during_builds(engine: Engine, queries: list[str], writes: list[dict[str, Any]]
                  ) -> dict[str, Any]:
    """Graph-recall retrieves back to back while each write's background build runs."""
    engine.wait_for_derived(3600)
    reads: list[float] = []
    builds: list[float] = []
    paused = engine.read_first.paused_seconds
    for i, doc in enumerate(writes):
        done = threading.Event()
        t0 = time.perf_counter()
        engine.add_documents([doc])

        def catch_up(done: threading.Event = done) -> None:
            engine.wait_for_derived(3600)
            done.set()

        waiter = threading.Thread(target=catch_up)
        waiter.start()
        n = 0
        while not done.is_set():
            reads.append(timed(engine, queries[(i + n) % len(queries)]))
            n += 1
        waiter.join()
        builds.append(time.perf_counter() - t0)
    ordered = sorted(reads)
    return {"reads": len(reads), "read_p50_ms": statistics.median(reads),
            "read_p90_ms": ordered[int(0.9 * (len(ordered) - 1))], "read_max_ms": ordered[-1],
            "build_median_s": statistics.median(builds),
            "paused_for_reads_s": round(engine.read_first.paused_seconds - paused, 2)}


def run_size(label: str, docs: list[dict[str, Any]], spare: list[dict[str, Any]],
             queries: list[str], n_writes: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    base, record = latency_engine(label, docs, None, hashed=True)
    base.wait_for_derived(24 * 3600)
    path = base.path
    base.close()
    print(f"{label}: engine ready in {time.perf_counter() - t0:.0f} s ({record})", flush=True)
    size, overlap = LATENCY_CHUNKING
    with tempfile.TemporaryDirectory(prefix="graph-write-") as tmp:
        copy = Path(tmp) / "engine"
        shutil.copytree(path, copy)
        with Engine(copy, embedder=HashedEmbeddings(), build_graph=True, chunk_size=size,
                    chunk_overlap=overlap, derived_updates="background") as engine:
            chunks = sum(n for u, lv, n in engine.store.unit_kinds() if (u, lv) == ("chunk", 0))
            writes = write_docs(docs, spare, 3 * n_writes)
            result: dict[str, Any] = {"chunks": chunks, "documents": len(docs), "build": record}
            for name, follow, part in (("full reload", False, writes[:n_writes]),
                                       ("followed", True, writes[n_writes:2 * n_writes])):
                result[name] = measure(engine, queries, part, follow)
                print(f"{label} ({chunks} chunks) {name}: " + json.dumps(
                    {k: round(v, 2) for k, v in result[name].items()
                     if isinstance(v, float)}), flush=True)
            result["during builds"] = during_builds(engine, queries, writes[2 * n_writes:])
            print(f"{label} ({chunks} chunks) reads during builds: "
                  + json.dumps({k: round(v, 2) for k, v in result["during builds"].items()}),
                  flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["small", "large"],
                        choices=["small", "large"])
    parser.add_argument("--writes", type=int, default=5)
    parser.add_argument("--questions", type=int, default=4, help="per multi-hop set")
    args = parser.parse_args()
    corpus, subset = latency_corpora(SMALL)
    chosen = {d["id"] for d in subset}
    spare = [d for d in corpus if d["id"] not in chosen]
    queries = questions(args.questions)
    results: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for label in args.sizes:
        docs = subset if label == "small" else corpus
        extra = spare if label == "small" else [
            {**d, "id": f"{d['id']}-copy"} for d in subset]
        results[label] = run_size(label, docs, extra, queries, args.writes)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
