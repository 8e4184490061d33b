"""Cold start of ``rcp-agentic serve``: spawn to ready, spawn to first answer, and the first
request against warm ones — served lazily (``--no-warm``, the path before ``Engine.warm``)
and warmed, in the same run.

A copy of a graph engine with communities (``--engine``, default
``bench/.cache/communities-engine-hotpotqa``, ``bench/communities.py``'s; the copy is made
once per run and never written by the bench) is served by a real ``serve --stdio``
subprocess, one fresh server per (op, mode), for each op: ``retrieve`` (hybrid, k=10, with
``x-rcp-agentic-graphRecall``), ``graph`` ``local``, ``drift`` and ``global``. Each server is
sent ``initialize`` and the op's first request the moment it is spawned (they wait in its
stdin), then ``--warm`` more requests one by one, each a distinct HotpotQA question (the
same questions in both modes). Per server:

* ``ready_s``: spawn to the ``rcp-agentic: ready`` line on stderr;
* ``initialize_s`` / ``first_answer_s``: spawn to the answer of ``initialize`` / of the op's
  first request;
* ``first_ms``: that first request's own latency (from the ``initialize`` answer, after which
  the server reads it, to its answer); ``warm_ms``: the median of the next requests';
  ``first_over_warm``: their ratio (the issue's target: at most 2 when warmed).

``--http`` also runs ``serve --http`` once per mode with ``retrieve`` (spawn to ready, the
first request after the ready line, the warm median; the client's own first-request costs
are paid on a throwaway local server first).

    python bench/cold_start.py [--engine DIR] [--warm 5] [--http] [--ops retrieve local ...]

Results go to ``bench/results/cold_start.json``. The machine's other load shows in every
number; ratios compare the two modes within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data import data_path

REPO = Path(__file__).resolve().parents[1]
READY = "rcp-agentic: ready"
OPS: dict[str, tuple[str, dict[str, Any]]] = {
    "retrieve": ("retrieve", {"k": 10, "mode": "hybrid", "x-rcp-agentic-graphRecall": True}),
    "local": ("graph", {"op": "local", "k": 10}),
    "drift": ("graph", {"op": "drift", "k": 10}),
    "global": ("graph", {"op": "global", "k": 10}),
}
MODES = {"before": ["--no-warm"], "after": []}


class StderrWatch:
    """Reads a server's stderr on a thread: every line, and when the ready line came."""

    def __init__(self, stream: IO[bytes], started: float) -> None:
        self.lines: list[str] = []
        self.ready_at: float | None = None
        self.ready_line = ""
        self._started = started
        self._event = threading.Event()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip()
            self.lines.append(line)
            if line.startswith(READY) and self.ready_at is None:
                self.ready_at = time.perf_counter() - self._started
                self.ready_line = line
                self._event.set()
        self._event.set()

    def wait(self, timeout: float = 600) -> str:
        """The ready line (RuntimeError when the server exits or times out first)."""
        if not self._event.wait(timeout) or self.ready_at is None:
            raise RuntimeError("no ready line:\n" + "\n".join(self.lines[-20:]))
        return self.ready_line


def spawn(engine: Path, *args: str, **popen: Any) -> tuple[subprocess.Popen[bytes], float]:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "rcp_agentic.cli", "serve", *args,
                             "--engine", str(engine)], cwd=REPO, stderr=subprocess.PIPE,
                            **popen)
    return proc, started


def frame(i: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": i, "method": method,
                       "params": params}).encode() + b"\n"


