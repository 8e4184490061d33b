"""``graph`` (§7.9), ``memory/build`` and ``memory/recall`` (§7.17) over RCP: advertised only with
a knowledge graph, params checked against the schema's shapes, and the same answers through
the in-process dispatcher, a real ``serve --stdio`` subprocess and a real ``serve --http`` one.

A real engine with ``build_graph`` over the wiki corpus of ``test_graph_index`` (a band, its
drummer, their songs and cities). Results are validated against the RCP JSON Schema; hostile
params (hypothesis) are always answered with a specific error, never -32603.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import DOCS, REPO, free_port, initialized, rpc_call, running_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_graph_index import corpus

from rcp_agentic import Engine
from rcp_agentic.client import RCPClient
from rcp_agentic.errors import CapabilityMissing, InvalidParams, OptionUnsupported
from rcp_agentic.protocol.dispatcher import Dispatcher

SCHEMA = json.loads((REPO / "tests" / "schema" / "rcp-1.0.json").read_text("utf-8"))
TOKEN = "graph-token"
QUESTION = "Where was the drummer of Toto born?"


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$schema": SCHEMA["$schema"], "$defs": SCHEMA["$defs"],
                                            "$ref": f"#/$defs/{name}"})


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    path = tmp_path_factory.mktemp("graph-protocol") / "e"
    # The graph alone: the community ops are tested in test_graph_community_ops.py.
    with Engine(path, embedder=embedder, build_graph=True, graph_communities=False) as eng:
        eng.add_documents(corpus())
        eng.wait_for_derived()
    return path


@pytest.fixture(scope="module")
def eng(graph_dir: Path, embedder: Any) -> Iterator[Engine]:
    with Engine(graph_dir, embedder=embedder) as engine:  # build_graph kept in its config
        yield engine


@pytest.fixture(scope="module")
def rpc(eng: Engine) -> Dispatcher:
    return initialized(eng)


def result(rpc: Dispatcher, method: str, params: Any) -> dict[str, Any]:
    out = rpc_call(rpc, method, params)
    assert "result" in out, out
    return out["result"]  # type: ignore[no-any-return]


def error(rpc: Dispatcher, method: str, params: Any) -> dict[str, Any]:
    out = rpc_call(rpc, method, params)
    assert "error" in out, out
    return out["error"]  # type: ignore[no-any-return]


def seed_of(rpc: Dispatcher) -> str:
    """The node id of the best-linked entity of QUESTION, from a local hit."""
    hits = result(rpc, "graph", {"op": "local", "query": QUESTION, "k": 1})["hits"]
    return str(hits[0]["provenance"]["nodes"][0])


# --- capabilities -----------------------------------------------------------------------------

def test_a_graph_is_advertised_with_the_ops_that_work(rpc: Dispatcher) -> None:
    caps = result(rpc, "info", {})["capabilities"]
    assert caps["graph"] == {"ops": ["local", "neighbors"]}
    assert caps["memory"] == {"scopes": ["global", "session"], "clues": True}
    assert caps["x-rcp-agentic"]["graphRecall"] is True  # the x-rcp-agentic-graphRecall option
    limits = caps["x-rcp-agentic"]["limits"]
    assert {limits[n] for n in ("maxGraphHops", "maxSeedIds", "maxClues")} and all(
        isinstance(limits[n], int) and limits[n] > 0
        for n in ("maxGraphHops", "maxGraphNodes", "maxSeedIds", "maxClues",
                  "maxMemoryDocuments"))
    validator("Capabilities").validate(caps)


def test_no_graph_nothing_advertised_and_methods_refused(filled_engine: Engine) -> None:
    rpc = initialized(filled_engine)
    caps = result(rpc, "info", {})["capabilities"]
    assert "graph" not in caps and "memory" not in caps
    assert "graphRecall" not in caps["x-rcp-agentic"]
    assert "maxGraphHops" not in caps["x-rcp-agentic"]["limits"]
    for method, params in (("graph", {"op": "local", "query": "x"}),
                           ("memory/build", {}), ("memory/recall", {"query": "x"})):
        assert error(rpc, method, params)["code"] == -32003, method
    err = error(rpc, "retrieve", {"query": "x", "x-rcp-agentic-graphRecall": True})
    assert err["code"] == -32005 and err["data"]["option"] == "x-rcp-agentic-graphRecall"


# --- graph ------------------------------------------------------------------------------------

def test_local_hits_name_their_entities(rpc: Dispatcher, eng: Engine) -> None:
    out = result(rpc, "graph", {"op": "local", "query": QUESTION, "k": 3})
    validator("GraphResult").validate(out)
    hits = out["hits"]
    assert len(hits) == 3 and all(h["unit"] == "chunk" for h in hits)
    assert {h["chunk"]["docId"] for h in hits} >= {"jeff-porcaro"}
    assert all(h["provenance"]["nodes"] and h["provenance"]["leaves"] == [h["id"]] for h in hits)
    names = {n["id"]: n["name"] for n in result(rpc, "graph", {
        "op": "neighbors", "seedIds": hits[0]["provenance"]["nodes"][:1]})["nodes"]}
    assert names  # the seed itself, at least
    # The same hits as retrieve with graph recall: `local` is that, annotated.
    same = result(rpc, "retrieve", {"query": QUESTION, "k": 3, "x-rcp-agentic-graphRecall": True})
    assert [h["id"] for h in same["hits"]] == [h["id"] for h in hits]
    assert all("graph" in h["scores"] for h in same["hits"])


def test_neighbors_are_bounded_and_weighted(rpc: Dispatcher) -> None:
    seed = seed_of(rpc)
    one = result(rpc, "graph", {"op": "neighbors", "seedIds": [seed], "hops": 1, "k": 50})
    validator("GraphResult").validate(one)
    ids = [n["id"] for n in one["nodes"]]
    assert ids[0] == seed and len(ids) == len(set(ids)) > 1
    assert all(e["src"] in ids and e["dst"] in ids and e["weight"] > 0 for e in one["edges"])
    assert [e["weight"] for e in one["edges"]] == sorted((e["weight"] for e in one["edges"]),
                                                         reverse=True)
    two = result(rpc, "graph", {"op": "neighbors", "seedIds": [seed], "hops": 2, "k": 50})
    assert set(ids) <= {n["id"] for n in two["nodes"]} and len(two["nodes"]) > len(ids)
    # Above the advertised limits: clamped, not refused (§12).
    limits = result(rpc, "info", {})["capabilities"]["x-rcp-agentic"]["limits"]
    far = result(rpc, "graph", {"op": "neighbors", "seedIds": [seed], "hops": 10 ** 9,
                                "k": 10 ** 12})
    at = result(rpc, "graph", {"op": "neighbors", "seedIds": [seed],
                               "hops": limits["maxGraphHops"], "k": limits["maxGraphNodes"]})
    assert far["nodes"] == at["nodes"] and far["edges"] == at["edges"]
    small = result(rpc, "graph", {"op": "neighbors", "seedIds": [seed], "hops": 2, "k": 2})
    assert len(small["nodes"]) == 2 and small["nodes"][0]["id"] == seed


@pytest.mark.parametrize(("params", "code", "where"), [
    ({}, -32602, "op"),
    ({"op": "bogus"}, -32602, "op"),
    ({"op": 5}, -32602, "op"),
    ({"op": ["local"]}, -32602, "op"),
    ({"op": "global"}, -32005, "op"),
    ({"op": "drift", "query": "x"}, -32005, "op"),
    ({"op": "communities"}, -32005, "op"),
    ({"op": "local"}, -32602, "query"),
    ({"op": "local", "query": 5}, -32602, "query"),
    ({"op": "local", "query": "\ud800"}, -32602, "query"),
    ({"op": "local", "query": "x", "k": 0}, -32602, "k"),
    ({"op": "local", "query": "x", "k": -3}, -32602, "k"),
    ({"op": "local", "query": "x", "k": "3"}, -32602, "k"),
    ({"op": "local", "query": "x", "k": True}, -32602, "k"),
    ({"op": "local", "query": "x", "k": 1.5}, -32602, "k"),
    ({"op": "local", "query": "x", "sessionId": 7}, -32602, "sessionId"),
    ({"op": "local", "query": "x", "level": 1}, -32005, "level"),
    ({"op": "local", "query": "x", "level": -1}, -32602, "level"),
    ({"op": "neighbors"}, -32602, "seedIds"),
    ({"op": "neighbors", "seedIds": "node:1"}, -32602, "seedIds"),
    ({"op": "neighbors", "seedIds": []}, -32602, "seedIds"),
    ({"op": "neighbors", "seedIds": [1]}, -32602, "seedIds[0]"),
    ({"op": "neighbors", "seedIds": ["node:nope"]}, -32602, "seedIds[0]"),
    ({"op": "neighbors", "seedIds": ["node:x"] * 65}, -32602, "seedIds"),
    ({"op": "neighbors", "seedIds": ["node:x"], "hops": 0}, -32602, "hops"),
])
def test_graph_params_are_checked(rpc: Dispatcher, params: dict[str, Any], code: int,
                                  where: str) -> None:
    err = error(rpc, "graph", params)
    assert err["code"] == code, err
    assert err["data"]["field" if code == -32602 else "option"] == where, err


# --- memory -----------------------------------------------------------------------------------

def test_memory_build_and_recall_round_trip(rpc: Dispatcher, eng: Engine) -> None:
    built = result(rpc, "memory/build", {})
    validator("MemoryBuildResult").validate(built)
    assert built["memoryId"] == f"graph@{eng.index_version}" and built["tokens"] > 0
    recalled = result(rpc, "memory/recall", {"query": QUESTION, "memoryId": built["memoryId"],
                                             "n": 3})
    validator("MemoryRecallResult").validate(recalled)
    clues = recalled["clues"]
    assert len(clues) == 3 and clues[0]["weight"] == 1.0  # n=3 is filled on this corpus
    assert all(c["seedIds"] and all(s.startswith("node:") for s in c["seedIds"]) for c in clues)
    assert "Toto" in clues[0]["query"]
    # A clue is what the client feeds back: its seeds to `graph`, its query to `retrieve`.
    around = result(rpc, "graph", {"op": "neighbors", "seedIds": clues[-1]["seedIds"]})
    assert {n["id"] for n in around["nodes"]} >= set(clues[-1]["seedIds"])
    assert result(rpc, "retrieve", {"query": clues[-1]["query"], "k": 2})["hits"]
    # n above the advertised limit is clamped.
    assert result(rpc, "memory/recall", {"query": QUESTION, "n": 10 ** 9})["clues"]


def test_session_memory_keeps_the_trajectory(rpc: Dispatcher) -> None:
    built = result(rpc, "memory/build", {"scope": "session", "sessionId": "trail-1",
                                         "documents": [{"text": "Jeff Porcaro and Hartford"}]})
    assert built["memoryId"] == "session:trail-1" and built["tokens"] > 0
    again = result(rpc, "memory/build", {"scope": "session", "memoryId": "session:trail-1",
                                         "documents": [{"text": "Columbia Records"}]})
    assert again["memoryId"] == "session:trail-1" and again["tokens"] > built["tokens"]
    plain = result(rpc, "memory/recall", {"query": "Toto IV", "n": 5})
    steered = result(rpc, "memory/recall", {"query": "Toto IV", "n": 5,
                                            "sessionId": "trail-1"})
    assert plain["clues"] and steered["clues"]
    assert plain["clues"] != steered["clues"]  # the remembered entities seed recall too


@pytest.mark.parametrize(("method", "params", "code", "where"), [
    ("memory/recall", {}, -32602, "query"),
    ("memory/recall", {"query": 3}, -32602, "query"),
    ("memory/recall", {"query": "x", "n": 0}, -32602, "n"),
    ("memory/recall", {"query": "x", "n": "5"}, -32602, "n"),
    ("memory/recall", {"query": "x", "memoryId": 5}, -32602, "memoryId"),
    ("memory/recall", {"query": "x", "memoryId": "someone-else"}, -32015, "memoryId"),
    ("memory/recall", {"query": "x", "sessionId": ["s"]}, -32602, "sessionId"),
    ("memory/build", {"scope": "forever"}, -32602, "scope"),
    ("memory/build", {"scope": "session"}, -32602, "sessionId"),
    ("memory/build", {"documents": "text"}, -32602, "documents"),
    ("memory/build", {"documents": ["text"]}, -32602, "documents[0]"),
    ("memory/build", {"documents": [{"text": 5}]}, -32602, "documents[0].text"),
    ("memory/build", {"documents": [{"text": "x", "id": 5}]}, -32602, "documents[0].id"),
    ("memory/build", {"documents": [{"text": "a\udc00"}]}, -32602, "documents[0].text"),
    ("memory/build", {"memoryId": 5}, -32602, "memoryId"),
])
def test_memory_params_are_checked(rpc: Dispatcher, method: str, params: dict[str, Any],
                                   code: int, where: str) -> None:
    err = error(rpc, method, params)
    assert err["code"] == code and err["data"]["field"] == where, err


def test_memory_build_with_documents_adds_them(tmp_path: Path, embedder: Any) -> None:
    with Engine(tmp_path / "e", embedder=embedder, build_graph=True) as engine:
        engine.add_documents(corpus(["Toto (band)", "Jeff Porcaro"]))
        engine.wait_for_derived()
        rpc = initialized(engine)
        before = engine.stats()["documents"]
        version_before = int(engine.index_version.removeprefix("v"))
        out = result(rpc, "memory/build", {"documents": [
            {"id": "rosanna", "text": "Rosanna is a song by Toto from Toto IV."}]})
        assert engine.stats()["documents"] == before + 1
        # The memory pins the version whose graph holds the new document (the background
        # worker may commit the communities after it, moving the index version on).
        pinned = int(out["memoryId"].removeprefix("graph@v"))
        assert version_before < pinned <= int(engine.index_version.removeprefix("v"))
        graph = engine.graph_data(pinned)
        assert graph is not None and "rosanna" in graph.chunk_docs.values()  # in the graph


# --- hostile input ----------------------------------------------------------------------------

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) |
                     st.text(max_size=20), lambda inner: st.lists(inner, max_size=3) |
                     st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
_params = st.fixed_dictionaries({}, optional={
    "op": st.sampled_from(["local", "neighbors", "global", "x"]) | _json,
    "query": st.text(max_size=60) | _json, "k": st.integers() | _json,
    "seedIds": st.lists(st.text(max_size=24), max_size=4) | _json,
    "hops": st.integers() | _json, "level": _json, "sessionId": st.text(max_size=12) | _json,
    "n": st.integers() | _json, "memoryId": st.sampled_from(["graph@v1", "graph@v999",
                                                             "session:", "graph@v01"]) | _json,
    "scope": st.sampled_from(["global", "session", "x"]) | _json,
})


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(method=st.sampled_from(["graph", "memory/recall", "memory/build"]), params=_params)
def test_hostile_params_get_a_specific_error(rpc: Dispatcher, method: str,
                                             params: dict[str, Any]) -> None:
    if method == "memory/build":
        params.pop("documents", None)  # no corpus writes from the fuzzer
    out = rpc_call(rpc, method, params)
    assert ("result" in out) != ("error" in out)
    if "error" in out:
        assert out["error"]["code"] != -32603, out


# --- real transports --------------------------------------------------------------------------

def _exercise(client: RCPClient) -> None:
    """The same checks over any transport."""
    caps = client.initialize()["capabilities"]
    assert caps["graph"]["ops"] == ["local", "neighbors"] and "memory" in caps
    local = client.graph("local", QUESTION, k=2)
    assert local.hits and len(local.hits) == 2
    nodes = local.hits[0].provenance.nodes if local.hits[0].provenance else None
    assert nodes
    seed = nodes[0]
    near = client.graph("neighbors", seed_ids=[seed], hops=1, k=5)
    assert near.nodes and near.nodes[0].id == seed and near.edges
    clues = client.memory_recall(QUESTION, n=2).clues
    assert clues and clues[0].seed_ids
    assert client.memory_build().memory_id.startswith("graph@v")
    with pytest.raises(OptionUnsupported):  # refused by the client: not advertised
        client.graph("global")
    with pytest.raises(OptionUnsupported) as err:  # sent anyway: the server says the same
        client.graph("global", strict=False)
    assert err.value.code == -32005 and err.value.option == "op"
    with pytest.raises(InvalidParams) as bad:
        client.graph("neighbors", seed_ids=["node:nope"])
    assert bad.value.field == "seedIds[0]"


def test_over_stdio(graph_dir: Path) -> None:
    with RCPClient.stdio(engine=graph_dir, env=dict(os.environ), timeout=300) as client:
        _exercise(client)


def test_over_http(graph_dir: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            urllib.request.urlopen(f"{url}/rcp/ping", data=b"{}", timeout=2)
        except urllib.error.HTTPError:
            return True  # answering (401 without the token): up
        except OSError:
            return False
        return True

    with running_server([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http", "--engine",
                         str(graph_dir), "--port", str(port)], ready, timeout=120,
                        env={**os.environ, "RCP_AGENTIC_TOKEN": TOKEN}):
        with RCPClient.http(url, TOKEN, timeout=300) as client:
            _exercise(client)
        # Without a graph capability a client refuses before sending; a raw frame gets -32602.
        req = urllib.request.Request(
            f"{url}/rcp/graph", method="POST", data=json.dumps(
                {"jsonrpc": "2.0", "id": 1, "method": "graph",
                 "params": {"op": "neighbors", "seedIds": []}}).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer = json.loads(resp.read())
        assert answer["error"]["code"] == -32602 and answer["error"]["data"]["field"] == "seedIds"


@pytest.fixture(scope="module")
def anonymous_url(graph_dir: Path) -> Iterator[str]:
    """A real ``serve --http`` over the graph without a token (anonymous writes refused)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return post(url, "ping", {})[0] == 200
        except OSError:
            return False

    env = {k: v for k, v in os.environ.items() if k != "RCP_AGENTIC_TOKEN"}
    with running_server([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http", "--engine",
                         str(graph_dir), "--port", str(port)], ready, timeout=120, env=env):
        yield url


