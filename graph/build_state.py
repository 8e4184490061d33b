"""What a graph build takes and keeps: its settings (:class:`GraphConfig`, part of the
graph's identity), its statistics (:class:`BuildStats`) and the per-chunk results kept
between builds (:class:`GraphCache`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .extract import ChunkExtraction, RawMention
from .model import ChunkText

Embed = Callable[[list[str]], np.ndarray]
NO_SYNONYM_KINDS = frozenset({"date", "number"})


@dataclass(frozen=True)
class GraphConfig:
    """Settings of the graph build (part of the graph's identity)."""

    description_tokens: int = 120       # cap of an entity's offline description
    pair_window: int = 6                # a mention pairs with the next N mentions of its sentence
    max_relations_per_entity: int = 24  # an entity keeps its strongest N co-occurrence pairs
    min_npmi: float = 0.0               # pairs at or below this normalised PMI are dropped
    synonym_threshold: float = 0.9      # name-embedding cosine for a synonym edge
    synonym_top_k: int = 5
    synonym_min_chunks: int = 2         # names in fewer chunks (titles excepted) are not embedded
    max_sentence_entities: int = 24     # list-like sentences pair only their first N entities

    @property
    def identity(self) -> str:
        return (f"graph/2;desc={self.description_tokens};win={self.pair_window};"
                f"rel={self.max_relations_per_entity};npmi={self.min_npmi};"
                f"syn={self.synonym_threshold}/{self.synonym_top_k}/{self.synonym_min_chunks};"
                f"sent={self.max_sentence_entities}")


@dataclass
class BuildStats:
    """Where the build's time went, and what it made."""

    seconds_extract: float = 0.0        # extractor + title-lexicon scans
    seconds_resolve: float = 0.0        # keys, in-chunk name parts, name embedding, synonyms
    seconds_embedding: float = 0.0      # of which: embedding entity names
    seconds_aggregate: float = 0.0      # entities, descriptions, relations
    chunks_extracted: int = 0
    chunks_rescanned: int = 0
    names_embedded: int = 0
    entities: int = 0
    relations: int = 0
    synonyms: int = 0
    mentions: int = 0


@dataclass
class GraphCache:
    """Per-chunk results kept between builds (in memory; ``ChunkExtraction.to_json`` persists).

    ``identity`` is the extractor's: a different extractor invalidates the cache.
    """

    identity: str = ""
    chunks: dict[str, ChunkText] = field(default_factory=dict)
    extractions: dict[str, ChunkExtraction] = field(default_factory=dict)
    title_hits: dict[str, tuple[RawMention, ...]] = field(default_factory=dict)
    lexicon: frozenset[str] = frozenset()           # the titles the hits were scanned for
    name_vectors: dict[str, np.ndarray] = field(default_factory=dict)
    # Token counts of the sentences descriptions are made of, kept to the current ones.
    sentence_tokens: dict[str, int] = field(default_factory=dict)
    stats: BuildStats = field(default_factory=BuildStats)


@lru_cache(maxsize=1 << 20)
def rowid_order(key: str) -> tuple[int, str]:
    digits = key[1:] if key[:1] == "r" else ""
    return (int(digits), key) if digits.isdigit() else (1 << 62, key)
