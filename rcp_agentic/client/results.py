"""Typed views of the graph, memory and query/transform results (§7.9, §7.17, §7.8) the
clients return.

The clients hand back the wire ``result`` as a plain dict, like every other method; these
``TypedDict`` s say which keys it has (camelCase, as on the wire), so type checkers and
editors know ``result["nodes"][0]["id"]``. A server may add keys (§4.6), and which keys are
present depends on the op. :mod:`rcp_agentic.wire` has the same shapes as pydantic models
(``GraphResult.model_validate(result)``) for callers who want validation.
"""

from __future__ import annotations

from typing import Any, TypedDict


class GraphNode(TypedDict, total=False):
    """A node of a ``neighbors`` result: a ``node`` unit id, its score, and its name."""

    id: str
    score: float
    name: str


class GraphEdge(TypedDict, total=False):
    """A weighted edge between two nodes (unit ids)."""

    src: str
    dst: str
    weight: float


class CommunityEntry(TypedDict, total=False):
    """A community of a ``global`` or ``communities`` result: its id and level, its report
    (``summary``) and title, its size (entities), the report's rating, and (``global``) its
    score for the query; ``engine`` when a federation answered."""

    id: str
    level: int
    summary: str
    title: str
    size: int
    rating: float
    score: float
    engine: str


class GraphResult(TypedDict, total=False):
    """``graph``: ``hits`` for ``local``; ``nodes`` and ``edges`` for ``neighbors``;
    ``summary`` and ``communities`` for ``global``; ``hits`` and ``followups`` (the
    follow-up queries not yet run) for ``drift``; ``communities`` and, while more,
    ``nextCursor`` for ``communities``."""

    hits: list[dict[str, Any]]
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    summary: str
    communities: list[CommunityEntry]
    followups: list[str]
    nextCursor: str
    indexVersion: str
    usage: dict[str, Any]


class MemoryBuildResult(TypedDict, total=False):
    """``memory/build``: the memory's id (pass it to recall) and its size in tokens."""

    memoryId: str
    tokens: int


class MemoryClue(TypedDict, total=False):
    """One clue: a surrogate query, the seed node ids it starts from, and its weight."""

    query: str
    seedIds: list[str]
    weight: float


class MemoryRecallResult(TypedDict, total=False):
    """``memory/recall``: clues (feed them to ``retrieve`` or ``graph``) and draft hits."""

    clues: list[MemoryClue]
    hits: list[dict[str, Any]]
    usage: dict[str, Any]


class TransformResult(TypedDict, total=False):
    """``query/transform``: the queries to search with (``multi-query``/``decompose``: several;
    the query itself when the server's LLM gave nothing usable) and, for ``hyde``, the
    ``hypothetical`` passage to embed in place of the query."""

    queries: list[str]
    hypothetical: str
    _meta: dict[str, Any]
