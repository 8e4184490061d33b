"""``rcp_agentic.federation`` over real engines and real transports (RCP §16).

Three real engines hold different, overlapping subsets of DOCS: ``alpha`` in
process, ``beta`` a ``serve --stdio`` subprocess, ``gamma`` a uvicorn ``serve
--http`` subprocess behind a bearer token. Dead engines are a stdio command that
exits at once and an HTTP port nobody listens on. Scripted engines are small real
HTTP servers (stdlib ``ThreadingHTTPServer``) whose capabilities, hits and delay
each test sets and whose received params each test reads: they prove what went
over the wire (``_meta.federation``, ``_meta.deadlineMs``, ``strict``) and make
ties and slowness exact. Reference fusions are computed here, independently.

The knowledge-graph methods (§16.4) run over two real engines built with ``build_graph``
on ``examples/wiki`` (the whole wiki in process; two of its notes behind ``serve --stdio``)
and ``alpha``, which has no graph.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import DOCS, REPO, free_port, running_server
from rcp_agentic import Engine
from rcp_agentic.client import (AsyncRCPClient, BackendUnavailable, CapabilityMissing,
                                InvalidParams, OptionUnsupported, RCPClient, TransportError,
                                Unauthorized)
from rcp_agentic.client.registry import load_registry
from rcp_agentic.federation import Federation
from rcp_agentic.federation.graphs import pack_cursor, unpack_memory_id
from rcp_agentic.models.tokenizer import count_tokens
from rcp_agentic.integrations.common import HitSource
from rcp_agentic.wire import (GraphResult, MemoryBuildResult, MemoryRecallResult, RetrieveResult,
                              WireModel)

TOKEN = "federation-test-token"
TOKEN_ENV = "RCP_FEDERATION_TEST_TOKEN"
URI = "https://example.org/papers/rrf"
SHORT = {"id": "ua", "uri": URI, "text": "Cormack 2009: reciprocal rank fusion."}
LONG = {"id": "ug", "uri": URI, "text": "Cormack, Clarke and Buettcher (SIGIR 2009) show that "
        "reciprocal rank fusion outperforms Condorcet and individual rank learning methods."}
ALPHA_DOCS: list[dict[str, Any]] = [*DOCS[:5], SHORT]        # d1..d5
BETA_DOCS = DOCS[3:]                    # d4..d8: shares d4, d5 with alpha
GAMMA_DOCS: list[dict[str, Any]] = [DOCS[0], DOCS[5], LONG]   # shares d1 with alpha, d6 with beta
QUERY = "how do retrievers rank documents"


# --- scripted engines ------------------------------------------------------------------

class Scripted:
    """A real RCP server over HTTP whose answers a test scripts and whose params it records."""

    def __init__(self, caps: dict[str, Any] | None = None,
                 hits: list[dict[str, Any]] | None = None) -> None:
        self.caps = caps or {"retrieve": {"maxK": 200, "modes": ["dense"]}}
        self.hits = hits or [{"id": "s:1", "score": 2.0, "text": "scripted"}]
        self.delay = 0.0  # before answering retrieve
        self.init_delay = 0.0  # before answering initialize
        self.received: list[dict[str, Any]] = []
        # Other methods (graph, memory/*): the scripted result, and the params each call carried.
        self.answers: dict[str, Any] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                method, params = body.get("method"), body.get("params") or {}
                if "id" not in body:  # a notification (cancel): never answered
                    self.send_response(204)
                    self.end_headers()
                    return
                if method in ("initialize", "info"):
                    time.sleep(scripted.init_delay)
                    result: Any = {"protocolVersion": 1, "capabilities": scripted.caps,
                                   "server": {"name": "scripted", "version": "0"}}
                elif method == "retrieve":
                    scripted.received.append(params)
                    time.sleep(scripted.delay)
                    result = {"hits": scripted.hits[:params["k"]]}
                elif method in scripted.answers:
                    scripted.calls.append((method, params))
                    time.sleep(scripted.delay)
                    result = scripted.answers[method]
                else:
                    result = {}
                data = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": result}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up on us (deadline)
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def client(self) -> RCPClient:
        return RCPClient.http(self.url)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def scripted() -> Iterator[Scripted]:
    s = Scripted()
    yield s
    s.close()


# --- real engines ----------------------------------------------------------------------

def build(path: Path, docs: list[dict[str, Any]], embedder: Any) -> Path:
    with Engine(path, embedder=embedder) as eng:
        eng.add_documents(docs)
    return path


def _pings(url: str) -> bool:
    req = urllib.request.Request(f"{url}/rcp/ping", method="POST",
                                 data=b'{"jsonrpc":"2.0","id":0,"method":"ping"}',
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(req, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


class Real:
    """The module's engines: paths, an open in-process engine, clients, and the dead ends."""

    alpha: Engine
    alpha_client: RCPClient
    beta_dir: Path
    beta: RCPClient
    gamma_url: str
    gamma: RCPClient
    dead_stdio = (sys.executable, "-c", "pass")
    dead_url = ""

    def clients(self) -> dict[str, Any]:
        return {"alpha": self.alpha_client, "beta": self.beta, "gamma": self.gamma}

    def own(self, query: str, n: int) -> dict[str, list[dict[str, Any]]]:
        """Each engine's own ranked list for ``query`` (what the federation must fuse)."""
        return {id_: c.retrieve(query, n).to_wire()["hits"] for id_, c in self.clients().items()}


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Real]:
    root = tmp_path_factory.mktemp("federation")
    r = Real()
    alpha_dir = build(root / "alpha", ALPHA_DOCS, embedder)
    r.beta_dir = build(root / "beta", BETA_DOCS, embedder)
    gamma_dir = build(root / "gamma", GAMMA_DOCS, embedder)
    r.dead_url = f"http://127.0.0.1:{free_port()}"
    r.alpha = Engine(alpha_dir, embedder=embedder)
    r.alpha_client = RCPClient.in_process(r.alpha)
    r.beta = RCPClient.stdio(engine=r.beta_dir)
    port = free_port()
    r.gamma_url = f"http://127.0.0.1:{port}"
    with running_server([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http", "--engine",
                         str(gamma_dir), "--port", str(port)], lambda: _pings(r.gamma_url),
                        timeout=120, env={**os.environ, "RCP_AGENTIC_TOKEN": TOKEN}):
        r.gamma = RCPClient.http(r.gamma_url, TOKEN)
        for client in r.clients().values():
            client.initialize()
        yield r
        for client in r.clients().values():
            client.close()
    r.alpha.close()


