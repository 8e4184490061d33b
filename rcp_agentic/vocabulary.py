"""The names of retrieval modes, fusions, recall sources, trust levels, graph ops, query
transformations and memory scopes, each defined once; every module that lists them reads this one.

The protocol schema (``tests/schema/rcp-1.0.json``) is the authority for the wire enums among
them; ``tests/test_vocabulary.py`` fails when this module and the schema disagree. Each name
set is a ``Literal`` type (for pydantic fields and signatures) and the tuple of its values.
"""

from __future__ import annotations

from typing import Literal, get_args

# Retrieval modes (§7.7 ``mode``): which retrievers recall candidates.
Mode = Literal["dense", "sparse", "hybrid"]
MODES: tuple[str, ...] = get_args(Mode)
# The modes that run the dense (vector) retriever, and those that run the sparse (BM25) one.
DENSE_MODES: tuple[str, ...] = ("dense", "hybrid")
SPARSE_MODES: tuple[str, ...] = ("sparse", "hybrid")

# Fusion methods (§7.7 ``fusion.method``), also how a federation fuses its engines' lists.
Fusion = Literal["rrf", "weighted", "convex"]
FUSIONS: tuple[str, ...] = get_args(Fusion)

# The named recall lists fusion combines: dense, sparse, and the knowledge graph's
# personalised PageRank when ``x-rcp-agentic-graphRecall`` is on.
RecallSource = Literal["dense", "sparse", "graph"]
RECALL_SOURCES: tuple[str, ...] = get_args(RecallSource)

# Trust levels of a document and its hits (§15), most trusted first.
TrustLevel = Literal["trusted", "community", "untrusted"]
TRUST_LEVELS: tuple[TrustLevel, ...] = get_args(TrustLevel)

# ``graph`` ops (§7.9): the entity ops (over the graph's nodes) and the community ops (over
# its Leiden communities); an engine offers the entity ops, then the community ops once
# built, in that order.
ENTITY_OPS: tuple[str, ...] = ("local", "neighbors")
COMMUNITY_OPS: tuple[str, ...] = ("global", "drift", "communities")
GraphOp = Literal["local", "global", "drift", "communities", "neighbors"]
GRAPH_OPS: tuple[str, ...] = get_args(GraphOp)  # in the schema's order

# Query transformations (§7.8 ``query/transform`` ``method``, §7.7 ``retrieve.rewrite``), offered
# only by an engine with an LLM.
TransformMethod = Literal["rewrite", "hyde", "multi-query", "decompose", "step-back"]
TRANSFORM_METHODS: tuple[str, ...] = get_args(TransformMethod)
# The transformations that yield several queries (one retrieve each, fused by rank).
MULTI_QUERY_METHODS: tuple[str, ...] = ("multi-query", "decompose")

# ``memory/build`` scopes (§7.17).
MemoryScope = Literal["global", "session"]
MEMORY_SCOPES: tuple[str, ...] = get_args(MemoryScope)
