"""Progress (§9), cancellation (§7.14), deadlines (§13.1), feedback (§7.16), SSE and CORS.

Driven over real transports: a stdio server subprocess, a uvicorn subprocess over
real HTTP. Long work is real work: an ``index/add`` of thousands of documents that
the real model has to embed.
"""

from __future__ import annotations

import json
import os
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REPO, free_port, running_server

from rcp_agentic import Engine

WORDS = ("protein signalling cortex lattice enzyme glacier reactor sonnet harbour quantum "
         "meadow tensor ferment orbit canyon syntax pollen voltage marble archive").split()


def many_docs(n: int, prefix: str) -> list[dict[str, Any]]:
    """``n`` distinct documents of about 60 words each: seconds of real embedding work."""
    return [{"id": f"{prefix}{i}",
             "text": " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] + str((i + j) % 97)
                              for j in range(60))} for i in range(n)]


def live_ids(engine_dir: Path, prefix: str) -> set[str]:
    """Documents visible in the engine's SQLite store, read by a separate connection."""
    with sqlite3.connect(engine_dir / "engine.db") as db:
        rows = db.execute("SELECT id FROM documents WHERE v_to IS NULL AND id LIKE ?",
                          (prefix + "%",)).fetchall()
    return {r[0] for r in rows}


