"""Hostile input over the protocol (issue 9): filter size, lone surrogates, unbounded sizes, codes.

Every case goes through the real dispatcher in front of a real engine (SQLite, the
MiniLM embedder); each bad input must be a specific RCP error (-32602 naming the
field, never -32603) and leave what is stored untouched.
"""

from __future__ import annotations

import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from conftest import DOCS, initialized, rpc_call
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rcp_agentic import Engine
from rcp_agentic.config import EngineConfig
from rcp_agentic.pipeline.params import PARAM_NAMES
from rcp_agentic.protocol.dispatcher import Dispatcher
from rcp_agentic.sessions import Candidate, SessionStore

LEAF = {"field": "lang", "op": "eq", "value": "en"}
TAGS = {"field": "tags", "op": "contains", "value": "ir"}
# Small limits, so each one can be crossed cheaply.
SMALL = {"max_query_chars": 100, "max_session_id_chars": 16, "max_token_budget": 1000,
         "max_filter_depth": 4, "max_filter_nodes": 10, "max_document_chars": 300,
         "max_hit_chars": 40, "max_embed_chars": 50}


def error(rpc: Dispatcher, method: str, params: Any) -> dict[str, Any]:
    out = rpc_call(rpc, method, params)
    assert "error" in out, out
    return out["error"]


def bad_param(rpc: Dispatcher, method: str, params: Any, field: str) -> str:
    err = error(rpc, method, params)
    assert err["code"] == -32602 and err["data"]["field"] == field, err
    return err["message"]


@pytest.fixture(scope="module")
def rpc(filled_engine: Engine) -> Dispatcher:
    return initialized(filled_engine)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Any:
    """An engine holding DOCS with SMALL limits, behind a dispatcher."""
    eng = Engine(tmp_path_factory.mktemp("small") / "e", embedder=embedder, **SMALL)
    eng.add_documents(DOCS)
    yield initialized(eng)
    eng.close()


def chain(op: str, depth: int, leaf: dict[str, Any] = LEAF) -> dict[str, Any]:
    """A filter ``depth`` objects deep: ``op`` nodes down to ``leaf``."""
    node = leaf
    for _ in range(depth - 1):
        node = {"not": node} if op == "not" else {op: [node, leaf]}
    return node


def wide_and_deep() -> dict[str, Any]:
    """32 levels of `and`, each with 15 leaves before the nested level (497 nodes)."""
    node = TAGS
    for _ in range(31):
        node = {"and": [TAGS] * 15 + [node]}
    return node


# --- 11. filters ---------------------------------------------------------------------


@pytest.mark.parametrize("filter_", [
    chain("not", 45), chain("and", 91), {"and": [LEAF] * 960}, chain("or", 10_000),
    {"field": "lang", "op": "in", "value": ["en"] * 600},
], ids=["not-45", "and-91", "960-leaves", "or-10000", "in-600"])
def test_oversized_filters_are_bad_params(rpc: Dispatcher, filter_: dict[str, Any]) -> None:
    message = bad_param(rpc, "retrieve", {"query": "x", "filter": filter_}, "filter")
    assert "max_filter" in message


def test_a_filter_100000_deep_is_refused_without_recursion(filled_engine: Engine) -> None:
    from rcp_agentic.errors import InvalidParams
    with pytest.raises(InvalidParams) as exc:
        filled_engine.retrieve("x", filter=chain("not", 100_000))
    assert exc.value.field == "filter"


@pytest.mark.parametrize("filter_", [
    chain("not", 32, TAGS), chain("and", 32, TAGS), {"and": [TAGS] * 511},
    {"or": [TAGS] * 511},
    # The shape SQLite's parser stack cannot take unless the nested operand comes first.
    wide_and_deep(),
], ids=["not-32", "and-32", "and-511", "or-511", "wide-and-deep"])
def test_filters_at_the_limits_are_answered(rpc: Dispatcher, filter_: dict[str, Any]) -> None:
    out = rpc_call(rpc, "retrieve", {"query": "rank fusion", "mode": "sparse", "filter": filter_})
    assert "result" in out, out


def test_filter_limits_follow_the_config(small: Dispatcher) -> None:
    assert "result" in rpc_call(small, "retrieve", {"query": "x", "filter": chain("not", 4)})
    bad_param(small, "retrieve", {"query": "x", "filter": chain("not", 5)}, "filter")
    bad_param(small, "retrieve", {"query": "x", "filter": {"or": [LEAF] * 10}}, "filter")


