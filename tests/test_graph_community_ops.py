"""The community ops of ``graph`` (§7.9): ``communities``, ``global`` and ``drift`` on a real
engine over ``examples/wiki`` (graph and Leiden communities built, the finest communities
capped at 3 entities so the hierarchy has two levels), through GraphOps and the dispatcher;
the LLM paths with langchain_core's FakeListChatModel.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, rpc_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from rcp_agentic.graph.communities.drift import DriftState, Frontiers
from rcp_agentic.graph.communities.ops import (DEFAULT_SUMMARY_TOKENS, MAX_SUMMARY_TOKENS,
                                               CommunityOps)
from rcp_agentic.graph.communities.reads import MAX_PAGE, default_level
from rcp_agentic.graph.ops import GraphOps

from rcp_agentic import Engine
from rcp_agentic.errors import InvalidParams, OptionUnsupported
from rcp_agentic.models.tokenizer import count_tokens
from rcp_agentic.protocol.dispatcher import Dispatcher

WIKI = REPO / "examples" / "wiki"
QUESTION = "In which city was the group behind the single Midnight Harbor founded?"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    eng = Engine(tmp_path_factory.mktemp("gcomm") / "e", embedder=embedder, build_graph=True,
                 community_max_size=3)
    eng.index_paths([WIKI])
    assert eng.wait_for_derived()
    yield eng
    eng.close()


@pytest.fixture()
def ops(engine: Engine) -> GraphOps:
    return engine.graph_ops


def store_of(engine: Engine) -> Any:
    store = engine.communities()
    assert store is not None
    return store


def pages(ops: GraphOps, level: int | None, k: int) -> list[list[Any]]:
    out, cursor = [], None
    while True:
        res = ops.graph("communities", level=level, k=k, cursor=cursor)
        out.append(res.communities or [])
        cursor = res.next_cursor
        if cursor is None:
            return out


# --- communities ----------------------------------------------------------------------------

def test_communities_pages_cover_each_level_exactly_once(engine: Engine, ops: GraphOps) -> None:
    store = store_of(engine)
    assert store.top_level >= 1  # the cap of 3 gives a hierarchy, not one flat partition
    assert ops.ops() == ["local", "neighbors", "global", "drift", "communities"]
    for level in range(store.top_level + 1):
        got = pages(ops, level, 3)
        assert len(got) == math.ceil(len(store.level(level)) / 3)
        listed = [c for page in got for c in page]
        assert [c.id for c in listed] == [c.id for c in store.level(level)]  # once, in order
        assert len({c.id for c in listed}) == len(listed)
        sizes = [c.size for c in listed]
        assert sizes == sorted(sizes, reverse=True) and all(c.level == level for c in listed)
        assert all(c.summary == store.by_id[c.id].text and c.title for c in listed)
    # Default level: the top; default page size 20 holds this small level whole.
    top = ops.graph("communities")
    assert [c.id for c in top.communities or []] == [c.id for c in store.level(store.top_level)]
    assert top.next_cursor is None and top.index_version == engine.index_version


def test_a_communitys_report_holds_its_members_documents(engine: Engine, ops: GraphOps) -> None:
    listed = [c for page in pages(ops, 0, 4) for c in page]
    members = {c.id: store_of(engine).by_id[c.id].members for c in listed}
    band = next(c for c in listed if any(m.startswith("velvet lantern") for m in members[c.id]))
    # Its report shows the evidence from the note about its member.
    text = (WIKI / "velvet-lanterns.md").read_text()
    assert "Velvet Lanterns" in (band.summary or "")
    assert any(s.strip() + "." in text for s in (band.summary or "").split(".") if len(s) > 20)


def test_communities_cursor_is_signed_and_pinned(engine: Engine, ops: GraphOps) -> None:
    first = ops.graph("communities", level=0, k=2)
    cursor = first.next_cursor
    assert cursor
    body, _, sig = cursor.partition(".")
    bad_sig = body + "." + ("0" if sig[0] != "0" else "1") + sig[1:]
    retrieve_cursor = engine.retrieve("Velvet Lanterns", 1).next_cursor
    assert retrieve_cursor  # signed with the same secret, for another list
    for bad in (bad_sig, "garbage", "x" * 10_000, "é" * 10, 7, "", retrieve_cursor):
        with pytest.raises(InvalidParams) as err:
            ops.graph("communities", level=0, k=2, cursor=bad)
        assert err.value.data["field"] == "cursor"
    with pytest.raises(InvalidParams) as err:  # a cursor pages the level it was made for
        ops.graph("communities", level=1, k=2, cursor=cursor)
    assert err.value.data["field"] == "cursor"
    second = ops.graph("communities", level=0, k=2, cursor=cursor)
    assert second.index_version == first.index_version
    assert not {c.id for c in second.communities or []} & {c.id for c in first.communities or []}


@pytest.mark.parametrize("params, field", [
    ({"level": 99}, "level"), ({"level": -1}, "level"), ({"level": True}, "level"),
    ({"level": "1"}, "level"), ({"level": 10 ** 30}, "level"), ({"level": 1.5}, "level"),
    ({"k": 0}, "k"), ({"k": MAX_PAGE + 1}, "k"), ({"k": True}, "k"), ({"k": float("nan")}, "k"),
])
def test_communities_params_are_checked(engine: Engine, ops: GraphOps, params: dict[str, Any],
                                        field: str) -> None:
    with pytest.raises(InvalidParams) as err:
        ops.graph("communities", **params)
    assert err.value.data["field"] == field
    if params.get("level") == 99:  # names the levels there are
        assert f"0..{store_of(engine).top_level}" in err.value.message


# --- global ---------------------------------------------------------------------------------

def report_sentences(engine: Engine, ids: list[str]) -> set[str]:
    """Every sentence-ish piece of the given communities' reports (text and findings)."""
    store = store_of(engine)
    out: set[str] = set()
    for cid in ids:
        c = store.by_id[cid]
        out.add(" ".join(c.text.split()))
        out.update(" ".join(str(f.get("explanation", "")).split()) for f in c.findings)
    return out


