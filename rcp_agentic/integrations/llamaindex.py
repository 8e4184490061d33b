"""LlamaIndex retriever over any RCP engine: :class:`RCPRetriever`.

>>> retriever = RCPRetriever.from_url("http://127.0.0.1:8750", token="…", k=5)  # doctest: +SKIP
>>> retriever.retrieve("what is reciprocal rank fusion?")                      # doctest: +SKIP
>>> retriever.retrieve_with("fusion", unit="document", token_budget=800)        # doctest: +SKIP

Each RCP hit becomes a ``NodeWithScore`` whose ``TextNode`` keeps the hit id, text, character
span and metadata (:func:`~.common.hit_metadata`), and links to the units it belongs to:
``SOURCE`` is the document unit (``doc:<docId>``), ``PARENT`` the next unit up (a chunk's
page or document; in a tree, a node's first parent) and ``CHILD`` a tree node's children.
It works wherever LlamaIndex takes a ``BaseRetriever``, sync and async. The graph's units,
``graph_recall`` and ``rewrite``: ``docs/python.md``, "LangChain and LlamaIndex".
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    ObjectType,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)

from .. import units
from ..client.registry import load_registry
from ..client.sync_client import default_stdio_command
from ..closing import Closable
from ..corpus.documents import unit_id
from ..wire import RetrieveResult, Unit
from .common import RETRIEVE_OPTIONS, HitSource, hit_metadata, result_metadata, retrieve_options

__all__ = ["RCPRetriever", "hit_to_node", "unit_ids"]

DEFAULT_K = 4  # as the LangChain RCPRetriever
ScoreMode = Literal["confidence", "score"]
SCORE_MODES: tuple[str, ...] = ("confidence", "score")

# Kept in node.metadata (JSON, for filters and citations) but out of the text an LLM
# or an embedding model sees: nested objects and ranking internals.
EXCLUDED_METADATA_KEYS: list[str] = [
    "hit_id", "score", "confidence", "unit", "level", "scores", "citation", "provenance",
    "chunk", "trust", "chunk_index", "chunk_start_char", "chunk_end_char", "chunk_token_count",
    "parent_ids", "child_ids", "spans", "citations", "rewritten_query"]

# Per-call overrides of retrieve_with(): (retriever, options), read back in _retrieve, so they
# pass through BaseRetriever.retrieve (events, callbacks) and cannot leak into another retriever.
_OVERRIDES: ContextVar[tuple[Any, Mapping[str, Any]] | None] = ContextVar(
    "rcp_llamaindex_overrides", default=None)


def _page(hit: Mapping[str, Any]) -> int | None:
    """The one page a hit lies on (None: no pages, or it spans several)."""
    meta = hit.get("meta") or {}
    first, last = meta.get("page_range_start"), meta.get("page_range_end")
    if first is None:
        first = last = (hit.get("citation") or {}).get("page")
    return first if isinstance(first, int) and first == last else None


def _unit(hit: Mapping[str, Any]) -> str:
    """The kind a hit is, by the registry: a levelled kind at level 0 is its leaf kind."""
    name = str(hit.get("unit") or "chunk")
    try:
        kind = units.get(name)
    except KeyError:
        return name  # another engine's kind: no registry facts to use
    if kind.levelled and hit.get("level") == 0 and kind.level_zero is not None:
        return kind.level_zero
    return name


def _per_document(unit: str) -> bool:
    try:
        return units.get(unit).per_document
    except KeyError:
        return True  # unknown kinds fall through to the id-scheme check, which does not guess


def unit_ids(hit: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The ids of the document unit and (if the hit lies on one page) the page unit of ``hit``.

    This engine names units ``doc:<docId>`` (document), ``doc:<docId>#p<n>`` (page)
    and ``doc:<docId>#c<i>`` (chunk) — see ``corpus.documents.build_record``. A hit
    whose id is not in that scheme (another engine's id space), or of a kind derived
    from many documents (``tree-node``), gets ``(None, None)`` rather than a guess.
    """
    if not _per_document(_unit(hit)):
        return None, None
    doc_id = (hit.get("chunk") or {}).get("docId", (hit.get("meta") or {}).get("doc_id"))
    if not isinstance(doc_id, str):
        return None, None
    base, hit_id = unit_id(doc_id), str(hit.get("id"))
    if hit_id != base and not hit_id.startswith(base + "#"):
        return None, None
    page = _page(hit)
    return base, None if page is None else unit_id(doc_id, "page", page)


