"""What the community builder keeps between runs, and how it follows a write from it.

:class:`Tracked` is the last committed run: the graph it clustered (a :mod:`..follow` state,
which :func:`..follow.advance` moves to a new version by the rows that changed), its entity
edges as each entity's neighbours (:class:`EntityEdges`), and the hierarchy it wrote.
:meth:`EntityEdges.patched` recomputes only the edges of the entities a
:class:`~..follow.GraphChange` reaches, with :func:`.entity_graph.edge_arrays` over the
part of the graph those edges depend on, so the weights are the ones a whole computation
gives, bit for bit. :func:`dirty` names the communities whose row may differ after an
update; :class:`ReportLookups` and :class:`ChunkTexts` serve a report's plan what it reads,
one entity or chunk at a time. The rules: ``docs/internals.md``, "The community builder".
"""

from __future__ import annotations

import gc
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from ...store.docstore import Docstore
from ..follow import GraphState, RelationOrder
from ..model import ChunkText, Entity, GraphData, Relation, Synonym
from ..reports.model import PlanIndex
from ..stored import triplet_uids
from .build import CommunityHierarchy, CommunityUpdate, drifted
from .config import CommunityConfig
from .entity_graph import EdgeArrays, Edges, edge_arrays


@dataclass
class EdgeChange:
    """What a patch of the edges found: the entities an update re-clusters around (added,
    removed, or an incident edge moved beyond the drift tolerance), and those whose report
    inputs may have moved (changed, named by a changed relation or synonym, or with an
    incident edge of another weight)."""

    touched: set[str] = field(default_factory=set)
    moved: set[str] = field(default_factory=set)


@dataclass
class EntityEdges:
    """The entity edges as each entity's weighted neighbours in key order (every entity has
    an entry), and the entities naming each chunk (mentioned in it or about it), which a
    patch reads."""

    adjacency: dict[str, dict[str, float]]
    by_chunk: dict[str, set[str]]

    @classmethod
    def of(cls, graph: GraphData, arrays: EdgeArrays) -> EntityEdges:
        """The edges ``arrays`` of ``graph`` (its :func:`edge_arrays`)."""
        keys = arrays.keys
        adjacency: dict[str, dict[str, float]] = {k: {} for k in keys}
        # Pairs in key order fill each entity's neighbours in key order: those before it,
        # then those after it.
        for a, b, w in zip(arrays.a.tolist(), arrays.b.tolist(), arrays.weight.tolist()):
            adjacency[keys[a]][keys[b]] = w
            adjacency[keys[b]][keys[a]] = w
        by_chunk: dict[str, set[str]] = defaultdict(set)
        for k, e in graph.entities.items():
            for ck in (*e.mentions, *e.about):
                by_chunk[ck].add(k)
        return cls(adjacency, dict(by_chunk))

    def as_dict(self) -> Edges:
        """The edges keyed ``(a, b)`` with ``a < b`` (as :func:`.entity_graph.entity_edges`)."""
        return dict(sorted(((a, b), w) for a, near in self.adjacency.items()
                           for b, w in near.items() if a < b))

    def among(self, keys: list[str]) -> EdgeArrays:
        """The edges among ``keys`` (sorted) as arrays."""
        inside = set(keys)
        adjacency = self.adjacency
        return EdgeArrays.of(keys, {(a, b): w for a in keys for b, w in adjacency[a].items()
                                    if a < b and b in inside})

    def patched(self, state: GraphState, config: CommunityConfig
                ) -> tuple[EntityEdges, EdgeChange]:
        """The edges of ``state``'s graph from these, the edges of its base version, and
        what moved (``state`` must hold its rows and its change). Copy on write: these
        edges stay as they were."""
        change = state.change
        assert change is not None and state.rows is not None
        ents = state.data.entities
        removed, added = change.entities_removed, change.entities_added
        changed = removed.keys() | added.keys()
        by_chunk = dict(self.by_chunk)
        shifted: set[str] = set()   # chunks some entity started or stopped mentioning
        for k in changed:
            before, after = removed.get(k), added.get(k)
            was, now = _named(before), _named(after)
            for ck in was - now:
                rest = by_chunk[ck] - {k}
                if rest:
                    by_chunk[ck] = rest
                else:
                    del by_chunk[ck]
            for ck in now - was:
                by_chunk[ck] = by_chunk.get(ck, set()) | {k}
            shifted.update((before.mentions.keys() if before else set())
                           ^ (after.mentions.keys() if after else set()))
        # Whose edges may move: the changed entities, the ends of changed relations and
        # synonyms, and every mention of a chunk whose mentions changed (its co-mention
        # weight is shared among them).
        reach = set(changed)
        for r in (*change.relations_removed, *change.relations_added):
            reach.update((r.subject, r.object))
        for syn in (*change.synonyms_removed, *change.synonyms_added):
            reach.update((syn.a, syn.b))
        for ck in shifted:
            reach.update(k for k in by_chunk.get(ck, ()) if ck in ents[k].mentions)
        new_pairs = _incident_edges(state, by_chunk, {k for k in reach if k in ents}, config)
        adjacency = self.adjacency
        old_pairs = {_pair(a, b): w for a in reach if a in adjacency
                     for b, w in adjacency[a].items()}
        patched = dict(adjacency)
        for a in reach:
            patched.pop(a, None)
        for k in reach:
            if k in ents:
                patched[k] = {}
        for a, b in old_pairs:
            for x, y in ((a, b), (b, a)):
                if x not in reach and x in patched:
                    if patched[x] is adjacency.get(x):
                        patched[x] = dict(adjacency[x])
                    patched[x].pop(y, None)
        grown: set[str] = set()
        for (a, b), w in new_pairs.items():
            for x, y in ((a, b), (b, a)):
                if x not in reach:
                    if patched[x] is adjacency.get(x):
                        patched[x] = dict(adjacency[x])
                    if y not in patched[x]:
                        grown.add(x)
                patched[x][y] = w
        for x in grown:  # neighbours stay in key order (the reports' sums run in it)
            patched[x] = dict(sorted(patched[x].items()))
        moved = set(changed)
        for r in (*change.relations_removed, *change.relations_added):
            moved.update((r.subject, r.object))
        for pair in old_pairs.keys() | new_pairs.keys():
            if old_pairs.get(pair) != new_pairs.get(pair):
                moved.update(pair)
        touched = {k for k in changed if (k in ents) != (k in adjacency)}
        touched.update(drifted(old_pairs, new_pairs, old_pairs.keys() | new_pairs.keys(),
                               config))
        return EntityEdges(patched, by_chunk), EdgeChange(touched, moved)