def test_global_summary_comes_from_the_ranked_reports_within_budget(engine: Engine,
                                                                    ops: GraphOps) -> None:
    store = store_of(engine)
    query = "Where did the drummer Oskar Brandvik grow up?"
    res = ops.graph("global", query=query, k=3)
    comms = res.communities or []
    level = default_level(store)
    assert len(comms) == min(3, len(store.level(level)))  # the k best of the level
    assert {c.level for c in comms} == {level}
    assert {c.id for c in comms} <= {c.id for c in store.level(level)}
    scores = [c.score or 0.0 for c in comms]
    assert scores == sorted(scores, reverse=True)
    summary = res.summary or ""
    assert summary and count_tokens(summary) <= DEFAULT_SUMMARY_TOKENS
    pieces = report_sentences(engine, [c.id for c in comms])
    for line in summary.splitlines():  # every point is a sentence of a ranked report
        assert any(line in p for p in pieces), line
    assert "Tromsø" in summary.splitlines()[0]  # the most relevant point first
    for budget in (12, 40):
        small = ops.graph("global", query=query, k=3, token_budget=budget).summary or ""
        assert small and count_tokens(small) <= budget
        assert small.splitlines()[0] in summary
    assert res.usage and res.usage.tokens == count_tokens(summary)


def test_global_and_drift_apply_a_filter(ops: GraphOps) -> None:
    query = "Where did the drummer Oskar Brandvik grow up?"
    hidden = {"field": "doc_id", "op": "ne", "value": "wiki/oskar-brandvik.md"}
    res = ops.graph("global", query=query, k=3, filter=hidden)
    assert res.summary and "Tromsø" not in res.summary  # only that note says it
    assert all("Tromsø" not in (c.summary or "") for c in res.communities or [])
    drift = ops.graph("drift", query=query, k=3, filter=hidden)
    assert drift.hits and all(h.chunk and h.chunk.doc_id != "wiki/oskar-brandvik.md"
                              for h in drift.hits)
    assert all("Tromsø" not in f for f in drift.followups or [])


