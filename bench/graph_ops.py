"""Latency of the community graph ops (``global``, ``drift``): cold and warm, under deadlines,
and the CPU a server still spends after its client hangs up.

    python bench/graph_ops.py [--engines small large] [--baseline-python PY] [--rounds 10]

Engines (built once under ``bench/.cache``; ``build_graph=True``, communities on):

* ``small`` — HotpotQA's 1,971 passages (≈2.3k chunks), the default MiniLM embedder, two
  tenants (``meta.tenant`` a/b alternating), built by this script;
* ``large`` — the ≈46k-chunk latency corpus of ``bench/graph.py latency`` (SciFact + both
  multi-hop sets at 64/8 tokens) with its seeded hashed embeddings (so report points embed
  in no time: its cold numbers are the graph's and the stores' part only).

Each measurement runs in a fresh process (``cold``: the first call opens the graph, the
communities and the unit indexes), for the code of this checkout and, with
``--baseline-python``, for another checkout's interpreter (its editable install) in the same
run, alternating. Printed per engine and code: the cold first ``global`` and ``drift``;
the warm p50 of ``--rounds`` distinct questions (first tenant-a filtered on ``small``); a
cold ``global`` with ``_meta.deadlineMs`` = 1000 once a retrieve has loaded the model (its
answer code and wall time: report point vectors and the community index are still cold); and, on
``small`` over a real ``serve --http`` past a first retrieve (the model loaded), the
server CPU seconds spent in the 10 s after a client that gave up at 0.3 s hung up on a
cold ``global``. Results merge into
``bench/results/graph_ops.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "bench" / ".cache"
RESULTS = ROOT / "bench" / "results" / "graph_ops.json"
DATA = Path(os.environ.get("RCP_AGENTIC_DATA", ROOT.parent / "shared" / "data"))
TENANT_A = {"field": "tenant", "op": "eq", "value": "a"}


def small_dir() -> Path:
    return CACHE / "graph-ops-small"


def large_dir() -> Path:
    return CACHE / "latency-engine-large-hashed"


def questions(n: int) -> list[str]:
    rows = [json.loads(line) for line in
            (DATA / "multihop" / "hotpotqa" / "questions.jsonl").open(encoding="utf-8")]
    return [r["question"] for r in rows[:n]]


def build_small() -> None:
    from rcp_agentic import Engine

    path = small_dir()
    done = path / "indexed.txt"
    if done.exists():
        return
    rows = [json.loads(line) for line in
            (DATA / "multihop" / "hotpotqa" / "corpus.jsonl").open(encoding="utf-8")]
    docs = [{"id": r["_id"], "title": r["title"], "text": f"{r['title']}\n\n{r['text']}",
             "meta": {"tenant": "ab"[i % 2]}} for i, r in enumerate(rows)]
    engine = Engine(path, build_graph=True)
    engine.add_documents(docs)
    engine.close()
    done.write_text(f"{len(docs)}\n")


def open_engine(which: str) -> Any:
    from rcp_agentic import Engine

    if which == "small":
        return Engine(small_dir())
    sys.path.insert(0, str(ROOT))  # after rcp_agentic is imported: the code under test stays
    from bench.graph import HashedEmbeddings

    return Engine(large_dir(), embedder=HashedEmbeddings())


def _rpc(rpc: Any, method: str, params: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    out = rpc.handle({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    return (time.perf_counter() - t0) * 1000.0, out


def phase_latency(which: str, rounds: int) -> dict[str, Any]:
    """Cold first global and drift, then warm p50s (one fresh process)."""
    from rcp_agentic.protocol.dispatcher import Dispatcher

    t0 = time.perf_counter()
    engine = open_engine(which)
    opened = (time.perf_counter() - t0) * 1000.0
    rpc = Dispatcher(engine, stateless=True)
    qs = questions(rounds + 1)
    filt = {"filter": TENANT_A} if which == "small" else {}
    out: dict[str, Any] = {"open_ms": round(opened, 1)}
    ms, ans = _rpc(rpc, "graph", {"op": "global", "query": qs[0], **filt})
    out["global_cold_ms"] = round(ms, 1)
    out["global_cold_ok"] = "result" in ans
    ms, ans = _rpc(rpc, "graph", {"op": "drift", "query": qs[0], **filt})
    out["drift_cold_ms"] = round(ms, 1)
    for op in ("global", "drift"):
        times = [_rpc(rpc, "graph", {"op": op, "query": q, **filt})[0] for q in qs[1:]]
        out[f"{op}_warm_p50_ms"] = round(statistics.median(times), 1)
    engine.close()
    return out


def phase_deadline(which: str) -> dict[str, Any]:
    """A cold global with ``_meta.deadlineMs`` 1000 (one fresh process)."""
    from rcp_agentic.protocol.dispatcher import Dispatcher

    engine = open_engine(which)
    rpc = Dispatcher(engine, stateless=True)
    _rpc(rpc, "retrieve", {"query": "warm up", "k": 1})  # loads the model: the op's cold part
    # (report point vectors, the community index) is what is left
    ms, ans = _rpc(rpc, "graph", {"op": "global", "query": questions(1)[0],
                                  "_meta": {"deadlineMs": 1000}})
    engine.close()
    code = ans["error"]["code"] if "error" in ans else "result"
    return {"deadline_1000_ms": round(ms, 1), "deadline_1000_answer": code}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def phase_hangup(python: str) -> dict[str, Any]:
    """Server CPU after a client hangs up on a cold global (real ``serve --http``)."""
    import httpx
    import psutil

    port, token = _free_port(), "bench-token"
    proc = subprocess.Popen([python, "-m", "rcp_agentic.cli", "serve", "--http", "--engine",
                             str(small_dir()), "--port", str(port)],
                            env={**os.environ, "RCP_AGENTIC_TOKEN": token},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/rcp"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                httpx.post(f"{url}/ping", json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
                           headers=headers, timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.3)
        # The model loads with the first query: before the measured request.
        httpx.post(f"{url}/retrieve", json={"jsonrpc": "2.0", "id": 0, "method": "retrieve",
                                            "params": {"query": "warm up", "k": 1}},
                   headers=headers, timeout=120)
        ps = psutil.Process(proc.pid)
        time.sleep(1.0)
        before = sum(ps.cpu_times()[:2])
        body = {"jsonrpc": "2.0", "id": 1, "method": "graph",
                "params": {"op": "global", "query": questions(1)[0]}}
        try:
            httpx.post(f"{url}/graph", json=body, headers=headers, timeout=0.3)
            gave_up = False
        except httpx.TimeoutException:
            gave_up = True
        at_hangup = sum(ps.cpu_times()[:2])
        time.sleep(10.0)
        after = sum(ps.cpu_times()[:2])
        return {"hangup_client_gave_up": gave_up,
                "hangup_cpu_before_s": round(at_hangup - before, 2),
                "hangup_cpu_after_s": round(after - at_hangup, 2)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run_phase(python: str, phase: str, which: str, rounds: int) -> dict[str, Any]:
    cmd = [python, str(Path(__file__).resolve()), "--phase", phase, "--engines", which,
           "--rounds", str(rounds)]
    got = subprocess.run(cmd, capture_output=True, text=True, cwd="/", check=False)
    if got.returncode != 0:
        raise RuntimeError(f"{phase} {which} failed: {got.stderr[-2000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", nargs="+", default=["small", "large"])
    ap.add_argument("--baseline-python", default=None)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.phase:
        which = args.engines[0]
        if args.phase == "latency":
            print(json.dumps(phase_latency(which, args.rounds)))
        elif args.phase == "deadline":
            print(json.dumps(phase_deadline(which)))
        else:
            print(json.dumps(phase_hangup(sys.executable)))
        return 0
    if "small" in args.engines:
        build_small()
    if "large" in args.engines and not (large_dir() / "indexed.json").exists():
        raise SystemExit("build the large engine first: python bench/graph.py latency "
                         "--corpora large (hashed)")
    codes = {"this": sys.executable}
    if args.baseline_python:
        codes["baseline"] = args.baseline_python
    results: dict[str, Any] = {}
    for which in args.engines:
        for code, python in codes.items():
            row: dict[str, Any] = {}
            row.update(run_phase(python, "latency", which, args.rounds))
            row.update(run_phase(python, "deadline", which, args.rounds))
            if which == "small":
                row.update(run_phase(python, "hangup", which, args.rounds))
            results[f"{which}/{code}"] = row
            print(f"{which:6} {code:9} " + "  ".join(f"{k}={v}" for k, v in row.items()),
                  flush=True)
    if "baseline" in codes:
        for which in args.engines:
            a, b = results[f"{which}/this"], results[f"{which}/baseline"]
            ratios = {k: round(a[k] / b[k], 2) for k in a
                      if k.endswith("_ms") and isinstance(b.get(k), (int, float)) and b[k]}
            print(f"{which:6} this/baseline " + "  ".join(f"{k}={v}" for k, v in ratios.items()))
    stored = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    stored.update({"date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, **results})
    RESULTS.write_text(json.dumps(stored, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    # As a script, derived units are built inside each write (as before background
    # updates): this bench reads each build's report and queries the units right after
    # the write. Set here, not on import, so a module importing this one keeps its mode.
    os.environ.setdefault("RCP_AGENTIC_DERIVED_UPDATES", "inline")
    raise SystemExit(main())
