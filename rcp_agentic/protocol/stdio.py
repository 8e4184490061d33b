"""RCP/1 over stdio (§5.1): newline-delimited JSON frames; stdout carries only protocol frames.

Requests are handled concurrently on a small thread pool, so several may be in
flight; responses are written whole, one per line, under a lock. EOF on stdin
(or ``shutdown``) finishes the requests in flight and exits.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import IO

from ..engine import Engine
from ..errors import PayloadTooLarge
from .dispatcher import Dispatcher

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 8 * 1024 * 1024


def serve_stdio(engine: Engine, *, stdin: IO[bytes] | None = None,
                stdout: IO[bytes] | None = None, workers: int = 4) -> None:
    """Serve one client on stdin/stdout until EOF or ``shutdown``."""
    rin = stdin or sys.stdin.buffer
    rout = stdout or sys.stdout.buffer
    write_lock = threading.Lock()
    stop = threading.Event()
    dispatcher = Dispatcher(engine, on_shutdown=stop.set)

    def answer(frame: bytes) -> None:
        try:
            text = dispatcher.handle_text(frame)
        except Exception:  # the dispatcher never raises; this is the last line of defence
            log.exception("unhandled error on a stdio frame")
            return
        if text is not None:
            with write_lock:
                rout.write(text.encode("utf-8") + b"\n")
                rout.flush()

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rcp-stdio") as pool:
        while not stop.is_set():
            line = rin.readline(MAX_FRAME_BYTES + 1)
            if not line:
                break  # EOF: the pool's exit waits for requests in flight
            if len(line) > MAX_FRAME_BYTES:
                while line and not line.endswith(b"\n"):  # drop the rest of the oversized frame
                    line = rin.readline(MAX_FRAME_BYTES)
                err = PayloadTooLarge(f"frame exceeds {MAX_FRAME_BYTES} bytes")
                with write_lock:
                    rout.write(json.dumps({"jsonrpc": "2.0", "id": None,
                                           "error": err.to_wire()}).encode("utf-8") + b"\n")
                    rout.flush()
                continue
            if line.strip():
                pool.submit(answer, line)
