"""Load on a real ``rcp-agentic serve --http``: unique queries at 1 to 64 clients, quiet, with
an ingest in the same server and with another process busy; then a slow-loris.

A fresh engine of SciFact abstracts (``--docs``, default 300) is served by a real
``serve --http`` subprocess on loopback (a bearer token set, as writes need one). Every
query is sent once in the whole run (SciFact claims, then sentences of abstracts the engine
does not hold, cut at 20 words), so each one embeds its query: no cache hit flatters a
number.

For each ``--clients`` count (default 1, 4, 16, 64; each client on its own keep-alive
connection sending ``retrieve`` hybrid k=10 back to back, ``--seconds`` per cell) under each
condition:

* ``quiet``: nothing else runs;
* ``ingest``: one more client sends ``index/add`` of 4 abstracts back to back to the same
  server (its writes' count and latency are reported);
* ``busy``: another process keeps one core busy (a second job on a two-core server).

Per cell: requests, throughput, p50/p99 latency, errors (any transport failure, non-200
status or JSON-RPC error: must be 0), the server's RSS (VmRSS) at start, peak and end. The
goal lines: p99 at 4 clients against the quiet single-client p50 (goal <= 3x) and the
throughput at 4 clients against 1, per condition. With ``--baseline DIR`` the same matrix runs
first against a server started from another checkout (the previous release), in the same run,
and each p50/p99 is also given as a ratio to it. A last phase holds ``--slow`` connections
open with an unfinished request head (a slow-loris) while 64 clients read.

    python bench/load.py [--seconds 12] [--clients 1,4,16,64] [--slow 1000] [--docs 300]
                         [--baseline DIR]

Clients and server share the machine's cores, so throughput includes the clients' own
CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import re
import resource
import shutil
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


def start_server(engine_dir: Path, log: Path,
                 root: Path = REPO) -> tuple[subprocess.Popen[bytes], str]:
    """A ``serve --http`` subprocess of the checkout at ``root`` on a free port (stderr to
    ``log``); its base URL, from the start-up line."""
    env = {**os.environ, "RCP_AGENTIC_TOKEN": TOKEN, "RCP_ROOT": str(root)}
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http",
                                 "--engine", str(engine_dir), "--port", "0"], cwd=root,
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


class UniqueQueries:
    """Each text once, in a fixed order (the same for every server measured in a run)."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.next = 0

    def take(self) -> str:
        if self.next >= len(self.texts):
            raise RuntimeError("out of unique queries: lower --seconds or add texts")
        self.next += 1
        return self.texts[self.next - 1]


def unique_queries(corpus_ids: set[str]) -> list[str]:
    """SciFact claims, then the sentences (8 words or more, cut at 20: the length of a
    multi-hop question; a query's embedding costs in proportion to its tokens) of the
    abstracts the engine does not hold, each text once."""
    seen: set[str] = set()
    out: list[str] = []
    texts = list(load_queries().values())
    for doc_id, text in load_corpus().items():
        if doc_id not in corpus_ids:
            texts.extend(re.split(r"(?<=[.!?])\s+", text))
    for text in texts:
        words = text.split()
        q = " ".join(words[:20])
        if len(words) >= 8 and q not in seen:
            seen.add(q)
            out.append(q)
    return out


async def reader(client: httpx.AsyncClient, url: str, queries: UniqueQueries, until: float,
                 calls: Calls) -> None:
    i = 0
    while time.monotonic() < until:
        i += 1
        await timed_post(client, url, {"jsonrpc": "2.0", "id": i, "method": "retrieve",
                                       "params": {"query": queries.take(), **PARAMS}}, calls)


async def writer(client: httpx.AsyncClient, url: str, texts: list[str], until: float,
                 calls: Calls, start: int) -> None:
    n = start
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


async def sample_rss(pid: int, until: float, samples: list[float]) -> None:
    while time.monotonic() < until:
        samples.append(rss_mb(pid))
        await asyncio.sleep(0.5)


def spin() -> None:
    """Keep one core busy (the ``busy`` condition's other process)."""
    while True:
        pass


@dataclass
class Cell:
    """One measurement: ``clients`` readers under ``condition`` for ``seconds``."""

    condition: str  # quiet | ingest | busy | slow
    clients: int
    seconds: float
    slow: int = 0


