"""Several processes on one engine directory: an open engine sees and survives other writers.

Real subprocesses: ``rcp-agentic index`` writing into a directory an Engine in this
process keeps open, two ``rcp-agentic index`` runs at once, and a process holding
SQLite's write lock.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import DOCS, REPO, child_env, cli_command

from rcp_agentic import BackendUnavailable, Engine
from rcp_agentic.store.reads import UnitArrays
from rcp_agentic.store.memindex import UnitIndex

WORDS = ("quokka", "zanzibar", "marimba", "obsidian", "tamarind", "wolverine", "gazpacho",
         "trebuchet", "nautilus", "pangolin")


def _write_corpus(folder: Path, tag: str, n: int) -> dict[str, str]:
    """``n`` small files, each with a word of its own (``<tag>marker<i>``): id → that word."""
    folder.mkdir(parents=True)
    out: dict[str, str] = {}
    for i in range(n):
        own = f"{tag}marker{i}"
        a, b = WORDS[i % len(WORDS)], WORDS[(i * 3 + 1) % len(WORDS)]
        (folder / f"f{i:03d}.txt").write_text(
            f"The {a} and the {b} meet near {own}. A {tag} record numbered {i} describes "
            f"the {a} in some detail.", "utf-8")
        out[f"{folder.name}/f{i:03d}.txt"] = own
    return out


def test_open_engine_sees_and_survives_a_cli_index_run(tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder)
    eng.add_documents(DOCS)
    # Build and cache this process's indexes and vocabulary before the other process writes.
    for mode in ("sparse", "dense", "hybrid"):
        assert eng.retrieve("vitamin D multiple sclerosis", k=3, mode=mode).hits
    assert eng.retrieve("quokka", k=3, mode="sparse").hits == []
    _write_corpus(tmp_path / "corpus", "alpha", 3)
    res = subprocess.run(cli_command("index", str(tmp_path / "corpus"), "--engine", str(tmp_path / "e"),
                              "--quiet"), capture_output=True, text=True, env=child_env(),
                         cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr
    # The very next request sees the other process's commit, in every mode and unit.
    assert eng.index_version == "v2"
    for mode in ("sparse", "dense", "hybrid"):
        got = eng.retrieve("quokka zanzibar alphamarker0", k=3, mode=mode)
        assert got.index_version == "v2"
        assert "doc:corpus/f000.txt#c0" in {h.id for h in got.hits}, mode
    docs = eng.retrieve("alphamarker1", k=1, mode="sparse", unit="document").hits
    assert [h.id for h in docs] == ["doc:corpus/f001.txt"]
    assert eng.retrieve("vitamin D multiple sclerosis", k=3).hits[0].id == "doc:d1#c0"
    assert eng.retrieve("vitamin", k=3, index_version="v1").index_version == "v1"
    # And this process can write after it: its terms overlap the other process's new ones.
    eng.add_documents([{"id": "after", "text": "A quokka saw the alphamarker2 and a zygomorph."}])
    assert eng.index_version == "v3"
    hits = eng.retrieve("zygomorph quokka", k=5, mode="sparse").hits
    assert hits[0].id == "doc:after#c0" and "doc:corpus/f000.txt#c0" in {h.id for h in hits}
    eng.close()


def test_open_engine_sees_other_process_vectors_in_embedded_chroma(tmp_path: Path,
                                                                   embedder: Any) -> None:
    """chromadb keeps an embedded collection's HNSW in memory: an engine that stays open must
    reload it after another process's commit, or Chroma-backed dense recall misses new rows."""
    eng = Engine(tmp_path / "e", embedder=embedder, dense_exact_max=0)
    eng.add_documents(DOCS)
    for unit in ("chunk", "document"):  # load both HNSW indexes into this process
        assert eng.retrieve("vitamin D multiple sclerosis", k=3, mode="dense", unit=unit).hits
    _write_corpus(tmp_path / "corpus", "beta", 3)
    res = subprocess.run(cli_command("index", str(tmp_path / "corpus"), "--engine", str(tmp_path / "e"),
                              "--quiet"), capture_output=True, text=True, env=child_env(),
                         cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr
    got = eng.retrieve("The quokka and the zanzibar meet near betamarker0", k=3, mode="dense",
                       unit="document")
    assert got.index_version == "v2"
    assert got.hits[0].id == "doc:corpus/f000.txt"
    eng.close()


def test_two_writer_processes_at_once(tmp_path: Path, embedder: Any) -> None:
    engine_dir = tmp_path / "e"
    eng = Engine(engine_dir, embedder=embedder)
    eng.add_documents(DOCS)
    # 130 files each: three write transactions (64 + 64 + 2) per process, interleaved.
    expected = _write_corpus(tmp_path / "one", "one", 130)
    expected |= _write_corpus(tmp_path / "two", "two", 130)
    procs = [subprocess.Popen(cli_command("index", str(tmp_path / name), "--engine", str(engine_dir),
                                   "--quiet"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=child_env(), cwd=REPO)
             for name in ("one", "two")]
    outputs = [p.communicate(timeout=600) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
        assert "Indexed 130 documents" in out, out
    # Every document of both writers is there, whole, in this open engine and after reopening.
    assert eng.index_version == "v7"
    assert set(eng.store.document_ids()) == {d["id"] for d in DOCS} | set(expected)
    for doc_id, word in expected.items():
        hits = eng.retrieve(word, k=1, mode="sparse", unit="document").hits
        assert [h.id for h in hits] == [f"doc:{doc_id}"], word
    eng.close()
    with Engine(engine_dir, embedder=embedder) as again:
        assert again.stats()["documents"] == len(DOCS) + 260
        hits = again.retrieve("twomarker129", k=1, mode="hybrid", unit="document").hits
        assert hits[0].id == "doc:two/f129.txt"


LOCK_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()  # hold the write lock until the parent closes our stdin
db.execute("ROLLBACK")
"""


def _hold_write_lock(db_path: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(db_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


def _release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.close()
    assert holder.wait(timeout=30) == 0


def test_a_write_waits_for_another_process_without_blocking_reads(tmp_path: Path,
                                                                 embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder)
    eng.add_documents(DOCS)
    holder = _hold_write_lock(tmp_path / "e" / "engine.db")
    outcome: dict[str, Any] = {}

    def write() -> None:
        try:
            outcome["result"] = eng.add_documents([{"id": "late", "text": "A patient writer."}])
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            outcome["error"] = exc

    writer = threading.Thread(target=write)
    try:
        writer.start()
        time.sleep(2.0)  # ample to embed one line and reach BEGIN IMMEDIATE
        # Reads keep working, promptly, while the writer waits for the other process's lock.
        for mode in ("sparse", "dense", "hybrid"):
            started = time.monotonic()
            assert eng.retrieve("vitamin D", k=1, mode=mode).hits[0].id == "doc:d1#c0"
            assert time.monotonic() - started < 2.0, mode
        assert writer.is_alive(), outcome  # still waiting, not failed
        assert eng.index_version == "v1"
    finally:
        _release(holder)
    writer.join(timeout=120)
    assert "error" not in outcome, outcome.get("error")
    assert eng.index_version == "v2" and "late" in eng.store.document_ids()
    eng.close()


def test_a_write_that_cannot_get_the_lock_is_backend_unavailable(tmp_path: Path,
                                                                embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder)
    eng.add_documents(DOCS)
    eng.store.busy_timeout = 0.5
    holder = _hold_write_lock(tmp_path / "e" / "engine.db")
    try:
        started = time.monotonic()
        with pytest.raises(BackendUnavailable) as err:
            eng.add_documents([{"id": "late", "text": "An impatient writer."}])
        assert time.monotonic() - started >= 0.5
        assert err.value.code == -32010 and err.value.data["retryable"] is True
        assert err.value.data["retryAfterMs"] > 0 and "busy" in err.value.message
        with pytest.raises(BackendUnavailable):
            eng.delete_documents(["d1"])
        assert eng.retrieve("vitamin D", k=1).hits[0].id == "doc:d1#c0"
    finally:
        _release(holder)
    assert eng.index_version == "v1" and "late" not in eng.store.document_ids()
    eng.add_documents([{"id": "late", "text": "An impatient writer, once more."}])
    assert eng.index_version == "v2"
    eng.close()


def test_bm25_index_tolerates_term_ids_beyond_the_vocabulary_it_was_given() -> None:
    # Term 7 was added by another process after this one loaded a vocabulary of 3 terms.
    arrays = UnitArrays(
        rowids=np.array([10, 11], dtype=np.int64), vectors=None,
        term_ids=np.array([0, 7, 1], dtype=np.uint32),
        term_tfs=np.array([1.0, 2.0, 1.0], dtype=np.float32),
        offsets=np.array([0, 2, 3], dtype=np.int64),
        lengths=np.array([3.0, 1.0], dtype=np.float32), uids=["a", "b"], doc_ids=["a", "b"],
        page_start=np.full(2, -1, dtype=np.int64), page_end=np.full(2, -1, dtype=np.int64),
        tokens=np.array([3, 1], dtype=np.int64))
    index = UnitIndex("chunk", arrays, 3, k1=1.2, b=0.75)
    assert index.sparse([7], 5).positions.tolist() == [0]
    assert index.sparse_scores([7, 99], np.array([0, 1])).tolist()[1] == 0.0
    assert index.sparse_ceiling([7]) > 0 and index.sparse([99], 5).positions.tolist() == []
