"""The LLM endpoint's key never reaches the engine folder, nor the engine's process.

Chroma's HNSW writer saves buffers it never initialised (``length.bin``, ``data_level0.bin``;
upstream chroma-core/chroma#7688), so anything the engine's process once held in freed
memory can land in the folder. The engine therefore calls a configured endpoint from a
child process (rcp_agentic/models/llm_process.py), which alone holds the HTTP client and
formats ``Authorization: Bearer <key>``.

Checked over a real model server (SmolLM2 behind the counting proxy of tests/llm_server.py):
the memory of an engine process after an LLM build (read through ``/proc/PID/mem``: the
header is there with the in-process endpoint, never with the child), and every byte under
the engine folder after builds from the CLI, with a working and with a refusing (401)
endpoint: the key, ``Bearer <key>`` and the key's base64 (HTTP Basic's form) never occur.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from llm_server import FaultProxy, proxy, stack  # noqa: F401 - fixtures

KEY_ENV = "RCP_TEST_CANARY_KEY"
MAX_TOKENS = 24
TEXTS = [
    ("Velvet Lanterns is a Norwegian rock band formed in Bergen in 1974 by Ingrid Solheim "
     "and Oskar Brandvik."),
    ("Oskar Brandvik is a drummer who grew up in Tromsø. He played with Velvet Lanterns "
     "until 1981."),
    "Midnight Harbor is a 1979 single by Velvet Lanterns, recorded in Stockholm.",
]
# An engine process that builds a graph with LLM extraction through ``sys.argv[3]``'s kind of
# endpoint ("process": llm_process's child; "inline": the endpoint in this process), says
# "built" and waits for stdin to close, so its memory can be read meanwhile.
ENGINE = r"""
import sys
from rcp_agentic import Engine
from rcp_agentic.config import EngineConfig
from rcp_agentic.models.endpoint import endpoint_from_config
from rcp_agentic.models.llm_process import endpoint_process_from_config

folder, base_url, kind = sys.argv[1:4]
config = EngineConfig(llm_base_url=base_url, llm_model="smollm2", llm_api_key_env=sys.argv[4],
                      llm_max_tokens=int(sys.argv[5]))
make = endpoint_process_from_config if kind == "process" else endpoint_from_config
with Engine(folder, llm=make(config), build_graph=True, graph_extractor="llm",
            graph_communities=False, derived_updates="inline") as engine:
    engine.add_documents([{"id": f"d{i}", "text": t} for i, t in enumerate(sys.argv[6:])])
    print("built", flush=True)
    sys.stdin.read()
"""






def canary() -> str:
    return "sk-LEAKCANARY-" + secrets.token_hex(16)


def key_forms(key: str) -> dict[str, bytes]:
    """The forms a key travels in: itself, the header value, base64 (HTTP Basic)."""
    return {"key": key.encode(), "bearer": f"Bearer {key}".encode(),
            "base64": base64.b64encode(key.encode())}


def files_holding(folder: Path, key: str) -> list[tuple[str, str]]:
    """(file, form) for every form of ``key`` found in the bytes of a file under ``folder``."""
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [(str(path.relative_to(folder)), name)
                  for name, form in key_forms(key).items() if form in data]
    return found


def child_env(key: str) -> dict[str, str]:
    return {**os.environ, KEY_ENV: key, "OMP_NUM_THREADS": "1",
            "RCP_AGENTIC_LLM_MAX_TOKENS": str(MAX_TOKENS), "RCP_AGENTIC_LLM_CONCURRENCY": "2"}


def write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(TEXTS):
        (folder / f"note-{i}.txt").write_text(text, "utf-8")
    return folder


# --- the engine's memory ------------------------------------------------------------------------

_MAP = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$")


def writable_regions(pid: int) -> list[tuple[int, int, str]]:
    """(start, end, name) of the private writable mappings of ``pid``: where its heap, its
    freed memory, its stacks and its interpreter's objects live."""
    regions = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        m = _MAP.match(line)
        if m and m.group(3).startswith("rw") and m.group(3).endswith("p"):
            regions.append((int(m.group(1), 16), int(m.group(2), 16), m.group(4)))
    return regions


