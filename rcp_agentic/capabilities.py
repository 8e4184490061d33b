"""The capabilities document (RCP §6, §13.2), built here and nowhere else.

An engine describes what works now as an :class:`Offer` (its configuration, models, the
unit kinds it serves, its derived status, its graph ops); :func:`build` turns that into the
engine's capability objects. A protocol session passes its :class:`TransportLimits` as well:
the document then also holds what only a server answers (``index``, ``streaming``,
``feedback``) and ``x-rcp-agentic.limits`` — the transport's limits, the configuration's
and, while ``graph`` or ``transform`` is offered, theirs.

A session's document is fixed once built (§13.2), but ``x-rcp-agentic.units`` is state, not
an offer: :func:`with_status` gives the document with that state read now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import plugins, units
from .options import VENDOR
from .store.filters import OPERATORS
from .pipeline.transform import MAX_QUERIES as MAX_TRANSFORM_QUERIES
from .vocabulary import FUSIONS, MEMORY_SCOPES, MODES

if TYPE_CHECKING:
    from .config import EngineConfig
    from .models.reranker import Reranker

# The configuration bounds advertised under x-rcp-agentic.limits, by EngineConfig field.
CONFIG_LIMITS = {"maxQueryChars": "max_query_chars", "maxSessionIdChars": "max_session_id_chars",
                 "sessionMaxBytes": "session_max_bytes", "maxTokenBudget": "max_token_budget",
                 "maxFilterDepth": "max_filter_depth", "maxFilterNodes": "max_filter_nodes",
                 "maxFilterFields": "max_filter_fields", "maxMetaKeys": "max_meta_keys",
                 "maxMetaDepth": "max_meta_depth", "maxDocumentChars": "max_document_chars",
                 "maxHitChars": "max_hit_chars", "maxEmbedChars": "max_embed_chars"}


@dataclass(frozen=True)
class Offer:
    """What an engine offers now: the facts its capabilities are built from.

    ``offered`` maps each stored unit kind served to the levels it holds; ``derived`` is the
    ``x-rcp-agentic.units`` status; ``graph_ops`` is None without a graph; ``memory`` is
    whether ``memory/build`` can update the graph; ``transform`` is the query transformations
    offered (None without an LLM).
    """

    config: EngineConfig
    offered: Mapping[str, tuple[int, ...]]
    dimension: int
    embedder_identity: Any
    reranker: Reranker | None
    calibrated: bool
    filter_fields: dict[str, str]
    derived: dict[str, dict[str, Any]]
    graph_ops: list[str] | None = None
    memory: bool = False
    transform: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TransportLimits:
    """A protocol session's own bounds: batch size, request timeout, request body size."""

    max_batch: int
    request_timeout: float  # seconds
    max_body_bytes: int | None = None


def build(offer: Offer, transport: TransportLimits | None = None) -> dict[str, Any]:
    """The capabilities document of ``offer``; with ``transport``, the protocol session's."""
    caps: dict[str, Any] = {
        "retrieve": _retrieve(offer),
        "embed": {"dimension": offer.dimension, "identity": offer.embedder_identity,
                  "batchLimit": offer.config.embed_batch_limit, "normalized": True,
                  "encodings": ["json", "f32-base64"]},
        "session": {"dedup": True, "ttlSeconds": offer.config.session_ttl_seconds},
        "filter": {"fields": offer.filter_fields, "operators": list(OPERATORS)},
        "pagination": {},
        "citations": {},
    }
    if offer.reranker is not None:
        caps["rerank"] = {"methods": [offer.reranker.method],
                          "maxCandidates": offer.config.rerank_max_candidates,
                          "models": [offer.reranker.model]}
    if offer.derived:
        caps[VENDOR] = {"units": offer.derived}
    if offer.graph_ops is not None:
        caps["graph"] = {"ops": offer.graph_ops}
        if offer.memory:
            caps["memory"] = {"scopes": list(MEMORY_SCOPES), "clues": True}
        caps.setdefault(VENDOR, {})["graphRecall"] = True
    if offer.transform:
        caps["transform"] = {"methods": list(offer.transform)}
    if transport is not None:
        caps["index"] = {"writable": True, "chunking": True}
        caps["streaming"] = {}
        caps["feedback"] = {}
        caps.setdefault(VENDOR, {})["limits"] = _limits(offer.config, transport,
                                                        graph="graph" in caps,
                                                        transform="transform" in caps)
    return caps


def with_status(caps: dict[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """``caps`` with the derived state of each kind ``x-rcp-agentic.units`` lists (the index
    version it reflects, whether it is ``current``, its counts) replaced by ``status`` (the
    engine's ``derived_status()`` now). The kinds listed stay those of ``caps`` (§13.2); a kind
    missing from ``status`` keeps its entry."""
    vendor = caps.get(VENDOR)
    if not isinstance(vendor, dict) or not isinstance(vendor.get("units"), dict):
        return caps
    live = {kind: status.get(kind, entry) for kind, entry in vendor["units"].items()}
    return {**caps, VENDOR: {**vendor, "units": live}}


def _retrieve(offer: Offer) -> dict[str, Any]:
    """``retrieve``: derived kinds only once built (with their levels); composed kinds only
    while the engine composes them."""
    names = [n for n in units.known() if units.get(n).stored in offer.offered]
    levelled = [max(offer.offered[units.get(n).stored], default=0) for n in names
                if units.get(n).levelled]
    retrieve: dict[str, Any] = {
        "maxK": offer.config.max_k, "modes": list(MODES), "fusion": list(FUSIONS),
        "mmr": True, "rerankBuiltin": offer.reranker is not None, "units": names,
        "tokenBudget": True, "confidence": offer.calibrated,
        "scoreScale": "unbounded", "defaultMode": offer.config.default_mode,
        "deterministic": True, "snapshots": True,
    }
    if levelled:
        retrieve["levels"] = max(levelled) + 1  # level 0 (the leaves) and the summaries
    if offer.reranker is None:
        retrieve["scoreFloor"] = -1.0  # cosine; RRF, weighted, convex and BM25 are >= 0
    return retrieve


def _limits(config: EngineConfig, transport: TransportLimits, *, graph: bool,
            transform: bool = False) -> dict[str, int]:
    """``x-rcp-agentic.limits``: bounds RCP has no key for (§6.2)."""
    limits = {"maxBatch": transport.max_batch,
              "requestTimeoutMs": int(transport.request_timeout * 1000)}
    limits.update({name: getattr(config, key) for name, key in CONFIG_LIMITS.items()})
    if transport.max_body_bytes is not None:
        limits["maxBodyBytes"] = transport.max_body_bytes
    if graph:
        limits.update(plugins.graph().limits)
    if transform:
        limits["maxTransformQueries"] = MAX_TRANSFORM_QUERIES
    return limits
