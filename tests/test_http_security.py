"""`serve --http` against a hostile web page, hostile bodies and slow clients (issue 9).

A real uvicorn subprocess on loopback without a token (the default), driven with raw
HTTP so that every header (Host, Origin, Content-Type) is exactly what a browser or an
attacker would send. Unexpected-failure handling is checked on the real app in process.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from starlette.requests import Request
from starlette.routing import Route
from starlette.testclient import TestClient

from conftest import DOCS, free_port, running_server
from rcp_agentic import Engine
from rcp_agentic.cli.serve_http import _warn_if_exposed
from rcp_agentic.protocol.http import create_app

APP_ORIGIN = "https://app.example"
HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0


@dataclass
class Server:
    host: str
    port: int
    stderr_line: str

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def call(server: Server, path: str, body: Any = None, *, raw: bytes | None = None,
         method: str = "POST", conn: http.client.HTTPConnection | None = None,
         **headers: str) -> tuple[int, dict[str, str], Any]:
    """One request with exactly these headers (Host defaults to the bound address), on
    ``conn`` (left open) or on a connection of its own."""
    own = conn is None
    conn = conn or http.client.HTTPConnection(server.host, server.port, timeout=60)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    sent = {"Host": f"{server.host}:{server.port}", "Content-Type": "application/json",
            **{k.replace("_", "-"): v for k, v in headers.items()}}
    try:
        conn.request(method, path, body=data, headers={k: v for k, v in sent.items() if v})
        resp = conn.getresponse()
        text = resp.read()
        got = {k.lower(): v for k, v in resp.getheaders()}
        if got.get("content-type", "").startswith("application/json"):
            return resp.status, got, json.loads(text)
        return resp.status, got, text.decode() or None  # a preflight's "OK", a 204
    finally:
        if own:
            conn.close()


def rpc(method: str, params: dict[str, Any] | None = None, id_: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params or {}}


def stored_ids(server: Server) -> set[str]:
    status, _, out = call(server, "/rcp/retrieve", rpc("retrieve", {"query": "anything",
                                                                    "k": 50, "mode": "dense"}))
    assert status == 200, out
    return {h["chunk"]["docId"] for h in out["result"]["hits"]}


def _first_line(proc: Any, timeout: float) -> str:
    """The start-up line the CLI prints on stderr (bounded wait)."""
    deadline = time.monotonic() + timeout
    buf = b""
    while b"serving RCP/1" not in buf and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.5)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
    return next((line for line in buf.decode().splitlines() if "serving RCP/1" in line), "")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Server]:
    """No token; one CORS origin, one extra Host name, short slow-client timeouts."""
    path = tmp_path_factory.mktemp("http-security") / "e"
    with Engine(path, embedder=embedder) as eng:
        eng.add_documents(DOCS)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "RCP_AGENTIC_TOKEN"}

    def ready() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    cmd = [sys.executable, "-m", "rcp_agentic.cli", "serve", "--http", "--engine", str(path),
           "--port", str(port), "--cors-origin", APP_ORIGIN, "--allowed-host", "rcp.internal",
           "--header-timeout", str(HEADER_TIMEOUT), "--body-timeout", str(BODY_TIMEOUT)]
    with running_server(cmd, ready, timeout=120, env=env) as proc:
        yield Server("127.0.0.1", port, _first_line(proc, 30))


# --- start-up -----------------------------------------------------------------------------

def test_startup_line_names_the_address(server: Server) -> None:
    assert server.stderr_line == f"rcp-agentic: serving RCP/1 on {server.url}/rcp"


def test_the_startup_line_means_connections_are_accepted(tmp_path: Any) -> None:
    """A client that connects the instant it reads the line is never refused."""
    import subprocess
    for attempt in range(3):
        proc = subprocess.Popen([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http",
                                 "--port", "0", "--engine", str(tmp_path / f"e{attempt}")],
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stderr is not None
            line = next(x for x in proc.stderr if "serving RCP/1 on" in x)
            host, port = line.split("//")[1].split("/")[0].rsplit(":", 1)
            socket.create_connection((host, int(port)), timeout=5).close()  # no retry
        finally:
            proc.kill()
            proc.wait()


def test_non_loopback_without_token_warns(capsys: pytest.CaptureFixture[str]) -> None:
    _warn_if_exposed("0.0.0.0", None, False)
    err = capsys.readouterr().err
    assert "WARNING" in err and "0.0.0.0" in err and "RCP_AGENTIC_TOKEN" in err
    _warn_if_exposed("0.0.0.0", None, True)
    assert "WRITES" in capsys.readouterr().err
    for quiet in (("127.0.0.1", None), ("localhost", None), ("::1", None), ("0.0.0.0", "t")):
        _warn_if_exposed(*quiet, False)
    assert capsys.readouterr().err == ""


# --- issue 9.6: cross-site and DNS-rebinding writes ------------------------------------------

def test_the_reported_cross_site_write_is_refused(server: Server) -> None:
    """The browser-style attack of the issue: a simple POST, foreign Origin and Host."""
    before = stored_ids(server)
    assert "d1" in before
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        for extra in ({}, {"Origin": "http://attacker.example"},
                      {"Origin": "http://attacker.example", "Host": "attacker.example"}):
            status, _, out = call(server, "/rcp/index/delete",
                                  rpc("index/delete", {"ids": ["d1"]}), Content_Type=ctype,
                                  **extra)
            assert status in (415, 403, 421, 401) and "error" in out, (ctype, extra, out)
            status, _, out = call(server, "/rcp/index/add", rpc("index/add", {"documents": [
                {"id": "d1", "text": "replaced by a web page"}]}), Content_Type=ctype, **extra)
            assert status in (415, 403, 421, 401) and "error" in out
    assert stored_ids(server) == before


def test_content_type_must_be_json(server: Server) -> None:
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "", "application/jsonx",
                  "text/json"):
        status, headers, out = call(server, "/rcp/ping", rpc("ping"), Content_Type=ctype)
        assert status == 415 and headers["content-type"] == "application/json"
        assert out["error"]["code"] == -32600 and "application/json" in out["error"]["message"]
    for ctype in ("application/json; charset=utf-8", "Application/JSON", "application/json;"):
        status, _, out = call(server, "/rcp/ping", rpc("ping", {"nonce": "n"}),
                              Content_Type=ctype)
        assert status == 200 and out["result"] == {"nonce": "n"}
    # The hosted REST route too, in its own error shape.
    status, _, out = call(server, "/api/v1/retrieval/retrieve",
                          {"index_id": "default", "query": "vitamin"}, Content_Type="text/plain")
    assert status == 415 and set(out) == {"detail"}


def test_foreign_host_is_421(server: Server) -> None:
    for host in ("attacker.example", f"attacker.example:{server.port}", "127.0.0.1.nip.io",
                 "localhost.attacker.example", "[::2]"):
        status, headers, out = call(server, "/rcp/ping", rpc("ping"), Host=host)
        assert status == 421 and headers["content-type"] == "application/json", host
        assert out["error"]["code"] == -32600 and out["error"]["data"]["field"] == "Host"
        status, _, out = call(server, "/api/v1/retrieval/retrieve",
                              {"index_id": "default", "query": "vitamin"}, Host=host)
        assert status == 421 and set(out) == {"detail"}
    for host in ("localhost", f"localhost:{server.port}", "127.0.0.1", "LOCALHOST",
                 f"[::1]:{server.port}", "[::1]", "rcp.internal", "rcp.internal:443"):
        status, _, out = call(server, "/rcp/ping", rpc("ping"), Host=host)
        assert status == 200 and out["result"] == {}, host


def test_foreign_origin_is_403_and_cors_still_works(server: Server) -> None:
    for origin in ("http://attacker.example", "null", f"http://127.0.0.1:{server.port + 1}",
                   f"https://127.0.0.1:{server.port}", "https://app.example.evil"):
        status, _, out = call(server, "/rcp/ping", rpc("ping"), Origin=origin)
        assert status == 403 and out["error"]["code"] == -32012, origin
        status, _, out = call(server, "/rcp/ping", method="OPTIONS", Origin=origin,
                              Access_Control_Request_Method="POST",
                              Access_Control_Request_Headers="content-type")
        assert status == 403 and out["error"]["code"] == -32012
    # The server's own origin (a page it served) and the configured one are fine.
    for origin in (f"http://127.0.0.1:{server.port}", APP_ORIGIN):
        status, headers, out = call(server, "/rcp/ping", rpc("ping"), Origin=origin)
        assert status == 200 and out["result"] == {}
    assert headers["access-control-allow-origin"] == APP_ORIGIN
    status, headers, _ = call(server, "/rcp/index/add", method="OPTIONS", Origin=APP_ORIGIN,
                              Access_Control_Request_Method="POST",
                              Access_Control_Request_Headers="content-type, authorization")
    assert status == 200 and headers["access-control-allow-origin"] == APP_ORIGIN


def test_anonymous_writes_are_not_offered_reads_are_open(server: Server) -> None:
    """An anonymous caller is offered no write (item 9), so a write is answered as its
    capabilities say: -32003 at HTTP 200 with its id (§12, L0), saying how to get write
    access; nothing is stored. The official conformance harness reads exactly that."""
    before = stored_ids(server)
    writes = [(rpc("index/add", {"documents": [{"id": "new", "text": "anonymous text"}]}, id_="w1"),
               -32003),
              (rpc("index/delete", {"ids": ["d2"]}, id_=5), -32003),
              (rpc("feedback", {"signals": [{"hitId": "doc:d1#c0", "used": True}]}), -32003)]
    for body, code in writes:
        status, headers, out = call(server, f"/rcp/{body['method']}", body, Origin=APP_ORIGIN)
        assert status == 200 and out["id"] == body["id"], body
        assert out["error"]["code"] == code and "RCP_AGENTIC_TOKEN" in out["error"]["message"]
        assert headers["access-control-allow-origin"] == APP_ORIGIN  # the page can read why
    status, _, out = call(server, "/rcp", [rpc("ping", id_=1),
                                          rpc("index/delete", {"ids": ["d2"]}, id_=2)])
    assert status == 200 and out[0] == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert out[1]["id"] == 2 and out[1]["error"]["code"] == -32003
    status, _, _ = call(server, "/rcp", {"jsonrpc": "2.0", "method": "index/delete",
                                         "params": {"ids": ["d2"]}})
    assert status == 204  # a notification is never answered, and does nothing here
    assert stored_ids(server) == before
    for body in (rpc("retrieve", {"query": "vitamin", "k": 1}), rpc("info"),
                 [rpc("ping", id_=1), rpc("retrieve", {"query": "bm25", "k": 1}, id_=2)]):
        status, _, out = call(server, "/rcp", body)
        assert status == 200 and "error" not in json.dumps(out), out


def test_anonymous_callers_are_offered_only_what_they_may_call(server: Server) -> None:
    """Issue 21.9 (§15.6): no index and no feedback for a caller whose writes are 401."""
    for method in ("initialize", "info"):
        status, _, out = call(server, f"/rcp/{method}", rpc(method, {"protocolVersion": 1}))
        caps = out["result"]["capabilities"]
        assert status == 200 and "retrieve" in caps and "streaming" in caps
        assert "index" not in caps and "feedback" not in caps, caps


def test_anonymous_writes_when_allowed(engine: Engine) -> None:
    """``--allow-anonymous-writes`` lets them through, and only them: Host/Origin still apply."""
    app = create_app(engine, allow_anonymous_writes=True)
    with TestClient(app, base_url="http://127.0.0.1:8750") as c:
        caps = c.post("/rcp/info", json=rpc("info")).json()["result"]["capabilities"]
        assert caps["index"]["writable"] is True and "feedback" in caps
        out = c.post("/rcp/index/add", json=rpc("index/add", {"documents": [
            {"id": "a", "text": "anonymous but allowed"}]})).json()
        assert out["result"]["ids"] == ["a"]
        assert c.post("/rcp/index/add", json=rpc("index/add", {"documents": [{"text": "x"}]}),
                      headers={"Origin": "http://attacker.example"}).status_code == 403
        assert c.post("/rcp/ping", json=rpc("ping"),
                      headers={"Host": "attacker.example"}).status_code == 421
    assert engine.stats()["documents"] == 1


def test_bound_and_wildcard_hosts(engine: Engine) -> None:
    """The bound address is always served; ``--allowed-host '*'`` turns the check off."""
    ping = rpc("ping")
    with TestClient(create_app(engine, bound_host="10.1.2.3"), base_url="http://x") as c:
        assert c.post("/rcp/ping", json=ping, headers={"Host": "10.1.2.3:8750"}).json() == {
            "jsonrpc": "2.0", "id": 1, "result": {}}
        assert c.post("/rcp/ping", json=ping, headers={"Host": "10.1.2.4"}).status_code == 421
    with TestClient(create_app(engine, allowed_hosts=["*"]), base_url="http://x") as c:
        assert c.post("/rcp/ping", json=ping, headers={"Host": "any.example"}).status_code == 200


# --- issue 21.8: every refusal echoes the id it can read -------------------------------------

# Refusals decided before the body is read: a foreign Host, a foreign Origin, a wrong media type.
EARLY_REFUSALS = ((421, {"Host": "attacker.example"}),
                  (403, {"Origin": "http://attacker.example"}), (415, {"Content_Type": "text/plain"}))


def test_refusals_echo_the_request_id(server: Server) -> None:
    for id_ in (7, "req-7", 2.5, -1, "\ud800x"):
        for status, headers in EARLY_REFUSALS:
            got, _, out = call(server, "/rcp/ping", rpc("ping", id_=id_), **headers)
            assert got == status and out["id"] == id_ and "error" in out, (status, id_)
        # The anonymous write is answered once parsed.
        got, _, out = call(server, "/rcp/index/delete", rpc("index/delete", {"ids": ["d1"]},
                                                            id_=id_))
        assert got == 200 and out["id"] == id_ and out["error"]["code"] == -32003
    # An early refusal of a batch is one error object, id null (JSON-RPC 2.0).
    got, _, out = call(server, "/rcp", [rpc("ping", id_=1), rpc("ping", id_=2)],
                       Origin="http://attacker.example")
    assert got == 403 and isinstance(out, dict) and out["id"] is None
    # The hosted REST route keeps its own shape.
    got, _, out = call(server, "/api/v1/retrieval/retrieve", {"index_id": "default", "query": "x",
                                                             "id": 3}, Host="attacker.example")
    assert got == 421 and set(out) == {"detail"}


def test_refusals_without_a_readable_id_say_null(server: Server) -> None:
    big = json.dumps(rpc("ping", {"nonce": "x" * 70_000}, id_=9)).encode()  # past the 64 KiB read
    for raw in (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}',
                b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}',
                b'{"jsonrpc": "2.0", "method": "ping"}', b'{"jsonrpc": "2.0", "id": 1, "meth',
                b"[" * 5000, b"\xff\xfe", b'{"id": 1e400}', big, b""):
        for status, headers in EARLY_REFUSALS:
            got, _, out = call(server, "/rcp/ping", raw=raw, **headers)
            assert got == status and out["id"] is None, (status, raw[:40])
    assert call(server, "/rcp/ping", rpc("ping"))[0] == 200


def _raw_exchange(server: Server, data: bytes, within: float) -> tuple[bytes, float]:
    """Send ``data`` and read until the server closes (bounded); what came back, and when."""
    s = socket.create_connection((server.host, server.port), timeout=10)
    started = time.monotonic()
    s.sendall(data)
    got = b""
    s.settimeout(within)
    try:
        while chunk := s.recv(65536):
            got += chunk
    except TimeoutError:
        pass
    finally:
        s.close()
    return got, time.monotonic() - started


def test_reading_for_the_id_never_holds_the_connection(server: Server) -> None:
    """A refused request that declares a huge body, or sends its body slowly, is answered
    (id null) and closed within a second or so, never after the body timeout."""
    head = (b"POST /rcp/ping HTTP/1.1\r\nHost: attacker.example\r\n"
            b"Content-Type: application/json\r\n")
    ping = json.dumps(rpc("ping", id_=4)).encode()
    for body_part, declared in ((ping, 10**12), (ping[:10], len(ping))):
        got, took = _raw_exchange(server, head + b"Content-Length: " + str(declared).encode()
                                  + b"\r\n\r\n" + body_part, BODY_TIMEOUT + 5)
        status_line, _, body = got.partition(b"\r\n\r\n")
        assert status_line.startswith(b"HTTP/1.1 421") and b"connection: close" in \
            status_line.lower()
        assert json.loads(body)["id"] is None and took < BODY_TIMEOUT, took
    # A chunked body that is complete within the bound gives its id.
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(ping), ping)
    got, _ = _raw_exchange(server, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked, 10)
    assert json.loads(got.partition(b"\r\n\r\n")[2])["id"] == 4


# --- issue 21.11: a misspelt option is never dropped silently -----------------------------------

def test_a_misspelt_filter_is_refused_under_strict(server: Server) -> None:
    """The tester's case: a misspelt ``filter`` widened the results to every tenant."""
    german = {"field": "lang", "op": "eq", "value": "de"}
    base = {"query": "documents", "k": 8, "strict": True}
    status, _, out = call(server, "/rcp/retrieve", rpc("retrieve", {**base, "filter": german}))
    assert status == 200 and {h["chunk"]["docId"] for h in out["result"]["hits"]} == {"d3"}
    for key in ("filters", "Filter", "x-rcp-agentic-filter"):
        status, _, out = call(server, "/rcp/retrieve", rpc("retrieve", {**base, key: german}))
        assert status == 200 and out["error"]["code"] == -32602, key
        assert out["error"]["data"]["field"] == key
        assert "did you mean 'filter'" in out["error"]["message"]
        loose = {"query": "documents", "k": 8, key: german}  # strict absent: ignored, noted
        status, _, out = call(server, "/rcp/retrieve", rpc("retrieve", loose))
        notes = out["result"]["usage"]["notes"]
        assert any(repr(key) in n and "'filter'" in n for n in notes), notes