def header_copies(pid: int, key: str, chunk: int = 1 << 24) -> int:
    """How many times ``pid``'s writable memory holds ``Bearer <key>``, live or freed."""
    needle, count = key_forms(key)["bearer"], 0
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for start, end, _ in writable_regions(pid):
            at = start
            while at < end:
                size = min(chunk + len(needle) - 1, end - at)
                try:
                    mem.seek(at)
                    count += mem.read(size).count(needle)
                except OSError:  # a guard page, or a mapping gone meanwhile
                    pass
                at += chunk
    return count


def built_engine_memory(folder: Path, proxy: FaultProxy, kind: str, key: str) -> int:
    """Build a graph with ``kind`` of endpoint in an engine process; the copies of the
    header its memory holds afterwards."""
    engine = subprocess.Popen(
        [sys.executable, "-c", ENGINE, str(folder), proxy.base_url, kind, KEY_ENV,
         str(MAX_TOKENS), *TEXTS[:2]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=child_env(key))
    assert engine.stdout is not None
    if engine.stdout.readline().strip() != "built":
        pytest.fail(engine.communicate(timeout=60)[1][-3000:], pytrace=False)
    try:
        return header_copies(engine.pid, key)
    finally:
        engine.communicate(timeout=60)


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="reads /proc/PID/mem")
def test_the_engine_process_never_holds_the_authorization_header(
        tmp_path: Path, proxy: FaultProxy) -> None:
    key = canary()
    # The control: the endpoint in the engine's process keeps the header (its client's
    # default headers), so the scan finds what it looks for.
    assert built_engine_memory(tmp_path / "inline", proxy, "inline", key) >= 1
    assert proxy.count() >= len(TEXTS[:2])
    proxy.reset()
    assert built_engine_memory(tmp_path / "process", proxy, "process", key) == 0
    assert proxy.count() >= len(TEXTS[:2]) and all(r.delivered for r in proxy.chat_requests())
    assert files_holding(tmp_path / "process", key) == []


# --- the engine folder after builds from the CLI -------------------------------------------------

def index(folder: Path, corpus: Path, proxy: FaultProxy,
          key: str) -> subprocess.CompletedProcess[str]:
    """``rcp-agentic index`` of ``corpus`` with a graph and a tree by the proxy's model."""
    return subprocess.run(
        [sys.executable, "-m", "rcp_agentic.cli", "index", str(corpus), "--engine", str(folder),
         "--graph", "--graph-extractor", "llm", "--tree", "--quiet", "--llm-base-url",
         proxy.base_url, "--llm-model", "smollm2", "--llm-api-key-env", KEY_ENV],
        check=False, capture_output=True, text=True, env=child_env(key), timeout=300)


def test_no_file_of_the_engine_holds_the_key_after_llm_builds(tmp_path: Path,
                                                              proxy: FaultProxy) -> None:
    corpus = write_corpus(tmp_path / "docs")
    key = canary()
    done = index(tmp_path / "ok", corpus, proxy, key)
    assert done.returncode == 0, done.stderr
    assert proxy.count() >= len(TEXTS) and all(r.delivered for r in proxy.chat_requests())
    assert list((tmp_path / "ok" / "chroma").rglob("length.bin"))  # HNSW segments written
    assert files_holding(tmp_path / "ok", key) == []
    assert key not in done.stdout + done.stderr


def test_no_file_of_the_engine_holds_the_key_after_a_refusing_endpoint(
        tmp_path: Path, proxy: FaultProxy) -> None:
    corpus = write_corpus(tmp_path / "docs")
    key = canary()
    proxy.fail_next(50, status=401, retry_after=None)
    refused = index(tmp_path / "refused", corpus, proxy, key)
    assert proxy.count() >= 1 and all(r.status == 401 for r in proxy.chat_requests())
    assert files_holding(tmp_path / "refused", key) == []
    assert key not in refused.stdout + refused.stderr
