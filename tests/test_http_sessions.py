"""Sessions over HTTP with default flags (§5.2, §13), the conformance each mode declares (§14)
and what ``initialize``/``info`` show of the derived state (§13.2): a real uvicorn server in a
thread over an engine this process holds, so documents can be added while it serves."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from conftest import DOCS, free_port
from rcp_agentic import Engine
from rcp_agentic.models.llm_usage import StageUsage
from rcp_agentic.protocol.caller import UNBOUND_NOTE
from rcp_agentic.protocol.http import create_app

TOKEN = "sessions-token"
INIT = {"protocolVersion": 1, "client": {"name": "t", "version": "1"}}


@contextmanager
def served(engine: Engine, **options: Any) -> Iterator[str]:
    """``create_app(engine, **options)`` on uvicorn in a thread on loopback; its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(engine, **options), host="127.0.0.1",
                                           port=port, log_level="warning", lifespan="off",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def call(url: str, method: str, params: dict[str, Any] | None = None, *,
         session: str | None = None, token: str | None = None) -> dict[str, Any]:
    """One JSON-RPC request on a connection of its own (as curl and most SDKs send it)."""
    req = urllib.request.Request(f"{url}/rcp/{method}", method="POST", data=json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}).encode(),
        headers={"Content-Type": "application/json"})
    if session is not None:
        req.add_header("RCP-Session", session)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200
        return json.loads(resp.read())  # type: ignore[no-any-return]


def code(out: dict[str, Any]) -> int | None:
    return out.get("error", {}).get("code")


def hit_ids(out: dict[str, Any]) -> list[str]:
    return [h["id"] for h in out["result"]["hits"]]


@pytest.fixture(scope="module")
def tree_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    """DOCS with the tree built inline, and what its (recorded) build cost in LLM calls."""
    with Engine(tmp_path_factory.mktemp("sessions") / "e", embedder=embedder, build_tree=True,
                derived_updates="inline") as eng:
        eng.add_documents(DOCS)
        spent = StageUsage(calls=3, prompt_tokens=1200, completion_tokens=300)
        eng.store.set_info("llm.tree-node", json.dumps(spent.wire()))
        yield eng


@pytest.fixture(scope="module")
def url(tree_engine: Engine) -> Iterator[str]:
    """The server with default flags: no token, stateless, no anonymous writes."""
    with served(tree_engine) as base:
        yield base


def test_lifecycle_musts_hold_in_issued_sessions(url: str) -> None:
    """A fresh session (an RCP-Session the server has not issued): a call before initialize is
    -32001; a failed initialize leaves it uninitialized; a successful one opens a session named
    by a new token, where a second initialize is -32600 (§13)."""
    fresh = "a-session-no-initialize-opened"
    assert code(call(url, "retrieve", {"query": "x", "k": 1}, session=fresh)) == -32001
    assert call(url, "info", session=fresh)["result"]["server"]["name"] == "rcp-agentic"
    assert call(url, "ping", {"nonce": 7}, session=fresh)["result"] == {"nonce": 7}
    for bad, err in ((0, -32002), ("1", -32602)):
        failed = call(url, "initialize", {**INIT, "protocolVersion": bad}, session=fresh)
        assert code(failed) == err
        assert code(call(url, "retrieve", {"query": "x", "k": 1}, session=fresh)) == -32001
    opened = call(url, "initialize", INIT, session=fresh)["result"]["_meta"]["session"]
    assert isinstance(opened, str) and opened != fresh and len(opened) >= 32
    assert code(call(url, "retrieve", {"query": "x", "k": 1}, session=fresh)) == -32001
    assert code(call(url, "initialize", INIT, session=opened)) == -32600
    assert call(url, "info", session=opened)["result"]["_meta"]["session"] == opened
    hits = call(url, "retrieve", {"query": "vitamin d", "k": 1}, session=opened)
    assert hits["result"]["hits"][0]["chunk"]["docId"] == "d1"


def test_stateless_requests_are_still_served(url: str) -> None:
    """Without the header a request is implicitly initialized (§5.2): curl needs no handshake,
    and each initialize answers (with a session of its own)."""
    assert hit_ids(call(url, "retrieve", {"query": "vitamin d", "k": 1}))
    first, second = (call(url, "initialize", INIT)["result"]["_meta"]["session"]
                     for _ in range(2))
    assert first != second
    assert code(call(url, "initialize", INIT, session=first)) == -32600


