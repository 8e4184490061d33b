"""The SQLite docstore: documents, units (text, vector, BM25 postings), fields, and the Chroma outbox.

SQLite is the source of truth. One write transaction replaces every unit of a
document and, in the same transaction, queues the matching Chroma operations in
``outbox``; the commit is the moment a document becomes visible. Chroma is synced
from the outbox afterwards and repaired from SQLite on open, so a process killed
at any point leaves either the old or the new version of a document, whole.

Snapshots: every committed write is a new index version. Rows carry the version
that added them (``v_from``) and the one that retired them (``v_to``); a reader
at version v sees ``v_from <= v < v_to``. The last ``retain`` versions stay
readable; rows no retained version can see are deleted in the same transaction,
and so is every inferred filter field no remaining document uses.

Several processes may open one engine directory (a server that stays open while
``rcp-agentic index`` writes into it, or two writers at once). SQLite serialises
them: a write is one ``BEGIN IMMEDIATE`` transaction that waits up to
``busy_timeout`` seconds for another process's write to finish (without blocking
this process's readers while it waits) and past that raises BackendUnavailable
(-32010, retryable). Inside the transaction everything is read from the database,
not from this process's memory: the vocabulary gets the terms other processes
added, and the new index version follows the last committed one. Readers see every
commit at their next read: :meth:`Docstore.refresh` notices another connection's
commit (``PRAGMA data_version``) and loads the terms it added. Cached rows need no
invalidation: a rowid is never reused and its row never changes.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendUnavailable, InvalidParams
from ..units import derived_kinds

_loads: Callable[[str], Any] = json.loads
try:  # chromadb, a dependency, brings orjson: ~3x faster on many small umeta documents
    from orjson import loads as _loads
except ImportError:  # pragma: no cover
    pass

SCHEMA_VERSION = "2"  # 2: units may cover many documents (covers, nullable doc_row, umeta)
# How long a write waits for another process's write transaction before giving up.
BUSY_TIMEOUT_SECONDS = 30.0
# SQLite's own wait per attempt (ms): short, because this process's lock is held meanwhile.
_BUSY_SLICE_MS = 100
# Hydrated unit rows kept in memory (rows are immutable per rowid).
_ROW_CACHE = 8192
# Filter results kept: a committed version never changes what it shows, so the units a
# compiled filter passes at a version are fixed; an agent repeats its tenant's filter on
# every step and op (each graph op asks it several times).
_FILTER_CACHE = 32
_HIT_KEYS = ("rowid", "uid", "unit", "level", "doc_id", "idx", "start", "end", "page_start",
             "page_end", "tokens", "text", "title", "source", "uri", "file_type", "meta", "trust",
             "injection_suspected", "umeta")

_UNITS_DDL = """
CREATE TABLE IF NOT EXISTS units (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
    uid TEXT NOT NULL,
    unit TEXT NOT NULL,
    level INTEGER NOT NULL DEFAULT 0,
    doc_id TEXT,  -- NULL for a derived unit (it covers many documents: see covers)
    doc_row INTEGER REFERENCES documents(drow) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    start INTEGER,
    "end" INTEGER,
    page_start INTEGER,
    page_end INTEGER,
    tokens INTEGER NOT NULL,
    nterms INTEGER NOT NULL,
    -- small columns first: reading them must not walk the overflow pages of the blobs
    v_from INTEGER NOT NULL,
    v_to INTEGER,
    umeta TEXT,  -- a derived unit's own metadata (children, sentence spans)
    text TEXT NOT NULL,
    vec BLOB NOT NULL,
    term_ids BLOB NOT NULL,
    term_tfs BLOB NOT NULL
);
"""
_UNITS_INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS units_live ON units(uid) WHERE v_to IS NULL;
CREATE INDEX IF NOT EXISTS units_doc ON units(doc_row);
CREATE INDEX IF NOT EXISTS units_live_doc ON units(doc_id) WHERE v_to IS NULL;
CREATE INDEX IF NOT EXISTS units_retired ON units(v_to) WHERE v_to IS NOT NULL;
CREATE INDEX IF NOT EXISTS units_kind ON units(unit, level);
CREATE INDEX IF NOT EXISTS units_added ON units(unit, level, v_from);
"""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    drow INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL,
    title TEXT,
    source TEXT,
    uri TEXT,
    file_type TEXT,
    meta TEXT NOT NULL DEFAULT '{}',
    fmeta TEXT NOT NULL DEFAULT '{}',
    pages TEXT,
    modified_ms REAL,
    trust TEXT NOT NULL DEFAULT 'community',
    v_from INTEGER NOT NULL,
    v_to INTEGER,
    text TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS documents_live ON documents(id) WHERE v_to IS NULL;
