"""Milvus as the recall backend: dense ANN and BM25 in Milvus, for corpora past one machine.

``uri`` is a file path ending in ``.db`` (Milvus Lite, in process: tests and laptops)
or ``http://host:19530`` (a Milvus server or cluster); ``token`` authenticates.

Layout: one collection per unit kind and level, reached through the alias
``<prefix>_<unit>_<level>``, so BM25 keeps each kind's own statistics as the
in-memory index does. A row is a unit: ``rowid`` (the docstore's, primary key),
``uid``, the versions that added and retired it (``v_from``, ``v_to``; live rows
carry ``LIVE``), typed scalar columns for the built-in and user filter fields
(``store/milvus_filter.py``), ``terms`` — the unit's text analysed by the engine's
own analyzer (lowercase, stopwords, Snowball stems), which Milvus's standard
tokenizer splits back into the same terms — its ``dense`` vector and ``sparse``,
the BM25 vector Milvus computes from ``terms``. Milvus scores BM25 at query time
from its own statistics over every row it holds (retained older versions included).

Sync: SQLite stays the source of truth. On a Milvus server each collection records
in its ``rcp.synced`` property the index version it holds; bringing it to version
``v`` upserts the rows added since (idempotent per rowid), writes the new ``v_to``
of rows retired since (a partial upsert), deletes the rows no retained version can
see, flushes (search on unflushed segments is ~40x slower) and only then moves the
property. A crash or an outage at any step leaves the property behind, so the next
sync redoes the step; a read pins ``v_from <= v < v_to``, so rows of a later commit
are never visible early, and a read syncs to its version first (or raises). A
collection that disappeared (a server restarted empty) is recreated and refilled.
BM25 there counts every row the collection holds, retained older versions included
(as Lucene counts deleted documents until a merge).

Milvus Lite scores BM25 with each segment's own statistics (every flush makes a
segment) over every row it holds, so there a read at version ``v`` searches a
snapshot collection of the kind holding exactly its rows visible at ``v``, written
whole on the first read and marked complete last (``rcp.complete``); versions with
the same rows share one, and the newest ``snapshots_retained`` are kept. BM25 is then
exact at every version, at the cost of a rewrite of the kind after each write —
right for tests and a laptop, not for a large corpus.

Every failure of a Milvus call is BackendUnavailable (-32010, retryable,
``retryAfterMs``); writes stay committed in SQLite meanwhile.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import BackendUnavailable, InvalidParams
from ..models.analyzer import analyze
from ..ranking import ranked
from ..units import derived_kinds
from .docstore import Docstore
from .memindex import UnitIndex
from .outage import OutageWindow
from ..pipeline.filters import compile_filter
from .milvus_filter import INEXACT_ROWS, add_columns, column_values, compile_milvus_filter

log = logging.getLogger(__name__)

LIVE = 2**62  # v_to of a row no version has retired
RETRY_AFTER_MS = 1000
# Milvus limits: a VARCHAR holds at most 65,535 bytes; one search returns at most 16,384 hits.
MAX_VARCHAR_BYTES = 65_535
MAX_TOPK = 16_384
_UID_BYTES = 2048
_BATCH = 500
# Past this many rows with values Milvus cannot hold, a filter on the kind runs in SQLite.
_MAX_INEXACT = 10_000
# What Milvus Lite 3.2 scores BM25 with, whatever the index's bm25_k1 / bm25_b say.
LITE_BM25_K1, LITE_BM25_B = 1.5, 0.75
_SYNCED = "rcp.synced"
_COMPLETE = "rcp.complete"
_NAME = re.compile(r"[^A-Za-z0-9_]")

Kinds = Sequence[tuple[str, int]]
Ranking = list[tuple[int, float]]


def _clip(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` UTF-8 bytes at a space (whether it was cut)."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text, False
    cut = raw[:limit].decode("utf-8", "ignore")
    return cut[:cut.rfind(" ")] if " " in cut else cut, True


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


class MilvusRecall:
    """Recall in Milvus (see the module docstring); one per engine."""

    name = "milvus"
    scores_in_memory = False

    def __init__(self, store: Docstore, *, uri: str, token: str | None, prefix: str, dim: int,
                 k1: float, b: float,
                 timeout: float, dense_index: str = "AUTOINDEX") -> None:
        self.store = store
        self.uri = uri
        self._token = token
        self.prefix = _NAME.sub("_", prefix)
        self.dim = dim
        self.k1, self.b = k1, b
        self.timeout = timeout
        self.dense_index = dense_index
        self._client: Any = None
        self._lock = threading.RLock()
        self._synced: dict[tuple[str, int], int] = {}  # what this process knows each holds
        self._columns: dict[tuple[str, int], frozenset[str]] = {}
        self._inexact: dict[str, tuple[int, list[int]]] = {}
        self._lite: bool | None = None  # Milvus Lite (per-segment BM25), known once connected
        self._closed = False
        # Milvus Lite: the snapshot collection of each (unit, level, version) read, and the
        # collections loaded by this process.
        self._targets: dict[tuple[str, int, int], str] = {}
        self._loaded: set[str] = set()
        if uri.endswith(".db"):
            _hold_lite(uri)
        self._outage = OutageWindow()
        self.truncated = 0  # units whose analysed text exceeded a VARCHAR (BM25 on the head)

    # --- connection and errors -----------------------------------------------------------

    @property
    def where(self) -> str:
        return f"Milvus Lite at {self.uri}" if self.uri.endswith(".db") else f"Milvus at {self.uri}"

    def _down(self) -> BackendUnavailable:
        wait_ms = self._outage.wait_ms()
        return BackendUnavailable(
            f"{self.where} is unavailable: {self._outage.error}. Every write is committed in SQLite "
            "(the source of truth) and is copied to Milvus as soon as it answers",
            retryable=True, retryAfterMs=max(wait_ms, RETRY_AFTER_MS))

    def _failed(self, exc: Exception, started: float) -> BackendUnavailable:
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
        if self.uri.endswith(".db") and "Open local milvus failed" in str(exc):
            error += (" (Milvus Lite opens a .db in one process only; for several "
                      f"processes run `milvus-lite server --data-dir {self.uri}` and "
                      "use --milvus-uri http://127.0.0.1:19530)")
        self._outage.failed(error, started)
        self._synced.clear()  # re-read every collection's state once it answers
        self._columns.clear()
        self._targets.clear()
        self._loaded.clear()
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: BLE001 - a broken connection may fail to close too
                pass
            self._client = None
        log.warning("%s failed: %s", self.where, self._outage.error)
        return self._down()

    def _call(self, fn: Callable[[Any], Any]) -> Any:
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

    # --- collections -------------------------------------------------------------------

    def collection(self, unit: str, level: int) -> str:
        return f"{self.prefix}_{_NAME.sub('_', unit)}_{level}"

    def _create(self, client: Any, name: str, fields: Mapping[str, str]) -> None:
        from pymilvus import DataType, Function, FunctionType

        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("rowid", DataType.INT64, is_primary=True)
        schema.add_field("uid", DataType.VARCHAR, max_length=_UID_BYTES)
        schema.add_field("v_from", DataType.INT64)
        schema.add_field("v_to", DataType.INT64)
        add_columns(schema, fields)
        schema.add_field("terms", DataType.VARCHAR, max_length=MAX_VARCHAR_BYTES,
                         enable_analyzer=True, analyzer_params={"tokenizer": "standard"})
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=self.dim)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(Function(name="bm25", function_type=FunctionType.BM25,
                                     input_field_names=["terms"], output_field_names=["sparse"]))
        index = client.prepare_index_params()
        # Milvus Lite's AUTOINDEX is approximate at candidate depth; it is the correctness
        # target, so there the default is exact search.
        dense_index = ("FLAT" if self.dense_index == "AUTOINDEX" and self._is_lite(client)
                       else self.dense_index)
        index.add_index("dense", index_type=dense_index, metric_type="IP")
        index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                        params={"bm25_k1": self.k1, "bm25_b": self.b})
        client.create_collection(name, schema=schema, properties={_SYNCED: "0"})
        # Not waiting for the (empty) collection's index build: pymilvus polls that every 0.5 s.
        client.create_index(name, index, sync=False)
        client.load_collection(name)

    def _is_lite(self, client: Any) -> bool:
        if self._lite is None:
            self._lite = str(client.get_server_version()).startswith("milvus_lite")
            if self._lite and (self.k1, self.b) != (LITE_BM25_K1, LITE_BM25_B):
                log.info("Milvus Lite scores BM25 with k1=%s, b=%s whatever bm25_k1=%s, "
                            "bm25_b=%s say: sparse scores differ from the embedded backend's",
                            LITE_BM25_K1, LITE_BM25_B, self.k1, self.b)
        return self._lite

    def _open(self, client: Any, unit: str, level: int) -> tuple[str | None, int]:
        """The collection the kind's alias names (None if there is none yet) and the version
        it holds, loaded for search."""
        alias = self.collection(unit, level)
        if alias not in client.list_aliases().get("aliases", []):
            return None, -1
        physical = str(client.describe_alias(alias)["collection_name"])
        client.load_collection(physical)
        return physical, self._describe(client, unit, level, physical)

    def _describe(self, client: Any, unit: str, level: int, physical: str) -> int:
        info = client.describe_collection(physical)
        self._columns[(unit, level)] = frozenset(f["name"] for f in info.get("fields", []))
        return int((info.get("properties") or {}).get(_SYNCED, "0"))

    def _publish(self, client: Any, alias: str, physical: str, replaced: str | None) -> None:
        """Point the kind's alias at ``physical`` and drop its other generations."""
        if replaced is None:
            client.create_alias(physical, alias)
        else:
            client.alter_alias(physical, alias)
        for name in client.list_collections():
            if name.startswith(alias + "_g") and name != physical:
                client.drop_collection(name)

    def _row(self, unit: str, r: dict[str, Any], fields: Mapping[str, str],
             columns: frozenset[str]) -> dict[str, Any]:
        terms, cut = _clip(" ".join(analyze(r["text"])), MAX_VARCHAR_BYTES)
        self.truncated += cut
        values = column_values(unit, r["idx"], r["doc"], r["page_start"], r["page_end"],
                               fields)
        return {"rowid": r["rowid"], "uid": _clip(r["uid"], _UID_BYTES)[0],
                "v_from": r["v_from"], "v_to": r["v_to"] if r["v_to"] is not None else LIVE,
                **{k: v for k, v in values.items() if k in columns},
                "terms": terms, "dense": r["vector"].tolist()}

    def _sync_kind(self, client: Any, unit: str, level: int, upto: int) -> None:
        """A Milvus server: bring one kind to ``upto``, incrementally into its collection (the
        first time by filling a new collection and pointing the kind's alias at it)."""
        alias = self.collection(unit, level)
        current, held = self._open(client, unit, level)
        if current is not None and held >= upto:
            self._synced[(unit, level)] = held
            return
        rebuild = current is None
        target = current
        if rebuild:
            target = f"{alias}_g{uuid.uuid4().hex[:8]}"
            self._create(client, target, self.store.filter_fields.filterable())
            self._describe(client, unit, level, target)
            held = -1
        assert target is not None
        fields = dict(self.store.filter_fields.filterable())
        columns = self._columns[(unit, level)]
        last = 0
        while rows := self.store.feed.added_rows(unit, level, held, upto, last, _BATCH):
            client.upsert(target, [self._row(unit, r, fields, columns) for r in rows])
            last = rows[-1]["rowid"]
        if not rebuild:
            retired = self.store.feed.retired_rows(unit, level, held, upto)
            for i in range(0, len(retired), _BATCH):
                client.upsert(target, [{"rowid": r, "v_to": v}
                                       for r, v in retired[i:i + _BATCH]], partial_update=True)
            client.delete(target, filter=f"v_to <= {self.store.oldest_retained(upto)}")
        client.flush(target)
        client.alter_collection_properties(target, properties={_SYNCED: str(upto)})
        if rebuild:
            self._publish(client, alias, target, current)
        self._synced[(unit, level)] = upto

    def _snapshot(self, client: Any, unit: str, level: int, version: int) -> str:
        """Milvus Lite: a collection holding exactly the kind's rows visible at ``version``,
        built on first use and shared by every version with the same rows.

        Milvus Lite scores BM25 with each segment's statistics (every flush makes one) over
        every row it holds, so only a collection written whole, with that version's rows
        alone, scores as the embedded backend does at that version. A build writes a
        collection of its own name (``<alias>_s<newest v_from>_<rows>_<build>``) and marks
        it complete last, so a read only ever uses a complete one, whichever process built
        it; then every copy of the kind no retained version reads is dropped.
        """
        alias = self.collection(unit, level)
        signature = self.store.feed.visible_signature(unit, level, version)
        prefix = "{}_s{}_{}_".format(alias, *signature)
        existing = [c for c in client.list_collections() if c.startswith(alias + "_s")]
        done = sorted(c for c in existing if c.startswith(prefix) and self._complete(client, c))
        if done:
            name = done[0]
            if name not in self._loaded:
                client.load_collection(name)
            columns = self._columns_of(client, name)
        else:
            name = prefix + uuid.uuid4().hex[:8]
            self._create(client, name, self.store.filter_fields.filterable())
            fields = dict(self.store.filter_fields.filterable())
            columns = self._columns_of(client, name)
            last = 0
            while rows := self.store.feed.rows_at(unit, level, version, last, _BATCH):
                client.insert(name, [self._row(unit, r, fields, columns) for r in rows])
                last = rows[-1]["rowid"]
            client.flush(name)
            client.alter_collection_properties(name, properties={_COMPLETE: "1"})
            current = self.store.index_version()
            read = {"{}_s{}_{}_".format(alias, *self.store.feed.visible_signature(unit, level, v))
                    for v in range(self.store.oldest_retained(current), current + 1)}
            # A copy no retained version reads, a duplicate, or a build cut short (or another
            # process's build under way: it fails, -32010, and its retry finds this one).
            for stale in existing:
                if stale[:stale.rfind("_") + 1] not in read or stale.startswith(prefix):
                    client.drop_collection(stale)
                    self._loaded.discard(stale)
                    self._targets = {k: v for k, v in self._targets.items() if v != stale}
        self._columns[(unit, level)] = columns
        self._loaded.add(name)
        return name

    @staticmethod
    def _complete(client: Any, name: str) -> bool:
        return (client.describe_collection(name).get("properties") or {}).get(_COMPLETE) == "1"

    @staticmethod
    def _snapshot_order(alias: str, name: str) -> tuple[int, int]:
        """Version order of a kind's snapshots: newer rows first by ``v_from``, and between
        equal ones (only deletes in between) fewer rows is later."""
        newest, count = name[len(alias) + 2:].split("_")[:2]
        return int(newest), -int(count)

    def _columns_of(self, client: Any, name: str) -> frozenset[str]:
        info = client.describe_collection(name)
        return frozenset(f["name"] for f in info.get("fields", []))

    def _target(self, unit: str, level: int, version: int) -> str:
        """The collection a read of the kind at ``version`` searches (after :meth:`sync`)."""
        return self._targets.get((unit, level, version)) or self.collection(unit, level)

    def sync(self, upto: int | None = None, kinds: Kinds | None = None) -> None:
        """Bring the collections of ``kinds`` (default: every stored kind) to version ``upto``
        (default: the last commit). Raises BackendUnavailable while Milvus cannot be reached."""
        version = self.store.index_version() if upto is None else upto
        wanted = list(kinds) if kinds is not None else self.store.feed.stored_kinds()
        with self._lock:
            todo = [k for k in wanted if self._synced.get(k, -1) < version
                    and (k[0], k[1], version) not in self._targets]
            if not todo:
                return

            def run(client: Any) -> None:
                for unit, level in todo:
                    if self._is_lite(client):
                        self._targets[(unit, level, version)] = self._snapshot(
                            client, unit, level, version)
                    else:
                        self._sync_kind(client, unit, level, version)

            self._call(run)
            if kinds is None:
                self._clear_outbox()

    def after_commit(self) -> None:
        """Sync every kind now (Milvus Lite: build a read's snapshot when it is first read)."""
        try:
            if self._call(self._is_lite):
                self._clear_outbox()
            else:
                self.sync()
        except BackendUnavailable as exc:
            log.warning("Milvus is behind SQLite (synced on the next read): %s", exc.message)

    def _clear_outbox(self) -> None:
        # The outbox queues Chroma's copy, which this backend replaces (an engine opened with
        # the embedded backend again compares all of Chroma with SQLite first).
        last = self.store.feed.last_seq()
        if last is not None:
            self.store.feed.clear_outbox(last)

    # --- search --------------------------------------------------------------------------

    def compile_filter(self, node: Any, fields: Mapping[str, str], index: UnitIndex
                       ) -> str | None:
        kinds = index.kinds
        derived = derived_kinds()
        if any(unit in derived for unit, _lv in kinds):
            return None  # a derived unit passes only if every leaf it covers does: SQLite
        self.sync(index.version, kinds)
        columns = frozenset.intersection(*(self._columns[k] for k in kinds))
        expr = compile_milvus_filter(node, fields, columns)
        if expr is None:
            return None
        # Rows holding a value Milvus cannot store faithfully are judged by SQLite.
        inexact = [r for unit, level in kinds
                   for r in self._inexact_rows(self._target(unit, level, index.version),
                                               self._synced.get((unit, level), -1))]
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
        found = self._call(lambda client: client.query(
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
                yield self._target(unit, level, version), expr, min(limit, MAX_TOPK)

    def _search(self, index: UnitIndex, field: str, data: Any, metric: str, *, depth: int,
                allowed: np.ndarray | None, native: str | None) -> Ranking:
        if index.size == 0 or (allowed is not None and len(allowed) == 0):
            return []
        self.sync(index.version, index.kinds)
        plans = list(self._searches(index, depth=depth, allowed=allowed, native=native))

        def run(client: Any) -> list[Any]:
            return [client.search(name, data=[data], anns_field=field, limit=limit,
                                  filter=expr, output_fields=["rowid"],
                                  search_params={"metric_type": metric})[0]
                    for name, expr, limit in plans]

        out: Ranking = []
        for found in self._call(run):
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
        self.sync(index.version, index.kinds)
        expr = f"v_from <= {index.version} and v_to > {index.version}"

        def run(client: Any) -> list[Any]:
            return [client.search(self._target(u, lv, index.version), data=terms,
                                  anns_field="sparse",
                                  limit=1, filter=expr, output_fields=["rowid"],
                                  search_params={"metric_type": "BM25"})
                    for u, lv in index.kinds]

        best = np.zeros(len(terms))
        for per_term in self._call(run):
            for i, found in enumerate(per_term):
                if len(found):
                    best[i] = max(best[i], _score("BM25", found[0].distance))
        return float(best.sum())

    # --- state ---------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Per collection: rows held and the version synced (or why Milvus cannot say)."""
        out: dict[str, Any] = {"backend": self.name, "uri": self.uri,
                               "truncated_terms": self.truncated,
                               "bm25": {"k1": self.k1, "b": self.b}}
        if self._lite:  # measured: Milvus Lite 3.2 ignores bm25_k1 / bm25_b
            out["bm25"] = {"k1": LITE_BM25_K1, "b": LITE_BM25_B,
                           "configured": {"k1": self.k1, "b": self.b}}
        try:
            def run(client: Any) -> dict[str, Any]:
                kinds: dict[str, dict[str, Any]] = {}
                names = set(client.list_collections())
                for unit, level in self.store.feed.stored_kinds():
                    name = self.collection(unit, level)
                    if self._is_lite(client):  # the newest snapshot collection of the kind
                        alias = name
                        snaps = sorted((c for c in names if c.startswith(alias + "_s")
                                        and self._complete(client, c)),
                                       key=lambda c: self._snapshot_order(alias, c))
                        name = snaps[-1] if snaps else ""
                    elif not client.has_collection(name):
                        name = ""
                    if not name:
                        kinds[f"{unit}/{level}"] = {"collection": None, "rows": 0,
                                                    "synced": None}
                        continue
                    props = client.describe_collection(name).get("properties") or {}
                    rows = client.get_collection_stats(name).get("row_count", 0)
                    kinds[f"{unit}/{level}"] = {
                        "collection": name, "rows": int(rows),
                        "synced": (self._snapshot_order(self.collection(unit, level), name)[0]
                                   if self._is_lite(client) else int(props.get(_SYNCED, "0")))}
                return kinds

            out["collections"] = self._call(run)
        except BackendUnavailable as exc:
            out["error"] = exc.message
        return out

    def drop_all(self) -> None:
        """Drop every collection of this engine (tests and ``--rebuild``)."""
        def run(client: Any) -> None:
            for alias in client.list_aliases().get("aliases", []):
                if alias.startswith(self.prefix + "_"):
                    client.drop_alias(alias)
            for name in client.list_collections():
                if name.startswith(self.prefix + "_"):
                    client.drop_collection(name)

        with self._lock:
            self._call(run)
            self._synced.clear()
            self._columns.clear()

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                try:
                    self._client.close()
                finally:
                    self._client = None
            if self.uri.endswith(".db") and not self._closed:
                self._closed = True
                _release_lite(self.uri)


def _score(metric: str, distance: float) -> float:
    """A similarity, larger is better: Milvus Lite reports BM25 negated, a server does not."""
    return abs(float(distance)) if metric == "BM25" else float(distance)