def test_a_session_token_keeps_dedup_across_connections(url: str) -> None:
    """§7.7.3 dedup over separate connections needs the issued token; without one the result
    says the sessionId could not be bound, and why."""
    params = {"query": "vitamin d", "k": 2, "sessionId": "agent-1"}
    mine = call(url, "initialize", INIT)["result"]["_meta"]["session"]
    theirs = call(url, "initialize", INIT)["result"]["_meta"]["session"]
    first = call(url, "retrieve", params, session=mine)
    second = call(url, "retrieve", params, session=mine)
    assert len(hit_ids(first)) == len(hit_ids(second)) == 2
    assert not set(hit_ids(first)) & set(hit_ids(second))
    assert UNBOUND_NOTE not in (second["result"]["usage"].get("notes") or [])
    # Another session naming the same sessionId is another caller's session.
    assert hit_ids(call(url, "retrieve", params, session=theirs)) == hit_ids(first)
    unbound = [call(url, "retrieve", params) for _ in range(2)]
    assert hit_ids(unbound[0]) == hit_ids(unbound[1]) == hit_ids(first)
    assert all(UNBOUND_NOTE in out["result"]["usage"]["notes"] for out in unbound)
    assert "RCP-Session" in UNBOUND_NOTE and "_meta.session" in UNBOUND_NOTE
    plain = call(url, "retrieve", {"query": "vitamin d", "k": 2})
    assert UNBOUND_NOTE not in (plain["result"]["usage"].get("notes") or [])


def test_conformance_is_declared_only_where_the_harness_certifies_it(
        tree_engine: Engine, url: str) -> None:
    """Default flags: the stateless answers fail §13's MUSTs, so no level is stated (any would
    be overclaimed); --stateful states L2, and its lifecycle holds without the header."""
    token = call(url, "initialize", INIT)["result"]["_meta"]["session"]
    for out in (call(url, "initialize", INIT), call(url, "info"),
                call(url, "info", session=token)):
        assert "conformance" not in out["result"]["_meta"]
    with served(tree_engine, stateful=True) as stateful:
        assert code(call(stateful, "retrieve", {"query": "x", "k": 1})) == -32001
        assert code(call(stateful, "initialize", {"protocolVersion": 0})) == -32002
        assert code(call(stateful, "retrieve", {"query": "x", "k": 1})) == -32001
        assert call(stateful, "initialize", INIT)["result"]["_meta"]["conformance"] == "L2"
        assert code(call(stateful, "initialize", INIT)) == -32600
        assert call(stateful, "info")["result"]["_meta"]["conformance"] == "L2"


def test_llm_spend_is_shown_only_to_callers_that_may_write(tree_engine: Engine,
                                                            url: str) -> None:
    """What the derived builds cost in LLM calls is the operator's: an anonymous caller sees
    the units' state without it, a token holder with it."""
    for out in (call(url, "initialize", INIT), call(url, "info")):
        units = out["result"]["capabilities"]["x-rcp-agentic"]["units"]
        assert "current" in units["tree-node"] and "llm" not in units["tree-node"]
    with served(tree_engine, token=TOKEN) as trusted:
        for method in ("initialize", "info"):
            units = call(trusted, method, INIT, token=TOKEN)["result"]["capabilities"][
                "x-rcp-agentic"]["units"]
            assert units["tree-node"]["llm"]["calls"] == 3


def test_initialize_and_info_read_the_derived_state_live(tmp_path: Path, embedder: Any) -> None:
    """Documents added after the server started: info and a later initialize (and info in a
    session opened before) show the new index version and what the tree reflects; the
    capabilities offered stay the session's (§13.2)."""
    with Engine(tmp_path / "e", embedder=embedder, build_tree=True,
                derived_updates="inline") as eng, served(eng) as base:
        eng.add_documents(DOCS[:4])
        before = call(base, "initialize", INIT)["result"]
        session = before["_meta"]["session"]
        version = eng.index_version
        assert before["_meta"]["x-rcp-agentic"]["indexVersion"] == version
        tree = before["capabilities"]["x-rcp-agentic"]["units"]["tree-node"]
        assert tree["reflects"] == version and tree["current"] is True
        eng.add_documents(DOCS[4:])
        assert eng.index_version != version
        for out in (call(base, "info"), call(base, "initialize", INIT),
                    call(base, "info", session=session)):
            result = out["result"]
            assert result["_meta"]["x-rcp-agentic"]["indexVersion"] == eng.index_version
            tree = result["capabilities"]["x-rcp-agentic"]["units"]["tree-node"]
            assert tree["reflects"] == eng.index_version and tree["current"] is True
            assert set(result["capabilities"]) == set(before["capabilities"])
