"""The query-time LLM path under hostile callers and a hostile endpoint: this checkout against
the previous release (``--baseline``), side by side.

Real ``serve --http`` servers (no token: every caller anonymous, known by its address; the
bench binds its client sockets to distinct loopback addresses 127.0.0.x, so a fresh address
is a fresh anonymous caller) over the ``examples/wiki`` engine (graph and communities, built
once offline, copied for each server) with ``tests/hostile_llm.py``'s
:class:`HostileEndpoint` as their LLM (the endpoint's mode is switched between measurements
of one server). The key is a canary. What is measured:

1. **spend** (endpoint ``ok``): LLM calls the endpoint received per anonymous request of
   ``graph global``, ``graph drift``, ``query/transform`` (rewrite), ``retrieve`` with
   ``rewrite: "hyde"``, and what the answer says it spent (``usage.llm`` /
   ``_meta.llm`` / ``error.data.llm``); one ``POST /rcp`` batch of 64 ``graph global``
   (distinct questions, one caller): calls made, answers ok / -32011 / other, wall time;
   then (endpoint ``echo500``) 6 concurrent ``query/transform`` of one caller: calls made
   (retries multiply them).
2. **flood** (endpoint ``ok`` with ``delay=3``, and ``hang``; one fresh server each): a probe
   client sends ``retrieve`` (k=5, a new query each time) and ``ping`` back to back, first
   ``--quiet`` s with nothing else running, then ``--probe`` s while 50 concurrent
   ``query/transform`` (method hyde, ``_meta.deadlineMs`` 5000; 50 addresses, so the
   per-caller budget alone cannot absorb them) run: p50/p99 of each probe quiet and under
   flood, and flood p99 / quiet p99 (goal <= 3x); the LLM requests' answer time minus
   their deadline (max and p99; goal <= +1 s) and their answers by code.
3. **reply** (endpoint ``huge``, a 200 MB body): one ``query/transform``; the server's
   peak RSS (VmHWM in /proc/<pid>/status) before and after and the answer's code (goal:
   growth of a few MB, bounded by ``llm_max_reply_bytes``, 1 MiB). The client waits at most
   ``--reply-cap`` s (60) and the server is killed if its RSS passes ``--rss-kill-mb``.
4. **keys** (endpoints ``echo401`` then ``echo500``, which echo the request's headers, the
   ``Authorization`` header among them, in their error bodies): the four request kinds of 1
   against each; then occurrences of the key (raw, base64, ``Bearer <key>``) in every wire
   answer (headers and body) the server gave in this bench, its stdout+stderr, and every
   file of its engine folder (bytes). Goal 0.

Every client call has a timeout and every phase a cap, so a stalled baseline cannot hang the
bench. Each code runs from its own checkout (``cwd`` and ``PYTHONPATH`` = DIR, and
``rcp_agentic.graph`` / ``.raptor``, which the editable install maps to this checkout's
``graph/`` and ``raptor/``, taken from DIR's; the files imported are printed first). Nothing is asserted; the tables print the goals.
The machine's other load shows in the latencies: the tables print the load average.

    python bench/llm_hostile.py [--baseline DIR | --no-baseline] [--phases spend flood reply keys]
                                [--engine DIR] [--json out.json]

``--baseline`` defaults to /tmp/baseline when it exists. ``--engine DIR`` keeps the built
engine there (built when missing) for later runs.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import itertools
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the hostile endpoint (tests/hostile_llm.py)

from hostile_llm import HostileEndpoint

KEY = "sk-BENCH-hostile-" + secrets.token_hex(10)
QUESTION = "In which city was the group behind the single Midnight Harbor founded?"
PHASES = ("spend", "flood", "reply", "keys")
FLOOD_N = 50
DEADLINE_MS = 5000
FLOOD_CLIENT_TIMEOUT = 30.0
PROBE_TIMEOUT = 10.0
# Runs a module of the checkout in sys.argv[1] (the rest: the module and its arguments). The
# editable install maps ``rcp_agentic.graph`` and ``rcp_agentic.raptor`` to this checkout's
# ``graph/`` and ``raptor/``: for another checkout they must come from its own folders.
CHECKOUT = """
import importlib.util, sys
from pathlib import Path
_code = Path(sys.argv.pop(1))

class _Checkout:
    @staticmethod
    def find_spec(name, path=None, target=None):
        sub = {"rcp_agentic.graph": "graph", "rcp_agentic.raptor": "raptor"}.get(name)
        if sub is None:
            return None
        return importlib.util.spec_from_file_location(
            name, _code / sub / "__init__.py", submodule_search_locations=[str(_code / sub)])

