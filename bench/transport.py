"""What the RCP transports cost: retrieve over HTTP at 1, 8 and 32 concurrent clients, and stdio.

The same engine (the SciFact cache engine, 5,183 abstracts) answers the same
SciFact claims in-process, over HTTP (a uvicorn subprocess, one ``httpx`` client
per concurrent caller) and over stdio (a server subprocess, one request at a
time). Query vectors are warmed first on both sides, so the numbers measure
retrieval plus transport, not the embedding model. Every mode runs in the same
process run; ratios compare HTTP or stdio with in-process at the same
concurrency.

    python bench/transport.py [--engine bench/.cache/engine-scifact] [--queries 200]

Both server and clients share the machine's cores, so at high concurrency the
HTTP numbers include the client's own CPU time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from metrics import percentiles  # noqa: E402
from scifact import load_queries  # noqa: E402

from rcp_agentic import Engine  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PARAMS = {"k": 10, "mode": "hybrid"}


def summary(latencies: list[float], wall: float) -> dict[str, float]:
    pct = percentiles([t * 1000 for t in latencies], ps=(50, 99))
    return {"qps": len(latencies) / wall, "p50_ms": pct["p50"], "p99_ms": pct["p99"]}


def run_concurrent(call: Any, queries: list[str], clients: int) -> dict[str, float]:
    """``clients`` callers share the queries round-robin; latency per call, overall qps."""
    latencies: list[float] = []
    lock = threading.Lock()

    def worker(part: list[str]) -> None:
        session = call.session()
        mine = []
        for q in part:
            t0 = time.perf_counter()
            call(session, q)
            mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    parts = [queries[i::clients] for i in range(clients)]
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, parts))
    return summary(latencies, time.perf_counter() - start)


class InProcess:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def session(self) -> None:
        return None

    def __call__(self, _session: None, query: str) -> None:
        self.engine.retrieve_params({"query": query, **PARAMS})


class OverHTTP:
    def __init__(self, url: str) -> None:
        self.url = url
        self.ids = itertools.count(1)

    def session(self) -> httpx.Client:
        return httpx.Client(timeout=120)

    def __call__(self, client: httpx.Client, query: str) -> None:
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": "retrieve",
                "params": {"query": query, **PARAMS}}
        resp = client.post(f"{self.url}/rcp/retrieve", json=body)
        assert "result" in resp.json(), resp.text[:300]


def start_http(engine_dir: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http",
                             "--engine", str(engine_dir), "--port", str(port)], cwd=REPO,
                            stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            httpx.post(f"http://127.0.0.1:{port}/rcp/ping",
                       json={"jsonrpc": "2.0", "id": 0, "method": "ping"})
            return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError("the HTTP server did not start")


def stdio_round_trips(engine_dir: Path, queries: list[str]) -> list[float]:
    proc = subprocess.Popen([sys.executable, "-m", "rcp_agentic.cli", "serve", "--stdio",
                             "--engine", str(engine_dir)], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin and proc.stdout

    def call(i: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method,
                                     "params": params}).encode() + b"\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    call(0, "initialize", {"protocolVersion": 1})
    for i, q in enumerate(queries):  # warm the server's query-vector cache
        call(i + 1, "retrieve", {"query": q, **PARAMS})
    latencies = []
    for i, q in enumerate(queries):
        t0 = time.perf_counter()
        call(10_000 + i, "retrieve", {"query": q, **PARAMS})
        latencies.append(time.perf_counter() - t0)
    proc.stdin.close()
    proc.wait(timeout=60)
    return latencies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", default=str(REPO / "bench/.cache/engine-scifact"))
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--port", type=int, default=8791)
    ap.add_argument("--out", default=str(REPO / "bench/results/transport.json"))
    args = ap.parse_args()
    engine_dir = Path(args.engine)
    queries = list(load_queries().values())[:args.queries]
    out: dict[str, Any] = {"queries": len(queries), "params": PARAMS, "cores": os.cpu_count()}

    engine = Engine(engine_dir)
    local = InProcess(engine)
    for q in queries:  # warm this process's query-vector cache
        local(None, q)
    proc = start_http(engine_dir, args.port)
    try:
        remote = OverHTTP(f"http://127.0.0.1:{args.port}")
        run_concurrent(remote, queries, 4)  # warm the server's cache
        for clients in (1, 8, 32):
            a = run_concurrent(local, queries, clients)
            b = run_concurrent(remote, queries, clients)
            out[f"clients={clients}"] = {
                "in_process": a, "http": b, "p50_ratio": b["p50_ms"] / a["p50_ms"],
                "qps_ratio": b["qps"] / a["qps"]}
            print(f"{clients:>2} clients  in-process {a['qps']:7.1f} q/s p50 {a['p50_ms']:6.2f} "
                  f"p99 {a['p99_ms']:6.2f} ms | HTTP {b['qps']:7.1f} q/s p50 {b['p50_ms']:6.2f} "
                  f"p99 {b['p99_ms']:6.2f} ms | p50 x{b['p50_ms'] / a['p50_ms']:.2f}, "
                  f"throughput x{b['qps'] / a['qps']:.2f}", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    rt = stdio_round_trips(engine_dir, queries)
    base = run_concurrent(local, queries, 1)
    out["stdio"] = {**summary(rt, sum(rt)), "in_process_p50_ms": base["p50_ms"],
                    "overhead_p50_ms": statistics.median(rt) * 1000 - base["p50_ms"]}
    print(f"stdio       p50 {out['stdio']['p50_ms']:.2f} ms against {base['p50_ms']:.2f} ms "
          f"in-process: +{out['stdio']['overhead_p50_ms']:.2f} ms per round trip")
    engine.close()
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
