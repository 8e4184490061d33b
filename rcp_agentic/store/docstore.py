"""The SQLite docstore: documents, units (text, vector, BM25 postings), fields, and the Chroma
outbox, as narrow parts over one connection.

SQLite is the source of truth; a process killed at any point leaves either the old or the
new version of a document, whole (``writes.py``). The parts: ``connection`` (the
connection, its lock, write transactions that wait for other processes, refresh on their
commits; ``connection.py``, the tables in ``schema.py``), ``info_table`` (engine-wide keys,
index versions; ``info.py``), ``filter_fields`` and ``vocabulary`` (what metadata and text
are spelled in; ``fields.py``, ``vocabulary.py``), ``writer`` (documents, derived units,
retirement, garbage collection, the leaf cache; ``writes.py``), ``reader`` (units at a
version, filtered rowids, hydrated rows; ``reads.py``) and ``feed`` (the outbox and the row
streams recall backends copy; ``feed.py``). :class:`Docstore` builds them and offers each
part's methods under its own name; a caller that needs one job can take that part.
"""

from __future__ import annotations

from pathlib import Path

from .connection import BUSY_TIMEOUT_SECONDS, Connection
from .feed import RecallFeed
from .fields import FilterFields
from .info import InfoTable
from .reads import Reader
from .vocabulary import Vocabulary
from .writes import Writer


class Docstore:
    """The engine's SQLite store: its parts over one thread-safe connection (WAL mode)."""

    def __init__(self, path: Path, *, retain: int = 8,
                 busy_timeout: float = BUSY_TIMEOUT_SECONDS) -> None:
        self.path = path
        self.connection = connection = Connection(path, busy_timeout=busy_timeout)
        self.info_table = info = InfoTable(connection, retain=retain)
        self.filter_fields = fields = FilterFields(connection)
        self.vocabulary = vocabulary = Vocabulary(connection)
        connection.follow(vocabulary)
        self.writer = writer = Writer(connection, info, fields, vocabulary)
        self.reader = reader = Reader(connection, info)
        self.feed = feed = RecallFeed(connection)

        # The parts' methods that holders of the store call, under their own names (bound
        # methods, no wrappers); the recall backends' row streams are reached through ``feed``.
        self.close = connection.close
        self.refresh = connection.refresh
        self.transaction = connection.transaction
        self.query = connection.query
        self.info = info.info
        self.set_info = info.set_info
        self.set_info_if = info.set_info_if
        self.info_default = info.info_default
        self.index_version = info.index_version
        self.oldest_retained = info.oldest_retained
        self.readable_since = info.readable_since
        self.fields = fields.fields
        self.set_fields = fields.set_fields
        self.term_id = vocabulary.term_id
        self.terms_of = vocabulary.terms_of
        self.vocab_size = vocabulary.vocab_size
        self.write_documents = writer.write_documents
        self.delete_documents = writer.delete_documents
        self.write_derived = writer.write_derived
        self.leaf_cache = writer.leaf_cache
        self.put_leaf_cache = writer.put_leaf_cache
        self.unit_kinds = reader.unit_kinds
        self.vectors = reader.vectors
        self.unit_arrays = reader.unit_arrays
        self.filtered_rowids = reader.filtered_rowids
        self.passing_rowids = reader.passing_rowids
        self.spanning_rowids = reader.spanning_rowids
        self.hydrate = reader.hydrate
        self.covered_leaves = reader.covered_leaves
        self.dates = reader.dates
        self.parents = reader.parents
        self.live_leaves = reader.live_leaves
        self.live_titles = reader.live_titles
        self.leaves_of = reader.leaves_of
        self.live_derived = reader.live_derived
        self.derived_rows = reader.derived_rows
        self.leaf_docs = reader.leaf_docs
        self.derived_delta = reader.derived_delta
        self.leaf_delta = reader.leaf_delta
        self.kind_delta = reader.kind_delta
        self.unit_delta = reader.unit_delta
        self.counts = reader.counts
        self.document_ids = reader.document_ids
        self.outbox = feed.outbox
        self.clear_outbox = feed.clear_outbox
        self.stored_count = feed.stored_count
        self.stored_kinds = feed.stored_kinds
        self.rowids = feed.rowids

    @property
    def busy_timeout(self) -> float:
        """How long a write waits for another process's write (seconds)."""
        return self.connection.busy_timeout

    @busy_timeout.setter
    def busy_timeout(self, seconds: float) -> None:
        self.connection.busy_timeout = seconds