sys.meta_path.insert(0, _Checkout)
sys.path.insert(0, str(_code))
"""
LAUNCH = CHECKOUT + """
import runpy
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
"""
WHERE = CHECKOUT + """
import rcp_agentic, rcp_agentic.graph, rcp_agentic.raptor, rcp_agentic.graph.build
print(rcp_agentic.__file__, rcp_agentic.graph.build.__file__, rcp_agentic.raptor.__file__)
"""
BUILD = """
import sys
from pathlib import Path
from rcp_agentic import Engine
with Engine(sys.argv[1], build_graph=True, community_max_size=3) as e:
    e.index_paths([Path(sys.argv[2])])
    assert e.wait_for_derived()
"""


def kinds(q: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The four query-time LLM request kinds, asking ``q``."""
    return [("graph global", "graph", {"op": "global", "query": q}),
            ("graph drift", "graph", {"op": "drift", "query": q}),
            ("query/transform rewrite", "query/transform", {"query": q, "method": "rewrite"}),
            ("retrieve hyde", "retrieve", {"query": q, "k": 2, "rewrite": "hyde"})]


# --- callers -----------------------------------------------------------------------------------

_addresses = itertools.count(2)
_address_lock = threading.Lock()


def new_caller() -> str:
    """A loopback address no request of this run came from yet: a new anonymous caller."""
    with _address_lock:
        n = next(_addresses)
    if n > 254 * 200:
        raise RuntimeError("out of loopback addresses")
    return f"127.0.{n // 254}.{n % 254 + 1}" if n >= 254 else f"127.0.0.{n}"


@dataclass
class Answer:
    """One HTTP exchange: seconds taken, the JSON-RPC answer (or why none) and the raw bytes."""

    seconds: float
    body: Any = None
    raw: bytes = b""
    headers: str = ""
    failure: str | None = None  # "timeout", "conn: ...", "http 500", ...

    @property
    def code(self) -> Any:
        """"ok", the JSON-RPC error code, or the failure."""
        if self.failure:
            return self.failure
        if isinstance(self.body, dict):
            return "ok" if "result" in self.body else self.body.get("error", {}).get("code")
        return "batch"

    def llm(self) -> dict[str, Any]:
        """What the answer says it spent on the LLM ({} when it does not say)."""
        return spent(self.body)


