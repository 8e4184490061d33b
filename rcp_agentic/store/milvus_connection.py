"""The Milvus backend's connection: one client per engine, opened on first use.

Every request carries the engine's timeout. Every failure of a Milvus call is
BackendUnavailable (-32010, retryable, ``retryAfterMs``) and opens a retry window
(:class:`.outage.OutageWindow`) in which calls fail at once; writes stay committed in
SQLite meanwhile. Milvus Lite runs in this process: its server is stopped when the last
engine of the process using its file closes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import BackendUnavailable, InvalidParams
from .outage import OutageWindow

# The backend's one logger, whichever of its modules (milvus*.py) logs.
log = logging.getLogger("rcp_agentic.store.milvus")

RETRY_AFTER_MS = 1000


class _Bounded:
    """A MilvusClient whose every request carries ``timeout`` (pymilvus waits forever by
    default, so a hung server would hold a retrieve's thread)."""

    _LOCAL = frozenset({"create_schema", "prepare_index_params", "close"})

    def __init__(self, client: Any, timeout: float) -> None:
        self._client = client
        self._timeout = timeout

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if name in self._LOCAL:
            return method
        return lambda *args, **kwargs: method(*args, timeout=self._timeout, **kwargs)


# Engines of this process using each Milvus Lite file: its in-process server (threads,
# files) is stopped when the last one closes.
_lite_users: dict[str, int] = {}
_lite_lock = threading.Lock()


def _hold_lite(uri: str) -> None:
    with _lite_lock:
        key = os.path.abspath(uri)
        _lite_users[key] = _lite_users.get(key, 0) + 1


def _release_lite(uri: str) -> None:
    key = os.path.abspath(uri)
    with _lite_lock:
        _lite_users[key] -= 1
        if _lite_users[key]:
            return
        del _lite_users[key]
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:
        return
    server_manager_instance.release_server(key)


def _connect(uri: str, token: str | None, timeout: float) -> Any:
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise InvalidParams("the Milvus backend needs pymilvus: pip install "
                            "'rcp-agentic[milvus]'", field="backend") from None
    return _Bounded(MilvusClient(uri=uri, token=token or "", timeout=timeout), timeout)


class MilvusConnection:
    """The client of one Milvus (a ``.db`` file for Milvus Lite, or a server's URI) and the
    retry window of its outages."""

    def __init__(self, uri: str, token: str | None, timeout: float) -> None:
        self.uri = uri
        self._token = token
        self.timeout = timeout
        self._client: Any = None
        self._closed = False
        if uri.endswith(".db"):
            _hold_lite(uri)
        self._outage = OutageWindow()
        # Calls that failed so far: what the owner knew of the server may be stale after one.
        self.failures = 0

    @property
    def where(self) -> str:
        return f"Milvus Lite at {self.uri}" if self.uri.endswith(".db") else f"Milvus at {self.uri}"

    def _down(self) -> BackendUnavailable:
        wait_ms = self._outage.wait_ms()
        return BackendUnavailable(
            f"{self.where} is unavailable: {self._outage.error}. Every write is committed "
            "in SQLite (the source of truth) and is copied to Milvus as soon as it answers",
            retryable=True, retryAfterMs=max(wait_ms, RETRY_AFTER_MS))

    def _failed(self, exc: Exception, started: float) -> BackendUnavailable:
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
        if self.uri.endswith(".db") and "Open local milvus failed" in str(exc):
            error += (" (Milvus Lite opens a .db in one process only; for several "
                      f"processes run `milvus-lite server --data-dir {self.uri}` and "
                      "use --milvus-uri http://127.0.0.1:19530)")
        self._outage.failed(error, started)
        self.failures += 1
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: BLE001 - a broken connection may fail to close too
                pass
            self._client = None
        log.warning("%s failed: %s", self.where, self._outage.error)
        return self._down()

    def call(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(client)``; any failure becomes BackendUnavailable and a retry window."""
        if self._outage.open():
            raise self._down()
        started = time.monotonic()
        try:
            if self._client is None:
                self._client = _connect(self.uri, self._token, self.timeout)
            out = fn(self._client)
        except (BackendUnavailable, InvalidParams):
            raise
        except Exception as exc:  # noqa: BLE001 - pymilvus, grpc and socket errors alike
            raise self._failed(exc, started) from exc
        self._outage.close()
        return out

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None
        if self.uri.endswith(".db") and not self._closed:
            self._closed = True
            _release_lite(self.uri)
