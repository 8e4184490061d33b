"""The report data types: what one report is made from (:class:`ReportInput`) and what it is
(:class:`CommunityReport` with its findings, :class:`Finding`), shared by both writers
(:mod:`.extractive`, :mod:`.llm`) and the community builder that stores the reports."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..communities.build import Community
from ..model import ChunkText, GraphData

# The offline report's line of key relations starts with this (readers skip it: the findings
# hold the same relations with their evidence).
KEY_RELATIONS = "Key relations: "

CountTokens = Callable[[str], int]
Screen = Callable[[str], bool]

MAX_RELATIONS = 6         # key relations shown at most


@dataclass(frozen=True)
class Finding:
    """One finding of a report: a short statement and its explanation."""

    summary: str
    explanation: str


@dataclass
class CommunityReport:
    """The report of one community (the text's shape: :mod:`.extractive`'s module doc)."""

    title: str
    summary: str
    findings: list[Finding]
    rating: float | None          # GraphRAG's impact severity 0-10 from an LLM; None offline
    entities: list[str]           # member keys, most central first (all members)
    relations: list[int]          # indexes into graph.relations of the relations shown
    spans: list[dict[str, Any]]   # {doc_id, start, end, at: [a, b]} of the evidence shown
    text: str                     # the rendered report: embedded, indexed, returned as hit text
    sanitized: int                # pieces left out because the injection screen flagged them
    identity: str                 # the reporter's identity


@dataclass(frozen=True)
class PlanIndex:
    """The lookups a report's plan reads, shared by every community of one build: each
    entity's weighted neighbours in key order, and the indexes into ``graph.relations`` of
    its relations, ascending (what :func:`.plan.plan_index` makes from a graph and its
    edges; a builder that follows the graph may serve them another way)."""

    adjacency: Mapping[str, Mapping[str, float]]
    relations_of: Mapping[str, Sequence[int]]
    # What the plans of one build compute per entity, kept for the next community (an
    # entity sits in one community per level): its total edge weight, the documents behind
    # it, its part of a report key.
    totals: dict[str, float] = field(default_factory=dict)
    documents: dict[str, frozenset[str]] = field(default_factory=dict)
    key_parts: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportInput:
    """Everything one report is made from (``index``: the plan's lookups when the caller
    has them; else they are made from ``graph`` and ``edges``)."""

    community: Community
    graph: GraphData
    chunks: Mapping[str, ChunkText]             # chunk key "r<rowid>" -> its text
    edges: Mapping[tuple[str, str], float]      # entity_edges(graph), keyed (a, b) with a < b
    children: Sequence[CommunityReport] = ()    # the child communities' reports
    index: PlanIndex | None = None