# --- issue 9.9 / 9.10: hostile bodies ----------------------------------------------------------

def test_deep_nesting_is_400_json_and_the_server_stays_up(server: Server) -> None:
    deep = b"[" * 1200 + b"]" * 1200
    for path in ("/rcp", "/rcp/ping"):
        status, headers, out = call(server, path, raw=deep)
        assert status == 400 and headers["content-type"] == "application/json"
        assert out["error"]["code"] == -32700 and out["id"] is None
    status, _, out = call(server, "/rcp", raw=b'{"jsonrpc": "2.0", "id": 1, "method": "ping", '
                          b'"params": {"nonce": ' + b"[" * 5000 + b"]" * 5000 + b"}}")
    assert status == 400 and out["error"]["code"] == -32700
    status, _, out = call(server, "/api/v1/retrieval/retrieve",
                          raw=b'{"index_id": "default", "query": ' + deep + b"}")
    assert status == 422 and set(out) == {"detail"}
    assert call(server, "/rcp/ping", rpc("ping"))[0] == 200


def test_lone_surrogates_are_echoed_as_json(server: Server) -> None:
    raw = b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping", "params": {"nonce": "a\\udfffb"}}'
    status, headers, out = call(server, "/rcp/ping", raw=raw)
    assert status == 200 and headers["content-type"] == "application/json"
    assert out == {"jsonrpc": "2.0", "id": "\ud800", "result": {"nonce": "a\udfffb"}}
    # An error that echoes the id, and one inside a batch.
    status, _, out = call(server, "/rcp", raw=b'[{"jsonrpc": "2.0", "id": "\\udc00x", '
                          b'"method": "nope"}, {"jsonrpc": "2.0", "id": 2, "method": "ping"}]')
    assert status == 200 and out[0]["id"] == "\udc00x" and "error" in out[0]
    assert out[1] == {"jsonrpc": "2.0", "id": 2, "result": {}}
    status, _, out = call(server, "/api/v1/retrieval/retrieve",
                          raw=b'{"index_id": "default", "query": "vitamin \\ud800"}')
    assert status == 422 and out["detail"][0]["type"] == "json_invalid"  # pydantic's verdict


