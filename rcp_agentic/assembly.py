"""How an engine's parts are made when it opens (its models, the checks of its directory against
them, its recall backend, its derived builders, its graph ops) and wired while it is open
(:class:`Parts`: the LLM, what it offers, warming). The :class:`~.engine.Engine` opens them once
and then only hands calls to what they made."""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import plugins
from .bounded import ByteBudget
from .builder_set import BuilderSet
from .capabilities import Offer
from .catalog import BuildFailures, Catalog
from .config import EngineConfig
from .corpus.metadata import is_valid_field_name
from .derived import BuildContext, DerivedBuilder
from .derived_updates import DerivedUpdates
from .errors import EmbeddingMismatch, InvalidParams
from .ingest import Ingest
from .models.embedder import SentenceTransformerEmbedder, TimedEmbedder, as_embedder
from .models.llm import ChatLLM
from .models.reranker import CrossEncoderReranker, Reranker, as_reranker
from .pipeline.confidence import Calibrator
from .read_first import ReadFirst
from .retriever import Retriever
from .sessions import SessionStore
from .store.docstore import Docstore
from .store.feedback import FeedbackLog
from .store.recall import EmbeddedRecall, RecallBackend
from .trust import InjectionScreen
from .vocabulary import TRANSFORM_METHODS
from .warm import WARM_QUERY, WarmReport, warm_models

if TYPE_CHECKING:
    from .plugins import GraphOps

CALIBRATION_FILE = "calibration.json"


@dataclass
class Models:
    """An engine's models: the embedder (timed, with its query cache), the reranker (None:
    none configured) and the confidence calibration (None: hits carry no confidence)."""

    embedder: TimedEmbedder
    reranker: Reranker | None
    calibrator: Calibrator | None


def open_models(config: EngineConfig, path: Path, embedder: Any = None,
                reranker: Any = None) -> Models:
    """The embedder (the bundled MiniLM by default), the reranker (``reranker_path``) and the
    calibration: the directory's own (``rcp-agentic calibrate``), else the shipped one if it
    was fitted for this embedder."""
    if config.blas_threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=config.blas_threads, user_api="blas")
    if embedder is None:
        embedder = SentenceTransformerEmbedder(batch_size=config.embed_batch_size,
                                               torch_threads=config.torch_threads,
                                               query_backend=config.query_backend,
                                               query_threads=config.query_threads,
                                               ingest_nice=config.ingest_nice)
    timed = TimedEmbedder(as_embedder(embedder), config.query_cache_size)
    if reranker is None and config.reranker_path:
        reranker = CrossEncoderReranker(config.reranker_path, threads=config.query_threads)
    calibrator = None
    own = path / CALIBRATION_FILE
    if own.exists():
        calibrator = Calibrator.load(own)
    else:
        shipped = Calibrator.default()
        if shipped.fitted_on.get("embedder") == timed.identity:
            calibrator = shipped
    return Models(timed, as_reranker(reranker) if reranker is not None else None, calibrator)


def check_directory(store: Docstore, config: EngineConfig, embedder: TimedEmbedder,
                    path: Path) -> None:
    """Refuse a directory built with another embedding model (EmbeddingMismatch), and record
    the configuration's declared filter fields (InvalidParams for a bad name)."""
    stored = store.info_default("embedding.identity", embedder.identity)
    if stored != embedder.identity:
        raise EmbeddingMismatch(
            f"the engine at {path} was built with embedding model {stored!r}; it cannot "
            f"be queried with {embedder.identity!r} (vectors would be meaningless). "
            "Open it with the same model, or index into a new engine directory.",
            field="embedder")
    declared = config.filter_fields
    for name in declared:
        if not is_valid_field_name(name):
            raise InvalidParams(f"filter field name {name!r} is not allowed (letters, digits, "
                                "'_.-'; not a built-in field)", field=f"filter_fields.{name}")
    fields = store.fields()
    changed = {n: t for n, t in declared.items() if fields.get(n) != (t, "declared")}
    if changed:
        with store.transaction() as db:
            store.set_fields(db, changed, "declared")


def open_llm(llm: Any, config: EngineConfig, store: Docstore,
             suspected: Any = None) -> ChatLLM | None:
    """The engine's door to its LLM (None: offline): ``llm`` given in code, else the
    endpoint ``config`` names; build replies cached in ``store``, replies screened by
    ``suspected``, calls bounded by the ``llm_*`` settings."""
    from .models.llm_process import endpoint_process_from_config
    from .models.llm_retry import CallPolicy
    from .models.llm_spend import SpendGovernor, SpendLimits
    from .store.llm_cache import LLMCache

    if isinstance(llm, ChatLLM):
        return llm
    if llm is None:
        # In a child process: the key never enters this one's memory (llm_process.py).
        llm = endpoint_process_from_config(config)
        if llm is None:
            return None
    policy = CallPolicy(timeout_seconds=config.llm_timeout_seconds, retries=config.llm_retries,
                        concurrency=config.llm_concurrency)
    spend = SpendGovernor(
        total=SpendLimits(config.llm_query_calls_per_minute, config.llm_query_tokens_per_minute),
        caller=SpendLimits(config.llm_caller_calls_per_minute,
                           config.llm_caller_tokens_per_minute),
        anonymous=SpendLimits(config.llm_anonymous_calls_per_minute,
                              config.llm_anonymous_tokens_per_minute))
    return ChatLLM(llm, policy=policy, cache=LLMCache(store.connection), screen=suspected,
                   spend=spend)


