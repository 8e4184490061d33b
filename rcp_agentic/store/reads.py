"""Reading the docstore's units: the arrays the scoring indexes load, the rowids a filter
passes, hydrated rows, their trust, dates and parents, and the live rows builders start from.

A rowid is never reused and its row never changes (a new version of a document gets new
rows), so hydrated rows and the rowids a filter passes at a committed version are cached
without invalidation.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from ..read_first import checkpoint
from ..units import derived_kinds
from ..vocabulary import TRUST_LEVELS, TrustLevel
from .connection import Connection
from .info import InfoTable
from .schema import kinds_clause, load_json, valid, visible

# Rows that may stop being valid between versions ``since`` and ``version`` (parameters
# since, version, since, since, version, since): retired in between, or covering a leaf
# retired in between (unary + keeps SQLite on ``units_retired``).
_LEFT = ("SELECT rowid FROM units WHERE v_to > ? AND v_to <= ? AND +v_from <= ?"
         " UNION SELECT c.urow FROM units l JOIN covers c ON c.leaf = l.rowid"
         " WHERE l.v_to > ? AND l.v_to <= ? AND l.v_from <= ?")
# Hydrated unit rows kept in memory (rows are immutable per rowid).
_ROW_CACHE = 8192
# Filter results kept: a committed version never changes what it shows, so the units a
# compiled filter passes at a version are fixed; an agent repeats its tenant's filter on
# every step and op (each graph op asks it several times).
_FILTER_CACHE = 32
_HIT_KEYS = ("rowid", "uid", "unit", "level", "doc_id", "idx", "start", "end", "page_start",
             "page_end", "tokens", "text", "title", "source", "uri", "file_type", "meta", "trust",
             "injection_suspected", "umeta")


@dataclass(frozen=True)
class UnitArrays:
    """Everything the scoring indexes need for one (unit, level), in unit id order (an
    index position is then the rank of its unit id: ties in every ranking fall by id)."""

    rowids: np.ndarray          # int64 (n,)
    vectors: np.ndarray | None  # float32 (n, d), or None when not requested
    term_ids: np.ndarray        # uint32, concatenated postings
    term_tfs: np.ndarray        # float32, same length
    offsets: np.ndarray         # int64 (n+1,): postings of row i are [offsets[i], offsets[i+1])
    lengths: np.ndarray         # float32 (n,): analyzed length of each row
    uids: list[str]             # unit ids
    doc_ids: list[str]
    page_start: np.ndarray      # int64 (n,), -1 when the unit has no page
    page_end: np.ndarray
    tokens: np.ndarray          # int64 (n,): tokens of each unit's text
    units: list[str] = field(default_factory=list)  # each row's kind
    levels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class Reader:
    """Every read of units and documents at a version (or of the live rows)."""

    def __init__(self, connection: Connection, info: InfoTable) -> None:
        self._conn = connection
        self._info = info
        self._rows: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._filtered: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()  # the two caches above (not the writer's lock)

    def unit_kinds(self, version: int | None = None) -> list[tuple[str, int, int]]:
        """(unit, level, count) of every kind of unit visible at ``version`` (default: current)."""
        v = self._info.index_version() if version is None else version
        return self._conn.query(f"SELECT unit, level, COUNT(*) FROM units u WHERE {visible('u')}"
                                f" AND {valid('u')} GROUP BY unit, level", (v, v, v, v))

    def vectors(self, rowids: list[int]) -> dict[int, np.ndarray]:
        out: dict[int, np.ndarray] = {}
        for i in range(0, len(rowids), 900):
            part = rowids[i:i + 900]
            for r, blob in self._conn.query(
                    f"SELECT rowid, vec FROM units WHERE rowid IN ({','.join('?' * len(part))})",
                    part):
                out[r] = np.frombuffer(blob, dtype=np.float32)
        return out

    def unit_arrays(self, kinds: Iterable[tuple[str, int]], version: int,
                    with_vectors: bool) -> UnitArrays:
        """Vectors and postings of the units of ``kinds`` ((unit, level) pairs) valid at
        ``version``, in unit id order. A derived unit is valid only while every leaf it
        covers is visible (see :func:`_valid`), so a tree lagging behind a write never
        serves a summary of a deleted or replaced chunk."""
        where, params = kinds_clause("u", list(kinds))
        return self._arrays(f"{where} AND {visible('u')}", (*params, version, version),
                            version, with_vectors)

    def unit_delta(self, kinds: Iterable[tuple[str, int]], since: int, version: int,
                   with_vectors: bool) -> tuple[UnitArrays, list[int]] | None:
        """What changed in :meth:`unit_arrays` from version ``since`` to the later
        ``version``: the arrays of the rows valid at ``version`` but not at ``since`` (unit
        id order) and the rowids of rows that may have been valid at ``since`` and are not
        at ``version`` (a superset); None once ``since`` is no longer retained."""
        where, params = kinds_clause("u", list(kinds))
        entered = self._arrays(
            f"{where} AND u.rowid > ? AND u.v_from > ? AND u.v_from <= ?"
            " AND (u.v_to IS NULL OR u.v_to > ?)",
            (*params, self._last_rowid_at(since), since, version, version), version,
            with_vectors)
        left = self._conn.query(_LEFT, (since, version, since, since, version, since))
        if not self._info.readable_since(since):
            return None
        return entered, [r for (r,) in left]

    def _last_rowid_at(self, version: int) -> int:
        """The last rowid added by ``version`` or before (versions commit in order, so the
        rows added later hold every larger rowid; read from the end of the table)."""
        return int(self._conn.query(
            "SELECT COALESCE((SELECT rowid FROM units WHERE v_from <= ?"
            " ORDER BY rowid DESC LIMIT 1), 0)", (version,))[0][0])

    def _arrays(self, where: str, params: tuple[Any, ...], version: int,
                with_vectors: bool) -> UnitArrays:
        cols = ("rowid, term_ids, term_tfs, nterms, uid, COALESCE(doc_id, ''),"
                " COALESCE(page_start, -1), COALESCE(page_end, -1), tokens, unit, level"
                + (", vec" if with_vectors else ""))
        rows = self._conn.query(f"SELECT {cols} FROM units u WHERE {where}"
                                f" AND {valid('u')} ORDER BY uid", (*params, version, version))
        n = len(rows)
        rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=n)
        ids = [np.frombuffer(r[1], dtype=np.uint32) for r in rows]
        tfs = [np.frombuffer(r[2], dtype=np.float32) for r in rows]
        sizes = np.fromiter((len(a) for a in ids), dtype=np.int64, count=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        vectors = None
        if with_vectors:
            vectors = (np.vstack([np.frombuffer(r[11], dtype=np.float32) for r in rows])
                       if n else np.zeros((0, 0), dtype=np.float32))
        return UnitArrays(
            rowids=rowids, vectors=vectors,
            term_ids=np.concatenate(ids) if n else np.zeros(0, dtype=np.uint32),
            term_tfs=np.concatenate(tfs) if n else np.zeros(0, dtype=np.float32),
            offsets=offsets,
            lengths=np.fromiter((r[3] for r in rows), dtype=np.float32, count=n),
            uids=[r[4] for r in rows], doc_ids=[r[5] for r in rows],
            page_start=np.fromiter((r[6] for r in rows), dtype=np.int64, count=n),
            page_end=np.fromiter((r[7] for r in rows), dtype=np.int64, count=n),
            tokens=np.fromiter((r[8] for r in rows), dtype=np.int64, count=n),
            units=[r[9] for r in rows],
            levels=np.fromiter((r[10] for r in rows), dtype=np.int64, count=n))

    def filtered_rowids(self, kinds: Iterable[tuple[str, int]], version: int, sql: str,
                        params: tuple[Any, ...]) -> np.ndarray:
        """Rowids of the units of ``kinds``, visible at ``version``, that satisfy a compiled filter.

        A per-document unit is judged with its document; a derived unit passes only
        when every leaf chunk it covers passes with that chunk's document, so no text
        derived from an excluded document is returned (filters scope tenants).
        """
        kinds = list(kinds)
        key = (tuple(kinds), version, sql, repr(tuple(params)))  # values may be lists
        return self._fixed_rowids(key, lambda: self._filtered_rows(kinds, version, sql, params))

    def _filtered_rows(self, kinds: list[tuple[str, int]], version: int, sql: str,
                       params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The rows of :meth:`filtered_rowids`, from SQLite."""
        per_doc = [k for k in kinds if k[0] not in derived_kinds()]
        derived = [k for k in kinds if k[0] in derived_kinds()]
        rows: list[tuple[Any, ...]] = []
        if per_doc:
            where, kparams = kinds_clause("u", per_doc)
            rows += self._conn.query(
                f"SELECT u.rowid FROM units u JOIN documents d ON d.drow = u.doc_row"
                f" WHERE {where} AND {visible('u')} AND {sql}",
                (*kparams, version, version, *params))
        if derived:
            # The filter is evaluated once, on the chunks; a derived unit passes when none of
            # the leaves it covers is outside that set (and it covers at least one).
            where, kparams = kinds_clause("t", derived)
            rows += self._conn.query(
                f"WITH passing(leaf) AS (SELECT u.rowid FROM units u JOIN documents d"
                f" ON d.drow = u.doc_row WHERE u.unit = 'chunk' AND {visible('u')} AND {sql})"
                f" SELECT t.rowid FROM units t WHERE {where} AND t.doc_row IS NULL"
                f" AND {visible('t')} AND EXISTS (SELECT 1 FROM covers c WHERE c.urow = t.rowid)"
                f" AND NOT EXISTS (SELECT 1 FROM covers c WHERE c.urow = t.rowid"
                f" AND c.leaf NOT IN passing)",
                (version, version, *params, *kparams, version, version))
        return rows

    def _fixed_rowids(self, key: tuple[Any, ...],
                      rows: Callable[[], list[tuple[Any, ...]]]) -> np.ndarray:
        """The rowids ``rows()`` selects, kept under ``key`` (which names a committed version:
        what it selects there never changes); read-only, shared by every caller."""
        with self._cache_lock:
            cached = self._filtered.get(key)
            if cached is not None:
                self._filtered.move_to_end(key)
                return cached
        found = rows()
        out = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
        out.flags.writeable = False
        with self._cache_lock:
            self._filtered[key] = out
            while len(self._filtered) > _FILTER_CACHE:
                self._filtered.popitem(last=False)
        return out

    def passing_rowids(self, rowids: Sequence[int], sql: str, params: tuple[Any, ...]
                       ) -> list[int]:
        """Those of ``rowids`` (per-document units) whose unit and document satisfy a compiled
        filter, in any version (a row and its document row never change)."""
        out: list[int] = []
        for i in range(0, len(rowids), 500):
            part = list(rowids[i:i + 500])
            out += [r for (r,) in self._conn.query(
                f"SELECT u.rowid FROM units u JOIN documents d ON d.drow = u.doc_row WHERE"
                f" u.rowid IN ({','.join('?' * len(part))}) AND {sql}", (*part, *params))]
        return sorted(out)

    def spanning_rowids(self, unit: str, level: int, version: int) -> np.ndarray:
        """Rowids of the units of a kind whose rows span levels (communities: stored at their
        lowest level, ``umeta.levels = [lo, hi]``) that stand for ``level``, visible at
        ``version``."""
        return self._fixed_rowids(("spanning", unit, level, version), lambda: self._conn.query(
            f"SELECT rowid FROM units u WHERE unit = ? AND level <= ? AND {visible('u')}"
            " AND json_extract(umeta, '$.levels[1]') >= ?", (unit, level, version, version, level)))

    def hydrate(self, rowids: list[int]) -> dict[int, dict[str, Any]]:
        """Unit rows (with text) joined with their document, keyed by rowid (missing ones absent).

        A derived unit (no document of its own) gets the title, source and uri of the
        document most of its leaves come from, the lowest trust among the documents it
        covers, ``doc_ids`` (most-covered first), ``leaves`` (chunk ids) and ``umeta``.
        A rowid's row never changes (a new version of a document gets new rows), so
        rows are cached (bounded LRU) and an agent's repeated hits skip SQLite.
        """
        out: dict[int, dict[str, Any]] = {}
        missing: list[int] = []
        with self._cache_lock:
            for r in rowids:
                row = self._rows.get(r)
                if row is None:
                    missing.append(r)
                else:
                    self._rows.move_to_end(r)
                    out[r] = row
        for i in range(0, len(missing), 900):
            part = missing[i:i + 900]
            marks = ','.join('?' * len(part))
            rows = self._conn.query(
                'SELECT u.rowid, u.uid, u.unit, u.level, u.doc_id, u.idx, u.start, u."end",'
                " u.page_start, u.page_end, u.tokens, u.text, d.title, d.source, d.uri,"
                " d.file_type, d.meta, d.trust, s.suspected, u.umeta FROM units u"
                " LEFT JOIN documents d ON d.drow = u.doc_row LEFT JOIN screens s ON s.urow ="
                f" u.rowid WHERE u.rowid IN ({marks})", part)
            fresh: dict[int, dict[str, Any]] = {}
            for values in rows:
                row = dict(zip(_HIT_KEYS, values))
                row["umeta"] = json.loads(values[-1]) if values[-1] else None
                fresh[values[0]] = row
            derived = [r for r, row in fresh.items() if row["doc_id"] is None]
            if derived:
                self._hydrate_derived(derived, fresh)
            with self._cache_lock:
                for r, row in fresh.items():
                    out[r] = self._rows[r] = row
                while len(self._rows) > _ROW_CACHE:
                    self._rows.popitem(last=False)
        return out

    def _hydrate_derived(self, rowids: list[int], rows: dict[int, dict[str, Any]]) -> None:
        """Fill a derived unit's source fields from the documents and leaves it covers: the
        lowest trust of those documents, and suspected of injection when any leaf it covers
        is (also for a unit written before its builder recorded that itself)."""
        marks = ','.join('?' * len(rowids))
        for (urow,) in self._conn.query(
                "SELECT DISTINCT c.urow FROM covers c JOIN screens s ON s.urow = c.leaf"
                f" WHERE c.urow IN ({marks}) AND s.suspected", rowids):
            rows[urow]["injection_suspected"] = 1
        docs: dict[int, list[tuple[Any, ...]]] = {}
        for urow, *doc in self._conn.query(
                "SELECT c.urow, d.id, d.title, d.source, d.uri, d.trust, COUNT(*) AS n FROM covers c"
                f" JOIN documents d ON d.drow = c.drow WHERE c.urow IN ({marks})"
                " GROUP BY c.urow, c.drow ORDER BY c.urow, n DESC, d.id", rowids):
            docs.setdefault(urow, []).append(tuple(doc))
        leaves: dict[int, list[str]] = {}
        for urow, uid in self._conn.query(
                f"SELECT c.urow, l.uid FROM covers c JOIN units l ON l.rowid = c.leaf"
                f" WHERE c.urow IN ({marks}) ORDER BY c.urow, l.doc_id, l.idx", rowids):
            leaves.setdefault(urow, []).append(uid)
        for r in rowids:
            row, covered = rows[r], docs.get(r, [])
            if covered:
                _id, row["title"], row["source"], row["uri"], _t, _n = covered[0]
            row["doc_ids"] = [d[0] for d in covered]
            row["trust"] = lowest_trust(d[4] for d in covered)
            row["leaves"] = leaves.get(r, [])

    def unit_trust(self, rowids: Iterable[int]) -> dict[int, tuple[str, bool]]:
        """(trust level of its document, injection suspected) of per-document units by rowid
        (missing ones absent): what a text composed from those units inherits. One light
        query per 900 rowids (no text is read)."""
        wanted = list(dict.fromkeys(int(r) for r in rowids))
        out: dict[int, tuple[str, bool]] = {}
        for i in range(0, len(wanted), 900):
            part = wanted[i:i + 900]
            marks = ",".join("?" * len(part))
            for rowid, trust, suspected in self._conn.query(
                    "SELECT u.rowid, d.trust, COALESCE(s.suspected, 0) FROM units u"
                    " JOIN documents d ON d.drow = u.doc_row LEFT JOIN screens s"
                    f" ON s.urow = u.rowid WHERE u.rowid IN ({marks})", part):
                out[int(rowid)] = (str(trust), bool(suspected))
        return out

    def covered_leaves(self, rowids: list[int]) -> dict[int, list[str]]:
        """The leaf chunk ids each derived unit covers (hydrated rows, so cached)."""
        rows = self.hydrate(rowids)
        return {r: row.get("leaves") or [] for r, row in rows.items()}

    def dates(self, rowids: list[int], field: str) -> dict[int, float]:
        """A date field (epoch ms) of the units' documents; a derived unit takes the latest date
        among the documents it covers. Units without the field are absent."""
        col = ("d.modified_ms" if field == "modified"
               else f"json_extract(d.fmeta, '$.\"{field}\"')")
        out: dict[int, float] = {}
        for i in range(0, len(rowids), 900):
            part = rowids[i:i + 900]
            marks = ','.join('?' * len(part))
            for r, v in self._conn.query(
                    f"SELECT u.rowid, {col} FROM units u JOIN documents d ON d.drow = u.doc_row"
                    f" WHERE u.rowid IN ({marks}) UNION ALL"
                    f" SELECT c.urow, MAX({col}) FROM covers c JOIN documents d ON d.drow = c.drow"
                    f" WHERE c.urow IN ({marks}) GROUP BY c.urow", (*part, *part)):
                if isinstance(v, (int, float)):
                    out[r] = float(v)
        return out

    def parents(self, unit: str, uids: list[str], version: int) -> dict[str, list[str]]:
        """For each of ``uids``: the units of derived kind ``unit`` valid at ``version`` whose
        ``umeta.children`` name it (a tree node's parents; a chunk's level-1 nodes)."""
        if not uids:
            return {}
        out: dict[str, list[str]] = {}
        for child, parent in self._conn.query(
                f"SELECT j.value, p.uid FROM units p, json_each(p.umeta, '$.children') j"
                f" WHERE p.unit = ? AND p.umeta IS NOT NULL AND {visible('p')} AND {valid('p')}"
                f" AND j.value IN ({','.join('?' * len(uids))}) ORDER BY p.level, p.uid",
                (unit, version, version, version, version, *uids)):
            out.setdefault(child, []).append(parent)
        return out

    def live_leaves(self, unit: str = "chunk") -> list[tuple[Any, ...]]:
        """Every live unit of a per-document kind: (rowid, uid, doc_id, start, tokens, text)."""
        return self._conn.query(
            "SELECT rowid, uid, doc_id, start, tokens, text FROM units WHERE unit = ? AND level = 0"
            " AND v_to IS NULL ORDER BY rowid", (unit,))

    def live_titles(self) -> list[tuple[str, str | None]]:
        """(id, title) of every live document."""
        return self._conn.query("SELECT id, title FROM documents WHERE v_to IS NULL ORDER BY id")

    def leaves_of(self, rowids: Iterable[int]) -> list[tuple[Any, ...]]:
        """The rows ``rowids`` of a per-document kind, with their documents' titles as they
        were written: (rowid, uid, doc_id, start, text, title), in rowid order."""
        wanted = sorted(set(rowids))
        out: list[tuple[Any, ...]] = []
        for i in range(0, len(wanted), 900):
            part = wanted[i:i + 900]
            out += self._conn.query(
                "SELECT u.rowid, u.uid, u.doc_id, u.start, u.text, d.title FROM units u"
                " LEFT JOIN documents d ON d.drow = u.doc_row"
                f" WHERE u.rowid IN ({','.join('?' * len(part))}) ORDER BY u.rowid", part)
        return out

    def live_derived(self, unit: str, uids: Iterable[str] | None = None
                     ) -> list[dict[str, Any]]:
        """Every live row of a derived kind (``uids``: only those of these ids) with its umeta
        and the leaf rowids it covers."""
        if uids is not None:
            return self._live_derived_of(unit, list(dict.fromkeys(uids)))
        rows = self._conn.query("SELECT rowid, uid, level, tokens, text, umeta FROM units WHERE"
                                " unit = ? AND v_to IS NULL ORDER BY level, rowid", (unit,))
        covers: dict[int, list[int]] = {}
        for urow, leaf in self._conn.query(
                "SELECT c.urow, c.leaf FROM covers c JOIN units u ON u.rowid = c.urow"
                " WHERE u.unit = ? AND u.v_to IS NULL ORDER BY c.urow, c.leaf", (unit,)):
            covers.setdefault(urow, []).append(leaf)
        return _derived_rows(rows, covers)

    def _live_derived_of(self, unit: str, uids: list[str]) -> list[dict[str, Any]]:
        """:meth:`live_derived` of the given ids only (by the ``units_live`` index)."""
        rows: list[tuple[Any, ...]] = []
        covers: dict[int, list[int]] = {}
        for i in range(0, len(uids), 900):
            part = uids[i:i + 900]
            marks = ",".join("?" * len(part))
            got = self._conn.query("SELECT rowid, uid, level, tokens, text, umeta FROM units"
                                   f" WHERE uid IN ({marks}) AND v_to IS NULL AND unit = ?",
                                   (*part, unit))
            rows += got
            rowids = [r[0] for r in got]
            if rowids:
                for urow, leaf in self._conn.query(
                        "SELECT urow, leaf FROM covers WHERE urow IN"
                        f" ({','.join('?' * len(rowids))}) ORDER BY urow, leaf", rowids):
                    covers.setdefault(urow, []).append(leaf)
        rows.sort(key=lambda r: (r[2], r[0]))
        return _derived_rows(rows, covers)

    def derived_rows(self, kinds: Sequence[str], version: int) -> list[tuple[str, str, str, str]]:
        """(uid, unit, text, umeta JSON) of every unit of the derived ``kinds`` valid at
        ``version`` (visible, and every leaf it covers visible), in rowid order."""
        marks = ",".join("?" * len(kinds))
        return self._conn.query(
            f"SELECT uid, unit, text, COALESCE(umeta, '{{}}') FROM units u WHERE unit IN ({marks})"
            f" AND {visible('u')} AND {valid('u')} ORDER BY rowid",
            (*kinds, version, version, version, version))

    def derived_delta(self, kinds: Sequence[str], since: int, version: int
                      ) -> tuple[list[tuple[int, str, str, str, str]], list[int]]:
        """What changed among the level-0 units of the derived ``kinds`` from version
        ``since`` to the later ``version``: (rowid, uid, unit, text, umeta JSON) of the rows
        valid at ``version`` but not at ``since``, in rowid order, and the rowids of rows
        that may have been valid at ``since`` and are not at ``version`` (retired, or a
        covered leaf retired, in between; a superset: the caller ignores rows it never held).
        ``since = 0`` reads every row valid at ``version``.

        A row valid at ``version`` was valid at ``since`` unless it was added after it: a
        unit covers only leaves that exist when it is written, and a retired leaf never
        returns. So both sides read only rows added or retired in (since, version] (the
        ``units_added``, ``units_retired`` and ``covers_leaf`` indexes)."""
        marks = ",".join("?" * len(kinds))
        entered = self._conn.query(
            f"SELECT rowid, uid, unit, text, COALESCE(umeta, '{{}}') FROM units u"
            f" WHERE unit IN ({marks}) AND level = 0 AND v_from > ? AND v_from <= ?"
            f" AND (v_to IS NULL OR v_to > ?) AND {valid('u')} ORDER BY rowid",
            (*kinds, since, version, version, version, version))
        if since <= 0:
            return entered, []
        left = self._conn.query(_LEFT, (since, version, since, since, version, since))
        return entered, [r for (r,) in left]

    def kind_delta(self, since: int, version: int) -> dict[tuple[str, int], int] | None:
        """How many more units of each (unit, level) are valid at ``version`` than at the
        earlier ``since`` (negative: fewer), which is :meth:`unit_kinds` at ``version`` from
        :meth:`unit_kinds` at ``since``; None once ``since`` is no longer retained (its
        retired rows may be collected). Rows added after ``since`` are found from the end
        of the table (versions commit in order, so they hold the last rowids)."""
        first = self._last_rowid_at(since)
        entered = self._conn.query(
            f"SELECT unit, level, COUNT(*) FROM units u WHERE rowid > ? AND v_from > ?"
            f" AND v_from <= ? AND (v_to IS NULL OR v_to > ?) AND {valid('u')}"
            " GROUP BY unit, level", (first, since, version, version, version, version))
        left = self._conn.query(
            f"SELECT unit, level, COUNT(*) FROM units u WHERE rowid IN ({_LEFT})"
            f" AND {visible('u')} AND {valid('u')} GROUP BY unit, level",
            (since, version, since, since, version, since, since, since, since, since))
        if not self._info.readable_since(since):
            return None
        out: dict[tuple[str, int], int] = {}
        for rows, sign in ((entered, 1), (left, -1)):
            for unit, level, n in rows:
                out[(unit, level)] = out.get((unit, level), 0) + sign * n
        return out

    def leaf_delta(self, since: int, version: int, unit: str = "chunk"
                   ) -> tuple[list[tuple[int, str]], list[int]]:
        """(rowid, doc_id) of the rows of a per-document kind visible at ``version`` but not
        at the earlier ``since`` (rowid order), and the rowids visible at ``since`` but not
        at ``version``: :meth:`leaf_docs` at ``version`` from :meth:`leaf_docs` at
        ``since``."""
        entered = self._conn.query(
            "SELECT rowid, doc_id FROM units WHERE unit = ? AND level = 0 AND v_from > ?"
            " AND v_from <= ? AND (v_to IS NULL OR v_to > ?) ORDER BY rowid",
            (unit, since, version, version))
        left = self._conn.query(
            "SELECT rowid FROM units WHERE v_to > ? AND v_to <= ? AND +unit = ? AND +level = 0"
            " AND +v_from <= ?", (since, version, unit, since))
        return entered, [r for (r,) in left]

    def leaf_docs(self, version: int, unit: str = "chunk") -> list[tuple[int, str]]:
        """(rowid, doc_id) of every unit of a per-document kind visible at ``version``."""
        return self._conn.query(f"SELECT rowid, doc_id FROM units u WHERE unit = ? AND level = 0"
                                f" AND {visible('u')} ORDER BY rowid", (unit, version, version))

    def counts(self) -> dict[str, int]:
        """Documents and units per kind."""
        live = self._conn.query("SELECT COUNT(*) FROM documents WHERE v_to IS NULL")
        out = {"documents": live[0][0]}
        for unit, _level, n in self.unit_kinds():
            out[unit] = out.get(unit, 0) + n
        return out

    def document_ids(self) -> list[str]:
        return [r for (r,) in self._conn.query(
            "SELECT id FROM documents WHERE v_to IS NULL ORDER BY id")]


