"""Write latency of ``index/add`` with every derived builder on (RAPTOR tree, graph, Leiden
communities): derived units built inline in each write against built in the background.

    python bench/write_latency.py [--base 300] [--writes 16] [--docs-per-write 3]

The base corpus is ``examples/`` (docs and wiki) plus the first ``--base`` HotpotQA
passages of the shared data (``$RCP_AGENTIC_DATA``, default ``../shared/data``), indexed
once inline with ``build_tree``, ``build_graph`` and communities on (cached under
``bench/.cache``). Each measurement starts from a fresh copy of it and makes ``--writes``
writes of ``--docs-per-write`` further passages each, one after the other, in one run for
both modes:

* ``in-process``: ``Engine.add_documents`` on an engine opened in this process;
* ``stdio``: ``index/add`` through :class:`rcp_agentic.client.RCPClient` over a real
  ``rcp-agentic serve --stdio`` subprocess (``RCP_AGENTIC_DERIVED_UPDATES`` set per mode),
  its model warmed by a first retrieve.

A third mode, ``no-builders``, opens the same copy with every builder off: the floor a
write costs by itself (chunking, embedding, the SQLite commit, Chroma's sync).

Reported per transport and mode: median and p95 of the write latencies (ms), and the time
from the first write's start to every derived kind reflecting the last write (inline: when
the last write returns; background: when ``wait_for_derived`` returns, or, over stdio, when
the engine's SQLite says no kind lags). Results go to ``bench/results/write_latency.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from metrics import percentiles  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "bench" / ".cache"
RESULTS = REPO / "bench" / "results" / "write_latency.json"
DATA = Path(os.environ.get("RCP_AGENTIC_DATA", REPO.parent / "shared" / "data"))
BUILDERS = {"build_tree": True, "build_graph": True, "graph_communities": True}
MODES = ("inline", "background", "no-builders")
NO_BUILDERS = {"build_tree": False, "build_graph": False}
DERIVED = ("tree-node", "node", "triplet", "community")


def passages() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in
            (DATA / "multihop" / "hotpotqa" / "corpus.jsonl").open(encoding="utf-8")]
    return [{"id": r["_id"], "title": r["title"], "text": f"{r['title']}\n\n{r['text']}"}
            for r in rows]


def base_engine(base: int) -> Path:
    """The cached base engine: examples/ and the first ``base`` passages, derived current."""
    from rcp_agentic import Engine

    path = CACHE / f"write-latency-base-{base}"
    done = path / "indexed.txt"
    if done.exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    with Engine(path, derived_updates="inline", **BUILDERS) as eng:
        eng.index_paths([REPO / "examples"])
        eng.add_documents(passages()[:base])
        assert not eng.lagging_builders()
    done.write_text(f"{base}\n")
    return path


def fresh_copy(base: Path, name: str) -> Path:
    target = CACHE / f"write-latency-run-{name}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(base, target)
    return target


def lagging(path: Path) -> list[str]:
    """The derived kinds behind the last document write, read straight from SQLite."""
    with sqlite3.connect(path / "engine.db") as db:
        info = dict(db.execute("SELECT key, value FROM info"))
    data = int(info.get("data_version", 0))
    return [k for k in DERIVED if int(info.get(f"derived.{k}.version", 0)) < data]


def summary(latencies: list[float], caught_up: float,
            reports: list[Any] | None = None) -> dict[str, Any]:
    pct = percentiles(latencies)
    extra = {} if reports is None else {
        "builder_runs": len(reports),
        "builder_commits": sum(1 for r in reports if r.version is not None),
        "contended_runs": sum(1 for r in reports if r.contended)}
    return {**extra, "writes": len(latencies), "median_ms": round(statistics.median(latencies), 1),
            "p95_ms": round(pct["p95"], 1), "mean_ms": round(pct["mean"], 1),
            "max_ms": round(max(latencies), 1),
            "first_write_to_all_derived_current_s": round(caught_up, 2),
            "latencies_ms": [round(x, 1) for x in latencies]}


def in_process(path: Path, mode: str, batches: list[list[dict[str, Any]]],
               embedder: Any) -> dict[str, Any]:
    from rcp_agentic import Engine

    options = NO_BUILDERS if mode == "no-builders" else {"derived_updates": mode}
    with Engine(path, embedder=embedder, **options) as eng:
        eng.retrieve("warm up", k=1)
        latencies = []
        reports = []
        first = time.perf_counter()
        for docs in batches:
            began = time.perf_counter()
            reports += eng.add_documents(docs).derived
            latencies.append((time.perf_counter() - began) * 1000)
        assert eng.wait_for_derived()
        caught_up = time.perf_counter() - first
        assert not eng.lagging_builders()
        if eng.catch_up is not None:  # background: what the worker ran
            reports = eng.catch_up.reports
    return summary(latencies, caught_up, reports if mode != "no-builders" else None)


def over_stdio(path: Path, mode: str, batches: list[list[dict[str, Any]]]) -> dict[str, Any]:
    from rcp_agentic.client import RCPClient

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if mode == "no-builders":
        env.update({"RCP_AGENTIC_BUILD_TREE": "false", "RCP_AGENTIC_BUILD_GRAPH": "false"})
    else:
        env["RCP_AGENTIC_DERIVED_UPDATES"] = mode
    with RCPClient.stdio(engine=path, env=env, cwd=str(REPO), timeout=600) as client:
        client.call("retrieve", {"query": "warm up", "k": 1})
        latencies = []
        first = time.perf_counter()
        for docs in batches:
            began = time.perf_counter()
            client.call("index/add", {"documents": docs})
            latencies.append((time.perf_counter() - began) * 1000)
        while mode != "no-builders" and lagging(path):
            time.sleep(0.05)
        caught_up = time.perf_counter() - first
    return summary(latencies, caught_up)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=int, default=300, help="HotpotQA passages in the base")
    parser.add_argument("--writes", type=int, default=16)
    parser.add_argument("--docs-per-write", type=int, default=3)
    args = parser.parse_args()
    from rcp_agentic.models.embedder import SentenceTransformerEmbedder

    started = time.perf_counter()
    base = base_engine(args.base)
    print(f"base engine ready ({time.perf_counter() - started:.0f} s): {base}", flush=True)
    rest = passages()[args.base:]
    n = args.docs_per_write
    batches = [rest[i * n:(i + 1) * n] for i in range(args.writes)]
    embedder = SentenceTransformerEmbedder()
    results: dict[str, Any] = {
        "base": {"examples": True, "hotpotqa_passages": args.base},
        "writes": args.writes, "docs_per_write": n, "builders": BUILDERS,
        "cpu_count": os.cpu_count(), "transports": {}}
    for transport in ("in-process", "stdio"):
        out = results["transports"].setdefault(transport, {})
        for mode in MODES:
            path = fresh_copy(base, f"{transport}-{mode}")
            if transport == "in-process":
                out[mode] = in_process(path, mode, batches, embedder)
            else:
                out[mode] = over_stdio(path, mode, batches)
            r = out[mode]
            if mode == "no-builders":  # nothing derived is built: the kinds stay behind
                r["first_write_to_all_derived_current_s"] = None
            current = r["first_write_to_all_derived_current_s"]
            print(f"{transport:10s} {mode:11s} median {r['median_ms']:8.1f} ms  p95 "
                  f"{r['p95_ms']:8.1f} ms  first write -> all derived current "
                  + ("-" if current is None else f"{current:.1f} s"), flush=True)
            shutil.rmtree(path, ignore_errors=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", "utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
