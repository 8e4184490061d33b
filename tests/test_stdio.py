"""`rcp-agentic serve --stdio` as a real subprocess: NDJSON frames, concurrency, EOF, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import DOCS, REPO


def run_session(engine_dir: Path, frames: list[Any]) -> tuple[list[dict[str, Any]], str]:
    lines = "".join((f if isinstance(f, str) else json.dumps(f)) + "\n" for f in frames)
    proc = subprocess.run([sys.executable, "-m", "rcp_agentic.cli", "serve", "--stdio",
                           "--engine", str(engine_dir)], input=lines, capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def test_stdio_session(engine_dir: Path) -> None:
    frames: list[Any] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "method": "notifications/cancel", "params": {"id": 99}},
        *[{"jsonrpc": "2.0", "id": f"r{i}", "method": "retrieve",
           "params": {"query": d["text"], "k": 1}} for i, d in enumerate(DOCS)],
        "{broken json",
        [{"jsonrpc": "2.0", "id": "b1", "method": "ping", "params": {"nonce": 5}}],
    ]
    out, _stderr = run_session(engine_dir, frames)
    singles = [o for o in out if isinstance(o, dict)]
    batches = [o for o in out if isinstance(o, list)]
    by_id = {o["id"]: o for o in singles}
    assert by_id[1]["result"]["protocolVersion"] == 1
    for i, d in enumerate(DOCS):  # every request answered, correlated by id
        assert by_id[f"r{i}"]["result"]["hits"][0]["chunk"]["docId"] == d["id"]
    assert by_id[None]["error"]["code"] == -32700
    assert batches == [[{"jsonrpc": "2.0", "id": "b1", "result": {"nonce": 5}}]]
    assert len(singles) == 1 + len(DOCS) + 1  # the notification got no answer


def test_stdio_shutdown_and_eof(engine_dir: Path) -> None:
    out, _ = run_session(engine_dir, [
        {"jsonrpc": "2.0", "id": 1, "method": "shutdown", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}}])
    assert out[0] == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert len(out) <= 2
    out, _ = run_session(engine_dir, [])
    assert out == []
