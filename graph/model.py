"""The knowledge graph's data model: what extraction yields, what the builder stores, what recall reads.

One :class:`GraphData` value is the whole graph at one index version. The builder
(:mod:`.build`) makes it from the committed chunks; the engine adapter
(:mod:`.index`) writes it as ``node`` and ``triplet`` units and reads it back for
a version, so a pinned ``indexVersion`` sees the graph of its own snapshot;
:mod:`.ppr` turns it into the sparse matrices of personalised PageRank.

Chunks are named by their row key ``r<rowid>`` (as the RAPTOR tree names its
leaves): a replaced document keeps its chunk ids but gets new rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..text import Span  # one span type for summaries and graph evidence

__all__ = ["ChunkText", "Entity", "GraphData", "Mention", "Relation", "Span", "Synonym"]


@dataclass(frozen=True)
class ChunkText:
    """A committed chunk as the graph builder reads it."""

    key: str              # "r<rowid>"
    uid: str              # the chunk's public id
    doc_id: str
    title: str | None     # its document's title: the entity the chunk is about, if any
    text: str
    start: int            # offset of ``text`` in its document


@dataclass(frozen=True)
class Mention:
    """One mention of an entity in a chunk."""

    entity: str           # the entity's key (see :class:`Entity`)
    surface: str          # as written
    start: int            # offsets within the chunk's text
    end: int
    sentence: int         # index of its sentence within the chunk


@dataclass
class Entity:
    """One thing, after resolution: every surface form that names it maps to its key."""

    key: str                            # normalised name; node ids derive from it (stable)
    name: str                           # display name (its most frequent surface form)
    kind: str                           # title | name | acronym | quoted | date | number | <LLM type>
    aliases: tuple[str, ...] = ()
    description: str = ""               # offline: its most informative mention sentences
    spans: tuple[Span, ...] = ()        # where the description's sentences come from
    mentions: dict[str, float] = field(default_factory=dict)   # chunk key -> mention weight
    about: tuple[str, ...] = ()         # chunk keys of the documents this entity is the title of


@dataclass(frozen=True)
class Relation:
    """A triplet: subject, relation, object, with the sentence that attests it."""

    subject: str                        # entity keys
    object: str
    relation: str                       # offline: the joining sentence; with an LLM: a typed relation
    evidence: str                       # the evidence sentence
    span: Span | None
    chunks: tuple[str, ...]             # chunk keys where the pair is attested
    weight: float                       # co-occurrence PMI (offline) or the LLM's strength
    typed: bool = False                 # True when an LLM named the relation


@dataclass(frozen=True)
class Synonym:
    """Two entities whose names are near-duplicates (joined by an edge, never merged)."""

    a: str
    b: str
    similarity: float


@dataclass
class GraphData:
    """The whole graph at one version."""

    entities: dict[str, Entity] = field(default_factory=dict)
    relations: list[Relation] = field(default_factory=list)
    synonyms: list[Synonym] = field(default_factory=list)
    # Which chunks were read, and their documents: passages are graph nodes too.
    chunk_docs: dict[str, str] = field(default_factory=dict)   # chunk key -> doc_id
