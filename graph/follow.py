"""The graph at a new index version, from the graph at an older one and the rows in between.

A write commits a new index version: the graph's units covering changed chunks stop being
valid there, and the graph builder later commits units for the new chunks. Reading the
whole graph back for each version (``load_graph``) costs about a second at 2k chunks, so
:func:`advance` reads only the rows that entered or left between a cached version and the
new one (``Docstore.derived_delta`` and ``leaf_delta``) and patches a copy of the older
graph. The result equals ``load_graph`` at the new version (relations and synonyms in the
same order; entities in insertion order, which a dict's equality ignores), and its
:class:`GraphChange` says what moved, for :mod:`.view_patch`.

The bookkeeping (:class:`GraphRows`: each row's parsed value, the triplets naming each
entity, the nodes listing each synonym) moves from the older state to the newer one, so
only the newest state can be advanced; advancing any other falls back to a full load.
"""

from __future__ import annotations

import gc
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..store.docstore import Docstore
from .stored import KINDS, NODE, entity_of, loads_json, node_uid, relation_of
from .model import Entity, GraphData, Relation, Synonym

# A delta touching more rows than this share of the graph's is loaded whole. The crossover
# is not measured yet: one write on the HotpotQA graph (2.3k chunks, 60k rows) patches in
# ~2 ms against ~1.3 s for a full load; the share is a conservative guess.
FULL_SHARE = 0.25

RelationOrder = tuple[str, str, str, str, int]
Pair = tuple[str, str]


@dataclass
class NodeRow:
    """A valid ``node`` row: its unit id, its entity and the synonyms it lists."""

    uid: str
    entity: Entity
    synonyms: dict[str, float]  # partner node uid -> similarity (the last one listed)


@dataclass
class GraphRows:
    """The valid graph rows of one version, parsed, with the indexes a patch needs."""

    nodes: dict[int, NodeRow] = field(default_factory=dict)
    node_of: dict[str, int] = field(default_factory=dict)        # node uid -> its row
    triplets: dict[int, Relation] = field(default_factory=dict)  # also those missing an entity
    naming: dict[str, set[int]] = field(default_factory=dict)    # entity key -> triplet rows
    listed_by: dict[str, set[int]] = field(default_factory=dict)  # node uid -> rows listing it
    present: set[int] = field(default_factory=set)               # triplet rows in the graph
    pairs: dict[Pair, float] = field(default_factory=dict)       # the graph's synonyms
    partners: dict[str, set[str]] = field(default_factory=dict)  # entity key -> synonym keys


@dataclass
class GraphChange:
    """What moved from one version's graph to the next's: removed items as they were
    (a changed entity, or a relation whose entity changed, is both removed and added)."""

    entities_removed: dict[str, Entity] = field(default_factory=dict)
    entities_added: dict[str, Entity] = field(default_factory=dict)
    relations_removed: list[Relation] = field(default_factory=list)
    relations_added: list[Relation] = field(default_factory=list)
    synonyms_removed: list[Synonym] = field(default_factory=list)
    synonyms_added: list[Synonym] = field(default_factory=list)
    chunks_removed: list[str] = field(default_factory=list)
    chunks_added: list[str] = field(default_factory=list)


@dataclass
class GraphState:
    """The graph at one version, with what patching it to a later version needs.

    ``rows`` is None once handed on to a newer state; ``change`` says what moved from
    version ``base`` (None after a full load)."""

    version: int
    data: GraphData
    rows: GraphRows | None
    order: list[RelationOrder]  # each relation's sort key (rowid last: ties by row)
    pair_keys: list[Pair]       # each synonym's (a, b)
    base: int = 0
    change: GraphChange | None = None

    @property
    def graph(self) -> GraphData | None:
        """The graph (None when this version holds no entity, as ``load_graph``)."""
        return self.data if self.data.entities else None


def advance(state: GraphState | None, store: Docstore, version: int) -> GraphState:
    """The graph state at ``version``: ``state`` (of an older version, still holding its
    rows) patched with the rows changed in between, or a full load when there is no such
    state or the change is large (:data:`FULL_SHARE`)."""
    if state is None or state.rows is None or state.version >= version:
        return load_state(store, version)
    rows = state.rows
    entered, left = store.derived_delta(KINDS, state.version, version)
    if len(entered) + len(left) > FULL_SHARE * max(1, len(rows.nodes) + len(rows.triplets)):
        return load_state(store, version)
    chunks_in, chunks_out = store.leaf_delta(state.version, version)
    if not store.readable_since(state.version):  # rows retired since were collected
        return load_state(store, version)
    state.rows = None
    return _quietly(lambda: _Patch(state, rows).apply(version, entered, left, chunks_in,
                                                        chunks_out))