@pytest.mark.parametrize("params, field", [
    ({"token_budget": float("nan")}, "tokenBudget"), ({"token_budget": -1}, "tokenBudget"),
    ({"token_budget": 0}, "tokenBudget"), ({"token_budget": True}, "tokenBudget"),
    ({"token_budget": MAX_SUMMARY_TOKENS + 1}, "tokenBudget"), ({"token_budget": "5"},
                                                                  "tokenBudget"),
    ({"query": None}, "query"), ({"query": "x" * 20_000}, "query"), ({"query": 5}, "query"),
    ({"level": 2}, "level"), ({"k": 0}, "k"), ({"filter": "a"}, "filter"),
])
def test_global_params_are_checked(ops: GraphOps, params: dict[str, Any], field: str) -> None:
    call = {"query": QUESTION, **params}
    with pytest.raises(InvalidParams) as err:
        ops.graph("global", **call)
    assert err.value.data["field"] == field


def test_global_with_an_llm_maps_and_reduces(engine: Engine, ops: GraphOps) -> None:
    point = '{"points": [{"description": "Velvet Lanterns formed in Bergen.", "score": 90}]}'
    answer = "The group behind Midnight Harbor, Velvet Lanterns, was founded in Bergen."
    engine.llm = FakeListChatModel(responses=[point] * 3 + [answer])
    try:
        res = ops.graph("global", query=QUESTION, k=3, token_budget=200)
        assert res.summary == answer
        assert res.usage and any("LLM map-reduce" in n for n in res.usage.notes or [])
        # Map replies that are not JSON: the reports' own sentences stand in; the answer is
        # cut to the budget.
        long = " ".join(f"Bergen {i * 7919 % 1000:03d}" for i in range(300))
        engine.llm = FakeListChatModel(responses=["no json here"] * 3 + [long])
        cut = ops.graph("global", query=QUESTION, k=3, token_budget=30)
        assert cut.summary and count_tokens(cut.summary) <= 30 and "Bergen" in cut.summary
        assert any("not JSON" in n for n in (cut.usage.notes if cut.usage else []) or [])
        # A reply that loops on itself is not used: the best points stand in.
        engine.llm = FakeListChatModel(responses=[point] * 3 + [" ".join(["Bergen"] * 400)])
        looped = ops.graph("global", query=QUESTION, k=3, token_budget=30)
        assert looped.summary == "Velvet Lanterns formed in Bergen."
        assert any("reduce reply was empty" in n for n in (looped.usage.notes if looped.usage
                                                             else []) or [])
        assert engine.chat is not None
        assert engine.chat.usage.of("global").fallbacks["repetitive"] == 1
    finally:
        engine.llm = None


# --- drift ----------------------------------------------------------------------------------

def new_names(engine: Engine, followup: str, query: str) -> list[str]:
    view = engine.graph_view()
    assert view is not None
    return [e.name for e in view.graph.entities.values()
            if len(e.name) > 3 and e.name in followup and e.name.casefold() not in query.casefold()]


def test_drift_followups_and_a_session_that_continues(engine: Engine, ops: GraphOps) -> None:
    first = ops.graph("drift", query=QUESTION, k=4, session_id="d1")
    assert first.hits and len(first.hits) <= 4
    ran = {h.meta["drift"]["followup"] for h in first.hits if h.meta}
    assert QUESTION in ran  # the question itself opens the search
    assert first.followups
    for f in first.followups:  # each follow-up names an entity the question does not
        assert new_names(engine, f, QUESTION), f
    docs = {h.chunk.doc_id for h in first.hits if h.chunk}
    assert "wiki/midnight-harbor.md" in docs
    second = ops.graph("drift", query=QUESTION, k=4, session_id="d1")
    assert second.usage and any("continued the session" in n for n in second.usage.notes or [])
    assert not any("d1" in n for n in second.usage.notes or [])  # the id (a capability) is not echoed
    ran2 = {h.meta["drift"]["followup"] for h in second.hits or [] if h.meta}
    assert QUESTION not in ran2 and ran2 <= set(first.followups)  # it ran the frontier
    assert not set(second.followups or []) & ran2
    assert not {h.id for h in first.hits} & {h.id for h in second.hits or []}
    # Without a session nothing is kept: the same call gives the same answer.
    a = ops.graph("drift", query=QUESTION, k=4)
    b = ops.graph("drift", query=QUESTION, k=4)
    assert [h.id for h in a.hits or []] == [h.id for h in b.hits or []]
    assert a.followups == b.followups
    assert not any("continued" in n for n in (b.usage.notes if b.usage else []) or [])