def spent(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        return {}
    if "result" in body and isinstance(body["result"], dict):
        res = body["result"]
        return (res.get("usage") or {}).get("llm") or (res.get("_meta") or {}).get("llm") or {}
    data = (body.get("error") or {}).get("data") or {}
    return data.get("llm") or {} if isinstance(data, dict) else {}


class Client:
    """JSON-RPC over HTTP to one server, from chosen loopback addresses; keeps every raw
    answer (for the key scan)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.wire: list[bytes] = []
        self._lock = threading.Lock()

    def post(self, path: str, body: Any, *, src: str = "127.0.0.1",
             timeout: float = 30.0) -> Answer:
        data = json.dumps(body).encode()
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout,
                                          source_address=(src, 0))
        try:
            conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
            headers = str(resp.headers)
            status = resp.status
        except TimeoutError:
            return Answer(time.perf_counter() - started, failure="timeout")
        except OSError as exc:
            return Answer(time.perf_counter() - started, failure=f"conn: {type(exc).__name__}")
        except http.client.HTTPException as exc:
            return Answer(time.perf_counter() - started, failure=f"http: {type(exc).__name__}")
        finally:
            conn.close()
        seconds = time.perf_counter() - started
        with self._lock:
            self.wire.append(headers.encode() + b"\n" + raw)
        try:
            parsed = json.loads(raw)
        except ValueError:
            return Answer(seconds, raw=raw, headers=headers, failure=f"http {status}")
        return Answer(seconds, parsed, raw, headers)

    def call(self, method: str, params: dict[str, Any], *, id_: Any = 1, **kw: Any) -> Answer:
        return self.post(f"/rcp/{method}", {"jsonrpc": "2.0", "id": id_, "method": method,
                                            "params": params}, **kw)


def concurrently(jobs: Sequence[Callable[[], Answer]], cap: float) -> list[Answer | None]:
    """Run ``jobs`` on threads at once; wait at most ``cap`` s in all (None: still running)."""
    out: list[Answer | None] = [None] * len(jobs)

    def run(i: int) -> None:
        out[i] = jobs[i]()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(jobs))]
    for t in threads:
        t.start()
    end = time.monotonic() + cap
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    return out


# --- servers -----------------------------------------------------------------------------------

def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def code_env(code_dir: Path) -> dict[str, str]:
    """This environment without engine overrides nor a token, importing ``code_dir``'s code."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCP_AGENTIC_")}
    env["PYTHONPATH"] = str(code_dir)
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


def imported_from(code_dir: Path) -> str:
    out = subprocess.run([sys.executable, "-c", WHERE, str(code_dir)], cwd=code_dir,
                         env=code_env(code_dir), capture_output=True, text=True, timeout=120,
                         check=False)
    return out.stdout.strip() or out.stderr.strip()[-300:]


class Server:
    """``serve --http --no-warm`` of ``code_dir``'s code over a copy of the engine, with
    ``upstream`` as its LLM; output to files in ``work``."""

    def __init__(self, code: str, code_dir: Path, engine: Path, upstream: HostileEndpoint,
                 work: Path) -> None:
        self.code = code
        self.upstream = upstream
        self.work = work
        self.engine = work / "engine"
        shutil.copytree(engine, self.engine)
        self.port = free_port()
        env = code_env(code_dir)
        env.update({"RCP_AGENTIC_LLM_BASE_URL": upstream.base_url, "RCP_AGENTIC_LLM_MODEL": "m",
                    "RCP_AGENTIC_LLM_API_KEY_ENV": "HOSTILE_KEY", "HOSTILE_KEY": KEY})
        self.out = (work / "stdout").open("wb")
        self.err = (work / "stderr").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, str(code_dir), "rcp_agentic.cli", "serve", "--http",
             "--engine", str(self.engine), "--port", str(self.port), "--no-warm"],
            cwd=code_dir, env=env, stdout=self.out, stderr=self.err)
        self.client = Client(self.port)
        self.started = time.monotonic()
        self.ready_seconds: float | None = None
        self.killed_for_rss = False

    def wait_ready(self, timeout: float = 300.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                tail = (self.work / "stderr").read_bytes()[-2000:].decode("utf-8", "replace")
                raise RuntimeError(f"{self.code} server exited: {tail}")
            if self.client.call("ping", {}, timeout=2).code == "ok":
                self.client.wire.clear()
                self.ready_seconds = time.monotonic() - self.started
                return
            time.sleep(0.3)
        raise RuntimeError(f"{self.code} server did not answer ping in {timeout} s")

    def status(self, field_: str) -> int | None:
        """A /proc/<pid>/status field in KiB (VmHWM, VmRSS), None once the process is gone."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith(field_ + ":"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        self.out.close()
        self.err.close()

    def output(self) -> bytes:
        return (self.work / "stdout").read_bytes() + (self.work / "stderr").read_bytes()


@contextmanager
def servers(specs: list[tuple[str, Path, str, dict[str, Any]]], engine: Path,
            work: Path) -> Iterator[dict[str, Server]]:
    """Servers named by ``specs`` (name, code dir, code label, endpoint kwargs), started at
    once (their imports overlap), each with its own endpoint; stopped on exit."""
    with ExitStack() as stack:
        made: dict[str, Server] = {}
        for name, code_dir, code, ep in specs:
            upstream = stack.enter_context(HostileEndpoint(**ep))
            # a client hanging up on it is expected here: no traceback on stderr
            upstream._server.handle_error = lambda *_a: None  # type: ignore[method-assign]
            srv = Server(code, code_dir, engine, upstream, work / name)
            stack.callback(srv.stop)
            made[name] = srv
        for srv in made.values():
            srv.wait_ready()
        # One retrieve each, all at once: the model loads (--no-warm) overlap, and every
        # measurement after this runs on a warm server.
        concurrently([partial(srv.client.call, "retrieve", {"query": "warm up", "k": 5},
                              timeout=180) for srv in made.values()], cap=200)
        for srv in made.values():
            srv.client.wire.clear()
            srv.ready_seconds = time.monotonic() - srv.started
        yield made


# --- statistics and tables ---------------------------------------------------------------------

def pct(values: list[float], p: float) -> float | None:
    """The nearest-rank ``p`` percentile."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def fmt(v: Any, nd: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int) and v < 0:  # a JSON-RPC error code
        return str(v)
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def ratio(a: Any, b: Any) -> str:
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
           for v in (a, b)) and a:
        return f"{b / a:.2f}"
    return "-"


