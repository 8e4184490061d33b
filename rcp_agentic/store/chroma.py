"""Chroma as the approximate (HNSW) dense index: embedded PersistentClient or a `chroma run` server.

One collection per (unit, level), cosine space, ids are docstore rowids. Chroma
never embeds anything itself: vectors are ours (its default embedding function
downloads a model at run time). It is a derived index: every vector also lives in
SQLite, so the engine can rebuild whatever Chroma lost.

A server is reached lazily and every request to it is bounded by ``timeout``
seconds (connecting included): a server that is down, hung or answers with an
error raises :class:`~rcp_agentic.errors.BackendUnavailable` (-32010, retryable,
``retryAfterMs``), never an exception of chromadb or httpx. A server that lost this
engine's collections (restarted on an empty directory) raises
:class:`CollectionLost`, drops the cached collection handles and sets ``lost``, so
the next call recreates the collections and the engine refills them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from ..errors import BackendUnavailable

log = logging.getLogger(__name__)

_ADD_BATCH = 1000
RETRY_AFTER_MS = 1000


class CollectionLost(BackendUnavailable):
    """The Chroma server no longer has a collection this engine created (it restarted empty)."""


def _unavailable_on_error(method: Callable[..., Any]) -> Callable[..., Any]:
    """Turn any Chroma/transport failure into BackendUnavailable (retryable, with retryAfterMs)."""

    @wraps(method)
    def wrapper(self: "ChromaVectors", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except BackendUnavailable:
            raise
        except Exception as exc:
            raise self._translate(exc) from exc

    return wrapper


def _persistent_client(path: Path) -> Any:
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False,
                                                                         allow_reset=False))


def _http_client(url: str, timeout: float) -> Any:
    """A chromadb HttpClient whose every request (connecting included) ends within ``timeout``."""
    import chromadb
    import httpx
    from chromadb.config import Settings

    parsed = urlparse(url if "://" in url else f"http://{url}")
    box: dict[str, Any] = {}

    def build() -> None:
        try:
            box["client"] = chromadb.HttpClient(
                host=parsed.hostname or "localhost",
                port=parsed.port or (443 if parsed.scheme == "https" else 8000),
                ssl=parsed.scheme == "https",
                settings=Settings(anonymized_telemetry=False, allow_reset=False))
        except Exception as exc:  # noqa: BLE001 - reported below as BackendUnavailable
            box["error"] = exc

    # chromadb's constructor already talks to the server, with no timeout of its own.
    builder = threading.Thread(target=build, name="chroma-connect", daemon=True)
    builder.start()
    builder.join(timeout)
    if builder.is_alive():
        raise BackendUnavailable(f"the Chroma server at {url} did not answer within {timeout:g} s",
                                 retryable=True, retryAfterMs=RETRY_AFTER_MS)
    if "error" in box:
        exc = box["error"]
        raise BackendUnavailable(f"cannot reach the Chroma server at {url}: "
                                 f"{type(exc).__name__}: {exc}", retryable=True,
                                 retryAfterMs=RETRY_AFTER_MS) from exc
    client = box["client"]
    # chromadb 1.x builds its httpx session with timeout=None and offers no setting for it.
    session = getattr(getattr(client, "_server", None), "_session", None)
    if not isinstance(session, httpx.Client):
        raise BackendUnavailable(f"cannot bound requests to the Chroma server at {url}: this "
                                 "chromadb version has no httpx session where expected",
                                 retryable=False)
    session.timeout = httpx.Timeout(timeout)
    return client


class ChromaVectors:
    """The engine's Chroma collections (thread-safe)."""

    def __init__(self, *, path: Path | None, url: str | None, prefix: str,
                 timeout: float = 10.0) -> None:
        if (path is None) == (url is None):
            raise ValueError("give exactly one of path (embedded Chroma) or url (a server)")
        self.url = url
        self.prefix = prefix
        self.timeout = timeout
        self._path = path
        self._lock = threading.Lock()
        self._client: Any = None
        self._collections: dict[tuple[str, int], Any] = {}
        # Set when the server lost collections; the engine refills every kind, then clears it.
        self.lost = False
        if path is not None:  # a local directory: a failure here is not an outage
            self._client = _persistent_client(path)

    def _name(self, unit: str, level: int) -> str:
        return f"{self.prefix}-{unit}-l{level}"

    def _translate(self, exc: Exception) -> BackendUnavailable:
        """The BackendUnavailable that says what really happened to a Chroma call."""
        import httpx
        from chromadb.errors import NotFoundError

        where = f"the Chroma server at {self.url}" if self.url else "embedded Chroma"
        if isinstance(exc, NotFoundError):
            with self._lock:
                self._collections.clear()  # stale handles: the collections are recreated
                self.lost = True
            return CollectionLost(
                f"{where} no longer has this engine's collections ({exc}); it was probably "
                "restarted on an empty directory. They are recreated and refilled from SQLite "
                "(the source of truth) on the next sync", retryable=True,
                retryAfterMs=RETRY_AFTER_MS)
        if isinstance(exc, httpx.TimeoutException):
            return BackendUnavailable(f"{where} did not answer within {self.timeout:g} s "
                                      f"({type(exc).__name__})", retryable=True,
                                      retryAfterMs=RETRY_AFTER_MS)
        if isinstance(exc, httpx.TransportError):
            return BackendUnavailable(f"cannot reach {where}: {type(exc).__name__}: {exc}",
                                      retryable=True, retryAfterMs=RETRY_AFTER_MS)
        return BackendUnavailable(f"{where} failed: {type(exc).__name__}: {exc}",
                                  retryable=True, retryAfterMs=RETRY_AFTER_MS)

    def _connected(self) -> Any:
        """The client, connecting first if there is none (not yet reached, or closed)."""
        client = self._client
        if client is None:
            with self._lock:
                if self.url:
                    self._client = self._client or _http_client(self.url, self.timeout)
                elif self._client is None:
                    assert self._path is not None
                    self._client = _persistent_client(self._path)
                client = self._client
        return client

    @_unavailable_on_error
    def collection(self, unit: str, level: int) -> Any:
        key = (unit, level)
        col = self._collections.get(key)
        if col is None:
            col = self._connected().get_or_create_collection(
                self._name(unit, level), embedding_function=None,
                configuration={"hnsw": {"space": "cosine"}})
            self._collections[key] = col
        return col

    @_unavailable_on_error
    def add(self, unit: str, level: int, rowids: list[int], vectors: np.ndarray) -> None:
        col = self.collection(unit, level)
        for i in range(0, len(rowids), _ADD_BATCH):
            col.upsert(ids=[str(r) for r in rowids[i:i + _ADD_BATCH]],
                       embeddings=vectors[i:i + _ADD_BATCH])

    @_unavailable_on_error
    def delete(self, unit: str, level: int, rowids: list[int]) -> None:
        col = self.collection(unit, level)
        for i in range(0, len(rowids), _ADD_BATCH):
            col.delete(ids=[str(r) for r in rowids[i:i + _ADD_BATCH]])

    @_unavailable_on_error
    def count(self, unit: str, level: int) -> int:
        return int(self.collection(unit, level).count())

    @_unavailable_on_error
    def all_ids(self, unit: str, level: int) -> set[int]:
        col = self.collection(unit, level)
        out: set[int] = set()
        offset, page = 0, 10_000
        while True:
            got = col.get(include=[], limit=page, offset=offset)["ids"]
            out.update(int(i) for i in got)
            if len(got) < page:
                return out
            offset += page

    @_unavailable_on_error
    def query(self, unit: str, level: int, vector: np.ndarray, n: int,
              rowids: list[int] | None = None) -> tuple[list[int], list[float]]:
        """Approximate top-``n`` by cosine: (rowids, cosine similarities), best first."""
        col = self.collection(unit, level)
        res = col.query(query_embeddings=[vector], n_results=n, include=["distances"],
                        ids=[str(r) for r in rowids] if rowids is not None else None)
        ids = [int(i) for i in res["ids"][0]]
        sims = [1.0 - float(d) for d in res["distances"][0]]
        return ids, sims

    def close(self) -> None:
        """Release the client. chromadb shares one embedded store per path in a process and
        keeps its HNSW index in memory: without this, reopening the engine in this process
        would not see vectors another process wrote meanwhile."""
        with self._lock:
            client, self._client = self._client, None
            self._collections.clear()
        if client is not None:
            try:
                client.close()
            except Exception as exc:  # noqa: BLE001 - closing must not fail the engine's close
                log.warning("closing the Chroma client failed: %s", exc)

    @_unavailable_on_error
    def drop_all(self) -> None:
        """Delete every collection of this engine (used when an engine directory is destroyed)."""
        client = self._connected()
        for col in client.list_collections():
            name = col if isinstance(col, str) else col.name
            if name.startswith(self.prefix + "-"):
                client.delete_collection(name)
        with self._lock:
            self._collections.clear()