def _derived_document(hit: Mapping[str, Any]) -> str | None:
    """The one document a derived hit covers, when its leaves show it (None: several, or unsure).

    ``meta.doc_ids`` names the documents; the hit counts as this engine's only when
    every leaf in ``provenance.leaves`` is a unit of that document (the id scheme above).
    """
    docs = (hit.get("meta") or {}).get("doc_ids")
    leaves = (hit.get("provenance") or {}).get("leaves")
    if not (isinstance(docs, list) and len(docs) == 1 and isinstance(docs[0], str)
            and isinstance(leaves, list) and leaves):
        return None
    base = unit_id(docs[0]) + "#"
    return docs[0] if all(isinstance(leaf, str) and leaf.startswith(base) for leaf in leaves) \
        else None


def _document(doc_id: str) -> RelatedNodeInfo:
    return RelatedNodeInfo(node_id=unit_id(doc_id), node_type=ObjectType.DOCUMENT,
                           metadata={"unit": "document", "doc_id": doc_id})


def _ids(value: Any) -> list[str]:
    return [str(v) for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _neighbour(hit: Mapping[str, Any], step: int) -> dict[str, Any]:
    """What is known of the node one level above (``step=1``) or below (-1) a levelled hit."""
    try:
        kind = units.get(str(hit.get("unit") or "chunk"))
    except KeyError:
        return {}
    level = hit.get("level")
    if not kind.levelled or isinstance(level, bool) or not isinstance(level, int):
        return {}
    if level + step == 0 and kind.level_zero is not None:
        return {"unit": kind.level_zero}
    return {"unit": kind.name, "level": level + step}


def _relationships(hit: Mapping[str, Any], node_id: str
                   ) -> dict[NodeRelationship, RelatedNodeInfo | list[RelatedNodeInfo]]:
    out: dict[NodeRelationship, RelatedNodeInfo | list[RelatedNodeInfo]] = {}
    doc, page = unit_ids(hit)
    if doc is None:
        single = _derived_document(hit)
        if single is not None:  # SOURCE only when the hit comes from one document
            out[NodeRelationship.SOURCE] = _document(single)
    else:
        doc_id = doc[len("doc:"):]
        document = _document(doc_id)
        # A document unit is its own SOURCE, so ref_doc_id groups every unit of a document.
        out[NodeRelationship.SOURCE] = document
        unit = _unit(hit)
        if unit in ("chunk", "passage") and page is not None:
            out[NodeRelationship.PARENT] = RelatedNodeInfo(
                node_id=page, node_type=ObjectType.TEXT,
                metadata={"unit": "page", "doc_id": doc_id, "page": _page(hit)})
        elif unit in ("chunk", "passage", "page") and node_id != doc:
            out[NodeRelationship.PARENT] = document
    # Tree links, as the engine reports them: the first parent (a leaf may sit in several
    # clusters; all stay in metadata.parent_ids) and every child. No CHILD for a document or
    # page: the hit does not say which chunk/page units exist, and a fake relation misleads.
    meta = hit.get("meta") or {}
    parents, children = _ids(meta.get("parent_ids")), _ids(meta.get("child_ids"))
    if parents:
        out[NodeRelationship.PARENT] = RelatedNodeInfo(
            node_id=parents[0], node_type=ObjectType.TEXT, metadata=_neighbour(hit, 1))
    if children:
        below = _neighbour(hit, -1)
        out[NodeRelationship.CHILD] = [
            RelatedNodeInfo(node_id=child, node_type=ObjectType.TEXT, metadata=dict(below))
            for child in children]
    return out


def hit_to_node(hit: Mapping[str, Any], score_mode: ScoreMode = "confidence",
                call: Mapping[str, Any] | None = None) -> NodeWithScore:
    """One wire hit as a scored ``TextNode`` (scored by confidence if asked and present);
    ``call`` is what its result says of the whole call (:func:`~.common.result_metadata`)."""
    node_id = str(hit["id"])
    citation = hit.get("citation") or {}
    meta = hit.get("meta") or {}
    start = citation.get("start", meta.get("chunk_start_char"))
    end = citation.get("end", meta.get("chunk_end_char"))
    node = TextNode(
        id_=node_id, text=hit.get("text") or "", metadata=hit_metadata(hit, call),
        start_char_idx=start, end_char_idx=end, embedding=hit.get("vector"),
        relationships=_relationships(hit, node_id),
        excluded_llm_metadata_keys=list(EXCLUDED_METADATA_KEYS),
        excluded_embed_metadata_keys=list(EXCLUDED_METADATA_KEYS))
    score = hit.get("confidence") if score_mode == "confidence" else None
    return NodeWithScore(node=node, score=float(hit["score"] if score is None else score))


class RCPRetriever(BaseRetriever, Closable):
    """A LlamaIndex retriever over an RCP engine (in process, stdio, HTTP, registry or client).

    Every retriever option of :mod:`rcp_agentic.options`
    (:data:`~.common.RETRIEVE_OPTIONS`, snake_case) is a keyword and an attribute, as
    is ``k`` (alias ``similarity_top_k``); ``None`` leaves an option to the engine.
    ``retrieve_with`` also takes the vendor options (``tree_search``, ``rank_by``).
    ``score_mode="confidence"`` scores nodes by the hit's calibrated confidence in
    [0, 1] when it has one and by the raw engine score otherwise; ``"score"`` always
    uses the raw score. Engine errors surface as
    :class:`~rcp_agentic.errors.RCPError` subclasses.
    """

    # The retriever options of rcp_agentic.options, typed for readers and type checkers;
    # __init__ sets them from that list (tests/test_options_vocabulary.py keeps the two equal).
    mode: str | None
    unit: Unit | None
    level: int | None
    token_budget: int | None
    filter: dict[str, Any] | None
    session_id: str | None
    mmr: dict[str, Any] | None
    rerank: dict[str, Any] | bool | None
    recency: dict[str, Any] | None
    min_score: float | None
    candidate_k: int | None
    fusion: dict[str, Any] | None
    include_text: bool | None
    index_version: str | None
    seed: int | None
    strict: bool | None
    graph_recall: bool | None
    rewrite: str | Literal[False] | None

    def __init__(self, source: Any = None, *, k: int | None = None,
                 similarity_top_k: int | None = None, score_mode: ScoreMode = "confidence",
                 token: str | None = None, client_options: Mapping[str, Any] | None = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False,
                 **options: Any) -> None:
        unknown = sorted(set(options) - set(RETRIEVE_OPTIONS))
        if unknown:
            raise TypeError(f"unknown RCPRetriever option(s): {', '.join(unknown)}; known: k, "
                            "similarity_top_k, " + ", ".join(RETRIEVE_OPTIONS))
        if k is not None and similarity_top_k is not None and k != similarity_top_k:
            raise TypeError("k and similarity_top_k are the same option; pass one")
        self.k: int = next((v for v in (k, similarity_top_k) if v is not None), DEFAULT_K)
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k must be a positive integer, not {self.k!r}")
        if score_mode not in SCORE_MODES:
            raise ValueError(f"score_mode must be one of {', '.join(SCORE_MODES)}, "
                             f"not {score_mode!r}")
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.hit_source = HitSource(source, token=token, client_options=client_options)
        self.score_mode: ScoreMode = score_mode
        for name in RETRIEVE_OPTIONS:
            setattr(self, name, options.get(name))

    @property
    def similarity_top_k(self) -> int:
        """LlamaIndex's name for ``k``."""
        return self.k

    @similarity_top_k.setter
    def similarity_top_k(self, value: int) -> None:
        self.k = value

    # --- construction -----------------------------------------------------------------

    @classmethod
    def from_engine(cls, engine: Any, **kwargs: Any) -> RCPRetriever:
        """Retrieve from an :class:`~rcp_agentic.Engine` in this process."""
        return cls(engine, **kwargs)

    @classmethod
    def from_client(cls, client: Any, **kwargs: Any) -> RCPRetriever:
        """Retrieve through an open ``RCPClient`` / ``AsyncRCPClient`` (not closed by us)."""
        return cls(client, **kwargs)

    @classmethod
    def from_stdio(cls, command: Sequence[str] | None = None,
                   engine_dir: str | os.PathLike[str] | None = None,
                   **kwargs: Any) -> RCPRetriever:
        """Spawn ``command`` (default ``rcp-agentic serve --stdio [--engine DIR]``) on first use."""
        return cls(list(command) if command else default_stdio_command(engine_dir), **kwargs)

    @classmethod
    def from_url(cls, url: str, token: str | None = None, **kwargs: Any) -> RCPRetriever:
        """Retrieve over HTTP from ``url``, with an optional bearer token."""
        return cls(url, token=token, **kwargs)

    @classmethod
    def from_registry(cls, registry: str | os.PathLike[str] | Mapping[str, Any], engine_id: str,
                      **kwargs: Any) -> RCPRetriever:
        """Retrieve from the engine ``engine_id`` of an ``rcp.json`` (a path or parsed mapping)."""
        return cls(load_registry(registry)[engine_id], **kwargs)

    # --- retrieval --------------------------------------------------------------------

    def retrieve_with(self, query: str | QueryBundle, **overrides: Any) -> list[NodeWithScore]:
        """``retrieve`` with per-call options (``k``/``similarity_top_k`` and RETRIEVE_OPTIONS)."""
        self._call_args(overrides)  # fail before any event fires
        token = _OVERRIDES.set((self, overrides))
        try:
            return self.retrieve(query)
        finally:
            _OVERRIDES.reset(token)

    async def aretrieve_with(self, query: str | QueryBundle,
                             **overrides: Any) -> list[NodeWithScore]:
        """The async ``retrieve_with``."""
        self._call_args(overrides)
        token = _OVERRIDES.set((self, overrides))
        try:
            return await self.aretrieve(query)
        finally:
            _OVERRIDES.reset(token)

    def _call_args(self, overrides: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        overrides = dict(overrides)
        if "similarity_top_k" in overrides:
            top_k = overrides.pop("similarity_top_k")
            if overrides.setdefault("k", top_k) != top_k:
                raise TypeError("k and similarity_top_k are the same option; pass one")
        options = retrieve_options({name: getattr(self, name) for name in RETRIEVE_OPTIONS},
                                   overrides)
        return options.pop("k", self.k), options

    def _pending(self) -> tuple[int, dict[str, Any]]:
        pending = _OVERRIDES.get()
        return self._call_args(pending[1] if pending and pending[0] is self else {})

    def _nodes(self, result: RetrieveResult) -> list[NodeWithScore]:
        call = result_metadata(result)
        return [hit_to_node(hit.to_wire(), self.score_mode, call) for hit in result.hits]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        k, options = self._pending()
        return self._nodes(self.hit_source.retrieve(query_bundle.query_str, k, options))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        k, options = self._pending()
        return self._nodes(await self.hit_source.aretrieve(query_bundle.query_str, k, options))

    # --- lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        """Close the sync clients this retriever opened (stdio servers get EOF)."""
        self.hit_source.close()

    async def aclose(self) -> None:
        """Close the clients this retriever opened, including the running loop's async one."""
        await self.hit_source.aclose()