def make_recall(store: Docstore, config: EngineConfig, path: Path, engine_id: str,
                dimension: int) -> RecallBackend:
    """The recall backend of ``config.backend`` (see ``store/recall.py``)."""
    if config.backend == "embedded":
        return EmbeddedRecall(store, path=None if config.chroma_url else path / "chroma",
                              url=config.chroma_url, prefix=f"rcp-{engine_id}",
                              timeout=config.chroma_timeout_seconds)
    if not config.milvus_uri:
        raise InvalidParams("backend 'milvus' needs milvus_uri (--milvus-uri or "
                            "RCP_AGENTIC_MILVUS_URI): a path ending in .db for Milvus Lite, "
                            "or http://host:19530", field="milvus_uri")
    from .store.milvus import MilvusRecall

    return MilvusRecall(store, uri=config.milvus_uri, token=config.milvus_token,
                        prefix=f"rcp_{engine_id}", dim=dimension, k1=config.bm25_k1,
                        b=config.bm25_b, timeout=config.milvus_timeout_seconds,
                        dense_index=config.milvus_dense_index)


def make_builders(ctx: BuildContext, config: EngineConfig) -> dict[str, DerivedBuilder[Any]]:
    """The derived builders ``config`` asks for, in run order, each with the context it builds
    in and its own settings (an LLM in ``ctx``, if given, writes abstractive summaries and
    reports)."""
    builders: dict[str, DerivedBuilder[Any]] = {}
    if config.build_tree:
        builders["tree-node"] = plugins.tree().builder(ctx, config)
    if config.build_graph:
        builders.update(plugins.graph().builders(ctx, config))
    return builders


def make_graph_ops(parts: Mapping[str, Any], composers: dict[str, Any]) -> Any:
    """The graph and memory ops over an engine's ``parts`` (``graph.context.GraphContext``'s
    fields); the path and subgraph composers join ``composers`` (the engine's: a composed
    kind is offered while its composer is there)."""
    return plugins.graph().ops(parts, composers)


@dataclass
class Parts:
    """The parts of one open engine, each made once by :func:`open_parts`; ``chat`` is the door
    to its LLM (None: offline) and ``graph_ops`` its graph and memory ops (None until a graph
    is first served)."""

    config: EngineConfig
    path: Path
    store: Docstore
    embedder: TimedEmbedder
    reranker: Reranker | None
    screen: InjectionScreen
    session_budget: ByteBudget
    sessions: SessionStore
    feedback: FeedbackLog
    secret: bytes
    recall: RecallBackend
    chat: ChatLLM | None
    # Composers of the composed kinds (path, subgraph) by name, set by the graph ops: a composed
    # kind is offered only while its composer is here and the served version holds a graph.
    composers: dict[str, Callable[..., Any]]
    failures: BuildFailures
    catalog: Catalog
    retriever: Retriever
    write_lock: threading.Lock
    read_first: ReadFirst  # reads in flight, which a derived build pauses for
    derived: DerivedUpdates
    ingest: Ingest
    graph_ops: GraphOps | None = field(default=None)

    def suspected(self, text: str) -> bool:
        """Whether the injection screen flags ``text`` (an LLM reply)."""
        return self.screen.screen(text).suspected

    @property
    def dimension(self) -> int:
        """The embedding dimension (from the index when it has one; else the model's)."""
        return dimension(self.store, self.embedder)

    def serve_graph(self) -> GraphOps:
        """Make the graph and memory ops, whose composers (path, subgraph) join ``composers``:
        at open when the engine builds a graph, else when a graph is first served (the graph
        modules are imported only then)."""
        self.graph_ops = make_graph_ops(dict(
            catalog=self.catalog, retriever=self.retriever, ingest=self.ingest,
            builders=self.derived.builders, store=self.store, embedder=self.embedder,
            screen=self.screen, config=self.config, session_budget=self.session_budget,
            secret=self.secret, llm=self.chat), self.composers)
        return self.graph_ops

    def use_llm(self, llm: Any) -> ChatLLM | None:
        """Open the door to ``llm`` (:func:`open_llm`) for retrieve's rewrites and the graph
        ops from now on (the builders keep the one they were opened with)."""
        self.chat = open_llm(llm, self.config, self.store, self.suspected)
        self.retriever.chat = self.chat
        if self.graph_ops is not None:
            self.graph_ops.ctx.llm = self.chat
        return self.chat

    def offer(self) -> Offer:
        """What the engine offers now, the facts of its capabilities document."""
        offered = self.catalog.offered()
        graph = "node" in offered
        graph_ops = (self.graph_ops or self.serve_graph()).ops() if graph else None
        return Offer(
            config=self.config, offered=offered, dimension=self.dimension,
            embedder_identity=self.embedder.identity, reranker=self.reranker,
            calibrated=self.retriever.calibrator is not None,
            filter_fields=self.catalog.filter_fields(), derived=self.catalog.derived_status(),
            graph_ops=graph_ops, memory=graph and "node" in self.derived.builders.builders,
            transform=TRANSFORM_METHODS if self.chat is not None else None)

    def warm(self) -> WarmReport:
        """Load now what the first read at the served version would load on first use, each
        part through its own methods (see ``Engine.warm``)."""
        started = time.perf_counter()
        version = self.catalog.current_version()
        graph = "node" in self.catalog.offered(version)
        if graph and self.graph_ops is None:
            self.serve_graph()  # its composers join the offer before the retriever reads it
        self.retriever.warm({"query": WARM_QUERY, "mode": "hybrid",
                             "indexVersion": f"v{version}"})
        note = warm_models(self.reranker)
        communities = graph and (self.graph_ops or self.serve_graph()).warm(version, WARM_QUERY)
        return WarmReport(version=version,
                          chunks=self.catalog.index([("chunk", 0)], version).size,
                          graph=graph, communities=communities,
                          seconds=time.perf_counter() - started,
                          notes=(note,) if note else ())


