"""EngineConfig: every knob of an engine, resolved defaults → file → environment → arguments.

The fields are flat (one name per knob in the file, the environment and ``Engine(**kw)``),
grouped by a prefix per part: ``tree_*``, ``graph_*``, ``community_*``. Each builder reads
its own group as a section (:class:`TreeSection`, :class:`GraphSection`,
:class:`CommunitySection`), not the whole configuration.

The file is ``<engine dir>/config.json``, written when an engine is created so a
reopened engine chunks and scores the way it was built. Environment variables
are ``RCP_AGENTIC_<FIELD>`` (e.g. ``RCP_AGENTIC_CHROMA_URL``); values are JSON
or plain strings.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import InvalidParams
from .vocabulary import Mode

FieldType = Literal["keyword", "text", "int", "float", "bool", "date"]
CONFIG_FILE = "config.json"
ENV_PREFIX = "RCP_AGENTIC_"
# Query parameters that carry a key, compared lower-cased with '-' read as '_'.
CREDENTIAL_PARAMS = frozenset({"api_key", "apikey", "key", "token", "access_token",
                               "auth_token", "password", "secret", "client_secret"})
# The LLM's run-time limits: settings of a process (a server, a build), not of the index.
LLM_LIMIT_FIELDS = ("llm_max_reply_bytes", "llm_query_calls_per_minute",
                    "llm_query_tokens_per_minute", "llm_caller_calls_per_minute",
                    "llm_caller_tokens_per_minute", "llm_anonymous_calls_per_minute",
                    "llm_anonymous_tokens_per_minute")


@dataclass(frozen=True)
class TreeSection:
    """The RAPTOR tree's settings (the ``tree_*`` fields)."""

    summary_tokens: int
    cluster_tokens: int
    top_size: int
    max_levels: int
    seed: int
    rebuild_drift: float


@dataclass(frozen=True)
class GraphSection:
    """The knowledge graph's settings (the ``graph_*`` fields)."""

    extractor: str
    description_tokens: int
    relations_per_entity: int
    synonym_threshold: float
    unit_vectors: str
    node_name_weight: float
    weight_tolerance: float


@dataclass(frozen=True)
class CommunitySection:
    """The Leiden communities' settings (the ``community_*`` fields)."""

    max_size: int
    report_tokens: int
    report_context_tokens: int
    vectors: str
    build_seconds: float | None


S = TypeVar("S")


def credential_part(url: str) -> str | None:
    """The part of ``url`` that carries credentials, named without its value (None: none):
    a user or password before the host, or a key-like query parameter."""
    authority = url.split("://", 1)[-1]
    for end in "/?#":
        authority = authority.split(end, 1)[0]
    if "@" in authority:
        return "user:password@ before the host"
    before_fragment, _, fragment = url.partition("#")
    for query in (before_fragment.partition("?")[2], fragment):
        for name, _value in parse_qsl(query, keep_blank_values=True):
            normal = name.strip().lower().replace("-", "_")
            if normal in CREDENTIAL_PARAMS:
                return f"a {normal!r} query parameter"
    return None


