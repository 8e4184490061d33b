"""Shared fixtures: the real MiniLM embedder (loaded once), engines in temp dirs, a real Chroma server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rcp_agentic import Engine
from rcp_agentic.models.embedder import SentenceTransformerEmbedder
from rcp_agentic.protocol.dispatcher import Dispatcher

REPO = Path(__file__).resolve().parents[1]
# The suite runs in two pytest-xdist workers (pyproject's addopts). Each worker, and every
# server or CLI process a test starts, runs torch on one thread: two workers with torch's
# default two threads each would oversubscribe two cores (measured on two cores: 495 s for
# the whole suite against 416 s with one thread each; 743 s in one process).
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
CHROMA_URL_ENV = "RCP_AGENTIC_TEST_CHROMA_URL"
DERIVED_UPDATES_ENV = "RCP_AGENTIC_DERIVED_UPDATES"

# Small, varied documents: quick to embed, with metadata of every filterable type.
DOCS = [
    {"id": "d1", "text": "Vitamin D deficiency is linked to a higher risk of multiple sclerosis.",
     "meta": {"lang": "en", "year": 2019, "score": 0.5, "tags": ["health", "neuro"],
              "reviewed": True, "published": "2019-05-01T00:00:00Z"}},
    {"id": "d2", "text": "BM25 ranks documents by term frequency, inverse document frequency and "
                         "document length normalisation.",
     "meta": {"lang": "en", "year": 2021, "score": 1.5, "tags": ["ir"], "reviewed": False,
              "published": "2021-01-15T12:00:00Z"}},
    {"id": "d3", "text": "Die Photosynthese wandelt Lichtenergie in chemische Energie um.",
     "meta": {"lang": "de", "year": 2015, "tags": ["biology"], "published": "2015-07-30T00:00:00Z"}},
    {"id": "d4", "text": "Dense retrievers embed queries and passages with a bi-encoder and rank by "
                         "cosine similarity.",
     "meta": {"lang": "en", "year": 2023, "score": 2.0, "tags": ["ir", "neural"],
              "reviewed": True}},
    {"id": "d5", "text": "Reciprocal rank fusion combines several rankings using only rank "
                         "positions, not scores.",
     "meta": {"lang": "en", "year": 2009, "score": 0.1, "tags": ["ir", "fusion"]}},
    {"id": "d6", "text": "Mitochondria produce most of the cell's supply of adenosine "
                         "triphosphate.",
     "meta": {"lang": "en", "year": 2012, "tags": ["biology", "health"], "reviewed": False}},
    {"id": "d7", "text": "Les réseaux de neurones apprennent des représentations à partir des "
                         "données.",
     "meta": {"lang": "fr", "year": 2020, "score": 0.9, "tags": ["neural"],
              "published": "2020-02-02T00:00:00Z"}},
    {"id": "d8", "text": "Knowledge graphs store entities and the relations between them as "
                         "triplets.",
     "meta": {"lang": "en", "year": 2018, "score": 1.1, "tags": [], "reviewed": True}},
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "inline_derived: engines of this module (and servers it "
                            "starts) run derived builders inside each write")


@pytest.fixture(scope="module", autouse=True)
def inline_derived(request: pytest.FixtureRequest) -> Iterator[None]:
    """In a module marked ``inline_derived`` (``pytestmark``), every engine opened without an
    explicit ``derived_updates`` builds its derived units inline: for modules that test what
    the builders write, reading each write's reports and units as it returns."""
    if request.node.get_closest_marker("inline_derived") is None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DERIVED_UPDATES_ENV, "inline")
        yield


@pytest.fixture(scope="session")
def embedder() -> SentenceTransformerEmbedder:
    """The real default model, loaded once per test process (one torch thread in a worker)."""
    return SentenceTransformerEmbedder(torch_threads=1 if XDIST_WORKER else None)


@pytest.fixture()
def engine(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[Engine]:
    eng = Engine(tmp_path / "engine", embedder=embedder)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def engine_dir(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder
               ) -> Path:
    """An engine directory holding DOCS, closed again (for servers to open); one per module."""
    path = tmp_path_factory.mktemp("docs-engine") / "e"
    with Engine(path, embedder=embedder) as eng:
        eng.add_documents(DOCS)
    return path


@pytest.fixture(scope="module")
def filled_engine(tmp_path_factory: pytest.TempPathFactory,
                  embedder: SentenceTransformerEmbedder) -> Iterator[Engine]:
    """An engine holding DOCS (read-only for the tests that use it)."""
    eng = Engine(tmp_path_factory.mktemp("filled") / "engine", embedder=embedder)
    eng.add_documents(DOCS)
    yield eng
    eng.close()


_TOPICS = ["volcano", "violin", "glacier", "espresso", "satellite", "penguin", "cathedral",
           "tornado", "orchard", "submarine"]


def numbered_docs(n: int, start: int = 0) -> list[dict[str, Any]]:
    """``n`` short documents, each with a word (``tokNNN``) no other document has."""
    return [{"id": f"o{i:03d}",
             "text": f"Field notes tok{i:03d} on the {_TOPICS[i % len(_TOPICS)]} number {i}."}
            for i in range(start, start + n)]


def child_env() -> dict[str, str]:
    """This environment without engine overrides: a child reads the directory's config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCP_AGENTIC_")}
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


def cli_command(*args: str) -> list[str]:
    """The `rcp-agentic` command line run by this interpreter."""
    return [sys.executable, "-m", "rcp_agentic.cli", *args]


# Recall backends every backend-parametrized suite runs against (docs/scaling.md).
BACKENDS = ("embedded", "milvus")


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The recall backend of a suite that runs against each (module-scoped: one engine each)."""
    return str(request.param)


@pytest.fixture(scope="module")
def recall_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  embedder: SentenceTransformerEmbedder, backend: str) -> Iterator[Engine]:
    """DOCS in each recall backend, for tests of what recall returns (the embedded one is
    ``filled_engine``, built once; backend-independent validation uses that one directly)."""
    if backend == "embedded":
        yield request.getfixturevalue("filled_engine")
        return
    path = tmp_path_factory.mktemp(f"docs-{backend}") / "engine"
    with Engine(path, embedder=embedder, **backend_overrides(backend, path)) as eng:
        eng.add_documents(DOCS)
        yield eng