# --- reference fusions, computed independently -----------------------------------------

def ref_rrf(lists: dict[str, list[dict[str, Any]]], weights: dict[str, float],
            rrf_k: int = 60) -> list[tuple[str, float]]:
    terms: dict[str, list[float]] = {}
    wsum: dict[str, float] = {}
    for engine, hits in lists.items():
        for rank, hit in enumerate(hits, start=1):
            terms.setdefault(str(hit["id"]), []).append(weights[engine] / (rrf_k + rank))
            wsum[str(hit["id"])] = wsum.get(str(hit["id"]), 0.0) + weights[engine]
    scores = {i: math.fsum(t) for i, t in terms.items()}
    return sorted(scores.items(), key=lambda kv: (-kv[1], -wsum[kv[0]], kv[0]))


def ref_scored(lists: dict[str, list[dict[str, Any]]], weights: dict[str, float],
               floors: dict[str, float] | None = None) -> list[tuple[str, float]]:
    """Weighted min-max (floors None) or floor-anchored convex fusion."""
    terms: dict[str, list[float]] = {}
    for engine, hits in lists.items():
        scores = [h["score"] for h in hits]
        low = min(scores) if floors is None else floors[engine]
        span = max(scores) - low
        for h in hits:
            norm = (h["score"] - low) / span if span > 0 else (1.0 if floors is None else 0.0)
            terms.setdefault(str(h["id"]), []).append(weights[engine] * max(0.0, norm))
    scores_ = {i: math.fsum(t) for i, t in terms.items()}
    return sorted(scores_.items(), key=lambda kv: (-kv[1], kv[0]))


def ids(result: Any) -> list[str]:
    """The hit ids of a result, typed or its wire dict."""
    wire = result.to_wire() if isinstance(result, WireModel) else result
    return [str(h["id"]) for h in wire["hits"]]


# --- fan-out and fusion ----------------------------------------------------------------

def test_rrf_over_three_transports_matches_reference(real: Real) -> None:
    k = 8
    with Federation(real.clients(), deadline=60) as fed:
        result = fed.retrieve(QUERY, k)
    # The typed result one engine returns, its report in meta (the result's _meta).
    assert isinstance(result, RetrieveResult) and result.meta is not None
    assert result.meta["fusion"] == "rrf" and {h.meta["engine"] for h in result.hits
                                               if h.meta} == {"alpha", "beta", "gamma"}
    out = result.to_wire()
    own = real.own(QUERY, 2 * k)
    ref = ref_rrf(own, {"alpha": 1.0, "beta": 1.0, "gamma": 1.0})
    assert ids(out) == [i for i, _s in ref[:k]]
    assert [h["score"] for h in out["hits"]] == pytest.approx([s for _i, s in ref[:k]])
    # Origin tags: the engine, its rank and its own score for that hit.
    assert {h["meta"]["engine"] for h in out["hits"]} == {"alpha", "beta", "gamma"}
    for hit in out["hits"]:
        for engine, tag in hit["meta"]["engines"].items():
            mine = [str(h["id"]) for h in own[engine]]
            assert mine.index(str(hit["id"])) + 1 == tag["rank"]
            assert own[engine][tag["rank"] - 1]["score"] == tag["score"]
        primary = hit["meta"]["engines"][hit["meta"]["engine"]]
        assert (hit["meta"]["engineRank"], hit["meta"]["engineScore"]) == (primary["rank"],
                                                                           primary["score"])
    assert len(set(ids(out))) == len(ids(out))
    assert out["_meta"]["degraded"] == [] and out["_meta"]["fusion"] == "rrf"
    assert {e: v["hits"] for e, v in out["_meta"]["engines"].items()} == {
        e: len(h) for e, h in own.items()}
    assert out["usage"]["candidates"] == len(ref) and out["usage"]["latencyMs"] > 0


def test_weights_change_the_order(real: Real) -> None:
    k = 6
    own = real.own(QUERY, 2 * k)
    tops = {}
    for heavy in ("alpha", "beta"):
        weights = {"alpha": 1.0, "beta": 1.0, "gamma": 1.0, heavy: 5.0}
        with Federation(real.clients(), weights=weights, deadline=60) as fed:
            out = fed.retrieve(QUERY, k).to_wire()
        assert ids(out) == [i for i, _s in ref_rrf(own, weights)[:k]]
        # 5/(60+3) beats anything a weight-1 engine alone can reach (1/61 + 1/61).
        assert all(heavy in h["meta"]["engines"] for h in out["hits"][:3])
        tops[heavy] = ids(out)
    assert tops["alpha"] != tops["beta"]


