"""Chroma as the approximate (HNSW) dense index: embedded PersistentClient or a `chroma run` server.

One collection per (unit, level), cosine space, ids are docstore rowids. Chroma
never embeds anything itself: vectors are ours (its default embedding function
downloads a model at run time). It is a derived index: every vector also lives in
SQLite, so `reconcile` can rebuild whatever Chroma lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from ..errors import BackendUnavailable

log = logging.getLogger(__name__)

_ADD_BATCH = 1000


def _unavailable_on_error(method: Callable[..., Any]) -> Callable[..., Any]:
    """Turn any Chroma/transport failure into BackendUnavailable (retryable)."""

    @wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except BackendUnavailable:
            raise
        except Exception as exc:
            raise BackendUnavailable(f"Chroma is unavailable: {type(exc).__name__}: {exc}",
                                     retryable=True) from exc

    return wrapper


def _client(path: Path | None, url: str | None) -> Any:
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False, allow_reset=False)
    if url:
        parsed = urlparse(url if "://" in url else f"http://{url}")
        try:
            return chromadb.HttpClient(host=parsed.hostname or "localhost",
                                       port=parsed.port or (443 if parsed.scheme == "https" else 8000),
                                       ssl=parsed.scheme == "https", settings=settings)
        except Exception as exc:
            raise BackendUnavailable(f"cannot reach the Chroma server at {url}: {exc}",
                                     retryable=True) from exc
    assert path is not None
    return chromadb.PersistentClient(path=str(path), settings=settings)


class ChromaVectors:
    """The engine's Chroma collections."""

    def __init__(self, *, path: Path | None, url: str | None, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        self._client = _client(path, url)
        self._collections: dict[tuple[str, int], Any] = {}

    def _name(self, unit: str, level: int) -> str:
        return f"{self.prefix}-{unit}-l{level}"

    @_unavailable_on_error
    def collection(self, unit: str, level: int) -> Any:
        key = (unit, level)
        col = self._collections.get(key)
        if col is None:
            col = self._client.get_or_create_collection(
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

    def drop_all(self) -> None:
        """Delete every collection of this engine (used when an engine directory is destroyed)."""
        for col in self._client.list_collections():
            name = col if isinstance(col, str) else col.name
            if name.startswith(self.prefix + "-"):
                self._client.delete_collection(name)
        self._collections.clear()
