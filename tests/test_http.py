"""`rcp-agentic serve --http` as a real uvicorn subprocess on loopback, driven over real HTTP."""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from conftest import DOCS, free_port, running_server
from rcp_agentic import Engine

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[str]:
    path = tmp_path_factory.mktemp("http") / "e"
    with Engine(path, embedder=embedder) as eng:
        eng.add_documents(DOCS)
    port = free_port()
    env = {**os.environ, "RCP_AGENTIC_TOKEN": TOKEN}
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            post(url, "ping", {"jsonrpc": "2.0", "id": 0, "method": "ping"})
            return True
        except OSError:
            return False

    with running_server([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http", "--engine",
                         str(path), "--port", str(port)], ready, timeout=120, env=env):
        yield url


def post(url: str, method: str | None, body: Any, *, token: str | None = TOKEN,
         raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(f"{url}/rcp" + (f"/{method}" if method else ""), data=data,
                                 method="POST", headers={"Content-Type": "application/json"})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as err:
        text = err.read()
        return err.code, json.loads(text) if text else None


def test_retrieve_and_status_mapping(server: str) -> None:
    status, out = post(server, "retrieve", {"jsonrpc": "2.0", "id": "q", "method": "retrieve",
                                            "params": {"query": "rank fusion", "k": 2}})
    assert status == 200 and out["id"] == "q" and out["result"]["hits"][0]["id"] == "doc:d5#c0"
    status, out = post(server, "retrieve", {"jsonrpc": "2.0", "id": 2, "method": "retrieve",
                                            "params": {"query": "x", "mode": "colbert"}})
    assert status == 200 and out["error"]["code"] == -32005
    status, out = post(server, "ping", {"jsonrpc": "2.0", "id": 3, "method": "retrieve"})
    assert status == 200 and out["error"]["code"] == -32600  # URL/body mismatch
    status, out = post(server, "ping", None, raw=b"{oops")
    assert status == 400 and out["error"]["code"] == -32700
    status, out = post(server, None, 5)
    assert status == 400 and out["error"]["code"] == -32600
    status, out = post(server, "ping", {"jsonrpc": "2.0", "method": "ping"})
    assert status == 204 and out is None
    status, out = post(server, "initialize", {"jsonrpc": "2.0", "id": 4, "method": "initialize",
                                              "params": {"protocolVersion": 1}})
    assert status == 200 and out["result"]["capabilities"]["retrieve"]["maxK"] == 200
    status, out = post(server, "initialize", {"jsonrpc": "2.0", "id": 5, "method": "initialize",
                                              "params": {"protocolVersion": 1}})
    assert status == 200 and "result" in out  # stateless: idempotent


def test_auth_before_anything(server: str) -> None:
    for token in (None, "wrong"):
        status, out = post(server, "ping", {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                           token=token)
        assert status == 401 and out["error"]["code"] == -32012


def test_token_holders_are_offered_the_writes(server: str) -> None:
    status, out = post(server, "info", {"jsonrpc": "2.0", "id": 1, "method": "info"})
    caps = out["result"]["capabilities"]
    assert status == 200 and caps["index"]["writable"] is True and "feedback" in caps


def test_a_401_for_the_token_echoes_the_id(server: str) -> None:
    """Issue 21.8: refused before its body is read, a short request still gets its own id."""
    for id_ in (7, "req-7", 2.5):
        for token in (None, "wrong"):
            status, out = post(server, "ping", {"jsonrpc": "2.0", "id": id_, "method": "ping"},
                               token=token)
            assert status == 401 and out["id"] == id_ and out["error"]["code"] == -32012
    for raw in (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', b"[1, 2]", b"{oops",
                b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]'):
        status, out = post(server, "ping", None, raw=raw, token=None)
        assert status == 401 and out["id"] is None, raw


def test_bearer_scheme_is_case_insensitive_and_401_challenges(server: str) -> None:
    """RFC 7235: the scheme name is case-insensitive; every 401 names the scheme."""
    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    for auth, status in ((f"bearer {TOKEN}", 200), (f"BEARER {TOKEN}", 200),
                         (f"Bearer  {TOKEN}", 200), (f"Basic {TOKEN}", 401), (TOKEN, 401),
                         ("Bearer", 401), (f"bearer {TOKEN}x", 401), (None, 401)):
        req = urllib.request.Request(f"{server}/rcp/ping", data=ping, method="POST",
                                     headers={"Content-Type": "application/json"})
        if auth is not None:
            req.add_header("Authorization", auth)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                got, headers = resp.status, resp.headers
        except urllib.error.HTTPError as err:
            got, headers = err.code, err.headers
            assert json.loads(err.read())["error"]["code"] == -32012
        assert got == status, auth
        if status == 401:
            assert headers["WWW-Authenticate"] == "Bearer"


def test_writes_with_the_token(server: str) -> None:
    doc = {"id": "written", "text": "Written over HTTP with the bearer token."}
    status, out = post(server, "index/add", {"jsonrpc": "2.0", "id": 1, "method": "index/add",
                                             "params": {"documents": [doc]}})
    assert status == 200 and out["result"]["ids"] == ["written"]
    status, out = post(server, "index/delete", {"jsonrpc": "2.0", "id": 2,
                                                "method": "index/delete",
                                                "params": {"ids": ["written"]}})
    assert status == 200 and out["result"] == {"deleted": 1}
    status, out = post(server, "index/add", {"jsonrpc": "2.0", "id": 3, "method": "index/add",
                                             "params": {"documents": [doc]}}, token=None)
    assert status == 401 and out["error"]["code"] == -32012


def test_batch_and_body_limit(server: str) -> None:
    status, out = post(server, None, [{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                      {"jsonrpc": "2.0", "id": 2, "method": "info"}])
    assert status == 200 and {o["id"] for o in out} == {1, 2}
    # Declare a 9 MiB body and send none of it: the limit is enforced from the headers,
    # before the server reads (or the client can push) anything.
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /rcp/ping HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                     b"Content-Length: 9437184\r\n\r\n")
        reply = b""
        while b'"code"' not in reply:  # headers and body may come in separate packets
            part = sock.recv(65536)
            if not part:
                break
            reply += part
        reply = reply.decode()
    assert reply.startswith("HTTP/1.1 413") and '"code":-32013' in reply.replace(" ", "")


def test_concurrent_requests(server: str) -> None:
    def one(i: int) -> str:
        _status, out = post(server, "retrieve", {"jsonrpc": "2.0", "id": i, "method": "retrieve",
                                                 "params": {"query": DOCS[i % 8]["text"], "k": 1}})
        return out["result"]["hits"][0]["chunk"]["docId"]

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, range(16)))
    assert got == [DOCS[i % 8]["id"] for i in range(16)]