def test_weighted_and_convex_fusion(real: Real) -> None:
    k = 6
    clients = {"alpha": real.alpha_client, "beta": real.beta}
    own = {e: h for e, h in real.own(QUERY, 2 * k).items() if e in clients}
    weights = {"alpha": 1.0, "beta": 2.0}
    with Federation(clients, fusion="weighted", weights=weights, deadline=60) as fed:
        out = fed.retrieve(QUERY, k).to_wire()
    ref = ref_scored(own, weights)
    assert out["_meta"]["fusion"] == "weighted"
    assert ids(out) == [i for i, _s in ref[:k]]
    assert [h["score"] for h in out["hits"]] == pytest.approx([s for _i, s in ref[:k]])
    floors = {e: c.capabilities["retrieve"]["scoreFloor"] for e, c in clients.items()}
    with Federation(clients, fusion="convex", weights=weights, deadline=60) as fed:
        out = fed.retrieve(QUERY, k).to_wire()
    ref = ref_scored(own, weights, floors)
    assert out["_meta"]["fusion"] == "convex"
    assert ids(out) == [i for i, _s in ref[:k]]
    assert [h["score"] for h in out["hits"]] == pytest.approx([s for _i, s in ref[:k]])


def test_convex_falls_back_to_rrf_without_a_score_floor(real: Real, scripted: Scripted) -> None:
    with Federation({"alpha": real.alpha_client, "s": scripted.client()}, fusion="convex",
                    deadline=30) as fed:
        out = fed.retrieve(QUERY, 4).to_wire()
    assert out["_meta"]["fusion"] == "rrf"
    assert any("scoreFloor" in n and "s" in n for n in out["usage"]["notes"])
    assert "s:1" in ids(out)


def test_tie_breaking_summed_weight_then_id(real: Real) -> None:
    one, two = Scripted(), Scripted()
    try:
        # z: 1/(60+1) + 2/(60+62) == a: 2/(60+1) exactly; z has more summed weight (3 > 2).
        one.hits = [{"id": "z", "score": 1.0}]
        two.hits = [{"id": "a", "score": 9.0}, *({"id": f"f{i:02d}", "score": 1.0}
                                                 for i in range(60)), {"id": "z", "score": 0.5}]
        clients = {"one": one.client(), "two": two.client()}
        with Federation(clients, weights={"one": 1.0, "two": 2.0}, overfetch=2) as fed:
            out = fed.retrieve("q", 40).to_wire()
        assert out["hits"][0]["score"] == out["hits"][1]["score"]
        assert ids(out)[:2] == ["z", "a"]
        # Equal score and equal summed weight: the smaller id first, whatever the engine order.
        one.hits, two.hits = [{"id": "b", "score": 1.0}], [{"id": "a", "score": 1.0}]
        for order in (["one", "two"], ["two", "one"]):
            with Federation({e: clients[e] for e in order}) as fed:
                assert ids(fed.retrieve("q", 2)) == ["a", "b"]
        for c in clients.values():
            c.close()
    finally:
        one.close()
        two.close()


def test_dedup_by_id_and_by_uri(real: Real) -> None:
    query = "dense retrievers embed passages with a bi-encoder"
    with Federation(real.clients(), deadline=60) as fed:
        out = fed.retrieve(query, 5).to_wire()
        d4 = [h for h in out["hits"] if h["id"] == "doc:d4#c0"]
        assert len(d4) == 1 and set(d4[0]["meta"]["engines"]) == {"alpha", "beta"}
        assert d4[0]["meta"]["doc_id"] == "d4"  # the engines' meta survives the merge
        assert len(set(ids(out))) == len(ids(out))

        query = "reciprocal rank fusion Cormack 2009"
        # overlapping documents outrank two single top-1s
        by_id = fed.retrieve(query, 10).to_wire()
        by_uri = fed.retrieve(query, 10, dedup="uri").to_wire()
    assert {"doc:ua#c0", "doc:ug#c0"} <= set(ids(by_id))
    merged = [h for h in by_uri["hits"] if (h.get("citation") or {}).get("uri") == URI]
    assert len(merged) == 1
    assert merged[0]["text"] == LONG["text"]  # the richest body wins
    assert set(merged[0]["meta"]["engines"]) == {"alpha", "gamma"}
    own = {h["id"]: h for e in ("alpha", "gamma") for h in real.own(query, 8)[e]}
    assert merged[0]["confidence"] == max(own["doc:ua#c0"]["confidence"],
                                          own["doc:ug#c0"]["confidence"])
    assert by_uri["usage"]["candidates"] == by_id["usage"]["candidates"] - 1


# --- partial failure -------------------------------------------------------------------

def test_partial_failure_is_noted_and_degraded(real: Real) -> None:
    engines = {"alpha": real.alpha_client, "beta": real.beta,
               "dead-stdio": RCPClient.stdio(list(real.dead_stdio)), "dead-http":
               RCPClient.http(real.dead_url)}
    with Federation(engines, deadline=30) as fed:
        out = fed.retrieve(QUERY, 5).to_wire()
    assert out["hits"] and {h["meta"]["engine"] for h in out["hits"]} <= {"alpha", "beta"}
    assert out["_meta"]["degraded"] == ["dead-stdio", "dead-http"]
    for dead in ("dead-stdio", "dead-http"):
        assert out["_meta"]["engines"][dead]["error"]["code"] == -32010
        assert out["_meta"]["engines"][dead]["hits"] == 0
        assert any(n.startswith(f"engine {dead!r} failed (-32010)") for n in out["usage"]["notes"])
    engines["dead-stdio"].close()
    engines["dead-http"].close()


def test_required_engine_failure_raises_its_error(real: Real) -> None:
    wrong = RCPClient.http(real.gamma_url, "not-the-token")
    with (Federation({"alpha": real.alpha_client, "gamma": wrong}, required=["gamma"]) as fed,
          pytest.raises(Unauthorized) as err):
        fed.retrieve(QUERY, 3)
    assert err.value.code == -32012 and err.value.data["engine"] == "gamma"
    # Not required: the same failure only degrades the result.
    with Federation({"alpha": real.alpha_client, "gamma": wrong}) as fed:
        out = fed.retrieve(QUERY, 3).to_wire()
    assert out["_meta"]["degraded"] == ["gamma"]
    assert out["_meta"]["engines"]["gamma"]["error"]["code"] == -32012
    dead = RCPClient.http(real.dead_url)
    with (Federation({"alpha": real.alpha_client, "dead": dead}, required=["dead"]) as fed,
          pytest.raises(TransportError) as err2):
        fed.retrieve(QUERY, 3)
    assert err2.value.code == -32010
    wrong.close()
    dead.close()


