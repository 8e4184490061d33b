"""The node and triplet units a write changed, made from the live graph alone.

:func:`delta_units` turns a :class:`~.live.GraphDelta` into the units of the entities and
relation pairs it names, exactly as :func:`.stored.graph_units` makes them from the whole
canonical graph (the same canonical forms, the same ids: a pair's triplet ids depend on
that pair alone). :class:`CommittedTriplets` remembers the triplet ids each pair had at the
last commit, so a pair whose relations changed or left retires the right rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .live import GraphDelta, LiveGraph
from .live_relations import Pair
from .model import ChunkText, Entity
from .stored import (
    TRIPLET,
    StoredUnit,
    canonical_entity,
    canonical_relations,
    node_uid,
    node_unit,
    triplet_units,
)


class _DocTexts:
    """Chunks by document, read from the live graph when asked (``_spans`` reads ``get``)."""

    def __init__(self, live: LiveGraph) -> None:
        self._live = live

    def get(self, doc_id: str, default: object = None) -> list[ChunkText]:
        return self._live.doc_chunks(doc_id)


def delta_units(live: LiveGraph, delta: GraphDelta) -> dict[str, list[StoredUnit]]:
    """The units of ``delta``'s entities and pairs, by ``node:<key>`` / pair (``a\\x1fb``):
    an entity or pair that left has an empty list."""
    texts = _DocTexts(live)
    made: dict[str, Entity] = {}

    def entity(k: str) -> Entity:
        if k not in made:
            made[k] = canonical_entity(live.entities[k])
        return made[k]

    out: dict[str, list[StoredUnit]] = {}
    for k in sorted(delta.entities):
        if k not in live.entities:
            out[node_uid(k)] = []
            continue
        synonyms = [[node_uid(b), s] for b, s in live.synonyms.pairs_of(k).items()]
        out[node_uid(k)] = [node_unit(entity(k), synonyms, texts)]  # type: ignore[arg-type]
    for pair in sorted(delta.pairs):
        rels = canonical_relations(live.relations.get(pair, []), live.entities)
        ends = {k: entity(k) for k in pair} if rels else {}
        out[pair_key(pair)] = triplet_units(rels, ends, texts)  # type: ignore[arg-type]
    return out


def pair_key(pair: Pair) -> str:
    return "\x1f".join(pair)


@dataclass
class CommittedTriplets:
    """The triplet unit ids of each pair as last committed."""

    by_pair: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, units: Iterable[StoredUnit]) -> CommittedTriplets:
        out = cls()
        for u in units:
            if u.unit == TRIPLET:
                key = pair_key((u.meta["subject_key"], u.meta["object_key"]))
                out.by_pair.setdefault(key, []).append(u.uid)
        return out

    def held(self, keys: Iterable[str]) -> set[str]:
        """The uids committed under these pair keys."""
        return {uid for k in keys for uid in self.by_pair.get(k, ())}

    def commit(self, units: dict[str, list[StoredUnit]]) -> None:
        """Record the units just committed (node keys are ignored)."""
        for key, made in units.items():
            if key.startswith("node:"):
                continue
            if made:
                self.by_pair[key] = [u.uid for u in made]
            else:
                self.by_pair.pop(key, None)
