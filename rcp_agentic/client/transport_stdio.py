"""stdio transport (§5.1): spawn an RCP server and speak NDJSON on its stdin/stdout.

One reader (a thread, or a task for asyncio) parses every stdout line and
correlates responses with pending requests by id (§4.7), so any number of
requests may be in flight; progress notifications go to the client's handler,
and responses nobody waits for any more (timed out, cancelled) are dropped.
stderr is drained continuously (a full pipe would block the server) and its tail
is kept for the error raised when the process dies. Closing sends EOF — an
implicit ``shutdown`` — then waits, terminates, and finally kills.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from .errors import TransportError
from .transport import (AsyncTransport, Frame, Message, NotificationHandler, Transport, deliver,
                        encode, is_notification, request_ids, settle)

log = logging.getLogger("rcp_agentic.client")

LINE_LIMIT = 64 * 1024 * 1024  # the asyncio reader's longest line


def _key(id_: Any) -> tuple[str, Any]:
    """Ids match by JSON type and value: 1 and "1" are different requests."""
    return ("s", id_) if isinstance(id_, str) else ("n", id_)


class _Router:
    """Pending requests by id; routes each parsed stdout message to its waiter or the handler."""

    def __init__(self, settle_fn: Callable[..., object]) -> None:
        self._settle = settle_fn
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, Any], Any] = {}
        self._members: dict[int, list[tuple[str, Any]]] = {}  # future → all its keys (batches)

    def add(self, message: Message, future: Any) -> None:
        keys = [_key(i) for i in request_ids(message)]
        with self._lock:
            for key in keys:
                self._pending[key] = future
            self._members[id(future)] = keys

    def discard(self, future: Any) -> None:
        with self._lock:
            self._pop(future)

    def forget(self, message: Message) -> None:
        """Stop waiting for ``message``'s answer."""
        for id_ in request_ids(message):
            with self._lock:
                future = self._pending.get(_key(id_))
                if future is not None:
                    self._pop(future)

    def _pop(self, future: Any) -> None:
        for key in self._members.pop(id(future), []):
            if self._pending.get(key) is future:
                del self._pending[key]

    def _claim(self, id_: Any) -> Any:
        with self._lock:
            if id_ is None:  # unattributable (e.g. a whole batch refused): only if unambiguous
                waiting = {id(f): f for f in self._pending.values()}
                future = next(iter(waiting.values())) if len(waiting) == 1 else None
            else:
                future = self._pending.get(_key(id_))
            if future is not None:
                self._pop(future)
            return future

    def feed(self, line: bytes, handler: NotificationHandler | None) -> None:
        """One line of the server's stdout: its message routed (a blank or non-JSON line: none)."""
        if line.strip() and (message := _parse(line)) is not None:
            self.route(message, handler)

    def route(self, message: Any, handler: NotificationHandler | None) -> None:
        if is_notification(message):
            deliver(handler, message)
            return
        if isinstance(message, list):
            ids = [m.get("id") for m in message if isinstance(m, dict) and m.get("id") is not None]
            future = self._claim(ids[0]) if ids else None
        elif isinstance(message, dict) and ("result" in message or "error" in message):
            future = self._claim(message.get("id"))
        else:
            log.warning("ignoring an unexpected message from the server: %.200s", message)
            return
        if future is None:
            log.debug("discarded a late or unknown response: %.300s", message)
        else:
            self._settle(future, result=message)

    def fail_all(self, exc: BaseException) -> None:
        with self._lock:
            futures = {id(f): f for f in self._pending.values()}.values()
            self._pending.clear()
            self._members.clear()
        for future in futures:
            self._settle(future, exc=exc)


