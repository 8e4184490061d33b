"""Load on a real ``rcp-agentic serve --http``: 64 clients, with writes, then under a slow-loris.

A fresh engine of SciFact abstracts (``--docs``, default 300) is served by a real
``serve --http`` subprocess on loopback (a bearer token set, as writes need one).
Three phases of ``--seconds`` each (default 60):

1. ``reads``: ``--clients`` concurrent clients (default 64), each on its own
   keep-alive connection, send ``retrieve`` (hybrid, k=10) with SciFact claims back
   to back;
2. ``reads+writes``: the same, plus one client sending ``index/add`` of 4 new
   abstracts-sized documents back to back;
3. ``reads+slow``: the same reads while ``--slow`` connections (default 1,000) are
   kept open sending an unfinished request head, as a slow-loris does (each one the
   server cuts off is reopened, within the phase).

For each phase: requests, throughput, p50/p99 latency, errors (any transport
failure, non-200 status or JSON-RPC error: must be 0), the server's RSS (VmRSS from
``/proc/<pid>/status``) at the start, peak and end; for the writes their count and
latency; for the slow-loris how many slow connections the server cut off.

    python bench/load.py [--seconds 60] [--clients 64] [--slow 1000] [--docs 300]

Clients and server share the machine's cores, so throughput includes the clients'
own CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from metrics import percentiles  # noqa: E402
from scifact import load_corpus, load_queries  # noqa: E402

from rcp_agentic import Engine  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TOKEN = "load-bench-token"
PARAMS = {"k": 10, "mode": "hybrid"}
SLOW_HEAD = b"POST /rcp/retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@dataclass
class Calls:
    """Latencies (ms) and failures of one kind of call."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""

    def fail(self, why: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or why[:300]


def rss_mb(pid: int) -> float:
    """The process's resident set size in MiB (VmRSS)."""
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


def start_server(engine_dir: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A ``serve --http`` subprocess on a free port (stderr to ``log``); its base URL, from
    the start-up line."""
    env = {**os.environ, "RCP_AGENTIC_TOKEN": TOKEN}
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http",
                                 "--engine", str(engine_dir), "--port", "0"], cwd=REPO,
                                env=env, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"serving RCP/1 on (http://\S+)/rcp", log.read_text())
        if found:
            return proc, found.group(1)
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the HTTP server did not start: {log.read_text()[-2000:]}")


async def timed_post(client: httpx.AsyncClient, url: str, body: dict[str, object],
                     calls: Calls) -> None:
    """POST one JSON-RPC request; record its latency, or the failure."""
    t0 = time.perf_counter()
    try:
        resp = await client.post(f"{url}/rcp/{body['method']}", json=body)
        if resp.status_code != 200 or "result" not in resp.json():
            calls.fail(f"HTTP {resp.status_code}: {resp.text}")
            return
    except (httpx.HTTPError, ValueError) as exc:
        calls.fail(f"{type(exc).__name__}: {exc}")
        return
    calls.latencies.append((time.perf_counter() - t0) * 1000)


async def reader(client: httpx.AsyncClient, url: str, queries: list[str], offset: int,
                 until: float, calls: Calls) -> None:
    i = offset
    while time.monotonic() < until:
        await timed_post(client, url, {"jsonrpc": "2.0", "id": i, "method": "retrieve",
                                       "params": {"query": queries[i % len(queries)], **PARAMS}},
                         calls)
        i += 1


async def writer(client: httpx.AsyncClient, url: str, texts: list[str], until: float,
                 calls: Calls) -> None:
    n = 0
    while time.monotonic() < until:
        docs = [{"id": f"load-{n + j}", "text": texts[(n + j) % len(texts)]} for j in range(4)]
        n += 4
        await timed_post(client, url, {"jsonrpc": "2.0", "id": n, "method": "index/add",
                                       "params": {"documents": docs}}, calls)


async def slow_loris(port: int, n: int, until: float, cut: list[int]) -> None:
    """Keep ``n`` connections open with an unfinished head; reopen each one the server cuts."""
    async def one() -> None:
        while time.monotonic() < until:
            try:
                reader_, writer_ = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            try:
                writer_.write(SLOW_HEAD)
                await writer_.drain()
                left = until - time.monotonic()
                if left > 0 and await asyncio.wait_for(reader_.read(), left) == b"":
                    cut[0] += 1
            except (asyncio.TimeoutError, OSError):
                pass
            finally:
                writer_.close()

    await asyncio.gather(*(one() for _ in range(n)))


async def warm(url: str, queries: list[str], clients: int = 8) -> None:
    """Every query once, so that every phase finds the models loaded and the query
    embeddings cached alike."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(timeout=120, headers=headers) as client:
        async def some(part: list[str]) -> None:
            for i, q in enumerate(part):
                body = {"jsonrpc": "2.0", "id": i, "method": "retrieve",
                        "params": {"query": q, **PARAMS}}
                (await client.post(f"{url}/rcp/retrieve", json=body)).raise_for_status()

        await asyncio.gather(*(some(queries[i::clients]) for i in range(clients)))


async def sample_rss(pid: int, until: float, samples: list[float]) -> None:
    while time.monotonic() < until:
        samples.append(rss_mb(pid))
        await asyncio.sleep(0.5)


async def phase(url: str, pid: int, queries: list[str], texts: list[str], *, seconds: float,
                clients: int, writes: bool, slow: int) -> dict[str, Any]:
    port = int(url.rsplit(":", 1)[1])
    reads, added, cut, rss = Calls(), Calls(), [0], [rss_mb(pid)]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=clients + 1, max_keepalive_connections=clients + 1)
    async with httpx.AsyncClient(timeout=60, headers=headers, limits=limits) as client:
        tasks = []
        if slow:  # the slow connections are in place before the clients start
            slow_until = time.monotonic() + seconds + 5
            tasks.append(asyncio.ensure_future(slow_loris(port, slow, slow_until, cut)))
            await asyncio.sleep(5)
        until = time.monotonic() + seconds
        tasks.append(asyncio.ensure_future(sample_rss(pid, until, rss)))
        if writes:
            tasks.append(asyncio.ensure_future(writer(client, url, texts, until, added)))
        started = time.monotonic()
        await asyncio.gather(*(reader(client, url, queries, i * 997, until, reads)
                               for i in range(clients)))
        wall = time.monotonic() - started
        await asyncio.gather(*tasks)
    rss.append(rss_mb(pid))
    out: dict[str, Any] = {"requests": len(reads.latencies) + reads.errors,
                           "qps": len(reads.latencies) / wall, "errors": reads.errors,
                           **percentiles(reads.latencies, ps=(50, 99)),
                           "rss_start": rss[0], "rss_peak": max(rss), "rss_end": rss[-1],
                           "first_error": reads.first_error}
    if writes:
        out.update(writes=len(added.latencies), write_errors=added.errors,
                   write_first_error=added.first_error,
                   **{f"write_{k}": v
                      for k, v in percentiles(added.latencies, ps=(50, 99)).items()})
    if slow:
        out.update(slow=slow, slow_cut=cut[0])
    return out


def report(args: argparse.Namespace, docs: int, queries: list[str],
           results: dict[str, dict[str, Any]]) -> str:
    lines = [f"# bench/load.py --seconds {args.seconds:g} --clients {args.clients} "
             f"--slow {args.slow} --docs {args.docs}",
             f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
             f"Python {platform.python_version()}; engine of {docs} SciFact abstracts; "
             f"retrieve {PARAMS} with {len(queries)} SciFact claims (each sent once before, "
             "to warm the query cache alike for every phase); serve --http defaults "
             "(header timeout 10 s, body timeout 30 s, keep-alive 10 s)",
             "# load average (1, 5, 15 min) at the end: "
             + ", ".join(f"{x:.1f}" for x in os.getloadavg()), "",
             f"{'phase':<14} {'requests':>8} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} "
             f"{'errors':>6} {'RSS MiB start/peak/end':>24}"]
    for name, r in results.items():
        rss = f"{r['rss_start']:.0f}/{r['rss_peak']:.0f}/{r['rss_end']:.0f}"
        lines.append(f"{name:<14} {r['requests']:>8} {r['qps']:>7.1f} {r['p50']:>8.1f} "
                     f"{r['p99']:>8.1f} {r['errors']:>6} {rss:>24}")
    lines.append("")
    for name, r in results.items():
        if "writes" in r:
            lines.append(f"{name}: index/add of 4 docs x {r['writes']} calls, p50 "
                         f"{r['write_p50']:.1f} ms, p99 {r['write_p99']:.1f} ms, errors "
                         f"{r['write_errors']}")
        if "slow" in r:
            lines.append(f"{name}: {r['slow']} slow connections held open; the server cut off "
                         f"{r['slow_cut']} unfinished heads (each reopened at once)")
        for key in ("first_error", "write_first_error"):
            if r.get(key):
                lines.append(f"{name}: first {key.replace('_', ' ')}: {r[key]}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--slow", type=int, default=1000, help="slow connections in phase 3")
    parser.add_argument("--docs", type=int, default=300, help="SciFact abstracts indexed")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "load.txt")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = args.slow + args.clients + 256
    if soft < wanted:  # the client side needs a descriptor per connection too
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    corpus = load_corpus(limit=args.docs, required_ids=[])
    queries = list(load_queries().values())
    texts = list(corpus.values())
    with tempfile.TemporaryDirectory(prefix="rcp-load-") as tmp:
        engine_dir = Path(tmp) / "engine"
        with Engine(engine_dir) as eng:
            eng.add_documents([{"id": f"sf-{k}", "text": v} for k, v in corpus.items()])
        proc, url = start_server(engine_dir, Path(tmp) / "server.log")
        try:
            asyncio.run(warm(url, queries))
            results = {}
            for name, writes, slow in (("reads", False, 0), ("reads+writes", True, 0),
                                       ("reads+slow", False, args.slow)):
                results[name] = asyncio.run(phase(url, proc.pid, queries, texts,
                                                  seconds=args.seconds, clients=args.clients,
                                                  writes=writes, slow=slow))
                print(f"{name}: {results[name]}", file=sys.stderr, flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    text = report(args, len(corpus), queries, results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
