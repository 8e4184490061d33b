"""RCP/1 over stdio (§5.1): newline-delimited JSON frames; stdout carries only protocol frames.

Requests are handled concurrently on a small thread pool, so several may be in
flight; responses and progress notifications are written whole, one per line,
under a lock. Notifications (``notifications/cancel``) are acted on by the reader
itself, so a cancel never waits behind the requests it targets. EOF on stdin (or
``shutdown``) finishes the requests in flight and exits.

No frame can stop the server: every line is parsed by :func:`jsonio.loads` (bad
UTF-8, bad JSON or nesting too deep is -32700), and every answer is serialised by the
dispatcher's ``dumps``, which never fails (an answer that cannot be JSON becomes
-32603 for its id).
"""

from __future__ import annotations

import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from ..engine import Engine
from ..errors import ParseError, PayloadTooLarge
from .. import jsonio
from .caller import Caller
from .dispatcher import Dispatcher, dumps

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 8 * 1024 * 1024
# The one client: the process that spawned the server (trusted with writes, §15.6).
CALLER = Caller(writes=True, principal="stdio")


def serve_stdio(engine: Engine, *, stdin: IO[bytes] | None = None,
                stdout: IO[bytes] | None = None, workers: int = 4) -> None:
    """Serve one client on stdin/stdout until EOF or ``shutdown``."""
    rin = stdin or sys.stdin.buffer
    rout = stdout or sys.stdout.buffer
    write_lock = threading.Lock()
    stop = threading.Event()
    dispatcher = Dispatcher(engine, on_shutdown=stop.set, max_body_bytes=MAX_FRAME_BYTES)

    def write(frame: Any) -> None:
        # dumps never raises and always yields text that encodes as UTF-8.
        data = dumps(frame).encode("utf-8") + b"\n"
        with write_lock:
            rout.write(data)
            rout.flush()

    def answer(message: Any) -> None:
        try:
            response = dispatcher.handle(message, write, caller=CALLER)
            if response is not None:
                write(response)
        except Exception:  # the dispatcher never raises; this is the last line of defence
            log.exception("unhandled error on a stdio frame")

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rcp-stdio") as pool:
        while not stop.is_set():
            line = rin.readline(MAX_FRAME_BYTES + 1)
            if not line:
                break  # EOF: the pool's exit waits for requests in flight
            if len(line) > MAX_FRAME_BYTES:
                while line and not line.endswith(b"\n"):  # drop the rest of the oversized frame
                    line = rin.readline(MAX_FRAME_BYTES)
                err = PayloadTooLarge(f"frame exceeds {MAX_FRAME_BYTES} bytes")
                write({"jsonrpc": "2.0", "id": None, "error": err.to_wire()})
                continue
            if not line.strip():
                continue
            try:
                message = jsonio.loads(line)
            except ParseError as err:
                write({"jsonrpc": "2.0", "id": None, "error": err.to_wire()})
                continue
            if isinstance(message, dict) and ("id" not in message or message.get("method") in
                                              ("initialize", "shutdown")):
                # Notifications are cheap and a cancel must not queue behind its target;
                # initialize and shutdown finish before any later frame is looked at.
                answer(message)
            else:
                pool.submit(answer, message)