def table(title: str, rows: list[tuple[str, Any, Any]], *, ratios: bool = True,
          goal: dict[str, str] | None = None) -> str:
    """A markdown table: metric | baseline | current | current/baseline | goal."""
    goal = goal or {}
    head = "| metric | baseline | current |" + (" cur/base |" if ratios else "") + " goal |"
    sep = "|---|---:|---:|" + ("---:|" if ratios else "") + "---|"
    lines = [f"**{title}**", "", head, sep]
    for name, base, cur in rows:
        cells = [name, fmt(base), fmt(cur)] + ([ratio(base, cur)] if ratios else [])
        cells.append(goal.get(name, ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def codes_str(answers: list[Answer | None]) -> str:
    c = Counter("running" if a is None else a.code for a in answers)
    return ", ".join(f"{k}: {v}" for k, v in sorted(c.items(), key=lambda kv: str(kv[0])))


def load() -> str:
    return "{:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


# --- 1. spend ----------------------------------------------------------------------------------

def settle(upstream: HostileEndpoint, seconds: float = 0.3) -> int:
    """The endpoint's request count once it stopped moving."""
    last = upstream.requests
    while True:
        time.sleep(seconds)
        if upstream.requests == last:
            return last
        last = upstream.requests


def phase_spend(srv: Server) -> dict[str, Any]:
    up, cl = srv.upstream, srv.client
    up.mode, up.delay = "ok", 0.0
    out: dict[str, Any] = {}
    for i in range(4):
        label, method, params = kinds(f"{QUESTION} (spend {i})")[i]
        before = settle(up)
        ans = cl.call(method, params, src=new_caller(), timeout=60)
        out[label] = {"calls": settle(up) - before, "reported": ans.llm().get("calls"),
                      "code": ans.code, "seconds": round(ans.seconds, 2)}
    before = settle(up)
    batch = [{"jsonrpc": "2.0", "id": i, "method": "graph",
              "params": {"op": "global", "query": f"{QUESTION} (batch {i})"}} for i in range(64)]
    ans = cl.post("/rcp", batch, src=new_caller(), timeout=150)
    items = ans.body if isinstance(ans.body, list) else []
    codes = Counter(("ok" if "result" in a else a.get("error", {}).get("code")) for a in items)
    out["batch"] = {"calls": settle(up) - before, "ok": codes.get("ok", 0),
                    "limited": codes.get(-32011, 0),
                    "other": sum(v for k, v in codes.items() if k not in ("ok", -32011)),
                    "answer": ans.code if not items else f"{len(items)} answers",
                    "reported": sum(spent(a).get("calls", 0) for a in items)
                    if any(spent(a) for a in items) else None,
                    "seconds": round(ans.seconds, 2)}
    up.mode = "echo500"
    before = settle(up)
    src = new_caller()
    jobs = [partial(cl.call, "query/transform", {"query": f"{QUESTION} (500 {i})",
                                                 "method": "rewrite"}, src=src, timeout=90, id_=i)
            for i in range(6)]
    started = time.monotonic()
    answers = concurrently(jobs, cap=95)
    out["echo500"] = {"calls": settle(up) - before, "codes": codes_str(answers),
                      "seconds": round(time.monotonic() - started, 2),
                      "messages": messages(answers),
                      "reported": [a.llm().get("calls") for a in answers if a is not None]}
    up.mode = "ok"
    return out


def print_spend(res: dict[str, dict[str, Any]]) -> str:
    b, c = res.get("baseline", {}), res.get("current", {})
    rows: list[tuple[str, Any, Any]] = []
    for label, _m, _p in kinds(""):
        rows.append((f"{label}: endpoint calls", g(b, label, "calls"), g(c, label, "calls")))
        rows.append((f"{label}: reported calls", g(b, label, "reported"), g(c, label, "reported")))
        rows.append((f"{label}: answer", g(b, label, "code"), g(c, label, "code")))
    for key, name in (("calls", "endpoint calls"), ("reported", "reported calls"),
                      ("ok", "answers ok"), ("limited", "answers -32011"),
                      ("other", "answers other"), ("seconds", "wall s")):
        rows.append((f"batch of 64 global: {name}", g(b, "batch", key), g(c, "batch", key)))
    rows.append(("echo500, 6 transforms: endpoint calls", g(b, "echo500", "calls"),
                 g(c, "echo500", "calls")))
    rows.append(("echo500, 6 transforms: answers", g(b, "echo500", "codes"),
                 g(c, "echo500", "codes")))
    rows.append(("echo500, 6 transforms: reported calls each", g(b, "echo500", "reported"),
                 g(c, "echo500", "reported")))
    rows.append(("echo500, 6 transforms: wall s", g(b, "echo500", "seconds"),
                 g(c, "echo500", "seconds")))
    return table("1. LLM spend per anonymous request (endpoint `ok`, then `echo500`)",
                 rows) + notes_of({k: g(v, "echo500") for k, v in res.items()}, "echo500")


def notes_of(res: dict[str, Any], what: str) -> str:
    """The first message per error code of each code's answers, as a list under a table."""
    lines = [f"- {code} {what} {k}: {v}" for code, d in res.items() if d
             for k, v in d.get("messages", {}).items()]
    return "\n\nFirst message per error code:\n" + "\n".join(lines) if lines else ""


def g(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


# --- 2. flood ----------------------------------------------------------------------------------

def probe(cl: Client, seconds: float, tag: str) -> dict[str, list[Any]]:
    """``retrieve`` (k=5, a new query each time) and ``ping`` back to back for ``seconds``;
    latencies in ms (a failed or timed-out probe counts its time and is also listed)."""
    src = new_caller()
    out: dict[str, list[Any]] = {"retrieve": [], "ping": [], "failed": []}
    end = time.monotonic() + seconds
    for i in itertools.count():
        if time.monotonic() >= end:
            break
        for name, method, params in (
                ("retrieve", "retrieve", {"query": f"Midnight Harbor {tag} {i}", "k": 5}),
                ("ping", "ping", {})):
            ans = cl.call(method, params, src=src, timeout=PROBE_TIMEOUT)
            out[name].append(ans.seconds * 1000)
            if ans.code != "ok":
                out["failed"].append(f"{name}: {ans.code}")
    return out


def phase_flood(srv: Server, mode: str, quiet: float, probing: float) -> dict[str, Any]:
    up, cl = srv.upstream, srv.client
    up.mode = "ok"
    cl.call("retrieve", {"query": "warm up again", "k": 5}, timeout=120)
    quiet_probes = probe(cl, quiet, "quiet")
    up.mode, up.delay = ("ok", 3.0) if mode == "ok3" else ("hang", 0.0)
    before = up.requests
    answers: list[Answer | None] = [None] * FLOOD_N

    def flood_one(i: int) -> None:
        answers[i] = cl.call("query/transform",
                             {"query": f"{QUESTION} (flood {i})", "method": "hyde",
                              "_meta": {"deadlineMs": DEADLINE_MS}},
                             src=new_caller(), timeout=FLOOD_CLIENT_TIMEOUT, id_=i)

    threads = [threading.Thread(target=flood_one, args=(i,), daemon=True) for i in range(FLOOD_N)]
    started = time.monotonic()
    threads_before = srv.status("Threads")
    for t in threads:
        t.start()
    flood_probes = probe(cl, probing, "flood")
    threads_probed = srv.status("Threads")
    for t in threads:
        t.join(max(0.0, started + FLOOD_CLIENT_TIMEOUT + 5 - time.monotonic()))
    over = [(a.seconds if a is not None else FLOOD_CLIENT_TIMEOUT) - DEADLINE_MS / 1000
            for a in answers]
    return {"quiet": quiet_probes, "flood": flood_probes, "over": over,
            "messages": messages(answers),
            "codes": codes_str(answers), "calls": up.requests - before,
            "timeouts": sum(1 for a in answers if a is None or a.code == "timeout"),
            "threads": f"{threads_before} / {threads_probed} / {srv.status('Threads')}",
            "load": load()}


def messages(answers: list[Answer | None]) -> dict[str, str]:
    """The first error message seen per error code (shortened)."""
    out: dict[str, str] = {}
    for a in answers:
        if a is not None and isinstance(a.body, dict) and "error" in a.body:
            out.setdefault(str(a.code), str(a.body["error"].get("message"))[:110])
    return out


def print_flood(res: dict[str, dict[str, Any]], mode: str) -> str:
    b, c = res.get("baseline", {}), res.get("current", {})
    rows: list[tuple[str, Any, Any]] = []
    goal: dict[str, str] = {}

    def both(fn: Callable[[dict[str, Any]], Any]) -> tuple[Any, Any]:
        return (fn(b) if b else None, fn(c) if c else None)

    def probe_pct(when: str, name: str, p: float) -> Callable[[dict[str, Any]], Any]:
        return lambda d: pct(d[when][name], p)

    def probe_counts(name: str) -> Callable[[dict[str, Any]], Any]:
        return lambda d: f"{len(d['quiet'][name])} / {len(d['flood'][name])}"

    def probe_ratio(name: str) -> Callable[[dict[str, Any]], Any]:
        def fn(d: dict[str, Any]) -> float | None:
            flood, quiet = pct(d["flood"][name], 99), pct(d["quiet"][name], 99)
            return round(flood / quiet, 2) if flood is not None and quiet else None
        return fn

    def over(p: float) -> Callable[[dict[str, Any]], Any]:
        return lambda d: pct(d["over"], p)

    for name in ("retrieve", "ping"):
        for when in ("quiet", "flood"):
            for p in (50, 99, 100):
                label = "max" if p == 100 else f"p{p}"
                rows.append((f"{name} {when} {label} ms", *both(probe_pct(when, name, p))))
        rows.append((f"{name} probes quiet / flood", *both(probe_counts(name))))
        key = f"{name} flood p99 / quiet p99"
        rows.append((key, *both(probe_ratio(name))))
        goal[key] = "<= 3"
    rows.append(("probes failed (flood)", *both(lambda d: len(d["flood"]["failed"]))))
    for p, label in ((100, "max"), (99, "p99"), (50, "p50")):
        key = f"LLM answer time - deadline, {label} s"
        rows.append((key, *both(over(p))))
        goal[key] = "<= +1" if p != 50 else ""
    rows.append((f"LLM answers of {FLOOD_N} by code", *both(lambda d: d["codes"])))
    rows.append(((f"LLM requests the client gave up on ({FLOOD_CLIENT_TIMEOUT:.0f} s; counted "
                  "at that time)"), *both(lambda d: d["timeouts"])))
    rows.append(("endpoint calls during the flood", *both(lambda d: d["calls"])))
    rows.append(("server threads: before / probes done / LLM answers in",
                 *both(lambda d: d["threads"])))
    rows.append(("load average (1/5/15 min) after", *both(lambda d: d["load"])))
    what = "`ok`, delay 3 s" if mode == "ok3" else "`hang`"
    notes = []
    for code, d in (("baseline", b), ("current", c)):
        if d:
            notes += [f"- {code} {k}: {v}" for k, v in d["messages"].items()]
            if d["flood"]["failed"]:
                notes.append(f"- {code} failed probes: {', '.join(d['flood']['failed'])}")
    return table(f"2. Flood of {FLOOD_N} concurrent anonymous query/transform (hyde, deadline "
                 f"{DEADLINE_MS} ms), endpoint {what}", rows, goal=goal) + (
        "\n\nFirst message per error code; failed probes:\n" + "\n".join(notes)
        if notes else "")


# --- 3. reply size -----------------------------------------------------------------------------

def phase_reply(srv: Server, cap: float, rss_kill_mb: int) -> dict[str, Any]:
    up, cl = srv.upstream, srv.client
    up.mode = "ok"
    cl.call("retrieve", {"query": "warm up", "k": 5}, timeout=120)  # the model in RSS first
    hwm_before = srv.status("VmHWM")
    calls, sent = up.requests, up.bytes_written
    up.mode = "huge"
    box: list[Answer] = []
    t = threading.Thread(target=lambda: box.append(cl.call(
        "query/transform", {"query": f"{QUESTION} (huge)", "method": "rewrite"},
        src=new_caller(), timeout=cap)), daemon=True)
    started = time.monotonic()
    t.start()
    peak_rss = 0
    while t.is_alive() and time.monotonic() - started < cap + 2:
        rss = srv.status("VmRSS") or 0
        peak_rss = max(peak_rss, rss)
        if rss > rss_kill_mb * 1024:
            srv.killed_for_rss = True
            hwm_kill = srv.status("VmHWM")
            srv.proc.kill()
            t.join(5)
            return {"hwm_before": hwm_before, "hwm_after": hwm_kill, "code":
                    f"killed at RSS {rss // 1024} MB", "seconds": time.monotonic() - started,
                    "bytes_sent": up.bytes_written - sent, "calls": up.requests - calls,
                    "alive": False}
        time.sleep(0.1)
    t.join(1)
    hwm_after = srv.status("VmHWM")
    ans = box[0] if box else None
    code = ans.code if ans else f"no answer in {cap:.0f} s"
    if ans and ans.code == "timeout":
        code = f"no answer in {cap:.0f} s"
    message = (ans.body or {}).get("error", {}).get("message") if ans and isinstance(
        ans.body, dict) else None
    up.mode = "ok"
    return {"hwm_before": hwm_before, "hwm_after": hwm_after, "code": code,
            "message": (message or "")[:120], "seconds": time.monotonic() - started,
            "bytes_sent": up.bytes_written - sent, "calls": up.requests - calls, "answer_bytes":
            len(ans.raw) if ans else None, "alive": srv.proc.poll() is None}


def print_reply(res: dict[str, dict[str, Any]]) -> str:
    b, c = res.get("baseline", {}), res.get("current", {})

    def mb(d: dict[str, Any], k: str) -> float | None:
        return round(d[k] / 1024, 1) if d and d.get(k) is not None else None

    def grow(d: dict[str, Any]) -> float | None:
        a, z = mb(d, "hwm_before"), mb(d, "hwm_after")
        return round(z - a, 1) if a is not None and z is not None else None

    rows = [("server VmHWM before, MB", mb(b, "hwm_before"), mb(c, "hwm_before")),
            ("server VmHWM after, MB", mb(b, "hwm_after"), mb(c, "hwm_after")),
            ("VmHWM growth, MB", grow(b), grow(c)),
            ("answer", g(b, "code"), g(c, "code")),
            ("answer message", g(b, "message"), g(c, "message")),
            ("answer time s", g(b, "seconds"), g(c, "seconds")),
            ("endpoint requests", g(b, "calls"), g(c, "calls")),
            ("endpoint body MB written", round(b["bytes_sent"] / 2**20, 1) if b else None,
             round(c["bytes_sent"] / 2**20, 1) if c else None),
            ("server alive after", g(b, "alive"), g(c, "alive"))]
    return table("3. One query/transform against a 200 MB reply (endpoint `huge`)", rows,
                 goal={"VmHWM growth, MB": "a few MB (cap 1 MiB)"})


# --- 4. keys -----------------------------------------------------------------------------------

def forms() -> dict[str, bytes]:
    return {"raw": KEY.encode(), "base64": base64.b64encode(KEY.encode()),
            "Bearer": f"Bearer {KEY}".encode()}


def count_key(data: bytes) -> int:
    return sum(data.count(f) for f in forms().values())


def phase_keys_requests(srv: Server) -> dict[str, Any]:
    up, cl = srv.upstream, srv.client
    out: dict[str, Any] = {}
    for mode in ("echo401", "echo500"):
        up.mode = mode
        before = up.requests
        src = new_caller()
        jobs = [partial(cl.call, m, p, src=src, timeout=90)
                for _l, m, p in kinds(f"{QUESTION} ({mode})")]
        answers = concurrently(jobs, cap=95)
        out[mode] = {"codes": codes_str(answers), "calls": settle(up) - before,
                     "messages": messages(answers)}
    up.mode = "ok"
    return out


def scan_keys(srv: Server) -> dict[str, Any]:
    """Key occurrences in the wire answers, the output and the engine folder (server stopped)."""
    srv.stop()
    wire = sum(count_key(w) for w in srv.client.wire)
    output = count_key(srv.output())
    files, hits = 0, []
    for path in srv.engine.rglob("*"):
        if path.is_file():
            files += 1
            n = count_key(path.read_bytes())
            if n:
                hits.append(f"{path.relative_to(srv.engine)}: {n}")
    return {"wire": wire, "answers": len(srv.client.wire), "output": output,
            "output_bytes": len(srv.output()), "files": files, "file_hits": sum(
                int(h.rsplit(": ", 1)[1]) for h in hits), "where": hits}


def print_keys(res: dict[str, dict[str, Any]]) -> str:
    b, c = res.get("baseline", {}), res.get("current", {})
    rows = []
    for mode in ("echo401", "echo500"):
        rows.append((f"{mode}: 4 request kinds, answers", g(b, mode, "codes"), g(c, mode, "codes")))
        rows.append((f"{mode}: endpoint calls", g(b, mode, "calls"), g(c, mode, "calls")))
    rows += [("key in wire answers", g(b, "wire"), g(c, "wire")),
             ("  (wire answers scanned)", g(b, "answers"), g(c, "answers")),
             ("key in server stdout+stderr", g(b, "output"), g(c, "output")),
             ("  (output bytes scanned)", g(b, "output_bytes"), g(c, "output_bytes")),
             ("key in engine folder files", g(b, "file_hits"), g(c, "file_hits")),
             ("  (files scanned)", g(b, "files"), g(c, "files"))]
    return table("4. The key (raw, base64, `Bearer <key>`) after `echo401` and `echo500` "
                 "(all four kinds; wire = every answer the server gave in phases 1, 3, 4)",
                 rows, ratios=False, goal={"key in wire answers": "0",
                                            "key in server stdout+stderr": "0",
                                            "key in engine folder files": "0"}) + "".join(
        notes_of({k: g(v, mode) for k, v in res.items()}, mode)
        for mode in ("echo401", "echo500"))


# --- main --------------------------------------------------------------------------------------

def build_engine(path: Path) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", BUILD, str(path), str(ROOT / "examples" / "wiki")],
                   cwd=ROOT, env=code_env(ROOT), check=True, timeout=900)
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    default_base = Path("/tmp/baseline")
    ap.add_argument("--baseline", type=Path,
                    default=default_base if (default_base / "rcp_agentic").is_dir() else None,
                    help="a checkout of the previous release (default /tmp/baseline if it "
                    "exists)")
    ap.add_argument("--no-baseline", action="store_true", help="measure this checkout only")
    ap.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    ap.add_argument("--engine", type=Path, help="keep the built engine here (built if missing)")
    ap.add_argument("--quiet", type=float, default=6.0,
                    help="seconds of quiet probes per server in phase 2 (default 6)")
    ap.add_argument("--probe", type=float, default=15.0,
                    help="seconds of probes under each flood in phase 2 (default 15)")
    ap.add_argument("--reply-cap", type=float, default=60.0,
                    help="seconds to wait for the answer in phase 3 (default 60)")
    ap.add_argument("--rss-kill-mb", type=int, default=6000,
                    help="kill a server whose RSS passes this in phase 3 (default 6000)")
    ap.add_argument("--json", type=Path, help="write the raw results here")
    args = ap.parse_args()
    run_started = time.monotonic()
    codes: dict[str, Path] = {"current": ROOT}
    if args.baseline and not args.no_baseline:
        codes = {"baseline": args.baseline.resolve(), "current": ROOT}
    for code, d in codes.items():
        print(f"{code}: rcp_agentic from {imported_from(d)}", flush=True)
    print(f"key canary: {KEY[:12]}... (random per run); load average {load()}; "
          f"{os.cpu_count()} cores", flush=True)

    results: dict[str, Any] = {}
    report: list[str] = []
    with tempfile.TemporaryDirectory(prefix="llm-hostile-") as tmp:
        work = Path(tmp)
        engine = args.engine or work / "engine"
        if not (engine / "engine.db").exists():
            print(f"building the wiki engine ({engine}) ...", flush=True)
            print(f"built in {build_engine(engine):.0f} s", flush=True)
        specs: list[tuple[str, Path, str, dict[str, Any]]] = []
        for code, d in codes.items():
            if {"spend", "reply", "keys"} & set(args.phases):
                specs.append((f"{code}-main", d, code, {"mode": "ok"}))
            if "flood" in args.phases:
                specs.append((f"{code}-flood-ok3", d, code, {"mode": "ok"}))
                specs.append((f"{code}-flood-hang", d, code, {"mode": "ok"}))
        print(f"starting {len(specs)} servers ...", flush=True)
        with servers(specs, engine, work) as srv:
            print("ready and warm in " + ", ".join(f"{n} {s.ready_seconds:.0f} s"
                                          for n, s in srv.items()), flush=True)

            def each(phase: str, fn: Callable[[Server], Any], name: str) -> dict[str, Any]:
                out: dict[str, Any] = {}
                for code in codes:
                    t0 = time.monotonic()
                    out[code] = fn(srv[f"{code}-{name}"])
                    print(f"  {phase} {code}: {time.monotonic() - t0:.0f} s", flush=True)
                results[phase] = out
                return out

            if "spend" in args.phases:
                report.append(print_spend(each("spend", phase_spend, "main")))
                print(report[-1] + "\n", flush=True)
            if "keys" in args.phases:
                results["keys"] = each("keys", phase_keys_requests, "main")
            if "reply" in args.phases:
                report.append(print_reply(each(
                    "reply", lambda s: phase_reply(s, args.reply_cap, args.rss_kill_mb), "main")))
                print(report[-1] + "\n", flush=True)
            if "keys" in args.phases:
                for code in codes:
                    results["keys"][code].update(scan_keys(srv[f"{code}-main"]))
                report.append(print_keys(results["keys"]))
                print(report[-1] + "\n", flush=True)
                for code in codes:
                    if results["keys"][code]["where"]:
                        print(f"  {code} key in: {results['keys'][code]['where']}")
            if "flood" in args.phases:
                for mode in ("ok3", "hang"):
                    for code in codes:  # the main servers are done: stop them first
                        if f"{code}-main" in srv:
                            srv[f"{code}-main"].stop()
                    run = partial(phase_flood, mode=mode, quiet=args.quiet, probing=args.probe)
                    report.append(print_flood(each(f"flood-{mode}", run, f"flood-{mode}"), mode))
                    for code in codes:
                        srv[f"{code}-flood-{mode}"].stop()
                    print(report[-1] + "\n", flush=True)
    print(f"total {time.monotonic() - run_started:.0f} s; load average {load()}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