def _derived_rows(rows: Iterable[tuple[Any, ...]], covers: dict[int, list[int]]
                  ) -> list[dict[str, Any]]:
    """Derived unit rows (rowid, uid, level, tokens, text, umeta JSON) as dicts, with the
    leaf rowids each covers."""
    out = []
    for r, uid, lv, tk, text, m in rows:
        checkpoint()
        out.append({"rowid": r, "uid": uid, "level": lv, "tokens": tk, "text": text,
                    "umeta": load_json(m) if m else {}, "covers": covers.get(r, [])})
    return out


R = TypeVar("R")


class RowsOnce(Generic[R]):
    """What ``read`` gives for rowids, each read once for the holder's lifetime (one
    request): :meth:`fetch` reads the rowids not read yet in one call; ``rows`` holds them."""

    def __init__(self, read: Callable[[list[int]], dict[int, R]]) -> None:
        self.rows: dict[int, R] = {}
        self._read = read

    def fetch(self, rowids: Iterable[int]) -> None:
        todo = [r for r in dict.fromkeys(rowids) if r not in self.rows]
        if todo:
            self.rows.update(self._read(todo))


def lowest_trust(levels: Iterable[str]) -> TrustLevel:
    """The least trusted of ``levels`` (``"untrusted"`` when there are none, or for a level
    this engine does not know): what a text derived from several sources may claim."""
    rank = max((TRUST_LEVELS.index(t) if t in TRUST_LEVELS else len(TRUST_LEVELS)
                for t in levels), default=len(TRUST_LEVELS))
    return TRUST_LEVELS[min(rank, len(TRUST_LEVELS) - 1)]
