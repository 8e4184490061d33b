"""The configured LLM endpoint in a child process, so its key never enters the engine's memory.

Chroma's HNSW writer (hnswlib) saves buffers it never initialised (``length.bin``,
``data_level0.bin``; upstream chroma-core/chroma#7688): whatever the process freed before
lands in the engine folder, and an HTTP client in the engine's process formats
``Authorization: Bearer <key>`` into such memory on every call. :class:`EndpointProcess`
keeps the HTTP client, and the key, out of that process: a child (``python -c`` of
:func:`serve`) builds the real endpoint (:func:`.endpoint.endpoint_from_config`) from the
key in its *own* environment, inherited unchanged, and answers calls over its pipes, one
JSON line per request and per reply; only prompts, replies and scrubbed failures cross. The
child ends when its stdin closes (:meth:`EndpointProcess.close`, the object collected, or
the engine's process dying); one that dies mid-call fails the calls in flight with
:class:`ConnectionError` (retried by the door) and the next call starts another.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any

from .endpoint import EndpointError, ReplyTooLarge, endpoint_from_config
from .llm_reply import Reply
from .redact import redact, secret_forms

START_TIMEOUT_SECONDS = 60.0
# How long past its deadline a call waits for the child's own timeout before giving up.
GRACE_SECONDS = 5.0
POLL_SECONDS = 0.1
STOP_SECONDS = 5.0
# Failures rebuilt in the engine's process under their own class; any other is an
# EndpointProcessError carrying the original class name.
_ENDPOINT_ERRORS: dict[str, type[EndpointError]] = {
    "EndpointError": EndpointError, "ReplyTooLarge": ReplyTooLarge}
_BUILTIN_ERRORS: tuple[type[Exception], ...] = (
    TimeoutError, ConnectionError, ValueError, ImportError)
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_CHILD = ("import sys; sys.path.insert(0, sys.argv[1]); "
          "from rcp_agentic.models.llm_process import serve; serve(sys.argv[2])")


class EndpointProcessError(RuntimeError):
    """A failure in the child of a class the engine does not rebuild; ``status_code`` and
    ``retry_after`` as the original carried them."""

    def __init__(self, reason: str, *, status_code: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.status_code = status_code
        self.retry_after = retry_after


def llm_fields(config: Any) -> dict[str, Any]:
    """The ``llm_*`` settings of an :class:`~rcp_agentic.config.EngineConfig`: all the child
    needs to build the endpoint (the key's variable name, never the key)."""
    return {name: value for name, value in config.model_dump().items()
            if name.startswith("llm_")}


def endpoint_process_from_config(config: Any) -> EndpointProcess | None:
    """What :func:`.endpoint.endpoint_from_config` returns, served from a child process."""
    if not config.llm_base_url:
        return None
    if not config.llm_model:
        raise ValueError("llm_base_url is set but llm_model is not: name the model to call")
    return EndpointProcess(llm_fields(config))


class EndpointProcess:
    """An OpenAI-compatible endpoint (``chat_reply(system, user) -> Reply``, as
    :class:`~.endpoint.OpenAIEndpoint`) whose HTTP client and key live in a child process
    (module doc). ``fields`` are the engine's ``llm_*`` settings (:func:`llm_fields`); the
    child starts now, so a bad setting fails here as it would in the endpoint."""

    def __init__(self, fields: Mapping[str, Any]) -> None:
        self.base_url = str(fields["llm_base_url"]).rstrip("/")
        self.model = str(fields["llm_model"])
        self.max_tokens = int(fields["llm_max_tokens"])
        self.temperature = float(fields["llm_temperature"])
        self.timeout_seconds = float(fields["llm_timeout_seconds"])
        self._holder = _Holder(json.dumps(dict(fields)))
        self._holder.running()
        self._finalizer = weakref.finalize(self, self._holder.close)

    def __repr__(self) -> str:
        return f"EndpointProcess({self.base_url!r}, model={self.model!r})"

    @property
    def secrets(self) -> tuple[str, ...]:
        """None held here: the key lives in the child, which masks it in what it sends."""
        return ()

    @property
    def pid(self) -> int | None:
        """The child's process id (None: not running)."""
        return self._holder.pid()

    def close(self) -> None:
        """End the child (it finishes nothing: calls in flight fail)."""
        self._finalizer()

    def chat_reply(self, system: str, user: str, *, deadline: float | None = None,
                   cancelled: Callable[[], bool] | None = None) -> Reply:
        """One chat completion through the child; ``deadline`` (a ``time.monotonic()``
        instant) and ``cancelled`` as :meth:`.endpoint.OpenAIEndpoint.chat_reply`."""
        end = time.monotonic() + self.timeout_seconds
        if deadline is not None:
            end = min(end, deadline)
        child = self._holder.running()
        rid, future = child.ask(system, user, end - time.monotonic())
        try:
            return _await(child, rid, future, end, cancelled)
        finally:
            child.forget(rid)


def _await(child: _Child, rid: int, future: Future[Reply], end: float,
           cancelled: Callable[[], bool] | None) -> Reply:
    """The reply of call ``rid``; the child is told when ``cancelled`` turns true, and the
    wait ends ``GRACE_SECONDS`` past ``end`` should the child not answer by then."""
    told = False
    while True:
        done, _ = wait_for([future], timeout=POLL_SECONDS)
        if done:
            return future.result()
        if not told and cancelled is not None and cancelled():
            child.cancel(rid)
            told = True
        if time.monotonic() > end + GRACE_SECONDS:
            child.cancel(rid)
            raise TimeoutError("no reply from the LLM endpoint process before the deadline")


class _Holder:
    """The current child of one :class:`EndpointProcess`, started again after it died."""

    def __init__(self, fields_json: str) -> None:
        self._fields_json = fields_json
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._closed = False

    def running(self) -> _Child:
        with self._lock:
            if self._closed:
                raise ConnectionError("the LLM endpoint process was closed")
            if self._child is None or not self._child.alive():
                self._child = _Child(self._fields_json)
            return self._child

    def pid(self) -> int | None:
        child = self._child
        return child.proc.pid if child is not None and child.alive() else None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            child, self._child = self._child, None
        if child is not None:
            child.stop()


class _Child:
    """One child process: requests written to its stdin, replies read by a thread from its
    stdout and handed to the call waiting for them."""

    def __init__(self, fields_json: str) -> None:
        # env=None: the child inherits this process's environment as the C library holds
        # it, so no copy of the key is formatted here.
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, _PACKAGE_ROOT, fields_json],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=None)
        self._write_lock = threading.Lock()
        self._pending: dict[int, Future[Reply]] = {}
        self._pending_lock = threading.Lock()
        self._next_id = 0
        self._ready: Future[None] = Future()
        self._reader = threading.Thread(target=self._read_replies, name="llm-process-reader",
                                         daemon=True)
        self._reader.start()
        self._await_ready()

    def _await_ready(self) -> None:
        done, _ = wait_for([self._ready], timeout=START_TIMEOUT_SECONDS)
        if not done:
            self.stop()
            raise ConnectionError("the LLM endpoint process did not start in time")
        try:
            self._ready.result()
        except BaseException:
            self.stop()
            raise

    def alive(self) -> bool:
        return self.proc.poll() is None and self._reader.is_alive()

    def ask(self, system: str, user: str, seconds: float) -> tuple[int, Future[Reply]]:
        """Send one call; its id and the future its reply resolves."""
        future: Future[Reply] = Future()
        with self._pending_lock:
            self._next_id += 1
            rid = self._next_id
            self._pending[rid] = future
        self._send({"id": rid, "system": system, "user": user, "seconds": seconds})
        return rid, future

    def cancel(self, rid: int) -> None:
        self._send({"cancel": rid})

    def forget(self, rid: int) -> None:
        with self._pending_lock:
            self._pending.pop(rid, None)

    def _send(self, message: Mapping[str, Any]) -> None:
        line = (json.dumps(message) + "\n").encode("utf-8")
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            with self._write_lock:
                stdin.write(line)
                stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            raise ConnectionError("the LLM endpoint process is gone") from None

    def _read_replies(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            for line in stdout:
                self._deliver(json.loads(line))
        finally:
            self._fail_all(ConnectionError("the LLM endpoint process exited"))

    def _deliver(self, message: Mapping[str, Any]) -> None:
        if "ready" in message:
            self._ready.set_result(None)
            return
        if "fatal" in message:
            self._ready.set_exception(rebuild_error(message["fatal"]))
            return
        with self._pending_lock:
            future = self._pending.pop(message["id"], None)
        if future is None:  # its caller gave up
            return
        if "error" in message:
            future.set_exception(rebuild_error(message["error"]))
        else:
            text, prompt, completion = message["reply"]
            future.set_result(Reply(text, prompt, completion))

    def _fail_all(self, exc: Exception) -> None:
        if not self._ready.done():
            self._ready.set_exception(exc)
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(exc)

    def stop(self) -> None:
        """Close the child's stdin (it exits by itself), killing it if it lingers."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def rebuild_error(error: Mapping[str, Any]) -> Exception:
    """The exception a child reported (:func:`describe_error`), rebuilt in this process."""
    name, reason = str(error["type"]), str(error["message"])
    status, hint = error.get("status_code"), error.get("retry_after")
    if name in _ENDPOINT_ERRORS:
        return _ENDPOINT_ERRORS[name](reason, status_code=status, retry_after=hint)
    for cls in _BUILTIN_ERRORS:
        if error.get("base") == cls.__name__:
            return cls(reason)
    return EndpointProcessError(f"{name}: {reason}", status_code=status, retry_after=hint)


def describe_error(exc: BaseException, secrets: tuple[str, ...]) -> dict[str, Any]:
    """What the child sends of a failure: its class, the builtin class it is a kind of,
    its message with every form of the key masked, its HTTP status and Retry-After hint."""
    base = next((c.__name__ for c in _BUILTIN_ERRORS if isinstance(exc, c)), None)
    status = getattr(exc, "status_code", None)
    hint = getattr(exc, "retry_after", None)
    return {"type": type(exc).__name__, "base": base, "message": redact(str(exc), secrets),
            "status_code": status if isinstance(status, int) else None,
            "retry_after": float(hint) if isinstance(hint, (int, float)) else None}


# --- the child ------------------------------------------------------------------------------

class _Server:
    """The child's side: one endpoint, calls answered on a thread pool, replies written as
    JSON lines to ``out``."""

    def __init__(self, endpoint: Any, out: IO[bytes], workers: int,
                 secrets: tuple[str, ...]) -> None:
        self.endpoint = endpoint
        self.out = out
        self.secrets = secrets
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-call")
        self.cancelled: set[int] = set()
        self._lock = threading.Lock()

    def write(self, message: Mapping[str, Any]) -> None:
        line = (json.dumps(message) + "\n").encode("utf-8")
        with self._lock:
            self.out.write(line)
            self.out.flush()

    def handle(self, message: Mapping[str, Any]) -> None:
        if "cancel" in message:
            with self._lock:
                self.cancelled.add(int(message["cancel"]))
            return
        self.pool.submit(self.answer, message)

    def answer(self, message: Mapping[str, Any]) -> None:
        rid = int(message["id"])
        seconds = message.get("seconds")
        deadline = time.monotonic() + float(seconds) if seconds is not None else None
        try:
            reply = self.endpoint.chat_reply(message["system"], message["user"],
                                             deadline=deadline,
                                             cancelled=lambda: rid in self.cancelled)
            out: dict[str, Any] = {"id": rid, "reply": [reply.text, reply.prompt_tokens,
                                                         reply.completion_tokens]}
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
            out = {"id": rid, "error": describe_error(exc, self.secrets)}
        with self._lock:
            self.cancelled.discard(rid)
        self.write(out)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        close = getattr(self.endpoint, "close", None)
        if callable(close):
            close()


def _protocol_out() -> IO[bytes]:
    """The child's reply stream (its original stdout); stray prints go to stderr."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def serve(fields_json: str) -> None:
    """The child's main: build the endpoint from ``fields_json`` (the ``llm_*`` settings)
    and this process's environment, then answer calls read from stdin until it closes."""
    out = _protocol_out()
    fields = json.loads(fields_json)
    secrets = secret_forms([os.environ.get(str(fields.get("llm_api_key_env", "")))])
    try:
        endpoint = endpoint_from_config(SimpleNamespace(**fields))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        out.write((json.dumps({"fatal": describe_error(exc, secrets)}) + "\n").encode())
        out.flush()
        return
    server = _Server(endpoint, out, int(fields.get("llm_concurrency", 4)), secrets)
    server.write({"ready": True})
    for line in sys.stdin.buffer:
        server.handle(json.loads(line))
    server.close()
    os._exit(0)  # stdin closed: calls still running have no one to answer to
