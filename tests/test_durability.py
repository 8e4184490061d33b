"""Durability: a process killed mid-ingest leaves every document whole; Chroma is repaired on open.

The kill tests run ``tests/ingest_worker.py`` in a subprocess that adds documents
in many small ``add_documents`` calls (some of them upserts) and reports each
acknowledged call on stdout; the worker is SIGKILLed at a seeded moment (from
outside, or from a hook inside the SQLite transaction / the Chroma outbox
replay) and the engine is reopened in-process and checked against what was
acknowledged. The other tests check upsert and delete at the engine level.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ChromaQuerySpy, DOCS

from rcp_agentic import Engine, NotFound
from rcp_agentic.corpus.chunker import chunk_text

WORKER_PATH = Path(__file__).with_name("ingest_worker.py")
_spec = importlib.util.spec_from_file_location("rcp_agentic_test_ingest_worker", WORKER_PATH)
assert _spec is not None and _spec.loader is not None
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)

DIM = 384  # all-MiniLM-L6-v2


# --- helpers -----------------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    """The parent's environment without engine overrides, so the worker's config is its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCP_AGENTIC_")}
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


def run_worker(engine_dir: Path, seed: int, log: Path, *, kill_after_calls: int | None = None,
               kill_delay: float = 0.0, die_at: str | None = None,
               extra: Sequence[str] = (), timeout: float = 120.0) -> list[tuple[str, int]]:
    """Run the worker until it dies; return the (id, version) pairs it acknowledged, in order.

    ``kill_after_calls``: SIGKILL it ``kill_delay`` seconds after that many calls were
    acknowledged. ``die_at``: ``CALL:POINT``, the worker kills itself (see ingest_worker).
    ``extra``: more worker arguments (``--docs FILE``).
    """
    cmd = [sys.executable, str(WORKER_PATH), str(engine_dir), str(seed)]
    if die_at:
        cmd += ["--die-at", die_at]
    cmd += list(extra)
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                env=_child_env(), cwd=str(log.parent))
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        out: list[str] = []
        deadline = time.monotonic() + timeout
        killed = False
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    raise AssertionError(f"worker hung; output so far: {out[-5:]}") from None
                if line is None:
                    break
                out.append(line)
                calls = sum(1 for x in out if x.startswith("committed ")) // worker.DOCS_PER_CALL
                if (kill_after_calls is not None and not killed
                        and calls >= kill_after_calls):
                    time.sleep(kill_delay)
                    proc.send_signal(signal.SIGKILL)
                    killed = True
        finally:
            if proc.poll() is None and not killed:
                proc.kill()
            proc.wait(timeout=30)
            reader.join(timeout=30)
    stderr = log.read_text("utf-8", errors="replace")[-3000:]
    assert proc.returncode == -signal.SIGKILL, (
        f"worker was not killed (rc={proc.returncode}); stderr:\n{stderr}")
    assert out and out[0] == "ready", f"worker did not start; stderr:\n{stderr}"
    assert "done" not in out, "the worker finished before it was killed"
    committed = []
    for line in out[1:]:
        word, doc_id, version = line.split()
        assert word == "committed", line
        committed.append((doc_id, int(version)))
    return committed


def document_rows(eng: Engine) -> dict[str, str]:
    return dict(eng.store.query("SELECT id, text FROM documents WHERE v_to IS NULL"))


