"""Pydantic models of the RCP/1 wire shapes the engine returns (§7.7): Hit, its parts, and results.

Python code uses snake_case attributes; ``to_wire()`` produces the exact camelCase
JSON object of the spec, with absent optional fields omitted (never ``null``).
``Model.model_validate(wire)`` is the other direction, the one parser of a wire object:
the RCP clients return what it makes of each result, so a result reads the same whether an
:class:`~rcp_agentic.Engine` or a client gave it. Unknown keys are ignored (§4.6); a result's
``_meta`` (§4.4) is kept as ``meta``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr
from pydantic.alias_generators import to_camel

from . import display_hooks
from .vocabulary import TrustLevel

if TYPE_CHECKING:
    import pandas
    from typing_extensions import Self

Unit = Literal["chunk", "passage", "document", "node", "triplet", "path", "subgraph",
               "community", "tree-node", "page"]


def _id_text(value: Any) -> Any:
    """An id as a string: RCP ids are strings or numbers on the wire (§7.7, §7.9)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


# A hit, node, community or edge end id: a number another server sends reads as its string.
WireId = Annotated[str, BeforeValidator(_id_text)]
# The ``_meta`` object a result may carry (§4.4): implementation-specific data.
ResultMeta = Annotated[dict[str, Any] | None, Field(default=None, alias="_meta")]


