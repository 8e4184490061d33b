"""The Milvus backend's collections, kept in step with the SQLite docstore.

One collection per unit kind and level (alias ``<prefix>_<unit>_<level>``), so BM25 keeps
each kind's own statistics; a row is a unit (``rowid`` the docstore's) with the versions
that added and retired it (``v_from``, ``v_to``), typed filter columns
(:mod:`.milvus_filter`), its analysed ``terms``, its ``dense`` vector and the ``sparse``
BM25 vector Milvus computes from the terms. SQLite stays the source of truth: a sync
upserts, retires and deletes rows, flushes, and only then moves the collection's
``rcp.synced`` version, so a crash leaves it behind and the next sync redoes the step; a
read pins ``v_from <= v < v_to`` and syncs to its version first. Milvus Lite reads a
snapshot collection per version instead, for exact BM25 at every version (right for tests
and a laptop, not a large corpus). The layout and the sync step by step:
``docs/internals.md``, "Milvus collections".
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import BackendUnavailable
from ..analyzer import analyze
from .docstore import Docstore
from .milvus_connection import MilvusConnection, log
from .milvus_filter import MAX_VARCHAR_BYTES, add_columns, column_values

LIVE = 2**62  # v_to of a row no version has retired
_UID_BYTES = 2048
_BATCH = 500
# What Milvus Lite 3.2 scores BM25 with, whatever the index's bm25_k1 / bm25_b say.
LITE_BM25_K1, LITE_BM25_B = 1.5, 0.75
_SYNCED = "rcp.synced"
_COMPLETE = "rcp.complete"
_NAME = re.compile(r"[^A-Za-z0-9_]")

Kinds = Sequence[tuple[str, int]]


def _clip(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` UTF-8 bytes at a space (whether it was cut)."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text, False
    cut = raw[:limit].decode("utf-8", "ignore")
    return cut[:cut.rfind(" ")] if " " in cut else cut, True


class MilvusCollections:
    """The collections of one engine (module doc) over its own :class:`MilvusConnection`:
    created, filled and synced from the docstore, and which one a read of a kind searches."""

    def __init__(self, store: Docstore, connection: MilvusConnection, *, prefix: str,
                 dim: int, k1: float, b: float, dense_index: str) -> None:
        self.store = store
        self._connection = connection
        self.prefix = _NAME.sub("_", prefix)
        self.dim = dim
        self.k1, self.b = k1, b
        self.dense_index = dense_index
        self._lock = threading.RLock()
        self.synced: dict[tuple[str, int], int] = {}  # what this process knows each holds
        self.columns: dict[tuple[str, int], frozenset[str]] = {}
        self.lite: bool | None = None  # Milvus Lite (per-segment BM25), known once connected
        # Milvus Lite: the snapshot collection of each (unit, level, version) read, and the
        # collections loaded by this process.
        self._targets: dict[tuple[str, int, int], str] = {}
        self._loaded: set[str] = set()
        self.truncated = 0  # units whose analysed text exceeded a VARCHAR (BM25 on the head)

    def call(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(client)`` (:meth:`MilvusConnection.call`); after a failed call every
        collection's state is read again once Milvus answers."""
        failures = self._connection.failures
        try:
            return self._connection.call(fn)
        finally:
            if self._connection.failures != failures:
                self.synced.clear()
                self.columns.clear()
                self._targets.clear()
                self._loaded.clear()

    def alias(self, unit: str, level: int) -> str:
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
        if self.lite is None:
            self.lite = str(client.get_server_version()).startswith("milvus_lite")
            if self.lite and (self.k1, self.b) != (LITE_BM25_K1, LITE_BM25_B):
                log.info("Milvus Lite scores BM25 with k1=%s, b=%s whatever bm25_k1=%s, "
                            "bm25_b=%s say: sparse scores differ from the embedded backend's",
                            LITE_BM25_K1, LITE_BM25_B, self.k1, self.b)
        return self.lite

    def _open(self, client: Any, unit: str, level: int) -> tuple[str | None, int]:
        """The collection the kind's alias names (None if there is none yet) and the version
        it holds, loaded for search."""
        alias = self.alias(unit, level)
        if alias not in client.list_aliases().get("aliases", []):
            return None, -1
        physical = str(client.describe_alias(alias)["collection_name"])
        client.load_collection(physical)
        return physical, self._describe(client, unit, level, physical)

    def _describe(self, client: Any, unit: str, level: int, physical: str) -> int:
        info = client.describe_collection(physical)
        self.columns[(unit, level)] = frozenset(f["name"] for f in info.get("fields", []))
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
        alias = self.alias(unit, level)
        current, held = self._open(client, unit, level)
        if current is not None and held >= upto:
            self.synced[(unit, level)] = held
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
        columns = self.columns[(unit, level)]
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
        self.synced[(unit, level)] = upto

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
        alias = self.alias(unit, level)
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
        self.columns[(unit, level)] = columns
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

    def target(self, unit: str, level: int, version: int) -> str:
        """The collection a read of the kind at ``version`` searches (after :meth:`sync`)."""
        return self._targets.get((unit, level, version)) or self.alias(unit, level)

    def sync(self, upto: int | None = None, kinds: Kinds | None = None) -> None:
        """Bring the collections of ``kinds`` (default: every stored kind) to version ``upto``
        (default: the last commit). Raises BackendUnavailable while Milvus cannot be reached."""
        version = self.store.index_version() if upto is None else upto
        wanted = list(kinds) if kinds is not None else self.store.feed.stored_kinds()
        with self._lock:
            todo = [k for k in wanted if self.synced.get(k, -1) < version
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

            self.call(run)
            if kinds is None:
                self._clear_outbox()

    def after_commit(self) -> None:
        """Sync every kind now (Milvus Lite: build a read's snapshot when it is first read)."""
        try:
            if self.call(self._is_lite):
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

    def state(self) -> dict[str, dict[str, Any]]:
        """Per stored kind: the collection its read of the last commit searches, the rows it
        holds and the version synced. Raises BackendUnavailable while Milvus cannot say."""
        def run(client: Any) -> dict[str, Any]:
            kinds: dict[str, dict[str, Any]] = {}
            names = set(client.list_collections())
            for unit, level in self.store.feed.stored_kinds():
                name = self.alias(unit, level)
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
                    "synced": (self._snapshot_order(self.alias(unit, level), name)[0]
                               if self._is_lite(client) else int(props.get(_SYNCED, "0")))}
            return kinds

        return self.call(run)

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
            self.call(run)
            self.synced.clear()
            self.columns.clear()

    def close(self) -> None:
        with self._lock:
            self._connection.close()