def test_every_engine_dead_is_backend_unavailable(real: Real) -> None:
    engines = {"dead-stdio": RCPClient.stdio(list(real.dead_stdio)),
               "dead-http": RCPClient.http(real.dead_url)}
    with Federation(engines, deadline=30) as fed, pytest.raises(BackendUnavailable) as err:
        fed.retrieve(QUERY, 3)
    assert type(err.value) is BackendUnavailable and err.value.code == -32010
    assert set(err.value.data["errors"]) == {"dead-stdio", "dead-http"}
    for c in engines.values():
        c.close()


# --- deadlines and budget propagation --------------------------------------------------

@pytest.fixture()
def stalled() -> Iterator[Scripted]:
    """An engine whose ``initialize`` takes 8 s (bounded only by the federation's deadline)."""
    s = Scripted()
    s.init_delay = 8.0
    yield s
    s.close()


def test_deadline_drops_the_slow_engine(real: Real, scripted: Scripted,
                                        stalled: Scripted) -> None:
    scripted.delay = 8.0
    slow = scripted.client()
    slow.initialize()
    engines = {"alpha": real.alpha_client, "slow": slow, "stalled": stalled.client()}
    with Federation(engines, deadline=1.5) as fed:
        t0 = time.monotonic()
        out = fed.retrieve(QUERY, 4).to_wire()
        elapsed = time.monotonic() - t0
    assert elapsed < 1.5 + 1.5, elapsed
    assert out["hits"] and all(h["meta"]["engine"] == "alpha" for h in out["hits"])
    assert out["_meta"]["degraded"] == ["slow", "stalled"]
    assert out["_meta"]["engines"]["slow"]["error"]["code"] == -32014
    assert out["_meta"]["engines"]["stalled"]["error"]["code"] == -32014
    assert any(n.startswith("engine 'slow' timed out") for n in out["usage"]["notes"])
    # The slow engine was told its (strictly smaller) budget and the hop budget.
    meta = scripted.received[-1]["_meta"]
    assert 0 < meta["deadlineMs"] < 1500
    assert meta["federation"] == {"depth": 3, "path": []}
    slow.close()


def test_async_deadline_drops_the_slow_engine(real: Real, scripted: Scripted,
                                              stalled: Scripted) -> None:
    scripted.delay = 8.0

    async def main() -> tuple[float, dict[str, Any]]:
        engines = {"alpha": AsyncRCPClient.in_process(real.alpha),
                   "slow": AsyncRCPClient.http(scripted.url)}
        async with Federation(engines, deadline=1.5) as fed:
            assert await fed.aconnect() == {}
        engines["stalled"] = AsyncRCPClient.http(stalled.url)
        async with Federation(engines, deadline=1.5) as fed:
            t0 = time.monotonic()
            out = (await fed.aretrieve(QUERY, 4)).to_wire()
            elapsed = time.monotonic() - t0
        for c in engines.values():
            await c.close()
        return elapsed, out

    elapsed, out = asyncio.run(main())
    assert elapsed < 1.5 + 1.5, elapsed
    assert out["_meta"]["degraded"] == ["slow", "stalled"]
    assert out["_meta"]["engines"]["slow"]["error"]["code"] == -32014
    assert out["_meta"]["engines"]["stalled"]["error"]["code"] == -32014
    assert out["hits"] and all(h["meta"]["engine"] == "alpha" for h in out["hits"])


def test_incoming_deadline_caps_the_budget(real: Real, scripted: Scripted) -> None:
    with Federation({"s": scripted.client()}, deadline=30) as fed:
        fed.retrieve("q", 2, _meta={"deadlineMs": 400})
    assert 0 < scripted.received[-1]["_meta"]["deadlineMs"] < 400


# --- async == sync, ownership, registry ------------------------------------------------

def test_async_path_equals_sync_path(real: Real, monkeypatch: pytest.MonkeyPatch) -> None:
    # alpha: an Engine (in-process clients opened per path); gamma: a registry entry (a sync
    # and an async HTTP client); beta: a given sync stdio client (a thread on the async path).
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    registry = load_registry({"engines": [
        {"id": "gamma", "transport": "http", "url": real.gamma_url, "tokenEnv": TOKEN_ENV,
         "weight": 2.0}]})
    fed = Federation({"alpha": real.alpha, "beta": real.beta, **registry}, deadline=60)
    sync_out = fed.retrieve(QUERY, 6, mode="hybrid").to_wire()

    async def main() -> dict[str, Any]:
        out = (await fed.aretrieve(QUERY, 6, mode="hybrid")).to_wire()
        await fed.aclose()
        return out

    async_out = asyncio.run(main())
    assert ids(async_out) == ids(sync_out)
    assert [h["score"] for h in async_out["hits"]] == [h["score"] for h in sync_out["hits"]]
    assert [h["meta"]["engine"] for h in async_out["hits"]] == [
        h["meta"]["engine"] for h in sync_out["hits"]]
    assert async_out["_meta"]["degraded"] == sync_out["_meta"]["degraded"] == []
    assert ids(sync_out) == [i for i, _s in ref_rrf(
        real.own(QUERY, 12), {"alpha": 1.0, "beta": 1.0, "gamma": 2.0})[:6]]