def _named(e: Entity | None) -> set[str]:
    """The chunks an entity is mentioned in or about."""
    return set() if e is None else {*e.mentions, *e.about}


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


def _incident_edges(state: GraphState, by_chunk: Mapping[str, set[str]], reach: set[str],
                    config: CommunityConfig) -> Edges:
    """Every edge of an entity in ``reach`` (all in the graph), from :func:`edge_arrays` over
    what those edges depend on: the entities sharing a chunk with them (each entity's
    chunks cut to those chunks, which keeps every chunk's mentions whole), the relations
    and synonyms naming them. Each weight sums the same contributions in the same order as
    over the whole graph."""
    ents = state.data.entities
    rows = state.rows
    assert rows is not None
    chunks = {ck for k in reach for ck in (*ents[k].mentions, *ents[k].about)}
    mentions: dict[str, dict[str, float]] = defaultdict(dict)
    about: dict[str, list[str]] = defaultdict(list)
    for ck in chunks:
        for k in by_chunk.get(ck, ()):
            e = ents[k]
            if ck in e.mentions:
                mentions[k][ck] = e.mentions[ck]
            if ck in e.about:
                about[k].append(ck)
    relations = [r for _o, r in relations_naming(state, reach)]
    synonyms = {_pair(k, p): rows.pairs[_pair(k, p)]
                for k in reach for p in rows.partners.get(k, ())}
    keys = (reach | mentions.keys() | about.keys() | {r.subject for r in relations}
            | {r.object for r in relations} | {k for pair in synonyms for k in pair})
    part = GraphData({k: replace(ents[k], mentions=mentions.get(k, {}),
                                 about=tuple(about.get(k, ()))) for k in sorted(keys)},
                     relations, [Synonym(a, b, s) for (a, b), s in sorted(synonyms.items())],
                     {})
    arrays = edge_arrays(part, config)
    names = arrays.keys
    out: Edges = {}
    for a, b, w in zip(arrays.a.tolist(), arrays.b.tolist(), arrays.weight.tolist()):
        if names[a] in reach or names[b] in reach:
            out[(names[a], names[b])] = w
    return out


def relations_naming(state: GraphState, keys: Iterable[str]
                     ) -> list[tuple[RelationOrder, Relation]]:
    """The relations of ``state``'s graph naming any of ``keys``, in the graph's order, with
    their sort keys."""
    rows = state.rows
    assert rows is not None
    found: dict[int, Relation] = {}
    for k in keys:
        for rowid in rows.naming.get(k, ()):
            if rowid in rows.present:
                found[rowid] = rows.triplets[rowid]
    return sorted(((r.subject, r.object, r.relation, r.evidence, rowid), r)
                  for rowid, r in found.items())