def test_drift_with_an_llm_asks_for_followups(engine: Engine, ops: GraphOps) -> None:
    reply = ('{"intermediate_answer": "Velvet Lanterns recorded it.", "score": 80, '
             '"follow_up_queries": ["Where did Velvet Lanterns begin playing?", '
             '"Who kept time for Velvet Lanterns?"]}')
    engine.llm = FakeListChatModel(responses=[reply] * 3)
    try:
        res = ops.graph("drift", query=QUESTION, k=3, session_id="llm-1")
    finally:
        engine.llm = None
    asked = {h.meta["drift"]["followup"] for h in res.hits or [] if h.meta}
    assert {"Where did Velvet Lanterns begin playing?",
            "Who kept time for Velvet Lanterns?"} <= asked | set(res.followups or [])


def test_drift_frontiers_are_bounded_and_expire() -> None:
    now = [0.0]
    frontiers = Frontiers(max_sessions=2, ttl_seconds=10, clock=lambda: now[0])
    for sid in ("a", "b", "c"):
        frontiers.put(sid, DriftState(sid, 0, ""))
    assert len(frontiers) == 2 and frontiers.get("a") is None  # least recently used went
    got = frontiers.get("b")
    assert got is not None and got.query == "b"
    now[0] = 11.0
    assert frontiers.get("c") is None and len(frontiers) == 0


@pytest.mark.parametrize("params, field", [
    ({"query": None}, "query"), ({"k": 0}, "k"), ({"k": 10 ** 6}, "k"), ({"level": -2}, "level"),
    ({"session_id": ""}, "sessionId"), ({"session_id": "s" * 100_000}, "sessionId"),
])
def test_drift_params_are_checked(ops: GraphOps, params: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidParams) as err:
        ops.graph("drift", **{"query": QUESTION, **params})
    assert err.value.data["field"] == field


def test_community_params_are_refused_where_they_do_not_apply(ops: GraphOps) -> None:
    for op, name, value, option in (
            ("local", "cursor", "c", "cursor"), ("local", "token_budget", 5, "tokenBudget"),
            ("communities", "token_budget", 5, "tokenBudget"), ("global", "cursor", "c", "cursor"),
            ("drift", "token_budget", 5, "tokenBudget")):
        with pytest.raises(OptionUnsupported) as err:
            ops.graph(op, query=QUESTION, **{name: value})
        assert err.value.data["option"] == option


# --- over the wire ---------------------------------------------------------------------------

