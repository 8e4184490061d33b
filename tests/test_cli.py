"""The `rcp-agentic` command as a user runs it: index a folder, query it, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO


def run(*args: str, env_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if env_dir is not None:
        env["RCP_AGENTIC_ENGINE"] = str(env_dir)
    return subprocess.run([sys.executable, "-m", "rcp_agentic.cli", *args], capture_output=True,
                          text=True, env=env, timeout=300, cwd=REPO)


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