def test_unknown_paths_and_methods_are_json(server: Server) -> None:
    for method, path, status in (("GET", "/rcp/ping", 405), ("POST", "/nope", 404),
                                 ("GET", "/", 404), ("PUT", "/api/v1/retrieval/retrieve", 405)):
        got, headers, out = call(server, path, None if method == "GET" else {}, method=method)
        assert got == status and headers["content-type"] == "application/json", (method, path)
        assert ("detail" in out) if path.startswith("/api/") else (out["error"]["code"] == -32600)


def test_unexpected_failures_are_json_500(engine: Engine) -> None:
    """Whatever escapes a route is a JSON 500 in that route's shape, never text."""
    async def boom(request: Request) -> Any:
        raise RuntimeError("secret internals")

    app = create_app(engine, hosted_engines={"default": engine})
    app.router.routes[:0] = [Route("/rcp/x-boom", boom, methods=["POST"]),
                             Route("/api/v1/boom", boom, methods=["POST"])]
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as c:
        resp = c.post("/rcp/x-boom", json=rpc("x-boom"))
        assert resp.status_code == 500 and resp.headers["content-type"] == "application/json"
        assert resp.json()["error"]["code"] == -32603 and "secret" not in resp.text
        resp = c.post("/api/v1/boom", json={})
        assert resp.status_code == 500 and resp.json() == {"detail": "internal server error"}