def test_the_ops_over_the_dispatcher(engine: Engine) -> None:
    rpc = Dispatcher(engine)
    caps = rpc_call(rpc, "initialize", {"protocolVersion": 1}, 0)["result"]["capabilities"]
    assert set(caps["graph"]["ops"]) >= {"global", "drift", "communities"}
    limits = caps["x-rcp-agentic"]["limits"]
    assert limits["maxCommunities"] == MAX_PAGE
    assert limits["maxSummaryTokens"] == MAX_SUMMARY_TOKENS
    listed, cursor = [], None
    while True:
        params: dict[str, Any] = {"op": "communities", "level": 0, "k": 3}
        if cursor:
            params["cursor"] = cursor
        out = rpc_call(rpc, "graph", params)["result"]
        listed += [c["id"] for c in out["communities"]]
        cursor = out.get("nextCursor")
        if not cursor:
            break
    assert listed == [c.id for c in store_of(engine).level(0)]
    # Above the advertised limits: clamped, not refused (§12).
    out = rpc_call(rpc, "graph", {"op": "global", "query": QUESTION, "k": 10 ** 6,
                                  "tokenBudget": 10 ** 9})["result"]
    assert out["summary"] and out["communities"][0]["id"].startswith("community:")
    assert {"id", "level", "summary", "score", "title"} <= set(out["communities"][0])
    out = rpc_call(rpc, "graph", {"op": "drift", "query": QUESTION, "k": 3,
                                  "sessionId": "wire-1"})["result"]
    assert out["hits"] and isinstance(out["followups"], list)
    for params, code, key, name in (
            ({"op": "communities", "cursor": "nope"}, -32602, "field", "cursor"),
            ({"op": "local", "query": "x", "cursor": "c"}, -32005, "option", "cursor"),
            ({"op": "global", "query": "x", "tokenBudget": float("nan")}, -32602, "field",
             "tokenBudget"),
            ({"op": "global", "query": "x", "tokenBudget": 0}, -32602, "field", "tokenBudget"),
            ({"op": "global"}, -32602, "field", "query"),
            ({"op": "communities", "level": 7}, -32602, "field", "level"),
            ({"op": "communities", "cursor": "x" * 5000}, -32602, "field", "cursor")):
        err = rpc_call(rpc, "graph", params)["error"]
        assert err["code"] == code and err["data"][key] == name, (params, err)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() |
                     st.text(max_size=20), lambda inner: st.lists(inner, max_size=3) |
                     st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)
_params = st.fixed_dictionaries({"op": st.sampled_from(["global", "drift", "communities"])},
                                optional={
    "query": st.text(max_size=40) | _json, "k": st.integers() | _json,
    "level": st.integers() | _json, "cursor": st.text(max_size=40) | _json,
    "tokenBudget": st.integers() | st.floats() | _json, "sessionId": st.text(max_size=8) | _json,
    "filter": _json})


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(params=_params)
def test_hostile_community_params_get_a_specific_error(engine: Engine,
                                                       params: dict[str, Any]) -> None:
    rpc = Dispatcher(engine)
    rpc_call(rpc, "initialize", {"protocolVersion": 1}, 0)
    out = rpc_call(rpc, "graph", params)
    assert ("result" in out) != ("error" in out)
    if "error" in out:
        assert out["error"]["code"] in (-32602, -32005), out


def test_the_ops_are_absent_without_communities(tmp_path: Path, embedder: Any) -> None:
    with Engine(tmp_path / "flat", embedder=embedder, build_graph=True,
                graph_communities=False) as eng:
        eng.index_paths([WIKI / "velvet-lanterns.md", WIKI / "oskar-brandvik.md"])
        assert eng.wait_for_derived()
        assert eng.communities() is None
        assert eng.capabilities()["graph"] == {"ops": ["local", "neighbors"]}
        assert not CommunityOps(eng.graph_ops.ctx, eng.graph_ops._keys_of).offered()
        for op in ("global", "drift", "communities"):
            with pytest.raises(OptionUnsupported) as err:
                eng.graph_ops.graph(op, query=QUESTION)
            assert err.value.data["option"] == "op"


def test_a_cursor_keeps_paging_its_snapshot_after_a_write(engine: Engine, ops: GraphOps) -> None:
    """Last: it writes to the module's engine."""
    before = [c.id for c in store_of(engine).level(0)]
    first = ops.graph("communities", level=0, k=2)
    engine.add_documents([{"id": "wiki/new.md", "text": "Harbor Lights Band toured Oslo with "
                           "Lena Varg in 1981. Oslo welcomed Harbor Lights Band."}])
    assert engine.index_version != first.index_version
    listed = [c.id for c in first.communities or []]
    cursor = first.next_cursor
    while cursor:
        page = ops.graph("communities", level=0, k=2, cursor=cursor)
        assert page.index_version == first.index_version
        listed += [c.id for c in page.communities or []]
        cursor = page.next_cursor
    assert listed == before
