"""Interop: the official RCP Python SDK (``rcp``, PyPI ``rcp-protocol``) drives our real servers.

Every test talks to a real subprocess, ``rcp-agentic serve --stdio`` spawned by the
SDK itself or ``rcp-agentic serve --http`` (uvicorn on loopback), only through the
SDK's public API: ``rcp.connect_stdio`` / ``rcp.connect_http`` and the ``Client``
they return, ``rcp.StdioTransport`` / ``rcp.HttpTransport`` for the handshake edge
cases a ``Client`` cannot reach (it always initializes first), and the SDK's own
``decode_vectors`` / ``encode_vectors`` codec. The SDK's HTTP transport cannot send
an ``Authorization`` header, so the HTTP server runs without ``RCP_AGENTIC_TOKEN``.
"""

from __future__ import annotations

import math
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rcp  # type: ignore[import-untyped]  # PyPI rcp-protocol, no py.typed

from conftest import DOCS, free_port, running_server
from rcp_agentic import Engine, __version__

SERVE = [sys.executable, "-m", "rcp_agentic.cli", "serve"]
TRANSPORTS = ["stdio", "http"]
CLIENT_INFO = {"name": "interop-test", "version": "1"}


def _engine_dir(factory: pytest.TempPathFactory, embedder: Any, name: str) -> Path:
    path = factory.mktemp(name) / "e"
    with Engine(path, embedder=embedder) as eng:
        eng.add_documents(DOCS)
    return path


def _env_without_token() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "RCP_AGENTIC_TOKEN"}


