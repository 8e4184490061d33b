"""How an engine's parts are made when it opens: its models, the checks of its directory against
them, its recall backend, its derived builders and its graph ops. The
:class:`~.engine.Engine` calls these once and then only hands calls to what they made."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import plugins
from .config import EngineConfig
from .corpus.metadata import is_valid_field_name
from .derived import BuildContext, DerivedBuilder
from .errors import EmbeddingMismatch, InvalidParams
from .models.embedder import SentenceTransformerEmbedder, TimedEmbedder, as_embedder
from .models.llm import ChatLLM
from .models.reranker import CrossEncoderReranker, Reranker, as_reranker
from .pipeline.confidence import Calibrator
from .store.docstore import Docstore
from .store.recall import EmbeddedRecall, RecallBackend

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