@pytest.fixture(scope="module")
def stateful(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[str]:
    path = tmp_path_factory.mktemp("http-stateful") / "e"
    with Engine(path, embedder=embedder) as eng:
        eng.add_documents(DOCS[:3])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "RCP_AGENTIC_TOKEN"}

    def ready() -> bool:
        try:
            post(url, "ping", {"jsonrpc": "2.0", "id": 0, "method": "ping"}, token=None)
            return True
        except OSError:
            return False

    with running_server([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http", "--stateful",
                         "--engine", str(path), "--port", str(port)], ready, timeout=120,
                        env=env):
        yield url


def session_post(url: str, method: str, params: dict[str, Any], session: str | None = None,
                 id_: Any = 1) -> dict[str, Any]:
    req = urllib.request.Request(f"{url}/rcp/{method}", method="POST", data=json.dumps(
        {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).encode(),
        headers={"Content-Type": "application/json"})
    if session is not None:
        req.add_header("RCP-Session", session)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


def test_stateful_lifecycle_per_session(stateful: str) -> None:
    init = {"protocolVersion": 1}
    for session in (None, "client-a", "client-b"):  # each session has its own lifecycle
        assert session_post(stateful, "retrieve", {"query": "x", "k": 1},
                            session)["error"]["code"] == -32001
        failed = session_post(stateful, "initialize", {"protocolVersion": 0}, session)
        assert failed["error"]["code"] == -32002
        assert session_post(stateful, "retrieve", {"query": "x", "k": 1},
                            session)["error"]["code"] == -32001
        result = session_post(stateful, "initialize", init, session)["result"]
        assert result["_meta"].get("session") == session
        assert session_post(stateful, "initialize", init, session)["error"]["code"] == -32600
        hits = session_post(stateful, "retrieve", {"query": "vitamin d", "k": 1}, session)
        assert hits["result"]["hits"][0]["chunk"]["docId"] == "d1"
    assert session_post(stateful, "retrieve", {"query": "x", "k": 1},
                        "client-c")["error"]["code"] == -32001
    with pytest.raises(urllib.error.HTTPError) as err:
        session_post(stateful, "ping", {}, "x" * 200)
    assert err.value.code == 400