class EngineConfig(BaseModel):
    """Configuration of one engine directory."""

    # Hidden inputs: a refused value (a URL with a key in it) is never echoed in an error.
    model_config = ConfigDict(extra="forbid", validate_assignment=True,
                              hide_input_in_errors=True)

    chunk_size: int = Field(200, ge=16, le=8192, description="tokens per chunk (cl100k)")
    chunk_overlap: int = Field(30, ge=0, description="tokens of sentence overlap between chunks")
    embed_batch_size: int = Field(64, ge=1, le=4096)
    embed_batch_limit: int = Field(256, ge=1, description="advertised embed.batchLimit")
    candidate_k: int = Field(100, ge=1, description="default recall depth per retriever, and "
                             "the depth of the pool hit confidence is read against")
    max_k: int = Field(200, ge=1, description="advertised retrieve.maxK; larger k is clamped")
    max_candidate_k: int = Field(1000, ge=1, description="candidate_k is clamped to this")
    rrf_k: int = Field(60, ge=1)
    default_mode: Mode = "hybrid"
    bm25_k1: float = Field(1.2, gt=0)
    bm25_b: float = Field(0.75, ge=0, le=1)
    dense_exact_max: int = Field(
        50_000, ge=0,
        description="up to this many vectors of one unit, dense recall is exact (numpy); above, Chroma HNSW")
    reranker_path: str | None = Field(
        None, description="a sentence-transformers CrossEncoder saved on local disk")
    rerank_max_candidates: int = Field(100, ge=1, description="advertised rerank.maxCandidates")
    trusted_sources: list[str] = Field(
        default_factory=list, description="source path or document id prefixes labelled trusted")
    default_trust: Literal["community", "untrusted"] = Field(
        "community", description="trust of ingested documents not under trusted_sources")
    request_timeout_seconds: float = Field(
        120.0, gt=0, description="server deadline per protocol request; a client's "
        "_meta.deadlineMs can only shorten it")
    # A choice of the process that opens the engine, not of the directory: never saved.
    derived_updates: Literal["background", "inline"] = Field(
        "background", exclude=True, description="when a write's derived units (tree, graph, "
        "communities) are built: 'background' (the write returns once its documents are "
        "committed; a worker catches up, see Engine.wait_for_derived) or 'inline' (the write "
        "returns after every builder ran)")
    chroma_url: str | None = Field(None, description="a `chroma run` server; None = embedded Chroma")
    backend: Literal["embedded", "milvus"] = Field(
        "embedded", description="where dense and sparse recall run: in this process (numpy, "
        "BM25 in memory, Chroma HNSW) or in Milvus (pip install 'rcp-agentic[milvus]')")
    milvus_uri: str | None = Field(
        None, description="the Milvus of backend='milvus': a file path ending in .db runs Milvus "
        "Lite in process; http://host:19530 a Milvus server or cluster")
    milvus_token: str | None = Field(None, description="Milvus credentials (user:password or "
                                     "an API key); never saved in config.json")
    milvus_timeout_seconds: float = Field(
        30.0, gt=0, description="timeout of every call to Milvus; past it -32010")
    milvus_dense_index: str = Field(
        "AUTOINDEX", description="Milvus index type of the dense vectors (AUTOINDEX, HNSW, "
        "IVF_FLAT, FLAT, ...); metric inner product on unit vectors")
    filter_fields: dict[str, FieldType] = Field(
        default_factory=dict, description="metadata fields declared filterable, with their types")
    infer_filter_fields: bool = Field(
        True, description="declare new metadata fields on ingest with the type of their first value")
    query_cache_size: int = Field(1024, ge=0)
    snapshots_retained: int = Field(8, ge=1, description="index versions kept readable for "
                                    "pinned retrieves and cursors")
    session_ttl_seconds: int = Field(3600, ge=1, description="a session expires this long after "
                                     "its last use")
    max_sessions: int = Field(10_000, ge=1, description="live sessions; least recently used go")
    session_max_items: int = Field(10_000, ge=1, description="units one session remembers")
    # --- bounds on what a client may send or make the engine hold (issue 9) ----------------
    chroma_timeout_seconds: float = Field(
        10.0, gt=0, description="timeout of every call to a Chroma server; past it -32010")
    max_meta_keys: int = Field(256, ge=1, description="metadata keys one document may carry")
    max_meta_depth: int = Field(16, ge=1, description="nesting depth of a document's metadata")
    max_filter_fields: int = Field(
        1024, ge=0, description="filter fields one engine may hold (declared + inferred)")
    max_query_chars: int = Field(16_384, ge=1, description="characters of a query")
    max_session_id_chars: int = Field(256, ge=1, description="characters of a sessionId")
    session_max_bytes: int = Field(
        256 * 1024 * 1024, ge=1024, description="memory all sessions together may hold (bytes)")
    max_token_budget: int = Field(1_000_000, ge=1, description="largest tokenBudget accepted")
    max_filter_depth: int = Field(32, ge=1, description="nesting depth of a filter tree")
    max_filter_nodes: int = Field(512, ge=1, description="operators and leaves of a filter tree")
    max_document_chars: int = Field(
        10_000_000, ge=1, description="characters of one document's text (index/add, files)")
    max_hit_chars: int = Field(
        200_000, ge=1, description="characters of a hit's text in a response (longer is cut)")
    max_embed_chars: int = Field(32_768, ge=1, description="characters of one embed input")
    # --- the RAPTOR tree (tree-node units) ------------------------------------------------
    build_tree: bool = Field(False, description="build RAPTOR tree-node units over the chunks "
                             "and keep them up to date on every write")
    tree_summary_tokens: int = Field(200, ge=16, le=4096,
                                     description="tokens of one tree-node summary (cl100k)")
    tree_cluster_tokens: int = Field(3000, ge=64, description="a cluster whose text exceeds "
                                     "this many tokens is split before it is summarised")
    tree_top_size: int = Field(8, ge=1, description="the tree stops growing when a level has "
                               "at most this many nodes")
    tree_max_levels: int = Field(5, ge=1, le=16, description="summary levels above the chunks")
    tree_seed: int = Field(0, description="seed of the reduction and clustering (determinism)")
    tree_rebuild_drift: float = Field(
        0.25, gt=0, description="rebuild the whole tree when leaves added + removed since the "
        "last full build exceed this share of the leaves it was built on")
    # --- the knowledge graph (node and triplet units; path and subgraph composed from them) -----
    build_graph: bool = Field(False, description="build the knowledge graph (node and triplet "
                              "units) over the chunks and keep it up to date on every write")
    graph_extractor: str = Field(
        "builtin", description="entity extractor: 'builtin' (rules, no dependencies), "
        "'spacy:<pipeline>' (an installed spaCy pipeline, never downloaded) or 'llm' (the "
        "LLM given to the Engine as llm=; opened without one, the engine serves the graph it "
        "has and updates it only once an LLM is given)")
    graph_description_tokens: int = Field(
        120, ge=16, le=4096, description="tokens of an entity's description (offline: its most "
        "informative mention sentences)")
    graph_relations_per_entity: int = Field(
        24, ge=1, description="an entity keeps at most this many co-occurrence relations "
        "(strongest first)")
    graph_synonym_threshold: float = Field(
        0.9, gt=0, le=1, description="name-embedding cosine at which two entities are joined "
        "by a synonym edge (never merged)")
    graph_unit_vectors: Literal["text", "sources"] = Field(
        "sources", description="vectors of node and triplet units: 'sources' (default) takes "
        "the mean vector of the chunks a unit comes from, a node's blended with its name "
        "(graph_node_name_weight; only names are embedded); 'text' embeds a "
        "node's text and a triplet's evidence sentence, one per sentence (sharper dense recall "
        "of graph units, ~1.8x the leaves' embedding time)")
    graph_node_name_weight: float = Field(
        0.6, ge=0, le=1, description="with graph_unit_vectors='sources': a node's vector is "
        "this share of its name's embedding (name and aliases, as the resolver embeds them) "
        "plus the rest of its sources' mean, so a query naming an entity finds that entity's "
        "node; chosen by held-out evaluation on the multi-hop sets (bench/node_vectors.py: "
        "0.6 on both; against sources alone, exact-name top-1 0.24 -> 0.98 and supporting "
        "title entities in the top 5 nodes 0.47 -> 0.59 on HotpotQA, 0.27 -> 0.98 and "
        "0.36 -> 0.62 on 2Wiki)")
    graph_weight_tolerance: float = Field(
        0.05, ge=0, description="an incremental update rewrites a unit whose text and sources "
        "did not change only when one of its weights moved by more than this share (a full "
        "build writes exact weights)")
    # --- Leiden communities over the graph (community units, graph ops global/drift/communities) --
    graph_communities: bool = Field(
        True, description="with build_graph: build the hierarchical Leiden communities of the "
        "entity graph and a report per community (community units, level 0 the finest)")
    community_max_size: int = Field(
        10, ge=1, le=100_000, description="entities in a finest (level 0) community at most; "
        "larger communities are split again, recursively")
    community_report_context_tokens: int = Field(
        6000, ge=256, le=1_000_000, description="tokens of entities, relations and "
        "sub-community reports an LLM community report is written from (GraphRAG's "
        "max_input_length); keep it below the LLM's context window minus llm_max_tokens")
    community_report_tokens: int = Field(
        300, ge=32, le=4096, description="tokens of a community report (offline: title, key "
        "relations and central evidence sentences; with an LLM: GraphRAG-style)")
    community_vectors: Literal["text", "sources"] = Field(
        "sources", description="vectors of community units: 'sources' (default) embeds nothing "
        "and takes the mean vector of the chunks behind the community's most central entities; "
        "'text' embeds each report (only the reports that changed, on an update: on SciFact "
        "about as long as embedding the chunks again)")
    community_build_seconds: float | None = Field(
        600.0, gt=0, description="time budget of one community build or update (None = no "
        "limit): when it runs out, the depths of the hierarchy already complete are committed "
        "(every level still covers every entity; the report's reason says the budget stopped "
        "it) and the next update rebuilds in full; if not even the top level is done, nothing "
        "is committed and the communities lag")
    torch_threads: int | None = Field(None, ge=1, description="torch intra-op threads for "
                                      "document embedding on the ingest lane (None = torch's "
                                      "default, one per core)")
    ingest_nice: int = Field(10, ge=0, le=19, description="niceness added to the thread that "
                             "embeds documents (writes, derived builders) and to its torch "
                             "threads: an ingest uses idle cores but yields them to queries "
                             "(0 = same priority as queries)")
    query_backend: Literal["onnx", "torch"] = Field(
        "onnx", description="where query embeddings run: 'onnx' (onnxruntime over the same "
        "weights, exported once and checked against torch; torch where that cannot be made) "
        "or 'torch'")
    query_threads: int = Field(1, ge=1, le=64, description="intra-op threads of the model "
                               "work of one query: its embedding on onnxruntime and a "
                               "cross-encoder rerank on torch (1: a query runs on its caller's "
                               "thread and never waits for a thread team)")
    blas_threads: int | None = Field(
        1, ge=1, description="numpy BLAS threads for query-time math (None = leave as is)")
    llm_base_url: str | None = Field(
        None, description="an OpenAI-compatible chat endpoint the engine uses as its LLM when "
        "none is given in code (e.g. http://127.0.0.1:8080/v1); needs llm_model")
    llm_model: str | None = Field(None, description="the model llm_base_url serves")
    llm_api_key_env: str = Field(
        "OPENAI_API_KEY", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="the environment "
        "variable holding the endpoint's key (read when the engine opens; the key itself is "
        "never saved)")
    llm_max_tokens: int = Field(512, ge=1, le=32_768, description="completion tokens per call")
    llm_temperature: float = Field(0.0, ge=0, le=2, description="sampling temperature")
    llm_timeout_seconds: float = Field(120.0, gt=0, description="one LLM call's timeout")
    llm_retries: int = Field(4, ge=0, le=20, description="retries of a rate-limited, overloaded "
                             "or unreachable LLM call (backoff with jitter; Retry-After "
                             "honoured)")
    llm_concurrency: int = Field(4, ge=1, le=256, description="LLM calls in flight at most")
    llm_build_token_budget: int | None = Field(
        None, ge=1, description="LLM tokens (prompt + completion) one derived build may spend; "
        "past it the build stops cleanly, the last good build stays served, and the next run "
        "goes on from the LLM cache (None = no limit)")
    llm_max_reply_bytes: int = Field(
        1 << 20, ge=1024, le=1 << 30, description="bytes read of one LLM reply at most; a "
        "longer reply is refused")
    llm_query_calls_per_minute: int | None = Field(
        120, ge=1, description="query-time LLM calls per minute, all server callers together "
        "(global, drift, query/transform, rewrites; every retry counts; None = no limit)")
    llm_query_tokens_per_minute: int | None = Field(
        200_000, ge=1, description="query-time LLM tokens per minute, all server callers "
        "together (None = no limit)")
    llm_caller_calls_per_minute: int | None = Field(
        60, ge=1, description="query-time LLM calls per minute for one caller with the "
        "server's token (None = no limit)")
    llm_caller_tokens_per_minute: int | None = Field(
        100_000, ge=1, description="query-time LLM tokens per minute for one caller with the "
        "server's token (None = no limit)")
    llm_anonymous_calls_per_minute: int | None = Field(
        12, ge=1, description="query-time LLM calls per minute for one anonymous caller (by "
        "address; None = no limit)")
    llm_anonymous_tokens_per_minute: int | None = Field(
        12_000, ge=1, description="query-time LLM tokens per minute for one anonymous caller "
        "(None = no limit)")

    def _section(self, section: type[S], prefix: str) -> S:
        """The fields named ``prefix`` + a field of ``section``, as that section."""
        return section(**{f.name: getattr(self, prefix + f.name)  # type: ignore[call-arg]
                          for f in fields(section)})  # type: ignore[arg-type]

    @property
    def tree_section(self) -> TreeSection:
        """The settings of the RAPTOR tree builder."""
        return self._section(TreeSection, "tree_")

    @property
    def graph_section(self) -> GraphSection:
        """The settings of the knowledge-graph builder."""
        return self._section(GraphSection, "graph_")

    @property
    def community_section(self) -> CommunitySection:
        """The settings of the community builder."""
        return self._section(CommunitySection, "community_")

    @field_validator("chunk_overlap")
    @classmethod
    def _overlap_below_size(cls, v: int, info: Any) -> int:
        size = info.data.get("chunk_size", 200)
        if v >= size:
            raise ValueError("chunk_overlap must be smaller than chunk_size")
        return v

    @field_validator("milvus_uri")
    @classmethod
    def _milvus_address(cls, v: str | None) -> str | None:
        if v is None or v.endswith(".db") or v.startswith(("http://", "https://", "tcp://")):
            return v
        raise ValueError("milvus_uri must be a file path ending in .db (Milvus Lite) or "
                         "http(s)://host:port (a Milvus server)")

    @field_validator("llm_base_url")
    @classmethod
    def _url_without_credentials(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.lower().startswith(("http://", "https://")):
            raise ValueError("llm_base_url must be an http(s) URL "
                             "(e.g. http://127.0.0.1:8080/v1)")
        part = credential_part(v)
        if part is not None:
            raise ValueError(f"llm_base_url must not carry credentials ({part}); put the key "
                             "in the environment variable named by llm_api_key_env")
        return v

    @field_validator("graph_extractor")
    @classmethod
    def _known_extractor(cls, v: str) -> str:
        if v in ("builtin", "llm") or (v.startswith("spacy:") and len(v) > len("spacy:")):
            return v
        raise ValueError("graph_extractor must be 'builtin', 'llm' or 'spacy:<pipeline name>'")

    @classmethod
    def resolve(cls, engine_dir: Path | None = None, **overrides: Any) -> "EngineConfig":
        """Defaults, then ``engine_dir/config.json``, then the environment, then ``overrides``."""
        values: dict[str, Any] = {}
        if engine_dir is not None and (engine_dir / CONFIG_FILE).is_file():
            values.update(json.loads((engine_dir / CONFIG_FILE).read_text("utf-8")))
        for name in cls.model_fields:
            raw = os.environ.get(ENV_PREFIX + name.upper())
            if raw is not None:
                try:
                    values[name] = json.loads(raw)
                except json.JSONDecodeError:
                    values[name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"]) or "config"
            raise InvalidParams(f"bad engine configuration: {loc}: {err['msg']}", field=loc) from None

    def save(self, engine_dir: Path) -> None:
        """Write the persistent part of the configuration to ``engine_dir/config.json``."""
        data = self.model_dump(exclude={"chroma_url", "milvus_token", "torch_threads",
                                        "blas_threads", "query_backend", "query_threads",
                                        "ingest_nice", "llm_timeout_seconds", "llm_retries",
                                        "llm_concurrency", "llm_build_token_budget",
                                        *LLM_LIMIT_FIELDS})
        tmp = engine_dir / (CONFIG_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True), "utf-8")
        tmp.replace(engine_dir / CONFIG_FILE)