async def run_cell(url: str, pid: int, queries: UniqueQueries, texts: list[str],
                   cell: Cell, written: list[int]) -> dict[str, Any]:
    port = int(url.rsplit(":", 1)[1])
    reads, added, cut, rss = Calls(), Calls(), [0], [rss_mb(pid)]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=cell.clients + 1,
                          max_keepalive_connections=cell.clients + 1)
    busy = None
    if cell.condition == "busy":
        busy = mp.get_context("spawn").Process(target=spin, daemon=True)
        busy.start()
    try:
        async with httpx.AsyncClient(timeout=60, headers=headers, limits=limits) as client:
            tasks = []
            if cell.slow:  # the slow connections are in place before the clients start
                tasks.append(asyncio.ensure_future(
                    slow_loris(port, cell.slow, time.monotonic() + cell.seconds + 5, cut)))
                await asyncio.sleep(5)
            until = time.monotonic() + cell.seconds
            tasks.append(asyncio.ensure_future(sample_rss(pid, until, rss)))
            if cell.condition == "ingest":
                tasks.append(asyncio.ensure_future(
                    writer(client, url, texts, until, added, written[0])))
            started = time.monotonic()
            await asyncio.gather(*(reader(client, url, queries, until, reads)
                                   for _ in range(cell.clients)))
            wall = time.monotonic() - started
            await asyncio.gather(*tasks)
    finally:
        if busy is not None:
            busy.kill()
            busy.join()
    written[0] += 4 * (len(added.latencies) + added.errors)
    rss.append(rss_mb(pid))
    out: dict[str, Any] = {"condition": cell.condition, "clients": cell.clients,
                           "requests": len(reads.latencies) + reads.errors,
                           "qps": len(reads.latencies) / wall, "errors": reads.errors,
                           **percentiles(reads.latencies, ps=(50, 99)),
                           "rss_start": rss[0], "rss_peak": max(rss), "rss_end": rss[-1],
                           "first_error": reads.first_error}
    if cell.condition == "ingest":
        out.update(writes=len(added.latencies), write_errors=added.errors,
                   write_first_error=added.first_error,
                   **{f"write_{k}": v
                      for k, v in percentiles(added.latencies, ps=(50, 99)).items()})
    if cell.slow:
        out.update(slow=cell.slow, slow_cut=cut[0])
    return out