def test_non_string_methods_are_invalid_requests_not_500(engine: Engine) -> None:
    """The anonymous-write check reads every method name: an unhashable one must not crash it."""
    with TestClient(create_app(engine), base_url="http://127.0.0.1",
                    raise_server_exceptions=False) as c:
        for body in ({"jsonrpc": "2.0", "id": 1, "method": ["index/add"]},
                     [{"jsonrpc": "2.0", "id": 1, "method": {"a": 1}}, rpc("ping", id_=2)]):
            resp = c.post("/rcp", json=body)
            assert resp.status_code == 200, resp.text
            out = resp.json()
            first = out[0] if isinstance(out, list) else out
            assert first["id"] == 1 and first["error"]["code"] == -32600


# --- issue 9.13: slow clients ------------------------------------------------------------------

SLOW_HEAD = b"POST /rcp/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
SLOW_BODY = SLOW_HEAD + b"Content-Length: 1000\r\n\r\n{\"jsonrpc\": \"2.0\""


def _open_slow(server: Server, n: int, payload: bytes) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection((server.host, server.port), timeout=10)
        s.sendall(payload)
        s.setblocking(False)
        socks.append(s)
    return socks


def _closed_by_server(socks: list[socket.socket], within: float,
                      trickle: tuple[socket.socket, ...] = ()) -> tuple[int, list[bytes]]:
    """Wait (bounded) until the server closes every socket; (still open, what each got).

    Each socket of ``trickle`` sends one more header byte every quarter second, as a
    slow-loris does to look alive.
    """
    got = {id(s): b"" for s in socks}
    open_ = list(socks)
    deadline = time.monotonic() + within
    while open_ and time.monotonic() < deadline:
        readable, _, _ = select.select(open_, [], [], 0.25)
        for s in readable:
            try:
                part = s.recv(65536)
            except (ConnectionResetError, BlockingIOError):
                part = b""
            if part:
                got[id(s)] += part
            else:
                open_.remove(s)
        for s in trickle:
            if s in open_:
                try:
                    s.send(b"X")
                except OSError:
                    pass
    for s in socks:
        s.close()
    return len(open_), [got[id(s)] for s in socks]


