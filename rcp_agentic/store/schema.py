"""The docstore's on-disk format: its tables, the migration from older schemas, and the SQL
predicates of snapshot visibility that every read shares.

Snapshots: every committed write is a new index version. Rows carry the version that added
them (``v_from``) and the one that retired them (``v_to``); a reader at version v sees
``v_from <= v < v_to``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any


def _json_loader() -> Callable[[str], Any]:
    try:  # chromadb, a dependency, brings orjson: ~3x faster on many small umeta documents
        from orjson import loads
    except ImportError:  # pragma: no cover
        return json.loads
    return loads


load_json = _json_loader()  # how the JSON columns (umeta, fmeta) are read

SCHEMA_VERSION = "2"  # 2: units may cover many documents (covers, nullable doc_row, umeta)

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


def install(db: sqlite3.Connection) -> None:
    """Create the tables a new directory lacks and migrate an older one."""
    db.executescript(_SCHEMA)
    _migrate(db)


def _migrate(db: sqlite3.Connection) -> None:
    """Bring a directory of an older schema up to this one, in one transaction."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(units)")}
    if "umeta" in columns:
        return
    # Schema 1 -> 2: a unit may cover many documents (doc_row nullable, umeta added).
    db.execute("BEGIN IMMEDIATE")
    try:
        if "umeta" not in {r[1] for r in db.execute("PRAGMA table_info(units)")}:
            seq = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'units'").fetchone()
            db.execute("ALTER TABLE units RENAME TO units_v1")
            for name in ("units_live", "units_doc", "units_live_doc", "units_retired",
                         "units_kind"):
                db.execute(f"DROP INDEX IF EXISTS {name}")
            db.execute(_UNITS_DDL)
            cols = ('rowid, uid, unit, level, doc_id, doc_row, idx, start, "end", page_start,'
                    " page_end, tokens, nterms, v_from, v_to, text, vec, term_ids, term_tfs")
            db.execute(f"INSERT INTO units({cols}) SELECT {cols} FROM units_v1")
            db.execute("DROP TABLE units_v1")
            for statement in _UNITS_INDEXES.strip().split(";"):
                if statement.strip():
                    db.execute(statement)
            if seq is not None:  # rowids are never reused, across the migration too
                db.execute("UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name ="
                           " 'units'", (seq[0],))
        db.execute("INSERT OR REPLACE INTO info(key, value) VALUES"
                   " ('schema_version', ?)", (SCHEMA_VERSION,))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def kinds_clause(alias: str, kinds: list[tuple[str, int]]) -> tuple[str, tuple[Any, ...]]:
    """SQL: the row is of one of ``kinds`` ((unit, level) pairs), with its parameters."""
    if not kinds:
        return "0", ()
    terms = " OR ".join(f"({alias}.unit = ? AND {alias}.level = ?)" for _ in kinds)
    return f"({terms})", tuple(x for kind in kinds for x in kind)


def valid(alias: str) -> str:
    """SQL: a per-document unit, or a derived one all of whose covered leaves are visible at
    the version bound twice as parameters."""
    return (f"({alias}.doc_row IS NOT NULL OR NOT EXISTS (SELECT 1 FROM covers c"
            f" WHERE c.urow = {alias}.rowid AND NOT EXISTS (SELECT 1 FROM units l"
            f" WHERE l.rowid = c.leaf AND {visible('l')})))")


def visible(alias: str) -> str:
    """SQL: the row is visible at the version bound twice as parameters."""
    return f"({alias}.v_from <= ? AND ({alias}.v_to IS NULL OR {alias}.v_to > ?))"