def post(url: str, method: str, params: dict[str, Any],
         conn: http.client.HTTPConnection | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """One JSON-RPC request, on ``conn`` (kept open) or on a connection of its own."""
    own = conn is None
    conn = conn or http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=300)
    try:
        conn.request("POST", f"/rcp/{method}", json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
            headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        if own:
            conn.close()


def test_anonymous_http_is_offered_session_memory_only(anonymous_url: str) -> None:
    """Issue 21.9: memory/build of the session is no corpus write; of the graph it is, and
    an anonymous caller is offered only the session scope (-32005 for the others)."""
    status, out = post(anonymous_url, "initialize", {"protocolVersion": 1})
    caps = out["result"]["capabilities"]
    assert status == 200 and caps["memory"] == {"scopes": ["session"], "clues": True}
    assert "index" not in caps and "feedback" not in caps and caps["graph"]["ops"]
    validator("Capabilities").validate(caps)
    for params in ({}, {"scope": "global"}, {"scope": "Session", "sessionId": "s"},
                   {"documents": [{"text": "Jeff Porcaro"}]}):
        status, out = post(anonymous_url, "memory/build", params)
        assert status == 200 and out["error"]["code"] == -32005, params
        assert out["error"]["data"]["option"] == "scope" and "TOKEN" in out["error"]["message"]
    status, out = post(anonymous_url, "memory/build", {
        "scope": "session", "sessionId": "anon-1", "documents": [{"text": "Jeff Porcaro"}]})
    assert status == 200 and out["result"]["memoryId"] == "session:anon-1"
    status, out = post(anonymous_url, "memory/recall", {"query": QUESTION, "n": 2})
    assert status == 200 and out["result"]["clues"]


def _recall(url: str, params: dict[str, Any], conn: http.client.HTTPConnection | None = None,
            headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    status, out = post(url, "memory/recall", {"query": "Toto IV", "n": 5, **params}, conn,
                       headers)
    assert status == 200, out
    return list(out["result"]["clues"])


def _held(url: str, params: dict[str, Any], conn: http.client.HTTPConnection | None = None,
          headers: dict[str, str] | None = None) -> int:
    """The tokens a session memory holds (memory/build adding nothing), checking its id."""
    status, out = post(url, "memory/build", {"scope": "session", **params}, conn, headers)
    assert status == 200 and out["result"]["memoryId"] == "session:victim", out
    return int(out["result"]["tokens"])


def test_anonymous_sessions_are_bound_to_the_caller(anonymous_url: str) -> None:
    """Issue 21.12: naming another caller's sessionId, or its memoryId ``session:<id>``, neither
    reads nor changes that session's memory; the caller's own keeps it on its connection."""
    url, plain = anonymous_url, _recall(anonymous_url, {})
    victim = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=300)
    try:
        status, out = post(url, "memory/build", {
            "scope": "session", "sessionId": "victim",
            "documents": [{"text": "Jeff Porcaro and Hartford"}]}, victim)
        held = out["result"]["tokens"]
        assert status == 200 and out["result"]["memoryId"] == "session:victim" and held > 0
        assert _held(url, {"sessionId": "victim"}) == 0  # another connection: its own session
        assert _recall(url, {"sessionId": "victim"}) == plain  # not steered by the victim's
        # The victim's memoryId names no memory of this caller's: -32015, nothing read (§12).
        status, out = post(url, "memory/recall", {"query": "Toto IV",
                                                  "memoryId": "session:victim"})
        assert status == 200 and out["error"]["code"] == -32015, out
        assert _held(url, {"sessionId": "victim"}, victim) == held  # nothing changed
        assert _recall(url, {"memoryId": "session:victim"}, victim) != plain
    finally:
        victim.close()


def _issued(url: str) -> dict[str, str]:
    """The RCP-Session header of a session the server issued (initialize's _meta.session)."""
    status, out = post(url, "initialize", {"protocolVersion": 1})
    assert status == 200, out
    return {"RCP-Session": out["result"]["_meta"]["session"]}


def test_an_rcp_session_header_carries_a_session_across_connections(anonymous_url: str) -> None:
    """The header our client sends (the token initialize issued): the same one on a new
    connection is the same caller."""
    mine, theirs = _issued(anonymous_url), _issued(anonymous_url)
    status, out = post(anonymous_url, "memory/build", {
        "scope": "session", "sessionId": "victim",
        "documents": [{"text": "Jeff Porcaro and Hartford"}]}, headers=mine)
    held = out["result"]["tokens"]
    assert status == 200 and held > 0
    assert _held(anonymous_url, {"memoryId": "session:victim"}, headers=mine) == held
    assert _held(anonymous_url, {"memoryId": "session:victim"}, headers=theirs) == 0
    assert _held(anonymous_url, {"sessionId": "victim"}) == 0  # no header: its connection


@pytest.mark.parametrize(("method", "params", "key", "suggestion"), [
    ("graph", {"op": "local", "query": QUESTION}, "filters", "filter"),
    ("graph", {"op": "global", "query": QUESTION}, "Filter", "filter"),
    ("graph", {"op": "drift", "query": QUESTION}, "x-rcp-agentic-filter", "filter"),
    ("graph", {"op": "neighbors", "seedIds": ["node:x"]}, "seed_ids", "seedIds"),
    ("memory/recall", {"query": QUESTION}, "session_id", "sessionId"),
    ("memory/build", {"scope": "session", "sessionId": "s"}, "documnets", "documents"),
])
def test_unknown_graph_and_memory_params_are_named(anonymous_url: str, rpc: Dispatcher,
                                                   method: str, params: dict[str, Any],
                                                   key: str, suggestion: str) -> None:
    """Issue 21.11 on the wire: -32602 under an explicit strict (before the op is looked at),
    else ignored with a note in usage.notes."""
    status, out = post(anonymous_url, method, {**params, key: {}, "strict": True})
    assert status == 200 and out["error"]["code"] == -32602, out
    assert out["error"]["data"]["field"] == key
    assert f"did you mean {suggestion!r}" in out["error"]["message"]
    if params.get("op") in ("global", "drift"):
        return  # not offered by this graph (no communities): -32005 once the key is dropped
    if params.get("op") == "neighbors":
        params = {**params, "seedIds": [seed_of(rpc)]}  # the same graph, in process
    status, out = post(anonymous_url, method, {**params, key: {}, "strict": False})
    notes = out["result"]["usage"]["notes"]
    assert any(repr(key) in n and repr(suggestion) in n for n in notes), notes


GRAPH_KNOWN = {"graph": {"op", "query", "k", "seedIds", "hops", "level", "sessionId", "cursor",
                         "tokenBudget", "filter", "_meta", "strict"},
               "memory/recall": {"query", "memoryId", "sessionId", "n", "_meta", "strict"},
               "memory/build": {"documents", "memoryId", "scope", "sessionId", "_meta",
                                "strict"}}


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(method=st.sampled_from(sorted(GRAPH_KNOWN)), key=st.text(max_size=20),
       value=st.none() | st.integers() | st.text(max_size=4))
def test_no_unknown_graph_param_is_dropped_under_strict(rpc: Dispatcher, method: str, key: str,
                                                        value: Any) -> None:
    if key in GRAPH_KNOWN[method]:
        return
    params = {"graph": {"op": "local", "query": QUESTION, "k": 1},
              "memory/recall": {"query": QUESTION, "n": 1},
              "memory/build": {"scope": "session", "sessionId": "fuzz"}}[method]
    out = rpc_call(rpc, method, {**params, key: value, "strict": True})
    if key.lower().startswith("x-") and not key.lower().startswith("x-rcp-agentic"):
        assert any(repr(key) in n for n in out["result"]["usage"]["notes"]), out
    else:
        assert out["error"]["code"] == -32602 and out["error"]["data"]["field"] == key, out


def test_client_never_calls_graph_on_an_engine_without_one(tmp_path: Path,
                                                           embedder: Any) -> None:
    with Engine(tmp_path / "e", embedder=embedder) as engine:
        engine.add_documents(DOCS[:2])
        rpc = Dispatcher(engine)
        seen: list[str] = []
        inner = rpc.handle

        def spy(message: Any, *args: Any, **kwargs: Any) -> Any:
            seen.extend(m.get("method") for m in (message if isinstance(message, list)
                                                  else [message]))
            return inner(message, *args, **kwargs)

        rpc.handle = spy  # type: ignore[method-assign]
        with RCPClient.in_process(rpc) as client:
            with pytest.raises(CapabilityMissing):
                client.graph("local", "x")
            with pytest.raises(CapabilityMissing):
                client.memory_recall("x")
            with pytest.raises(OptionUnsupported):
                client.retrieve("x", graph_recall=True)
        assert not {"graph", "memory/recall", "retrieve"} & set(seen)