def test_from_registry_owns_and_closes_its_clients(real: Real, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    path = tmp_path / "rcp.json"
    path.write_text(json.dumps({"engines": [
        {"id": "beta", "transport": "stdio",
         "command": [sys.executable, "-m", "rcp_agentic.cli", "serve", "--stdio", "--engine",
                     str(real.beta_dir)]},
        {"id": "gamma", "transport": "http", "url": real.gamma_url, "tokenEnv": TOKEN_ENV,
         "weight": 2.0},
        {"id": "dead", "transport": "stdio", "command": list(real.dead_stdio)}]}))
    with Federation.from_registry(path, deadline=60) as fed:
        assert fed.engines == ("beta", "gamma", "dead")
        failures = fed.connect()
        assert set(failures) == {"dead"} and failures["dead"].code == -32010
        out = fed.retrieve(QUERY, 5).to_wire()
        procs = [m.sync.transport.process for m in fed._members.values()
                 if m.sync is not None and hasattr(m.sync.transport, "process")]
    own = real.own(QUERY, 10)
    assert ids(out) == [i for i, _s in ref_rrf({e: own[e] for e in ("beta", "gamma")},
                                               {"beta": 1.0, "gamma": 2.0})[:5]]
    assert out["_meta"]["degraded"] == ["dead"]
    assert len(procs) == 2 and all(p.poll() is not None for p in procs)  # closed by the federation
    assert real.beta.retrieve(QUERY, 1).to_wire()["hits"]  # a given client is left open


# --- loop detection --------------------------------------------------------------------

def test_loop_detection(real: Real, scripted: Scripted) -> None:
    engines = {"alpha": real.alpha_client, "s": scripted.client()}
    with Federation(engines, identity="gw", deadline=30) as fed:
        fed.retrieve("q", 2, _meta={"federation": {"depth": 2, "path": ["up"]}})
        assert scripted.received[-1]["_meta"]["federation"] == {"depth": 1, "path": ["up", "gw"]}
        asked = len(scripted.received)
        # Depth 0: no fan-out at all, and no own index to answer from.
        with pytest.raises(BackendUnavailable, match="hop budget"):
            fed.retrieve("q", 2, _meta={"federation": {"depth": 0, "path": ["up"]}})
        # An engine already on the path is skipped (a cycle), the others still answer.
        out = fed.retrieve("q", 2,
                           _meta={"federation": {"depth": 2, "path": ["up", "s"]}}).to_wire()
        assert out["_meta"]["engines"]["s"]["skipped"].startswith("cycle")
        assert "s" in out["_meta"]["degraded"] and any("cycle" in n for n in out["usage"]["notes"])
        assert out["hits"] and all(h["meta"]["engine"] == "alpha" for h in out["hits"])
        assert len(scripted.received) == asked
    with Federation(engines, identity="gw", local="alpha", deadline=30) as fed:
        for incoming in ({"depth": 0, "path": []}, {"depth": 3, "path": ["gw", "x"]}):
            out = fed.retrieve("q", 2, _meta={"federation": incoming}).to_wire()
            assert out["hits"] and out["_meta"]["degraded"] == ["s"]
            assert any("not forwarding" in n for n in out["usage"]["notes"])
        assert len(scripted.received) == asked
    engines["s"].close()


# --- option gating, capabilities, integration ------------------------------------------

def test_option_gating_per_engine(real: Real, scripted: Scripted) -> None:
    engines = {"alpha": real.alpha_client, "s": scripted.client()}
    with Federation(engines, deadline=30) as fed:
        out = fed.retrieve("q", 3, mmr={"lambda": 0.5}).to_wire()
        sent = scripted.received[-1]
        assert sent["strict"] is False and sent["mmr"] == {"lambda": 0.5}
        assert any("strict=false (mmr not advertised)" in n for n in out["usage"]["notes"])
        assert "s" not in out["_meta"]["degraded"] and "s:1" in ids(out)
        asked = len(scripted.received)
        flt = {"field": "lang", "op": "eq", "value": "en"}
        out = fed.retrieve("q", 5, filter=flt).to_wire()
        assert len(scripted.received) == asked
        assert out["_meta"]["engines"]["s"]["skipped"] == "cannot apply the filter"
        assert all(h["meta"]["lang"] == "en" for h in out["hits"])
        out = fed.retrieve("q", 3, mmr={"lambda": 0.5}, strict=True).to_wire()
        assert len(scripted.received) == asked and out["_meta"]["degraded"] == ["s"]
        with pytest.raises(OptionUnsupported):  # one engine's cursor means nothing to another
            fed.retrieve("q", 3, cursor="abc")
        with pytest.raises(InvalidParams):
            fed.retrieve("q", 0)
    engines["s"].close()


def test_engines_without_retrieve_are_skipped(real: Real) -> None:
    s = Scripted(caps={"embed": {"dimension": 3}})
    try:
        embed_only = s.client()
        with Federation({"alpha": real.alpha_client, "e": embed_only}) as fed:
            out = fed.retrieve("q", 2).to_wire()
        assert out["_meta"]["engines"]["e"] == {"hits": 0, "skipped": "does not advertise retrieve"}
        assert out["_meta"]["degraded"] == []  # it could never have contributed
        with Federation({"e": embed_only}) as fed, pytest.raises(CapabilityMissing):
            fed.retrieve("q", 2)
        with (Federation({"alpha": real.alpha_client, "e": embed_only}, required=["e"]) as fed,
              pytest.raises(CapabilityMissing)):
            fed.retrieve("q", 2)
        assert s.received == []
        embed_only.close()
    finally:
        s.close()


def test_capabilities_union_and_intersection(real: Real) -> None:
    s = Scripted(caps={"retrieve": {"modes": ["dense"], "units": ["chunk", "document"]},
                       "x-test": {}})
    try:
        engines = {"alpha": real.alpha_client, "s": s.client(),
                   "dead": RCPClient.http(real.dead_url)}
        with Federation(engines) as fed:
            caps = fed.capabilities
        assert {"embed", "x-test", "retrieve", "filter"} <= set(caps["union"])
        assert set(caps["intersection"]) == {"retrieve"}
        assert caps["union"]["retrieve"]["modes"] == ["dense", "hybrid", "sparse"]
        assert caps["intersection"]["retrieve"] == {"modes": ["dense"],
                                                    "units": ["chunk", "document"]}
        assert set(caps["engines"]) == {"alpha", "s"} and set(caps["unavailable"]) == {"dead"}
        for c in engines.values():
            c.close()
    finally:
        s.close()


def test_a_federation_is_a_hit_source(real: Real) -> None:
    with Federation(real.clients(), deadline=60) as fed:
        source = HitSource(fed)
        direct = fed.retrieve(QUERY, 4, token_budget=400).to_wire()
        assert ids(source.retrieve(QUERY, 4, {"token_budget": 400})) == ids(direct)
        assert ids(asyncio.run(source.aretrieve(QUERY, 4, {"token_budget": 400}))) == ids(direct)


# --- graph and memory (§7.9, §7.17, §16.4) -----------------------------------------------

WIKI = REPO / "examples" / "wiki"
GRAPH_Q = "In which city was the group behind the single Midnight Harbor founded?"


class Graphs:
    """Two real graph engines: the whole wiki in process, two of its notes over stdio."""

    wiki: Engine
    wiki_client: RCPClient
    bands: RCPClient

    def clients(self, real: Real) -> dict[str, Any]:
        return {"wiki": self.wiki_client, "bands": self.bands, "alpha": real.alpha_client}


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Graphs]:
    root = tmp_path_factory.mktemp("federation-graph")
    g = Graphs()
    g.wiki = Engine(root / "wiki", embedder=embedder, build_graph=True)
    g.wiki.index_paths([WIKI])
    g.wiki.wait_for_derived()
    with Engine(root / "bands", embedder=embedder, build_graph=True) as bands:
        bands.index_paths([WIKI / "velvet-lanterns.md", WIKI / "oskar-brandvik.md"])
        bands.wait_for_derived()
    g.wiki_client = RCPClient.in_process(g.wiki)
    g.bands = RCPClient.stdio(engine=root / "bands")
    yield g
    g.bands.close()
    g.wiki_client.close()
    g.wiki.close()


