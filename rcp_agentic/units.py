"""The registry of unit kinds: every granularity the engine can return, described once.

A unit kind says how its units come to exist — built per document at ingest (``document``:
chunk, page, document), derived from the committed chunks of many documents by a builder
(``derived``: tree-node, community, node, triplet), or composed at query time
(``composed``: path, subgraph) — whether it has levels, how containment is judged for
sessions and packing, which calibration family scores its confidence, which hit fields it
fills, and where it stands in the corrective loop's escalation ladder. Every place that
lists kinds reads this module; adding a kind is one :func:`register` call plus its builder.

Containment (RCP §7.7.3 sessions, §7.7.2 packing): a unit *contains* another when every
leaf chunk of the other is among its own leaves. Per-document kinds know their leaves by
place (a document holds its chunks and pages; a page its chunks); a derived unit stores the
leaf chunks it covers (``provenance.leaves``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from .wire import Unit

Storage = Literal["document", "derived", "composed"]
# Every unit name RCP/1 defines (§7.7.2), offered or not.
RCP_UNITS: tuple[str, ...] = get_args(Unit)


@dataclass(frozen=True)
class UnitKind:
    """One granularity: how it is stored, levelled, contained, calibrated and shown."""

    name: str
    storage: Storage
    description: str
    # Another name for a stored kind (``passage`` is a chunk); hits echo the name asked for.
    alias_of: str | None = None
    # Whether levels >= 1 exist; ``level_zero`` is what level 0 means (tree-node 0 = chunks).
    levelled: bool = False
    level_zero: str | None = None
    # Where it stands when a corrective loop widens its context (None: never escalated to).
    escalation: int | None = None
    # Calibration family of its confidence model (a family without a model gives no confidence).
    calibration: str | None = None
    # The Hit fields this kind fills beyond id/score/text/unit/level/meta.
    hit_fields: frozenset[str] = field(default_factory=frozenset)
    # The configuration switch that builds it (None: always built).
    enabled_by: str | None = None
    # Whether its text holds what its leaves say (a summary of them: a session that returned it
    # has seen them). False for a unit merely derived from its leaves — an entity or a fact
    # attested in many chunks holds a sentence or two of them, not the chunks.
    contains_leaves: bool = True
    # Whether a unit stored at one level stands for a range of levels (a community that is not
    # split further is the same community at every level up to ``umeta.levels[1]``): a request
    # for level L pools the rows stored at levels <= L whose range reaches L.
    spans_levels: bool = False

    @property
    def stored(self) -> str:
        """The stored kind behind this name (itself, unless an alias)."""
        return self.alias_of or self.name

    @property
    def per_document(self) -> bool:
        return self.storage == "document"

    @property
    def derived(self) -> bool:
        return self.storage == "derived"

    @property
    def composed(self) -> bool:
        return self.storage == "composed"


_KINDS: dict[str, UnitKind] = {}


def register(kind: UnitKind) -> UnitKind:
    """Add a kind (its name must be an RCP unit); returns it."""
    if kind.name not in RCP_UNITS:
        raise ValueError(f"{kind.name!r} is not an RCP/1 unit ({', '.join(RCP_UNITS)})")
    if kind.alias_of is not None and kind.alias_of not in _KINDS:
        raise ValueError(f"{kind.name!r} is an alias of unknown kind {kind.alias_of!r}")
    _KINDS[kind.name] = kind
    return kind


def get(name: str) -> UnitKind:
    """The kind registered under ``name``; KeyError if none."""
    return _KINDS[name]


def known() -> tuple[str, ...]:
    """Every registered kind name, in registration order."""
    return tuple(_KINDS)


def stored_kinds() -> tuple[str, ...]:
    """Names of the kinds with stored rows (aliases and composed kinds excluded)."""
    return tuple(n for n, k in _KINDS.items() if k.alias_of is None and k.storage != "composed")


def derived_kinds() -> tuple[str, ...]:
    """Names of the stored kinds derived from many documents by a builder."""
    return tuple(n for n, k in _KINDS.items() if k.alias_of is None and k.derived)


def per_document_kinds() -> tuple[str, ...]:
    """Kinds built from each document at ingest (always offered)."""
    return tuple(n for n, k in _KINDS.items() if _KINDS[k.stored].per_document)


def ladder(offered: tuple[str, ...] | list[str]) -> list[str]:
    """The escalation ladder over ``offered`` unit names, finest first."""
    ranked = [(k.escalation, n) for n, k in _KINDS.items()
              if n in offered and k.escalation is not None and k.alias_of is None]
    return [n for _r, n in sorted(ranked)]


def rank(name: str) -> int | None:
    """A kind's place on the escalation ladder (aliases share their kind's place)."""
    kind = _KINDS.get(name)
    if kind is None:
        return None
    return _KINDS[kind.stored].escalation


_DOC_FIELDS = frozenset({"chunk", "citation", "trust"})
_DERIVED_FIELDS = frozenset({"citation", "trust", "provenance"})

register(UnitKind("chunk", "document", "a token-bounded span of one document", escalation=0,
                  calibration="chunk", hit_fields=_DOC_FIELDS))
register(UnitKind("passage", "document", "another name for a chunk", alias_of="chunk",
                  calibration="chunk", hit_fields=_DOC_FIELDS))
register(UnitKind("page", "document", "one page of a paged source (PDF)", escalation=1,
                  calibration="page", hit_fields=_DOC_FIELDS))
register(UnitKind("document", "document", "a whole document", escalation=2,
                  calibration="document", hit_fields=_DOC_FIELDS))
register(UnitKind("tree-node", "derived",
                  "a RAPTOR summary of a cluster of chunks (level >= 1; level 0: the chunks)",
                  levelled=True, level_zero="chunk", escalation=3, calibration="tree-node",
                  hit_fields=_DERIVED_FIELDS, enabled_by="build_tree"))
# The knowledge graph. The loop's ladder widens context: graph units come after the tree-node
# (existing ladders keep their order, and a graph step costs more than a stored summary);
# ``node`` first (stored, one entity), then ``path`` and ``subgraph`` (composed, chains and
# neighbourhoods of facts across documents). A ``triplet`` (one sentence) is narrower than the
# chunk it comes from, so the loop never escalates to it; it is offered when asked for.
register(UnitKind("node", "derived",
                  "an entity of the knowledge graph: its name, aliases and description",
                  escalation=4, calibration="node", hit_fields=_DERIVED_FIELDS,
                  enabled_by="build_graph", contains_leaves=False))
register(UnitKind("triplet", "derived",
                  "subject, relation and object, with the sentence that attests them",
                  calibration="triplet", hit_fields=_DERIVED_FIELDS, enabled_by="build_graph",
                  contains_leaves=False))
# Leiden communities of the entity graph: level 0 the finest, higher levels coarser; every
# level a complete partition. A community is stored once, at its lowest level, and stands
# for every level up to ``umeta.levels[1]`` (``spans_levels``). Its report is far narrower
# than the chunks it covers, so sessions judge it by id. After a subgraph on the ladder:
# the widest context, a summary of a whole region of the graph.
register(UnitKind("community", "derived",
                  "a Leiden community of the knowledge graph: its report (title, key relations, "
                  "central evidence) over its entities (level 0 the finest)",
                  levelled=True, escalation=7, calibration="community",
                  hit_fields=_DERIVED_FIELDS, enabled_by="graph_communities",
                  contains_leaves=False, spans_levels=True))
register(UnitKind("path", "composed",
                  "a chain of facts between the query's entities, hop by hop with evidence",
                  escalation=5, calibration="path",
                  hit_fields=_DERIVED_FIELDS, enabled_by="build_graph", contains_leaves=False))
register(UnitKind("subgraph", "composed",
                  "the personalised-PageRank neighbourhood of the query's entities, as triplets",
                  escalation=6, calibration="subgraph",
                  hit_fields=_DERIVED_FIELDS, enabled_by="build_graph", contains_leaves=False))


def composed_kinds() -> tuple[str, ...]:
    """Names of the kinds composed at query time (never stored)."""
    return tuple(n for n, k in _KINDS.items() if k.composed)


def calibration_family(name: str) -> str:
    """The calibration family scoring a kind's confidence (its own name if it names none)."""
    kind = _KINDS.get(name)
    return kind.calibration if kind is not None and kind.calibration else name
