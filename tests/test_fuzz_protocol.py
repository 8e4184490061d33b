"""Untrusted frames against the dispatcher: any JSON in, a well-formed JSON-RPC answer out.

Hypothesis throws arbitrary JSON at every method (and at the framing itself). The
dispatcher must never raise, must answer requests with a result or an RCP error of
the right shape, and must not fall back to -32603: malformed input is the
caller's fault and deserves a specific code.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcp_agentic import Engine
from rcp_agentic.protocol.dispatcher import Dispatcher, dumps
from rcp_agentic.protocol.methods import RCP_METHODS

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-2**40, max_value=2**40)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
# Keys each method reads, so the fuzz reaches past the first missing-field check.
KEYS = st.sampled_from(["query", "k", "mode", "unit", "filter", "fusion", "rerank", "mmr",
                        "recency", "minScore", "tokenBudget", "sessionId", "candidateK",
                        "cursor", "indexVersion", "inputs", "kind", "encoding", "passages",
                        "topN", "documents", "ids", "signals", "_meta", "level", "strict",
                        "includeText", "protocolVersion", "nonce", "texts"])
PARAMS = st.dictionaries(KEYS, JSON, max_size=5)
ALLOWED = {-32700, -32600, -32602, -32001, -32002, -32003, -32004, -32005, -32006, -32010,
           -32013, -32014, -32015, -32016}


@pytest.fixture(scope="module")
def rpc(filled_engine: Engine) -> Dispatcher:
    d = Dispatcher(filled_engine)
    d.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": 1}})
    return d


def check(response: Any, request: Any) -> None:
    json.loads(dumps(response))  # serialisable, no NaN
    assert isinstance(response, dict) and response.get("jsonrpc") == "2.0"
    if "error" in response:
        code = response["error"]["code"]
        assert code in ALLOWED, (request, response)
    else:
        assert "result" in response


READ_ONLY = sorted(m for m in RCP_METHODS if m not in ("shutdown", "index/add", "index/delete"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(method=st.sampled_from(READ_ONLY + ["x-vendor", "nope/nope"]), params=PARAMS,
       id_=st.integers(min_value=1, max_value=10**6) | st.text(min_size=1, max_size=8))
def test_any_params_get_a_specific_answer(rpc: Dispatcher, method: str, params: dict[str, Any],
                                          id_: Any) -> None:
    request = {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}
    response = rpc.handle(request)
    check(response, request)
    assert response["id"] == id_  # type: ignore[index]


@settings(max_examples=200, deadline=None)
@given(frame=JSON)
def test_any_frame_is_answered_or_ignored(rpc: Dispatcher, frame: Any) -> None:
    response = rpc.handle(frame)
    if response is None:
        return  # a notification (or a batch of them)
    for one in response if isinstance(response, list) else [response]:
        check(one, frame)


@settings(max_examples=60, deadline=None)
@given(documents=st.lists(st.dictionaries(st.sampled_from(["id", "text", "title", "meta",
                                                           "trust", "uri"]), JSON, max_size=4),
                          min_size=1, max_size=3))
def test_bad_documents_never_corrupt_the_store(tmp_path_factory: pytest.TempPathFactory,
                                               embedder: Any, documents: list[Any]) -> None:
    eng = Engine(tmp_path_factory.mktemp("fuzz") / "e", embedder=embedder)
    try:
        rpc = Dispatcher(eng)
        rpc.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": 1}})
        rpc.handle({"jsonrpc": "2.0", "id": 1, "method": "index/add",
                    "params": {"documents": [{"id": "keep", "text": "kept text"}]}})
        before = eng.stats()
        request = {"jsonrpc": "2.0", "id": 2, "method": "index/add",
                   "params": {"documents": documents}}
        response = rpc.handle(request)
        check(response, request)
        if "error" in response:  # type: ignore[operator]
            assert eng.stats() == before  # nothing of a refused batch was written
        hits = eng.retrieve("kept text", k=1, filter={"field": "doc_id", "op": "eq",
                                                      "value": "keep"}).hits
        assert hits and hits[0].text == "kept text"
    finally:
        eng.close()