def node_of(client: RCPClient, name: str) -> str:
    """The node id of entity ``name`` in the engine behind ``client``."""
    hit = client.retrieve(name, 1, unit="node").to_wire()["hits"][0]
    assert hit["meta"]["name"] == name
    return str(hit["id"])


def test_graph_local_is_fused_over_the_engines_offering_it(graphs: Graphs, real: Real) -> None:
    k = 4
    with Federation(graphs.clients(real), deadline=60) as fed:
        local = fed.graph("local", GRAPH_Q, k=k)
        assert isinstance(local, GraphResult) and local.meta is not None and local.hits
        assert {h.meta["engine"] for h in local.hits if h.meta} <= {"wiki", "bands"}
        out = local.to_wire()
        again = asyncio.run(fed.agraph("local", GRAPH_Q, k=k)).to_wire()
    own = {e: c.graph("local", GRAPH_Q, k=2 * k).to_wire()["hits"]
           for e, c in graphs.clients(real).items() if e != "alpha"}
    ref = ref_rrf(own, {"wiki": 1.0, "bands": 1.0})
    assert ids(out) == [i for i, _s in ref[:k]] == ids(again)
    assert [h["score"] for h in out["hits"]] == pytest.approx([s for _i, s in ref[:k]])
    assert {h["meta"]["engine"] for h in out["hits"]} == {"wiki", "bands"}
    # Both hops of the question, from the engine that holds both.
    wiki_docs = {h["chunk"]["docId"] for h in out["hits"] if h["meta"]["engine"] == "wiki"}
    assert {"wiki/midnight-harbor.md", "wiki/velvet-lanterns.md"} <= wiki_docs
    # alpha has no graph: skipped, noted, and not a degradation (it never could answer).
    assert out["_meta"]["engines"]["alpha"] == {"skipped": "does not advertise graph"}
    assert out["_meta"]["degraded"] == []
    assert "engine 'alpha' skipped: does not advertise graph" in out["usage"]["notes"]
    assert "indexVersion" in out["_meta"]["engines"]["wiki"] and "indexVersion" not in out


def test_graph_neighbors_qualifies_ids_and_routes_seeds(graphs: Graphs, real: Real) -> None:
    band = node_of(graphs.wiki_client, "Velvet Lanterns")
    assert node_of(graphs.bands, "Velvet Lanterns") == band  # one entity, one id in both
    with Federation(graphs.clients(real), deadline=60) as fed:
        both = fed.graph("neighbors", seed_ids=[band], k=6).to_wire()
        nodes, edges = both["nodes"], both["edges"]
        assert [n["id"] for n in nodes[:2]] == [f"wiki::{band}", f"bands::{band}"]  # seeds first
        assert len(nodes) <= 6 and all(n["id"] == f"{n['engine']}::" + n["id"].split("::")[1]
                                       for n in nodes)
        for engine, client in (("wiki", graphs.wiki_client), ("bands", graphs.bands)):
            mine = client.graph("neighbors", seed_ids=[band], k=6).to_wire()
            theirs = [n for n in nodes if n["engine"] == engine]
            # Each engine's nodes keep their order and scores, under qualified ids.
            assert [(n["id"], n["score"]) for n in theirs] == [
                (f"{engine}::{n['id']}", n["score"]) for n in mine["nodes"]][:len(theirs)]
        kept = {n["id"] for n in nodes}
        assert edges and all(e["src"] in kept and e["dst"] in kept for e in edges)
        # A qualified id goes to its own engine only; the others are not asked.
        bergen = next(n["id"] for n in nodes if n["engine"] == "bands" and n["name"] == "Bergen")
        routed = fed.graph("neighbors", seed_ids=[bergen], k=3).to_wire()
        assert {n["engine"] for n in routed["nodes"]} == {"bands"}
        assert routed["nodes"][0]["id"] == bergen
        assert routed["_meta"]["engines"]["wiki"] == {
            "skipped": "not asked: no seed names this engine"}
        # An unqualified seed only one engine knows: the other is skipped, not failed.
        single = node_of(graphs.wiki_client, "Midnight Harbor")
        one = asyncio.run(fed.agraph("neighbors", seed_ids=[single], k=3)).to_wire()
        assert {n["engine"] for n in one["nodes"]} == {"wiki"} and one["_meta"]["degraded"] == []
        assert one["_meta"]["engines"]["bands"]["skipped"].startswith("does not know the seeds")
        with pytest.raises(InvalidParams) as err:  # nobody knows it: the engines' own error
            fed.graph("neighbors", seed_ids=["node:0000000000000000"])
        assert err.value.field == "seedIds[0]"