def test_slow_clients_are_cut_off_and_others_are_served(server: Server) -> None:
    started = time.monotonic()
    heads = _open_slow(server, 100, SLOW_HEAD)
    bodies = _open_slow(server, 100, SLOW_BODY)
    trickling = _open_slow(server, 10, SLOW_HEAD + b"X-Slow: ")
    within = max(HEADER_TIMEOUT, BODY_TIMEOUT) + 8
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_closed_by_server, heads + bodies + trickling, within,
                              tuple(trickling))
        # Normal requests are answered while the slow connections are held open.
        for i in range(20):
            status, _, out = call(server, "/rcp/retrieve", rpc(
                "retrieve", {"query": DOCS[i % 8]["text"], "k": 1}, id_=i))
            assert status == 200
            assert out["result"]["hits"][0]["chunk"]["docId"] == DOCS[i % 8]["id"]
        left, answers = waiting.result()
    assert left == 0, f"{left} slow connections were never closed"
    assert time.monotonic() - started < within
    for answer in answers[100:200]:  # the unfinished bodies: a JSON 408, then closed
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408") and b"application/json" in head
        assert json.loads(body)["error"]["code"] == -32014
    assert all(a == b"" for a in answers[:100] + answers[200:])  # heads: just closed
    assert call(server, "/rcp/ping", rpc("ping"))[0] == 200


