"""Writes: documents in (validated, chunked, screened, embedded, committed), documents out.

:class:`Ingest` is the write path of one engine. A batch of up to
:data:`WRITE_BATCH_DOCS` documents is one SQLite transaction: each document is visible
whole or not at all. Its trust level is granted by the operator only (files under
``trusted_sources``, or ``add_documents(trusted=True)``); a document may lower its own,
never raise it. After each commit the recall backend catches up (best effort) and the
derived builders are run or scheduled (:class:`~.derived_updates.DerivedUpdates`).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .catalog import Catalog
from .config import EngineConfig
from .control import RequestControl, checked
from .corpus.documents import (attach_vectors, build_record, check_document_chars,
                               to_source_document)
from .corpus.loaders import load_path
from .corpus.source import SkippedFile, SourceDocument
from .corpus.metadata import check_meta_shape, filterable_meta
from .derived import DerivedReport
from .derived_updates import DerivedUpdates
from .errors import EmbeddingMismatch, InvalidParams, NotFound, RCPError
from .heap import release_free_memory
from .models.embedder import TimedEmbedder
from .store.docstore import Docstore
from .store.recall import RecallBackend
from .store.writes import DocumentRecord
from .trust import InjectionScreen

# Documents per write transaction: bounds memory and makes progress visible.
WRITE_BATCH_DOCS = 64


@dataclass
class AddResult:
    """What ``add_documents`` / ``index_paths`` stored."""

    ids: list[str] = field(default_factory=list)
    chunks: int = 0
    pages: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)
    index_version: str = ""
    seconds: float = 0.0
    seconds_embedding: float = 0.0
    # What the derived-unit builders (tree, graph, communities) did after the documents were
    # written: inline, their reports; in the background, a "scheduled" report per builder.
    derived: list[DerivedReport] = field(default_factory=list)

    @property
    def documents(self) -> int:
        """Distinct documents written."""
        return len(set(self.ids))

    def describe(self, into: object) -> str:
        """``Indexed 5 documents (6 chunks, 2 pages) in 3.5s (3.4s embedding) into DIR``
        (``into``: where they went, the engine's folder)."""
        return (f"Indexed {self.documents} documents ({self.chunks} chunks, {self.pages} pages) "
                f"in {self.seconds:.1f}s ({self.seconds_embedding:.1f}s embedding) into {into}")


def _raw_meta(item: Any) -> Any:
    """The metadata an ``add_documents`` item carries, not validated yet."""
    if isinstance(item, SourceDocument):
        return item.meta
    if isinstance(item, Mapping):
        return item.get("meta", item.get("metadata"))
    return None


Grant = Callable[[SourceDocument], bool]


@dataclass
class Ingest:
    """The write path of one engine (module doc); thread-safe (writes serialise on
    ``write_lock``, shared with the derived builders that must run under it)."""

    store: Docstore
    catalog: Catalog
    recall: RecallBackend
    embedder: TimedEmbedder
    screen: InjectionScreen
    config: EngineConfig
    derived: DerivedUpdates
    write_lock: threading.Lock

    # --- adding ------------------------------------------------------------------------

    def add(self, documents: Iterable[Any], grant: Grant,
            on_document: Callable[[str], None] | None, control: RequestControl | None,
            on_invalid: Callable[[Any, InvalidParams], None] | None = None) -> AddResult:
        """Add or replace ``documents``; ``grant`` says per document whether the operator
        trusts it.

        A list is validated whole before anything is written. A lazy input is validated
        as it is read; with ``on_invalid`` a bad document is reported there and skipped,
        otherwise the call stops. Any error after a transaction committed carries
        ``committedIds`` and ``pendingIds`` (ids known not to be written).
        """
        ctl = checked(control)
        total = len(documents) if isinstance(documents, (list, tuple)) else None
        result = AddResult()
        start = time.perf_counter()
        embed_before = self.embedder.seconds_in_model
        items: Iterable[tuple[SourceDocument, str]] = self._prepared(documents, grant,
                                                                     on_invalid)
        if total is not None:
            items = list(items)  # a bad document anywhere in a list writes nothing

        def write(batch: list[tuple[SourceDocument, str]], later: list[str]) -> None:
            try:
                ctl.check()
                self._write_batch(batch, result, on_document)
            except RCPError as exc:
                exc.data["committedIds"] = list(result.ids)
                exc.data["pendingIds"] = [d.id for d, _t in batch if d.id] + later
                raise
            done = len(result.ids)
            ctl.report(done / total if total else 0.0, "index",
                       f"indexed {done}" + (f"/{total}" if total else "") + " document(s)")

        batch: list[tuple[SourceDocument, str]] = []
        for position, entry in enumerate(items, start=1):
            batch.append(entry)
            if len(batch) >= WRITE_BATCH_DOCS:
                # Of a lazy input, what follows is unknown.
                later = ([d.id for d, _t in items[position:] if d.id]
                         if isinstance(items, list) else [])
                write(batch, later)
                batch = []
        if batch:
            write(batch, [])
        if result.ids:
            self.catalog.follow(self.store.index_version())
            self._after_write(result)
        result.index_version = f"v{self.store.index_version()}"
        result.seconds = time.perf_counter() - start
        result.seconds_embedding = self.embedder.seconds_in_model - embed_before
        return result

    def _after_write(self, result: AddResult) -> None:
        """The derived builders, run or scheduled once the documents are committed."""
        try:
            result.derived = self.derived.after_write()
        except RCPError as exc:
            exc.data["committedIds"] = list(result.ids)
            exc.data["pendingIds"] = []
            raise
        finally:
            release_free_memory()

    def _prepared(self, documents: Iterable[Any], grant: Grant,
                  on_invalid: Callable[[Any, InvalidParams], None] | None
                  ) -> Iterable[tuple[SourceDocument, str]]:
        """Each valid document with its trust level, in input order."""
        for i, item in enumerate(documents):
            try:
                # Before anything else walks the metadata (recursively).
                check_meta_shape(_raw_meta(item), max_keys=self.config.max_meta_keys,
                                 max_depth=self.config.max_meta_depth, where=f"documents[{i}]")
                doc, requested = to_source_document(item, i)
                check_document_chars(doc.text, self.config.max_document_chars,
                                     f"documents[{i}].text")
                yield doc, self._trust(requested, grant(doc), i)
            except InvalidParams as exc:
                if on_invalid is None:
                    raise
                on_invalid(item, exc)

    def _trust(self, requested: str | None, granted: bool, position: int) -> str:
        """The trust level of one document: ``trusted`` only when the operator granted it
        (never from a field the document's sender chose); a document may lower its own."""
        if granted:
            return requested or "trusted"
        if requested == "trusted":
            raise InvalidParams("trust 'trusted' is granted only by the operator (files under "
                                "trusted_sources, or add_documents(trusted=True) in Python)",
                                field=f"documents[{position}].trust")
        if requested == "community" and self.config.default_trust == "untrusted":
            return "untrusted"
        return requested or self.config.default_trust

    def under_trusted_path(self, doc: SourceDocument) -> bool:
        """Whether the file a loader read lies, symlinks resolved, under a trusted_sources path
        (relative ones are taken from the working directory)."""
        if not doc.source or not self.config.trusted_sources:
            return False
        path = re.sub(r"#L\d+$", "", doc.source) if doc.file_type == "jsonl" else doc.source
        real = os.path.realpath(path)
        for prefix in self.config.trusted_sources:
            root = os.path.realpath(os.path.expanduser(prefix))
            if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
                return True
        return False

    def _records(self, docs: list[tuple[SourceDocument, str]]
                 ) -> tuple[dict[str, DocumentRecord], list[tuple[DocumentRecord, list[str]]],
                            dict[str, str], dict[str, str]]:
        """The batch's records (a repeated id: the last one wins), their chunk texts in input
        order, the known field types and the fields this batch infers."""
        stored = self.store.fields()
        fields = {n: t for n, (t, _o) in stored.items()}
        declared = {n for n, (_t, o) in stored.items() if o == "declared"}
        new_fields: dict[str, str] = {}
        records: dict[str, DocumentRecord] = {}
        texts: list[tuple[DocumentRecord, list[str]]] = []
        for doc, trust in docs:
            fmeta = filterable_meta(doc.meta, fields, infer=self.config.infer_filter_fields,
                                    declared=declared, new_fields=new_fields)
            record, chunk_texts = build_record(doc, chunk_size=self.config.chunk_size,
                                               chunk_overlap=self.config.chunk_overlap,
                                               fmeta=fmeta, trust=trust)
            for unit in record.units:
                screening = self.screen.screen(unit.text)
                unit.injection_suspected = screening.suspected
                unit.injection_score = screening.score
            records[record.id] = record
            texts.append((record, chunk_texts))
        return records, texts, fields, new_fields

    def _embed(self, texts: list[tuple[DocumentRecord, list[str]]]) -> None:
        """Embed every chunk of the batch in one call and attach the vectors."""
        flat = [t for _r, ts in texts for t in ts]
        vectors = self.embedder.embed_documents(flat) if flat else np.zeros((0, 0), np.float32)
        if len(vectors) != len(flat) or (len(flat) and not np.isfinite(vectors).all()):
            raise InvalidParams("the embedder returned a wrong number of vectors or non-finite "
                                "values", field="embedder")
        if len(flat):
            self._check_dimension(int(vectors.shape[1]))
        pos = 0
        for record, ts in texts:
            attach_vectors(record, vectors[pos:pos + len(ts)])
            pos += len(ts)

    def _check_dimension(self, dim: int) -> None:
        stored = (self.store.info("embedding.dimension")
                  or self.store.info_default("embedding.dimension", str(dim)))
        if int(stored) != dim:
            raise EmbeddingMismatch(f"embedding dimension {dim} differs from the index's {stored}",
                                    field="embedder")

    def _write_batch(self, docs: list[tuple[SourceDocument, str]], result: AddResult,
                     on_document: Callable[[str], None] | None) -> None:
        records, texts, fields, new_fields = self._records(docs)
        self._embed(texts)
        with self.write_lock:
            used = {n: new_fields.get(n) or fields[n] for r in records.values() for n in r.fmeta}
            self.store.write_documents(list(records.values()), used,
                                       max_fields=self.config.max_filter_fields)
            self.catalog.invalidate()
        self.recall.after_commit()
        result.ids.extend(r.id for r, _texts in texts)  # one per input, in input order
        for record in records.values():
            result.chunks += sum(1 for u in record.units if u.unit == "chunk")
            result.pages += sum(1 for u in record.units if u.unit == "page")
            if on_document:
                on_document(record.id)

    # --- files ---------------------------------------------------------------------------

    def index_paths(self, paths: Iterable[str | os.PathLike[str]], *,
                    on_document: Callable[[str], None] | None = None,
                    on_skip: Callable[[SkippedFile], None] | None = None,
                    follow_symlinks: bool = False) -> AddResult:
        """Load files and folders and add them; bad files are skipped (see
        ``Engine.index_paths``)."""
        skipped: list[SkippedFile] = []

        def skip(bad: SkippedFile) -> None:
            skipped.append(bad)
            if on_skip:
                on_skip(bad)

        def documents() -> Iterable[SourceDocument]:
            for path in paths:
                for item in load_path(path, follow_symlinks=follow_symlinks,
                                      max_chars=self.config.max_document_chars):
                    if isinstance(item, SkippedFile):
                        skip(item)
                    else:
                        yield item

        def invalid(item: Any, exc: InvalidParams) -> None:
            skip(SkippedFile(getattr(item, "source", None) or getattr(item, "id", None) or "?",
                             exc.message))

        result = self.add(documents(), self.under_trusted_path, on_document, None,
                          on_invalid=invalid)
        result.skipped = skipped
        return result

    # --- deleting ------------------------------------------------------------------------

    def delete(self, ids: list[str], *, missing_ok: bool = False) -> int:
        """Delete documents and every unit derived from them; returns how many were deleted.
        Unknown ids raise NotFound (nothing is deleted) unless ``missing_ok``."""
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InvalidParams("ids must be a list of strings", field="ids")
        with self.write_lock:
            if not missing_ok:
                known = set(self.store.document_ids()) if ids else set()
                missing = [i for i in ids if i not in known]
                if missing:
                    raise NotFound(f"no such document(s): {', '.join(missing[:10])}",
                                   field="ids", ids=missing[:100])
            deleted, version = self.store.delete_documents(ids)
            self.catalog.invalidate()
        self.recall.after_commit()
        if deleted:
            self.catalog.follow(version)
            self.derived.after_write()
        return deleted