def answer(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout is not None
    got: dict[str, Any] = json.loads(proc.stdout.readline())
    if "result" not in got:
        raise RuntimeError(f"error answer: {json.dumps(got)[:400]}")
    return got


def stdio_run(engine: Path, op: str, mode: str, questions: list[str]) -> dict[str, Any]:
    """One fresh ``serve --stdio`` answering ``op`` for each question (module doc)."""
    method, params = OPS[op]
    proc, started = spawn(engine, "--stdio", *MODES[mode], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None
    watch = StderrWatch(proc.stderr, started)
    try:
        proc.stdin.write(frame(0, "initialize", {"protocolVersion": 1})
                         + frame(1, method, {**params, "query": questions[0]}))
        proc.stdin.flush()
        answer(proc)
        initialized = time.perf_counter() - started
        answer(proc)
        first_answer = time.perf_counter() - started
        warm = []
        for i, q in enumerate(questions[1:], start=2):
            t0 = time.perf_counter()
            proc.stdin.write(frame(i, method, {**params, "query": q}))
            proc.stdin.flush()
            answer(proc)
            warm.append((time.perf_counter() - t0) * 1000)
        line = watch.wait(5)
    finally:
        proc.stdin.close()
        proc.wait(timeout=120)
    assert watch.ready_at is not None
    first_ms = (first_answer - initialized) * 1000
    return {"ready_s": round(watch.ready_at, 3), "initialize_s": round(initialized, 3),
            "first_answer_s": round(first_answer, 3), "first_ms": round(first_ms, 1),
            "warm_ms": round(statistics.median(warm), 1),
            "warm_all_ms": [round(t, 1) for t in warm],
            "first_over_warm": round(first_ms / statistics.median(warm), 2),
            "ready_line": line}


class _Ok(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def warm_client(client: httpx.Client) -> None:
    """One POST to a throwaway local server: the client's own first-request costs (imports,
    connection set-up) are paid before the server under test is timed."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client.post(f"http://127.0.0.1:{server.server_address[1]}/", json={})
    finally:
        server.shutdown()
        server.server_close()


def http_run(engine: Path, mode: str, questions: list[str]) -> dict[str, Any]:
    """One fresh ``serve --http --port 0``: spawn to ready, then ``retrieve`` per question."""
    method, params = OPS["retrieve"]
    proc, started = spawn(engine, "--http", "--port", "0", *MODES[mode],
                          stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    watch = StderrWatch(proc.stderr, started)
    try:
        line = watch.wait()
        url = line.split(") ", 1)[1].split(" ", 1)[0]
        times = []
        with httpx.Client(timeout=120) as client:
            warm_client(client)
            for i, q in enumerate(questions):
                t0 = time.perf_counter()
                got = client.post(f"{url}/{method}", json={
                    "jsonrpc": "2.0", "id": i, "method": method, "params": {**params, "query": q}})
                if "result" not in got.json():
                    raise RuntimeError(got.text[:400])
                times.append((time.perf_counter() - t0) * 1000)
        first_answer = watch.ready_at + times[0] / 1000 if watch.ready_at else None
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    warm = statistics.median(times[1:])
    return {"ready_s": round(watch.ready_at or 0, 3),
            "first_answer_s": round(first_answer or 0, 3), "first_ms": round(times[0], 1),
            "warm_ms": round(warm, 1), "warm_all_ms": [round(t, 1) for t in times[1:]],
            "first_over_warm": round(times[0] / warm, 2), "ready_line": line}


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """After-over-before ratios of the start-up and first-request numbers."""
    return {key: round(after[key] / before[key], 3) for key in
            ("ready_s", "first_answer_s", "first_ms") if before.get(key)}


def report(name: str, row: dict[str, Any]) -> None:
    for mode in MODES:
        r = row[mode]
        print(f"{name:<14} {mode:<6} ready {r['ready_s']:6.2f} s  first answer "
              f"{r['first_answer_s']:6.2f} s  first {r['first_ms']:8.1f} ms  warm median "
              f"{r['warm_ms']:8.1f} ms  first/warm {r['first_over_warm']:5.2f}", flush=True)
    print(f"{name:<14} after/before {row['after_over_before']}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", default=str(REPO / "bench/.cache/communities-engine-hotpotqa"))
    ap.add_argument("--warm", type=int, default=5, help="warm requests after the first")
    ap.add_argument("--http", action="store_true", help="also serve --http (retrieve)")
    ap.add_argument("--ops", nargs="+", choices=list(OPS), default=list(OPS),
                    help="the ops measured over stdio (default: all)")
    ap.add_argument("--out", default=str(REPO / "bench/results/cold_start.json"))
    args = ap.parse_args()
    rows = [json.loads(line) for line in
            data_path("multihop", "hotpotqa", "questions.jsonl").open(encoding="utf-8")]
    questions = [r["question"] for r in rows]
    per_op = args.warm + 1
    out: dict[str, Any] = {"engine": args.engine, "cores": os.cpu_count(), "warm": args.warm,
                           "questions": "HotpotQA questions.jsonl, distinct per request; the "
                           "same in both modes", "stdio": {}, "http": {}}
    with tempfile.TemporaryDirectory(prefix="cold-start-") as tmp:
        engine = Path(tmp) / "engine"
        shutil.copytree(args.engine, engine)
        for n, op in enumerate(OPS):
            if op not in args.ops:
                continue
            qs = questions[n * per_op:(n + 1) * per_op]
            row = {mode: stdio_run(engine, op, mode, qs) for mode in MODES}
            row["after_over_before"] = compare(row["before"], row["after"])
            out["stdio"][op] = row
            report(f"stdio {op}", row)
        if args.http:
            qs = questions[len(OPS) * per_op:(len(OPS) + 1) * per_op]
            row = {mode: http_run(engine, mode, qs) for mode in MODES}
            row["after_over_before"] = compare(row["before"], row["after"])
            out["http"]["retrieve"] = row
            report("http retrieve", row)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
