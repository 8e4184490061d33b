"""`rcp-agentic serve --stdio` as a real subprocess: NDJSON frames, concurrency, EOF, errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import DOCS, REPO


def run_session(engine_dir: Path, frames: list[Any],
                flags: tuple[str, ...] = ()) -> tuple[list[dict[str, Any]], str]:
    lines = "".join((f if isinstance(f, str) else json.dumps(f)) + "\n" for f in frames)
    proc = subprocess.run([sys.executable, "-m", "rcp_agentic.cli", "serve", "--stdio",
                           "--engine", str(engine_dir), *flags], input=lines,
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def _served(engine_dir: Path, backend: str, tmp: Path) -> tuple[Path, tuple[str, ...]]:
    """The engine directory and serve flags of ``backend``: for Milvus a copy of the DOCS
    engine (serving with --backend saves it) that the server syncs into a new Milvus Lite."""
    if backend == "embedded":
        return engine_dir, ()
    copy = tmp / "e"
    shutil.copytree(engine_dir, copy)
    return copy, ("--backend", "milvus", "--milvus-uri", str(tmp / "milvus.db"))


def test_stdio_session(engine_dir: Path, backend: str, tmp_path: Path) -> None:
    frames: list[Any] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "method": "notifications/cancel", "params": {"id": 99}},
        *[{"jsonrpc": "2.0", "id": f"r{i}", "method": "retrieve",
           "params": {"query": d["text"], "k": 1}} for i, d in enumerate(DOCS)],
        "{broken json",
        [{"jsonrpc": "2.0", "id": "b1", "method": "ping", "params": {"nonce": 5}}],
    ]
    served, flags = _served(engine_dir, backend, tmp_path)
    out, _stderr = run_session(served, frames, flags)
    singles = [o for o in out if isinstance(o, dict)]
    batches = [o for o in out if isinstance(o, list)]
    by_id = {o["id"]: o for o in singles}
    assert by_id[1]["result"]["protocolVersion"] == 1
    for i, d in enumerate(DOCS):  # every request answered, correlated by id
        assert by_id[f"r{i}"]["result"]["hits"][0]["chunk"]["docId"] == d["id"]
    assert by_id[None]["error"]["code"] == -32700
    assert batches == [[{"jsonrpc": "2.0", "id": "b1", "result": {"nonce": 5}}]]
    assert len(singles) == 1 + len(DOCS) + 1  # the notification got no answer
    assert (tmp_path / "milvus.db").exists() == (backend == "milvus")  # recall ran there


def test_stdio_initialize_refusals_name_the_supported_versions(engine_dir: Path) -> None:
    """``protocolVersion`` is an integer, the highest version the client speaks (RCP §7.1):
    ``"1.0"`` or none is -32602 and 0 is -32002, each with ``error.data.supported``; the
    session stays uninitialized, and -32001 then says how to initialize."""
    supported = {"supported": [1]}
    out, _ = run_session(engine_dir, [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "1.0"}},
        {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {}},
        {"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"protocolVersion": 0}},
        {"jsonrpc": "2.0", "id": 4, "method": "retrieve", "params": {"query": "x", "k": 1}}])
    errors = {o["id"]: o["error"] for o in out}
    assert errors[1]["code"] == errors[2]["code"] == -32602
    assert errors[1]["data"] == errors[2]["data"] == {**supported, "field": "protocolVersion"}
    assert "not '1.0'" in errors[1]["message"] and "supports 1" in errors[1]["message"]
    assert "is required" in errors[2]["message"]
    assert (errors[3]["code"], errors[3]["data"]) == (-32002, supported)
    assert errors[4]["code"] == -32001
    assert 'send initialize with params {"protocolVersion": 1} first' in errors[4]["message"]


def test_stdio_shutdown_and_eof(engine_dir: Path) -> None:
    out, _ = run_session(engine_dir, [
        {"jsonrpc": "2.0", "id": 1, "method": "shutdown", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}}])
    assert out[0] == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert len(out) <= 2
    out, _ = run_session(engine_dir, [])
    assert out == []


def test_stdio_survives_deep_nesting(engine_dir: Path) -> None:
    # 2.4 KB of brackets once killed the server with a RecursionError (issue 9).
    out, stderr = run_session(engine_dir, [
        "[" * 1200 + "]" * 1200,
        '{"jsonrpc":"2.0","id":1,"method":"retrieve","params":{"query":"x","filter":'
        + '{"not":' * 50_000 + '{"field":"lang","op":"eq","value":"en"}' + "}" * 50_000 + "}}",
        {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"nonce": "alive"}}])
    assert "RecursionError" not in stderr
    assert [o["error"]["code"] for o in out[:2]] == [-32700, -32700]
    assert all(o["id"] is None for o in out[:2])
    assert out[2] == {"jsonrpc": "2.0", "id": 2, "result": {"nonce": "alive"}}


def test_stdio_answers_echoed_lone_surrogates(engine_dir: Path) -> None:
    # Answers echoing a lone surrogate were never written (the encoder failed) (issue 9).
    out, _stderr = run_session(engine_dir, [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
        '{"jsonrpc":"2.0","id":"\\ud800","method":"ping","params":{"nonce":"n\\udc00"}}',
        ('{"jsonrpc":"2.0","id":2,"method":"retrieve","params":{"query":"x",'
         '"filter":{"field":"x\\ud800","op":"eq","value":1}}}'),
        '{"jsonrpc":"2.0","id":3,"method":"x-\\udfff","params":{}}',
        '{"jsonrpc":"2.0","id":4,"method":"ping","params":{"nonce":1e400}}',
        {"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {}}])
    by_id = {o["id"]: o for o in out}
    assert len(out) == len(by_id) == 6  # every request answered exactly once
    assert by_id["\ud800"]["result"] == {"nonce": "n\udc00"}  # the client's own value back
    assert by_id[2]["error"]["code"] == -32602 and by_id[2]["error"]["data"]["field"] == (
        "filter.field")
    assert by_id[3]["error"]["code"] == -32004
    assert by_id[4]["error"]["code"] == -32602
    assert by_id[5]["result"] == {}
