"""``serve --http`` with a hostile LLM endpoint configured (tests/hostile_llm.py), driven by an
anonymous client over real HTTP: the key never reaches the wire or the server's output,
query-time LLM work is limited per caller (-32011 with a retry hint, ``usage.llm`` saying
what a request spent), and requests that need no LLM never wait behind ones that do."""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, free_port, running_server
from hostile_llm import HostileEndpoint

from rcp_agentic import Engine

KEY = "sk-CANARY-wire-5e8d2c7a1b9f"
QUESTION = "In which city was the group behind the single Midnight Harbor founded?"


@pytest.fixture(scope="module")
def engine_dir(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    """The wiki example with its graph and communities, built offline and closed."""
    path = tmp_path_factory.mktemp("hostile-llm") / "e"
    with Engine(path, embedder=embedder, build_graph=True, community_max_size=3) as eng:
        eng.index_paths([REPO / "examples" / "wiki"])
        assert eng.wait_for_derived()
    return path


@contextmanager
def serving(engine_dir: Path, upstream: HostileEndpoint, **env: str) -> Iterator[tuple[str, Any]]:
    """``serve --http`` (no token: every caller anonymous) with ``upstream`` as its LLM."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    environ = {**os.environ, "RCP_AGENTIC_LLM_BASE_URL": upstream.base_url,
               "RCP_AGENTIC_LLM_MODEL": "m", "RCP_AGENTIC_LLM_API_KEY_ENV": "HOSTILE_KEY",
               "HOSTILE_KEY": KEY, **env}
    environ.pop("RCP_AGENTIC_TOKEN", None)

    def ready() -> bool:
        try:
            return call(url, "ping", {}, timeout=1)["result"] == {}
        except OSError:
            return False

    with running_server([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http",
                         "--engine", str(engine_dir), "--port", str(port), "--no-warm"],
                        ready, timeout=120, env=environ) as proc:
        yield url, proc


def call(url: str, method: str, params: dict[str, Any], *, timeout: float = 60,
         id_: Any = 1) -> Any:
    body = {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}
    return post(url, body, path=f"/rcp/{method}", timeout=timeout)


def post(url: str, body: Any, *, path: str = "/rcp", timeout: float = 60) -> Any:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def leaks(text: str) -> list[str]:
    forms = [KEY, base64.b64encode(KEY.encode()).decode(), f"Bearer {KEY}"]
    return [f for f in forms if f in text]


LLM_REQUESTS = [
    ("query/transform", {"query": QUESTION, "method": "rewrite"}),
    ("graph", {"op": "global", "query": QUESTION}),
    ("graph", {"op": "drift", "query": QUESTION}),
    ("retrieve", {"query": QUESTION, "k": 2, "rewrite": "hyde"}),
]


def test_an_endpoint_echoing_the_key_never_puts_it_on_the_wire(engine_dir: Path) -> None:
    with HostileEndpoint("echo401") as upstream, serving(engine_dir, upstream) as (url, proc):
        answers = [call(url, m, p) for m, p in LLM_REQUESTS]
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert upstream.requests >= len(LLM_REQUESTS)  # every request reached the endpoint
    text = json.dumps(answers)
    assert not leaks(text), text
    assert not leaks(err.decode("utf-8", "replace"))
    for answer in answers:
        error = answer["error"]
        assert error["code"] == -32010 and "HTTP 401" in error["message"], answer
        assert error["data"]["status"] == 401 and error["data"]["retryable"] is False


def test_an_anonymous_callers_llm_work_is_limited_and_reported(engine_dir: Path) -> None:
    with HostileEndpoint("ok") as upstream, serving(
            engine_dir, upstream, RCP_AGENTIC_LLM_ANONYMOUS_CALLS_PER_MINUTE="6") as (url, _p):
        started = time.monotonic()
        one = call(url, "query/transform", {"query": QUESTION, "method": "rewrite"})
        assert one["result"]["_meta"]["llm"]["calls"] == 1
        batch = [{"jsonrpc": "2.0", "id": i, "method": "graph",
                  "params": {"op": "global", "query": QUESTION}} for i in range(64)]
        answers = post(url, batch, timeout=120)
        # Six calls a minute, refilled evenly: the batch spent what was left and what
        # refilled while it ran, not 64 x (communities + 1).
        assert upstream.requests <= 6 + (time.monotonic() - started) * 6 / 60
        limited = [a for a in answers if "error" in a]
        assert limited and all(a["error"]["code"] == -32011 for a in limited)
        assert all(a["error"]["data"]["retryAfterMs"] > 0 for a in limited
                   if a["error"]["data"].get("retryable"))
        spent = sum(a["error"].get("data", {}).get("llm", {}).get("calls", 0) for a in limited)
        spent += sum(a["result"]["usage"]["llm"]["calls"] for a in answers if "result" in a)
        assert spent == upstream.requests - 1
        # Plain retrieval needs no allowance.
        assert call(url, "retrieve", {"query": QUESTION, "k": 2})["result"]["hits"]


def test_requests_without_llm_never_wait_behind_a_hung_model(engine_dir: Path) -> None:
    with HostileEndpoint("hang") as upstream, serving(
            engine_dir, upstream, RCP_AGENTIC_LLM_CONCURRENCY="2") as (url, _p):
        # Quiet first: the server started without warming, so this loads the models.
        assert call(url, "retrieve", {"query": QUESTION, "k": 2}, timeout=120)["result"]["hits"]
        deadline_ms = 6000
        answers: list[tuple[float, Any]] = []

        def llm_request(i: int) -> None:
            started = time.monotonic()
            got = call(url, "query/transform", {"query": f"{QUESTION} {i}", "method": "hyde",
                                                "_meta": {"deadlineMs": deadline_ms}}, id_=i)
            answers.append((time.monotonic() - started, got))

        flood = [threading.Thread(target=llm_request, args=(i,)) for i in range(45)]
        for t in flood:
            t.start()
        time.sleep(1.0)  # the lane is full and its queue too
        for _ in range(5):
            started = time.monotonic()
            assert call(url, "ping", {}, timeout=10)["result"] == {}
            assert call(url, "retrieve", {"query": QUESTION, "k": 2}, timeout=10)["result"]["hits"]
            assert time.monotonic() - started < 5.0
        for t in flood:
            t.join(60)
        assert len(answers) == 45
        codes = {a["error"]["code"] for _s, a in answers}
        assert codes <= {-32011, -32014}, codes  # refused at once, or timed out
        slowest = max(s for s, _a in answers)
        assert slowest < deadline_ms / 1000 + 3.0, slowest
