"""A hostile OpenAI-compatible endpoint on loopback, for tests and benchmarks.

:class:`HostileEndpoint` answers ``POST /v1/chat/completions`` as its ``mode`` says:

- ``ok``: a valid completion at once (``delay`` seconds late if set);
- ``echo401`` / ``echo500``: that status with the request's headers echoed in the body, as
  some gateways and proxies do (the ``Authorization`` header among them);
- ``hang``: reads the request and never answers;
- ``drip``: a 200 whose body arrives one byte every ``drip_seconds``;
- ``huge``: a 200 whose body is ``huge_bytes`` long (streamed; nothing is buffered).

It counts the requests it got and the body bytes it managed to write, binds 127.0.0.1 only
and stops its handler threads when closed. A plain module, imported by the tests that use it.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

HOST = "127.0.0.1"
REPLY = "Paris is the capital of France."


def completion(text: str = REPLY) -> bytes:
    """A chat completion body holding ``text``."""
    return json.dumps({"id": "x", "object": "chat.completion", "model": "m",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text}}],
                       "usage": {"prompt_tokens": 20, "completion_tokens": 8,
                                 "total_tokens": 28}}).encode()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        owner = self.server.owner
        with owner.lock:
            owner.requests += 1
        getattr(self, "_" + owner.mode)()

    def _write(self, data: bytes) -> bool:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            return False
        with self.server.owner.lock:
            self.server.owner.bytes_written += len(data)
        return True

    def _head(self, status: int, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def _ok(self) -> None:
        owner = self.server.owner
        if owner.delay:
            owner.stopping.wait(owner.delay)
        body = completion()
        self._head(200, len(body))
        self._write(body)

    def _echo(self, status: int) -> None:
        body = json.dumps({"error": {"message": "unauthorized" if status == 401 else "boom",
                                     "request_headers": dict(self.headers.items())}}).encode()
        self._head(status, len(body))
        self._write(body)

    def _echo401(self) -> None:
        self._echo(401)

    def _echo500(self) -> None:
        self._echo(500)

    def _hang(self) -> None:
        self.server.owner.stopping.wait(600)
        self.close_connection = True

    def _drip(self) -> None:
        owner = self.server.owner
        body = completion()
        self._head(200, len(body))
        for byte in body:
            if owner.stopping.wait(owner.drip_seconds) or not self._write(bytes([byte])):
                break
        self.close_connection = True

    def _huge(self) -> None:
        owner = self.server.owner
        self._head(200, owner.huge_bytes)
        prefix = b'{"choices":[{"message":{"content":"'
        self._write(prefix)
        left = owner.huge_bytes - len(prefix)
        block = b"a" * 65536
        while left > 0 and not owner.stopping.is_set():
            if not self._write(block[:left]):
                break
            left -= min(left, len(block))
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: HostileEndpoint


class HostileEndpoint:
    """The endpoint (module doc); ``base_url`` is what an engine's ``llm_base_url`` takes."""

    def __init__(self, mode: str = "ok", *, delay: float = 0.0, drip_seconds: float = 5.0,
                 huge_bytes: int = 200 * 2**20) -> None:
        if not hasattr(_Handler, "_" + mode):
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode
        self.delay = delay
        self.drip_seconds = drip_seconds
        self.huge_bytes = huge_bytes
        self.requests = 0
        self.bytes_written = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._server = _Server((HOST, 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self._server.server_address[1]}/v1"

    def start(self) -> HostileEndpoint:
        self._thread.start()
        return self

    def close(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HostileEndpoint:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def wait_for(predicate: Any, timeout: float) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())