def test_filter_semantics_survive_operand_reordering(rpc: Dispatcher) -> None:
    # The nested `or` is compiled before the leaf; the result must not change.
    filter_ = {"and": [{"field": "year", "op": "gte", "value": 2015},
                       {"or": [TAGS, {"field": "lang", "op": "eq", "value": "de"}]}]}
    out = rpc_call(rpc, "retrieve", {"query": "documents", "k": 10, "filter": filter_})
    got = sorted(h["chunk"]["docId"] for h in out["result"]["hits"])
    want = sorted(d["id"] for d in DOCS if d["meta"]["year"] >= 2015
                  and ("ir" in d["meta"]["tags"] or d["meta"]["lang"] == "de"))
    assert got == want


@pytest.mark.parametrize("params,field", [
    ({"query": "x", "filter": {"field": "lang", "op": "eq", "value": "\ud800"}}, "filter.value"),
    ({"query": "x", "filter": {"and": [LEAF, {"field": "lang", "op": "in",
                                              "value": ["en", "e\udc00"]}]}},
     "filter.and[1].value[1]"),
    ({"query": "x", "filter": {"field": "lang\ud800", "op": "eq", "value": "en"}},
     "filter.field"),
    ({"query": "x", "filter": {"field": "lang", "op": "eq", "value": {"\ud800": 1}}},
     "filter.value"),
    ({"query": "x", "cursor": "abc.\ud800"}, "cursor"),
    ({"query": "x", "cursor": "\udfff"}, "cursor"),
    ({"query": "x", "sessionId": "s\ud800"}, "sessionId"),
    ({"query": [{"type": "text", "text": "x", "\ud800": 1}], "k": 1}, "query[0]"),
])
def test_lone_surrogates_in_retrieve_params_are_bad_params(rpc: Dispatcher,
                                                            params: dict[str, Any],
                                                            field: str) -> None:
    bad_param(rpc, "retrieve", params, field)


def test_a_lone_surrogate_in_the_query_is_cleaned(rpc: Dispatcher) -> None:
    out = rpc_call(rpc, "retrieve", {"query": "rank fusion \ud800", "k": 1})
    assert out["result"]["hits"][0]["chunk"]["docId"] == "d5"


def test_lone_surrogates_in_index_add_are_cleaned(engine: Engine) -> None:
    rpc = initialized(engine)
    out = rpc_call(rpc, "index/add", {"documents": [{
        "id": "s1", "text": "Solar \ud800panels convert light.", "title": "Ti\udc00tle",
        "source": "src\ud800", "uri": "file:///x\ud800", "meta": {"k\ud800": "v\udfff"}}]})
    assert out["result"]["ids"] == ["s1"], out
    hit = rpc_call(rpc, "retrieve", {"query": "solar panels", "k": 1})["result"]["hits"][0]
    assert hit["text"] == "Solar \ufffdpanels convert light."
    assert hit["citation"]["title"] == "Ti\ufffdtle"
    assert hit["citation"]["source"] == "src\ufffd"
    assert hit["meta"]["k\ufffd"] == "v\ufffd" and hit["meta"]["uri"] == "file:///x\ufffd"


def test_lone_surrogates_in_ids_and_feedback_are_bad_params(engine: Engine) -> None:
    rpc = initialized(engine)
    rpc_call(rpc, "index/add", {"documents": [{"id": "keep", "text": "kept text"}]})
    before = engine.stats()
    bad_param(rpc, "index/add", {"documents": [{"id": "a", "text": "ok"},
                                               {"id": "b\ud800", "text": "x"}]},
              "documents[1].id")
    bad_param(rpc, "index/delete", {"ids": ["keep", "\ud800"]}, "ids[1]")
    assert engine.stats() == before
    bad_param(rpc, "feedback", {"signals": [{"hitId": "doc:keep\ud800", "helpful": True}]},
              "signals[0].hitId")
    bad_param(rpc, "feedback", {"signals": [], "sessionId": "\udc00"}, "sessionId")
    bad_param(rpc, "feedback", {"signals": [], "query": "q\udc00"}, "query")


# --- 12. unbounded sizes ---------------------------------------------------------------


def test_limits_are_advertised(small: Dispatcher) -> None:
    limits = rpc_call(small, "info", {})["result"]["capabilities"]["x-rcp-agentic"]["limits"]
    config = small.engine.config
    assert limits == limits | {
        "maxQueryChars": 100, "maxSessionIdChars": 16, "maxTokenBudget": 1000,
        "maxFilterDepth": 4, "maxFilterNodes": 10, "maxDocumentChars": 300, "maxHitChars": 40,
        "maxEmbedChars": 50, "sessionMaxBytes": config.session_max_bytes,
        "maxFilterFields": config.max_filter_fields, "maxMetaKeys": config.max_meta_keys,
        "maxMetaDepth": config.max_meta_depth}


