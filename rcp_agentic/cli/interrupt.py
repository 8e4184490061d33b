"""Ctrl-C for the command: ``KeyboardInterrupt`` only where Python may unwind, else a quick exit.

Python runs a SIGINT handler in whatever frame the main thread is in. When that frame was
called back from a C++ extension (torch, onnxruntime), the exception crosses C++ and the
process aborts (``terminate called after throwing pybind11::error_already_set``). So the
first Ctrl-C raises at once only in a frame that waits (threading, futures, queues) or at
a :func:`checkpoint`; else it is noted, raised at the next checkpoint or when the command
returns, and if neither comes within ``GRACE_SECONDS`` the process prints ``interrupted``
and exits with 130 without unwinding (every write is one SQLite transaction, and a writer
killed between them is caught up by the next open). A second Ctrl-C ends it at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

from .output import say

GRACE_SECONDS = 3.0
# Frames of pure-Python waiting: what calls them is Python, never an extension.
_WAITING_MODULES = ("threading", "queue", "selectors", "concurrent.futures")

_requested = threading.Event()
_deadline: list[threading.Timer] = []   # the pending quick exit, while one is pending


def checkpoint() -> None:
    """Raise ``KeyboardInterrupt`` if Ctrl-C was pressed: call where unwinding is safe."""
    if _requested.is_set():
        _cancel_quick_exit()
        raise KeyboardInterrupt


def _cancel_quick_exit() -> None:
    while _deadline:
        _deadline.pop().cancel()  # unwinding now: no quick exit behind its back


def _exit_now() -> None:
    say("interrupted", err=True)
    os._exit(130)


def _in_waiting_frame(frame: FrameType | None) -> bool:
    module = frame.f_globals.get("__name__", "") if frame is not None else ""
    return any(module == name or module.startswith(name + ".") for name in _WAITING_MODULES)


def _on_sigint(_signum: int, frame: FrameType | None) -> None:
    if _requested.is_set():
        _exit_now()
    _requested.set()
    if _in_waiting_frame(frame):
        raise KeyboardInterrupt
    timer = threading.Timer(GRACE_SECONDS, _exit_now)
    timer.daemon = True
    _deadline.append(timer)
    timer.start()


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Run the command under this module's Ctrl-C handling (main thread only; elsewhere
    Python's own)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _requested.clear()
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
        checkpoint()  # pressed while an extension ran to the end
    finally:
        _cancel_quick_exit()  # the command is leaving, by an error or by the interrupt
        # A second Ctrl-C while the command unwinds (closing the engine) ends it at once.
        signal.signal(signal.SIGINT, signal.SIG_DFL if _requested.is_set() else previous)
        sys.stderr.flush()