def _parse(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        log.warning("the server wrote a non-JSON line to stdout: %.200r", line)
        return None


def _death(command: Sequence[str], returncode: int | None, stderr: deque[str]) -> TransportError:
    status = "is gone" if returncode is None else f"exited with code {returncode}"
    tail = "\n".join(list(stderr)[-20:])
    return TransportError(f"the server process {command[0]!r} {status}"
                          + (f"; its stderr ends with:\n{tail}" if tail else ""))


class _Server:
    """What both stdio transports keep of the server: its command, environment and working
    directory, the tail of its stderr, and how long closing waits for it to exit."""

    def __init__(self, command: Sequence[str], *, env: Mapping[str, str] | None = None,
                 cwd: str | None = None, stderr_lines: int = 200,
                 close_timeout: float = 10.0) -> None:
        super().__init__()
        self.command = list(command)
        self.close_timeout = close_timeout
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self.stderr_tail: deque[str] = deque(maxlen=stderr_lines)
        self._dead: TransportError | None = None
        self._closed = False
        self._setup()

    def _setup(self) -> None:
        """The transport's own state (the sync one also starts the server here)."""

    def _keep_stderr(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip()
        self.stderr_tail.append(line)
        log.debug("server stderr: %s", line)

    def _died(self, returncode: int | None) -> TransportError:
        return _death(self.command, returncode, self.stderr_tail)

    def _cannot_start(self, exc: OSError) -> TransportError:
        return TransportError(f"cannot start {self.command[0]!r}: {exc}")


class StdioTransport(_Server, Transport):
    """Synchronous stdio transport: a reader thread and a stderr-draining thread."""

    def _setup(self) -> None:
        try:
            self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            env=self._env, cwd=self._cwd)
        except OSError as exc:
            raise self._cannot_start(exc) from exc
        self._router = _Router(settle)
        self._write_lock = threading.Lock()
        self._drainer = threading.Thread(target=self._drain, name="rcp-stdio-stderr", daemon=True)
        self._reader = threading.Thread(target=self._read, name="rcp-stdio-reader", daemon=True)
        self._drainer.start()
        self._reader.start()

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            self._keep_stderr(raw)

    def _read(self) -> None:
        assert self.process.stdout is not None
        try:
            for line in self.process.stdout:
                self._router.feed(line, self.on_notification)
        finally:
            try:
                returncode: int | None = self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                returncode = None
            self._drainer.join(timeout=2)
            self._dead = self._died(returncode)
            self._router.fail_all(self._dead)

    def _write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        with self._write_lock:
            if self._closed:
                raise TransportError("the stdio client is closed")
            if self._dead is not None:
                raise self._dead
            try:
                self.process.stdin.write(data + b"\n")
                self.process.stdin.flush()
            except (OSError, ValueError):
                raise self._dead or self._died(self.process.poll()) from None
            self._count_sent()

    def submit(self, message: Message, *, timeout: float | None, progress: bool) -> Future[Any]:
        data = encode(message)
        future = self._new_future()
        self._router.add(message, future)
        try:
            self._write(data)
        except BaseException:
            self._router.discard(future)
            raise
        return future

    def abandon(self, message: Message) -> None:
        self._router.forget(message)

    def notify(self, frame: Frame) -> None:
        self._write(encode(frame))

    def close(self) -> None:
        """EOF on stdin (an implicit shutdown), then wait, terminate, kill."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=self.close_timeout)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)
        self._drainer.join(timeout=5)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()
        self._router.fail_all(TransportError("the stdio client was closed"))


def _settle_async(future: asyncio.Future[Any], *, result: Any = None,
                  exc: BaseException | None = None) -> None:
    if not future.done():
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)


class AsyncStdioTransport(_Server, AsyncTransport):
    """Asyncio stdio transport: the process starts on first use; reader and drainer are tasks."""

    def _setup(self) -> None:
        self.process: asyncio.subprocess.Process | None = None
        self._router = _Router(_settle_async)
        self._start_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []

    async def _process(self) -> asyncio.subprocess.Process:
        async with self._start_lock:
            if self._closed:
                raise TransportError("the stdio client is closed")
            if self.process is None:
                try:
                    self.process = await asyncio.create_subprocess_exec(
                        *self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, env=self._env, cwd=self._cwd, limit=LINE_LIMIT)
                except OSError as exc:
                    raise self._cannot_start(exc) from exc
                drainer = asyncio.ensure_future(self._drain(self.process))
                self._tasks = [drainer, asyncio.ensure_future(self._read(self.process, drainer))]
            return self.process

    async def _drain(self, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        while raw := await process.stderr.readline():
            self._keep_stderr(raw)

    async def _read(self, process: asyncio.subprocess.Process,
                    drainer: asyncio.Future[None]) -> None:
        assert process.stdout is not None
        try:
            while True:
                try:
                    line = await process.stdout.readline()
                except ValueError:  # a line beyond LINE_LIMIT: the framing is lost
                    log.error("the server wrote a line longer than %d bytes", LINE_LIMIT)
                    break
                if not line:
                    break
                self._router.feed(line, self.on_notification)
        finally:
            try:
                await asyncio.wait_for(asyncio.shield(process.wait()), 2)
                await asyncio.wait_for(asyncio.shield(drainer), 2)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
            self._dead = self._died(process.returncode)
            self._router.fail_all(self._dead)

    async def _write(self, data: bytes) -> None:
        process = await self._process()
        assert process.stdin is not None
        if self._dead is not None:
            raise self._dead
        try:
            process.stdin.write(data + b"\n")
            await process.stdin.drain()
        except (OSError, RuntimeError):
            raise self._dead or self._died(process.returncode) from None
        self._count_sent()

    async def request(self, message: Message, *, timeout: float | None, progress: bool) -> Any:
        data = encode(message)
        await self._process()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._router.add(message, future)
        try:
            await self._write(data)
            return await future
        finally:  # answered, timed out or cancelled: a late answer is dropped
            self._router.discard(future)

    async def notify(self, frame: Frame) -> None:
        await self._write(encode(frame))

    async def aclose(self) -> None:
        """EOF on stdin (an implicit shutdown), then wait, terminate, kill."""
        async with self._start_lock:
            self._closed = True
        process = self.process
        if process is None:
            return
        if process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), self.close_timeout)
        except asyncio.TimeoutError:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 5)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._router.fail_all(TransportError("the stdio client was closed"))
