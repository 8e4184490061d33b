"""A warm server (issue 24): ``Engine.warm`` loads what a first read would load lazily, leaves
every result as it was and costs nothing the second time; ``rcp-agentic serve`` warms before
it answers anything and says so in one ready line, over stdio and HTTP, with or without a
graph, and ``--no-warm`` serves at once.

Real engines (``examples/wiki`` with its graph and communities; the DOCS engine without a
graph) and real ``serve`` subprocesses.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from conftest import REPO, child_env, free_port

from rcp_agentic import Engine
from rcp_agentic.models.reranker import CrossEncoderReranker

WIKI = REPO / "examples" / "wiki"
QUESTION = "In which city was the group behind the single Midnight Harbor founded?"
READY = re.compile(r"^rcp-agentic: ready \((stdio|http)\)( http://\S+/rcp)? index v(\d+), "
                   r"(\d+) chunks, (graph \+ communities|graph|no graph), warmed in "
                   r"\d+\.\d s$", re.MULTILINE)
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": 1}}


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    """An engine over examples/wiki with its graph and communities (two levels), closed."""
    path = tmp_path_factory.mktemp("warm-graph") / "e"
    with Engine(path, embedder=embedder, build_graph=True, community_max_size=3) as eng:
        eng.index_paths([WIKI])
        assert eng.wait_for_derived()
        assert eng.communities() is not None
    return path


def _stable(wire: Any) -> Any:
    """A wire result without its timings (the only thing two runs may differ in)."""
    if isinstance(wire, dict):
        return {k: _stable(v) for k, v in wire.items() if k != "latencyMs"}
    if isinstance(wire, list):
        return [_stable(v) for v in wire]
    return wire


def _reads(eng: Engine) -> list[Any]:
    """Each read a server's first request may be, as wire results."""
    out: list[Any] = [eng.retrieve(QUESTION, k=5, graph_recall=True).to_wire()]
    for op in ("local", "drift", "global"):
        out.append(eng.graph(op, query=QUESTION, k=5).to_wire())
    out.append(eng.retrieve(QUESTION, k=3, unit="community", level=1).to_wire())
    return [_stable(w) for w in out]


def test_warm_leaves_every_result_as_it_was(graph_dir: Path, tmp_path: Path,
                                            embedder: Any) -> None:
    cold_dir, warm_dir = tmp_path / "cold", tmp_path / "warm"
    shutil.copytree(graph_dir, cold_dir)
    shutil.copytree(graph_dir, warm_dir)
    with Engine(cold_dir, embedder=embedder, catch_up=False) as eng:
        cold = _reads(eng)
    with Engine(warm_dir, embedder=embedder, catch_up=False) as eng:
        report = eng.warm()
        warm = _reads(eng)
    assert (report.graph, report.communities) == (True, True)
    assert warm == cold


def test_warming_twice_loads_nothing_again(graph_dir: Path, tmp_path: Path,
                                           embedder: Any) -> None:
    shutil.copytree(graph_dir, tmp_path / "e")
    with Engine(tmp_path / "e", embedder=embedder, catch_up=False) as eng:
        first = eng.warm()
        view, store = eng.graph_view(), eng.communities()
        chunks = eng.catalog.index([("chunk", 0)])
        second = eng.warm()
        assert eng.graph_view() is view and eng.communities() is store
        assert eng.catalog.index([("chunk", 0)]) is chunks
        assert second.chunks == first.chunks == eng.stats()["chunk"]
    assert second.version == first.version
    assert second.seconds < first.seconds


def test_an_engine_without_a_graph_warms_too(engine_dir: Path, tmp_path: Path,
                                             embedder: Any) -> None:
    shutil.copytree(engine_dir, tmp_path / "e")
    with Engine(tmp_path / "e", embedder=embedder, catch_up=False) as eng:
        report = eng.warm()
        assert (report.graph, report.communities) == (False, False)
        assert report.chunks == eng.stats()["chunk"]
        assert "no graph" in report.describe()