def relation_uid(graph: GraphData, i: int) -> str:
    """The stored ``triplet`` unit id of ``graph.relations[i]`` (:func:`triplet_uids`, which
    tells apart only relations of the same two entities: they lie together in the graph's
    order)."""
    rels = graph.relations
    r = rels[i]
    lo = i
    while lo > 0 and (rels[lo - 1].subject, rels[lo - 1].object) == (r.subject, r.object):
        lo -= 1
    hi = i + 1
    while hi < len(rels) and (rels[hi].subject, rels[hi].object) == (r.subject, r.object):
        hi += 1
    return triplet_uids(GraphData(relations=rels[lo:hi]))[i - lo]


class _RelationsOf(Mapping[str, Sequence[int]]):
    """Each entity's relations as ascending indexes into the graph's relations."""

    def __init__(self, state: GraphState) -> None:
        self._state = state
        self._found: dict[str, list[int]] = {}

    def __getitem__(self, key: str) -> Sequence[int]:
        got = self._found.get(key)
        if got is None:
            order = self._state.order
            got = self._found[key] = [bisect_left(order, o)
                                      for o, _r in relations_naming(self._state, (key,))]
        if not got:
            raise KeyError(key)
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._state.data.entities)

    def __len__(self) -> int:
        return len(self._state.data.entities)


def report_lookups(state: GraphState, edges: EntityEdges) -> PlanIndex:
    """The plan's lookups over ``state``'s graph and its ``edges``, made per entity when a
    report asks (what :func:`..reports.plan.plan_index` makes whole)."""
    return PlanIndex(edges.adjacency, _RelationsOf(state))


class ChunkTexts(Mapping[str, ChunkText]):
    """The chunks visible in a graph (``chunk_docs``), each read from the store when first
    asked for."""

    def __init__(self, store: Docstore, chunk_docs: Mapping[str, str]) -> None:
        self._store = store
        self._docs = chunk_docs
        self._read: dict[str, ChunkText] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._docs

    def __getitem__(self, key: str) -> ChunkText:
        got = self._read.get(key)
        if got is None:
            if key not in self._docs:
                raise KeyError(key)
            self.fetch([key])
            got = self._read.get(key)
            if got is None:
                raise KeyError(key)
        return got

    def fetch(self, keys: Iterable[str]) -> None:
        """Read these chunks now (in a few queries: a run that reports every community)."""
        todo = [int(k[1:]) for k in keys if k not in self._read and k in self._docs]
        for r, uid, doc_id, start, text, title in self._store.leaves_of(todo):
            self._read[f"r{r}"] = ChunkText(f"r{r}", uid, doc_id, title, text, int(start or 0))

    def __iter__(self) -> Iterator[str]:
        return iter(self._docs)

    def __len__(self) -> int:
        return len(self._docs)


@dataclass
class Tracked:
    """The builder's last committed run: the graph it clustered (holding its rows, so it can
    be advanced), its edges, the hierarchy it wrote, the graph version that hierarchy was
    built on and the index version of the commit that wrote it."""

    graph: GraphState
    edges: EntityEdges
    hierarchy: CommunityHierarchy
    graph_version: str
    written: str


def dirty(old: CommunityHierarchy, new: CommunityHierarchy, update: CommunityUpdate,
          moved: Iterable[str]) -> tuple[set[str], set[str]]:
    """The communities of ``new`` whose row may differ from ``old``'s after ``update``, and
    those among them whose report may: a report changes with the communities placed anew
    or moved in the tree and those holding a ``moved`` entity; a row also with their
    children (their levels end below the parent) and every root when the top level moved;
    each with its ancestors (a report reads its children's)."""
    comms = new.communities
    placed = {cid for cid in update.placed if old.communities.get(cid) != comms[cid]}
    leaf_of = new.leaf_of()
    reports = placed | {leaf_of[k] for k in moved if k in leaf_of}
    rows = set(reports)
    for cid in placed:
        rows.update(comms[cid].children)
    if new.top_level != old.top_level:
        rows.update(c.id for c in new.roots())
    return _with_ancestors(new, rows), _with_ancestors(new, reports)


def _with_ancestors(hier: CommunityHierarchy, ids: set[str]) -> set[str]:
    out = set(ids)
    for cid in list(out):
        for up in hier.lineage(cid)[1:]:
            if up in out:
                break
            out.add(up)
    return out


@contextmanager
def quiet_gc() -> Iterator[None]:
    """The cyclic collector paused: a run makes many small objects beside the large tracked
    state, which the collector would walk again and again (none of them forms a cycle)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