def test_memory_build_and_recall_across_engines(graphs: Graphs, real: Real) -> None:
    with Federation(graphs.clients(real), deadline=60) as fed:
        typed_build = fed.memory_build()
        assert isinstance(typed_build, MemoryBuildResult)
        built = typed_build.to_wire()
        own = unpack_memory_id(built["memoryId"])
        assert set(own) == {"wiki", "bands"} and built["memoryId"].startswith("federation:")
        assert built["_meta"]["engines"]["alpha"] == {"skipped": "does not advertise memory"}
        typed_recall = fed.memory_recall(GRAPH_Q, memory_id=built["memoryId"], n=4)
        assert isinstance(typed_recall, MemoryRecallResult)
        assert {c.engine for c in typed_recall.clues} <= {"wiki", "bands"}  # the federation's key
        recalled = typed_recall.to_wire()
        assert recalled["_meta"]["engines"]["alpha"] == {
            "skipped": "not asked: not part of this memory"}
        clues = recalled["clues"]
        assert len(clues) == 4
        for engine, client in (("wiki", graphs.wiki_client), ("bands", graphs.bands)):
            mine = client.memory_recall(GRAPH_Q, memory_id=own[engine], n=4).to_wire()["clues"]
            theirs = [c for c in clues if c["engine"] == engine]
            assert theirs, engine  # RRF interleaves the engines' clues
            assert [(c["query"], c["seedIds"]) for c in theirs] == [
                (c["query"], [f"{engine}::{s}" for s in c["seedIds"]])
                for c in mine][:len(theirs)]
        # A clue's qualified seeds go straight back into the federation's graph.
        seeds = clues[0]["seedIds"]
        near = fed.graph("neighbors", seed_ids=seeds, k=4).to_wire()
        assert {n["engine"] for n in near["nodes"]} == {clues[0]["engine"]}
        assert [n["id"] for n in near["nodes"][:len(seeds)]] == seeds
        async_clues = asyncio.run(fed.amemory_recall(GRAPH_Q, memory_id=built["memoryId"],
                                                     n=4)).to_wire()
        assert async_clues["clues"] == clues
        # A session memory takes texts (nothing is written to any corpus).
        session = fed.memory_build([{"text": "Velvet Lanterns toured Bergen in 1975."}],
                                   scope="session", session_id="fed-s1").to_wire()
        assert set(unpack_memory_id(session["memoryId"])) == {"wiki", "bands"}
        # Refused before any I/O: a corpus write to every engine, a foreign memoryId.
        with pytest.raises(OptionUnsupported) as refused:
            fed.memory_build([{"text": "x"}])
        assert refused.value.option == "documents"
        for bad in ("graph@v2", "federation:!!!", "federation:" + "e30"):
            with pytest.raises(InvalidParams) as err:
                fed.memory_recall(GRAPH_Q, memory_id=bad)
            assert err.value.field == "memoryId"


def test_graph_errors_and_capabilities(graphs: Graphs, real: Real) -> None:
    with Federation({"alpha": real.alpha_client}) as fed:
        with pytest.raises(CapabilityMissing, match="advertises graph"):
            fed.graph("local", GRAPH_Q)
        with pytest.raises(CapabilityMissing, match="advertises memory"):
            fed.memory_recall(GRAPH_Q)
    with Federation(graphs.clients(real), deadline=60) as fed:
        with pytest.raises(InvalidParams) as bad:
            fed.graph("walk", GRAPH_Q)
        assert bad.value.field == "op"
        for kwargs, name in (({"k": 0}, "k"), ({"hops": True}, "hops"),
                             ({"seed_ids": "node:x"}, "seedIds")):
            with pytest.raises(InvalidParams) as bad:
                fed.graph("neighbors", **kwargs)
            assert bad.value.field == name
        with pytest.raises(InvalidParams):
            fed.graph("local")  # local needs a query
        caps = fed.capabilities
    union, inter = caps["union"], caps["intersection"]
    assert set(union["graph"]["ops"]) == {"local", "neighbors", "global", "drift", "communities"}
    assert union["memory"] == {"scopes": ["global", "session"]}
    assert union["x-rcp-agentic"]["graphRecall"] is True
    assert "graph" not in inter and "graphRecall" not in inter["x-rcp-agentic"]
    assert {"node", "path"} <= set(union["retrieve"]["units"])
    assert "node" not in inter["retrieve"]["units"]