def _http_server(path: Path, env: dict[str, str]) -> Any:
    """The RCP base URL, and a context manager running ``serve --http`` there (loopback)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}/rcp"
    probe = rcp.HttpTransport(base, timeout=5)

    def ready() -> bool:
        try:  # any parsed JSON-RPC answer (even a 401's -32012) means it is up
            return "jsonrpc" in probe.call({"jsonrpc": "2.0", "id": 0, "method": "ping",
                                            "params": {}})
        except rcp.RcpError:
            return False

    # The SDK cannot send a token: without one, the writes tested here need the opt-in.
    cmd = [*SERVE, "--http", "--engine", str(path), "--host", "127.0.0.1", "--port", str(port),
           "--allow-anonymous-writes"]
    return base, running_server(cmd, ready, timeout=120, env=env)


@pytest.fixture(scope="module")
def stdio_argv(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> list[str]:
    """The command line the SDK spawns (a fresh server per connection)."""
    return [*SERVE, "--stdio", "--engine", str(_engine_dir(tmp_path_factory, embedder,
                                                           "interop-stdio"))]


@pytest.fixture(scope="module")
def http_base(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[str]:
    """Base URL (``…/rcp``) of one real HTTP server shared by the module."""
    base, server = _http_server(_engine_dir(tmp_path_factory, embedder, "interop-http"),
                                _env_without_token())
    with server:
        yield base


@pytest.fixture(scope="module", params=TRANSPORTS)
def client(request: pytest.FixtureRequest) -> Iterator[rcp.Client]:
    """An SDK client, connected (handshake done) over each transport in turn."""
    if request.param == "stdio":
        c = rcp.connect_stdio(request.getfixturevalue("stdio_argv"))
    else:
        c = rcp.connect_http(request.getfixturevalue("http_base"))
    yield c
    c.shutdown()


def transport_of(request: pytest.FixtureRequest) -> str:
    return str(request.node.callspec.params["client"])


def rcp_error(fn: Any, *args: Any, **kwargs: Any) -> rcp.RcpError:
    with pytest.raises(rcp.RcpError) as info:
        fn(*args, **kwargs)
    return info.value


def doc_ids(hits: list[dict[str, Any]]) -> list[str]:
    return [h["chunk"]["docId"] for h in hits]


# --- handshake, info, ping ----------------------------------------------------------------

def test_handshake_negotiates_version_and_capabilities(client: rcp.Client) -> None:
    assert client.protocol_version == 1 == rcp.PROTOCOL_VERSION
    assert client.server == {"name": "rcp-agentic", "version": __version__}
    caps = client.capabilities
    assert caps["retrieve"]["maxK"] == 200
    assert set(caps["retrieve"]["modes"]) == {"dense", "sparse", "hybrid"}
    assert caps["embed"]["dimension"] == 384 and "f32-base64" in caps["embed"]["encodings"]
    assert caps["index"]["writable"] is True
    for cap in (rcp.Capability.Retrieve, rcp.Capability.Embed, rcp.Capability.Index,
                rcp.Capability.Filter, rcp.Capability.Citations, rcp.Capability.Pagination,
                rcp.Capability.Session):
        assert client.supports(cap), cap
    for cap in (rcp.Capability.Graph, rcp.Capability.Transform, rcp.Capability.Memory,
                rcp.Capability.Catalog, rcp.Capability.SparseEmbed, rcp.Capability.MultiVector):
        assert not client.supports(cap), cap


def test_info_reports_the_session_capabilities(client: rcp.Client) -> None:
    negotiated = dict(client.capabilities)
    res = client.info()  # the SDK re-reads identity and capabilities from it
    assert res["protocolVersion"] == 1
    assert res["server"]["name"] == "rcp-agentic"
    assert res["capabilities"] == negotiated == client.capabilities  # §13.2


@pytest.mark.parametrize("nonce", [0, 777, 2**53 - 1, -3, 1.5, "n-é-1", ""])
def test_ping_echoes_nonce(client: rcp.Client, nonce: Any) -> None:
    res = client.ping(nonce=nonce)
    assert res == {"nonce": nonce} and type(res["nonce"]) is type(nonce)


def test_ping_without_nonce(client: rcp.Client) -> None:
    assert client.ping() == {}


def test_repeated_initialize(client: rcp.Client, request: pytest.FixtureRequest) -> None:
    params = {"protocolVersion": 1, "client": CLIENT_INFO, "capabilities": {}}
    if transport_of(request) == "stdio":  # §13: not after a successful handshake
        err = rcp_error(client.call, rcp.Method.INITIALIZE, params)
        assert err.code == rcp.Errc.INVALID_REQUEST
    else:  # §5.2: a stateless HTTP server answers initialize idempotently
        res = client.call(rcp.Method.INITIALIZE, params)
        assert res["protocolVersion"] == 1 and res["capabilities"] == client.capabilities


# --- retrieve -------------------------------------------------------------------------------

def test_retrieve_hits_carry_ids_text_and_citations(client: rcp.Client) -> None:
    hits = client.retrieve("rank fusion", k=3)
    assert len(hits) == 3  # eight documents, so k is met exactly
    assert hits[0]["id"] == "doc:d5#c0" and doc_ids(hits)[0] == "d5"
    assert hits[0]["text"] == DOCS[4]["text"]
    assert len({h["id"] for h in hits}) == len(hits)
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    for h in hits:
        assert isinstance(h["id"], str) and h["text"]
        assert isinstance(h["score"], float) and math.isfinite(h["score"])
        assert h["citation"]["source"] == h["chunk"]["docId"]
        assert h["citation"]["end"] > h["citation"]["start"] >= 0
        assert 0.0 <= h["confidence"] <= 1.0 and h["unit"] == "chunk"


@pytest.mark.parametrize("doc", DOCS, ids=[str(d["id"]) for d in DOCS])
def test_retrieve_finds_each_document_by_its_text(client: rcp.Client, doc: dict[str, Any]
                                                  ) -> None:
    assert doc_ids(client.retrieve(doc["text"], k=1)) == [doc["id"]]


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_retrieve_modes(client: rcp.Client, mode: str) -> None:
    hits = client.retrieve("Photosynthese Lichtenergie", k=1, opts={"mode": mode})
    assert doc_ids(hits) == ["d3"]


def test_search_reports_usage_and_pages_with_cursor(client: rcp.Client) -> None:
    first = client.search("information retrieval ranking", k=2)
    assert len(first["hits"]) == 2 and first["usage"]["candidates"] >= 2
    assert first["next_cursor"]
    second = client.search("information retrieval ranking", k=2,
                           opts={"cursor": first["next_cursor"]})
    assert second["hits"] and not {h["id"] for h in first["hits"]} & {
        h["id"] for h in second["hits"]}


@pytest.mark.parametrize(("flt", "expected"), [
    ({"field": "lang", "op": "eq", "value": "de"}, {"d3"}),
    ({"and": [{"field": "lang", "op": "eq", "value": "en"},
              {"field": "year", "op": "gte", "value": 2020}]}, {"d2", "d4"}),
    ({"or": [{"field": "lang", "op": "in", "value": ["fr", "de"]},
             {"field": "tags", "op": "contains", "value": "fusion"}]}, {"d3", "d5", "d7"}),
    ({"not": {"field": "lang", "op": "eq", "value": "en"}}, {"d3", "d7"}),
])
def test_retrieve_with_filter(client: rcp.Client, flt: dict[str, Any], expected: set[str]
                              ) -> None:
    hits = client.retrieve("documents", k=8, opts={"filter": flt, "unit": "chunk"})
    assert set(doc_ids(hits)) == expected


def test_session_never_repeats_a_hit(client: rcp.Client,
                                    request: pytest.FixtureRequest) -> None:
    """Over stdio the session holds. Over HTTP the SDK opens a connection per request and
    sends no RCP-Session header, so an anonymous server binds each request's sessionId to
    that connection alone (docs/server.md, "Sessions are bound to the caller"): nothing is
    hidden."""
    opts = {"sessionId": f"interop-{uuid.uuid4().hex}"}
    first = client.retrieve("neural retrieval", k=2, opts=opts)
    second = client.retrieve("neural retrieval", k=2, opts=opts)
    assert len(first) == len(second) == 2
    if transport_of(request) == "stdio":
        assert not {h["id"] for h in first} & {h["id"] for h in second}
    else:
        assert [h["id"] for h in first] == [h["id"] for h in second]


def test_progress_token_does_not_disturb_the_sdk(client: rcp.Client) -> None:
    """Over stdio a streaming server interleaves notifications/progress; the SDK skips them."""
    opts = {"_meta": {"progressToken": f"tok-{uuid.uuid4().hex[:6]}"}}
    assert doc_ids(client.retrieve("rank fusion", k=2, opts=opts))[0] == "d5"
    assert client.ping(nonce="after-progress") == {"nonce": "after-progress"}


# --- embed ----------------------------------------------------------------------------------

TEXTS = [DOCS[0]["text"], "Grüße aus Köln — 東京", "x"]


@pytest.mark.parametrize("kind", [None, "query", "document"])
def test_embed_json(client: rcp.Client, kind: str | None) -> None:
    vectors = client.embed(TEXTS, kind=kind)
    assert len(vectors) == len(TEXTS)
    for v in vectors:
        assert len(v) == client.capabilities["embed"]["dimension"] == 384
        assert math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, abs_tol=1e-4)


def test_embed_f32_base64_decodes_to_the_json_vectors(client: rcp.Client) -> None:
    res = client.call(rcp.Method.EMBED, {"inputs": TEXTS, "encoding": "f32-base64"})
    assert res["encoding"] == "f32-base64" and res["dimension"] == 384
    decoded = rcp.decode_vectors(res["vectors"], res["encoding"], res["dimension"])
    as_json = client.embed(TEXTS)
    assert len(decoded) == len(as_json) == len(TEXTS)
    for got, want in zip(decoded, as_json, strict=True):
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-6
    # The SDK's reference encoder reproduces our blobs byte for byte (§7.3.1: little-endian).
    assert rcp.encode_vectors(decoded, "f32-base64") == (
        res["vectors"], {"encoding": "f32-base64", "dimension": 384})


def test_embed_legacy_texts_field(client: rcp.Client) -> None:
    res = client.call(rcp.Method.EMBED, {"texts": TEXTS[:2]})
    assert rcp.decode_vectors(res["vectors"], res.get("encoding")) == client.embed(TEXTS[:2])


# --- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "params", "code", "data"), [
    ("does/not/exist", {}, rcp.Errc.UNKNOWN_METHOD, None),
    ("retrieve/v2", {"query": "x", "k": 1}, rcp.Errc.UNKNOWN_METHOD, None),
    ("rerank", {"query": "q", "passages": ["a", "b"]}, rcp.Errc.CAPABILITY_MISSING, None),
    ("graph", {"op": "local", "query": "q"}, rcp.Errc.CAPABILITY_MISSING, None),
    ("query/transform", {"query": "q", "method": "hyde"}, rcp.Errc.CAPABILITY_MISSING, None),
    ("embed/sparse", {"texts": ["q"]}, rcp.Errc.CAPABILITY_MISSING, None),
    ("catalog/list", {}, rcp.Errc.CAPABILITY_MISSING, None),
    ("retrieve", {"query": "x", "k": -5}, rcp.Errc.INVALID_PARAMS, {"field": "k"}),
    ("retrieve", {"query": "x", "k": "3"}, rcp.Errc.INVALID_PARAMS, {"field": "k"}),
    ("retrieve", {"query": "x", "k": 10, "candidateK": 2}, rcp.Errc.INVALID_PARAMS, None),
    ("retrieve", {"k": 1}, rcp.Errc.INVALID_PARAMS, {"field": "query"}),
    ("retrieve", {"query": "x", "k": 1, "filter": {"field": "nope", "op": "eq", "value": 1}},
     rcp.Errc.INVALID_PARAMS, {"field": "filter.nope"}),
    ("retrieve", {"query": "x", "k": 1, "mode": "colbert"}, rcp.Errc.OPTION_UNSUPPORTED,
     {"option": "mode"}),
    ("embed", {"inputs": "not a list"}, rcp.Errc.INVALID_PARAMS, {"field": "inputs"}),
    ("embed", {"inputs": ["x"], "encoding": "f16"}, rcp.Errc.OPTION_UNSUPPORTED,
     {"option": "encoding"}),
    ("index/add", {"documents": []}, rcp.Errc.INVALID_PARAMS, {"field": "documents"}),
    ("index/delete", {"ids": "d1"}, rcp.Errc.INVALID_PARAMS, {"field": "ids"}),
])
def test_errors_surface_through_the_sdk(client: rcp.Client, method: str, params: dict[str, Any],
                                        code: int, data: dict[str, Any] | None) -> None:
    err = rcp_error(client.call, method, params)
    assert err.code == code, err
    assert str(err).startswith(f"[RCP {code}] ") and err.message
    if data is not None:
        assert isinstance(err.data, dict) and data.items() <= err.data.items(), err.data
    assert not err.retryable()


@pytest.mark.parametrize(("cap", "typed_call", "method", "params"), [
    (rcp.Capability.Rerank, lambda c: c.rerank("q", ["a"]), "rerank",
     {"query": "q", "passages": ["a"]}),
    (rcp.Capability.Graph, lambda c: c.graph("local", {"query": "q"}), "graph",
     {"op": "local", "query": "q"}),
    (rcp.Capability.Transform, lambda c: c.transform("q", "hyde"), "query/transform",
     {"query": "q", "method": "hyde"}),
    (rcp.Capability.Memory, lambda c: c.memory_recall("q"), "memory/recall", {"query": "q"}),
    (rcp.Capability.Catalog, lambda c: c.catalog(), "catalog/list", {}),
])
def test_sdk_gate_and_server_agree_on_unadvertised_capabilities(
        client: rcp.Client, cap: rcp.Capability, typed_call: Any, method: str,
        params: dict[str, Any]) -> None:
    assert not client.supports(cap)
    assert rcp_error(typed_call, client).code == rcp.Errc.CAPABILITY_MISSING  # SDK, no round trip
    assert rcp_error(client.call, method, params).code == rcp.Errc.CAPABILITY_MISSING  # server


# --- index/add, index/delete, feedback ------------------------------------------------------

def test_index_add_retrieve_upsert_delete(client: rcp.Client) -> None:
    tag = uuid.uuid4().hex[:8]
    one, two, three = (f"interop-{tag}-{n}" for n in (1, 2, 3))
    only = {"filter": {"field": "doc_id", "op": "eq", "value": one}}
    added = client.index_add({"documents": [
        {"id": one, "text": "The quokka is a small marsupial living on Rottnest Island.",
         "meta": {"lang": "en", "year": 2024}}]})
    assert added["ids"] == [one] and added["chunks"] >= 1
    minted: list[str] = []
    try:
        hits = client.retrieve("quokka marsupial", k=5, opts=only)
        assert doc_ids(hits) == [one] and "quokka" in hits[0]["text"]
        assert hits[0]["meta"]["year"] == 2024

        again = client.index_add({"documents": [  # same id: an upsert (§7.10)
            {"id": one, "text": "The wombat digs burrows with its strong claws."}]})
        assert again["ids"] == [one]
        hits = client.retrieve("wombat burrows", k=5, opts=only)
        assert doc_ids(hits) == [one] and "wombat" in hits[0]["text"]
        assert all("quokka" not in h["text"] for h in hits)

        batch = client.index_add({"documents": [  # ids are positional, one per document
            {"id": two, "text": "Axolotls regrow lost limbs."},
            {"text": "A document without an id gets one minted by the server."},
            {"id": three, "text": "Platypuses lay eggs."}]})
        assert len(batch["ids"]) == 3 and batch["ids"][0] == two and batch["ids"][2] == three
        minted = [batch["ids"][1]]
        assert isinstance(minted[0], str) and minted[0] not in (one, two, three)
        assert doc_ids(client.retrieve("axolotl limbs", k=1)) == [two]
    finally:
        deleted = client.index_delete({"ids": [one, two, three, *minted]})
    assert deleted == {"deleted": 3 + len(minted)}
    assert client.index_delete({"ids": [one, two, three, *minted]}) == {"deleted": 0}  # §7.11
    assert client.retrieve("wombat burrows", k=5, opts=only) == []
    assert client.index_delete({"ids": [f"never-added-{tag}"]}) == {"deleted": 0}


def test_feedback(client: rcp.Client) -> None:
    assert client.supports(rcp.Capability.Feedback)
    hit = client.retrieve("rank fusion", k=1)[0]
    res = client.feedback([{"hitId": hit["id"], "used": True, "helpful": True, "reward": 0.5}],
                          query="rank fusion", session_id=f"fb-{uuid.uuid4().hex[:6]}")
    assert res == {"accepted": 1}


# --- lifecycle edges through the SDK's transports ----------------------------------------

def _req(id_: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def test_stdio_lifecycle_through_sdk_transport(stdio_argv: list[str]) -> None:
    t = rcp.StdioTransport.spawn(stdio_argv)
    query = {"query": "rank fusion", "k": 1}
    try:
        assert t.call(_req(1, "ping", {"nonce": "n1"})) == {
            "jsonrpc": "2.0", "id": 1, "result": {"nonce": "n1"}}
        assert t.call(_req(2, "info", {}))["result"]["server"]["name"] == "rcp-agentic"
        assert t.call(_req(3, "retrieve", query))["error"]["code"] == rcp.Errc.NOT_INITIALIZED
        failed = t.call(_req(4, "initialize", {"protocolVersion": 0, "client": CLIENT_INFO}))
        assert failed["error"]["code"] == rcp.Errc.VERSION_MISMATCH
        assert t.call(_req(5, "retrieve", query))["error"]["code"] == rcp.Errc.NOT_INITIALIZED
        ok = t.call(_req("init-6", "initialize", {"protocolVersion": 7, "client": CLIENT_INFO,
                                                  "capabilities": {"streaming": {}}}))
        assert ok["id"] == "init-6"  # same JSON type and value
        assert ok["result"]["protocolVersion"] == rcp.negotiate_version(7) == 1
        hits = t.call(_req(7, "retrieve", query))["result"]["hits"]
        assert hits[0]["chunk"]["docId"] == "d5"
        assert t.call(_req(8, "shutdown", {})) == {"jsonrpc": "2.0", "id": 8, "result": {}}
    finally:
        t.close()


def test_http_is_stateless_but_still_gated(http_base: str) -> None:
    t = rcp.HttpTransport(http_base)
    # §5.2: implicitly initialized, so retrieve works without a handshake …
    assert t.call(_req(1, "retrieve", {"query": "rank fusion", "k": 1}))["result"]["hits"]
    # … yet an unadvertised capability is still -32003, an unknown method -32004.
    assert t.call(_req(2, "rerank", {"query": "q", "passages": ["a"]}))["error"]["code"] == (
        rcp.Errc.CAPABILITY_MISSING)
    assert t.call(_req(3, "nope", {}))["error"]["code"] == rcp.Errc.UNKNOWN_METHOD
    bad = t.call(_req(4, "initialize", {"protocolVersion": 0, "client": CLIENT_INFO}))
    assert bad["error"]["code"] == rcp.Errc.VERSION_MISMATCH
    ok = t.call(_req("s5", "initialize", {"protocolVersion": 7, "client": CLIENT_INFO}))
    assert ok["id"] == "s5" and ok["result"]["protocolVersion"] == 1


def test_http_serves_several_sdk_clients(http_base: str) -> None:
    """Each SDK client initializes; none may lock the others out, and none can stop the server."""
    first, second = rcp.connect_http(http_base), rcp.connect_http(http_base)
    assert first.capabilities == second.capabilities
    second.shutdown()  # sends `shutdown`: over HTTP it must not take the server down
    assert doc_ids(first.retrieve("rank fusion", k=1)) == ["d5"]
    third = rcp.connect_http(http_base)
    assert third.ping(nonce=3) == {"nonce": 3}
    first.shutdown()
    third.shutdown()


def test_http_bearer_token_is_reported_as_unauthorized(tmp_path: Path) -> None:
    """The SDK cannot send a token: against a protected server its handshake fails with -32012."""
    base, server = _http_server(tmp_path / "empty", {**os.environ,
                                                     "RCP_AGENTIC_TOKEN": "interop-secret"})
    with server:
        assert rcp_error(rcp.connect_http, base).code == rcp.Errc.UNAUTHORIZED


# --- the reverse: our client against a server built with the SDK ------------------------

SDK_SERVER = '''
import sys
import rcp

DOCS = {"a": "alpha reciprocal rank fusion", "b": "beta dense retrieval with bi-encoders"}
server = rcp.Server()
server.set_info("sdk-tiny", "1.0")
server.set_conformance("L1")
server.advertise(rcp.Capability.Retrieve, {"maxK": 10, "modes": ["sparse"]})
server.advertise(rcp.Capability.Index, {"writable": True})


@server.on(rcp.Method.RETRIEVE)
def retrieve(params):
    if params.get("mode", "sparse") != "sparse":
        raise rcp.RcpError(rcp.Errc.OPTION_UNSUPPORTED, "mode", {"option": "mode"})
    words = set(str(params["query"]).lower().split())
    ranked = sorted(((len(words & set(t.split())), i, t) for i, t in DOCS.items()),
                    key=lambda x: (-x[0], x[1]))
    return {"hits": [{"id": i, "score": float(n), "text": t}
                     for n, i, t in ranked[:params.get("k", 10)]]}


@server.on(rcp.Method.INDEX_ADD)
def index_add(params):
    DOCS.update({d["id"]: d["text"] for d in params["documents"]})
    return {"ids": [d["id"] for d in params["documents"]]}


if sys.argv[1:2] == ["--http"]:
    server.serve_http(int(sys.argv[2]))
else:
    server.serve_stdio()
'''


@pytest.fixture(scope="module")
def sdk_server(tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("sdk") / "tiny_server.py"
    script.write_text(SDK_SERVER)
    return script


def _exercise(client: Any) -> None:
    from rcp_agentic.client import CapabilityMissing, OptionUnsupported

    info = client.initialize()
    assert info["server"]["name"] == "sdk-tiny" and info["protocolVersion"] == 1
    result = client.retrieve("rank fusion", k=5)  # the typed result, from another server
    assert [h.id for h in result.hits] == ["a", "b"] and result.hits[0].score == 2.0
    assert result.to_wire()["hits"][0] == {"id": "a", "score": 2.0,
                                           "text": "alpha reciprocal rank fusion"}
    assert client.retrieve("rank fusion", k=500).hits[0].id == "a"  # clamped to maxK
    assert client.index_add([{"id": "c", "text": "gamma rank fusion rank"}])["ids"] == ["c"]
    assert client.retrieve("gamma fusion", k=1).hits[0].id == "c"
    with pytest.raises(CapabilityMissing):  # embed is not advertised: refused before any I/O
        client.embed(["x"])
    with pytest.raises(OptionUnsupported):  # only sparse is advertised: refused locally
        client.retrieve("x", mode="dense")


def test_our_client_against_the_sdk_server_over_stdio(sdk_server: Path) -> None:
    from rcp_agentic.client import OptionUnsupported, RCPClient

    with RCPClient.stdio([sys.executable, str(sdk_server)]) as client:
        _exercise(client)
        with pytest.raises(OptionUnsupported) as err:  # strict=False: sent, refused remotely
            client.retrieve("x", mode="dense", strict=False)
        assert err.value.data == {"option": "mode"}


def test_our_async_client_against_the_sdk_server_over_http(sdk_server: Path) -> None:
    import asyncio
    import subprocess

    import httpx

    from rcp_agentic.client import AsyncRCPClient

    port = free_port()

    def ready() -> bool:
        try:
            httpx.post(f"http://127.0.0.1:{port}/rcp/ping",
                       json={"jsonrpc": "2.0", "id": 0, "method": "ping"}, timeout=2)
            return True
        except httpx.HTTPError:
            return False

    async def run() -> list[str]:
        async with AsyncRCPClient.http(f"http://127.0.0.1:{port}") as client:
            await client.initialize()
            result = await client.retrieve("dense retrieval", k=2)
            return [h.id for h in result.hits]

    with running_server([sys.executable, str(sdk_server), "--http", str(port)], ready,
                        timeout=60) as proc:
        assert isinstance(proc, subprocess.Popen)
        assert asyncio.run(run()) == ["b", "a"]