def retry_until_served(call: Callable[[], Any], limit: float = 90.0) -> Any:
    """Call until it stops raising BackendUnavailable (retryable, with retryAfterMs), sleeping
    its retryAfterMs (at most 2 s), for at most ``limit`` seconds."""
    from rcp_agentic import BackendUnavailable

    deadline = time.monotonic() + limit
    while True:
        try:
            return call()
        except BackendUnavailable as exc:
            assert time.monotonic() < deadline, f"still unavailable after {limit} s: {exc}"
            assert exc.data.get("retryable") is True and exc.data.get("retryAfterMs", 0) > 0
            time.sleep(min(exc.data["retryAfterMs"] / 1000.0, 2.0))


def backend_overrides(backend: str, engine_path: Path) -> dict[str, Any]:
    """Engine keyword arguments for ``backend``; Milvus Lite keeps its data beside the engine."""
    if backend == "embedded":
        return {}
    return {"backend": "milvus", "milvus_uri": str(engine_path.parent / f"{engine_path.name}-milvus.db")}


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def milvus_lite_server(data: Path, port: int | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real `milvus-lite server` subprocess on loopback: (its URI, the process)."""
    port = port or free_port()
    exe = shutil.which("milvus-lite") or str(Path(sys.executable).with_name("milvus-lite"))
    with running_server([exe, "server", "--data-dir", str(data), "--host", "127.0.0.1",
                         "--port", str(port)], lambda: _accepts(port), timeout=60) as proc:
        yield f"http://127.0.0.1:{port}", proc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _heartbeat(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real `chroma run` server on loopback: $RCP_AGENTIC_TEST_CHROMA_URL, or one we start."""
    url = os.environ.get(CHROMA_URL_ENV)
    if url:
        assert _heartbeat(url), f"{CHROMA_URL_ENV}={url} does not answer"
        yield url
        return
    chroma = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
    port = free_port()
    data = tmp_path_factory.mktemp("chroma-server")
    url = f"http://127.0.0.1:{port}"
    with running_server([chroma, "run", "--path", str(data), "--host", "127.0.0.1", "--port",
                         str(port)], lambda: _heartbeat(url), timeout=60):
        yield url


@contextmanager
def running_server(cmd: list[str], ready: Callable[[], bool], *, timeout: float,
                   env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Start a server subprocess, wait until ``ready()``, and stop it afterwards."""
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                raise AssertionError(f"{cmd[0]} exited: {proc.stderr.read().decode()[-2000:]}"
                                     if proc.stderr else f"{cmd[0]} exited")
            assert time.monotonic() < deadline, f"{cmd[0]} did not start in {timeout} s"
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()


@contextmanager
def serving_http(engine_dir: Path, token: str) -> Iterator[str]:
    """A real ``rcp-agentic serve --http`` subprocess over ``engine_dir`` (bearer ``token``);
    yields its URL once it answers ``ping``."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        req = urllib.request.Request(
            f"{url}/rcp/ping", method="POST", data=b'{"jsonrpc":"2.0","id":0,"method":"ping"}',
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=1):
                return True
        except OSError:
            return False

    with running_server([sys.executable, "-m", "rcp_agentic.cli", "serve", "--http", "--engine",
                         str(engine_dir), "--port", str(port)], ready, timeout=120,
                        env={**os.environ, "RCP_AGENTIC_TOKEN": token}):
        yield url


class ChromaQuerySpy:
    """Counts an engine's Chroma dense queries, to show which dense path ran."""

    def __init__(self, eng: Engine) -> None:
        self.calls = 0
        inner = eng.chroma.query

        def query(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return inner(*args, **kwargs)

        eng.chroma.query = query  # type: ignore[method-assign]


def rpc_call(rpc: Dispatcher, method: str, params: Any, id_: Any = 1) -> dict[str, Any]:
    """One JSON-RPC request through an in-process dispatcher; its answer object."""
    out = rpc.handle({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})
    assert isinstance(out, dict)
    return out


def initialized(eng: Engine) -> Dispatcher:
    """A dispatcher over ``eng`` past ``initialize``."""
    rpc = Dispatcher(eng)
    assert "result" in rpc_call(rpc, "initialize", {"protocolVersion": 1}, 0)
    return rpc