def test_graph_community_ops_across_engines(graphs: Graphs, real: Real,
                                           scripted: Scripted) -> None:
    engines = (("wiki", graphs.wiki_client), ("bands", graphs.bands))
    query = "Which band did Oskar Brandvik play for, and where did it begin?"
    with Federation(graphs.clients(real), deadline=60) as fed:
        # global: each engine's communities (qualified), interleaved, the first k; the
        # engines' summary lines under their ids, within the budget.
        out = fed.graph("global", query, k=3, token_budget=60).to_wire()
        comms = out["communities"]
        own = {e: c.call("graph", {"op": "global", "query": query, "k": 3, "tokenBudget": 60})
               for e, c in engines}
        # Interleaved, both engines' best come first; the first k of the union.
        assert len(comms) == min(3, sum(len(o["communities"]) for o in own.values()))
        assert {c["engine"] for c in comms} == {e for e, o in own.items() if o["communities"]}
        for c in comms:
            engine, _, cid = c["id"].partition("::")
            assert engine == c["engine"] and cid in {x["id"] for x in own[engine]["communities"]}
        lines = out["summary"].splitlines()
        assert lines and count_tokens(out["summary"]) <= 60
        for line in lines:
            engine, _, text = line.partition("] ")
            assert text in own[engine.lstrip("[")]["summary"].splitlines()
        assert out["_meta"]["engines"]["alpha"] == {"skipped": "does not advertise graph"}
        # communities: pages of every engine until no cursor; each community once.
        listed, cursor = [], None
        while True:
            page = fed.graph("communities", k=2, cursor=cursor).to_wire()
            listed += [c["id"] for c in page["communities"]]
            cursor = page.get("nextCursor")
            if not cursor:
                break
        expected = [f"{e}::{c['id']}" for e, client in engines
                    for c in client.graph("communities", k=100).to_wire()["communities"]]
        assert sorted(listed) == sorted(expected) and len(set(listed)) == len(listed)
        for bad in ("x", "federation-cursor:!!!", pack_cursor({"nobody": "c"}),
                    pack_cursor({"wiki": "forged.0000"})):
            with pytest.raises(InvalidParams) as err:
                fed.graph("communities", cursor=bad)
            assert err.value.field == "cursor"
        # drift: hits fused as local's, follow-ups deduplicated; a session continues.
        first = fed.graph("drift", GRAPH_Q, k=4, session_id="fed-drift").to_wire()
        assert first["hits"] and len(first["hits"]) <= 4
        assert {h["meta"]["engine"] for h in first["hits"]} <= {"wiki", "bands"}
        assert len(set(first["followups"])) == len(first["followups"])
        again = asyncio.run(fed.agraph("drift", GRAPH_Q, k=4,
                                       session_id="fed-drift")).to_wire()
        assert not {(h["meta"]["engine"], h["id"]) for h in first["hits"]} & {
            (h["meta"]["engine"], h["id"]) for h in again["hits"]}
        with pytest.raises(InvalidParams) as err:
            fed.graph("global")  # global needs a query
        assert err.value.field == "query"
    # An op no engine offers; an engine's own cursor goes back to it inside the federation's.
    scripted.caps = {"graph": {"ops": ["communities"]}}
    scripted.answers["graph"] = {"communities": [{"id": "c1", "level": 0, "summary": "s"}],
                                 "nextCursor": "s-page-2"}
    with Federation({"s": scripted.client()}) as fed:
        with pytest.raises(OptionUnsupported) as refused:
            fed.graph("global", query)
        assert refused.value.option == "op"
        page = fed.graph("communities", k=1).to_wire()
        assert page["communities"] == [{"id": "s::c1", "level": 0, "summary": "s",
                                        "engine": "s"}]
        fed.graph("communities", k=1, cursor=page["nextCursor"])
        assert scripted.calls[-1][1]["cursor"] == "s-page-2"


def test_graph_deadline_required_and_wire(graphs: Graphs, scripted: Scripted) -> None:
    scripted.caps = {"graph": {"ops": ["neighbors"]}}
    scripted.answers["graph"] = {"nodes": [{"id": "n1", "score": 1.0}, {"id": "n2", "score": 0.5}],
                                 "edges": [{"src": "n1", "dst": "n2", "weight": 2.0}]}
    band = node_of(graphs.wiki_client, "Velvet Lanterns")
    engines = {"wiki": graphs.wiki_client, "s": scripted.client()}
    with Federation(engines, deadline=30) as fed:
        out = fed.graph("neighbors", seed_ids=["s::n1", f"wiki::{band}"], hops=2,
                        k=3).to_wire()
        method, sent = scripted.calls[-1]
        assert method == "graph" and sent["seedIds"] == ["n1"] and sent["hops"] == 2
        assert sent["_meta"]["federation"] == {"depth": 3, "path": []}
        assert 0 < sent["_meta"]["deadlineMs"] < 30_000
        assert out["nodes"][:2] == [  # the seeds first, in RRF order: rank 1 of each engine
            {"id": f"wiki::{band}", "score": out["nodes"][0]["score"], "name": "Velvet Lanterns",
             "seed": True, "trust": {"level": "community", "injectionSuspected": False},
             "engine": "wiki"},
            {"id": "s::n1", "score": 1.0, "engine": "s"}]
        assert {"src": "s::n1", "dst": "s::n2", "weight": 2.0} not in out["edges"]  # n2 cut (k)
        # Too slow: dropped at the deadline, noted, degraded.
        scripted.delay = 2.0
        slow = fed.graph("neighbors", seed_ids=["s::n1", f"wiki::{band}"], k=3,
                         timeout=0.8).to_wire()
        assert slow["_meta"]["degraded"] == ["s"] and {n["engine"] for n in slow["nodes"]} == {
            "wiki"}
        assert any("'s' timed out" in n for n in slow["usage"]["notes"])
        scripted.delay = 0.0
    # A required engine without the op fails the whole call with its refusal.
    with Federation(engines, deadline=30, required=["s"]) as fed:
        with pytest.raises(OptionUnsupported, match="required engine 's'"):
            fed.graph("local", GRAPH_Q)
    engines["s"].close()