def test_a_reranker_that_cannot_load_is_a_note_not_a_failure(engine_dir: Path, tmp_path: Path,
                                                             embedder: Any) -> None:
    shutil.copytree(engine_dir, tmp_path / "e")
    missing = CrossEncoderReranker(tmp_path / "no-such-model")
    with Engine(tmp_path / "e", embedder=embedder, reranker=missing, catch_up=False) as eng:
        report = eng.warm()
    assert len(report.notes) == 1 and report.notes[0].startswith("reranker not loaded: ")
    assert report.describe().endswith(report.notes[0])


# --- the servers ------------------------------------------------------------------------------

def _available(stream: IO[bytes]) -> str:
    """What ``stream`` (a pipe) holds right now, without waiting for more."""
    os.set_blocking(stream.fileno(), False)
    try:
        return (stream.read() or b"").decode()
    finally:
        os.set_blocking(stream.fileno(), True)


@pytest.fixture()
def stdio_server(request: pytest.FixtureRequest) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(engine_dir: Path, *flags: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-m", "rcp_agentic.cli", "serve", "--stdio",
                                 "--engine", str(engine_dir), *flags], cwd=REPO,
                                env=child_env(), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=30)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream:
                stream.close()


@pytest.mark.parametrize("which", ["graph", "no graph"])
def test_stdio_says_ready_before_it_answers(which: str, graph_dir: Path, engine_dir: Path,
                                            stdio_server: Any) -> None:
    proc = stdio_server(graph_dir if which == "graph" else engine_dir)
    assert proc.stdin and proc.stdout and proc.stderr
    # Sent at once: they wait in the server's stdin while it warms.
    proc.stdin.write((json.dumps(INITIALIZE) + "\n" + json.dumps(
        {"jsonrpc": "2.0", "id": 2, "method": "graph" if which == "graph" else "retrieve",
         "params": {"query": QUESTION, "k": 3, **({"op": "drift"} if which == "graph" else {})}}
    ) + "\n").encode())
    proc.stdin.flush()
    first = json.loads(proc.stdout.readline())
    # The ready line was written before the first answer, so it is in the pipe already.
    stderr = _available(proc.stderr)
    ready = READY.search(stderr)
    assert ready, stderr
    assert ready.group(1) == "stdio" and ready.group(2) is None
    assert ready.group(5) == ("graph + communities" if which == "graph" else "no graph")
    assert first["result"]["protocolVersion"] == 1
    assert first["result"]["capabilities"]
    second = json.loads(proc.stdout.readline())
    assert second["result"]["hits"]
    assert second["result"]["indexVersion"] == f"v{ready.group(3)}"


def test_stdio_no_warm_serves_at_once(engine_dir: Path, stdio_server: Any) -> None:
    proc = stdio_server(engine_dir, "--no-warm")
    assert proc.stdin and proc.stdout and proc.stderr
    proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["result"]["protocolVersion"] == 1
    line = next(x for x in _available(proc.stderr).splitlines() if "ready" in x)
    assert re.fullmatch(r"rcp-agentic: ready \(stdio\) index v\d+, not warmed", line), line


def _post(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    req = urllib.request.Request(f"{url}/rcp/{method}", data=body.encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
    return answer


def test_http_says_ready_before_it_answers(graph_dir: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http",
                             "--engine", str(graph_dir), "--port", str(port)], cwd=REPO,
                            env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr
    try:
        deadline = time.monotonic() + 180
        while True:  # poll until it answers: nothing answers before the socket listens
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the HTTP server did not answer"
            try:
                answer = _post(url, "graph", {"op": "local", "query": QUESTION, "k": 3})
                break
            except OSError:
                time.sleep(0.2)
        stderr = _available(proc.stderr)
        assert f"rcp-agentic: serving RCP/1 on {url}/rcp\n" in stderr
        ready = READY.search(stderr)
        assert ready, stderr
        assert ready.group(1) == "http" and ready.group(2) == f" {url}/rcp"
        assert ready.group(5) == "graph + communities"
        assert answer["result"]["hits"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()
