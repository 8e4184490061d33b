"""Per-call overhead of the LangChain and LlamaIndex retrievers over direct engine calls.

    python bench/retrievers.py [--engine bench/.cache/engine-scifact] [--queries 200]

The same SciFact claims (k=10, hybrid, query vectors warmed) through: the engine
directly; the RCP client in process; the LangChain and LlamaIndex ``RCPRetriever``
in process; then over HTTP (a uvicorn subprocess): the RCP client and both
retrievers. Prints p50 per call and the overhead against the direct call of the
same transport, all measured in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scifact import load_queries  # noqa: E402
from transport import start_http  # noqa: E402

from rcp_agentic import Engine  # noqa: E402
from rcp_agentic.client import RCPClient  # noqa: E402
from rcp_agentic.integrations.langchain import RCPRetriever as LangChainRetriever  # noqa: E402
from rcp_agentic.integrations.llamaindex import RCPRetriever as LlamaRetriever  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
K = 10


def p50_ms(call: Callable[[str], Any], queries: list[str], rounds: int = 3) -> float:
    """Median per-call latency over ``rounds`` passes (the first pass warms caches)."""
    for q in queries:
        call(q)
    times = []
    for _ in range(rounds):
        for q in queries:
            t0 = time.perf_counter()
            call(q)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", default=str(REPO / "bench/.cache/engine-scifact"))
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--port", type=int, default=8795)
    ap.add_argument("--out", default=str(REPO / "bench/results/retrievers.json"))
    args = ap.parse_args()
    queries = list(load_queries().values())[:args.queries]
    engine = Engine(args.engine)
    out: dict[str, float] = {}

    def row(name: str, value: float, base: float | None) -> None:
        out[name] = value
        extra = "" if base is None else f"  overhead {value - base:+.2f} ms (x{value / base:.2f})"
        print(f"{name:<34} p50 {value:6.2f} ms{extra}", flush=True)

    direct = p50_ms(lambda q: engine.retrieve_params({"query": q, "k": K}), queries)
    row("engine.retrieve (direct)", direct, None)
    with RCPClient.in_process(engine) as client:
        row("RCPClient in-process", p50_ms(lambda q: client.retrieve(q, K), queries), direct)
    lc = LangChainRetriever.from_engine(engine, k=K)
    row("LangChain RCPRetriever in-process", p50_ms(lc.invoke, queries), direct)
    li = LlamaRetriever.from_engine(engine, k=K)
    row("LlamaIndex RCPRetriever in-process", p50_ms(li.retrieve, queries), direct)

    proc = start_http(Path(args.engine), args.port)
    url = f"http://127.0.0.1:{args.port}"
    try:
        with RCPClient.http(url) as client:
            http = p50_ms(lambda q: client.retrieve(q, K), queries)
            row("RCPClient over HTTP", http, None)
        lc_http = LangChainRetriever.from_url(url, k=K)
        row("LangChain RCPRetriever over HTTP", p50_ms(lc_http.invoke, queries), http)
        lc_http.close()
        li_http = LlamaRetriever.from_url(url, k=K)
        row("LlamaIndex RCPRetriever over HTTP", p50_ms(li_http.retrieve, queries), http)
        li_http.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    engine.close()
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