CREATE INDEX IF NOT EXISTS documents_retired ON documents(v_to) WHERE v_to IS NOT NULL;
""" + _UNITS_DDL + _UNITS_INDEXES + """-- What a derived unit covers: every leaf chunk (rowid) and that chunk's document row.
-- Immutable per urow, like the unit row itself.
CREATE TABLE IF NOT EXISTS covers (
    urow INTEGER NOT NULL,
    leaf INTEGER NOT NULL,
    drow INTEGER NOT NULL,
    PRIMARY KEY (urow, leaf)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS covers_leaf ON covers(leaf);
CREATE TABLE IF NOT EXISTS screens (
    urow INTEGER PRIMARY KEY,
    suspected INTEGER NOT NULL,
    score REAL NOT NULL
);
-- What a builder of derived units computed from one leaf chunk (the graph's per-chunk
-- extraction), so an unchanged chunk is not processed again. A leaf row never changes, so an
-- entry stays right for as long as its row exists under the same builder identity.
CREATE TABLE IF NOT EXISTS leaf_cache (
    name TEXT NOT NULL,
    leaf INTEGER NOT NULL,
    identity TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (name, leaf)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS leaf_cache_leaf ON leaf_cache(leaf);
CREATE TABLE IF NOT EXISTS vocab (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS fields (name TEXT PRIMARY KEY, type TEXT NOT NULL, origin TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    op TEXT NOT NULL CHECK (op IN ('add', 'del')),
    unit TEXT NOT NULL,
    level INTEGER NOT NULL,
    urow INTEGER NOT NULL
);
"""


@dataclass
class UnitRecord:
    """One unit ready to store: its text, vector and term counts."""

    uid: str
    unit: str
    level: int
    idx: int
    start: int | None
    end: int | None
    page_start: int | None
    page_end: int | None
    tokens: int
    text: str
    vector: np.ndarray
    terms: dict[str, int]
    nterms: int
    injection_suspected: bool = False
    injection_score: float = 0.0
    # A derived unit's own metadata (stored as umeta) and the leaf chunk rowids it covers.
    meta: dict[str, Any] | None = None
    covers: list[int] | None = None


@dataclass
class DocumentRecord:
    """One document and all the units derived from it."""

    id: str
    text: str
    title: str | None
    source: str | None
    uri: str | None
    file_type: str | None
    meta: dict[str, Any]
    fmeta: dict[str, Any]
    pages: list[tuple[int, int, int]] | None
    modified_ms: float | None
    trust: str
    units: list[UnitRecord] = field(default_factory=list)


@dataclass(frozen=True)
class OutboxOp:
    """A queued Chroma operation."""

    seq: int
    op: str
    unit: str
    level: int
    urow: int


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


class Docstore:
    """A thread-safe SQLite store in WAL mode; one connection behind a lock."""

    def __init__(self, path: Path, *, retain: int = 8,
                 busy_timeout: float = BUSY_TIMEOUT_SECONDS) -> None:
        self.path = path
        self.retain = retain
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        # Opening may meet another process creating the schema: wait for it in full.
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None,
                                   timeout=busy_timeout)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        self._migrate()
        self._db.execute(f"PRAGMA busy_timeout={_BUSY_SLICE_MS}")
        self._vocab: dict[str, int] = {}
        self._terms: dict[int, str] = {}
        self._vocab_max = -1
        self._load_vocab()
        self._data_version = self._read_data_version()
        self._rows: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._filtered: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()

    def _migrate(self) -> None:
        """Bring a directory of an older schema up to this one, in one transaction."""
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(units)")}
        if "umeta" in columns:
            return
        # Schema 1 -> 2: a unit may cover many documents (doc_row nullable, umeta added).
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if "umeta" not in {r[1] for r in self._db.execute("PRAGMA table_info(units)")}:
                seq = self._db.execute(
                    "SELECT seq FROM sqlite_sequence WHERE name = 'units'").fetchone()
                self._db.execute("ALTER TABLE units RENAME TO units_v1")
                for name in ("units_live", "units_doc", "units_live_doc", "units_retired",
                             "units_kind"):
                    self._db.execute(f"DROP INDEX IF EXISTS {name}")
                self._db.execute(_UNITS_DDL)
                cols = ('rowid, uid, unit, level, doc_id, doc_row, idx, start, "end", page_start,'
                        " page_end, tokens, nterms, v_from, v_to, text, vec, term_ids, term_tfs")
                self._db.execute(f"INSERT INTO units({cols}) SELECT {cols} FROM units_v1")
                self._db.execute("DROP TABLE units_v1")
                for statement in _UNITS_INDEXES.strip().split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                if seq is not None:  # rowids are never reused, across the migration too
                    self._db.execute("UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name ="
                                     " 'units'", (seq[0],))
            self._db.execute("INSERT OR REPLACE INTO info(key, value) VALUES"
                             " ('schema_version', ?)", (SCHEMA_VERSION,))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _load_vocab(self) -> None:
        """Add the terms committed since the last load (ids only grow, so only new ids)."""
        with self._lock:
            rows = self._db.execute("SELECT id, term FROM vocab WHERE id > ? ORDER BY id",
                                    (self._vocab_max,)).fetchall()
            if rows:
                self._vocab.update((t, i) for i, t in rows)
                self._terms.update(rows)
                self._vocab_max = int(rows[-1][0])

    def _read_data_version(self) -> int:
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def refresh(self) -> bool:
        """Catch up with commits of other processes; True if there were any since the last call.

        Cheap (one pragma) when nothing changed; call it at the start of each read.
        """
        with self._lock:
            current = self._read_data_version()
            if current == self._data_version:
                return False
            self._data_version = current
            self._load_vocab()
            return True

    def _begin(self) -> None:
        """BEGIN IMMEDIATE, waiting for another process's write; returns holding ``_lock``.

        The lock is released between attempts so this process's readers are not held up
        by a writer elsewhere.
        """
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.005
        while True:
            self._lock.acquire()
            try:
                self._db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                self._lock.release()
                if not _is_busy(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise _busy_error(self.busy_timeout) from exc
            except BaseException:
                self._lock.release()
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write, serialised with every other connection (other processes too).

        The vocabulary is brought up to date inside the transaction, where no other
        writer can add to it; terms this transaction added are forgotten on rollback.
        """
        self._begin()
        try:
            committed_max = self._vocab_max
            try:
                self._load_vocab()
                committed_max = self._vocab_max
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                if self._vocab_max != committed_max:
                    self._vocab = {t: i for t, i in self._vocab.items() if i <= committed_max}
                    self._vocab_max = committed_max
                raise
        finally:
            self._lock.release()

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql, tuple(params)).fetchall()
            except sqlite3.OperationalError as exc:
                if _is_busy(exc):  # WAL readers wait only while another process recovers
                    raise _busy_error(_BUSY_SLICE_MS / 1000.0, write=False) from exc
                raise

    # --- info and fields -------------------------------------------------------------

    def info(self, key: str) -> str | None:
        rows = self.query("SELECT value FROM info WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_info(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO info(key, value) VALUES (?, ?)", (key, value))

    def set_info_if(self, key: str, value: str, *, base_version: int) -> bool:
        """Store ``key`` only if no write committed since ``base_version``; whether it did."""
        with self.transaction() as db:
            if self.index_version() != base_version:
                return False
            db.execute("INSERT OR REPLACE INTO info(key, value) VALUES (?, ?)", (key, value))
            return True

    def info_default(self, key: str, value: str) -> str:
        """The stored value of ``key``, storing ``value`` first if there is none (atomic, so
        processes opening a new engine directory at once agree on it)."""
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO info(key, value) VALUES (?, ?)", (key, value))
            return str(db.execute("SELECT value FROM info WHERE key = ?", (key,)).fetchone()[0])

    def index_version(self) -> int:
        return int(self.info("index_version") or 0)

    def fields(self) -> dict[str, tuple[str, str]]:
        """Filterable fields: name → (type, origin) where origin is 'declared' or 'inferred'."""
        return {n: (t, o) for n, t, o in self.query("SELECT name, type, origin FROM fields")}

    def set_fields(self, db: sqlite3.Connection, fields: Mapping[str, str], origin: str) -> None:
        db.executemany("INSERT OR REPLACE INTO fields(name, type, origin) VALUES (?, ?, ?)",
                       [(n, t, origin) for n, t in fields.items()])

    def _merge_fields(self, db: sqlite3.Connection, used: Mapping[str, str],
                      max_fields: int | None) -> None:
        """Make sure every field a write's metadata uses exists with the type it was stored as.

        Runs inside the write transaction, so it sees what other processes and threads
        committed since the caller typed the metadata: a missing field is inferred, an
        inferred int field meeting a float is widened, any other disagreement is
        InvalidParams naming ``meta.<field>``. Adding fields beyond ``max_fields`` is
        InvalidParams too; the caller's transaction then stores nothing.
        """
        have = {n: (t, o) for n, t, o in db.execute("SELECT name, type, origin FROM fields")}
        new: dict[str, str] = {}
        for name, ftype in used.items():
            current = have.get(name)
            if current is None:
                new[name] = ftype
            elif current[0] == ftype or (current[0], ftype) == ("float", "int"):
                continue
            elif (current[0], ftype, current[1]) == ("int", "float", "inferred"):
                db.execute("UPDATE fields SET type = 'float' WHERE name = ?", (name,))
            else:
                raise InvalidParams(f"metadata field {name!r} is {current[0]} (set by another "
                                    f"write); this document gives it as {ftype}",
                                    field=f"meta.{name}")
        if max_fields is not None and new and len(have) + len(new) > max_fields:
            first = sorted(new)[0]
            raise InvalidParams(
                f"this write would add {len(new)} filter field(s) ({', '.join(sorted(new)[:5])}"
                f"{', …' if len(new) > 5 else ''}) to the {len(have)} the engine holds, over its "
                f"limit of {max_fields} (max_filter_fields); nothing was stored. Declare the "
                "fields you filter on in filter_fields, or raise the limit",
                field=f"meta.{first}")
        self.set_fields(db, new, "inferred")

    # --- writes ----------------------------------------------------------------------

    def _term_ids(self, db: sqlite3.Connection, terms: Iterable[str]) -> None:
        """Give every new term an id (inside a transaction, whose start loaded the vocabulary)."""
        new = [t for t in set(terms) if t not in self._vocab]
        if new:
            start = int(db.execute("SELECT COALESCE(MAX(id), -1) + 1 FROM vocab").fetchone()[0])
            rows = [(start + i, t) for i, t in enumerate(sorted(new))]
            db.executemany("INSERT INTO vocab(id, term) VALUES (?, ?)", rows)
            self._vocab.update((t, i) for i, t in rows)
            self._terms.update(rows)
            self._vocab_max = max(self._vocab_max, rows[-1][0])

    def _retire_document(self, db: sqlite3.Connection, doc_id: str, version: int) -> int:
        db.execute("UPDATE units SET v_to = ? WHERE doc_id = ? AND v_to IS NULL",
                   (version, doc_id))
        return db.execute("UPDATE documents SET v_to = ? WHERE id = ? AND v_to IS NULL",
                          (version, doc_id)).rowcount

    def _collect_garbage(self, db: sqlite3.Connection, version: int) -> None:
        """Delete rows that no retained version can see, queueing their Chroma deletes, and
        forget the inferred fields only those documents used."""
        oldest = self.oldest_retained(version)
        old = db.execute("SELECT rowid, unit, level FROM units WHERE v_to IS NOT NULL AND v_to <= ?",
                         (oldest,)).fetchall()
        db.executemany("INSERT INTO outbox(op, unit, level, urow) VALUES ('del', ?, ?, ?)",
                       [(u, lv, r) for r, u, lv in old])
        db.execute("DELETE FROM screens WHERE urow IN (SELECT rowid FROM units WHERE v_to IS NOT"
                   " NULL AND v_to <= ?)", (oldest,))
        db.execute("DELETE FROM covers WHERE urow IN (SELECT rowid FROM units WHERE v_to IS NOT"
                   " NULL AND v_to <= ?)", (oldest,))
        db.execute("DELETE FROM leaf_cache WHERE leaf IN (SELECT rowid FROM units WHERE v_to IS"
                   " NOT NULL AND v_to <= ?)", (oldest,))
        db.execute("DELETE FROM units WHERE v_to IS NOT NULL AND v_to <= ?", (oldest,))
        used = [k for (k,) in db.execute(
            "SELECT DISTINCT j.key FROM documents d, json_each(d.fmeta) j"
            " WHERE d.v_to IS NOT NULL AND d.v_to <= ?", (oldest,))]
        db.execute("DELETE FROM documents WHERE v_to IS NOT NULL AND v_to <= ?", (oldest,))
        self._drop_unused_fields(db, used)

    def _drop_unused_fields(self, db: sqlite3.Connection, candidates: list[str]) -> None:
        """Forget inferred fields among ``candidates`` that no stored document uses any more,
        so a field's first value does not fix its type for good. Declared fields stay."""
        inferred = {n for (n,) in db.execute("SELECT name FROM fields WHERE origin = 'inferred'")}
        for name in candidates:
            if name in inferred and db.execute(
                    "SELECT 1 FROM documents WHERE json_type(fmeta, ?) IS NOT NULL LIMIT 1",
                    (f'$."{name}"',)).fetchone() is None:
                db.execute("DELETE FROM fields WHERE name = ? AND origin = 'inferred'", (name,))

    def oldest_retained(self, version: int | None = None) -> int:
        """The oldest index version still readable."""
        current = self.index_version() if version is None else version
        return max(0, current - self.retain + 1)

    def _commit_version(self, db: sqlite3.Connection, version: int, *, data: bool = True) -> None:
        """Finish a write at ``version``; ``data``: it changed documents (not only derived units)."""
        self._collect_garbage(db, version)
        db.execute("INSERT OR REPLACE INTO info(key, value) VALUES ('index_version', ?)",
                   (str(version),))
        if data:
            db.execute("INSERT OR REPLACE INTO info(key, value) VALUES ('data_version', ?)",
                       (str(version),))

    def write_documents(self, docs: list[DocumentRecord], fields: Mapping[str, str], *,
                        max_fields: int | None = None) -> int:
        """Replace each document and its units in one transaction; returns the new index version.

        ``fields`` are the types of every filter field the documents' ``fmeta`` uses
        (see :meth:`_merge_fields`); ``max_fields`` caps how many fields the engine holds.
        """
        with self.transaction() as db:
            self._merge_fields(db, fields, max_fields)
            self._term_ids(db, (t for d in docs for u in d.units for t in u.terms))
            version = self.index_version() + 1
            for doc in docs:
                self._retire_document(db, doc.id, version)
                cur = db.execute(
                    "INSERT INTO documents(id, text, title, source, uri, file_type, meta, fmeta,"
                    " pages, modified_ms, trust, v_from) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (doc.id, doc.text, doc.title, doc.source, doc.uri, doc.file_type,
                     json.dumps(doc.meta, ensure_ascii=False), json.dumps(doc.fmeta),
                     json.dumps(doc.pages) if doc.pages is not None else None, doc.modified_ms,
                     doc.trust, version))
                doc_row = cur.lastrowid
                for u in doc.units:
                    self._insert_unit(db, u, doc.id, doc_row, version)
            self._commit_version(db, version)
        return version

    def _insert_unit(self, db: sqlite3.Connection, u: UnitRecord, doc_id: str | None,
                     doc_row: int | None, version: int) -> int:
        """Insert one unit row (with its screen, Chroma outbox entry and covers); its rowid."""
        ids = np.fromiter((self._vocab[t] for t in u.terms), dtype=np.uint32, count=len(u.terms))
        tfs = np.fromiter(u.terms.values(), dtype=np.float32, count=len(u.terms))
        cur = db.execute(
            'INSERT INTO units(uid, unit, level, doc_id, doc_row, idx, start, "end",'
            " page_start, page_end, tokens, text, vec, term_ids, term_tfs, nterms,"
            " v_from, umeta) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (u.uid, u.unit, u.level, doc_id, doc_row, u.idx, u.start, u.end,
             u.page_start, u.page_end, u.tokens, u.text,
             np.asarray(u.vector, dtype=np.float32).tobytes(), ids.tobytes(),
             tfs.tobytes(), u.nterms, version,
             json.dumps(u.meta, ensure_ascii=False) if u.meta is not None else None))
        urow = int(cur.lastrowid or 0)
        db.execute("INSERT INTO screens(urow, suspected, score) VALUES (?, ?, ?)",
                   (urow, int(u.injection_suspected), u.injection_score))
        db.execute("INSERT INTO outbox(op, unit, level, urow) VALUES ('add', ?, ?, ?)",
                   (u.unit, u.level, urow))
        if u.covers:
            db.execute(f"INSERT INTO covers(urow, leaf, drow) SELECT ?, rowid, doc_row FROM units"
                       f" WHERE rowid IN ({','.join('?' * len(u.covers))})"
                       " AND doc_row IS NOT NULL", (urow, *u.covers))
        return urow

    def write_derived(self, unit: str | Sequence[str], add: list[UnitRecord], retire: list[str],
                      *, base_version: int, info: Mapping[str, str] | None = None) -> int | None:
        """Replace derived units of one kind, or of several kinds at once, in one transaction;
        the new index version.

        ``unit`` names the kind(s) written (the graph writes ``node`` and ``triplet``
        together, so no version holds the nodes of one build and the triplets of
        another). ``retire`` names live units of those kinds (by uid) that leave; ``add``
        are new rows, each with the leaf chunk rowids it ``covers``. ``base_version`` is
        the index version the builder read: if another write committed since, nothing is
        written and None is returned (the caller recomputes). ``info`` keys are stored in
        the same commit.
        """
        kinds = (unit,) if isinstance(unit, str) else tuple(unit)
        marks = ",".join("?" * len(kinds))
        with self.transaction() as db:
            if self.index_version() != base_version:
                return None
            self._term_ids(db, (t for u in add for t in u.terms))
            version = base_version + 1
            for i in range(0, len(retire), 900):
                part = retire[i:i + 900]
                db.execute(f"UPDATE units SET v_to = ? WHERE unit IN ({marks}) AND v_to IS NULL"
                           f" AND uid IN ({','.join('?' * len(part))})", (version, *kinds, *part))
            for u in add:
                if u.unit not in kinds:
                    raise ValueError(f"write_derived({', '.join(kinds)}) got a {u.unit!r} unit")
                self._insert_unit(db, u, None, None, version)
            for key, value in (info or {}).items():
                db.execute("INSERT OR REPLACE INTO info(key, value) VALUES (?, ?)", (key, value))
            self._commit_version(db, version, data=False)
        return version

    # --- a builder's per-leaf cache ----------------------------------------------------

    def leaf_cache(self, name: str, identity: str, leaves: Iterable[int]) -> dict[int, str]:
        """The cached entries of ``leaves`` (rowids) under builder ``name`` and ``identity``."""
        wanted = list(leaves)
        out: dict[int, str] = {}
        for i in range(0, len(wanted), 900):
            part = wanted[i:i + 900]
            out.update(self.query(
                f"SELECT leaf, data FROM leaf_cache WHERE name = ? AND identity = ? AND leaf IN"
                f" ({','.join('?' * len(part))})", (name, identity, *part)))
        return out

    def put_leaf_cache(self, name: str, identity: str, entries: Mapping[int, str]) -> None:
        """Store entries (leaf rowid -> data) for leaves that still exist; entries of another
        identity under ``name`` are dropped (what they cached is no longer what is built)."""
        with self.transaction() as db:
            db.execute("DELETE FROM leaf_cache WHERE name = ? AND identity != ?", (name, identity))
            db.executemany(
                "INSERT OR REPLACE INTO leaf_cache(name, leaf, identity, data) SELECT ?, ?, ?, ?"
                " WHERE EXISTS (SELECT 1 FROM units WHERE rowid = ?)",
                [(name, leaf, identity, data, leaf) for leaf, data in entries.items()])

    # --- what a derived kind holds at a version ----------------------------------------

    def derived_rows(self, kinds: Sequence[str], version: int) -> list[tuple[str, str, str, str]]:
        """(uid, unit, text, umeta JSON) of every unit of the derived ``kinds`` valid at
        ``version`` (visible, and every leaf it covers visible), in rowid order."""
        marks = ",".join("?" * len(kinds))
        return self.query(
            f"SELECT uid, unit, text, COALESCE(umeta, '{{}}') FROM units u WHERE unit IN ({marks})"
            f" AND {_visible('u')} AND {_valid('u')} ORDER BY rowid",
            (*kinds, version, version, version, version))

    def leaf_docs(self, version: int, unit: str = "chunk") -> list[tuple[int, str]]:
        """(rowid, doc_id) of every unit of a per-document kind visible at ``version``."""
        return self.query(f"SELECT rowid, doc_id FROM units u WHERE unit = ? AND level = 0 AND"
                          f" {_visible('u')} ORDER BY rowid", (unit, version, version))

    def delete_documents(self, doc_ids: list[str]) -> tuple[int, int]:
        """Retire documents (and their units) in one transaction: (deleted count, index version)."""
        with self.transaction() as db:
            version = self.index_version() + 1
            deleted = sum(self._retire_document(db, d, version) for d in doc_ids)
            if deleted:
                self._commit_version(db, version)
            else:
                version -= 1
        return deleted, version

    # --- outbox ----------------------------------------------------------------------

    def outbox(self) -> list[OutboxOp]:
        return [OutboxOp(*r) for r in self.query(
            "SELECT seq, op, unit, level, urow FROM outbox ORDER BY seq")]

    def clear_outbox(self, up_to_seq: int) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM outbox WHERE seq <= ?", (up_to_seq,))

    # --- reads -----------------------------------------------------------------------

    def unit_kinds(self, version: int | None = None) -> list[tuple[str, int, int]]:
        """(unit, level, count) of every kind of unit visible at ``version`` (default: current)."""
        v = self.index_version() if version is None else version
        return self.query(f"SELECT unit, level, COUNT(*) FROM units u WHERE {_visible('u')}"
                          f" AND {_valid('u')} GROUP BY unit, level", (v, v, v, v))

    def stored_count(self, unit: str, level: int) -> int:
        """Rows of a kind in any retained version."""
        return int(self.query("SELECT COUNT(*) FROM units WHERE unit = ? AND level = ?",
                              (unit, level))[0][0])

    def stored_kinds(self) -> list[tuple[str, int]]:
        """Every (unit, level) with stored rows in any retained version."""
        return self.query("SELECT DISTINCT unit, level FROM units")

    def vectors(self, rowids: list[int]) -> dict[int, np.ndarray]:
        out: dict[int, np.ndarray] = {}
        for i in range(0, len(rowids), 900):
            part = rowids[i:i + 900]
            for r, blob in self.query(
                    f"SELECT rowid, vec FROM units WHERE rowid IN ({','.join('?' * len(part))})",
                    part):
                out[r] = np.frombuffer(blob, dtype=np.float32)
        return out

    def rowids(self, unit: str, level: int) -> list[int]:
        """Every stored rowid of a kind, in any retained version (what Chroma must hold)."""
        return [r for (r,) in self.query(
            "SELECT rowid FROM units WHERE unit = ? AND level = ? ORDER BY rowid", (unit, level))]

    def unit_arrays(self, kinds: Iterable[tuple[str, int]], version: int,
                    with_vectors: bool) -> UnitArrays:
        """Vectors and postings of the units of ``kinds`` ((unit, level) pairs) valid at
        ``version``, in unit id order. A derived unit is valid only while every leaf it
        covers is visible (see :func:`_valid`), so a tree lagging behind a write never
        serves a summary of a deleted or replaced chunk."""
        kinds = list(kinds)
        cols = ("rowid, term_ids, term_tfs, nterms, uid, COALESCE(doc_id, ''),"
                " COALESCE(page_start, -1), COALESCE(page_end, -1), tokens, unit, level"
                + (", vec" if with_vectors else ""))
        where, params = _kinds_clause("u", kinds)
        rows = self.query(f"SELECT {cols} FROM units u WHERE {where} AND {_visible('u')}"
                          f" AND {_valid('u')} ORDER BY uid",
                          (*params, version, version, version, version))
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

    def term_id(self, term: str) -> int | None:
        return self._vocab.get(term)

    def terms_of(self, term_ids: Iterable[int]) -> list[str]:
        """The terms of vocabulary ids (ids this process has not loaded are skipped)."""
        return [self._terms[t] for t in term_ids if t in self._terms]

    def vocab_size(self) -> int:
        """One more than the largest term id known to this process."""
        return self._vocab_max + 1

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
            where, kparams = _kinds_clause("u", per_doc)
            rows += self.query(
                f"SELECT u.rowid FROM units u JOIN documents d ON d.drow = u.doc_row"
                f" WHERE {where} AND {_visible('u')} AND {sql}",
                (*kparams, version, version, *params))
        if derived:
            # The filter is evaluated once, on the chunks; a derived unit passes when none of
            # the leaves it covers is outside that set (and it covers at least one).
            where, kparams = _kinds_clause("t", derived)
            rows += self.query(
                f"WITH passing(leaf) AS (SELECT u.rowid FROM units u JOIN documents d"
                f" ON d.drow = u.doc_row WHERE u.unit = 'chunk' AND {_visible('u')} AND {sql})"
                f" SELECT t.rowid FROM units t WHERE {where} AND t.doc_row IS NULL"
                f" AND {_visible('t')} AND EXISTS (SELECT 1 FROM covers c WHERE c.urow = t.rowid)"
                f" AND NOT EXISTS (SELECT 1 FROM covers c WHERE c.urow = t.rowid"
                f" AND c.leaf NOT IN passing)",
                (version, version, *params, *kparams, version, version))
        return rows

    def _fixed_rowids(self, key: tuple[Any, ...],
                      rows: Callable[[], list[tuple[Any, ...]]]) -> np.ndarray:
        """The rowids ``rows()`` selects, kept under ``key`` (which names a committed version:
        what it selects there never changes); read-only, shared by every caller."""
        with self._lock:
            cached = self._filtered.get(key)
            if cached is not None:
                self._filtered.move_to_end(key)
                return cached
        found = rows()
        out = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
        out.flags.writeable = False
        with self._lock:
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
            out += [r for (r,) in self.query(
                f"SELECT u.rowid FROM units u JOIN documents d ON d.drow = u.doc_row WHERE"
                f" u.rowid IN ({','.join('?' * len(part))}) AND {sql}", (*part, *params))]
        return sorted(out)

    def spanning_rowids(self, unit: str, level: int, version: int) -> np.ndarray:
        """Rowids of the units of a kind whose rows span levels (communities: stored at their
        lowest level, ``umeta.levels = [lo, hi]``) that stand for ``level``, visible at
        ``version``."""
        return self._fixed_rowids(("spanning", unit, level, version), lambda: self.query(
            f"SELECT rowid FROM units u WHERE unit = ? AND level <= ? AND {_visible('u')}"
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
        with self._lock:
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
            rows = self.query(
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
            with self._lock:
                for r, row in fresh.items():
                    out[r] = self._rows[r] = row
                while len(self._rows) > _ROW_CACHE:
                    self._rows.popitem(last=False)
        return out

    def _hydrate_derived(self, rowids: list[int], rows: dict[int, dict[str, Any]]) -> None:
        """Fill a derived unit's source fields from the documents and leaves it covers."""
        marks = ','.join('?' * len(rowids))
        docs: dict[int, list[tuple[Any, ...]]] = {}
        for urow, *doc in self.query(
                "SELECT c.urow, d.id, d.title, d.source, d.uri, d.trust, COUNT(*) AS n FROM covers c"
                f" JOIN documents d ON d.drow = c.drow WHERE c.urow IN ({marks})"
                " GROUP BY c.urow, c.drow ORDER BY c.urow, n DESC, d.id", rowids):
            docs.setdefault(urow, []).append(tuple(doc))
        leaves: dict[int, list[str]] = {}
        for urow, uid in self.query(
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
            for rowid, trust, suspected in self.query(
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
            for r, v in self.query(
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
        for child, parent in self.query(
                f"SELECT j.value, p.uid FROM units p, json_each(p.umeta, '$.children') j"
                f" WHERE p.unit = ? AND p.umeta IS NOT NULL AND {_visible('p')} AND {_valid('p')}"
                f" AND j.value IN ({','.join('?' * len(uids))}) ORDER BY p.level, p.uid",
                (unit, version, version, version, version, *uids)):
            out.setdefault(child, []).append(parent)
        return out

    # --- what derived-unit builders read -----------------------------------------------

    def live_leaves(self, unit: str = "chunk") -> list[tuple[Any, ...]]:
        """Every live unit of a per-document kind: (rowid, uid, doc_id, start, tokens, text)."""
        return self.query(
            "SELECT rowid, uid, doc_id, start, tokens, text FROM units WHERE unit = ? AND level = 0"
            " AND v_to IS NULL ORDER BY rowid", (unit,))

    def live_titles(self) -> list[tuple[str, str | None]]:
        """(id, title) of every live document."""
        return self.query("SELECT id, title FROM documents WHERE v_to IS NULL ORDER BY id")

    def live_derived(self, unit: str) -> list[dict[str, Any]]:
        """Every live row of a derived kind with its umeta and the leaf rowids it covers."""
        rows = self.query("SELECT rowid, uid, level, tokens, text, umeta FROM units WHERE unit = ?"
                          " AND v_to IS NULL ORDER BY level, rowid", (unit,))
        covers: dict[int, list[int]] = {}
        for urow, leaf in self.query(
                "SELECT c.urow, c.leaf FROM covers c JOIN units u ON u.rowid = c.urow"
                " WHERE u.unit = ? AND u.v_to IS NULL ORDER BY c.urow, c.leaf", (unit,)):
            covers.setdefault(urow, []).append(leaf)
        return [{"rowid": r, "uid": uid, "level": lv, "tokens": tk, "text": text,
                 "umeta": _loads(m) if m else {}, "covers": covers.get(r, [])}
                for r, uid, lv, tk, text, m in rows]

    # --- what a recall backend copies (store/milvus.py) --------------------------------

    _SYNC_COLUMNS = (
        "SELECT u.rowid, u.uid, u.idx, u.page_start, u.page_end, u.v_from, u.v_to, u.text,"
        " u.vec, d.id, d.source, d.title, d.file_type, d.modified_ms, d.fmeta"
        " FROM units u LEFT JOIN documents d ON d.drow = u.doc_row")

    def added_rows(self, unit: str, level: int, after: int, upto: int,
                   after_rowid: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        """Rows of a kind added in versions ``after < v_from <= upto`` and still stored, in
        rowid order from ``after_rowid`` (exclusive), with their vector, text and document
        fields (``doc`` is None for a derived unit)."""
        return self._sync_rows(self.query(
            f"{self._SYNC_COLUMNS} WHERE u.unit = ? AND u.level = ? AND u.v_from > ?"
            " AND u.v_from <= ? AND u.rowid > ? ORDER BY u.rowid LIMIT ?",
            (unit, level, after, upto, after_rowid, limit)))

    def rows_at(self, unit: str, level: int, version: int, after_rowid: int = 0,
                limit: int = 1000) -> list[dict[str, Any]]:
        """Rows of a kind visible at ``version``, as :meth:`added_rows` gives them."""
        return self._sync_rows(self.query(
            f"{self._SYNC_COLUMNS} WHERE u.unit = ? AND u.level = ? AND {_visible('u')}"
            " AND u.rowid > ? ORDER BY u.rowid LIMIT ?",
            (unit, level, version, version, after_rowid, limit)))

    def visible_signature(self, unit: str, level: int, version: int) -> tuple[int, int]:
        """(newest ``v_from``, row count) of a kind's rows visible at ``version``: it changes
        whenever that set of rows does (a write adds rows at a new version, or retires some)."""
        newest, count = self.query(
            f"SELECT COALESCE(MAX(v_from), 0), COUNT(*) FROM units u WHERE unit = ? AND level = ?"
            f" AND {_visible('u')}", (unit, level, version, version))[0]
        return int(newest), int(count)

    @staticmethod
    def _sync_rows(rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        return [{"rowid": r[0], "uid": r[1], "idx": r[2], "page_start": r[3], "page_end": r[4],
                 "v_from": r[5], "v_to": r[6], "text": r[7],
                 "vector": np.frombuffer(r[8], dtype=np.float32),
                 "doc": None if r[9] is None else {
                     "id": r[9], "source": r[10], "title": r[11], "file_type": r[12],
                     "modified_ms": r[13], "fmeta": _loads(r[14]) if r[14] else {}}}
                for r in rows]

    def retired_rows(self, unit: str, level: int, after: int, upto: int) -> list[tuple[int, int]]:
        """(rowid, v_to) of the rows of a kind added at or before ``after`` and retired in
        ``after < v_to <= upto``."""
        return self.query(
            "SELECT rowid, v_to FROM units WHERE unit = ? AND level = ? AND v_from <= ?"
            " AND v_to > ? AND v_to <= ? ORDER BY rowid", (unit, level, after, after, upto))

    def counts(self) -> dict[str, int]:
        """Documents and units per kind."""
        out = {"documents": self.query("SELECT COUNT(*) FROM documents WHERE v_to IS NULL")[0][0]}
        for unit, _level, n in self.unit_kinds():
            out[unit] = out.get(unit, 0) + n
        return out

    def document_ids(self) -> list[str]:
        return [r for (r,) in self.query("SELECT id FROM documents WHERE v_to IS NULL ORDER BY id")]


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused because another connection holds the lock."""
    name = getattr(exc, "sqlite_errorname", "")
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc)


def _busy_error(waited: float, *, write: bool = True) -> BackendUnavailable:
    what = ("no write lock within {:g} s; nothing of this write was stored" if write
            else "the database stayed locked for {:g} s")
    return BackendUnavailable(
        f"the engine directory is busy (another process is writing): {what.format(waited)}",
        retryable=True, retryAfterMs=1000)


_TRUST_ORDER = ["untrusted", "community", "trusted"]


def lowest_trust(levels: Iterable[str]) -> str:
    """The least trusted of ``levels`` (``"untrusted"`` when there are none): what a text
    derived from several sources may claim."""
    return min(levels, key=lambda t: _TRUST_ORDER.index(t) if t in _TRUST_ORDER else 0,
               default="untrusted")


def _kinds_clause(alias: str, kinds: list[tuple[str, int]]) -> tuple[str, tuple[Any, ...]]:
    """SQL: the row is of one of ``kinds`` ((unit, level) pairs), with its parameters."""
    if not kinds:
        return "0", ()
    terms = " OR ".join(f"({alias}.unit = ? AND {alias}.level = ?)" for _ in kinds)
    return f"({terms})", tuple(x for kind in kinds for x in kind)


def _valid(alias: str) -> str:
    """SQL: a per-document unit, or a derived one all of whose covered leaves are visible at
    the version bound twice as parameters."""
    return (f"({alias}.doc_row IS NOT NULL OR NOT EXISTS (SELECT 1 FROM covers c"
            f" WHERE c.urow = {alias}.rowid AND NOT EXISTS (SELECT 1 FROM units l"
            f" WHERE l.rowid = c.leaf AND {_visible('l')})))")


def _visible(alias: str) -> str:
    """SQL: the row is visible at the version bound twice as parameters."""
    return f"({alias}.v_from <= ? AND ({alias}.v_to IS NULL OR {alias}.v_to > ?))"
