"""Chroma: HNSW dense recall agrees with the exact path; engines work with a `chroma run` server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import chromadb
import pytest
from chromadb.config import Settings
from conftest import ChromaQuerySpy, DOCS

from rcp_agentic import BackendUnavailable, Engine, RCPError

# A corpus big enough that HNSW has a graph to walk: DOCS plus short synthetic documents.
_SUBJECTS = ["volcano", "violin", "glacier", "espresso", "satellite", "penguin", "cathedral",
             "tornado", "orchard", "submarine", "lighthouse", "mushroom", "compiler", "bridge",
             "desert", "harbor", "telescope", "bakery", "railway", "coral reef"]
_ASPECTS = ["history", "maintenance", "physics", "economics", "ecology", "photography",
            "safety rules"]
EXTRA = [
    {"id": f"x{i:03d}",
     "text": (f"Notes on the {s} and its {a}. Practitioners of {a} study the {s} in detail, "
              f"and report {i % 5 + 2} observations about it. The {s} is discussed with respect "
              f"to {a} in seminar {i}."),
     "meta": {"lang": "en" if i % 3 else "xx", "year": 1990 + i % 35}}
    for i, (s, a) in enumerate((s, a) for s in _SUBJECTS for a in _ASPECTS)
]
CORPUS = DOCS + EXTRA
QUERIES = [
    "vitamin deficiency and neurological disease",
    "how does BM25 rank documents",
    "embedding passages with a bi-encoder",
    "maintenance of a violin",
    "photography of glaciers and volcanoes",
    "economic history of railways",
    "the ecology of coral reefs",
    "satellite physics",
    "energy production inside cells",
]
FILTERS = [
    {"field": "lang", "op": "eq", "value": "en"},
    {"and": [{"field": "year", "op": "gte", "value": 2005},
             {"field": "year", "op": "lt", "value": 2020}]},
    {"field": "doc_id", "op": "in", "value": ["d1", "d4", "x001", "x010", "x100", "x120"]},
]




def _http_client(url: str) -> Any:
    parsed = urlparse(url)
    return chromadb.HttpClient(host=parsed.hostname, port=parsed.port,
                               settings=Settings(anonymized_telemetry=False))


def _sync_state(eng: Engine) -> dict[str, set[int]]:
    return {unit: set(eng.store.rowids(unit, 0)) for unit in ("chunk", "document")}


# --- HNSW vs exact -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def exact_and_hnsw(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Any:
    """One engine directory opened twice: exact dense recall (default) and Chroma-only."""
    path = tmp_path_factory.mktemp("hnsw") / "engine"
    exact = Engine(path, embedder=embedder, chunk_size=24, chunk_overlap=6)
    exact.add_documents(CORPUS)
    hnsw = Engine(path, embedder=embedder, dense_exact_max=0)
    assert hnsw.config.chunk_size == 24  # from config.json
    yield exact, hnsw
    hnsw.close()
    exact.close()


@pytest.mark.parametrize("unit", ["chunk", "document"])
@pytest.mark.parametrize("flt", [None, *FILTERS], ids=["no-filter", "lang", "year-range", "ids"])
def test_hnsw_dense_equals_exact(exact_and_hnsw: Any, unit: str, flt: Any) -> None:
    exact, hnsw = exact_and_hnsw
    assert exact.stats()["chunk"] > len(CORPUS)  # several chunks per document
    spy_exact, spy_hnsw = ChromaQuerySpy(exact), ChromaQuerySpy(hnsw)
    for query in QUERIES:
        opts: dict[str, Any] = {"mode": "dense", "unit": unit}
        if flt is not None:
            opts["filter"] = flt
        a = exact.retrieve(query, k=10, **opts).hits
        b = hnsw.retrieve(query, k=10, **opts).hits
        assert a, query
        assert [h.id for h in b] == [h.id for h in a], query
        for ha, hb in zip(a, b):
            assert hb.score == pytest.approx(ha.score, abs=1e-4)
            assert hb.scores["dense"] == pytest.approx(ha.scores["dense"], abs=1e-4)
        if flt is not None:
            assert {h.id for h in b} <= _filter_ids(exact, unit, flt), query
    assert spy_exact.calls == 0
    assert spy_hnsw.calls == len(QUERIES)


def _filter_ids(eng: Engine, unit: str, flt: dict[str, Any]) -> set[str]:
    """Unit ids that satisfy ``flt``, computed here from the stored metadata."""
    import json

    rows = eng.store.query(
        "SELECT u.uid, u.doc_id, d.meta FROM units u JOIN documents d ON d.drow = u.doc_row"
        " WHERE u.unit = ? AND u.v_to IS NULL", (unit,))

    def ok(node: dict[str, Any], doc_id: str, meta: dict[str, Any]) -> bool:
        if "and" in node:
            return all(ok(n, doc_id, meta) for n in node["and"])
        value = doc_id if node["field"] == "doc_id" else meta.get(node["field"])
        if value is None:
            return False
        op, want = node["op"], node["value"]
        return {"eq": lambda: value == want, "in": lambda: value in want,
                "gte": lambda: value >= want, "lt": lambda: value < want}[op]()

    return {uid for uid, doc_id, meta in rows if ok(flt, doc_id, json.loads(meta))}


def test_hnsw_hybrid_equals_exact(exact_and_hnsw: Any) -> None:
    exact, hnsw = exact_and_hnsw
    for query in QUERIES:
        for fusion in ({"method": "rrf"}, {"method": "convex", "alpha": 0.5}):
            a = exact.retrieve(query, k=10, mode="hybrid", fusion=fusion).hits
            b = hnsw.retrieve(query, k=10, mode="hybrid", fusion=fusion).hits
            assert [h.id for h in b] == [h.id for h in a], (query, fusion)


# --- a `chroma run` server ---------------------------------------------------------------


@pytest.mark.chroma_server
def test_server_engine_indexes_and_retrieves(tmp_path: Path, embedder: Any,
                                             chroma_server: str) -> None:
    path = tmp_path / "engine"
    with Engine(path, embedder=embedder, chroma_url=chroma_server, dense_exact_max=0) as eng:
        eng.add_documents(DOCS)
        assert not (path / "chroma").exists(), "an embedded Chroma was created anyway"
        spy = ChromaQuerySpy(eng)
        query = "bi-encoder dense retrievers rank passages by cosine similarity"
        for mode in ("dense", "sparse", "hybrid"):
            for unit in ("chunk", "document"):
                hits = eng.retrieve(query, k=3, mode=mode, unit=unit).hits
                assert hits and hits[0].meta["doc_id"] == "d4", (mode, unit)
                assert hits[0].text == DOCS[3]["text"]
        assert spy.calls == 4  # dense and hybrid, two units, all answered by the server
        filtered = eng.retrieve(query, k=5, mode="dense",
                                filter={"field": "lang", "op": "ne", "value": "en"}).hits
        assert {h.meta["doc_id"] for h in filtered} == {"d3", "d7"}

        # The collections live on the server and hold exactly the engine's rowids.
        client = _http_client(chroma_server)
        names = {c if isinstance(c, str) else c.name for c in client.list_collections()}
        for unit, rowids in _sync_state(eng).items():
            name = f"{eng.chroma.prefix}-{unit}-l0"
            assert name in names
            col = client.get_collection(name)
            assert col.count() == len(rowids) == len(DOCS)
            assert {int(i) for i in col.get(include=[])["ids"]} == rowids

        # Deletes reach the server too.
        eng.delete_documents(["d4"])
        for unit, rowids in _sync_state(eng).items():
            col = client.get_collection(f"{eng.chroma.prefix}-{unit}-l0")
            assert {int(i) for i in col.get(include=[])["ids"]} == rowids
        hits = eng.retrieve(query, k=10, mode="dense").hits
        assert "d4" not in {h.meta["doc_id"] for h in hits}


@pytest.mark.chroma_server
def test_embedded_engine_moved_to_server_is_filled_on_open(tmp_path: Path, embedder: Any,
                                                           chroma_server: str) -> None:
    """Chroma is derived: opening an embedded-built engine against a server fills the server."""
    path = tmp_path / "engine"
    with Engine(path, embedder=embedder) as eng:
        eng.add_documents(DOCS)
    with Engine(path, embedder=embedder, chroma_url=chroma_server, dense_exact_max=0) as eng:
        for unit, rowids in _sync_state(eng).items():
            assert eng.chroma.all_ids(unit, 0) == rowids
        hits = eng.retrieve(DOCS[5]["text"], k=1, mode="dense", unit="document").hits
        assert hits[0].meta["doc_id"] == "d6"


@pytest.mark.chroma_server
def test_two_engines_on_one_server_are_isolated(tmp_path: Path, embedder: Any,
                                                chroma_server: str) -> None:
    a = Engine(tmp_path / "a", embedder=embedder, chroma_url=chroma_server, dense_exact_max=0)
    b = Engine(tmp_path / "b", embedder=embedder, chroma_url=chroma_server, dense_exact_max=0)
    try:
        a.add_documents(DOCS[:4])
        b.add_documents(DOCS[4:])
        assert a.chroma.prefix != b.chroma.prefix
        # Both SQLite stores number their units from 1: shared collections would collide.
        assert _sync_state(a)["chunk"] & _sync_state(b)["chunk"]
        for eng, own in ((a, DOCS[:4]), (b, DOCS[4:])):
            ids = {d["id"] for d in own}
            for unit, rowids in _sync_state(eng).items():
                assert eng.chroma.all_ids(unit, 0) == rowids
            for doc in DOCS:
                hits = eng.retrieve(doc["text"], k=10, mode="dense", unit="chunk").hits
                assert {h.meta["doc_id"] for h in hits} == ids
                if doc["id"] in ids:
                    assert hits[0].meta["doc_id"] == doc["id"]
        # Writes to one engine leave the other's collections alone.
        before = {u: b.chroma.all_ids(u, 0) for u in ("chunk", "document")}
        a.delete_documents(["d1", "d2"])
        a.add_documents([{"id": "d9", "text": "Tidal forces stretch moons that orbit close to "
                                               "their planets."}])
        assert {u: b.chroma.all_ids(u, 0) for u in ("chunk", "document")} == before
        # Reopening one engine (which reconciles) does not touch the other's vectors.
        a.close()
        a = Engine(tmp_path / "a", embedder=embedder, chroma_url=chroma_server)
        assert {u: b.chroma.all_ids(u, 0) for u in ("chunk", "document")} == before
    finally:
        a.close()
        b.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_server_opens_degraded(tmp_path: Path, embedder: Any) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with Engine(tmp_path / "engine", embedder=embedder, chroma_url=url,
                dense_exact_max=0) as eng:
        eng.add_documents(DOCS[:2])
        assert eng.retrieve("vitamin D", k=1, mode="sparse").hits[0].meta["doc_id"] == "d1"
        with pytest.raises(BackendUnavailable) as info:
            eng.retrieve("vitamin D", mode="dense")
    assert time.monotonic() - start < 30
    err = info.value
    assert err.code == -32010 and err.to_wire()["code"] == -32010
    assert url in err.message
    assert err.data.get("retryable") is True and err.data.get("retryAfterMs", 0) > 0


def test_open_on_unreachable_server_does_not_lose_the_engine_config(
        tmp_path: Path, embedder: Any) -> None:
    """config.json is written when an engine is created, even while its Chroma server is down:
    a later open without arguments chunks and scores with the creation's chunk_size."""
    path = tmp_path / "engine"
    url = f"http://127.0.0.1:{_closed_port()}"
    Engine(path, embedder=embedder, chroma_url=url, chunk_size=64).close()  # opens degraded
    with Engine(path, embedder=embedder) as eng:
        eng.add_documents(DOCS[:2])
    assert (path / "config.json").is_file(), "the engine was created without its config.json"
    with Engine(path, embedder=embedder) as eng:
        assert eng.config.chunk_size == 64


