"""Milvus as the recall backend: dense ANN and BM25 in Milvus, for corpora past one machine.

``uri`` is a file path ending in ``.db`` (Milvus Lite, in process: tests and laptops)
or ``http://host:19530`` (a Milvus server or cluster); ``token`` authenticates.

:class:`MilvusRecall` answers the recall backend's calls (``store/recall.py``): it
compiles filters to Milvus expressions (``store/milvus_filter.py``) and searches each
kind's collection for the version read. The collections (one per unit kind and level,
synced from SQLite, the source of truth) are ``store/milvus_collections.py``; the
connection and its retry window, ``store/milvus_connection.py``.

Every failure of a Milvus call is BackendUnavailable (-32010, retryable,
``retryAfterMs``); writes stay committed in SQLite meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..errors import BackendUnavailable
from .filters import compile_filter
from ..ranking import ranked
from ..units import derived_kinds
from .docstore import Docstore
from .memindex import UnitIndex
from .milvus_collections import LITE_BM25_B, LITE_BM25_K1, Kinds, MilvusCollections
from .milvus_connection import MilvusConnection
from .milvus_filter import INEXACT_ROWS, compile_milvus_filter

# Milvus limits: one search returns at most 16,384 hits.
MAX_TOPK = 16_384
# Past this many rows with values Milvus cannot hold, a filter on the kind runs in SQLite.
_MAX_INEXACT = 10_000

Ranking = list[tuple[int, float]]


class MilvusRecall:
    """Recall in Milvus (see the module docstring); one per engine, over its
    ``collections``."""

    name = "milvus"
    scores_in_memory = False

    def __init__(self, store: Docstore, *, uri: str, token: str | None, prefix: str, dim: int,
                 k1: float, b: float,
                 timeout: float, dense_index: str = "AUTOINDEX") -> None:
        self.store = store
        self.uri = uri
        self.k1, self.b = k1, b
        self.collections = MilvusCollections(store, MilvusConnection(uri, token, timeout),
                                             prefix=prefix, dim=dim, k1=k1, b=b,
                                             dense_index=dense_index)
        self._inexact: dict[str, tuple[int, list[int]]] = {}

    # --- collections -------------------------------------------------------------------

    def collection(self, unit: str, level: int) -> str:
        """The alias of a kind's collection (on Milvus Lite, its snapshots' prefix)."""
        return self.collections.alias(unit, level)

    def sync(self, upto: int | None = None, kinds: Kinds | None = None) -> None:
        """Bring the collections of ``kinds`` (default: every stored kind) to version ``upto``
        (default: the last commit). Raises BackendUnavailable while Milvus cannot be reached."""
        self.collections.sync(upto, kinds)

    def after_commit(self) -> None:
        self.collections.after_commit()

    # --- search --------------------------------------------------------------------------

    def compile_filter(self, node: Any, fields: Mapping[str, str], index: UnitIndex
                       ) -> str | None:
        kinds = index.kinds
        derived = derived_kinds()
        if any(unit in derived for unit, _lv in kinds):
            return None  # a derived unit passes only if every leaf it covers does: SQLite
        self.collections.sync(index.version, kinds)
        columns = frozenset.intersection(*(self.collections.columns[k] for k in kinds))
        expr = compile_milvus_filter(node, fields, columns)
        if expr is None:
            return None
        # Rows holding a value Milvus cannot store faithfully are judged by SQLite.
        collections = self.collections
        inexact = [r for unit, level in kinds
                   for r in self._inexact_rows(collections.target(unit, level, index.version),
                                               collections.synced.get((unit, level), -1))]
        if not inexact:
            return expr
        if len(inexact) > _MAX_INEXACT:
            return None
        sql = compile_filter(node, dict(fields))
        passing = self.store.passing_rowids(inexact, sql.sql, sql.params)
        return f"({expr}) or rowid in [{','.join(map(str, passing))}]" if passing else expr

    def _inexact_rows(self, name: str, synced: int) -> list[int]:
        """Rowids of a collection's rows with ``b_inexact`` set (cached while it holds the
        same version)."""
        cached = self._inexact.get(name)
        if cached is not None and cached[0] == synced:
            return cached[1]
        found = self.collections.call(lambda client: client.query(
            name, filter=INEXACT_ROWS, output_fields=["rowid"], limit=_MAX_INEXACT + 1))
        rows = sorted(int(row["rowid"]) for row in found)
        self._inexact[name] = (synced, rows)
        return rows

    def _searches(self, index: UnitIndex, *, depth: int, allowed: np.ndarray | None,
                  native: str | None) -> Iterator[tuple[str, str, int]]:
        """(collection, filter expression, limit) of each kind worth searching."""
        version = index.version
        for unit, level in index.kinds:
            expr = f"v_from <= {version} and v_to > {version}"
            if native:
                expr += f" and ({native})"
            limit = depth
            if allowed is not None:
                mine = np.intersect1d(index.kind_positions(unit, level), allowed,
                                      assume_unique=True)
                if len(mine) == 0:
                    continue
                expr += f" and rowid in [{','.join(map(str, index.rowids[mine].tolist()))}]"
                limit = min(depth, len(mine))
            if limit > 0:
                yield self.collections.target(unit, level, version), expr, min(limit, MAX_TOPK)

    def _search(self, index: UnitIndex, field: str, data: Any, metric: str, *, depth: int,
                allowed: np.ndarray | None, native: str | None) -> Ranking:
        if index.size == 0 or (allowed is not None and len(allowed) == 0):
            return []
        self.collections.sync(index.version, index.kinds)
        plans = list(self._searches(index, depth=depth, allowed=allowed, native=native))

        def run(client: Any) -> list[Any]:
            return [client.search(name, data=[data], anns_field=field, limit=limit,
                                  filter=expr, output_fields=["rowid"],
                                  search_params={"metric_type": metric})[0]
                    for name, expr, limit in plans]

        out: Ranking = []
        for found in self.collections.call(run):
            for hit in found:
                pos = index.position.get(int(hit.id))
                if pos is not None:  # else a derived unit not valid at this version
                    out.append((pos, _score(metric, hit.distance)))
        return ranked(out)[:depth]

    def dense(self, index: UnitIndex, qvec: np.ndarray, *,
              depth: int, allowed: np.ndarray | None = None, native: Any = None) -> Ranking:
        return self._search(index, "dense", np.asarray(qvec, dtype=np.float32).tolist(), "IP",
                            depth=depth, allowed=allowed, native=native)

    def _text(self, term_ids: list[int]) -> str:
        return " ".join(self.store.terms_of(term_ids))

    def sparse(self, index: UnitIndex, term_ids: list[int], *,
               depth: int, allowed: np.ndarray | None = None, native: Any = None) -> Ranking:
        text = self._text(term_ids)
        if not text:
            return []
        return self._search(index, "sparse", text, "BM25", depth=depth, allowed=allowed,
                            native=native)

    def sparse_scores(self, index: UnitIndex, term_ids: list[int],
                      positions: np.ndarray) -> np.ndarray:
        scores = np.zeros(len(positions), dtype=np.float64)
        text = self._text(term_ids)
        if not text or len(positions) == 0:
            return scores
        found = dict(self._search(index, "sparse", text, "BM25", depth=len(positions),
                                  allowed=np.unique(positions), native=None))
        for i, p in enumerate(np.asarray(positions).tolist()):
            scores[i] = found.get(p, 0.0)
        return scores

    def sparse_ceiling(self, index: UnitIndex, term_ids: list[int]) -> float:
        """Σ over the query terms of the best BM25 one term alone reaches (one search of one
        hit per term and kind), on Milvus's own BM25 scale."""
        terms = self.store.terms_of(term_ids)
        if not terms or index.size == 0:
            return 0.0
        self.collections.sync(index.version, index.kinds)
        expr = f"v_from <= {index.version} and v_to > {index.version}"

        def run(client: Any) -> list[Any]:
            return [client.search(self.collections.target(u, lv, index.version), data=terms,
                                  anns_field="sparse",
                                  limit=1, filter=expr, output_fields=["rowid"],
                                  search_params={"metric_type": "BM25"})
                    for u, lv in index.kinds]

        best = np.zeros(len(terms))
        for per_term in self.collections.call(run):
            for i, found in enumerate(per_term):
                if len(found):
                    best[i] = max(best[i], _score("BM25", found[0].distance))
        return float(best.sum())

    # --- state ---------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Per collection: rows held and the version synced (or why Milvus cannot say)."""
        out: dict[str, Any] = {"backend": self.name, "uri": self.uri,
                               "truncated_terms": self.collections.truncated,
                               "bm25": {"k1": self.k1, "b": self.b}}
        if self.collections.lite:  # measured: Milvus Lite 3.2 ignores bm25_k1 / bm25_b
            out["bm25"] = {"k1": LITE_BM25_K1, "b": LITE_BM25_B,
                           "configured": {"k1": self.k1, "b": self.b}}
        try:
            out["collections"] = self.collections.state()
        except BackendUnavailable as exc:
            out["error"] = exc.message
        return out

    def drop_all(self) -> None:
        """Drop every collection of this engine (tests and ``--rebuild``)."""
        self.collections.drop_all()

    def close(self) -> None:
        self.collections.close()


def _score(metric: str, distance: float) -> float:
    """A similarity, larger is better: Milvus Lite reports BM25 negated, a server does not."""
    return abs(float(distance)) if metric == "BM25" else float(distance)