class WireModel(BaseModel):
    """Base: camelCase aliases on the wire, snake_case in Python, unknown fields ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore",
                              serialize_by_alias=True)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict exactly as RCP/1 spells it."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Displayed(WireModel):
    """A result that shows itself in Jupyter as HTML (``_repr_html_``), with the words of
    the query it answers marked in its texts (drawn by :mod:`rcp_agentic.display`, which
    this module does not import: see :mod:`.display_hooks`)."""

    _query: str | None = PrivateAttr(default=None)

    def with_query(self, query: Any) -> Self:
        """This result, its display marking the terms of ``query`` (a text query; the
        engine sets it on what it returns). Returns ``self``."""
        self._query = query if isinstance(query, str) else None
        return self

    def html(self, query: str | None = None) -> str:
        """The HTML display (``query``: whose terms to mark; default the one it answers)."""
        raise NotImplementedError

    def _repr_html_(self) -> str:
        return self.html()

    def __eq__(self, other: object) -> bool:
        # The query a display marks is not part of the result: equal fields, equal results.
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, like any pydantic model


class Citation(WireModel):
    """Where a hit comes from: source, file URI, title, page and character span (this engine
    always sets ``source``; RCP makes every field optional)."""

    source: str | None = None
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

    src: WireId
    dst: WireId
    weight: float | None = None


class Provenance(WireModel):
    """Graph/tree lineage of a hit: the entity ``path`` in order, the ``nodes`` and ``edges``
    traversed, and the ``leaves`` (chunk ids) whose text it shows or summarises."""

    path: list[WireId] | None = None
    nodes: list[WireId] | None = None
    edges: list[GraphEdge] | None = None
    leaves: list[WireId] | None = None


class Hit(Displayed):
    """One retrieved unit; in Jupyter it shows as a one-row table (a ``path`` or
    ``subgraph`` hit with its picture)."""

    id: WireId
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

    def html(self, query: str | None = None) -> str:
        """The hit as an HTML table row with its header (see :class:`Displayed`)."""
        return display_hooks.render("hit_html", self, query or self._query)


class UsageLLM(WireModel):
    """What a request's LLM calls cost (``usage.llm``, an extension; the server's
    :class:`~rcp_agentic.control.LLMSpent` on the wire): calls made, answers read from the
    cache, and the tokens of the prompts and completions."""

    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Usage(WireModel):
    """What the pipeline did: candidate counts, tokens packed, latency and notes; ``llm``
    when the request made or read LLM calls (a server sets it)."""

    candidates: int = 0
    reranked: int = 0
    tokens: int = 0
    latency_ms: float = 0.0
    notes: list[str] | None = None
    llm: UsageLLM | None = None


class RetrieveResult(Displayed):
    """The result of ``retrieve``; ``rewritten_query`` is the query the ``rewrite`` option
    searched with (several joined by `` | ``; the hypothetical passage for ``hyde``).

    In Jupyter it shows as a table of its hits and a usage line; ``to_dataframe()`` gives
    one row per hit. ``RCPClient.retrieve`` returns one too; ``meta`` is the result's
    ``_meta`` (a federation's report on its engines, say)."""

    hits: list[Hit] = Field(default_factory=list)
    next_cursor: str | None = None
    index_version: str | None = None
    usage: Usage | None = None
    rewritten_query: str | None = None
    meta: ResultMeta

    def html(self, query: str | None = None) -> str:
        """The hits as an HTML table and the usage line (see :class:`Displayed`)."""
        return display_hooks.render("result_html", self, query or self._query)

    def to_dataframe(self) -> pandas.DataFrame:
        """The hits as a pandas DataFrame, one row per hit (needs the ``notebook`` extra)."""
        return display_hooks.render("to_dataframe", self.hits)


class TransformResult(WireModel):
    """The result of ``query/transform`` (§7.8): the queries to search with and, for
    ``hyde``, the hypothetical passage to embed; ``meta`` is the result's ``_meta`` (a
    server's ``notes``, e.g. that the LLM's reply was unusable and the query came back)."""

    queries: list[str]
    hypothetical: str | None = None
    # What the queries and passage may claim (an extension, shaped as a hit's ``trust``): the
    # question's level, suspected when it or the model's texts screen as an injection.
    trust: Trust | None = None
    meta: ResultMeta


class RerankResult(WireModel):
    """The result of ``rerank`` (§7.6): a score per passage and the indices best first.
    (Our server also sends ``results``, ``[{index, score}]`` best first, for clients that
    read that list; it is ``order`` and ``scores`` again, so the model leaves it out.)"""

    scores: list[float]
    order: list[int] | None = None
    meta: ResultMeta


class GraphNode(WireModel):
    """A node of a ``graph`` neighbours or local result (§7.9): a ``node`` unit id, its
    score and name, and ``seed`` (an extension key) when the request started from it;
    ``engine``, the engine that holds it, when a federation answered."""

    id: WireId
    score: float | None = None
    name: str | None = None
    seed: bool | None = None
    trust: Trust | None = None  # of the chunks that name it (and of the name itself)
    engine: str | None = None


class CommunityEntry(WireModel):
    """One community of a ``graph`` result (§7.9 ``global``, ``communities``): its id and
    level, its report's summary and title, its size (entities), the report's rating, and
    (``global``) its score for the query; ``engine``, the engine that holds it, when a
    federation answered."""

    id: WireId
    level: int | None = None
    summary: str | None = None
    title: str | None = None
    size: int | None = None
    rating: float | None = None
    score: float | None = None
    trust: Trust | None = None  # of the chunks its report was written from
    engine: str | None = None


class GraphResult(Displayed):
    """The result of ``graph`` (§7.9); which fields are set depends on the op. In Jupyter
    its nodes and edges draw as an SVG picture (seeds marked; ``local``'s passages joined
    to the entities they mention), with its summary, communities and hits."""

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
    meta: ResultMeta

    def html(self, query: str | None = None) -> str:
        """The picture, summary, communities and hits as HTML (see :class:`Displayed`)."""
        return display_hooks.render("graph_result_html", self, query or self._query)

    def to_dataframe(self) -> pandas.DataFrame:
        """The hits (``local``, ``drift``) as a pandas DataFrame, one row per hit."""
        return display_hooks.render("to_dataframe", self.hits or [])


class MemoryBuildResult(WireModel):
    """The result of ``memory/build`` (§7.17): the memory's id (pass it to recall) and its
    size in tokens; ``usage`` when a server has notes for the call."""

    memory_id: str
    tokens: int | None = None
    usage: Usage | None = None
    meta: ResultMeta


class MemoryClue(WireModel):
    """One clue of ``memory/recall``: a surrogate query, seed node ids, and their weight;
    when a federation answered, ``engine`` (whose clue it is) and ``engines`` (every engine
    that gave the same clue)."""

    query: str | None = None
    seed_ids: list[WireId] | None = None
    weight: float | None = None
    trust: Trust | None = None  # of the chunks the surrogate query's words come from
    engine: str | None = None
    engines: list[str] | None = None


class MemoryRecallResult(WireModel):
    """The result of ``memory/recall`` (§7.17): clues, and optional draft hits."""

    clues: list[MemoryClue] = Field(default_factory=list)
    hits: list[Hit] | None = None
    usage: Usage | None = None
    meta: ResultMeta
