"""Knowledge graph over the committed chunks, installed as ``rcp_agentic.graph``.

Extraction (:mod:`.extract`: title lexicon + builtin rules, spaCy, or an LLM),
resolution (:mod:`.resolve`), the build into :class:`GraphData` (:mod:`.build`,
incremental through :class:`GraphCache`) and HippoRAG-style personalised-PageRank
recall with neighbourhoods and paths (:mod:`.ppr`); hierarchical Leiden communities with
stable ids and incremental updates (:mod:`.communities`), served as the ``community`` unit
with their reports (:mod:`.communities.index`, :mod:`.reports`). The engine core does not
depend on it.
"""

from .build import build_graph, update_graph
from .build_state import BuildStats, GraphCache, GraphConfig
from .communities.build import (Community, CommunityHierarchy, CommunityUpdate,
                                build_communities, community_id, entity_edges, modularity,
                                update_communities)
from .communities.config import CommunityConfig
from .extract import ChunkExtraction, Extractor, Lexicon, RawMention, RawRelation
from .extract_llm import LLMExtractor, parse_llm_reply
from .extract_rules import BuiltinExtractor
from .extract_spacy import SpacyExtractor
from .model import ChunkText, Entity, GraphData, Mention, Relation, Span, Synonym
from .ppr import GraphView, Subgraph
from .ppr_weights import PPRWeights
from .resolve import entity_key, synonym_edges

__all__ = [
    "BuildStats", "BuiltinExtractor", "Community", "CommunityConfig", "CommunityHierarchy",
    "CommunityUpdate", "build_communities", "community_id", "entity_edges", "modularity",
    "update_communities", "ChunkExtraction", "ChunkText", "Entity", "Extractor",
    "GraphCache", "GraphConfig", "GraphData", "GraphView", "LLMExtractor", "Lexicon", "Mention",
    "PPRWeights", "RawMention", "RawRelation", "Relation", "Span", "SpacyExtractor", "Subgraph",
    "Synonym", "build_graph", "entity_key", "parse_llm_reply", "synonym_edges", "update_graph",
]
