"""Engine: one corpus in one directory — ingest it once, retrieve from it at every granularity.

``Engine(path)`` opens or creates an engine directory holding ``engine.db``
(SQLite, the source of truth), ``chroma/`` (embedded Chroma, unless a server URL
is configured) and ``config.json``. Dense and sparse recall run in the recall
backend ``config.backend`` names (``store/recall.py``: in this process, or in Milvus
synced from SQLite). All public methods are thread-safe, and several
processes may open one directory: writes are serialised on SQLite, and each read
first catches up with what other processes committed (see ``store/connection.py``).

The engine is a facade: it builds its parts once and each method hands the call to the
part that does it — writes to :class:`~.ingest.Ingest`, reads to the
:class:`~.retriever.Retriever` over the :class:`~.catalog.Catalog`, derived
units to :class:`~.derived_updates.DerivedUpdates`, graph and memory calls to
:class:`~.graph.ops.GraphOps`. Calls run one way: engine → services → catalog and recall
→ store.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .assembly import (CALIBRATION_FILE, check_directory, make_builders, make_graph_ops,
                       make_recall, open_llm, open_models)
from .bounded import ByteBudget
from .builder_set import BuilderSet
from .capabilities import Offer, build as build_capabilities
from .catalog import BuildFailures, Catalog
from .catchup import CatchUp
from .config import EngineConfig
from .control import RequestControl
from .corpus.loaders import SkippedFile
from .derived import BuildContext, DerivedBuilder, DerivedReport
from .derived_updates import DerivedUpdates
from .display_hooks import EngineFacts, render
from .errors import CapabilityMissing, EmbeddingMismatch
from .ingest import AddResult, Ingest
from .models.llm import ChatLLM
from .pipeline import model_calls
from .pipeline.confidence import Calibrator
from .pipeline.transform import Transformed, transform
from .read_first import ReadFirst
from .retriever import Retriever
from .sessions import SessionStore
from .store.chroma import ChromaVectors
from .store.docstore import Docstore
from .store.feedback import FeedbackLog
from .store.recall import EmbeddedRecall
from .trust import InjectionScreen
from .vocabulary import TRANSFORM_METHODS
from .warm import WARM_QUERY, WarmReport, warm_models
from .wire import RerankResult, RetrieveResult

if TYPE_CHECKING:
    from .plugins import CommunityStore, GraphData, GraphOps, GraphView
    from .wire import GraphResult, MemoryBuildResult, MemoryRecallResult

__all__ = ["AddResult", "CALIBRATION_FILE", "EmbeddingMismatch", "Engine", "default_engine_dir"]

DEFAULT_ENGINE_DIR = ".rcp-agentic"
ENGINE_ENV = "RCP_AGENTIC_ENGINE"


def default_engine_dir() -> Path:
    """``$RCP_AGENTIC_ENGINE`` or ``./.rcp-agentic``."""
    return Path(os.environ.get(ENGINE_ENV) or DEFAULT_ENGINE_DIR)


class Engine:
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
    documents at open (a write died before its derived update), start the worker at once,
    and wake it when a read meets another process's commit that leaves one lagging (a
    writer killed after its commit, before its builders); off, the next write (or
    :meth:`wait_for_derived`) does it.
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
        models = open_models(self.config, self.path, embedder, reranker)
        self.embedder, self.reranker = models.embedder, models.reranker
        # The LLM the engine was opened with (None: offline; see ``chat``).
        self._llm = llm
        self.chat: ChatLLM | None = None
        self.screen = InjectionScreen()
        # One byte budget for everything session-scoped: retrieve's sessions here, the graph
        # memory and DRIFT frontiers (graph/ops.py, graph/communities/drift.py) draw on it too.
        self.session_budget = ByteBudget(self.config.session_max_bytes)
        self.sessions = SessionStore(ttl_seconds=self.config.session_ttl_seconds,
                                     max_sessions=self.config.max_sessions,
                                     max_items=self.config.session_max_items,
                                     budget=self.session_budget)
        self.store = Docstore(self.path / "engine.db", retain=self.config.snapshots_retained)
        try:
            self._open_parts(models.calibrator)
            if catch_up:
                self.catalog.on_foreign_version = self.derived.notice
                if self.builders and self.lagging_builders():
                    self.derived.worker().wake()
        except BaseException:
            self.store.close()
            raise

    # --- opening ------------------------------------------------------------------------

    def _open_parts(self, calibrator: Calibrator | None) -> None:
        """Check the directory against the models, then build the parts, each once."""
        check_directory(self.store, self.config, self.embedder, self.path)
        self.feedback = FeedbackLog(self.store.connection)
        # Atomic: processes opening a new directory at once agree on both.
        engine_id = self.store.info_default("engine_id", uuid.uuid4().hex[:12])
        self._secret = bytes.fromhex(self.store.info_default("cursor_secret",
                                                             secrets.token_hex(32)))
        self.recall = make_recall(self.store, self.config, self.path, engine_id, self.dimension)
        self.chat = open_llm(self._llm, self.config, self.store, self._suspected)
        # Composers of the composed kinds (path, subgraph) by name, set by the graph ops. A
        # composed kind is offered only while its composer is set here and the served
        # version holds a graph.
        self.composers: dict[str, Callable[..., Any]] = {}
        self.failures = BuildFailures()
        self.catalog = Catalog(self.store, self.config,
                               scores_in_memory=self.recall.scores_in_memory,
                               composers=self.composers, failures=self.failures)
        self.retriever = Retriever(catalog=self.catalog, recall=self.recall,
                                   embedder=self.embedder, reranker=self.reranker,
                                   calibrator=calibrator, sessions=self.sessions,
                                   config=self.config, composers=self.composers,
                                   secret=self._secret, chat=self.chat)
        # A Chroma or Milvus that is down leaves the engine open, degraded.
        self.recall.after_commit()
        self._write_lock = threading.Lock()
        ctx = BuildContext(store=self.store, embedder=self.embedder, screen=self.screen,
                           llm=self.chat, llm_token_budget=self.config.llm_build_token_budget)
        # Reads in flight; a derived build pauses for them (rcp_agentic/read_first.py).
        self.read_first = ReadFirst()
        builders = BuilderSet(make_builders(ctx, self.config), catalog=self.catalog,
                              recall=self.recall, write_lock=self._write_lock,
                              read_first=self.read_first)
        self.derived = DerivedUpdates(builders, directory=self.path,
                                      inline=self.config.derived_updates == "inline",
                                      failures=self.failures)
        self.ingest = Ingest(store=self.store, catalog=self.catalog, recall=self.recall,
                             embedder=self.embedder, screen=self.screen, config=self.config,
                             derived=self.derived, write_lock=self._write_lock)
        self._graph_ops: GraphOps | None = None
        if self.config.build_graph:
            self._serve_graph()

    def close(self) -> None:
        """Stop the derived-unit worker (the builder running finishes its commit; kinds still
        lagging are caught up by the next open), then release the recall backend, Chroma and
        the SQLite connection."""
        self.derived.close()
        self.recall.close()
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def warm(self) -> WarmReport:
        """Load now what the first read at the served version would otherwise load on first
        use, so it runs as fast as the next one: the offer; the chunk pool's index (BM25
        postings and vectors) and the query encoder (one query embedded); the token counter
        and a local cross-encoder reranker; with a graph, its PageRank view and what the
        graph ops cache on it, and with communities their store, the pool that ranks them
        and (offline ``global``) the document embedder. Other pools (pages, documents, tree
        or graph units) are still built by their first request. Each part warms through its
        own methods; results never change. Cheap once warm (every part is cached);
        ``rcp-agentic serve`` calls it before it serves unless ``--no-warm``."""
        started = time.perf_counter()
        version = self.catalog.current_version()
        graph = "node" in self.catalog.offered(version)
        if graph and self._graph_ops is None:
            self._serve_graph()  # its composers join the offer before the retriever reads it
        self.retriever.warm({"query": WARM_QUERY, "mode": "hybrid",
                             "indexVersion": f"v{version}"})
        note = warm_models(self.reranker)
        communities = graph and self.graph_ops.warm(version, WARM_QUERY)
        return WarmReport(version=version,
                          chunks=self.catalog.index([("chunk", 0)], version).size,
                          graph=graph, communities=communities,
                          seconds=time.perf_counter() - started,
                          notes=(note,) if note else ())

    # --- the parts tests and tools reach -------------------------------------------------

    @property
    def chroma(self) -> ChromaVectors:
        """The embedded recall backend's Chroma (AttributeError with another backend)."""
        if not isinstance(self.recall, EmbeddedRecall):
            raise AttributeError(f"the {self.recall.name} recall backend has no Chroma")
        return self.recall.chroma

    @property
    def llm(self) -> Any:
        """The LLM given (a LangChain chat model or LlamaIndex LLM; None: offline, or the
        endpoint the configuration names, see ``chat``). Builders took it at open; the
        community ops use the one set here."""
        return self._llm

    @llm.setter
    def llm(self, llm: Any) -> None:
        self._llm = llm
        self.chat = open_llm(llm, self.config, self.store, self._suspected)
        self.retriever.chat = self.chat
        if self._graph_ops is not None:
            self._graph_ops.ctx.llm = self.chat

    def _suspected(self, text: str) -> bool:
        """Whether the injection screen flags ``text`` (an LLM reply)."""
        return self.screen.screen(text).suspected

    def llm_usage(self) -> dict[str, Any]:
        """What the engine's LLM cost since it opened, by stage (calls, cache hits, retries,
        failures, tokens, fallbacks), and the LLM cache's entries by stage; ``{}``
        offline."""
        if self.chat is None:
            return {}
        cache = self.chat.cache
        return {"model": self.chat.identity,
                "stages": {k: v.wire() for k, v in sorted(self.chat.usage.snapshot().items())},
                "cached": cache.stats() if cache is not None else {}}

    @property
    def calibrator(self) -> Calibrator | None:
        """The confidence calibration hits are scored with (None: no confidence)."""
        return self.retriever.calibrator

    @calibrator.setter
    def calibrator(self, calibrator: Calibrator | None) -> None:
        self.retriever.calibrator = calibrator

    @property
    def builders(self) -> dict[str, DerivedBuilder[Any]]:
        """The derived builders, by the unit each is named for, in run order."""
        return self.derived.builders.builders

    @builders.setter
    def builders(self, builders: dict[str, DerivedBuilder[Any]]) -> None:
        self.derived.builders.builders = builders

    @property
    def catch_up(self) -> CatchUp | None:
        """The derived-unit worker (None until first needed)."""
        return self.derived.catch_up

    # --- writes -------------------------------------------------------------------------

    def add_documents(self, documents: Iterable[Any], *, trusted: bool = False,
                      on_document: Callable[[str], None] | None = None,
                      control: RequestControl | None = None) -> AddResult:
        """Add or replace documents: ``{"id"?, "text", "title"?, "meta"?}`` or SourceDocuments.

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
        return self.ingest.add(documents, lambda _doc: trusted, on_document, control)

    def index_paths(self, paths: Iterable[str | os.PathLike[str]], *,
                    on_document: Callable[[str], None] | None = None,
                    on_skip: Callable[[SkippedFile], None] | None = None,
                    follow_symlinks: bool = False) -> AddResult:
        """Load files and folders (txt, md, html, pdf, jsonl) and add them; bad files are skipped.

        A file whose real path (symlinks resolved) lies under one of ``trusted_sources``
        is labelled ``trusted``. Symlinks leaving a folder given are skipped unless
        ``follow_symlinks``; files longer than ``max_document_chars`` are skipped.
        """
        return self.ingest.index_paths(paths, on_document=on_document, on_skip=on_skip,
                                       follow_symlinks=follow_symlinks)

    def delete_documents(self, ids: list[str], *, missing_ok: bool = False) -> int:
        """Delete documents and every unit derived from them; returns how many were deleted.

        Unknown ids raise NotFound (nothing is deleted) unless ``missing_ok``.
        """
        return self.ingest.delete(ids, missing_ok=missing_ok)

    def record_feedback(self, signals: Any, *, session_id: Any = None, query: Any = None) -> int:
        """Record RCP ``feedback`` signals (§7.16); returns how many were accepted.

        They are kept in ``engine.feedback`` for inspection and never read by retrieval.
        """
        return self.feedback.record(signals, session_id=session_id, query=query)

    def reconcile(self) -> None:
        """Bring the recall backend in line with SQLite now. Embedded: replay Chroma's queued
        operations, then repair any difference; Milvus: sync every kind to the last commit.
        Raises BackendUnavailable (-32010) if Chroma or Milvus cannot be reached."""
        self.recall.sync()

    # --- derived units ------------------------------------------------------------------

    def lagging_builders(self) -> list[str]:
        """The builders (by ``unit``, in run order) with a kind that does not reflect the
        last document write yet."""
        return self.derived.builders.lagging()

    def update_derived(self, *, full: bool = False,
                       only: str | None = None) -> list[DerivedReport]:
        """Bring every derived kind (the tree, the graph) up to date with the committed chunks.

        Runs after each ``add_documents`` / ``index_paths`` / ``delete_documents`` (in the
        background worker, or inline with ``derived_updates="inline"``), and when called;
        incremental unless ``full`` or (the tree) the drift since the last full build
        passes ``tree_rebuild_drift``. Each builder's result is one commit (a new index
        version; the graph's nodes and triplets share it). ``only``: the builder of that
        kind alone (``"tree-node"``; ``"node"`` or ``"triplet"`` for the graph). A builder
        that lost every race with concurrent writes (``contended``) runs once more under
        the write lock.
        """
        return self.derived.builders.update(full=full, only=only)

    def wait_for_derived(self, timeout: float | None = None) -> bool:
        """Block until every derived kind reflects the committed documents (True) or
        ``timeout`` seconds pass (False). Re-raises the last failure of a builder still
        lagging (the background worker's; the next write retries it)."""
        return self.derived.wait(timeout)

    def derived_status(self) -> dict[str, dict[str, Any]]:
        """Per built derived kind: its levels, unit counts, the index version it reflects and
        whether writes since then are still to be folded in (``current``)."""
        return self.catalog.derived_status()

    # --- reads --------------------------------------------------------------------------

    def retrieve(self, query: Any, k: int = 10, **options: Any) -> RetrieveResult:
        """Ranked hits for ``query``; options are the RCP/1 retrieve params (§7.7) in snake_case.

        ``mode`` dense | sparse | hybrid; ``fusion`` {method: rrf | weighted | convex,
        weights, rrf_k, alpha}; ``candidate_k``; ``unit`` chunk | passage | page |
        document; ``filter`` (§8); ``min_score``; ``include_text``; ``include_vectors``.
        The result's ``to_wire()`` is the exact RCP result object.
        """
        with self.read_first.reading():
            return self.retriever.retrieve(query, k, **options).with_query(query)

    def retrieve_params(self, raw: dict[str, Any],
                        control: RequestControl | None = None) -> RetrieveResult:
        """``retrieve`` from a raw params object (wire camelCase or snake_case); ``control``
        carries the request's deadline, cancellation and progress."""
        with self.read_first.reading():
            return self.retriever.retrieve_params(raw, control)

    def query_terms(self, query: str) -> list[int]:
        """Vocabulary ids of the analysed query terms (unknown terms dropped)."""
        return self.catalog.query_terms(query)

    def sparse_ceiling(self, query: str, unit: str = "chunk", level: int = 0) -> float:
        """The largest BM25 any unit of this kind could score for ``query`` (0 if no term is
        known)."""
        index = self.catalog.snapshot().index([(unit, level)])
        return self.recall.sparse_ceiling(index, self.catalog.query_terms(query))

    def filter_fields(self) -> dict[str, str]:
        """Every filterable field and its type: built-ins, declared and inferred fields."""
        return self.catalog.filter_fields()

    @property
    def index_version(self) -> str:
        """The opaque token of the current committed state."""
        return f"v{self.store.index_version()}"

    @property
    def dimension(self) -> int:
        """The embedding dimension (from the index when it has one; else the model's)."""
        stored = self.store.info("embedding.dimension")
        return int(stored) if stored else self.embedder.dimension

    def stats(self) -> dict[str, int]:
        """Counts of documents and of each unit."""
        return self.store.counts()

    def __repr__(self) -> str:
        return f"Engine({str(self.path)!r})"

    def _repr_html_(self) -> str:
        """The engine in Jupyter: a card of its documents, units by kind and level, index
        version, backend and each derived kind's state and lag."""
        return render("engine_card", EngineFacts(
            path=str(self.path), index_version=self.index_version, backend=self.config.backend,
            embedder=self.embedder.identity, dimension=self.dimension, counts=self.stats(),
            derived=self.derived_status()))

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
        offered = self.catalog.offered()
        graph = "node" in offered
        return Offer(
            config=self.config, offered=offered, dimension=self.dimension,
            embedder_identity=self.embedder.identity, reranker=self.reranker,
            calibrated=self.calibrator is not None, filter_fields=self.filter_fields(),
            derived=self.derived_status(), graph_ops=self.graph_ops.ops() if graph else None,
            memory=graph and "node" in self.builders,
            transform=TRANSFORM_METHODS if self.chat is not None else None)

    # --- models -------------------------------------------------------------------------

    def transform(self, query: str, method: str, n: int = 3, *,
                  control: RequestControl | None = None) -> Transformed:
        """RCP ``query/transform`` (§7.8) with the engine's LLM: ``rewrite``, ``hyde`` (the
        passage in ``hypothetical``), ``multi-query`` / ``decompose`` (at most ``n``
        queries, clamped to 10) or ``step-back``; an unusable reply gives ``[query]`` back.
        CapabilityMissing without an LLM; BackendUnavailable when it cannot be reached."""
        if self.chat is None:
            raise CapabilityMissing("query/transform needs an LLM, and this engine has none")
        return transform(self.chat, query, method, n, max_chars=self.config.max_query_chars,
                         control=control)

    def embed(self, inputs: list[Any], *, kind: str = "document",
              encoding: str = "json") -> dict[str, Any]:
        """RCP ``embed`` (§7.3): one unit-length vector per input, as JSON numbers or f32-base64."""
        return model_calls.embed(self.embedder, self.config, inputs, kind=kind, encoding=encoding)

    def rerank(self, query: Any, passages: list[Any], *, method: str | None = None,
               top_n: int | None = None,
               control: RequestControl | None = None) -> RerankResult:
        """Score ``passages`` against ``query`` with the configured reranker (RCP ``rerank``, §7.6).

        ``scores[i]`` belongs to ``passages[i]``; ``order`` lists indices best first,
        truncated to ``top_n``.
        """
        return model_calls.rerank(self.reranker, self.config, query, passages, method=method,
                            top_n=top_n, control=control)

    # --- the knowledge graph ------------------------------------------------------------

    def graph_data(self, version: int | None = None) -> GraphData | None:
        """The knowledge graph (``rcp_agentic.graph.model.GraphData``) as stored and visible at
        ``version`` (default: the current one), or None when that version holds no graph;
        cached per version."""
        return self.catalog.graph_data(version)

    def graph_view(self, version: int | None = None) -> GraphView | None:
        """The PageRank view (``rcp_agentic.graph.ppr.GraphView``) of the graph at ``version``
        (default: the current one), or None without a graph; cached per version."""
        return self.catalog.graph_view(version)

    def communities(self, version: int | None = None) -> CommunityStore | None:
        """The Leiden communities (``rcp_agentic.graph.communities.index.CommunityStore``) stored
        and visible at ``version`` (default: the current one), or None when there are none;
        cached per version."""
        return self.catalog.communities(version)

    @property
    def graph_ops(self) -> GraphOps:
        """``graph`` and memory ops (``rcp_agentic.graph.ops.GraphOps``), made on first use."""
        return self._graph_ops or self._serve_graph()

    def _serve_graph(self) -> GraphOps:
        """Make the graph and memory ops, with the composers of the composed kinds (path,
        subgraph): at open when this engine builds a graph, else when a graph is first
        served (the graph modules are imported only then)."""
        self._graph_ops = make_graph_ops(dict(
            catalog=self.catalog, retriever=self.retriever, ingest=self.ingest,
            builders=self.derived.builders, store=self.store, embedder=self.embedder,
            screen=self.screen, config=self.config, session_budget=self.session_budget,
            secret=self._secret, llm=self.chat), self.composers)
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
        with self.read_first.reading():
            return self.graph_ops.graph(op, query=query, k=k, seed_ids=seed_ids, hops=hops,
                                        level=level, session_id=session_id, cursor=cursor,
                                        token_budget=token_budget, filter=filter,
                                        control=control).with_query(query)

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
        with self.read_first.reading():
            return self.graph_ops.memory_recall(query, memory_id=memory_id,
                                                session_id=session_id, n=n, filter=filter,
                                                control=control)

