"""The `rcp-agentic` command as a user runs it: index a folder, query it, errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import REPO


def run(*args: str, env_dir: Path | None = None, extra_env: dict[str, str] | None = None,
        prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ) | (extra_env or {})
    if env_dir is not None:
        env["RCP_AGENTIC_ENGINE"] = str(env_dir)
    return subprocess.run([*(prefix or []), sys.executable, "-m", "rcp_agentic.cli", *args],
                          capture_output=True, text=True, env=env, timeout=300, cwd=REPO)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs")
    (folder / "zero.txt").write_text("")
    (folder / "blob.dat").write_bytes(b"\x00\x00")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 truncated")
    engine_dir = tmp_path_factory.mktemp("cli") / "engine"
    res = run("index", str(REPO / "examples" / "docs"), str(folder), "--quiet",
              env_dir=engine_dir)
    assert res.returncode == 0, res.stderr
    assert "Indexed 5 documents (6 chunks, 2 pages)" in res.stdout
    assert "Skipped 3 file(s):" in res.stdout
    assert "zero.txt: empty file" in res.stdout
    assert "blob.dat: unsupported extension .dat" in res.stdout
    assert "broken.pdf: unreadable PDF" in res.stdout
    return engine_dir


def test_query_table(indexed: Path) -> None:
    res = run("query", "How does reciprocal rank fusion combine rankings?", "--k", "3",
              env_dir=indexed)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:5] == ["#", "score", "conf", "id", "source"]
    assert "doc:docs/hybrid-search.md#c0" in lines[1]
    assert "hits from" in lines[-1] and "index version v1" in lines[-1]


def test_query_json_is_the_rcp_result(indexed: Path) -> None:
    res = run("query", "token budget", "--engine", str(indexed), "--unit", "page", "--mode",
              "sparse", "--k", "2", "--json")
    assert res.returncode == 0, res.stderr
    wire = json.loads(res.stdout)
    assert wire["hits"][0]["unit"] == "page" and wire["hits"][0]["citation"]["page"] in (1, 2)
    assert wire["indexVersion"] == "v1" and "latencyMs" in wire["usage"]


def test_query_with_filter(indexed: Path) -> None:
    res = run("query", "sessions", "--json", "--filter",
              '{"field": "file_type", "op": "in", "value": ["md", "txt"]}', env_dir=indexed)
    wire = json.loads(res.stdout)
    assert wire["hits"] and all(h["meta"]["file_type"] in ("md", "txt") for h in wire["hits"])


@pytest.mark.parametrize("args,message", [
    (["query", "x", "--filter", "{nope"], "--filter is not valid JSON"),
    (["query", "x", "--filter", '{"field": "colour", "op": "eq", "value": "red"}'],
     "not a declared filterable field"),
    (["query", "x", "--filter", '{"field": "source", "op": "regex", "value": "a"}'],
     "[RCP -32005]"),
])
def test_query_errors(indexed: Path, args: list[str], message: str) -> None:
    res = run(*args, env_dir=indexed)
    assert res.returncode == 2 and message in res.stderr and res.stdout == ""


def test_missing_engine_and_paths(tmp_path: Path) -> None:
    res = run("query", "x", "--engine", str(tmp_path / "none"))
    assert res.returncode == 2 and "no engine at" in res.stderr
    assert not (tmp_path / "none").exists()
    res = run("index", str(tmp_path / "nowhere"), "--engine", str(tmp_path / "e"))
    assert res.returncode == 2 and "no such file or folder" in res.stderr


def _skipped(stdout: str) -> dict[str, str]:
    """The `path: reason` lines under "Skipped N file(s):", keyed by file name."""
    lines = stdout.split("Skipped ", 1)[1].splitlines()[1:] if "Skipped " in stdout else []
    return {Path(line.strip().split(": ", 1)[0]).name: line.split(": ", 1)[1] for line in lines}


def test_index_skips_loops_unreadable_entries_and_outside_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "elsewhere.txt").write_text("A file outside the indexed folder.")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ok.txt").write_text("Reciprocal rank fusion combines rankings.")
    (folder / "self").symlink_to("self")
    (folder / "out.txt").symlink_to(outside / "elsewhere.txt")
    (folder / "init-cwd").symlink_to("/proc/1/cwd")
    os.mkfifo(folder / "pipe.txt")
    (folder / "big.txt").write_text("long " * 100)
    (folder / os.fsdecode(b"caf\xe9.txt")).write_text("A file name that is not UTF-8.")
    engine_dir = tmp_path / "engine"
    env = {"RCP_AGENTIC_MAX_DOCUMENT_CHARS": "300"}

    res = run("index", str(folder), "--quiet", "--engine", str(engine_dir), extra_env=env)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "Indexed 2 documents" in res.stdout
    skipped = _skipped(res.stdout)
    assert skipped.pop("self") == "symlink loop"
    assert skipped.pop("out.txt").endswith(
        "leaves the indexed folder (--follow-symlinks follows it)")
    assert skipped.pop("pipe.txt") == "not a regular file"
    assert skipped.pop("big.txt") == (
        "text of 500 characters is longer than max_document_chars (300)")
    # /proc/1/cwd is unreadable even for root in some sandboxes, readable in others.
    init_cwd = skipped.pop("init-cwd")
    assert init_cwd == "unreadable entry: Permission denied" or init_cwd.endswith(
        "(--follow-symlinks follows it)")
    assert skipped == {}
    (folder / "init-cwd").unlink()   # where it is readable, following it would walk all of /

    # Named on the command line, a symlink is the user's choice: followed; a looping one
    # is skipped, not "no such file".
    res = run("index", str(folder / "self"), str(folder / "out.txt"), "--quiet",
              "--engine", str(tmp_path / "e2"))
    assert res.returncode == 0 and "Indexed 1 documents" in res.stdout, res
    assert _skipped(res.stdout) == {"self": "symlink loop"}

    res = run("index", str(folder), "--follow-symlinks", "--quiet", "--engine", str(engine_dir),
              extra_env=env)
    assert res.returncode == 0, res.stderr
    assert set(_skipped(res.stdout)) == {"self", "pipe.txt", "big.txt"}
    wire = json.loads(run("query", "file outside the indexed folder", "--json", "--filter",
                          '{"field": "doc_id", "op": "eq", "value": "docs/out.txt"}',
                          "--engine", str(engine_dir)).stdout)
    assert wire["hits"][0]["text"] == "A file outside the indexed folder."


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"),
                    reason="as root, needs setpriv to drop the capability that reads mode-000 "
                           "files")
def test_index_skips_unreadable_files_and_folders(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    (folder / "locked").mkdir(parents=True)
    (folder / "locked" / "inner.txt").write_text("never read")
    (folder / "ok.txt").write_text("Readable text.")
    (folder / "secret.txt").write_text("mode 000")
    (folder / "secret.txt").chmod(0)
    (folder / "locked").chmod(0)
    # Root reads mode-000 files anyway; without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH
    # it is refused like any other user.
    prefix = (["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
              if os.geteuid() == 0 else [])
    try:
        res = run("index", str(folder), "--quiet", "--engine", str(tmp_path / "engine"),
                  prefix=prefix)
    finally:
        (folder / "locked").chmod(0o755)
    assert res.returncode == 0, res.stderr
    assert "Indexed 1 documents" in res.stdout
    assert _skipped(res.stdout) == {"locked": "unreadable folder: Permission denied",
                                    "secret.txt": "unreadable file: Permission denied"}


# --- the RAPTOR tree (issue 10): index --tree, tree show|rebuild, query --unit tree-node -------

TREE_DOCS = {
    "vitamin-d.md": "# Vitamin D\nVitamin D deficiency is linked to a higher risk of multiple "
                    "sclerosis. Sunlight exposure raises serum vitamin D levels.",
    "bones.md": "# Bones\nDietary calcium and vitamin D support bone density in older adults. "
                "Fractures were less frequent with supplements.",
    "rickets.md": "# Rickets\nRickets in children results from severe vitamin D deficiency. "
                  "Fortified milk nearly eliminated it.",
    "bm25.md": "# BM25\nBM25 ranks documents by term frequency and inverse document frequency. "
               "Length normalisation tempers long texts.",
    "dense.md": "# Dense retrieval\nDense retrievers embed queries and passages with a "
                "bi-encoder and rank passages by cosine similarity.",
    "fusion.md": "# Fusion\nReciprocal rank fusion combines the BM25 and dense rankings using "
                 "only rank positions.",
    "andromeda.md": "# Andromeda\nThe Andromeda galaxy is the nearest large spiral galaxy to "
                    "the Milky Way. It will collide with our galaxy.",
    "black-holes.md": "# Black holes\nBlack holes form when massive stars collapse. Their "
                      "gravity traps even light.",
    "exoplanets.md": "# Exoplanets\nExoplanets are detected by the dimming of their host star "
                     "during a transit.",
}


@pytest.fixture(scope="module")
def tree_engine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tree-docs")
    for name, text in TREE_DOCS.items():
        (folder / name).write_text(text)
    engine_dir = tmp_path_factory.mktemp("tree") / "engine"
    res = run("index", str(folder), "--tree", "--quiet", "--engine", str(engine_dir))
    assert res.returncode == 0, res.stderr
    assert "Indexed 9 documents (9 chunks, 0 pages)" in res.stdout
    assert "Tree (tree-node): full build, " in res.stdout and "no tree yet)" in res.stdout
    assert json.loads((engine_dir / "config.json").read_text())["build_tree"] is True
    return engine_dir


def test_query_unit_choices_come_from_the_registry() -> None:
    from rcp_agentic import units
    from rcp_agentic.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a.choices, dict))
    query = sub.choices["query"]
    (unit,) = [a for a in query._actions if "--unit" in a.option_strings]
    assert list(unit.choices) == list(units.known()) and "tree-node" in unit.choices


def test_tree_show_prints_the_outline(tree_engine: Path) -> None:
    from rcp_agentic import Engine
    from rcp_agentic.raptor.outline import outline

    res = run("tree", "show", "--engine", str(tree_engine))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("RAPTOR tree over 9 chunks from 9 documents")
    assert "reflects index version v2 (current)" in lines[0]
    assert lines[1].startswith("level 1: ") and "cover 9/9 chunks (100%)" in lines[1]
    with Engine(tree_engine) as engine:
        assert res.stdout.rstrip("\n") == outline(engine).render()
        nodes = engine.store.live_derived("tree-node")
    assert f"level 1: {sum(n['level'] == 1 for n in nodes)} nodes" in lines[1]
    widest = max((n for n in nodes if n["level"] == 1), key=lambda n: (len(n["covers"]),))
    assert f"({len(widest['covers'])} chunks, " in lines[2]


def test_query_tree_nodes(tree_engine: Path) -> None:
    res = run("query", "vitamin D deficiency and bones", "--unit", "tree-node", "--level", "1",
              "--k", "2", "--json", "--engine", str(tree_engine))
    assert res.returncode == 0, res.stderr
    hits = json.loads(res.stdout)["hits"]
    assert hits and all(h["unit"] == "tree-node" and h["level"] == 1 for h in hits)
    assert all(h["provenance"]["leaves"] and h["meta"]["doc_ids"] for h in hits)

    res = run("query", "vitamin D deficiency and bones", "--unit", "tree-node", "--level", "1",
              "--k", "2", "--engine", str(tree_engine))
    assert res.returncode == 0, res.stderr
    header, *rows = res.stdout.splitlines()
    assert header.split()[:6] == ["#", "score", "conf", "unit", "id", "source"]
    for hit, row in zip(hits, rows):
        assert f"tree-node L1  {hit['id']}" in row
        assert f"{len(hit['provenance']['leaves'])} chunks, {len(hit['meta']['doc_ids'])} docs" \
            in row

    res = run("query", "how are rankings fused?", "--unit", "tree-node", "--k", "6",
              "--tree-search", "traversal", "--json", "--engine", str(tree_engine))
    assert res.returncode == 0, res.stderr
    hits = json.loads(res.stdout)["hits"]
    assert hits and {h["unit"] for h in hits} <= {"chunk", "tree-node"}


def test_tree_errors(indexed: Path, tree_engine: Path) -> None:
    res = run("tree", "show", env_dir=indexed)
    assert res.returncode == 2 and res.stdout == ""
    assert "builds no RAPTOR tree" in res.stderr and "--tree" in res.stderr
    assert "[RCP -32003]" in res.stderr
    res = run("query", "x", "--unit", "tree-node", env_dir=indexed)
    assert res.returncode == 2 and "not offered" in res.stderr
    res = run("query", "x", "--unit", "tree-node", "--level", "1", "--tree-search", "traversal",
              "--engine", str(tree_engine))
    assert res.returncode == 2 and "[RCP -32005]" in res.stderr


def test_query_level_must_not_be_negative(capsys: pytest.CaptureFixture[str]) -> None:
    from rcp_agentic.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["query", "x", "--unit", "tree-node", "--level", "-1"])
    assert exit_.value.code == 2 and "must be >= 0, not -1" in capsys.readouterr().err


def test_tree_stays_on_and_rebuilds(tree_engine: Path, tmp_path: Path) -> None:
    engine_dir = tmp_path / "engine"
    shutil.copytree(tree_engine, engine_dir)
    extra = tmp_path / "more"
    extra.mkdir()
    (extra / "neutron.md").write_text("# Neutron stars\nNeutron stars are dense remnants of "
                                      "supernova explosions.")
    # No --tree this time: the engine's config keeps the tree up to date.
    res = run("index", str(extra), "--quiet", "--engine", str(engine_dir))
    assert res.returncode == 0, res.stderr
    assert "Tree (tree-node): incremental update, " in res.stdout, res.stdout
    res = run("tree", "show", "--engine", str(engine_dir))
    assert "over 10 chunks from 10 documents" in res.stdout and "cover 10/10 chunks" in res.stdout
    res = run("tree", "rebuild", "--engine", str(engine_dir))
    assert res.returncode == 0, res.stderr
    assert "Tree (tree-node): full build, " in res.stdout and "requested)" in res.stdout
    assert res.stdout.splitlines()[-1] == "Index version v5"


# --- hostile documents and folders: inert output, bounded reports, Ctrl-C ---------------------

PAYLOAD = "\x1b[2J\x1b]52;c;ZXZpbA==\x07\u202eReciprocal\n\nrank fusion\x9b31m merges rankings"
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")


def test_document_text_ids_and_names_are_printed_inert(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "\u202eevil.txt").write_text(PAYLOAD)
    (folder / "ids.jsonl").write_text(json.dumps({"id": "id\u202e\x9b", "text": PAYLOAD}))
    (folder / "\u202eskip.xyz").write_text("unsupported")
    engine = tmp_path / "engine"
    res = run("index", str(folder), "--quiet", "--engine", str(engine))
    assert res.returncode == 0, res.stderr
    assert "\\u202eskip.xyz: unsupported extension .xyz" in res.stdout
    assert not any(c in res.stdout for c in RAW_CONTROLS)

    res = run("query", "reciprocal rank fusion", "--engine", str(engine), "--k", "2")
    assert res.returncode == 0, res.stderr
    assert not any(c in res.stdout + res.stderr for c in RAW_CONTROLS)
    table = "\n".join(res.stdout.splitlines()[1:3])
    assert "\\x1b[2J\\x1b]52;c;ZXZpbA==\\x07\\u202eReciprocal" in table
    assert "id\\u202e\\x9b" in table and "\\u202eevil.txt" in table
    # Line breaks are the snippet's spaces, as the README shows, not escapes.
    assert "\\u202eReciprocal rank" in table and "\\x0a" not in table

    res = run("query", "reciprocal rank fusion", "--engine", str(engine), "--k", "2", "--json")
    assert not any(c in res.stdout for c in RAW_CONTROLS)
    hits = json.loads(res.stdout)["hits"]
    assert {h["text"] for h in hits} == {PAYLOAD}
    assert {h["chunk"]["docId"] for h in hits} == {"id\u202e\x9b", "docs/\u202eevil.txt"}


def test_a_flood_of_bad_jsonl_lines_prints_a_few_lines(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "bad.jsonl").write_text(json.dumps({"text": "the one good record"}) + "\n"
                                      + "{not json\n" * 100_000)
    # Records the loader reads but the engine refuses (ids over 512 characters) are bounded too.
    (folder / "ids.jsonl").write_text("".join(json.dumps({"id": "x" * 600 + str(n),
                                                          "text": "refused"}) + "\n"
                                              for n in range(8)))
    res = run("index", str(folder), "--quiet", "--engine", str(tmp_path / "engine"))
    assert res.returncode == 0, res.stderr
    assert "Indexed 1 documents" in res.stdout
    lines = res.stdout.splitlines()
    assert len(lines) < 20 and len(res.stdout) < 4000, res.stdout[:4000]
    assert f"  {folder / 'bad.jsonl'}: 99,995 more bad lines skipped (lines 7, 8, 9 …)" in lines
    assert f"  {folder / 'ids.jsonl'}: 3 more bad lines skipped (lines 6, 7, 8)" in lines
    assert len(res.stderr) < 2000


def _interrupted(args: list[str], ready: Callable[[str], bool]) -> tuple[int, str]:
    """Run the CLI until ``ready(stderr so far)``, send it SIGINT; its exit status and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "rcp_agentic.cli", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err: list[bytes] = []
    reader = threading.Thread(target=lambda: err.extend(iter(
        lambda: proc.stderr.read1(65536), b"")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    deadline = time.monotonic() + 240
    try:
        while not ready(b"".join(err).decode(errors="replace")):
            assert proc.poll() is None, b"".join(err).decode(errors="replace")
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=240)
    finally:
        proc.kill()
    reader.join(10)
    return status, b"".join(err).decode(errors="replace")


def test_ctrl_c_during_index_exits_130_without_a_traceback(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for n in range(400):
        (folder / f"d{n}.txt").write_text(f"document {n} on topic {n % 7}. " * 40)
    engine = tmp_path / "engine"
    started = time.monotonic()
    # Once the engine exists, the run is loading the model or indexing.
    status, err = _interrupted(["index", str(folder), "--quiet", "--engine", str(engine)],
                               lambda _err: (engine / "engine.db").exists()
                               and time.monotonic() - started > 3)
    assert (status, err) == (130, "interrupted\n")


# A command's body under the CLI's Ctrl-C handling (rcp_agentic/cli/interrupt.py): it prints
# "ready", then runs {body}; on KeyboardInterrupt it reports how it unwound.
_GUARDED = """
import sys, threading, time
from rcp_agentic.cli import interrupt
try:
    with interrupt.guarded():
        print("ready", file=sys.stderr, flush=True)
        {body}
    print("finished", file=sys.stderr)
except KeyboardInterrupt:
    print("unwound", file=sys.stderr)
    sys.exit(130)
"""


def _guarded_run(body: str) -> tuple[int, str, float]:
    """Run ``body`` under ``guarded()`` in a child, send SIGINT half a second into it; its exit
    status, stderr and the seconds from the signal to its exit."""
    proc = subprocess.Popen([sys.executable, "-c", _GUARDED.format(body=body)], cwd=REPO,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    assert proc.stderr.readline() == "ready\n"
    time.sleep(0.5)  # into the body
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, err, time.monotonic() - sent


def test_ctrl_c_while_waiting_unwinds_at_once() -> None:
    # A wait on a lock (an ingest batch, a builder) is Python calling Python: safe to unwind.
    status, err, _seconds = _guarded_run("threading.Event().wait(60)")
    assert (status, err) == (130, "unwound\n")


def test_ctrl_c_outside_a_safe_frame_waits_for_a_checkpoint() -> None:
    # The frame the signal lands in might have been called back from C++: the interrupt is
    # raised at the next checkpoint instead, here after the step in progress.
    status, err, _seconds = _guarded_run(
        "t = time.monotonic()\n        while time.monotonic() - t < 1.5: pass\n"
        "        interrupt.checkpoint()\n        time.sleep(60)")
    assert (status, err) == (130, "unwound\n")


def test_ctrl_c_with_no_checkpoint_in_reach_exits_130_within_the_grace() -> None:
    # Nothing reaches a checkpoint (a long step inside an extension, here a busy loop): the
    # process says so and exits without unwinding, after GRACE_SECONDS.
    status, err, seconds = _guarded_run(
        "t = time.monotonic()\n        while time.monotonic() - t < 60: pass")
    assert (status, err) == (130, "interrupted\n")
    assert seconds < 30


def test_ctrl_c_during_a_step_that_ends_is_raised_when_the_command_returns() -> None:
    status, err, _seconds = _guarded_run(
        "t = time.monotonic()\n        while time.monotonic() - t < 1.5: pass")
    assert (status, err) == (130, "unwound\n")


def test_ctrl_c_stops_serve_http_with_130(tmp_path: Path) -> None:
    status, err = _interrupted(["serve", "--http", "--port", "0", "--no-warm", "--engine",
                                str(tmp_path / "engine")],
                               lambda err: "serving RCP/1 on" in err)
    assert status == 130 and "Traceback" not in err
    assert err.splitlines()[-1] == "interrupted"


def test_reports_describe_themselves() -> None:
    # The lines `index` and `tree|graph rebuild` print are the reports' own (describe()).
    from rcp_agentic.derived import DerivedReport
    from rcp_agentic.ingest import AddResult

    tree = DerivedReport("tree-node", "full", added=2, kept=1, levels=1, seconds=0.34,
                         seconds_embedding=0.21, reason="no tree yet")
    assert tree.describe() == ("Tree (tree-node): full build, 2 nodes added, 0 retired, 1 kept; "
                               "1 level(s) in 0.3s (0.0s summarising, 0.2s embedding; no tree "
                               "yet)")
    assert DerivedReport("tree-node", "none", kept=3, levels=1, reason="up to date").describe() \
        == "Tree (tree-node): up to date, 3 nodes on 1 level(s)"
    graph = DerivedReport("node", "incremental", added=5, retired=5, seconds=0.1, counts={
        "nodes": 5, "chunks": 8, "extracted": 8, "embedded": 5}, llm={
        "calls": 3, "cached": 2, "retries": 1, "fallbacks": {"extract": 1},
        "promptTokens": 12345, "completionTokens": 678})
    assert graph.describe() == (
        "Graph (node, triplet): incremental update, 5 nodes, 0 triplets, 0 synonym edges over 8 "
        "chunks; 5 units written, 5 retired, 0 kept in 0.1s (8 chunks extracted in 0.0s, 5 texts "
        "embedded in 0.0s); LLM: 3 calls (2 cached, 1 retried, 1 replies unused), 12,345 prompt "
        "+ 678 completion tokens")
    assert DerivedReport("node", "none", kept=5).describe() == \
        "Graph (node, triplet): up to date, 5 units"
    communities = DerivedReport("community", "full", added=3, seconds=2.1, counts={
        "communities": 3, "entities": 5, "reports_written": 3})
    assert communities.describe() == (
        "Communities: full build, 3 communities on 1 level(s) over 5 entities; 3 written, 0 "
        "retired, 0 kept, 3 reports written in 2.1s (0.0s clustering, 0.0s reports, 0.0s "
        "embedding)")
    assert DerivedReport("community", "none", reason="no knowledge graph yet").describe() == \
        "Communities: no knowledge graph yet, 0 communities"
    added = AddResult(ids=["a", "b", "a"], chunks=7, pages=2, seconds=3.46, seconds_embedding=1.04)
    assert added.describe("/x/.rcp-agentic") == \
        "Indexed 2 documents (7 chunks, 2 pages) in 3.5s (1.0s embedding) into /x/.rcp-agentic"
