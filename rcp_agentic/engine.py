"""Engine: one corpus in one directory — ingest it once, retrieve from it at every granularity.

``Engine(path)`` opens or creates an engine directory holding ``engine.db``
(SQLite, the source of truth), ``chroma/`` (embedded Chroma, unless a server URL
is configured) and ``config.json``. Dense and sparse recall run in the recall
backend ``config.backend`` names (``store/recall.py``: in this process, or in Milvus
synced from SQLite). All public methods are thread-safe, and several
processes may open one directory: writes are serialised on SQLite, and each read
first catches up with what other processes committed (see ``store/connection.py``).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import secrets
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .config import EngineConfig
from .corpus.documents import (attach_vectors, build_record, check_document_chars,
                               to_source_document)
from .corpus.loaders import SkippedFile, SourceDocument, load_path
from .corpus.metadata import check_meta_shape, filterable_meta, is_valid_field_name
from .control import RequestControl, checked
from .errors import (BackendUnavailable, CapabilityMissing, Conflict, InternalError,
                     InvalidParams, NotFound, OptionUnsupported, PayloadTooLarge, RCPError)
from .models.analyzer import analyze
from .models.reranker import Reranker, as_reranker
from .models.embedder import SentenceTransformerEmbedder, TimedEmbedder, as_embedder
from .pipeline.filters import BUILTIN_FIELDS
from .pipeline.confidence import Calibrator
from .pipeline.trust import InjectionScreen
from . import units
from .capabilities import Offer, build as build_capabilities
from .options import TREE_SEARCHES
from .pipeline.params import query_text
from .pipeline.retrieve import Retrieval
from .store.chroma import ChromaVectors, CollectionLost
from .store.docstore import Docstore
from .store.feedback import FeedbackLog
from .sessions import SessionStore
from .bounded import ByteBudget
from .store.memindex import UnitIndex
from .store.recall import EmbeddedRecall, RecallBackend
from .store.writes import DocumentRecord
from .wire import RerankResult
from .derived import DerivedBuilder, DerivedReport, builder_kinds
from .catchup import CatchUp

if TYPE_CHECKING:
    from .graph.community_index import CommunityStore
    from .graph.model import GraphData
    from .graph.ops import GraphOps
    from .graph.ppr import GraphView
    from .wire import GraphResult, MemoryBuildResult, MemoryRecallResult

log = logging.getLogger(__name__)

DEFAULT_ENGINE_DIR = ".rcp-agentic"
CALIBRATION_FILE = "calibration.json"
# Scoring indexes kept in memory: the current version of a few unit kinds, plus pinned ones.
_INDEX_CACHE = 6
# Graphs (and their PageRank matrices) kept in memory: the current version plus a pinned one.
_GRAPH_CACHE = 2
ENGINE_ENV = "RCP_AGENTIC_ENGINE"
# An index version token as this engine hands it out: "v" and the version, no leading zero.
_VERSION_TOKEN = re.compile(r"v(0|[1-9][0-9]{0,17})")
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
    # What the derived-unit builders (tree, graph, communities) did after the documents were
    # written: inline, their reports; in the background, a "scheduled" report per builder.
    derived: list[DerivedReport] = field(default_factory=list)

    @property
    def documents(self) -> int:
        """Distinct documents written."""
        return len(set(self.ids))


def _raw_meta(item: Any) -> Any:
    """The metadata an ``add_documents`` item carries, not validated yet."""
    if isinstance(item, SourceDocument):
        return item.meta
    if isinstance(item, Mapping):
        return item.get("meta", item.get("metadata"))
    return None


def default_engine_dir() -> Path:
    """``$RCP_AGENTIC_ENGINE`` or ``./.rcp-agentic``."""
    return Path(os.environ.get(ENGINE_ENV) or DEFAULT_ENGINE_DIR)


class Engine(Retrieval):
    """A retrieval engine over one corpus.

    >>> engine = Engine("./my-engine")                 # doctest: +SKIP
    >>> engine.add_documents([{"id": "a", "text": "..."}])  # doctest: +SKIP
    >>> engine.retrieve("what is ...", k=5, unit="document").hits  # doctest: +SKIP

    Derived units (the tree, the graph, its communities) are built off the write path by
    default (``derived_updates="background"``): a write returns once its documents are
    committed and a worker (:mod:`rcp_agentic.catchup`) folds them in, reads noting the lag
    meanwhile; :meth:`wait_for_derived` blocks until it has. ``derived_updates="inline"``
    runs every builder before a write returns.

    ``catch_up`` (default on): when a derived kind this engine builds lags the committed
    documents at open (a write died before its derived update), start the worker at once;
    off, the next write (or :meth:`wait_for_derived`) does it.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 config: EngineConfig | None = None, embedder: Any = None,
                 reranker: Any = None, llm: Any = None, catch_up: bool = True,
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
        if reranker is None and self.config.reranker_path:
            reranker = self.config.reranker_path
        self.reranker: Reranker | None = as_reranker(reranker) if reranker is not None else None
        self.calibrator = self._load_calibrator()
        self.screen = InjectionScreen()
        self._write_lock = threading.Lock()
        # Held by the builder running: builders run one at a time, writes go on meanwhile.
        self._build_lock = threading.Lock()
        self._index_lock = threading.Lock()
        self._indexes: dict[tuple[tuple[tuple[str, int], ...], int], UnitIndex] = {}
        self._offered_cache: tuple[tuple[int, tuple[str, ...]],
                                   dict[str, tuple[int, ...]]] | None = None
        # One byte budget for everything session-scoped: retrieve's sessions here, the graph
        # memory and DRIFT frontiers (graph/ops.py, graph/community_ops.py) draw on it too.
        self.session_budget = ByteBudget(self.config.session_max_bytes)
        self.sessions = SessionStore(ttl_seconds=self.config.session_ttl_seconds,
                                     max_sessions=self.config.max_sessions,
                                     max_items=self.config.session_max_items,
                                     budget=self.session_budget)
        self.store = Docstore(self.path / "engine.db", retain=self.config.snapshots_retained)
        try:
            self._check_embedder()
            self._declare_fields()
            self.feedback = FeedbackLog(self.store.connection)
            # Atomic: processes opening a new directory at once agree on both.
            engine_id = self.store.info_default("engine_id", uuid.uuid4().hex[:12])
            self._secret = bytes.fromhex(self.store.info_default("cursor_secret",
                                                                 secrets.token_hex(32)))
            self.chroma = ChromaVectors(
                path=None if self.config.chroma_url else self.path / "chroma",
                url=self.config.chroma_url, prefix=f"rcp-{engine_id}",
                timeout=self.config.chroma_timeout_seconds)
            self._sync_lock = threading.Lock()
            self._sync_wanted = threading.Event()
            self._chroma_stale = True  # compare every id with SQLite before trusting Chroma
            self._chroma_retry_at = 0.0
            self._chroma_error = ""
            # Another process committed: an embedded Chroma's in-memory HNSW must be reloaded.
            self._chroma_reload = False
            self.recall = self._make_recall(engine_id)
            # A Chroma or Milvus that is down leaves the engine open, degraded.
            self.recall.after_commit()
            # The LLM the engine was opened with (None: offline): builders write abstractive
            # summaries and reports with it, the community ops map-reduce with it.
            self.llm = llm
            # Builders of derived units (an LLM, if given, writes abstractive summaries).
            self.builders: dict[str, DerivedBuilder] = {}
            if self.config.build_tree:
                from .raptor.index import TreeIndex

                self.builders["tree-node"] = TreeIndex(self, llm=llm)
            if self.config.build_graph:
                from .graph.index import GraphIndex

                self.builders["node"] = GraphIndex(self, llm=llm)
                if self.config.graph_communities:  # after the graph: it clusters that graph
                    from .graph.community_index import CommunityIndex

                    self.builders["community"] = CommunityIndex(self, llm=llm)
            # Composers of the composed kinds (path, subgraph): name -> callable, set by the
            # module that composes them at query time. A composed kind is offered only while
            # its composer is set here and the served version holds a graph.
            self.composers: dict[str, Callable[..., Any]] = {}
            self._graph_lock = threading.Lock()
            self._graphs: OrderedDict[int, GraphData | None] = OrderedDict()
            self._graph_views: OrderedDict[int, GraphView | None] = OrderedDict()
            self._communities: OrderedDict[int, CommunityStore | None] = OrderedDict()
            self._graph_ops: GraphOps | None = None
            if self.config.build_graph:
                self.graph_ops  # registers the path/subgraph composers
            # The derived-unit worker (rcp_agentic/catchup.py), made on first need. A write
            # that died between its documents' commit and the derived update left a kind
            # behind: catch up off this thread. ``catch_up=False`` leaves that to the next
            # write (a short-lived command, which would otherwise wait at exit for a builder
            # it never asked for).
            self.catch_up: CatchUp | None = None
            self._worker_lock = threading.Lock()
            self._closed = False
            if catch_up and self.builders and self.lagging_builders():
                self._worker().wake()
        except BaseException:
            self.store.close()
            raise

    # --- lifecycle -------------------------------------------------------------------

    def _make_recall(self, engine_id: str) -> RecallBackend:
        """The recall backend of ``config.backend`` (see ``store/recall.py``)."""
        if self.config.backend == "embedded":
            return EmbeddedRecall(chroma_query=self._chroma_query,
                                  stored_count=self.store.stored_count,
                                  after_commit=self._sync_chroma,
                                  sync=self._reconcile_chroma_now,
                                  status=lambda: {"chroma": self.chroma.url or "embedded"})
        if not self.config.milvus_uri:
            raise InvalidParams("backend 'milvus' needs milvus_uri (--milvus-uri or "
                                "RCP_AGENTIC_MILVUS_URI): a path ending in .db for Milvus Lite, "
                                "or http://host:19530", field="milvus_uri")
        from .store.milvus import MilvusRecall

        return MilvusRecall(self.store, uri=self.config.milvus_uri,
                            token=self.config.milvus_token, prefix=f"rcp_{engine_id}",
                            dim=self.dimension, fields=self.filter_fields,
                            k1=self.config.bm25_k1, b=self.config.bm25_b,
                            timeout=self.config.milvus_timeout_seconds,
                            dense_index=self.config.milvus_dense_index)

    def close(self) -> None:
        """Stop the derived-unit worker (the builder running finishes its commit; kinds still
        lagging are caught up by the next open), then release the recall backend, Chroma and
        the SQLite connection."""
        with self._worker_lock:
            self._closed = True
        if self.catch_up is not None:
            self.catch_up.stop()
        self.recall.close()
        self.chroma.close()
        self.store.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_embedder(self) -> None:
        stored = self.store.info_default("embedding.identity", self.embedder.identity)
        if stored != self.embedder.identity:
            raise EmbeddingMismatch(
                f"the engine at {self.path} was built with embedding model {stored!r}; it cannot "
                f"be queried with {self.embedder.identity!r} (vectors would be meaningless). "
                "Open it with the same model, or index into a new engine directory.",
                field="embedder")

    def _load_calibrator(self) -> Calibrator | None:
        """The engine's own calibration (``rcp-agentic calibrate``), else the shipped one if it
        was fitted for this embedder; otherwise hits carry no confidence."""
        own = self.path / CALIBRATION_FILE
        if own.exists():
            return Calibrator.load(own)
        default = Calibrator.default()
        if default.fitted_on.get("embedder") == self.embedder.identity:
            return default
        return None

    def _check_dimension(self, dim: int) -> None:
        stored = (self.store.info("embedding.dimension")
                  or self.store.info_default("embedding.dimension", str(dim)))
        if int(stored) != dim:
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

    def capabilities(self) -> dict[str, Any]:
        """What this engine offers, as RCP/1 capability objects (§6); only what really works.

        Derived kinds (tree-node, node, triplet) are advertised only once built, with their
        levels; composed kinds (path, subgraph) only while a graph exists and their
        composer is set (``composers``); ``x-rcp-agentic.units`` says which index version
        each derived or composed kind reflects.
        """
        return build_capabilities(self.offer())

    def offer(self) -> Offer:
        """What this engine offers now, the facts of its capabilities document."""
        offered = self._offered()
        fields = self.filter_fields()
        derived = self.derived_status()
        graph = "node" in offered
        return Offer(
            config=self.config, offered=offered, dimension=self.dimension,
            embedder_identity=self.embedder.identity, reranker=self.reranker,
            calibrated=self.calibrator is not None, filter_fields=fields, derived=derived,
            graph_ops=self.graph_ops.ops() if graph else None,
            memory=graph and "node" in self.builders)

    def derived_status(self) -> dict[str, dict[str, Any]]:
        """Per built derived kind: its levels, unit counts, the index version it reflects and
        whether writes since then are still to be folded in (``current``)."""
        out: dict[str, dict[str, Any]] = {}
        counts = self.store.unit_kinds()
        data_version = int(self.store.info("data_version") or 0)
        for name in units.known():
            levels = {lv: n for u, lv, n in counts if u == name and units.get(name).derived}
            if not levels:
                continue
            reflects = int(self.store.info(f"derived.{name}.version") or 0)
            entry: dict[str, Any] = {"levels": sorted(levels), "counts": {
                str(lv): n for lv, n in sorted(levels.items())},
                "reflects": f"v{reflects}", "current": reflects >= data_version}
            if name == "tree-node":
                entry["treeSearch"] = list(TREE_SEARCHES)
            error = self._derived_error(name)
            if error:
                entry["error"] = error
            out[name] = entry
        if "node" in out:  # composed from the graph: they reflect what the nodes reflect
            for name in units.composed_kinds():
                if name in self.composers:
                    out[name] = {"composed": True, "reflects": out["node"]["reflects"],
                                 "current": out["node"]["current"]}
        return out

    def _offered(self) -> dict[str, tuple[int, ...]]:
        """Stored kinds offered now → their levels: the per-document kinds always (flat), and
        each built derived kind with the levels it holds."""
        version = self._current_version()
        composers = tuple(sorted(self.composers))
        cached = self._offered_cache
        if cached is not None and cached[0] == (version, composers):
            return cached[1]
        offered: dict[str, tuple[int, ...]] = {
            units.get(n).stored: (0,) for n in units.per_document_kinds()}
        levels: dict[str, set[int]] = {}
        for unit, level, _n in self.store.unit_kinds(version):
            if unit in units.known() and units.get(unit).derived:
                levels.setdefault(unit, set()).add(level)
        offered.update({u: tuple(sorted(lv)) for u, lv in levels.items()})
        if "node" in offered:
            offered.update({n: (0,) for n in units.composed_kinds() if n in composers})
        self._offered_cache = ((version, composers), offered)
        return offered

    def _derived_lag(self, kinds: list[tuple[str, int]], served: int) -> str | None:
        """A usage note when a derived kind in ``kinds`` does not yet reflect the served version."""
        derived = sorted({u for u, _lv in kinds if units.get(u).derived})
        data_version = int(self.store.info("data_version") or 0) if derived else 0
        for unit in derived:
            reflects = int(self.store.info(f"derived.{unit}.version") or 0)
            if served >= data_version > reflects:
                error = self._derived_error(unit)
                return (f"{unit} units reflect index version v{reflects}; documents written "
                        f"since (up to v{data_version}) are not folded in yet, and units "
                        "covering changed chunks are left out until the update"
                        + (f" (its last background update failed: {error}; the next write "
                           "retries)" if error else ""))
        return None

    def _derived_error(self, kind: str) -> str:
        """The last failure of the background builder of ``kind`` ("" when it has none)."""
        worker = self.catch_up
        if worker is None:
            return ""
        for unit, exc in list(worker.errors.items()):
            builder = self.builders.get(unit)
            if builder is not None and kind in builder_kinds(builder):
                return str(exc) or type(exc).__name__
        return ""

    # --- derived units ---------------------------------------------------------------

    def lagging_builders(self) -> list[str]:
        """The builders (by ``unit``, in run order) with a kind that does not reflect the
        last document write yet."""
        data_version = int(self.store.info("data_version") or 0)
        return [b.unit for b in self.builders.values()
                if any(int(self.store.info(f"derived.{kind}.version") or 0) < data_version
                       for kind in builder_kinds(b))]

    def update_derived(self, *, full: bool = False,
                       only: str | None = None) -> list[DerivedReport]:
        """Bring every derived kind (the tree, the graph) up to date with the committed chunks.

        Runs after each ``add_documents`` / ``index_paths`` / ``delete_documents`` (in the
        background worker, or inline with ``derived_updates="inline"``), and when called;
        incremental unless ``full`` or (the tree) the drift since the last full build
        passes ``tree_rebuild_drift``. Each builder's result is one commit (a new index
        version; the graph's nodes and triplets share it). ``only``: the builder of that
        kind alone (``"tree-node"``; ``"node"`` or ``"triplet"`` for the graph).

        Builders run one at a time under the build lock, not the write lock, so writes
        commit while a builder computes (its commit is on the version it read, or it
        recomputes). A builder whose every attempt lost that race (``contended``) runs once
        more under the write lock, so steady writes cannot starve it.
        """
        reports = []
        for builder in self.builders.values():
            if only is not None and only not in builder_kinds(builder):
                continue
            with self._build_lock:
                report = builder.update(full=full)
                self._invalidate()
                if report.contended:
                    with self._write_lock:
                        report = builder.update(full=full)
                        self._invalidate()
                    report.contended = True
            reports.append(report)
            if report.version is not None:
                self.recall.after_commit()
        return reports

    def _worker(self) -> CatchUp:
        """The derived-unit worker, started on first need."""
        with self._worker_lock:
            if self.catch_up is None:
                self.catch_up = CatchUp(self.path, self.lagging_builders,
                                        lambda unit: self.update_derived(only=unit))
                if not self._closed:
                    self.catch_up.start()
            return self.catch_up

    def _derived_after_write(self) -> list[DerivedReport]:
        """After a commit of documents: the builders run now (inline), or their lag is handed
        to the worker (background; a ``scheduled`` report per builder)."""
        if self.config.derived_updates == "inline":
            return self.update_derived()
        scheduled = [DerivedReport(unit, "scheduled", reason="built in the background")
                     for unit in self.lagging_builders()]
        self._worker().wake()
        return scheduled

    def wait_for_derived(self, timeout: float | None = None) -> bool:
        """Block until every derived kind reflects the committed documents (True) or
        ``timeout`` seconds pass (False). Re-raises the last failure of a builder still
        lagging (the background worker's; the next write retries it)."""
        if not self.builders or (self.catch_up is None and not self.lagging_builders()):
            return True
        return self._worker().wait(timeout)

    # --- the knowledge graph ---------------------------------------------------------

    def _per_version(self, cache: OrderedDict[int, Any], version: int | None,
                     load: Callable[[int], Any]) -> Any:
        """``load(v)`` for ``version`` (default: the current one), kept in ``cache`` for the
        last few versions (a committed version never changes)."""
        v = self._current_version() if version is None else version
        with self._graph_lock:
            if v in cache:
                cache.move_to_end(v)
                return cache[v]
        value = load(v)
        with self._graph_lock:
            cache[v] = value
            while len(cache) > _GRAPH_CACHE:
                cache.popitem(last=False)
        return value

    def graph_data(self, version: int | None = None) -> GraphData | None:
        """The knowledge graph (``rcp_agentic.graph.model.GraphData``) as stored and visible at
        ``version`` (default: the current one), or None when that version holds no graph;
        cached per version."""
        from .graph.index import load_graph

        return self._per_version(self._graphs, version,  # type: ignore[no-any-return]
                                 lambda v: load_graph(self.store, v))

    def graph_view(self, version: int | None = None) -> GraphView | None:
        """The PageRank view (``rcp_agentic.graph.ppr.GraphView``) of the graph at ``version``
        (default: the current one), or None without a graph; cached per version."""
        return self._per_version(self._graph_views, version,  # type: ignore[no-any-return]
                                 self._make_graph_view)

    def _make_graph_view(self, v: int) -> GraphView | None:
        graph = self.graph_data(v)
        if graph is None:
            return None
        from .graph.ppr import GraphView

        chunks = self._index([("chunk", 0)], v)

        def word_df(name: str) -> int:
            # Passages holding the name's rarest word (an upper bound of the name's own count).
            return min((chunks.doc_freq(self.store.term_id(w)) for w in analyze(name)),
                       default=0)

        return GraphView(graph, word_df=word_df)

    def communities(self, version: int | None = None) -> CommunityStore | None:
        """The Leiden communities (``rcp_agentic.graph.community_index.CommunityStore``) stored
        and visible at ``version`` (default: the current one), or None when there are none;
        cached per version."""
        from .graph.community_index import load_communities

        return self._per_version(self._communities, version,  # type: ignore[no-any-return]
                                 lambda v: load_communities(self.store, v))

    @property
    def graph_ops(self) -> GraphOps:
        """``graph`` and memory ops (``rcp_agentic.graph.ops.GraphOps``), made on first use."""
        if self._graph_ops is None:
            from .graph.ops import GraphOps

            self._graph_ops = GraphOps(self)
        return self._graph_ops

    def graph(self, op: str, *, query: Any = None, k: int | None = None,
              seed_ids: list[str] | None = None, hops: int | None = None,
              level: int | None = None, session_id: str | None = None,
              cursor: str | None = None, token_budget: int | None = None,
              filter: Mapping[str, Any] | None = None,
              control: RequestControl | None = None) -> GraphResult:
        """RCP ``graph`` (§7.9): ``local`` (entity-anchored, PageRank-expanded hits),
        ``neighbors`` (``seed_ids`` within ``hops``: nodes and weighted edges), and with
        communities built ``communities`` (one level, paginated by ``cursor``), ``global``
        (communities ranked for the query and a ``summary`` within ``token_budget``) and
        ``drift`` (a primer, follow-up queries and their hits; a ``session_id`` continues
        its frontier). ``filter`` (RCP §8) scopes every op: each text, id and count comes
        only from chunks that pass it. ``control`` carries the request's deadline and
        cancellation (checked between stages)."""
        return self.graph_ops.graph(op, query=query, k=k, seed_ids=seed_ids, hops=hops,
                                    level=level, session_id=session_id, cursor=cursor,
                                    token_budget=token_budget, filter=filter,
                                    control=control)

    def memory_build(self, documents: list[dict[str, Any]] | None = None, *,
                     memory_id: str | None = None, scope: str = "global",
                     session_id: str | None = None, filter: Mapping[str, Any] | None = None,
                     control: RequestControl | None = None) -> MemoryBuildResult:
        """RCP ``memory/build`` (§7.17): the knowledge graph is the memory. ``filter`` scopes
        the entities a session memory links (``scope="session"``)."""
        return self.graph_ops.memory_build(documents, memory_id=memory_id, scope=scope,
                                           session_id=session_id, filter=filter,
                                           control=control)

    def memory_recall(self, query: Any, *, memory_id: str | None = None,
                      session_id: str | None = None, n: int = 5,
                      filter: Mapping[str, Any] | None = None,
                      control: RequestControl | None = None) -> MemoryRecallResult:
        """RCP ``memory/recall`` (§7.17): clues (seed node ids, surrogate queries) and draft
        hits, all from chunks that pass ``filter``."""
        return self.graph_ops.memory_recall(query, memory_id=memory_id,
                                            session_id=session_id, n=n, filter=filter,
                                            control=control)

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
            self._push_vectors(unit, level, rows)
        self.store.clear_outbox(ops[-1].seq)

    def _push_vectors(self, unit: str, level: int, rows: list[int]) -> None:
        """Copy the SQLite vectors of ``rows`` (those still stored) into Chroma."""
        for i in range(0, len(rows), 1000):
            vecs = self.store.vectors(rows[i:i + 1000])
            present = [r for r in rows[i:i + 1000] if r in vecs]
            if present:
                self.chroma.add(unit, level, present, np.vstack([vecs[r] for r in present]))

    def _reconcile_chroma(self) -> None:
        """Replay the outbox, then repair every difference between Chroma and SQLite.

        Needs no write lock: only the holder of ``_sync_lock`` changes Chroma, and a row
        committed or deleted meanwhile is also in the outbox, replayed on the next sync.
        """
        self._apply_outbox()
        for unit, level in self.store.stored_kinds():
            truth = set(self.store.rowids(unit, level))
            have = self.chroma.all_ids(unit, level)
            extra, missing = sorted(have - truth), sorted(truth - have)
            if not extra and not missing:
                continue
            log.warning("repairing Chroma %s/l%d: %d extra, %d missing vectors", unit, level,
                        len(extra), len(missing))
            if extra:
                self.chroma.delete(unit, level, extra)
            self._push_vectors(unit, level, missing)

    def reconcile(self) -> None:
        """Bring the recall backend in line with SQLite now. Embedded: replay Chroma's queued
        operations, then repair any difference; Milvus: sync every kind to the last commit.
        Raises BackendUnavailable (-32010) if Chroma or Milvus cannot be reached."""
        self.recall.sync()

    def _reconcile_chroma_now(self) -> None:
        with self._sync_lock:
            self._chroma_stale = True
            self._chroma_retry_at = 0.0
            self._sync_step()

    def _sync_step(self) -> None:
        """One attempt to bring Chroma up to date (``_sync_lock`` held).

        After an open or an outage it compares every id with SQLite (a server may have
        lost acknowledged writes or restarted empty); otherwise it replays the outbox.
        Collections a restarted server lost are recreated and refilled at once. Any
        other failure marks Chroma stale and starts a retry window (1 s plus the time
        the attempt took, so a hung server is not waited on again at once); within it
        every attempt raises at once with the ``retryAfterMs`` left.
        """
        now = time.monotonic()
        if self._chroma_reload and self.chroma.url is None:
            # chromadb keeps an embedded collection's index in memory, blind to other
            # processes' writes: reload it and compare every id with SQLite.
            self._chroma_reload = False
            self.chroma.close()
            self._chroma_stale = True
        if now < self._chroma_retry_at:
            raise self._chroma_down(now)
        for attempt in (1, 2):
            try:
                if self._chroma_stale or self.chroma.lost:
                    self.chroma.lost = False
                    self._reconcile_chroma()
                    self._chroma_stale = False
                else:
                    self._apply_outbox()
                self._chroma_retry_at = 0.0
                return
            except BackendUnavailable as exc:
                self._chroma_failed(exc, now)
                if attempt == 1 and isinstance(exc, CollectionLost):
                    continue
                raise self._chroma_down(time.monotonic()) from exc

    def _chroma_failed(self, exc: BackendUnavailable, started: float) -> None:
        """Remember a failed Chroma call: reconcile fully next time, after a retry window."""
        self._chroma_stale = True
        self._chroma_error = exc.message
        self._chroma_retry_at = time.monotonic() + 1.0 + (time.monotonic() - started)
        log.warning("Chroma is behind SQLite (the outbox waits): %s", exc.message)

    def _chroma_down(self, now: float) -> BackendUnavailable:
        wait_ms = max(1, int((self._chroma_retry_at - now) * 1000))
        return BackendUnavailable(
            f"Chroma-backed dense recall is unavailable: {self._chroma_error}. Every write is "
            "committed in SQLite (the source of truth) and queued for Chroma; sparse and exact "
            "dense retrieval keep working, and Chroma is brought up to date from SQLite as soon "
            f"as it answers (retry after {wait_ms} ms)", retryable=True, retryAfterMs=wait_ms)

    def _sync_chroma(self) -> None:
        """After a commit (outside the write lock): bring Chroma up to date, best effort.

        Never raises for Chroma: the write is already committed in SQLite and its
        Chroma operations wait in the outbox for the next write, the next Chroma-backed
        query or ``reconcile``. A hung server holds only the calling thread, at most
        ``chroma_timeout_seconds`` per request; a commit made while another thread
        syncs is left to that thread (``_sync_wanted``), so writers never queue here.
        """
        self._sync_wanted.set()
        while self._sync_wanted.is_set():
            if not self._sync_lock.acquire(blocking=False):
                return
            try:
                self._sync_wanted.clear()
                self._sync_step()
            except BackendUnavailable:
                return
            finally:
                self._sync_lock.release()

    def _chroma_query(self, unit: str, level: int, vector: np.ndarray, n: int,
                      rowids: list[int] | None) -> tuple[list[int], list[float]]:
        """Chroma-backed dense recall over a Chroma that holds every committed row.

        Syncs first (waiting at most ``chroma_timeout_seconds`` for a sync already
        running); while Chroma is behind SQLite and cannot catch up this raises
        BackendUnavailable (-32010, ``retryAfterMs``) instead of answering without the
        rows it misses. Collections lost by a server restarted empty are recreated and
        refilled from SQLite, and the query is retried once.
        """
        for attempt in (1, 2):
            if not self._sync_lock.acquire(timeout=self.config.chroma_timeout_seconds):
                raise BackendUnavailable(
                    "Chroma-backed dense recall is unavailable: another call is still bringing "
                    f"Chroma up to date after {self.config.chroma_timeout_seconds:g} s",
                    retryable=True, retryAfterMs=1000)
            try:
                if attempt == 2:
                    self._chroma_retry_at = 0.0  # the server answered: refill it now
                self._sync_step()
            finally:
                self._sync_lock.release()
            started = time.monotonic()
            try:
                return self.chroma.query(unit, level, vector, n, rowids)
            except BackendUnavailable as exc:
                self._chroma_failed(exc, started)
                if attempt == 1 and isinstance(exc, CollectionLost):
                    continue
                raise self._chroma_down(time.monotonic()) from exc
        raise AssertionError("unreachable")

    # --- writes ----------------------------------------------------------------------

    def add_documents(self, documents: Iterable[Any], *, trusted: bool = False,
                      on_document: Callable[[str], None] | None = None,
                      control: RequestControl | None = None) -> AddResult:
        """Add or replace documents: each ``{"id"?, "text", "title"?, "meta"?}`` or a SourceDocument.

        An explicit id replaces every unit derived from that document's previous
        version; without an id a stable one is minted from the text. Documents are
        written in transactions of up to 64; each is visible whole or not at all.
        Raises InvalidParams (naming the field) before writing anything of a bad batch.
        ``control`` is checked before each transaction: a cancel or an expired
        deadline raises with ``data.committedIds`` naming what was already written.

        ``trusted=True`` labels every document ``trusted``: an operator's option for
        content they vouch for, which the protocol (``index/add``) never sets. Without
        it a document is ``default_trust``, or the lower level its ``trust`` asks for;
        no field of a document can raise its own trust.
        """
        return self._add(documents, lambda _doc: trusted, on_document, control)

    def _add(self, documents: Iterable[Any], grant: Callable[[SourceDocument], bool],
             on_document: Callable[[str], None] | None,
             control: RequestControl | None,
             on_invalid: Callable[[Any, InvalidParams], None] | None = None) -> AddResult:
        """``add_documents``; ``grant`` says per document whether the operator trusts it.

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

        def prepared() -> Iterable[tuple[SourceDocument, str]]:
            for i, item in enumerate(documents):
                try:
                    # Before anything else walks the metadata (recursively).
                    check_meta_shape(_raw_meta(item), max_keys=self.config.max_meta_keys,
                                     max_depth=self.config.max_meta_depth,
                                     where=f"documents[{i}]")
                    doc, requested = to_source_document(item, i)
                    check_document_chars(doc.text, self.config.max_document_chars,
                                         f"documents[{i}].text")
                    yield doc, self._trust(requested, grant(doc), i)
                except InvalidParams as exc:
                    if on_invalid is None:
                        raise
                    on_invalid(item, exc)

        items: Iterable[tuple[SourceDocument, str]] = prepared()
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

        def ids_after(position: int) -> list[str]:
            if not isinstance(items, list):
                return []  # a lazy input: what follows is unknown
            return [d.id for d, _t in items[position:] if d.id]

        batch: list[tuple[SourceDocument, str]] = []
        for position, entry in enumerate(items, start=1):
            batch.append(entry)
            if len(batch) >= WRITE_BATCH_DOCS:
                write(batch, ids_after(position))
                batch = []
        if batch:
            write(batch, [])
        if self.builders and result.ids:
            try:
                result.derived = self._derived_after_write()
            except RCPError as exc:
                exc.data["committedIds"] = list(result.ids)
                exc.data["pendingIds"] = []
                raise
        result.index_version = self.index_version
        result.seconds = time.perf_counter() - start
        result.seconds_embedding = self.embedder.seconds_in_model - embed_before
        return result

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

    def _under_trusted_path(self, doc: SourceDocument) -> bool:
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

    def _write_batch(self, docs: list[tuple[SourceDocument, str]], result: AddResult,
                     on_document: Callable[[str], None] | None) -> None:
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
            used = {n: new_fields.get(n) or fields[n] for r in records.values() for n in r.fmeta}
            self.store.write_documents(list(records.values()), used,
                                       max_fields=self.config.max_filter_fields)
            self._invalidate()
        self.recall.after_commit()
        result.ids.extend(r.id for r, _texts in texts)  # one per input, in input order
        for record in records.values():
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
        self.recall.after_commit()
        if deleted and self.builders:
            self._derived_after_write()
        return deleted

    def index_paths(self, paths: Iterable[str | os.PathLike[str]], *,
                    on_document: Callable[[str], None] | None = None,
                    on_skip: Callable[[SkippedFile], None] | None = None,
                    follow_symlinks: bool = False) -> AddResult:
        """Load files and folders (txt, md, html, pdf, jsonl) and add them; bad files are skipped.

        A file whose real path (symlinks resolved) lies under one of ``trusted_sources``
        is labelled ``trusted``. Symlinks leaving a folder given are skipped unless
        ``follow_symlinks``; files longer than ``max_document_chars`` are skipped.
        """
        skipped: list[SkippedFile] = []

        def documents() -> Iterable[SourceDocument]:
            for path in paths:
                for item in load_path(path, follow_symlinks=follow_symlinks,
                                      max_chars=self.config.max_document_chars):
                    if isinstance(item, SkippedFile):
                        skipped.append(item)
                        if on_skip:
                            on_skip(item)
                    else:
                        yield item

        def invalid(item: Any, exc: InvalidParams) -> None:
            bad = SkippedFile(getattr(item, "source", None) or getattr(item, "id", None) or "?",
                              exc.message)
            skipped.append(bad)
            if on_skip:
                on_skip(bad)

        result = self._add(documents(), self._under_trusted_path, on_document, None,
                           on_invalid=invalid)
        result.skipped = skipped
        return result

    # --- scoring indexes -------------------------------------------------------------

    def _invalidate(self) -> None:
        with self._index_lock:
            self._indexes.clear()

    def _current_version(self) -> int:
        """The last committed version, after catching up with other processes' commits."""
        current = self.store.index_version()
        # After reading the version, so the vocabulary covers every term it uses.
        if self.store.refresh():
            self._invalidate()
            self._chroma_reload = True
        return current

    def _index(self, kinds: list[tuple[str, int]], version: int | None = None) -> UnitIndex:
        """The scoring index of a pool of (unit, level) kinds as of ``version`` (default: current)."""
        v = self._current_version() if version is None else version
        key = (tuple(kinds), v)
        index = self._indexes.get(key)
        if index is not None:
            return index
        with self._index_lock:
            index = self._indexes.get(key)
            if index is None:
                count = sum(n for u, lv, n in self.store.unit_kinds(v) if (u, lv) in kinds)
                in_memory = self.recall.scores_in_memory
                arrays = self.store.unit_arrays(
                    kinds, v, with_vectors=in_memory and count <= self.config.dense_exact_max)
                index = UnitIndex("+".join(f"{u}/{lv}" for u, lv in kinds), arrays,
                                  self.store.vocab_size(), k1=self.config.bm25_k1,
                                  b=self.config.bm25_b, postings=in_memory,
                                  kinds=tuple(kinds), version=v)
                while len(self._indexes) >= _INDEX_CACHE:
                    self._indexes.pop(next(iter(self._indexes)))
                self._indexes[key] = index
        return index

    def _served_version(self, pinned: str | None) -> int:
        """The version a retrieve reads: the current one, or a pinned one still retained.

        A pinned token that cannot be served is BackendUnavailable (-32010, §7.7.1),
        whatever its form: the token is opaque to the client. It is not retryable: a
        collected version never returns, and one this engine never handed out (a bad
        form, or beyond the last commit) is not a snapshot of it.
        """
        current = self._current_version()
        if pinned is None:
            return current
        match = _VERSION_TOKEN.fullmatch(pinned)
        wanted = int(match[1]) if match else None
        oldest = self.store.oldest_retained(current)
        if wanted is not None and oldest <= wanted <= current:
            return wanted
        why = ("is no longer retained" if wanted is not None and wanted < oldest
               else "is not a version this engine has served")
        shown = pinned if len(pinned) <= 40 else pinned[:40] + "…"
        raise BackendUnavailable(f"indexVersion {shown!r} {why} (this engine keeps "
                                 f"v{oldest}..v{current})", field="indexVersion",
                                 retryable=False)

    # --- feedback --------------------------------------------------------------------

    def record_feedback(self, signals: Any, *, session_id: Any = None, query: Any = None) -> int:
        """Record RCP ``feedback`` signals (§7.16); returns how many were accepted.

        They are kept in ``engine.feedback`` for inspection and never read by retrieval.
        """
        return self.feedback.record(signals, session_id=session_id, query=query)

    # --- embed -----------------------------------------------------------------------

    @property
    def dimension(self) -> int:
        """The embedding dimension (from the index when it has one; else the model's)."""
        stored = self.store.info("embedding.dimension")
        return int(stored) if stored else self.embedder.dimension

    def embed(self, inputs: list[Any], *, kind: str = "document",
              encoding: str = "json") -> dict[str, Any]:
        """RCP ``embed`` (§7.3): one unit-length vector per input, as JSON numbers or f32-base64."""
        if not isinstance(inputs, list) or not inputs:
            raise InvalidParams("inputs must be a non-empty array", field="inputs")
        if len(inputs) > self.config.embed_batch_limit:
            raise PayloadTooLarge(f"at most {self.config.embed_batch_limit} inputs per call "
                                  "(embed.batchLimit)", field="inputs")
        if kind not in ("query", "document"):
            raise InvalidParams("kind must be 'query' or 'document'", field="kind")
        if encoding not in ("json", "f32-base64"):
            raise OptionUnsupported(f"encoding {encoding!r} is not offered", option="encoding")
        texts = [query_text(x, field=f"inputs[{i}]", allow_empty=True,
                            max_chars=self.config.max_embed_chars)
                 for i, x in enumerate(inputs)]
        if kind == "query":
            vectors = np.vstack([self.embedder.embed_query(t) for t in texts])
        else:
            vectors = self.embedder.embed_documents(texts)
        if not np.isfinite(vectors).all():
            raise InternalError("the embedding model produced non-finite values")
        dim = int(vectors.shape[1])
        if encoding == "json":
            return {"vectors": vectors.astype(np.float64).tolist(), "dimension": dim}
        blobs = [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
        return {"vectors": blobs, "encoding": "f32-base64", "dimension": dim}

    # --- rerank ----------------------------------------------------------------------

    def rerank(self, query: Any, passages: list[Any], *, method: str | None = None,
               top_n: int | None = None) -> RerankResult:
        """Score ``passages`` against ``query`` with the configured reranker (RCP ``rerank``, §7.6).

        ``scores[i]`` belongs to ``passages[i]``; ``order`` lists indices best first,
        truncated to ``top_n``.
        """
        if self.reranker is None:
            raise CapabilityMissing("no reranker is configured for this engine")
        if method is not None and method != self.reranker.method:
            raise OptionUnsupported(f"rerank method {method!r} is not offered (this engine: "
                                    f"{self.reranker.method!r})", option="method")
        text = query_text(query, max_chars=self.config.max_query_chars)
        if not isinstance(passages, list) or not passages:
            raise InvalidParams("passages must be a non-empty array", field="passages")
        if len(passages) > self.config.rerank_max_candidates:
            raise InvalidParams(f"at most {self.config.rerank_max_candidates} passages",
                                field="passages")
        bodies = [query_text(p, field=f"passages[{i}]", allow_empty=True)
                  for i, p in enumerate(passages)]
        if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int)
                                  or top_n < 1):
            raise InvalidParams("topN must be a positive integer", field="topN")
        scores = [float(x) for x in self.reranker.score(text, bodies)]
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return RerankResult(scores=scores, order=order[:top_n] if top_n else order)