async def warm(url: str, texts: list[str]) -> None:
    """A few retrieves and one write that no cell repeats: models and indexes loaded."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(timeout=300, headers=headers) as client:
        for i, q in enumerate(texts[:-1]):
            body = {"jsonrpc": "2.0", "id": i, "method": "retrieve",
                    "params": {"query": q, **PARAMS}}
            (await client.post(f"{url}/rcp/retrieve", json=body)).raise_for_status()
        body = {"jsonrpc": "2.0", "id": 0, "method": "index/add",
                "params": {"documents": [{"id": "load-warm", "text": texts[-1]}]}}
        (await client.post(f"{url}/rcp/index/add", json=body)).raise_for_status()


def measure_server(label: str, root: Path, engine: Path, tmp: Path,
                   queries: list[str], texts: list[str], cells: list[Cell]
                   ) -> list[dict[str, Any]]:
    """Every cell against one fresh copy of ``engine`` served from the checkout ``root``."""
    copy = tmp / f"engine-{label}"
    shutil.copytree(engine, copy)
    proc, url = start_server(copy, tmp / f"server-{label}.log", root)
    stream = UniqueQueries(queries)
    written = [0]
    results = []
    try:
        asyncio.run(warm(url, [stream.take() for _ in range(9)]))
        for cell in cells:
            r = asyncio.run(run_cell(url, proc.pid, stream, texts, cell, written))
            r["server"] = label
            results.append(r)
            print(f"{label} {cell.condition} x{cell.clients}: "
                  f"{ {k: r[k] for k in ('qps', 'p50', 'p99', 'errors', 'rss_end')} }",
                  file=sys.stderr, flush=True)
        time.sleep(5)
        results.append({"server": label, "condition": "idle after", "rss_end": rss_mb(proc.pid),
                        "written": written[0]})
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return results


def goal_lines(rows: list[dict[str, Any]], label: str) -> list[str]:
    """p99 at 4 clients against the quiet single-client p50, and throughput 4 against 1."""
    mine = {(r["condition"], r.get("clients")): r for r in rows if r["server"] == label}
    quiet = mine.get(("quiet", 1))
    out = []
    for condition in CONDITIONS:
        one, four = mine.get((condition, 1)), mine.get((condition, 4))
        if quiet is None or one is None or four is None:
            continue
        ratio = four["p99"] / quiet["p50"]
        out.append(f"{label} {condition}: p99 at 4 clients {four['p99']:.1f} ms = "
                   f"{ratio:.2f}x the quiet single-client p50 {quiet['p50']:.1f} ms "
                   f"(goal <= 3x: {'met' if ratio <= 3 else 'NOT met'}); throughput 4 vs 1 "
                   f"client {four['qps']:.1f} / {one['qps']:.1f} req/s = "
                   f"{four['qps'] / one['qps']:.2f}x")
    return out


def report(args: argparse.Namespace, docs: int, rows: list[dict[str, Any]]) -> str:
    lines = [f"# bench/load.py --seconds {args.seconds:g} --clients {args.clients} "
             f"--slow {args.slow} --docs {args.docs}"
             + (f" --baseline {args.baseline}" if args.baseline else ""),
             f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
             f"Python {platform.python_version()}; engine of {docs} SciFact abstracts; "
             f"retrieve {PARAMS}, every query text sent once in the run (no cache hits); "
             "ingest: index/add of 4 abstracts back to back; busy: another process spinning "
             "on one core",
             "# load average (1, 5, 15 min) at the end: "
             + ", ".join(f"{x:.1f}" for x in os.getloadavg()), "",
             f"{'server':<9} {'condition':<11} {'clients':>7} {'requests':>8} {'req/s':>7} "
             f"{'p50 ms':>8} {'p99 ms':>8} {'errors':>6} {'RSS MiB start/peak/end':>24}"]
    base = {(r["condition"], r.get("clients")): r for r in rows if r["server"] == "baseline"}
    for r in rows:
        if "requests" not in r:
            lines.append(f"{r['server']:<9} {r['condition']:<11} RSS {r['rss_end']:.0f} MiB "
                         f"5 s after the last cell ({r['written']} documents written)")
            continue
        rss = f"{r['rss_start']:.0f}/{r['rss_peak']:.0f}/{r['rss_end']:.0f}"
        line = (f"{r['server']:<9} {r['condition']:<11} {r['clients']:>7} {r['requests']:>8} "
                f"{r['qps']:>7.1f} {r['p50']:>8.1f} {r['p99']:>8.1f} {r['errors']:>6} "
                f"{rss:>24}")
        b = base.get((r["condition"], r["clients"]))
        if b is not None and r["server"] != "baseline":
            line += (f"   p50 {r['p50'] / b['p50']:.2f}x p99 {r['p99'] / b['p99']:.2f}x "
                     f"req/s {r['qps'] / b['qps']:.2f}x baseline")
        lines.append(line)
    lines.append("")
    for label in dict.fromkeys(r["server"] for r in rows):
        lines.extend(goal_lines(rows, label))
    for r in rows:
        name = f"{r['server']} {r['condition']} x{r.get('clients')}"
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


CONDITIONS = ("quiet", "ingest", "busy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=12.0, help="length of each cell")
    parser.add_argument("--clients", default="1,4,16,64", help="client counts, comma-separated")
    parser.add_argument("--slow", type=int, default=1000,
                        help="slow connections in the last phase (0: no such phase)")
    parser.add_argument("--docs", type=int, default=300, help="SciFact abstracts indexed")
    parser.add_argument("--baseline", type=Path,
                        help="a checkout of the previous release, measured first in this run")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "load.txt")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = args.slow + 64 + 256
    if soft < wanted:  # the client side needs a descriptor per connection too
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    counts = [int(c) for c in args.clients.split(",")]
    cells = [Cell(c, n, args.seconds) for c in CONDITIONS for n in counts]
    corpus = load_corpus(limit=args.docs, required_ids=[])
    queries = unique_queries(set(corpus))
    texts = list(corpus.values())
    servers = [("baseline", args.baseline)] if args.baseline else []
    servers.append(("current", REPO))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rcp-load-") as tmp:
        engine_dir = Path(tmp) / "engine"
        with Engine(engine_dir) as eng:
            eng.add_documents([{"id": f"sf-{k}", "text": v} for k, v in corpus.items()])
        for label, root in servers:
            mine = cells + ([Cell("slow", 64, args.seconds, args.slow)]
                            if args.slow and label == "current" else [])
            rows.extend(measure_server(label, root.resolve(), engine_dir, Path(tmp),
                                       queries, texts, mine))
    text = report(args, len(corpus), rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print(text)


if __name__ == "__main__":
    main()
