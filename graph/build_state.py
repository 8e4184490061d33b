"""What a graph build takes and keeps: its settings (:class:`GraphConfig`, part of the
graph's identity), its statistics (:class:`BuildStats`) and the per-chunk results kept
between builds (:class:`GraphCache`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np


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
        return (f"graph/3;desc={self.description_tokens};win={self.pair_window};"
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
    """What a build keeps for the next one: the :class:`~.live.LiveGraph` of the chunks it
    read (None before the first build), made again when the extractor or a setting
    changes."""

    live: Any = None
    stats: BuildStats = field(default_factory=BuildStats)

    @property
    def identity(self) -> str:
        return self.live.identity if self.live is not None else ""

    @property
    def name_vectors(self) -> dict[str, np.ndarray]:
        return self.live.name_vectors if self.live is not None else {}


@lru_cache(maxsize=1 << 20)
def rowid_order(key: str) -> tuple[int, str]:
    digits = key[1:] if key[:1] == "r" else ""
    return (int(digits), key) if digits.isdigit() else (1 << 62, key)
