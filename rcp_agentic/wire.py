"""Pydantic models of the RCP/1 wire shapes the engine returns (§7.7): Hit, its parts, and results.

Python code uses snake_case attributes; ``to_wire()`` produces the exact camelCase
JSON object of the spec, with absent optional fields omitted (never ``null``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from .vocabulary import TrustLevel

Unit = Literal["chunk", "passage", "document", "node", "triplet", "path", "subgraph",
               "community", "tree-node", "page"]


class WireModel(BaseModel):
    """Base: camelCase aliases on the wire, snake_case in Python, unknown fields ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore",
                              serialize_by_alias=True)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict exactly as RCP/1 spells it."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Citation(WireModel):
    """Where a hit comes from: source, file URI, title, page and character span."""

    source: str
    uri: str | None = None
    title: str | None = None
    start: int | None = None
    end: int | None = None
    page: int | None = None


class ChunkRef(WireModel):
    """The hit's place in its document (§7.7 ``chunk``)."""

    doc_id: str
    index: int
    context: str | None = None


class Trust(WireModel):
    """Provenance and safety signals of a hit (§15)."""

    level: TrustLevel
    score: float | None = None
    injection_suspected: bool | None = None
    sanitized: bool | None = None


class GraphEdge(WireModel):
    """A weighted edge between two graph nodes (unit ids), §7.7 provenance and §7.9."""

    src: str
    dst: str
    weight: float | None = None


class Provenance(WireModel):
    """Graph/tree lineage of a hit: the entity ``path`` in order, the ``nodes`` and ``edges``
    traversed, and the ``leaves`` (chunk ids) whose text it shows or summarises."""

    path: list[str] | None = None
    nodes: list[str] | None = None
    edges: list[GraphEdge] | None = None
    leaves: list[str] | None = None


class Hit(WireModel):
    """One retrieved unit."""

    id: str
    score: float
    confidence: float | None = None
    text: str | None = None
    unit: Unit | None = None
    level: int | None = None
    meta: dict[str, Any] | None = None
    vector: list[float] | None = None
    scores: dict[str, float] | None = None
    citation: Citation | None = None
    provenance: Provenance | None = None
    trust: Trust | None = None
    chunk: ChunkRef | None = None


class Usage(WireModel):
    """What the pipeline did: candidate counts, tokens packed, latency and notes."""

    candidates: int = 0
    reranked: int = 0
    tokens: int = 0
    latency_ms: float = 0.0
    notes: list[str] | None = None


class RetrieveResult(WireModel):
    """The result of ``retrieve``; ``rewritten_query`` is the query the ``rewrite`` option
    searched with (several joined by `` | ``; the hypothetical passage for ``hyde``)."""

    hits: list[Hit] = Field(default_factory=list)
    next_cursor: str | None = None
    index_version: str | None = None
    usage: Usage | None = None
    rewritten_query: str | None = None


class TransformResult(WireModel):
    """The result of ``query/transform`` (§7.8): the queries to search with and, for
    ``hyde``, the hypothetical passage to embed."""

    queries: list[str]
    hypothetical: str | None = None


class RerankResult(WireModel):
    """The result of ``rerank`` (§7.6): a score per passage and the indices best first."""

    scores: list[float]
    order: list[int] | None = None


class GraphNode(WireModel):
    """A node of a ``graph`` neighbours result (§7.9): a ``node`` unit id and its score."""

    id: str
    score: float | None = None
    name: str | None = None
    trust: Trust | None = None  # of the chunks that name it (and of the name itself)


class CommunityEntry(WireModel):
    """One community of a ``graph`` result (§7.9 ``global``, ``communities``): its id and
    level, its report's summary and title, its size (entities), the report's rating, and
    (``global``) its score for the query."""

    id: str
    level: int | None = None
    summary: str | None = None
    title: str | None = None
    size: int | None = None
    rating: float | None = None
    score: float | None = None
    trust: Trust | None = None  # of the chunks its report was written from


class GraphResult(WireModel):
    """The result of ``graph`` (§7.9); which fields are set depends on the op."""

    hits: list[Hit] | None = None
    nodes: list[GraphNode] | None = None
    edges: list[GraphEdge] | None = None
    summary: str | None = None
    communities: list[CommunityEntry] | None = None
    followups: list[str] | None = None
    next_cursor: str | None = None
    index_version: str | None = None
    usage: Usage | None = None
    # What the op's own texts (``summary``, ``followups``) may claim: the lowest trust of the
    # chunks they were composed from, and whether any of those (or the texts) screen as an
    # injection. Hits, nodes and communities carry their own.
    trust: Trust | None = None


class MemoryBuildResult(WireModel):
    """The result of ``memory/build`` (§7.17)."""

    memory_id: str
    tokens: int | None = None


class MemoryClue(WireModel):
    """One clue of ``memory/recall``: a surrogate query, seed node ids, and their weight."""

    query: str | None = None
    seed_ids: list[str] | None = None
    weight: float | None = None
    trust: Trust | None = None  # of the chunks the surrogate query's words come from


class MemoryRecallResult(WireModel):
    """The result of ``memory/recall`` (§7.17): clues, and optional draft hits."""

    clues: list[MemoryClue] = Field(default_factory=list)
    hits: list[Hit] | None = None
    usage: Usage | None = None
