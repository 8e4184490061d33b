"""The one vocabulary of ``retrieve`` options (RCP §7.7), from which every other list derives.

Each option has its Python name (snake_case: the engine's ``RetrieveParams`` field,
the client's keyword, the retrievers' field), its wire name (camelCase, or an
``x-rcp-agentic-…`` vendor name, §6.2), a one-line doc (the retrievers' field
description) and whether the framework retrievers expose it as a field. ``query``
and ``k`` are the call itself, not options, and are not listed.

Who reads it: ``client.params`` (the wire names it accepts), ``integrations.common``
(the retriever fields), the LangChain field descriptions and the LlamaIndex
keywords; ``tests/test_options_vocabulary.py`` fails when any of them, or the
engine's ``RetrieveParams``, drifts from this list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

# The vendor prefix of this engine's extensions: capabilities["x-rcp-agentic"], option names.
VENDOR = "x-rcp-agentic"

RankBy = Literal["score", "confidence"]
# How ``unit="tree-node"`` searches the tree: every level in one pool, or top-down.
TreeSearch = Literal["collapsed", "traversal"]
RANK_BY: tuple[str, ...] = get_args(RankBy)
TREE_SEARCHES: tuple[str, ...] = get_args(TreeSearch)
DEFAULT_TREE_SEARCH = "collapsed"


@dataclass(frozen=True)
class RetrieveOption:
    """One ``retrieve`` option: its Python and wire names, what it does, where it is exposed."""

    name: str
    wire: str
    doc: str
    # Whether the LangChain / LlamaIndex retrievers have it as a field (and per-call keyword).
    # A vendor option may be one only when it is a switch the server advertises
    # (``capabilities["x-rcp-agentic"][<name>]``), so clients gate it before sending.
    field: bool = False
    # The values a string option may take, when this vocabulary fixes them (vendor options).
    choices: tuple[str, ...] | None = None
    # A true/false switch (a vendor option without string choices).
    boolean: bool = False

    @property
    def vendor(self) -> bool:
        """Whether this is an ``x-…`` extension rather than an RCP/1 option."""
        return self.wire.startswith("x-")


# In the order of the spec's params table (§7.7), then the vendor options.
OPTIONS: tuple[RetrieveOption, ...] = (
    RetrieveOption("mode", "mode", "Retrieval mode: dense, sparse or hybrid (engine default when "
                   "unset).", field=True),
    RetrieveOption("modality", "modality", "Modality of the query: text, image, audio, code or "
                   "multimodal (RCP §4.8; this engine: text)."),
    RetrieveOption("candidate_k", "candidateK", "Recall-stage candidate count before rerank; "
                   "also the depth of the pool each hit's confidence is read against (unset: "
                   "the engine's candidate_k, whatever k).", field=True),
    RetrieveOption("fusion", "fusion", "Hybrid fusion: {'method': 'rrf'|'weighted'|'convex', "
                   "'weights'?, 'rrf_k'?, 'alpha'?}.", field=True),
    RetrieveOption("rerank", "rerank", "Reranking: {'method', 'model'?, 'top_n'?}, or False to "
                   "disable it.", field=True),
    RetrieveOption("mmr", "mmr", "MMR diversification, e.g. {'lambda': 0.5} (0 = max diversity, "
                   "1 = pure relevance).", field=True),
    RetrieveOption("rewrite", "rewrite", "Transform the query with the engine's LLM before "
                   "recall: rewrite, hyde, multi-query, decompose, step-back, or False.",
                   field=True),
    RetrieveOption("filter", "filter", "Metadata filter tree (RCP §8), e.g. {'field': 'lang', "
                   "'op': 'eq', 'value': 'en'}.", field=True),
    RetrieveOption("min_score", "minScore", "Drop hits scoring below this (engine-scaled score).",
                   field=True),
    RetrieveOption("recency", "recency", "Recency boost: {'field': <date field>, "
                   "'half_life_days': 30}.", field=True),
    RetrieveOption("unit", "unit", "Granularity of the hits: chunk, passage, page, document, "
                   "tree-node, … (RCP §7.7.2).", field=True),
    RetrieveOption("level", "level", "Abstraction level in a hierarchical unit such as "
                   "tree-node (0 = leaves; unset = every level).", field=True),
    RetrieveOption("token_budget", "tokenBudget", "Pack top hits until their bodies reach this "
                   "many tokens (with k, whichever binds first).", field=True),
    RetrieveOption("session_id", "sessionId", "Agentic trajectory id (RCP §7.7.3): the engine "
                   "does not return a hit twice in a session.", field=True),
    RetrieveOption("include_text", "includeText", "Whether hits carry their text (False: empty "
                   "content).", field=True),
    RetrieveOption("include_vectors", "includeVectors", "Whether hits carry their embedding "
                   "vectors."),
    RetrieveOption("seed", "seed", "Determinism seed (RCP §7.7.1).", field=True),
    RetrieveOption("index_version", "indexVersion", "Pin retrieval to a corpus snapshot "
                   "(RCP §7.7.1).", field=True),
    RetrieveOption("strict", "strict", "False lets the engine degrade unsupported options "
                   "instead of failing (OptionUnsupported).", field=True),
    RetrieveOption("cursor", "cursor", "Continue a previous result from its nextCursor "
                   "(pagination)."),
    RetrieveOption("meta", "_meta", "Request metadata (RCP §4.4): progressToken, deadlineMs, "
                   "federation."),
    RetrieveOption("rank_by", f"{VENDOR}-rankBy", "Order hits by 'score' (default) or by "
                   "calibrated 'confidence'.", choices=RANK_BY),
    RetrieveOption("tree_search", f"{VENDOR}-treeSearch", "How unit='tree-node' searches: "
                   "'collapsed' (every level in one pool, default) or 'traversal' (top-down).",
                   choices=TREE_SEARCHES),
    RetrieveOption("graph_recall", f"{VENDOR}-graphRecall", "True adds the knowledge graph's "
                   "personalised-PageRank list to recall, fused with dense/sparse (needs a "
                   "graph; falls back to them when the query names no entity).", field=True,
                   boolean=True),
)

BY_NAME: Mapping[str, RetrieveOption] = {o.name: o for o in OPTIONS}
BY_WIRE: Mapping[str, RetrieveOption] = {o.wire: o for o in OPTIONS}
# Wire names of every option (query and k excluded).
WIRE_NAMES: frozenset[str] = frozenset(BY_WIRE)
# Python names of the options the framework retrievers expose as fields, in table order.
FIELD_NAMES: tuple[str, ...] = tuple(o.name for o in OPTIONS if o.field)


def option(name: str) -> RetrieveOption:
    """The option called ``name`` (Python or wire name); KeyError if none."""
    found = BY_NAME.get(name) or BY_WIRE.get(name)
    if found is None:
        raise KeyError(name)
    return found


def doc(name: str) -> str:
    """The one-line doc of option ``name`` (a retriever field's description)."""
    return option(name).doc
