"""The recall backend seam: where dense and sparse recall over stored units run.

The engine keeps one catalogue, the SQLite docstore (documents, unit text, what a derived
unit covers, the graph, versions), and asks a recall backend for the two lists that grow
with the corpus: dense (vectors) and sparse (BM25). Above the seam nothing changes with the
backend: every stage and unit kind works on the positions of a :class:`UnitIndex`.

- :class:`EmbeddedRecall` (the default): exact cosine and BM25 in this process's memory,
  Chroma's HNSW above ``dense_exact_max`` vectors of one kind.
- ``MilvusRecall`` (``store/milvus.py``): a Milvus collection per kind, synced from the
  docstore; Milvus scores the vectors and runs BM25 over the analysed text.

A backend answers in positions of the index it is given and drops any row that index does
not hold (another snapshot's, or a derived unit not valid at the served version).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..ranking import ranked
from .chroma import ChromaVectors
from .chroma_sync import ChromaSync
from .docstore import Docstore
from .memindex import Ranked, UnitIndex

Ranking = list[tuple[int, float]]


class RecallBackend(Protocol):
    """What the retrieve pipeline asks of a backend (every list best first, by position)."""

    name: str
    #: Whether the engine's in-memory index keeps BM25 postings (and, up to
    #: ``dense_exact_max``, vectors): only when this backend scores them.
    scores_in_memory: bool

    # ``index`` is the served snapshot of the pool (``index.kinds`` at ``index.version``).

    def compile_filter(self, node: Any, fields: Mapping[str, str], index: UnitIndex
                       ) -> Any | None:
        """The filter in the backend's own syntax, or None: the engine then selects the
        allowed units in SQLite and passes them as ``allowed``."""

    def dense(self, index: UnitIndex, qvec: np.ndarray, *,
              depth: int, allowed: np.ndarray | None = None, native: Any = None) -> Ranking:
        """The ``depth`` nearest units by cosine among ``allowed`` positions and ``native``."""

    def sparse(self, index: UnitIndex, term_ids: list[int], *,
               depth: int, allowed: np.ndarray | None = None, native: Any = None) -> Ranking:
        """The ``depth`` best units by BM25 for the analysed query terms ``term_ids``."""

    def sparse_scores(self, index: UnitIndex, term_ids: list[int],
                      positions: np.ndarray) -> np.ndarray:
        """BM25 of the units at ``positions`` (0 where no query term occurs)."""

    def sparse_ceiling(self, index: UnitIndex, term_ids: list[int]) -> float:
        """The largest BM25 any unit of the pool could score for these terms."""

    def after_commit(self) -> None:
        """Bring the backend up to the last commit, best effort (never raises)."""

    def sync(self) -> None:
        """Bring the backend up to the last commit now; BackendUnavailable if it cannot."""

    def status(self) -> dict[str, Any]:
        """What the backend holds and whether it is in step, for ``stats`` and the CLI."""

    def close(self) -> None:
        """Release connections."""


def _pairs(ranked: Ranked) -> Ranking:
    return list(zip(ranked.positions.tolist(), ranked.scores.tolist()))


class EmbeddedRecall:
    """Recall in this process: numpy and precomputed BM25 impacts, Chroma's HNSW for kinds
    whose vectors are not held in memory (more than ``dense_exact_max``).

    Owns the engine's Chroma (``chroma``: embedded in ``path``, or the server at ``url``)
    and keeps it in step with the docstore (``chroma_sync``, :mod:`.chroma_sync`).
    """

    name = "embedded"
    scores_in_memory = True

    def __init__(self, store: Docstore, *, path: Path | None, url: str | None, prefix: str,
                 timeout: float) -> None:
        self.store = store
        self.chroma = ChromaVectors(path=path, url=url, prefix=prefix, timeout=timeout)
        self.chroma_sync = ChromaSync(store, self.chroma, timeout=timeout)

    def compile_filter(self, node: Any, fields: Mapping[str, str], index: UnitIndex) -> None:
        return None  # filters run in SQLite, which this backend shares

    def dense(self, index: UnitIndex, qvec: np.ndarray, *,
              depth: int, allowed: np.ndarray | None = None, native: Any = None) -> Ranking:
        if index.size == 0 or (allowed is not None and len(allowed) == 0):
            return []
        if index.vectors is not None:
            return _pairs(index.dense(qvec, depth, allowed))
        out: Ranking = []
        for unit, level in index.kinds:
            in_kind = index.kind_positions(unit, level)
            if allowed is not None:
                in_kind = np.intersect1d(in_kind, allowed, assume_unique=True)
                if len(in_kind) == 0:
                    continue
            rowids = None if allowed is None else index.rowids[in_kind].tolist()
            # Chroma also holds rows of retained older versions (and derived rows no longer
            # valid); ask for enough to cover them.
            hidden = 0 if rowids is not None else max(
                0, self.store.stored_count(unit, level) - len(in_kind))
            n = min(depth, len(in_kind)) + hidden
            if n == 0:
                continue
            got, sims = self.chroma_sync.query(unit, level, qvec, n, rowids)
            out.extend((index.position[r], s) for r, s in zip(got, sims) if r in index.position)
        return ranked(out)[:depth]

    def sparse(self, index: UnitIndex, term_ids: list[int], *,
               depth: int, allowed: np.ndarray | None = None, native: Any = None) -> Ranking:
        return _pairs(index.sparse(term_ids, depth, allowed))

    def sparse_scores(self, index: UnitIndex, term_ids: list[int],
                      positions: np.ndarray) -> np.ndarray:
        return index.sparse_scores(term_ids, positions)

    def sparse_ceiling(self, index: UnitIndex, term_ids: list[int]) -> float:
        return index.sparse_ceiling(term_ids)

    def after_commit(self) -> None:
        self.chroma_sync.after_commit()

    def sync(self) -> None:
        self.chroma_sync.sync_now()

    def status(self) -> dict[str, Any]:
        return {"backend": self.name, "chroma": self.chroma.url or "embedded"}

    def close(self) -> None:
        self.chroma.close()
