"""Engine: one corpus in one directory — ingest it once, retrieve from it at every granularity.

``Engine(path)`` opens or creates an engine directory (``engine.db``, the SQLite source of
truth; ``chroma/`` unless a server URL is configured; ``config.json``). The engine is a
facade: it opens its parts once (:mod:`.assembly`) and each method hands the call to the
part that does it — writes to :class:`~.ingest.Ingest`, reads to the
:class:`~.retriever.Retriever` over the :class:`~.catalog.Catalog`, derived units to
:class:`~.derived_updates.DerivedUpdates`, graph and memory calls to the graph plug-in's ops.
Its public surface is documented in ``docs/api.md``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .assembly import CALIBRATION_FILE, open_parts
from .config import EngineConfig
from .control import RequestControl
from .corpus.loaders import SkippedFile
from .derived import DerivedBuilder, DerivedReport
from .display_hooks import EngineFacts, render
from .errors import CapabilityMissing, EmbeddingMismatch
from .ingest import AddResult
from .pipeline import model_calls
from .pipeline.confidence import Calibrator
from .pipeline.method_params import (GraphParams, MemoryBuildParams, MemoryRecallParams,
                                     MethodParams, TransformParams)
from .pipeline.transform import Transformed, transformed
from .capabilities import Offer, build as build_capabilities
from .store.chroma import ChromaVectors
from .store.recall import EmbeddedRecall
from .warm import WarmReport
from .wire import RerankResult, RetrieveResult

if TYPE_CHECKING:
    from .catchup import CatchUp
    from .plugins import CommunityStore, GraphData, GraphOps, GraphView
    from .wire import GraphResult, MemoryBuildResult, MemoryRecallResult

__all__ = ["AddResult", "CALIBRATION_FILE", "EmbeddingMismatch", "Engine", "default_engine_dir"]

DEFAULT_ENGINE_DIR = ".rcp-agentic"
ENGINE_ENV = "RCP_AGENTIC_ENGINE"


def default_engine_dir() -> Path:
    """``$RCP_AGENTIC_ENGINE`` or ``./.rcp-agentic``."""
    return Path(os.environ.get(ENGINE_ENV) or DEFAULT_ENGINE_DIR)


class Engine:
    """A retrieval engine over one corpus; all public methods are thread-safe.

    >>> engine = Engine("./my-engine")                 # doctest: +SKIP
    >>> engine.add_documents([{"id": "a", "text": "..."}])  # doctest: +SKIP
    >>> engine.retrieve("what is ...", k=5, unit="document").hits  # doctest: +SKIP
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
        self._llm = llm  # as given (None: offline, or the endpoint the configuration names)
        p = self._parts = open_parts(self.path, self.config, embedder=embedder,
                                     reranker=reranker, llm=llm, catch_up=catch_up)
        self.store, self.embedder, self.reranker = p.store, p.embedder, p.reranker
        self.chat, self.screen, self.sessions = p.chat, p.screen, p.sessions
        self.session_budget, self.feedback, self.recall = p.session_budget, p.feedback, p.recall
        self.catalog, self.retriever, self.derived = p.catalog, p.retriever, p.derived
        self.ingest, self.composers, self.failures = p.ingest, p.composers, p.failures
        self.read_first, self._write_lock = p.read_first, p.write_lock

    def close(self) -> None:
        """Stop the derived-unit worker (lagging kinds are caught up by the next open), then
        release the recall backend, Chroma and the SQLite connection."""
        self.derived.close()
        self.recall.close()
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def warm(self) -> WarmReport:
        """Load now what the first read at the served version would load on first use (the
        query encoder, the chunk pool, the reranker, a graph's view and communities)."""
        return self._parts.warm()

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
        endpoint the configuration names). Setting it rewires retrieve and the graph ops."""
        return self._llm

    @llm.setter
    def llm(self, llm: Any) -> None:
        self._llm = llm
        self.chat = self._parts.use_llm(llm)

    def llm_usage(self) -> dict[str, Any]:
        """What the engine's LLM cost since it opened, by stage, and its cache's entries;
        ``{}`` offline."""
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
        """Add or replace documents (``{"id"?, "text", "title"?, "meta"?}`` or
        SourceDocuments), in transactions of up to 64; ``trusted=True`` labels them trusted."""
        return self.ingest.add(documents, lambda _doc: trusted, on_document, control)

    def index_paths(self, paths: Iterable[str | os.PathLike[str]], *,
                    on_document: Callable[[str], None] | None = None,
                    on_skip: Callable[[SkippedFile], None] | None = None,
                    follow_symlinks: bool = False) -> AddResult:
        """Load files and folders (txt, md, html, pdf, jsonl) and add them, skipping bad files."""
        return self.ingest.index_paths(paths, on_document=on_document, on_skip=on_skip,
                                       follow_symlinks=follow_symlinks)

    def delete_documents(self, ids: list[str], *, missing_ok: bool = False) -> int:
        """Delete documents and every unit derived from them; how many were deleted."""
        return self.ingest.delete(ids, missing_ok=missing_ok)

    def record_feedback(self, signals: Any, *, session_id: Any = None, query: Any = None) -> int:
        """Record RCP ``feedback`` signals (§7.16), never read by retrieval; how many were
        accepted."""
        return self.feedback.record(signals, session_id=session_id, query=query)

    def reconcile(self) -> None:
        """Bring the recall backend in line with SQLite now (BackendUnavailable when down)."""
        self.recall.sync()

    # --- derived units ------------------------------------------------------------------

    def lagging_builders(self) -> list[str]:
        """The builders (by ``unit``, in run order) whose kind lags the last document write."""
        return self.derived.builders.lagging()

    def update_derived(self, *, full: bool = False,
                       only: str | None = None) -> list[DerivedReport]:
        """Bring every derived kind (or ``only`` one) up to date with the committed chunks."""
        return self.derived.builders.update(full=full, only=only)

    def wait_for_derived(self, timeout: float | None = None) -> bool:
        """Block until every derived kind reflects the committed documents (True) or
        ``timeout`` seconds pass (False)."""
        return self.derived.wait(timeout)

    def derived_status(self) -> dict[str, dict[str, Any]]:
        """Per built derived kind: its levels, counts, the index version it reflects and
        whether it is ``current``."""
        return self.catalog.derived_status()

    # --- reads --------------------------------------------------------------------------

    def retrieve(self, query: Any, k: int = 10, **options: Any) -> RetrieveResult:
        """Ranked hits for ``query``; options are the RCP/1 retrieve params (§7.7) in snake_case."""
        with self.read_first.reading():
            return self.retriever.retrieve(query, k, **options).with_query(query)

    def retrieve_params(self, raw: dict[str, Any],
                        control: RequestControl | None = None) -> RetrieveResult:
        """``retrieve`` from a raw params object (wire camelCase or snake_case)."""
        with self.read_first.reading():
            return self.retriever.retrieve_params(raw, control)

    def query_terms(self, query: str) -> list[int]:
        """Vocabulary ids of the analysed query terms (unknown terms dropped)."""
        return self.catalog.query_terms(query)

    def sparse_ceiling(self, query: str, unit: str = "chunk", level: int = 0) -> float:
        """The largest BM25 any unit of this kind could score for ``query`` (0: no known term)."""
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
        return self._parts.dimension

    def stats(self) -> dict[str, int]:
        """Counts of documents and of each unit."""
        return self.store.counts()

    def __repr__(self) -> str:
        return f"Engine({str(self.path)!r})"

    def _repr_html_(self) -> str:
        """The engine in Jupyter: its documents, units, index version, backend and derived state."""
        return render("engine_card", EngineFacts(
            path=str(self.path), index_version=self.index_version, backend=self.config.backend,
            embedder=self.embedder.identity, dimension=self.dimension, counts=self.stats(),
            derived=self.derived_status()))

    def capabilities(self) -> dict[str, Any]:
        """What this engine offers, as RCP/1 capability objects (§6); only what really works."""
        return build_capabilities(self.offer())

    def offer(self) -> Offer:
        """What this engine offers now, the facts of its capabilities document."""
        return self._parts.offer()

    # --- models -------------------------------------------------------------------------

    def transform(self, query: str, method: str, n: int = 3, *,
                  control: RequestControl | None = None) -> Transformed:
        """RCP ``query/transform`` (§7.8) with the engine's LLM (CapabilityMissing without one)."""
        return self.run(TransformParams.of(self.config, query=query, method=method, n=n), control)

    def embed(self, inputs: list[Any], *, kind: str = "document",
              encoding: str = "json") -> dict[str, Any]:
        """RCP ``embed`` (§7.3): one unit-length vector per input, as JSON numbers or f32-base64."""
        return model_calls.embed(self.embedder, self.config, inputs, kind=kind, encoding=encoding)

    def rerank(self, query: Any, passages: list[Any], *, method: str | None = None,
               top_n: int | None = None,
               control: RequestControl | None = None) -> RerankResult:
        """RCP ``rerank`` (§7.6): ``scores[i]`` of ``passages[i]``, ``order`` best first."""
        return model_calls.rerank(self.reranker, self.config, query, passages, method=method,
                                  top_n=top_n, control=control)

    # --- the knowledge graph ------------------------------------------------------------

    def graph_data(self, version: int | None = None) -> GraphData | None:
        """The knowledge graph at ``version`` (default: the current one), or None; cached."""
        return self.catalog.graph_data(version)

    def graph_view(self, version: int | None = None) -> GraphView | None:
        """The graph's PageRank view at ``version`` (default: the current one), or None."""
        return self.catalog.graph_view(version)

    def communities(self, version: int | None = None) -> CommunityStore | None:
        """The Leiden communities at ``version`` (default: the current one), or None."""
        return self.catalog.communities(version)

    @property
    def graph_ops(self) -> GraphOps:
        """The graph and memory ops (``rcp_agentic.graph.ops.GraphOps``), made on first use."""
        return self._parts.graph_ops or self._parts.serve_graph()

    def graph(self, op: str, *, control: RequestControl | None = None,
              **params: Any) -> GraphResult:
        """RCP ``graph`` (§7.9); ``params`` are :class:`GraphParams`' fields (snake_case)."""
        return self.run(GraphParams.of(self.config, op=op, **params), control)

    def memory_build(self, documents: list[dict[str, Any]] | None = None, *,
                     control: RequestControl | None = None,
                     **params: Any) -> MemoryBuildResult:
        """RCP ``memory/build`` (§7.17); ``params`` are :class:`MemoryBuildParams`' fields."""
        return self.run(MemoryBuildParams.of(self.config, documents=documents, **params),
                        control)

    def memory_recall(self, query: Any, *, control: RequestControl | None = None,
                      **params: Any) -> MemoryRecallResult:
        """RCP ``memory/recall`` (§7.17); ``params`` are :class:`MemoryRecallParams`' fields."""
        return self.run(MemoryRecallParams.of(self.config, query=query, **params), control)

    def run(self, params: MethodParams, control: RequestControl | None = None) -> Any:
        """Run the ``graph``, ``memory/*`` or ``query/transform`` call of checked ``params``
        (:mod:`.pipeline.method_params`): what the protocol's dispatcher calls."""
        if isinstance(params, TransformParams):
            if self.chat is None:
                raise CapabilityMissing("query/transform needs an LLM, and this engine has none")
            return transformed(self.chat, params, max_chars=self.config.max_query_chars,
                               control=control)
        if isinstance(params, MemoryBuildParams):
            return self.graph_ops.run(params, control)
        with self.read_first.reading():
            result = self.graph_ops.run(params, control)
        return result.with_query(params.query) if isinstance(params, GraphParams) else result
