"""The transport-agnostic RCP/1 dispatcher: JSON-RPC framing, lifecycle, batches, errors, methods."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from conftest import REPO
from rcp_agentic import Engine
from rcp_agentic.errors import InvalidParams
from rcp_agentic.protocol.caller import Caller, bind_sessions, session_key, unbind_result
from rcp_agentic.protocol.dispatcher import Dispatcher

SCHEMA = json.loads((REPO / "tests" / "schema" / "rcp-1.0.json").read_text("utf-8"))


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$schema": SCHEMA["$schema"], "$defs": SCHEMA["$defs"],
                                            "$ref": f"#/$defs/{name}"})


def req(method: str, params: Any = None, id_: Any = 1) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


@pytest.fixture()
def rpc(filled_engine: Engine) -> Dispatcher:
    return Dispatcher(filled_engine)


@pytest.fixture()
def recall_rpc(recall_engine: Engine) -> Dispatcher:
    """A fresh dispatcher over the engine of each recall backend."""
    return Dispatcher(recall_engine)


def init(rpc: Dispatcher) -> dict[str, Any]:
    out = rpc.handle(req("initialize", {"protocolVersion": 1, "client": {"name": "t"}}))
    assert isinstance(out, dict) and "result" in out
    return out["result"]


def test_lifecycle(rpc: Dispatcher) -> None:
    out = rpc.handle(req("retrieve", {"query": "x", "k": 1}))
    assert out["error"]["code"] == -32001  # type: ignore[index]
    assert rpc.handle(req("ping", {"nonce": "n1"}))["result"] == {"nonce": "n1"}  # type: ignore[index]
    assert rpc.handle(req("info"))["result"]["protocolVersion"] == 1  # type: ignore[index]
    bad = rpc.handle(req("initialize", {"protocolVersion": 0}))
    assert bad["error"]["code"] == -32002 and not rpc.initialized  # type: ignore[index]
    result = init(rpc)
    validator("InitializeResult").validate(result)
    assert result["capabilities"]["retrieve"]["maxK"] == 200 and "index" in result["capabilities"]
    again = rpc.handle(req("initialize", {"protocolVersion": 1}))
    assert again["error"]["code"] == -32600  # type: ignore[index]
    assert rpc.handle(req("info"))["result"]["capabilities"] == result["capabilities"]  # type: ignore[index]


def test_newer_client_negotiates_down(rpc: Dispatcher) -> None:
    out = rpc.handle(req("initialize", {"protocolVersion": 7}))
    assert out["result"]["protocolVersion"] == 1  # type: ignore[index]


@pytest.mark.parametrize("id_", [7, "abc", 3.5, 0, ""])
def test_ids_echoed_with_type(rpc: Dispatcher, id_: Any) -> None:
    out = rpc.handle(req("ping", {}, id_))
    assert out["id"] == id_ and type(out["id"]) is type(id_)  # type: ignore[index]


@pytest.mark.parametrize("frame,code", [
    ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, -32600),
    ({"jsonrpc": "2.0", "id": 1}, -32600),
    ({"jsonrpc": "2.0", "id": None, "method": "ping"}, -32600),
    ({"jsonrpc": "2.0", "id": True, "method": "ping"}, -32600),
    ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}, -32602),
    ({"jsonrpc": "2.0", "id": 1, "method": "no/such"}, -32004),
    ({"jsonrpc": "2.0", "id": 1, "method": "embed", "params": {}}, -32001),
    ("just a string", -32600),
])
def test_bad_frames(rpc: Dispatcher, frame: Any, code: int) -> None:
    out = rpc.handle(frame)
    assert out["error"]["code"] == code  # type: ignore[index]
    validator("JsonRpcError").validate(out)


def test_capability_gating_after_initialize(rpc: Dispatcher) -> None:
    init(rpc)
    for method in ("embed/sparse", "graph", "query/transform", "memory/build", "rerank"):
        assert rpc.handle(req(method, {}))["error"]["code"] == -32003  # type: ignore[index]
    assert rpc.handle(req("memory/nope", {}))["error"]["code"] == -32004  # type: ignore[index]


def test_parse_error_and_notifications(rpc: Dispatcher) -> None:
    out = json.loads(rpc.handle_text("{not json") or "")
    assert out == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": out["error"]["message"]}}
    assert rpc.handle({"jsonrpc": "2.0", "method": "notifications/cancel", "params": {}}) is None
    assert rpc.handle({"jsonrpc": "2.0", "method": "retrieve", "params": {"query": "x"}}) is None


def test_batches(rpc: Dispatcher) -> None:
    assert rpc.handle([])["error"]["code"] == -32600  # type: ignore[call-overload,index]
    assert rpc.handle([{"jsonrpc": "2.0", "method": "notifications/x"}]) is None
    out = rpc.handle([req("ping", {}, 1), {"jsonrpc": "2.0", "method": "notifications/x"},
                      42, req("retrieve", {"query": "x"}, 2), req("info", None, 3)])
    assert isinstance(out, list) and len(out) == 4
    by_id = {o.get("id"): o for o in out}
    assert by_id[1]["result"] == {} and by_id[2]["error"]["code"] == -32001
    assert by_id[None]["error"]["code"] == -32600 and "result" in by_id[3]
    big = rpc.handle([req("ping", {}, i) for i in range(65)])
    assert big["error"]["code"] == -32602  # type: ignore[call-overload,index]


def test_retrieve_over_rpc(recall_rpc: Dispatcher) -> None:
    init(recall_rpc)
    text = recall_rpc.handle_text(json.dumps(req("retrieve", {
        "query": "rank fusion", "k": 3, "mode": "hybrid", "fusion": {"method": "convex"},
        "filter": {"field": "lang", "op": "eq", "value": "en"}, "_meta": {"progressToken": 1},
        "futureField": {"ignored": True}})))
    out = json.loads(text or "")
    validator("JsonRpcSuccess").validate(out)
    validator("RetrieveResult").validate(out["result"])
    assert out["result"]["hits"][0]["id"] == "doc:d5#c0"
    for params, code, key, value in [
        ({"query": "x", "k": -1}, -32602, "field", "k"),
        ({"query": "x", "mode": "colbert"}, -32005, "option", "mode"),
        ({"query": "x", "filter": {"field": "nope", "op": "eq", "value": 1}}, -32602, "field",
         "filter.nope"),
        ({"k": 3}, -32602, "field", "query"),
    ]:
        err = recall_rpc.handle(req("retrieve", params))["error"]  # type: ignore[index]
        assert err["code"] == code and err["data"][key] == value, (params, err)


def test_index_add_and_delete(tmp_path: Any, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder)
    rpc = Dispatcher(eng)
    init(rpc)
    out = rpc.handle(req("index/add", {"documents": [
        {"id": "b", "text": "Beta text about owls."}, {"id": "a", "text": "Alpha about cats."},
        {"id": "b", "text": "Beta again, about owls."}, {"text": "No id at all."}]}))
    ids = out["result"]["ids"]  # type: ignore[index]
    assert ids[:3] == ["b", "a", "b"] and len(ids) == 4
    validator("IndexAddResult").validate(out["result"])  # type: ignore[index]
    bad = rpc.handle(req("index/add", {"documents": [{"text": 5}]}))
    assert bad["error"]["data"]["field"] == "documents[0].text"  # type: ignore[index]
    assert eng.stats()["documents"] == 3
    gone = rpc.handle(req("index/delete", {"ids": ["a", "zzz"]}))
    assert gone["result"] == {"deleted": 1}  # type: ignore[index]
    assert rpc.handle(req("index/delete", {"ids": ["a"]}))["result"] == {"deleted": 0}  # type: ignore[index]
    assert rpc.handle(req("index/delete", {"ids": "a"}))["error"]["code"] == -32602  # type: ignore[index]
    eng.close()


def test_untrusted_input_never_crashes(recall_rpc: Dispatcher) -> None:
    init(recall_rpc)
    nasty = [None, [], {}, {"query": None}, {"query": {"type": "image"}}, {"query": "x", "k": 10**30},
             {"query": "x", "filter": {"and": [{"or": []}]}}, {"query": "\x00\ud800", "k": 1},
             {"query": "x", "cursor": "...."}, {"query": "x", "indexVersion": "v" + "9" * 400}]
    for params in nasty:
        text = recall_rpc.handle_text(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "retrieve",
                                           "params": params}))
        out = json.loads(text or "")
        assert "result" in out or out["error"]["code"] in (-32602, -32005, -32010), (params, out)


def test_embed(rpc: Dispatcher, embedder: Any) -> None:
    import base64

    import numpy as np

    init(rpc)
    caps = rpc.capabilities()["embed"]
    assert caps["dimension"] == 384 and "f32-base64" in caps["encodings"]
    out = rpc.handle(req("embed", {"inputs": ["hello world", {"type": "text", "text": "x"}],
                                   "kind": "query"}))["result"]  # type: ignore[index]
    validator("EmbedResult").validate(out)
    assert len(out["vectors"]) == 2 and len(out["vectors"][0]) == 384
    assert np.allclose(out["vectors"][0], embedder.embed_query("hello world"), atol=1e-5)
    packed = rpc.handle(req("embed", {"texts": ["hello world"], "encoding": "f32-base64",
                                      "kind": "query"}))["result"]  # type: ignore[index]
    validator("EmbedResult").validate(packed)
    raw = base64.b64decode(packed["vectors"][0])
    assert packed["encoding"] == "f32-base64" and len(raw) == packed["dimension"] * 4
    assert np.allclose(np.frombuffer(raw, "<f4"), out["vectors"][0], atol=1e-6)
    for params, code in [({"inputs": []}, -32602), ({"inputs": ["a"], "encoding": "f16"}, -32005),
                         ({"inputs": ["a"] * 300}, -32013), ({"inputs": ["a"], "kind": "x"},
                                                            -32602), ({}, -32602)]:
        assert rpc.handle(req("embed", params))["error"]["code"] == code, params  # type: ignore[index]


def test_a_caller_that_may_not_write_is_offered_and_gated_accordingly(rpc: Dispatcher) -> None:
    init(rpc)
    anonymous = Caller(writes=False, principal="conn-a")
    caps = rpc.handle(req("info"), caller=anonymous)["result"]["capabilities"]  # type: ignore[index]
    assert "index" not in caps and "feedback" not in caps and "retrieve" in caps
    assert "index" in rpc.capabilities()  # the other variant is untouched (§13.2)
    err = rpc.handle(req("index/delete", {"ids": ["d1"]}), caller=anonymous)["error"]  # type: ignore[index]
    assert err["code"] == -32003 and "to this caller" in err["message"]


def test_session_ids_are_bound_to_the_principal(rpc: Dispatcher, filled_engine: Engine) -> None:
    init(rpc)
    a, b = Caller(principal="a"), Caller(principal="b")

    def ids(caller: Caller) -> set[str]:
        out = rpc.handle(req("retrieve", {"query": "rank fusion", "k": 2, "sessionId": "s"}),
                         caller=caller)
        return {h["id"] for h in out["result"]["hits"]}  # type: ignore[index]

    first, again, other = ids(a), ids(a), ids(b)
    assert not first & again and other == first
    assert filled_engine.sessions.seen_count("s") == 0  # the engine never sees the client's id
    assert filled_engine.sessions.seen_count(session_key("a", "s")) == 4


def test_session_keys_fit_the_engine_limit() -> None:
    bound, back = bind_sessions("memory/recall", {"query": "q", "sessionId": "x",
                                                  "memoryId": "session:y"}, "p", 8)
    assert len(bound["sessionId"]) == 8 and bound["memoryId"] == "session:" + session_key(
        "p", "y", 8) and set(back.values()) == {"x", "y"}
    assert bind_sessions("memory/recall", {"memoryId": "graph@v1"}, "p", 8)[0] == {
        "memoryId": "graph@v1"}  # a graph memory names no session
    assert unbind_result({"memoryId": bound["memoryId"], "tokens": 3}, back) == {
        "memoryId": "session:y", "tokens": 3}
    for bad in ("session:", "session:" + "z" * 9):
        with pytest.raises(InvalidParams) as err:
            bind_sessions("memory/build", {"memoryId": bad}, "p", 8)
        assert err.value.field == "memoryId"
    assert session_key("p", "s") != session_key("q", "s") != session_key("p", "t")
