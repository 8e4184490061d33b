"""Engine: one corpus in one directory — ingest it once, retrieve from it at every granularity.

``Engine(path)`` opens or creates an engine directory holding ``engine.db``
(SQLite, the source of truth), ``chroma/`` (embedded Chroma, unless a server URL
is configured) and ``config.json``. All public methods are thread-safe.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .config import EngineConfig
from .corpus.documents import attach_vectors, build_record, to_source_document
from .corpus.loaders import SkippedFile, SourceDocument, load_path
from .corpus.metadata import filterable_meta, is_valid_field_name
from .errors import BackendUnavailable, Conflict, InvalidParams, NotFound
from .models.analyzer import analyze
from .models.embedder import SentenceTransformerEmbedder, TimedEmbedder, as_embedder
from .pipeline import fusion
from .pipeline.filters import BUILTIN_FIELDS, compile_filter
from .pipeline.hits import build_hit
from .pipeline.params import PARAM_NAMES, Plan, make_plan, parse_params
from .store.chroma import ChromaVectors
from .store.docstore import DocumentRecord, Docstore
from .store.memindex import UnitIndex
from .wire import Hit, RetrieveResult, Usage

log = logging.getLogger(__name__)

DEFAULT_ENGINE_DIR = ".rcp-agentic"
ENGINE_ENV = "RCP_AGENTIC_ENGINE"
# Documents per write transaction: bounds memory and makes progress visible.
WRITE_BATCH_DOCS = 64


class EmbeddingMismatch(Conflict):
    """The engine directory was built with another embedding model than the one given."""


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

    @property
    def documents(self) -> int:
        return len(self.ids)


def default_engine_dir() -> Path:
    """``$RCP_AGENTIC_ENGINE`` or ``./.rcp-agentic``."""
    return Path(os.environ.get(ENGINE_ENV) or DEFAULT_ENGINE_DIR)


class Engine:
    """A retrieval engine over one corpus.

    >>> engine = Engine("./my-engine")                 # doctest: +SKIP
    >>> engine.add_documents([{"id": "a", "text": "..."}])  # doctest: +SKIP
    >>> engine.retrieve("what is ...", k=5, unit="document").hits  # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 config: EngineConfig | None = None, embedder: Any = None,
                 **overrides: Any) -> None:
        self.path = Path(path) if path is not None else default_engine_dir()
        self.path.mkdir(parents=True, exist_ok=True)
        self.config = config or EngineConfig.resolve(self.path, **overrides)
        if not (self.path / "config.json").exists():
            self.config.save(self.path)
        if self.config.blas_threads:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=self.config.blas_threads, user_api="blas")
        if embedder is None:
            embedder = SentenceTransformerEmbedder(batch_size=self.config.embed_batch_size,
                                                   torch_threads=self.config.torch_threads)
        self.embedder = TimedEmbedder(as_embedder(embedder), self.config.query_cache_size)
        self._write_lock = threading.Lock()
        self._index_lock = threading.Lock()
        self._indexes: dict[tuple[str, int], UnitIndex] = {}
        self.store = Docstore(self.path / "engine.db")
        try:
            self._check_embedder()
            self._declare_fields()
            engine_id = self.store.info("engine_id")
            if engine_id is None:
                engine_id = uuid.uuid4().hex[:12]
                self.store.set_info("engine_id", engine_id)
            self.chroma = ChromaVectors(
                path=None if self.config.chroma_url else self.path / "chroma",
                url=self.config.chroma_url, prefix=f"rcp-{engine_id}")
            self.reconcile()
        except BaseException:
            self.store.close()
            raise

    # --- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        """Release the SQLite connection."""
        self.store.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_embedder(self) -> None:
        stored = self.store.info("embedding.identity")
        if stored is None:
            self.store.set_info("embedding.identity", self.embedder.identity)
        elif stored != self.embedder.identity:
            raise EmbeddingMismatch(
                f"the engine at {self.path} was built with embedding model {stored!r}; it cannot "
                f"be queried with {self.embedder.identity!r} (vectors would be meaningless). "
                "Open it with the same model, or index into a new engine directory.",
                field="embedder")

    def _check_dimension(self, dim: int) -> None:
        stored = self.store.info("embedding.dimension")
        if stored is None:
            self.store.set_info("embedding.dimension", str(dim))
        elif int(stored) != dim:
            raise EmbeddingMismatch(f"embedding dimension {dim} differs from the index's {stored}",
                                    field="embedder")

    def _declare_fields(self) -> None:
        declared = self.config.filter_fields
        for name in declared:
            if not is_valid_field_name(name):
                raise InvalidParams(f"filter field name {name!r} is not allowed (letters, digits, "
                                    "'_.-'; not a built-in field)", field=f"filter_fields.{name}")
        stored = self.store.fields()
        changed = {n: t for n, t in declared.items() if stored.get(n) != (t, "declared")}
        if changed:
            with self.store.transaction() as db:
                self.store.set_fields(db, changed, "declared")

    def filter_fields(self) -> dict[str, str]:
        """Every filterable field and its type: built-ins, declared and inferred fields."""
        out = {name: ftype for name, (ftype, _col) in BUILTIN_FIELDS.items()}
        out.update({n: t for n, (t, _o) in self.store.fields().items()})
        return out

    @property
    def index_version(self) -> str:
        """The opaque token of the current committed state."""
        return f"v{self.store.index_version()}"

    def stats(self) -> dict[str, int]:
        """Counts of documents and of each unit."""
        return self.store.counts()

    # --- Chroma sync -----------------------------------------------------------------

    def _apply_outbox(self) -> None:
        ops = self.store.outbox()
        if not ops:
            return
        deleted = {(o.unit, o.level, o.urow) for o in ops if o.op == "del"}
        added = [(o.unit, o.level, o.urow) for o in ops if o.op == "add"
                 and (o.unit, o.level, o.urow) not in deleted]
        by_kind: dict[tuple[str, int], list[int]] = {}
        for unit, level, row in deleted:
            by_kind.setdefault((unit, level), []).append(row)
        for (unit, level), rows in by_kind.items():
            self.chroma.delete(unit, level, rows)
        by_kind = {}
        for unit, level, row in added:
            by_kind.setdefault((unit, level), []).append(row)
        for (unit, level), rows in by_kind.items():
            vecs = self.store.vectors(rows)
            present = [r for r in rows if r in vecs]
            if present:
                self.chroma.add(unit, level, present, np.vstack([vecs[r] for r in present]))
        self.store.clear_outbox(ops[-1].seq)

    def reconcile(self) -> None:
        """Bring Chroma in line with SQLite: replay queued operations, then repair any difference."""
        with self._write_lock:
            self._apply_outbox()
            for unit, level, _count in self.store.unit_kinds():
                truth = set(self.store.rowids(unit, level))
                have = self.chroma.all_ids(unit, level)
                extra, missing = sorted(have - truth), sorted(truth - have)
                if not extra and not missing:
                    continue
                log.warning("repairing Chroma %s/l%d: %d extra, %d missing vectors", unit, level,
                            len(extra), len(missing))
                if extra:
                    self.chroma.delete(unit, level, extra)
                for i in range(0, len(missing), 1000):
                    part = missing[i:i + 1000]
                    vecs = self.store.vectors(part)
                    self.chroma.add(unit, level, part, np.vstack([vecs[r] for r in part]))

    def _sync_chroma(self) -> None:
        """Apply the outbox after a commit; the data is already safe in SQLite if Chroma is down."""
        try:
            self._apply_outbox()
        except BackendUnavailable as exc:
            raise BackendUnavailable(
                f"the write is committed (index version {self.index_version}) but Chroma could "
                f"not be updated: {exc.message}. Its copy is repaired on the next write or "
                "reopen.", retryable=True, committed=True) from exc

    # --- writes ----------------------------------------------------------------------

    def add_documents(self, documents: Iterable[Any], *,
                      on_document: Callable[[str], None] | None = None) -> AddResult:
        """Add or replace documents: each ``{"id"?, "text", "title"?, "meta"?}`` or a SourceDocument.

        An explicit id replaces every unit derived from that document's previous
        version; without an id a stable one is minted from the text. Documents are
        written in transactions of up to 64; each is visible whole or not at all.
        Raises InvalidParams (naming the field) before writing anything of a bad batch.
        """
        result = AddResult()
        start = time.perf_counter()
        embed_before = self.embedder.seconds_in_model
        batch: list[SourceDocument] = []
        for i, item in enumerate(documents):
            batch.append(to_source_document(item, i))
            if len(batch) >= WRITE_BATCH_DOCS:
                self._write_batch(batch, result, on_document)
                batch = []
        if batch:
            self._write_batch(batch, result, on_document)
        result.index_version = self.index_version
        result.seconds = time.perf_counter() - start
        result.seconds_embedding = self.embedder.seconds_in_model - embed_before
        return result

    def _write_batch(self, docs: list[SourceDocument], result: AddResult,
                     on_document: Callable[[str], None] | None) -> None:
        stored = self.store.fields()
        fields = {n: t for n, (t, _o) in stored.items()}
        declared = {n for n, (_t, o) in stored.items() if o == "declared"}
        new_fields: dict[str, str] = {}
        records: dict[str, DocumentRecord] = {}
        texts: list[tuple[DocumentRecord, list[str]]] = []
        for doc in docs:
            fmeta = filterable_meta(doc.meta, fields, infer=self.config.infer_filter_fields,
                                    declared=declared, new_fields=new_fields)
            record, chunk_texts = build_record(doc, chunk_size=self.config.chunk_size,
                                               chunk_overlap=self.config.chunk_overlap,
                                               fmeta=fmeta)
            records[record.id] = record  # a repeated id in one batch: the last one wins
            texts.append((record, chunk_texts))
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
        with self._write_lock:
            self.store.write_documents(list(records.values()), new_fields)
            self._invalidate()
            self._sync_chroma()
        for record in records.values():
            result.ids.append(record.id)
            result.chunks += sum(1 for u in record.units if u.unit == "chunk")
            result.pages += sum(1 for u in record.units if u.unit == "page")
            if on_document:
                on_document(record.id)

    def delete_documents(self, ids: list[str], *, missing_ok: bool = False) -> int:
        """Delete documents and every unit derived from them; returns how many were deleted.

        Unknown ids raise NotFound (nothing is deleted) unless ``missing_ok``.
        """
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InvalidParams("ids must be a list of strings", field="ids")
        with self._write_lock:
            if not missing_ok:
                known = set(self.store.document_ids()) if ids else set()
                missing = [i for i in ids if i not in known]
                if missing:
                    raise NotFound(f"no such document(s): {', '.join(missing[:10])}",
                                   field="ids", ids=missing[:100])
            deleted, _version = self.store.delete_documents(ids)
            self._invalidate()
            self._sync_chroma()
        return deleted

    def index_paths(self, paths: Iterable[str | os.PathLike[str]], *,
                    on_document: Callable[[str], None] | None = None,
                    on_skip: Callable[[SkippedFile], None] | None = None) -> AddResult:
        """Load files and folders (txt, md, html, pdf, jsonl) and add them; bad files are skipped."""
        skipped: list[SkippedFile] = []

        def documents() -> Iterable[SourceDocument]:
            for path in paths:
                for item in load_path(path):
                    if isinstance(item, SkippedFile):
                        skipped.append(item)
                        if on_skip:
                            on_skip(item)
                    else:
                        yield item

        result = self.add_documents(documents(), on_document=on_document)
        result.skipped = skipped
        return result

    # --- scoring indexes -------------------------------------------------------------

    def _invalidate(self) -> None:
        with self._index_lock:
            self._indexes.clear()

    def _index(self, unit: str, level: int) -> UnitIndex:
        key = (unit, level)
        index = self._indexes.get(key)
        if index is not None:
            return index
        with self._index_lock:
            index = self._indexes.get(key)
            if index is None:
                count = next((n for u, lv, n in self.store.unit_kinds() if (u, lv) == key), 0)
                arrays = self.store.unit_arrays(unit, level,
                                                with_vectors=count <= self.config.dense_exact_max)
                index = UnitIndex(arrays, self.store.vocab_size(), k1=self.config.bm25_k1,
                                  b=self.config.bm25_b)
                self._indexes[key] = index
        return index

    # --- retrieval -------------------------------------------------------------------

    def retrieve(self, query: Any, k: int = 10, **options: Any) -> RetrieveResult:
        """Ranked hits for ``query``; options are the RCP/1 retrieve params (§7.7) in snake_case.

        ``mode`` dense | sparse | hybrid; ``fusion`` {method: rrf | weighted | convex,
        weights, rrf_k, alpha}; ``candidate_k``; ``unit`` chunk | passage | page |
        document; ``filter`` (§8); ``min_score``; ``include_text``; ``include_vectors``.
        The result's ``to_wire()`` is the exact RCP result object.
        """
        unknown = [name for name in options if name not in PARAM_NAMES]
        if unknown:
            raise InvalidParams(f"unknown retrieve option(s): {', '.join(sorted(unknown))}",
                                field=unknown[0])
        return self.retrieve_params({"query": query, "k": k, **options})

    def retrieve_params(self, raw: dict[str, Any]) -> RetrieveResult:
        """``retrieve`` from a raw params object (wire camelCase or snake_case)."""
        start = time.perf_counter()
        params = parse_params(raw)
        version = self.index_version
        plan = make_plan(params, max_k=self.config.max_k,
                         default_candidate_k=self.config.candidate_k,
                         max_candidate_k=self.config.max_candidate_k,
                         default_mode=self.config.default_mode, default_rrf_k=self.config.rrf_k,
                         current_version=version)
        index = self._index(plan.stored_unit, plan.level)
        allowed = None
        if plan.filter is not None:
            compiled = compile_filter(plan.filter, self.filter_fields())
            rows = self.store.filtered_rowids(plan.stored_unit, plan.level, compiled.sql,
                                              compiled.params)
            allowed = index.positions_of(rows)
        lists: dict[str, list[tuple[int, float]]] = {}
        qvec = None
        term_ids: list[int] = []
        if plan.mode in ("dense", "hybrid"):
            qvec = self.embedder.embed_query(plan.query)
            lists["dense"] = self._dense(index, plan, qvec, allowed)
        if plan.mode in ("sparse", "hybrid"):
            term_ids = sorted({t for t in (self.store.term_id(w) for w in analyze(plan.query))
                               if t is not None})
            ranked = index.sparse(term_ids, plan.candidate_k, allowed)
            lists["sparse"] = list(zip(ranked.positions.tolist(), ranked.scores.tolist()))
        fused = self._fuse(plan, lists, index, qvec, term_ids)
        if plan.min_score is not None:
            fused = [(p, s) for p, s in fused if s >= plan.min_score]
        top = fused[:plan.k]
        hits = self._hits(plan, index, top, lists, qvec, term_ids)
        candidates = len({p for ranked in lists.values() for p, _s in ranked})
        usage = Usage(candidates=candidates, reranked=0,
                      tokens=sum(h.meta["chunk_token_count"] for h in hits if h.meta)
                      if plan.include_text else 0,
                      latency_ms=round((time.perf_counter() - start) * 1000.0, 3),
                      notes=plan.notes or None)
        return RetrieveResult(hits=hits, index_version=version, usage=usage)

    def _dense(self, index: UnitIndex, plan: Plan, qvec: np.ndarray,
               allowed: np.ndarray | None) -> list[tuple[int, float]]:
        if index.size == 0 or (allowed is not None and len(allowed) == 0):
            return []
        if index.vectors is not None:
            ranked = index.dense(qvec, plan.candidate_k, allowed)
            return list(zip(ranked.positions.tolist(), ranked.scores.tolist()))
        rowids = None if allowed is None else index.rowids[allowed].tolist()
        n = min(plan.candidate_k, index.size if rowids is None else len(rowids))
        got, sims = self.chroma.query(plan.stored_unit, plan.level, qvec, n, rowids)
        out = [(index.position[r], s) for r, s in zip(got, sims) if r in index.position]
        return sorted(out, key=lambda ps: (-ps[1], ps[0]))

    def _fill(self, index: UnitIndex, name: str, positions: list[int], qvec: np.ndarray | None,
              term_ids: list[int]) -> dict[int, float]:
        """Exact scores of one retriever for the given positions."""
        if not positions:
            return {}
        pos = np.asarray(positions, dtype=np.int64)
        if name == "dense":
            assert qvec is not None
            if index.vectors is not None:
                vecs = index.vectors[pos]
            else:
                got = self.store.vectors(index.rowids[pos].tolist())
                vecs = np.vstack([got[int(r)] for r in index.rowids[pos]])
            return dict(zip(positions, (vecs @ qvec).tolist()))
        return dict(zip(positions, index.sparse_scores(term_ids, pos).tolist()))

    def _fuse(self, plan: Plan, lists: dict[str, list[tuple[int, float]]], index: UnitIndex,
              qvec: np.ndarray | None, term_ids: list[int]) -> list[tuple[int, float]]:
        if plan.mode != "hybrid":
            return lists[plan.mode]
        if plan.fusion == "rrf":
            return fusion.rrf(lists, plan.weights, plan.rrf_k)
        union = sorted({p for ranked in lists.values() for p, _s in ranked})
        fill = {name: self._fill(index, name, union, qvec, term_ids) for name in lists}
        if plan.fusion == "weighted":
            return fusion.weighted(lists, plan.weights, fill)
        return fusion.convex(lists, plan.alpha, fill)

    def _hits(self, plan: Plan, index: UnitIndex, top: list[tuple[int, float]],
              lists: dict[str, list[tuple[int, float]]], qvec: np.ndarray | None,
              term_ids: list[int]) -> list[Hit]:
        positions = [p for p, _s in top]
        per_stage = {name: self._fill(index, name, positions, qvec, term_ids) for name in lists}
        rowids = [int(index.rowids[p]) for p in positions]
        rows = self.store.hydrate(rowids, with_text=plan.include_text)
        vectors = self.store.vectors(rowids) if plan.include_vectors else {}
        hits = []
        for (pos, score), rowid in zip(top, rowids):
            row = rows.get(rowid)
            if row is None:  # deleted after this query's snapshot was taken
                continue
            scores = {name: round(float(per_stage[name][pos]), 6) for name in lists}
            if plan.mode == "hybrid":
                scores["fused"] = float(score)
            hits.append(build_hit(row, unit=plan.unit, score=float(score), scores=scores,
                                  vector=vectors.get(rowid)))
        return hits