class StdioPeer:
    """A server subprocess spoken to over NDJSON, frames collected by a reader thread."""

    def __init__(self, engine_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rcp_agentic.cli", "serve", "--stdio", "--engine",
             str(engine_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, cwd=REPO)
        self.frames: queue.Queue[Any] = queue.Queue()
        self.seen: list[Any] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.frames.put(json.loads(line))

    def send(self, frame: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(frame).encode() + b"\n")
        self.proc.stdin.flush()

    def wait_for(self, pred: Callable[[Any], bool], timeout: float = 120) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            for frame in self.seen:
                if pred(frame):
                    self.seen.remove(frame)
                    return frame
            left = deadline - time.monotonic()
            assert left > 0, f"no matching frame; saw {self.seen[-5:]}"
            try:
                self.seen.append(self.frames.get(timeout=left))
            except queue.Empty:
                pass

    def response(self, id_: Any, timeout: float = 120) -> dict[str, Any]:
        return self.wait_for(lambda f: isinstance(f, dict) and "method" not in f
                             and f.get("id") == id_, timeout)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


@pytest.fixture(scope="module")
def peer(engine_dir: Path) -> Iterator[StdioPeer]:
    p = StdioPeer(engine_dir)
    p.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
    init = p.response(0)
    assert "streaming" in init["result"]["capabilities"]
    assert init["result"]["_meta"]["conformance"] == "L2"
    assert init["result"]["capabilities"]["x-rcp-agentic"]["limits"].items() >= {
        "maxBatch": 64, "maxBodyBytes": 8 * 1024 * 1024, "requestTimeoutMs": 120_000,
        "maxQueryChars": 16_384}.items()
    yield p
    p.close()


def is_progress(token: Any) -> Callable[[Any], bool]:
    return lambda f: (isinstance(f, dict) and f.get("method") == "notifications/progress"
                      and f["params"]["progressToken"] == token)


def test_retrieve_progress_has_partial_hits_then_the_response(peer: StdioPeer) -> None:
    peer.send({"jsonrpc": "2.0", "id": "p1", "method": "retrieve",
               "params": {"query": "rank fusion", "k": 3, "_meta": {"progressToken": "tok-1"}}})
    result = peer.response("p1")["result"]
    fused = peer.wait_for(is_progress("tok-1"))["params"]
    assert fused["stage"] == "fuse" and 0 <= fused["progress"] <= 1
    assert [h["id"] for h in fused["partial"]["hits"]] == [h["id"] for h in result["hits"]]
    done = peer.wait_for(is_progress("tok-1"))["params"]
    assert done["stage"] == "pack" and done["progress"] == 1.0
    # An integer token is echoed as an integer, and no token means no progress at all.
    peer.send({"jsonrpc": "2.0", "id": "p2", "method": "retrieve",
               "params": {"query": "rank fusion", "k": 3, "_meta": {"progressToken": 7}}})
    peer.send({"jsonrpc": "2.0", "id": "p3", "method": "retrieve",
               "params": {"query": "rank fusion", "k": 3}})
    peer.response("p2")
    peer.response("p3")
    assert peer.wait_for(is_progress(7))["params"]["progressToken"] == 7
    time.sleep(0.3)
    while not peer.frames.empty():
        peer.seen.append(peer.frames.get())
    progress = [f for f in peer.seen if isinstance(f, dict)
                and f.get("method") == "notifications/progress"]
    assert all(f["params"]["progressToken"] == 7 for f in progress)
    peer.seen.clear()


def test_cancel_stops_an_index_add_and_answers_once(peer: StdioPeer, engine_dir: Path) -> None:
    docs = many_docs(1500, "c-")
    peer.send({"jsonrpc": "2.0", "id": 41, "method": "index/add",
               "params": {"documents": docs, "_meta": {"progressToken": "add"}}})
    first = peer.wait_for(is_progress("add"))["params"]  # the first transaction committed
    assert first["stage"] == "index" and 0 < first["progress"] < 1
    peer.send({"jsonrpc": "2.0", "method": "notifications/cancel",
               "params": {"id": 41, "reason": "test"}})
    error = peer.response(41)["error"]
    assert error["code"] == -32006
    committed = error["data"]["committedIds"]
    assert 0 < len(committed) < len(docs)
    assert committed == [d["id"] for d in docs[:len(committed)]]
    # Exactly what was acknowledged as committed is stored: nothing half-written.
    assert live_ids(engine_dir, "c-") == set(committed)
    # One response only, and the server goes on serving.
    peer.send({"jsonrpc": "2.0", "id": 42, "method": "ping", "params": {"nonce": 1}})
    assert peer.response(42)["result"] == {"nonce": 1}
    assert not any(isinstance(f, dict) and f.get("id") == 41 for f in peer.seen)


def test_cancel_of_unknown_or_answered_ids_is_ignored(peer: StdioPeer) -> None:
    peer.send({"jsonrpc": "2.0", "id": 50, "method": "ping", "params": {}})
    peer.response(50)
    for target in (50, 12345, "nope", None, {"x": 1}):
        peer.send({"jsonrpc": "2.0", "method": "notifications/cancel", "params": {"id": target}})
    peer.send({"jsonrpc": "2.0", "method": "notifications/cancel"})
    peer.send({"jsonrpc": "2.0", "id": 51, "method": "ping", "params": {}})
    assert peer.response(51)["result"] == {}
    # None of the notifications was answered (late progress of earlier tests may linger).
    assert not [f for f in peer.seen if isinstance(f, dict) and "method" not in f]
    # A cancel sent as a request (with an id) is malformed (§4.5).
    peer.send({"jsonrpc": "2.0", "id": 52, "method": "notifications/cancel",
               "params": {"id": 50}})
    assert peer.response(52)["error"]["code"] == -32600


def test_deadline_answers_timeout(peer: StdioPeer, engine_dir: Path) -> None:
    peer.send({"jsonrpc": "2.0", "id": 60, "method": "retrieve",
               "params": {"query": "x", "_meta": {"deadlineMs": 0}}})
    assert peer.response(60)["error"]["code"] == -32014
    docs = many_docs(3000, "t-")
    peer.send({"jsonrpc": "2.0", "id": 61, "method": "index/add",
               "params": {"documents": docs, "_meta": {"deadlineMs": 1500}}})
    error = peer.response(61)["error"]
    assert error["code"] == -32014 and error["data"]["retryable"] is True
    assert live_ids(engine_dir, "t-") == set(error["data"]["committedIds"])
    assert len(error["data"]["committedIds"]) < len(docs)
    for bad in (-1, "soon", True):
        peer.send({"jsonrpc": "2.0", "id": 62, "method": "retrieve",
                   "params": {"query": "x", "_meta": {"deadlineMs": bad}}})
        err = peer.response(62)["error"]
        assert err["code"] == -32602 and err["data"]["field"] == "_meta.deadlineMs"


def test_feedback_is_recorded_and_never_changes_results(peer: StdioPeer,
                                                        engine_dir: Path) -> None:
    query = {"query": "vitamin d and sclerosis", "k": 4}
    peer.send({"jsonrpc": "2.0", "id": 70, "method": "retrieve", "params": query})
    before = peer.response(70)["result"]["hits"]
    signals = [{"hitId": before[0]["id"], "used": True, "cited": True, "reward": 1.0},
               {"hitId": before[1]["id"], "helpful": False, "reward": -1,
                "injectionSuspected": True, "unknownField": 3}]
    peer.send({"jsonrpc": "2.0", "id": 71, "method": "feedback",
               "params": {"sessionId": "s-fb", "query": query["query"], "signals": signals}})
    assert peer.response(71)["result"] == {"accepted": 2}
    peer.send({"jsonrpc": "2.0", "id": 72, "method": "retrieve", "params": query})
    after = peer.response(72)["result"]["hits"]
    assert [(h["id"], h["score"]) for h in after] == [(h["id"], h["score"]) for h in before]
    for bad, field in ((None, "signals"), ([{"used": True}], "signals[0].hitId"),
                       ([{"hitId": "a", "reward": 2}], "signals[0].reward"),
                       ([{"hitId": "a", "used": "yes"}], "signals[0].used")):
        peer.send({"jsonrpc": "2.0", "id": 73, "method": "feedback", "params": {"signals": bad}})
        err = peer.response(73)["error"]
        assert err["code"] == -32602 and err["data"]["field"] == field
    # Queryable: the engine's feedback log holds exactly the accepted signals.
    with Engine(engine_dir) as eng:
        stored = eng.feedback.signals(session_id="s-fb")
    assert [(s.hit_id, s.used, s.helpful, s.reward, s.injection_suspected) for s in stored] == [
        (before[0]["id"], True, None, 1.0, None), (before[1]["id"], None, False, -1.0, True)]


# --- HTTP: SSE, cancellation, CORS -------------------------------------------------------

@pytest.fixture(scope="module")
def http_server(engine_dir: Path) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.post(f"{url}/rcp/ping", json={"jsonrpc": "2.0", "id": 0,
                                                        "method": "ping"}).status_code == 200
        except httpx.HTTPError:
            return False

    with running_server([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http", "--engine",
                         str(engine_dir), "--port", str(port), "--cors-origin",
                         "https://app.example", "--allow-anonymous-writes"], ready,
                        timeout=120, env=dict(os.environ)):
        yield url


def sse_frames(response: httpx.Response) -> list[dict[str, Any]]:
    frames, data = [], []
    for line in response.iter_lines():
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and data:
            frames.append(json.loads("\n".join(data)))
            data = []
    return frames


def test_sse_streams_progress_then_the_response(http_server: str) -> None:
    body = {"jsonrpc": "2.0", "id": 9, "method": "retrieve",
            "params": {"query": "dense retrievers", "k": 2, "_meta": {"progressToken": "s"}}}
    with httpx.stream("POST", f"{http_server}/rcp/retrieve", json=body,
                      headers={"Accept": "text/event-stream"}, timeout=60) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        frames = sse_frames(resp)
    *progress, final = frames
    assert [f["params"]["stage"] for f in progress] == ["fuse", "pack"]
    assert all(f["params"]["progressToken"] == "s" for f in progress)
    assert final["id"] == 9 and len(final["result"]["hits"]) == 2
    # Without the Accept header: one buffered JSON response, no progress.
    plain = httpx.post(f"{http_server}/rcp/retrieve", json=body, timeout=60)
    assert plain.headers["content-type"].startswith("application/json")
    assert plain.json()["result"]["hits"] == final["result"]["hits"]


def test_http_cancel_notification_and_disconnect(http_server: str, engine_dir: Path) -> None:
    docs = many_docs(1500, "h-")
    body = {"jsonrpc": "2.0", "id": "long", "method": "index/add",
            "params": {"documents": docs, "_meta": {"progressToken": 1}}}
    with httpx.stream("POST", f"{http_server}/rcp/index/add", json=body, timeout=120,
                      headers={"Accept": "text/event-stream"}) as resp:
        lines = resp.iter_lines()
        first = next(line for line in lines if line.startswith("data:"))
        assert json.loads(first[5:])["method"] == "notifications/progress"
        cancel = httpx.post(f"{http_server}/rcp/notifications/cancel", timeout=30,
                            json={"jsonrpc": "2.0", "method": "notifications/cancel",
                                  "params": {"id": "long"}})
        assert cancel.status_code == 204 and cancel.content == b""
        final = [json.loads(line[5:]) for line in lines if line.startswith("data:")][-1]
    assert final["id"] == "long" and final["error"]["code"] == -32006
    assert live_ids(engine_dir, "h-") == set(final["error"]["data"]["committedIds"])
    # A client that hangs up mid-request cancels it too: the writes stop.
    docs = many_docs(1500, "g-")
    body = {"jsonrpc": "2.0", "id": 2, "method": "index/add", "params": {"documents": docs}}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{http_server}/rcp/index/add", json=body, timeout=1.5)
    counts = [len(live_ids(engine_dir, "g-"))]
    for _ in range(20):
        time.sleep(0.5)
        counts.append(len(live_ids(engine_dir, "g-")))
        if counts[-1] == counts[-2] == counts[-3] if len(counts) > 2 else False:
            break
    assert counts[-1] < len(docs), counts


def test_cors_only_for_configured_origins(http_server: str) -> None:
    pre = httpx.options(f"{http_server}/rcp/retrieve", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    assert pre.status_code == 200
    assert pre.headers["access-control-allow-origin"] == "https://app.example"
    other = httpx.post(f"{http_server}/rcp/ping", headers={"Origin": "https://evil.example"},
                       json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert other.status_code == 403 and "access-control-allow-origin" not in other.headers
    assert other.json()["error"]["code"] == -32012


def test_hosted_route_served_by_the_cli(http_server: str) -> None:
    body = {"index_id": "default", "query": "reciprocal rank fusion", "top_k": 2}
    resp = httpx.post(f"{http_server}/api/v1/retrieval/retrieve", json=body, timeout=60)
    assert resp.status_code == 200
    results = resp.json()["results"]
    assert len(results) == 2 and "rank positions" in results[0]["content"]
    missing = httpx.post(f"{http_server}/api/v1/retrieval/retrieve", timeout=60,
                         json={**body, "index_id": "nope"})
    assert missing.status_code == 404 and "nope" in missing.text
    bad = httpx.post(f"{http_server}/api/v1/retrieval/retrieve", timeout=60,
                     json={**body, "top_k": "many"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "top_k"
