"""Writing the docstore: documents and their units, derived units, retirement and garbage
collection of old versions, and the builders' per-leaf cache.

SQLite is the source of truth. One write transaction replaces every unit of a document and,
in the same transaction, queues the matching Chroma operations in ``outbox``; the commit is
the moment a document becomes visible. Each committed write is a new index version; the last
``retain`` versions stay readable, and rows no retained version can see are deleted in the
same transaction, and so is every inferred filter field no remaining document uses. Inside
the transaction everything is read from the database, not from this process's memory: the
vocabulary gets the terms other processes added, and the new index version follows the last
committed one.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .connection import Connection
from .fields import FilterFields
from .info import InfoTable, capped_reflects
from .vocabulary import Vocabulary


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


class Writer:
    """Every write of documents and units, each one transaction and one new index version."""

    def __init__(self, connection: Connection, info: InfoTable, fields: FilterFields,
                 vocabulary: Vocabulary) -> None:
        self._conn = connection
        self._info = info
        self._fields = fields
        self._vocab = vocabulary

    def write_documents(self, docs: list[DocumentRecord], fields: Mapping[str, str], *,
                        max_fields: int | None = None) -> int:
        """Replace each document and its units in one transaction; returns the new index version.

        ``fields`` are the types of every filter field the documents' ``fmeta`` uses
        (see :meth:`FilterFields.merge`); ``max_fields`` caps how many fields the engine holds.
        """
        with self._conn.transaction() as db:
            self._fields.merge(db, fields, max_fields)
            self._vocab.assign(db, (t for d in docs for u in d.units for t in u.terms))
            version = self._info.index_version() + 1
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

    def delete_documents(self, doc_ids: list[str]) -> tuple[int, int]:
        """Retire documents (and their units) in one transaction: (deleted count, index version)."""
        with self._conn.transaction() as db:
            version = self._info.index_version() + 1
            deleted = sum(self._retire_document(db, d, version) for d in doc_ids)
            if deleted:
                self._commit_version(db, version)
            else:
                version -= 1
        return deleted, version

    def write_derived(self, unit: str | Sequence[str], add: list[UnitRecord], retire: list[str],
                      *, base_version: int, info: Mapping[str, str] | None = None,
                      reads: Sequence[str] | None = None,
                      reflects_at_most: int | None = None) -> int | None:
        """Replace derived units of one kind, or of several kinds at once, in one transaction;
        the new index version.

        ``unit`` names the kind(s) written (the graph writes ``node`` and ``triplet``
        together, so no version holds the nodes of one build and the triplets of
        another). ``retire`` names live units of those kinds (by uid) that leave; ``add``
        are new rows, each with the leaf chunk rowids it ``covers``. ``base_version`` is
        the index version the builder read. ``info`` keys are stored in the same commit.

        When the write is refused (None is returned, nothing written, the caller
        recomputes): with ``reads`` None, if any write committed since ``base_version``;
        with ``reads`` (the other derived kinds the builder read, every read made at
        ``base_version``), only if a kind written or read was written since, or the rows
        of ``base_version`` may have been collected. Document writes in between then stay
        to be folded in by the next run: each kind written records the version it reflects
        (``derived.<kind>.version``: the new version when no document was written since
        ``base_version``, else ``base_version``) and the
        version that wrote it (``derived.<kind>.written``). ``reflects_at_most`` is the
        version the derived units a builder read reflect: it caps the record while it lags
        the documents.
        """
        kinds = (unit,) if isinstance(unit, str) else tuple(unit)
        marks = ",".join("?" * len(kinds))
        with self._conn.transaction() as db:
            if not self._may_commit(kinds, reads, base_version):
                return None
            self._vocab.assign(db, (t for u in add for t in u.terms))
            version = self._info.index_version() + 1
            for i in range(0, len(retire), 900):
                part = retire[i:i + 900]
                db.execute(f"UPDATE units SET v_to = ? WHERE unit IN ({marks}) AND v_to IS NULL"
                           f" AND uid IN ({','.join('?' * len(part))})", (version, *kinds, *part))
            for u in add:
                if u.unit not in kinds:
                    raise ValueError(f"write_derived({', '.join(kinds)}) got a {u.unit!r} unit")
                self._insert_unit(db, u, None, None, version)
            for key, value in (info or {}).items():
                self._info.put(db, key, value)
            data_version = int(self._info.info("data_version") or 0)
            reflects = capped_reflects(version if data_version <= base_version else base_version,
                                       reflects_at_most, data_version)
            for kind in kinds:
                self._info.put(db, f"derived.{kind}.version", str(reflects))
                self._info.put(db, f"derived.{kind}.written", str(version))
            self._commit_version(db, version, data=False)
        return version

    def _may_commit(self, kinds: tuple[str, ...], reads: Sequence[str] | None,
                    base_version: int) -> bool:
        """Whether a derived write on ``base_version`` may commit now (:meth:`write_derived`)."""
        current = self._info.index_version()
        if current == base_version:
            return True
        if reads is None or not self._info.readable_since(base_version):
            return False
        return all(int(self._info.info(f"derived.{kind}.written") or 0) <= base_version
                   for kind in (*kinds, *reads))

    def _insert_unit(self, db: sqlite3.Connection, u: UnitRecord, doc_id: str | None,
                     doc_row: int | None, version: int) -> int:
        """Insert one unit row (with its screen, Chroma outbox entry and covers); its rowid."""
        ids = self._vocab.encode(u.terms)
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

    @staticmethod
    def _retire_document(db: sqlite3.Connection, doc_id: str, version: int) -> int:
        db.execute("UPDATE units SET v_to = ? WHERE doc_id = ? AND v_to IS NULL",
                   (version, doc_id))
        return db.execute("UPDATE documents SET v_to = ? WHERE id = ? AND v_to IS NULL",
                          (version, doc_id)).rowcount

    def _commit_version(self, db: sqlite3.Connection, version: int, *, data: bool = True) -> None:
        """Finish a write at ``version``; ``data``: it changed documents (not only derived units)."""
        self._collect_garbage(db, version)
        self._info.record_version(db, version, data=data)

    def _collect_garbage(self, db: sqlite3.Connection, version: int) -> None:
        """Delete rows that no retained version can see and no lagging derived kind still has
        to fold in (``InfoTable.collect_through``), queueing their Chroma deletes, and
        forget the inferred fields only those documents used."""
        oldest = self._info.collect_through(version)
        collected = self._info.info("collected_through")
        self._info.put(db, "collected_through", str(max(oldest, int(collected or 0))))
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
        self._fields.drop_unused(db, used)

    # --- a builder's per-leaf cache ----------------------------------------------------

    def leaf_cache(self, name: str, identity: str, leaves: Iterable[int]) -> dict[int, str]:
        """The cached entries of ``leaves`` (rowids) under builder ``name`` and ``identity``."""
        wanted = list(leaves)
        out: dict[int, str] = {}
        for i in range(0, len(wanted), 900):
            part = wanted[i:i + 900]
            out.update(self._conn.query(
                f"SELECT leaf, data FROM leaf_cache WHERE name = ? AND identity = ? AND leaf IN"
                f" ({','.join('?' * len(part))})", (name, identity, *part)))
        return out

    def put_leaf_cache(self, name: str, identity: str, entries: Mapping[int, str]) -> None:
        """Store entries (leaf rowid -> data) for leaves that still exist; entries of another
        identity under ``name`` are dropped (what they cached is no longer what is built)."""
        with self._conn.transaction() as db:
            db.execute("DELETE FROM leaf_cache WHERE name = ? AND identity != ?", (name, identity))
            db.executemany(
                "INSERT OR REPLACE INTO leaf_cache(name, leaf, identity, data) SELECT ?, ?, ?, ?"
                " WHERE EXISTS (SELECT 1 FROM units WHERE rowid = ?)",
                [(name, leaf, identity, data, leaf) for leaf, data in entries.items()])