def _start_server(data: Path, port: int) -> subprocess.Popen[bytes]:
    chroma = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
    proc = subprocess.Popen([chroma, "run", "--path", str(data), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1):
                return proc
        except OSError:
            assert proc.poll() is None, "chroma run exited"
            assert time.monotonic() < deadline, "chroma run did not start in 60 s"
            time.sleep(0.2)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.chroma_server
def test_server_going_away_is_backend_unavailable_and_repaired_later(
        tmp_path: Path, embedder: Any) -> None:
    """A server that dies under an open engine: writes stay durable in SQLite, every failure
    is an RCPError (BackendUnavailable), and the next open against the server catches up."""
    port = _closed_port()
    url = f"http://127.0.0.1:{port}"
    path = tmp_path / "engine"
    server = _start_server(tmp_path / "server", port)
    try:
        eng = Engine(path, embedder=embedder, chroma_url=url, dense_exact_max=0)
        try:
            eng.add_documents(DOCS[:4])
            _stop(server)
            writes = {"add": lambda: eng.add_documents(DOCS[4:6]),
                      "delete": lambda: eng.delete_documents(["d1"])}
            for name, write in writes.items():
                try:
                    write()
                except RCPError as exc:
                    assert isinstance(exc, BackendUnavailable), (name, exc)
                except Exception as exc:  # noqa: BLE001 - the point of the test
                    pytest.fail(f"{name} while the Chroma server is down raised "
                                f"{type(exc).__module__}.{type(exc).__name__}: {exc} "
                                "(expected success or BackendUnavailable)")
            # SQLite is the source of truth: both writes are committed.
            assert eng.store.document_ids() == ["d2", "d3", "d4", "d5", "d6"]
            with pytest.raises(BackendUnavailable):
                eng.retrieve("mitochondria", mode="dense")
            hits = eng.retrieve("mitochondria adenosine triphosphate", k=1, mode="sparse").hits
            assert hits[0].meta["doc_id"] == "d6"
        finally:
            eng.close()
        server = _start_server(tmp_path / "server", port)
        with Engine(path, embedder=embedder, chroma_url=url, dense_exact_max=0) as eng:
            assert eng.store.outbox() == []
            for unit, rowids in _sync_state(eng).items():
                assert eng.chroma.all_ids(unit, 0) == rowids
            hits = eng.retrieve(DOCS[5]["text"], k=1, mode="dense", unit="document").hits
            assert hits[0].meta["doc_id"] == "d6"
    finally:
        _stop(server)