def dimension(store: Docstore, embedder: TimedEmbedder) -> int:
    """The embedding dimension of ``store``'s index, or ``embedder``'s without one."""
    stored = store.info("embedding.dimension")
    return int(stored) if stored else embedder.dimension


def open_parts(path: Path, config: EngineConfig, *, embedder: Any = None, reranker: Any = None,
               llm: Any = None, catch_up: bool = True) -> Parts:
    """Open the engine directory ``path`` and make its parts, each once (the directory checked
    against the models first). ``catch_up``: start the derived-unit worker now when a kind
    lags, and wake it when a read meets another process's commit."""
    models = open_models(config, path, embedder, reranker)
    store = Docstore(path / "engine.db", retain=config.snapshots_retained)
    try:
        parts = _assemble(path, config, models, store, llm)
        if catch_up:
            parts.catalog.on_foreign_version = parts.derived.notice
            if parts.derived.builders.builders and parts.derived.builders.lagging():
                parts.derived.worker().wake()
        return parts
    except BaseException:
        store.close()
        raise


def _assemble(path: Path, config: EngineConfig, models: Models, store: Docstore,
              llm: Any) -> Parts:
    check_directory(store, config, models.embedder, path)
    feedback = FeedbackLog(store.connection)
    # One byte budget for everything session-scoped: retrieve's sessions, the graph memory and
    # DRIFT frontiers draw on it.
    budget = ByteBudget(config.session_max_bytes)
    sessions = SessionStore(ttl_seconds=config.session_ttl_seconds,
                            max_sessions=config.max_sessions,
                            max_items=config.session_max_items, budget=budget)
    # Atomic: processes opening a new directory at once agree on both.
    engine_id = store.info_default("engine_id", uuid.uuid4().hex[:12])
    secret = bytes.fromhex(store.info_default("cursor_secret", secrets.token_hex(32)))
    recall = make_recall(store, config, path, engine_id, dimension(store, models.embedder))
    screen = InjectionScreen()
    chat = open_llm(llm, config, store, lambda text: screen.screen(text).suspected)
    composers: dict[str, Callable[..., Any]] = {}
    failures = BuildFailures()
    catalog = Catalog(store, config, scores_in_memory=recall.scores_in_memory,
                      composers=composers, failures=failures)
    retriever = Retriever(catalog=catalog, recall=recall, embedder=models.embedder,
                          reranker=models.reranker, calibrator=models.calibrator,
                          sessions=sessions, config=config, composers=composers,
                          secret=secret, chat=chat)
    recall.after_commit()  # a Chroma or Milvus that is down leaves the engine open, degraded
    write_lock, read_first = threading.Lock(), ReadFirst()
    ctx = BuildContext(store=store, embedder=models.embedder, screen=screen, llm=chat,
                       llm_token_budget=config.llm_build_token_budget)
    builders = BuilderSet(make_builders(ctx, config), catalog=catalog, recall=recall,
                          write_lock=write_lock, read_first=read_first)
    derived = DerivedUpdates(builders, directory=path, inline=config.derived_updates == "inline",
                             failures=failures)
    ingest = Ingest(store=store, catalog=catalog, recall=recall, embedder=models.embedder,
                    screen=screen, config=config, derived=derived, write_lock=write_lock)
    parts = Parts(config, path, store, models.embedder, models.reranker, screen, budget,
                  sessions, feedback, secret, recall, chat, composers,
                  failures, catalog, retriever, write_lock, read_first, derived, ingest)
    if config.build_graph:
        parts.serve_graph()
    return parts