def assert_documents_whole(eng: Engine) -> dict[str, str]:
    """Every stored document has exactly the units its stored text produces; no orphan units."""
    cfg = eng.config
    docs = document_rows(eng)
    orphans = eng.store.query(
        "SELECT COUNT(*) FROM units WHERE v_to IS NULL AND doc_id NOT IN"
        " (SELECT id FROM documents WHERE v_to IS NULL)")[0][0]
    assert orphans == 0, "units of a document that does not exist"
    for doc_id, text in docs.items():
        rows = eng.store.query(
            'SELECT uid, unit, level, idx, text, start, "end", length(vec) FROM units'
            " WHERE doc_id = ? AND v_to IS NULL ORDER BY unit, idx", (doc_id,))
        assert {r[1] for r in rows} <= {"chunk", "document"}, rows
        expected = chunk_text(text, cfg.chunk_size, cfg.chunk_overlap)
        chunks = [r for r in rows if r[1] == "chunk"]
        assert len(chunks) == len(expected), f"{doc_id}: chunk count"
        assert [r[4] for r in chunks] == [c.text for c in expected], f"{doc_id}: chunk texts"
        assert [(r[5], r[6]) for r in chunks] == [(c.start, c.end) for c in expected]
        assert [r[0] for r in chunks] == [f"doc:{doc_id}#c{i}" for i in range(len(expected))]
        whole = [r for r in rows if r[1] == "document"]
        assert len(whole) == 1, f"{doc_id}: {len(whole)} document units"
        assert whole[0][0] == f"doc:{doc_id}" and whole[0][4] == text
        assert all(r[2] == 0 and r[7] == DIM * 4 for r in rows), f"{doc_id}: level/vector size"
    return docs


def assert_chroma_in_sync(eng: Engine) -> None:
    """Chroma holds exactly SQLite's rowids for every unit kind, and nothing is queued."""
    kinds = {(u, lv) for u, lv, _n in eng.store.unit_kinds()} | {("chunk", 0), ("document", 0)}
    for unit, level in sorted(kinds):
        truth = set(eng.store.rowids(unit, level))
        have = eng.chroma.all_ids(unit, level)
        assert have == truth, (f"Chroma {unit}/l{level}: {len(have - truth)} extra, "
                               f"{len(truth - have)} missing")
    assert eng.store.outbox() == []


def assert_dense_finds(eng: Engine, docs: dict[str, str], ids: list[str]) -> None:
    for doc_id in ids:
        hits = eng.retrieve(docs[doc_id], k=3, mode="dense", unit="document").hits
        assert hits and hits[0].meta["doc_id"] == doc_id, (
            doc_id, [(h.meta["doc_id"], h.score) for h in hits])




# --- kill mid-ingest ---------------------------------------------------------------------


def _first_upsert_call(plan: list[list[tuple[str, int]]], at_least: int) -> int:
    return next(i for i, call in enumerate(plan)
                if i >= at_least and any(v > 1 for _d, v in call))


SCENARIOS = {
    # name: (how, seed). External kills land at a seeded call count plus a seeded delay;
    # the others are the worker killing itself at a seeded upsert call.
    "external-kill-seed11": ("external", 11),
    "external-kill-seed29": ("external", 29),
    "kill-inside-sqlite-transaction": ("in-sqlite", 5),
    "kill-during-chroma-outbox": ("in-chroma", 7),
}