def test_idle_and_oversized_heads_are_cut_off(server: Server) -> None:
    # A keep-alive connection that starts a second request and never finishes it.
    s = socket.create_connection((server.host, server.port), timeout=10)
    ping = json.dumps(rpc("ping")).encode()
    s.sendall(SLOW_HEAD + b"Content-Length: " + str(len(ping)).encode() + b"\r\n\r\n" + ping)
    first = s.recv(65536)
    assert first.startswith(b"HTTP/1.1 200")
    s.sendall(SLOW_HEAD)
    s.setblocking(False)
    # A head that grows past the size cap without ending.
    big = socket.create_connection((server.host, server.port), timeout=10)
    try:
        for _ in range(40):
            big.sendall(b"X-Pad: " + b"a" * 4000 + b"\r\n")
    except OSError:
        pass  # closed by the server while we were still sending: what we want
    big.setblocking(False)
    started = time.monotonic()
    left, _ = _closed_by_server([s, big], HEADER_TIMEOUT + 4)
    assert left == 0
    assert time.monotonic() - started < HEADER_TIMEOUT + 4


def test_our_client_is_unaffected(server: Server) -> None:
    """Our own client (Content-Type: application/json, Host of its URL) is unaffected, and
    keeps its anonymous sessions: by its RCP-Session header, or without one by reusing its
    keep-alive connection."""
    from rcp_agentic.client import RCPClient

    for session in (True, False):
        with RCPClient.http(server.url, session=session) as client:
            client.initialize()
            first = client.retrieve("vitamin d", k=1).hits[0]
            assert first.chunk is not None and first.chunk.doc_id == "d1"
            seen = [{h.id for h in client.retrieve("vitamin d", k=2, session_id="mine").hits}
                    for _ in range(2)]
            assert all(len(ids) == 2 for ids in seen) and not seen[0] & seen[1], session