def load_state(store: Docstore, version: int) -> GraphState:
    """The graph state at ``version`` read whole (as ``load_graph``)."""
    entered, _left = store.derived_delta(KINDS, 0, version)
    empty = GraphState(0, GraphData(), None, [], [])

    def load() -> GraphState:
        out = _Patch(empty, GraphRows()).apply(version, entered, [], store.leaf_docs(version),
                                               [])
        out.data.entities = dict(sorted(out.data.entities.items()))
        out.base, out.change = 0, None
        return out

    return _quietly(load)


def _quietly(make: Any) -> GraphState:
    # Many small objects and no cycle among them: the cyclic collector would walk them
    # again and again while they are made (as in ``graph_from_rows``).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return make()  # type: ignore[no-any-return]
    finally:
        if enabled:
            gc.enable()


class _Patch:
    """One patch of a state's graph: rows leave, rows enter, then relations, synonyms and
    chunks settle."""

    def __init__(self, old: GraphState, rows: GraphRows) -> None:
        self.old = old
        self.rows = rows
        self.entities = dict(old.data.entities)
        self.change = GraphChange()
        self.touched: set[str] = set()          # entity keys removed or added
        self.triplets_touched: set[int] = set()
        self.gone: dict[int, Relation] = {}     # triplet rows that left, their relation

    def apply(self, version: int, entered: Sequence[tuple[int, str, str, str, str]],
              left: Iterable[int], chunks_in: Sequence[tuple[int, str]],
              chunks_out: Iterable[int]) -> GraphState:
        """The new state: ``left`` rows out, ``entered`` rows in, then the rest settles."""
        for rowid in left:
            self._leave(rowid)
        for rowid, uid, unit, text, meta in entered:
            self._enter(rowid, uid, unit, text, loads_json(meta))
        order, relations = self._settle_relations()
        pair_keys, synonyms = self._settle_synonyms()
        chunk_docs = dict(self.old.data.chunk_docs)
        for rowid in chunks_out:
            if chunk_docs.pop(f"r{rowid}", None) is not None:
                self.change.chunks_removed.append(f"r{rowid}")
        for rowid, doc_id in chunks_in:  # new rows come after every older one: rowid order
            chunk_docs[f"r{rowid}"] = doc_id
            self.change.chunks_added.append(f"r{rowid}")
        data = GraphData(self.entities, relations, synonyms, chunk_docs)
        return GraphState(version, data, self.rows, order, pair_keys, self.old.version,
                          self.change)

    def _leave(self, rowid: int) -> None:
        rows = self.rows
        node = rows.nodes.pop(rowid, None)
        if node is not None:
            key = node.entity.key
            if rows.node_of.get(node.uid) == rowid:
                del rows.node_of[node.uid]
            for partner in node.synonyms:
                rows.listed_by.get(partner, set()).discard(rowid)
            self.change.entities_removed[key] = self.entities.pop(key)
            self.touched.add(key)
            return
        relation = rows.triplets.pop(rowid, None)
        if relation is not None:
            for key in (relation.subject, relation.object):
                rows.naming.get(key, set()).discard(rowid)
            self.gone[rowid] = relation
            self.triplets_touched.add(rowid)

    def _enter(self, rowid: int, uid: str, unit: str, text: str, m: dict[str, Any]) -> None:
        rows = self.rows
        if unit == NODE:
            entity = entity_of(text, m)
            synonyms = {other: float(similarity) for other, similarity in m["synonyms"]}
            rows.nodes[rowid] = NodeRow(uid, entity, synonyms)
            rows.node_of[uid] = rowid
            for partner in synonyms:
                rows.listed_by.setdefault(partner, set()).add(rowid)
            self.entities[entity.key] = entity
            self.change.entities_added[entity.key] = entity
            self.touched.add(entity.key)
            return
        relation = relation_of(text, m)
        rows.triplets[rowid] = relation
        for key in (relation.subject, relation.object):
            rows.naming.setdefault(key, set()).add(rowid)
        self.triplets_touched.add(rowid)

    def _settle_relations(self) -> tuple[list[RelationOrder], list[Relation]]:
        """Relations whose row or entity moved: in or out of the graph, or re-weighed (an
        edge's weight depends on its entities' kinds)."""
        rows, change = self.rows, self.change
        touched = set(self.triplets_touched)
        for key in self.touched:
            touched |= rows.naming.get(key, set())
        gone: list[RelationOrder] = []
        added: list[tuple[RelationOrder, Relation]] = []
        for rowid in sorted(touched):
            was = rowid in rows.present
            relation = rows.triplets.get(rowid)
            now = (relation is not None and relation.subject in self.entities
                   and relation.object in self.entities)
            held = self.gone.get(rowid, relation)
            moved = relation is not None and bool({relation.subject, relation.object}
                                                  & self.touched)
            if was and held is not None and (not now or moved):
                change.relations_removed.append(held)
                if not now:
                    gone.append(_order(held, rowid))
                    rows.present.discard(rowid)
            if now and relation is not None and (not was or moved):
                change.relations_added.append(relation)
                if not was:
                    added.append((_order(relation, rowid), relation))
                    rows.present.add(rowid)
        return _patched(self.old.order, self.old.data.relations, gone, added)

    def _settle_synonyms(self) -> tuple[list[Pair], list[Synonym]]:
        """Synonym pairs touching a moved entity, settled as a full load would: the pair's
        similarity from the later of the two rows listing it; gone with either entity."""
        rows, change = self.rows, self.change
        pairs: set[Pair] = set()
        for key in self.touched:
            pairs.update(_pair(key, p) for p in rows.partners.get(key, ()))
            row = rows.node_of.get(node_uid(key))
            if row is None:
                continue
            node = rows.nodes[row]
            for uid in node.synonyms:
                other = rows.node_of.get(uid)
                if other is not None:
                    pairs.add(_pair(key, rows.nodes[other].entity.key))
            for other in rows.listed_by.get(node.uid, ()):
                pairs.add(_pair(key, rows.nodes[other].entity.key))
        gone: list[Pair] = []
        added: list[tuple[Pair, Synonym]] = []
        for pair in sorted(pairs):
            before, after = rows.pairs.get(pair), self._similarity(pair)
            if before == after:
                continue
            if before is not None:
                change.synonyms_removed.append(Synonym(*pair, before))
                gone.append(pair)
                del rows.pairs[pair]
                rows.partners[pair[0]].discard(pair[1])
                rows.partners[pair[1]].discard(pair[0])
            if after is not None:
                synonym = Synonym(*pair, after)
                change.synonyms_added.append(synonym)
                added.append((pair, synonym))
                rows.pairs[pair] = after
                rows.partners.setdefault(pair[0], set()).add(pair[1])
                rows.partners.setdefault(pair[1], set()).add(pair[0])
        return _patched(self.old.pair_keys, self.old.data.synonyms, gone, added)

    def _similarity(self, pair: Pair) -> float | None:
        """A pair's similarity as a full load reads it (None: not a synonym here)."""
        rows = self.rows
        a, b = (rows.node_of.get(node_uid(k)) for k in pair)
        if a is None or b is None:
            return None
        said = [(row, rows.nodes[row].synonyms.get(rows.nodes[other].uid))
                for row, other in ((a, b), (b, a))]
        listed = [(row, s) for row, s in said if s is not None]
        return max(listed)[1] if listed else None


def _order(relation: Relation, rowid: int) -> RelationOrder:
    return (relation.subject, relation.object, relation.relation, relation.evidence, rowid)


def _pair(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)


def _patched(keys: list[Any], items: list[Any], gone: list[Any],
             added: list[tuple[Any, Any]]) -> tuple[list[Any], list[Any]]:
    """Sorted unique ``keys`` with their aligned ``items``, less the ``gone`` keys, plus
    ``added``: copied and bisected for a few changes, sorted again for many."""
    if len(gone) + len(added) > 16 + len(keys) // 64:
        drop = set(gone)
        merged = [(k, x) for k, x in zip(keys, items) if k not in drop] + added
        merged.sort(key=lambda kx: kx[0])
        return [k for k, _x in merged], [x for _k, x in merged]
    keys, items = list(keys), list(items)
    for key in gone:
        i = bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            del keys[i], items[i]
    for key, item in added:
        i = bisect_left(keys, key)
        keys.insert(i, key)
        items.insert(i, item)
    return keys, items