@pytest.fixture(scope="module")
def killed_workers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run every scenario's worker at once (embedding is the slow part): name → outcome."""
    base = tmp_path_factory.mktemp("killed")
    outcomes: dict[str, Any] = {}

    def run(name: str) -> None:
        how, seed = SCENARIOS[name]
        rng = random.Random(seed)
        work = base / name
        work.mkdir()
        try:
            if how == "external":
                die_call = None
                committed = run_worker(work / "engine", seed, work / "worker.log",
                                       kill_after_calls=rng.randint(2, 5),
                                       kill_delay=rng.uniform(0.0, 0.6))
            else:
                die_call = _first_upsert_call(worker.plan(seed), at_least=rng.randint(2, 4))
                committed = run_worker(work / "engine", seed, work / "worker.log",
                                       die_at=f"{die_call}:{how}")
            outcomes[name] = (work / "engine", committed, die_call)
        except BaseException as exc:  # noqa: BLE001 - reported by that scenario's test
            outcomes[name] = exc

    threads = [threading.Thread(target=run, args=(name,)) for name in SCENARIOS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_kill_mid_ingest_leaves_acknowledged_documents_whole(
        killed_workers: dict[str, Any], embedder: Any, scenario: str) -> None:
    how, seed = SCENARIOS[scenario]
    outcome = killed_workers[scenario]
    if isinstance(outcome, BaseException):
        raise outcome
    engine_dir, committed, die_call = outcome
    plan = worker.plan(seed)
    # Calls are acknowledged whole and in plan order.
    assert len(committed) % worker.DOCS_PER_CALL == 0
    n_calls = len(committed) // worker.DOCS_PER_CALL
    assert n_calls >= 1
    assert committed == [pair for call in plan[:n_calls] for pair in call]
    if die_call is not None:
        assert n_calls == die_call
        assert any(v > 1 for _d, v in plan[n_calls]), "the killed call should be an upsert"
    acked: dict[str, int] = {}
    for doc_id, version in committed:
        acked[doc_id] = version
    inflight = plan[n_calls]

    eng = Engine(engine_dir, embedder=embedder)
    try:
        assert eng.config.chunk_size == worker.ENGINE_OPTIONS["chunk_size"]
        docs = assert_documents_whole(eng)
        # The in-flight call is one transaction: all of it landed, or none of it.
        new_texts = {d: worker.doc_text(d, v) for d, v in inflight}
        landed = [docs.get(d) == t for d, t in new_texts.items()]
        assert all(landed) or not any(landed), f"half of the in-flight call landed: {landed}"
        if how == "in-sqlite":
            assert not any(landed), "a transaction killed before COMMIT is visible"
        if how == "in-chroma":
            assert all(landed), "the SQLite commit before the Chroma replay was lost"
        expected = dict(acked)
        if all(landed):
            expected.update(dict(inflight))
        assert set(docs) == set(expected), "documents neither acknowledged nor in flight"
        for doc_id, version in expected.items():
            assert docs[doc_id] == worker.doc_text(doc_id, version), (
                f"{doc_id}: stored text is not version {version}")
        assert_chroma_in_sync(eng)
        # Exact dense path: the last acknowledged documents are found by their own text.
        probe = list(dict.fromkeys(d for d, _v in reversed(committed)))[:4]
        if all(landed):
            probe += [d for d, _v in inflight]
        assert_dense_finds(eng, docs, probe)
    finally:
        eng.close()
    # The same through Chroma (HNSW), which reopen has repaired.
    eng = Engine(engine_dir, embedder=embedder, dense_exact_max=0)
    try:
        spy = ChromaQuerySpy(eng)
        assert_chroma_in_sync(eng)
        assert_dense_finds(eng, docs, probe)
        assert spy.calls == len(probe)
    finally:
        eng.close()


def test_worker_plan_has_upserts_and_several_chunks() -> None:
    """The plan the kill tests rely on really re-adds ids and produces multi-chunk documents."""
    plan = worker.plan(11)
    assert len(plan) == worker.CALLS
    assert all(len({d for d, _v in call}) == worker.DOCS_PER_CALL for call in plan)
    assert sum(1 for call in plan[:6] for _d, v in call if v > 1) >= 2
    opts = worker.ENGINE_OPTIONS
    sizes = [len(chunk_text(worker.doc_text(d, v), opts["chunk_size"], opts["chunk_overlap"]))
             for call in plan[:5] for d, v in call]
    assert min(sizes) >= 3


# --- Chroma repaired on open -------------------------------------------------------------


@pytest.fixture()
def docs_engine_dir(tmp_path: Path, embedder: Any) -> Path:
    path = tmp_path / "engine"
    with Engine(path, embedder=embedder) as eng:
        eng.add_documents(DOCS)
        assert_chroma_in_sync(eng)
    return path


def _tamper(path: Path, embedder: Any, *, drop: dict[str, int], stray: dict[str, int]) -> None:
    """Behind the engine's back: delete some of Chroma's vectors and/or add unknown ids."""
    with Engine(path, embedder=embedder) as eng:
        rng = np.random.default_rng(0)
        for unit, n in drop.items():
            rows = eng.store.rowids(unit, 0)[:n]
            eng.chroma.delete(unit, 0, rows)
            assert eng.chroma.all_ids(unit, 0) == set(eng.store.rowids(unit, 0)) - set(rows)
        for unit, n in stray.items():
            ids = [10_000 + i for i in range(n)]
            vecs = rng.standard_normal((n, DIM)).astype(np.float32)
            eng.chroma.add(unit, 0, ids, vecs / np.linalg.norm(vecs, axis=1, keepdims=True))
            assert set(ids) <= eng.chroma.all_ids(unit, 0)


@pytest.mark.parametrize(("drop", "stray"), [
    pytest.param({"chunk": 3, "document": 2}, {}, id="missing-vectors"),
    pytest.param({}, {"chunk": 4, "document": 1}, id="stray-ids"),
    pytest.param({"chunk": 2}, {"chunk": 2}, id="missing-and-stray-same-count"),
])
def test_reopen_repairs_chroma(docs_engine_dir: Path, embedder: Any, drop: dict[str, int],
                               stray: dict[str, int]) -> None:
    _tamper(docs_engine_dir, embedder, drop=drop, stray=stray)
    with Engine(docs_engine_dir, embedder=embedder, dense_exact_max=0) as eng:
        assert_chroma_in_sync(eng)
        docs = document_rows(eng)
        assert_dense_finds(eng, docs, [d["id"] for d in DOCS[:3]])
        # A stray id never surfaces as a hit.
        hits = eng.retrieve("photosynthesis", k=20, mode="dense", unit="chunk").hits
        assert {h.meta["doc_id"] for h in hits} <= {d["id"] for d in DOCS}


# --- upsert and delete -------------------------------------------------------------------

OLD_TEXT = ("Xylotomous beetles bore tunnels through seasoned oak. Their larvae feed for years "
            "inside antique furniture. Carpenters fill the xylotomous galleries with resin. "
            "Museums freeze infested chairs to kill every xylotomous larva. The damage shows "
            "as tiny round exit holes in the varnish. Old barns suffer the worst infestations.")
NEW_TEXT = ("Quetzalcoatl was a feathered serpent deity of Mesoamerica. Temples to Quetzalcoatl "
            "stood in Teotihuacan.")


@pytest.fixture(params=[None, 0], ids=["exact-dense", "chroma-dense"])
def small_engine(request: pytest.FixtureRequest, tmp_path: Path, embedder: Any) -> Any:
    """Small chunks so a short text has several; dense recall exact or through Chroma."""
    # snapshots_retained=1: a replaced version is garbage-collected at once, so nothing of
    # it may remain anywhere (retained snapshots are tested in test_snapshots.py).
    eng = Engine(tmp_path / "engine", embedder=embedder, chunk_size=32, chunk_overlap=8,
                 dense_exact_max=request.param, snapshots_retained=1)
    eng.add_documents(DOCS)
    yield eng
    eng.close()


def _units_of(eng: Engine, doc_id: str) -> dict[str, int]:
    return dict(eng.store.query("SELECT uid, rowid FROM units WHERE doc_id = ? AND v_to IS NULL",
                                (doc_id,)))


def _all_hits(eng: Engine, query: str, unit: str) -> list[Any]:
    hits = []
    for mode in ("dense", "sparse", "hybrid"):
        hits += eng.retrieve(query, k=50, mode=mode, unit=unit, candidate_k=200).hits
    return hits


def test_readd_replaces_every_unit(small_engine: Engine) -> None:
    eng = small_engine
    eng.add_documents([{"id": "u", "text": OLD_TEXT}])
    old = _units_of(eng, "u")
    old_chunks = {uid for uid in old if "#c" in uid}
    assert len(old_chunks) >= 4
    # Warm the scoring indexes, so a stale cache would show.
    assert any(h.meta["doc_id"] == "u" for h in _all_hits(eng, "xylotomous larva", "chunk"))
    version = eng.index_version

    result = eng.add_documents([{"id": "u", "text": NEW_TEXT}])
    assert result.ids == ["u"] and result.index_version != version
    new = _units_of(eng, "u")
    new_chunks = {uid for uid in new if "#c" in uid}
    expected = chunk_text(NEW_TEXT, 32, 8)
    assert new_chunks == {f"doc:u#c{i}" for i in range(len(expected))}
    assert len(new_chunks) < len(old_chunks)
    assert set(new.values()).isdisjoint(old.values()), "an old unit row survived the upsert"
    assert document_rows(eng)["u"] == NEW_TEXT
    assert_documents_whole(eng)
    assert eng.stats()["documents"] == len(DOCS) + 1

    # Chroma: the old rows are gone, the new ones are there.
    assert_chroma_in_sync(eng)
    for unit in ("chunk", "document"):
        assert eng.chroma.all_ids(unit, 0).isdisjoint(old.values())

    # Retrieval: nothing of the old version is left in any mode.
    gone = old_chunks - new_chunks
    for unit in ("chunk", "document"):
        for query in ("xylotomous larva", OLD_TEXT):
            for h in _all_hits(eng, query, unit):
                assert h.id not in gone
                if h.meta["doc_id"] == "u":
                    assert "ylotomous" not in (h.text or "") and h.text in NEW_TEXT
        assert eng.retrieve("xylotomous", k=10, mode="sparse", unit=unit).hits == []
        for mode in ("dense", "sparse", "hybrid"):
            top = eng.retrieve("Quetzalcoatl feathered serpent deity", k=3, mode=mode,
                               unit=unit).hits
            assert top[0].meta["doc_id"] == "u", (mode, unit)


def test_delete_documents_removes_every_unit(small_engine: Engine) -> None:
    eng = small_engine
    eng.add_documents([{"id": "u", "text": OLD_TEXT}])
    rows = _units_of(eng, "u")
    assert any(h.meta["doc_id"] == "u" for h in _all_hits(eng, "xylotomous larva", "chunk"))
    counts, version = eng.stats(), eng.index_version

    assert eng.delete_documents(["u"]) == 1
    assert "u" not in eng.store.document_ids()
    assert _units_of(eng, "u") == {}
    assert eng.index_version != version
    after = eng.stats()
    assert after["documents"] == counts["documents"] - 1
    assert after["chunk"] == counts["chunk"] - sum(1 for uid in rows if "#c" in uid)
    assert after["document"] == counts["document"] - 1
    assert_chroma_in_sync(eng)
    for unit in ("chunk", "document"):
        assert eng.chroma.all_ids(unit, 0).isdisjoint(rows.values())
        for query in ("xylotomous larva", OLD_TEXT):
            assert all(h.meta["doc_id"] != "u" for h in _all_hits(eng, query, unit))
    assert_documents_whole(eng)
    # The rest is intact and a deleted id can be added again.
    assert_dense_finds(eng, document_rows(eng), ["d1", "d8"])
    eng.add_documents([{"id": "u", "text": NEW_TEXT}])
    assert_chroma_in_sync(eng)


def test_delete_unknown_id_raises_not_found_and_deletes_nothing(small_engine: Engine) -> None:
    eng = small_engine
    ids, counts, version = eng.store.document_ids(), eng.stats(), eng.index_version
    chroma_before = {u: eng.chroma.all_ids(u, 0) for u in ("chunk", "document")}
    with pytest.raises(NotFound) as info:
        eng.delete_documents(["d1", "no-such-doc", "d2"])
    err = info.value
    assert err.code == -32015 and err.to_wire()["code"] == -32015
    assert err.data.get("ids") == ["no-such-doc"]
    assert err.field == "ids"
    assert "no-such-doc" in err.message
    assert eng.store.document_ids() == ids
    assert eng.stats() == counts
    assert eng.index_version == version
    assert {u: eng.chroma.all_ids(u, 0) for u in ("chunk", "document")} == chroma_before
    hits = eng.retrieve(DOCS[0]["text"], k=1, mode="dense", unit="document").hits
    assert hits[0].meta["doc_id"] == "d1"
    # missing_ok deletes what exists and ignores the rest.
    assert eng.delete_documents(["d1", "no-such-doc"], missing_ok=True) == 1
    assert "d1" not in eng.store.document_ids()
    assert_chroma_in_sync(eng)