# --- issue 21.12: sessions are bound to the caller ---------------------------------------------

def _hit_ids(out: Any) -> set[str]:
    return {h["id"] for h in out["result"]["hits"]}


def test_a_retrieve_session_is_bound_to_its_connection(server: Server) -> None:
    """Another connection naming the same sessionId (wire or Python name) is another session:
    it neither sees what this one was given nor adds to it."""
    params = {"query": "vitamin d", "k": 2, "sessionId": "shared-name"}
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        first = _hit_ids(call(server, "/rcp/retrieve", rpc("retrieve", params), conn=conn)[2])
        for name in ("sessionId", "session_id"):
            other = {"query": "vitamin d", "k": 2, name: "shared-name"}
            assert _hit_ids(call(server, "/rcp/retrieve", rpc("retrieve", other))[2]) == first
        second = _hit_ids(call(server, "/rcp/retrieve", rpc("retrieve", {
            "query": "vitamin d", "k": 2, "session_id": "shared-name"}), conn=conn)[2])
    finally:
        conn.close()
    assert len(first) == len(second) == 2 and not first & second


def test_session_ids_are_checked_before_they_are_bound(server: Server) -> None:
    for bad in ("", "s" * 257, "a\udc00", 7, ["s"]):
        for name in ("sessionId", "session_id"):
            status, _, out = call(server, "/rcp/retrieve", rpc("retrieve", {
                "query": "x", name: bad}))
            assert status == 200 and out["error"]["code"] == -32602, (name, bad)
            assert out["error"]["data"]["field"] == name