def test_query_length_is_capped(rpc: Dispatcher, small: Dispatcher) -> None:
    limit = EngineConfig.model_validate({}).max_query_chars
    huge = "word " * (7 * 1024 * 1024 // 5)  # the 7 MiB query of the issue
    assert "7340030" in bad_param(rpc, "retrieve", {"query": huge, "mode": "sparse"}, "query")
    assert "result" in rpc_call(rpc, "retrieve", {"query": "a" * limit, "mode": "sparse"})
    bad_param(small, "retrieve", {"query": "x" * 101}, "query")
    bad_param(small, "retrieve", {"query": [{"type": "text", "text": "x" * 60},
                                            {"type": "text", "text": "y" * 60}]}, "query")


def test_query_cache_holds_digests_not_texts(filled_engine: Engine) -> None:
    embedder = filled_engine.embedder
    text = "What do mitochondria produce? " * 4000  # 120 KB
    first = embedder.embed_query(text)
    assert embedder.embed_query(text) is first  # a cache hit
    keys = list(embedder._cache)
    assert keys and all(isinstance(k, bytes) and len(k) == 32 for k in keys)
    assert sum(sys.getsizeof(k) for k in keys) < 100 * len(keys)


def test_session_id_and_token_budget_are_capped(small: Dispatcher) -> None:
    assert "result" in rpc_call(small, "retrieve", {"query": "x", "sessionId": "s" * 16})
    bad_param(small, "retrieve", {"query": "x", "sessionId": "s" * 17}, "sessionId")
    assert "result" in rpc_call(small, "retrieve", {"query": "x", "tokenBudget": 1000})
    bad_param(small, "retrieve", {"query": "x", "tokenBudget": 1001}, "tokenBudget")
    bad_param(small, "retrieve", {"query": "x", "tokenBudget": 10**4000}, "tokenBudget")


def test_sessions_are_bounded_by_bytes() -> None:
    bound = 2 * 1024 * 1024
    store = SessionStore(max_bytes=bound)
    hits = [Candidate(f"doc:d{i}#c0", "chunk", f"d{i}", None, None) for i in range(20)]
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for n in range(300):  # 300 ids of 64 Ki characters: ~19 MiB unbounded
            store.record(f"{n:04d}" + "x" * 65_536, hits)
            assert store.nbytes <= bound
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert held <= bound, held  # the accounting is not below what is really held
    assert 10 < len(store) < 300
    assert store.seen_count("0299" + "x" * 65_536) == 20  # the newest survive, the oldest go
    assert store.seen_count("0000" + "x" * 65_536) == 0


def test_the_engine_bounds_its_sessions_by_bytes(tmp_path: Path, embedder: Any) -> None:
    with Engine(tmp_path / "e", embedder=embedder, session_max_bytes=8 * 1024) as eng:
        eng.add_documents(DOCS)
        for n in range(40):
            eng.retrieve("rank fusion", k=3, session_id=f"{n:03d}" + "s" * 200)
            assert eng.sessions.nbytes <= 8 * 1024
        assert len(eng.sessions) < 40  # some were evicted ...
        assert eng.sessions.seen_count("039" + "s" * 200) == 3  # ... the oldest first
        assert eng.sessions.seen_count("000" + "s" * 200) == 0


def test_documents_over_the_limit_are_refused_whole(small: Dispatcher) -> None:
    before = small.engine.stats()
    bad_param(small, "index/add", {"documents": [{"id": "ok", "text": "fine"},
                                                 {"id": "big", "text": "y" * 301}]},
              "documents[1].text")
    assert small.engine.stats() == before


def test_hit_text_is_cut_and_flagged(small: Dispatcher) -> None:
    out = rpc_call(small, "retrieve", {"query": "rank fusion", "k": 1, "unit": "document"})
    result = out["result"]
    hit = result["hits"][0]
    full = next(d["text"] for d in DOCS if d["id"] == "d5")
    assert hit["text"] == full[:40] and hit["meta"]["truncated"] is True
    assert hit["meta"]["text_chars"] == len(full)
    assert any("maxHitChars" in note for note in result["usage"]["notes"])


def test_embed_inputs_are_capped(small: Dispatcher) -> None:
    assert "result" in rpc_call(small, "embed", {"inputs": ["x" * 50]})
    bad_param(small, "embed", {"inputs": ["short", "x" * 51]}, "inputs[1]")
    bad_param(small, "embed", {"inputs": [{"type": "text", "text": "x" * 51}]}, "inputs[0]")


# --- 10 and 14. answers that echo, and error codes ------------------------------------------


@pytest.mark.parametrize("method", ["x-vendor/thing", "x-rcp-agentic/nope", "x-rcp-agentic"])
def test_undefined_x_methods_are_unknown(rpc: Dispatcher, method: str) -> None:
    assert "x-rcp-agentic" in rpc_call(rpc, "info", {})["result"]["capabilities"]
    assert error(rpc, method, {})["code"] == -32004


def test_echoes_that_json_cannot_carry(rpc: Dispatcher) -> None:
    out = json.loads(rpc.handle_text('{"jsonrpc":"2.0","id":1e400,"method":"ping"}') or "")
    assert out["id"] is None and out["error"]["code"] == -32600
    out = json.loads(rpc.handle_text('{"jsonrpc":"2.0","id":2,"method":"ping",'
                                     '"params":{"nonce":[1e400]}}') or "")
    assert out["error"]["code"] == -32602 and out["error"]["data"]["field"] == "nonce"
    text = rpc.handle_text('{"jsonrpc":"2.0","id":"\\ud800","method":"ping",'
                           '"params":{"nonce":"\\udc00"}}') or ""
    assert json.loads(text) == {"jsonrpc": "2.0", "id": "\ud800", "result": {"nonce": "\udc00"}}
    text.encode("utf-8")
    out = json.loads(rpc.handle_text('{"jsonrpc":"2.0","id":3,"method":"ping",'
                                     '"params":{"_meta":{"deadlineMs":1' + "0" * 400 + '}}}')
                     or "")
    assert out["result"] == {}


def test_deep_frames_are_parse_errors(rpc: Dispatcher) -> None:
    for frame in ("[" * 1200 + "]" * 1200, '{"a":' * 100_000 + "1" + "}" * 100_000):
        out = json.loads(rpc.handle_text(frame) or "")
        assert out["id"] is None and out["error"]["code"] == -32700


def test_a_configured_engine_keeps_its_limits(tmp_path: Path, embedder: Any) -> None:
    # The limits are engine configuration: they persist in config.json like the rest.
    with Engine(tmp_path / "e", embedder=embedder, max_query_chars=10):
        pass
    with Engine(tmp_path / "e", embedder=embedder) as eng:
        bad_param(initialized(eng), "retrieve", {"query": "x" * 11}, "query")


# --- issue 21.11: unknown params are refused under an explicit strict, else noted -------------

KNOWN_RETRIEVE = PARAM_NAMES | {"strict"}
BASE = {"query": "rank fusion", "k": 2}


def _notes(out: dict[str, Any]) -> list[str]:
    return list((out["result"].get("usage") or {}).get("notes") or [])


@pytest.mark.parametrize(("key", "suggestion"), [
    ("filters", "filter"), ("Filter", "filter"), ("x-rcp-agentic-filter", "filter"),
    ("session", "sessionId"), ("token_budgett", "tokenBudget"), ("zzz", None)])
def test_an_unknown_retrieve_param_is_named(rpc: Dispatcher, key: str,
                                            suggestion: str | None) -> None:
    params = {**BASE, key: LEAF}
    err = error(rpc, "retrieve", {**params, "strict": True})
    assert err["code"] == -32602 and err["data"]["field"] == key
    assert repr(key) in err["message"]
    assert (f"did you mean {suggestion!r}" in err["message"]) == (suggestion is not None)
    for loose in (params, {**params, "strict": False}):  # ignored (§4.6), but not silently
        notes = _notes(rpc_call(rpc, "retrieve", loose))
        assert any(repr(key) in n and (suggestion is None or repr(suggestion) in n)
                   for n in notes), notes


def test_other_vendors_params_are_never_refused(rpc: Dispatcher) -> None:
    for key in ("x-acme-boost", "X-Other-thing"):
        out = rpc_call(rpc, "retrieve", {**BASE, key: 1, "strict": True})
        assert any(repr(key) in n for n in _notes(out)), out
    clean = rpc_call(rpc, "retrieve", {**BASE, "strict": True, "_meta": {"x": 1},
                                       "x-rcp-agentic-rankBy": "score", "session_id": None})
    assert not _notes(clean)  # known names (wire, vendor, Python) are not noted


def test_unknown_params_are_noted_a_bounded_number_of_times(rpc: Dispatcher) -> None:
    notes = _notes(rpc_call(rpc, "retrieve", {**BASE, **{f"u{i}": i for i in range(500)}}))
    assert len(notes) == 17 and notes[-1] == "ignored 484 more unknown params"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.text(max_size=24), value=st.none() | st.integers() | st.text(max_size=5)
       | st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
def test_no_unknown_param_is_dropped_silently(rpc: Dispatcher, key: str, value: Any) -> None:
    assume(key not in KNOWN_RETRIEVE)
    strict = rpc_call(rpc, "retrieve", {**BASE, key: value, "strict": True})
    loose = rpc_call(rpc, "retrieve", {**BASE, key: value})
    assert "result" in loose and any(repr(key) in n for n in _notes(loose)), loose
    if key.lower().startswith("x-") and not key.lower().startswith("x-rcp-agentic"):
        assert any(repr(key) in n for n in _notes(strict)), strict
    else:
        assert strict["error"]["code"] == -32602 and strict["error"]["data"]["field"] == key
