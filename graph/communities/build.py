"""Hierarchical Leiden communities over the entity graph, with stable ids and incremental updates.

:func:`build_communities` builds the hierarchy top-down as GraphRAG does: a connected
component that fits ``max_community_size`` is one community, a larger one is split by Leiden
(:mod:`.split`) and every part still above the cap is split again, breadth-first, under an
optional :class:`Budget`. Levels count from the leaves (``level 0`` is the finest) and every
level is a complete partition of the entities. A community's id hashes its members, so it
keeps its id while they stay. :func:`update_communities` re-clusters only the roots that an
added, removed or re-weighted entity touches, moving untouched communities as blocks. The
same input gives the same output; the edges are :mod:`.entity_graph`'s. The algorithm in
full (the split and its guards, levels, the budget, the update, and why it replaced the
former builder): ``docs/internals.md``, "Leiden communities".
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ...errors import InvalidParams
from ..model import GraphData
from .config import CommunityConfig
from .entity_graph import LOW_KINDS, EdgeArrays, Edges, EntityGraph, edge_arrays, entity_edges
from .split import CommunityStats, groups, leiden, split

__all__ = ["Budget", "Community", "CommunityBudgetExceeded", "CommunityHierarchy", "CommunityStats",
           "CommunityUpdate", "LOW_KINDS", "build_communities", "community_id", "drifted",
           "entity_edges", "modularity", "recluster", "update_communities"]

FORMAT = "rcp-agentic/communities/1"


class Budget:
    """A deadline for one build or update: ``seconds`` from its creation (None: no limit).
    It is read before every split (one Leiden call is never cut short); ``clock`` is the
    time source (``time.monotonic``)."""

    def __init__(self, seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self.deadline = None if seconds is None else clock() + seconds

    def expired(self) -> bool:
        return self.deadline is not None and self._clock() >= self.deadline


class CommunityBudgetExceeded(RuntimeError):
    """The budget ran out before the top level (the roots) was complete: nothing is built."""


@dataclass(frozen=True)
class Community:
    """One community: its members (entity keys, sorted) and its place in the tree."""

    id: str
    members: tuple[str, ...]
    parent: str | None
    children: tuple[str, ...]         # ids, largest first (ties by id)
    height: int                       # 0 for a leaf; its lowest level

    @property
    def size(self) -> int:
        return len(self.members)


def community_id(members: Iterable[str]) -> str:
    """The stable id of a member set: ``community:`` + 16 hex digits of its SHA-1."""
    digest = hashlib.sha1("\n".join(sorted(members)).encode("utf-8")).hexdigest()
    return f"community:{digest[:16]}"


def _sorted_id(members: Sequence[str]) -> str:
    """:func:`community_id` of members already sorted (vertex order is key order)."""
    return "community:" + hashlib.sha1("\n".join(members).encode("utf-8")).hexdigest()[:16]


@dataclass
class CommunityHierarchy:
    """All communities of one graph, as a forest (roots = the coarsest partition)."""

    communities: dict[str, Community] = field(default_factory=dict)
    identity: str = CommunityConfig().identity
    # How it was built (not part of its value: a read-back hierarchy has default stats).
    stats: CommunityStats = field(default_factory=CommunityStats, compare=False, repr=False)
    # Entity key -> its leaf community, once asked for (an update hands it on, patched).
    _leaf_of: dict[str, str] | None = field(default=None, compare=False, repr=False)

    @property
    def top_level(self) -> int:
        return max((c.height for c in self.roots()), default=0)

    def roots(self) -> list[Community]:
        return [c for c in self.communities.values() if c.parent is None]

    def levels(self, cid: str, top_level: int | None = None) -> range:
        """The levels community ``cid`` appears at (lowest .. highest); ``top_level``: the
        hierarchy's, when the caller has it (it is computed over every root)."""
        c = self.communities[cid]
        top = self.top_level if top_level is None and c.parent is None else top_level
        high = top if c.parent is None else self.communities[c.parent].height - 1
        assert high is not None
        return range(c.height, high + 1)

    def leaf_of(self) -> dict[str, str]:
        """Entity key -> the id of its leaf community (do not change it)."""
        if self._leaf_of is None:
            self._leaf_of = {m: c.id for c in self.communities.values() if not c.children
                             for m in c.members}
        return self._leaf_of

    def lineage(self, cid: str) -> list[str]:
        """``cid`` and its ancestors, up to its root."""
        out = [cid]
        while (p := self.communities[out[-1]].parent) is not None:
            out.append(p)
        return out

    def level(self, level: int) -> list[Community]:
        """The partition at ``level`` (0 = finest), largest communities first."""
        if not 0 <= level <= self.top_level:
            raise InvalidParams(f"level must be in 0..{self.top_level}", field="level")
        out = [c for c in self.communities.values() if c.height <= level
               and (c.parent is None or self.communities[c.parent].height > level)]
        return sorted(out, key=lambda c: (-c.size, c.id))

    def membership(self, level: int) -> dict[str, str]:
        """Entity key -> id of its community at ``level``."""
        return {m: c.id for c in self.level(level) for m in c.members}

    def entities(self) -> set[str]:
        return {m for c in self.roots() for m in c.members}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (``levels`` is derived, for readers' convenience)."""
        return {"format": FORMAT, "identity": self.identity, "top_level": self.top_level,
                "communities": [
                    {"id": c.id, "members": list(c.members), "parent": c.parent,
                     "children": list(c.children), "height": c.height,
                     "levels": [self.levels(c.id).start, self.levels(c.id).stop - 1]}
                    for c in sorted(self.communities.values(), key=lambda c: c.id)]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommunityHierarchy:
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise InvalidParams(f"not a community hierarchy (format {FORMAT!r})", field="format")
        try:
            comms = {}
            for row in data["communities"]:
                c = Community(id=str(row["id"]), members=tuple(str(m) for m in row["members"]),
                              parent=None if row["parent"] is None else str(row["parent"]),
                              children=tuple(str(x) for x in row["children"]),
                              height=int(row["height"]))
                comms[c.id] = c
            out = cls(communities=comms, identity=str(data["identity"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidParams(f"malformed community hierarchy: {exc}",
                                field="communities") from exc
        for c in comms.values():
            if (c.parent is not None and c.parent not in comms) or any(
                    x not in comms for x in c.children):
                raise InvalidParams(f"community {c.id} links to a missing community",
                                    field="communities")
        return out


@dataclass
class CommunityUpdate:
    """What :func:`update_communities` (or a build) did."""

    mode: str = "full"                # full | incremental
    kept: int = 0                     # communities whose id survived
    added: int = 0
    retired: int = 0
    roots_kept: int = 0
    entities_reclustered: int = 0     # in the roots re-clustered (touched roots, new entities)
    entities_touched: int = 0         # added, removed or with a changed incident edge
    entities_added: int = 0
    entities_removed: int = 0
    untouched: int = 0                # old communities with no touched member (kept ids' bound)
    seconds: float = 0.0
    reason: str = ""
    # An incremental update: the ids of the old subtrees it clustered again, and of the
    # communities it placed instead (the rest of the hierarchy is the old one's).
    replaced: set[str] = field(default_factory=set, repr=False)
    placed: set[str] = field(default_factory=set, repr=False)


# --- the old hierarchy an update follows ----------------------------------------------------------

@dataclass
class _Guide:
    """The old hierarchy an update follows: where each entity was, and what is untouched."""

    old: CommunityHierarchy
    clean: set[str]                   # ids of old communities with no touched member
    path: dict[str, list[str]]        # entity -> its old communities, root first

    @classmethod
    def of(cls, old: CommunityHierarchy, touched: set[str],
           region: Iterable[Community]) -> _Guide:
        """The guide through ``region``: the old subtrees clustered again (the entities
        clustered are theirs and new ones, so no other old community is looked up)."""
        region = list(region)
        path = {m: lineage for c in region if not c.children
                for lineage in [old.lineage(c.id)[::-1]] for m in c.members}
        clean = {c.id for c in region if touched.isdisjoint(c.members)}
        return cls(old, clean, path)

    def units(self, nodes: Sequence[str]) -> tuple[list[list[int]], list[int]]:
        """How to split ``nodes`` on an update: its units (positions in ``nodes``) — the
        largest untouched old communities lying wholly inside it (smaller than it), and
        every other entity alone — and Leiden's start, each unit labelled by its entities'
        first old community (root first) that does not hold all of ``nodes`` (a new entity
        alone)."""
        count: dict[str, int] = defaultdict(int)
        for v in nodes:
            for c in self.path.get(v, ()):
                count[c] += 1
        n = len(nodes)
        comms = self.old.communities
        unit_of: list[str] = []
        label_of: list[str] = []
        for v in nodes:
            path = self.path.get(v, ())
            unit_of.append(next((c for c in path if c in self.clean and count[c] < n
                                 and count[c] == comms[c].size), "\0" + v))
            label_of.append(next((c for c in path if count[c] < n), "\0" + v))
        members: dict[str, list[int]] = defaultdict(list)
        for i, u in enumerate(unit_of):
            members[u].append(i)
        units = list(members.values())
        labels: dict[str, int] = {}
        initial = []
        for group in units:
            first = {label_of[i] for i in group}
            key = label_of[group[0]] if len(first) == 1 else unit_of[group[0]]
            initial.append(labels.setdefault(key, len(labels)))
        return units, initial


def _guided(g: Any, names: list[str], guide: _Guide, config: CommunityConfig,
            stats: CommunityStats) -> Callable[[], list[np.ndarray]]:
    """An update's split of ``g`` (vertices ``names``): Leiden on the graph of its units
    (:meth:`_Guide.units`; edges between units summed, a unit's internal weight its
    self-loop), warm-started from the old hierarchy."""
    def run() -> list[np.ndarray]:
        units, initial = guide.units(names)
        if len(units) < 2:
            return []
        unit = np.empty(len(names), dtype=np.int64)
        for u, group in enumerate(units):
            unit[group] = u
        ug = g.copy()
        ug.contract_vertices(unit.tolist(), combine_attrs=None)
        ug.simplify(multiple=True, loops=False, combine_edges={"weight": "sum"})
        labels = np.asarray(leiden(ug, config, stats, initial=initial))
        return groups(labels[unit])
    return run


# --- the breadth-first build ------------------------------------------------------------------

@dataclass
class _Node:
    members: np.ndarray               # entity vertex indices, increasing (= key order)
    parent: int                       # index of its parent node; -1 for a root
    sub: Any = None                   # its igraph subgraph, while it waits to be split
    reused: str | None = None         # an update: the old community kept with its subtree


class _Forest:
    """The tree of one build or update, grown one depth at a time (module doc)."""

    def __init__(self, eg: EntityGraph, config: CommunityConfig, budget: Budget,
                 stats: CommunityStats, guide: _Guide | None) -> None:
        self.eg, self.config, self.budget, self.stats, self.guide = (eg, config, budget,
                                                                     stats, guide)
        self.nodes: list[_Node] = []

    def names(self, members: np.ndarray) -> list[str]:
        keys = self.eg.keys
        return [keys[i] for i in members.tolist()]

    def node(self, members: np.ndarray, parent: int, parent_sub: Any, local: np.ndarray
             ) -> _Node:
        """A node of ``members`` (= ``local`` vertices of ``parent_sub``): reused when an
        update finds it untouched; its subgraph cut when it is to be split."""
        out = _Node(members, parent)
        if self.guide is not None:
            cid = _sorted_id(self.names(members))
            if cid in self.guide.clean:
                out.reused = cid
                return out
        if len(members) > self.config.max_community_size:
            out.sub = parent_sub.induced_subgraph(local.tolist())
        return out

    def parts(self, sub: Any, members: np.ndarray) -> list[np.ndarray]:
        """The children of a set larger than the cap: its components, or (one) a split."""
        comps = groups(sub.connected_components().membership)
        if len(comps) > 1:
            return comps
        guided = (None if self.guide is None else
                  _guided(sub, self.names(members), self.guide, self.config, self.stats))
        return split(sub, self.config, self.stats, guided)

    def roots(self, start: np.ndarray) -> list[_Node]:
        """Depth 0: a component that fits is one root; a larger one is split into roots."""
        whole = self.eg.graph
        top = (self.eg.as_induced() if len(start) == whole.vcount()
               else whole.induced_subgraph(start.tolist()))
        out: list[_Node] = []
        for comp in groups(top.connected_components().membership):
            if len(comp) <= self.config.max_community_size:
                out.append(self.node(start[comp], -1, top, comp))
                continue
            if self.budget.expired():
                raise CommunityBudgetExceeded(
                    f"the time budget ({self.budget.seconds:g} s) ran out before the top "
                    "level of the communities was complete")
            sub = top.induced_subgraph(comp.tolist())
            for part in split(sub, self.config, self.stats, None if self.guide is None else
                              _guided(sub, self.names(start[comp]), self.guide, self.config,
                                      self.stats)):
                out.append(self.node(start[comp[part]], -1, sub, part))
        return out

    def grow(self, start: np.ndarray) -> None:
        """Every depth the budget allows, breadth-first."""
        self.nodes = self.roots(start)
        self.stats.depths = 1
        frontier = [i for i, n in enumerate(self.nodes) if n.sub is not None]
        while frontier:
            new: list[_Node] = []
            for i in frontier:
                if self.budget.expired():
                    self.stats.complete = False
                    self.stats.reason = (
                        f"the time budget ({self.budget.seconds:g} s) ran out at depth "
                        f"{self.stats.depths}: the {self.stats.depths} depths built are kept "
                        "and their deepest communities may be above the size cap")
                    for j in frontier:
                        self.nodes[j].sub = None
                    return
                parent = self.nodes[i]
                for local in self.parts(parent.sub, parent.members):
                    new.append(self.node(parent.members[local], i, parent.sub, local))
            for i in frontier:
                self.nodes[i].sub = None
            first = len(self.nodes)
            self.nodes.extend(new)
            self.stats.depths += 1
            frontier = [first + j for j, n in enumerate(new) if n.sub is not None]

    def communities(self, out: dict[str, Community]) -> None:
        """The nodes as communities (reused ones with their old subtrees) into ``out``."""
        nodes = self.nodes
        names = [tuple(self.names(n.members)) for n in nodes]
        ids = [n.reused or _sorted_id(m) for n, m in zip(nodes, names)]
        height = [0] * len(nodes)
        kids: list[list[int]] = [[] for _ in nodes]
        for i in range(len(nodes) - 1, -1, -1):   # children follow their parents
            n = nodes[i]
            if n.reused is not None:
                assert self.guide is not None
                _copy_subtree(self.guide.old, n.reused, out)
                height[i] = out[n.reused].height
            if n.parent >= 0:
                kids[n.parent].append(i)
                height[n.parent] = max(height[n.parent], height[i] + 1)
        for i, n in enumerate(nodes):
            parent = ids[n.parent] if n.parent >= 0 else None
            if n.reused is not None:
                c = out[n.reused]
                if c.parent != parent:
                    out[n.reused] = replace(c, parent=parent)
                continue
            sizes = {ids[k]: len(nodes[k].members) for k in kids[i]}
            children = tuple(sorted(sizes, key=lambda c: (-sizes[c], c)))
            out[ids[i]] = Community(ids[i], names[i], parent, children, height[i])


def _cluster(eg: EntityGraph, start: np.ndarray, config: CommunityConfig,
             out: dict[str, Community], budget: Budget | None, stats: CommunityStats,
             guide: _Guide | None = None) -> None:
    forest = _Forest(eg, config, budget or Budget(), stats, guide)
    if len(start):
        forest.grow(start)
    forest.communities(out)


# --- build and update ---------------------------------------------------------------------------

def _arrays(graph: GraphData, config: CommunityConfig, edges: Edges | None) -> EdgeArrays:
    if edges is None:
        return edge_arrays(graph, config)
    return EdgeArrays.of(sorted(graph.entities), edges)


def build_communities(graph: GraphData, config: CommunityConfig = CommunityConfig(),
                      edges: Edges | None = None, *, budget: Budget | None = None
                      ) -> CommunityHierarchy:
    """The community hierarchy of ``graph`` from scratch (``edges``: a precomputed
    :func:`entity_edges` of the same graph and config). Raises
    :class:`CommunityBudgetExceeded` when ``budget`` runs out before the roots are done."""
    eg = EntityGraph(_arrays(graph, config, edges))
    out: dict[str, Community] = {}
    stats = CommunityStats()
    _cluster(eg, np.arange(len(eg.keys)), config, out, budget, stats)
    return CommunityHierarchy(communities=out, identity=config.identity, stats=stats)
def update_communities(old: CommunityHierarchy, old_graph: GraphData, new_graph: GraphData,
                       config: CommunityConfig = CommunityConfig(), *,
                       old_edges: Edges | None = None, new_edges: Edges | None = None,
                       budget: Budget | None = None,
                       ) -> tuple[CommunityHierarchy, CommunityUpdate]:
    """The hierarchy of ``new_graph`` re-clustering only what changed since ``old_graph``
    (module doc), and a report. A hierarchy of another config or algorithm, or one that
    does not cover ``old_graph``'s entities, is rebuilt in full. ``budget`` as in
    :func:`build_communities`."""
    t0 = time.perf_counter()
    new_edges = entity_edges(new_graph, config) if new_edges is None else new_edges
    report = CommunityUpdate(mode="incremental")
    if old.identity != config.identity or old.entities() != set(old_graph.entities):
        hier = build_communities(new_graph, config, new_edges, budget=budget)
        report = _diff(old, hier, CommunityUpdate(
            mode="full", entities_reclustered=len(new_graph.entities),
            reason="config changed" if old.identity != config.identity
            else "hierarchy does not match the old graph"))
        report.seconds = time.perf_counter() - t0
        return hier, report
    old_edges = entity_edges(old_graph, config) if old_edges is None else old_edges
    old_keys, new_keys = set(old_graph.entities), set(new_graph.entities)
    touched = (old_keys ^ new_keys)
    touched.update(drifted(old_edges, new_edges, old_edges.keys() | new_edges.keys(), config))
    report.entities_touched = len(touched)
    report.entities_added, report.entities_removed = (len(new_keys - old_keys),
                                                      len(old_keys - new_keys))
    hier = recluster(old, touched, new_graph.entities, lambda keys: _among(new_edges, keys),
                     config, budget=budget, report=report)
    report.seconds = time.perf_counter() - t0
    return hier, report


def drifted(old_edges: Mapping[tuple[str, str], float], new_edges: Mapping[tuple[str, str], float],
            pairs: Iterable[tuple[str, str]], config: CommunityConfig) -> set[str]:
    """The ends of those ``pairs`` whose weight moved by more than the drift tolerance."""
    out: set[str] = set()
    for pair in pairs:
        a, b = old_edges.get(pair, 0.0), new_edges.get(pair, 0.0)
        if abs(a - b) > config.drift_tolerance * max(a, b):
            out.update(pair)
    return out


def recluster(old: CommunityHierarchy, touched: set[str], present: Collection[str],
              among: Callable[[list[str]], EdgeArrays], config: CommunityConfig, *,
              budget: Budget | None = None, report: CommunityUpdate) -> CommunityHierarchy:
    """The hierarchy after a change that ``touched`` these entities (added, removed, or with
    an incident edge drifted): the old roots holding none of them stay with their subtrees;
    the members of the others still ``present`` (the new graph's entities) and the new
    entities are clustered again, guided by the old hierarchy. ``among(keys)``: the edges
    among the sorted ``keys``. Its cost follows the roots touched, not the hierarchy;
    ``report`` is filled in (``replaced``, ``placed``: the ids it changed)."""
    leaf_of = old.leaf_of()
    roots: dict[str, Community] = {}
    for k in touched:
        leaf = leaf_of.get(k)
        if leaf is not None:
            root = old.communities[old.lineage(leaf)[-1]]
            roots[root.id] = root
    replaced: dict[str, Community] = {}
    for rid in roots:
        _copy_subtree(old, rid, replaced)
    rest = sorted({m for r in roots.values() for m in r.members if m in present}
                  | {k for k in touched if k in present and k not in leaf_of})
    report.roots_kept = sum(1 for c in old.communities.values() if c.parent is None) - len(roots)
    report.entities_reclustered = len(rest)
    guide = _Guide.of(old, touched, replaced.values())
    report.untouched = len(old.communities) - len(replaced) + len(guide.clean)
    eg = EntityGraph(among(rest), total=len(present))
    stats = CommunityStats()
    placed: dict[str, Community] = {}
    _cluster(eg, np.arange(len(rest), dtype=np.int64), config, placed, budget, stats, guide)
    communities = dict(old.communities)
    for cid in replaced:
        del communities[cid]
    communities.update(placed)
    new_leaf_of = dict(leaf_of)
    for c in replaced.values():
        if not c.children:
            for m in c.members:
                del new_leaf_of[m]
    for c in placed.values():
        if not c.children:
            new_leaf_of.update(dict.fromkeys(c.members, c.id))
    retired = replaced.keys() - placed.keys()
    report.kept, report.added, report.retired = (len(old.communities) - len(retired),
                                                 len(placed.keys() - replaced.keys()),
                                                 len(retired))
    report.replaced, report.placed = set(replaced), set(placed)
    return CommunityHierarchy(communities=communities, identity=config.identity, stats=stats,
                              _leaf_of=new_leaf_of)


def _among(edges: Edges, keys: list[str]) -> EdgeArrays:
    """The edges among ``keys`` (sorted) as arrays."""
    inside = set(keys)
    return EdgeArrays.of(keys, {p: w for p, w in edges.items()
                                if p[0] in inside and p[1] in inside})


def _copy_subtree(old: CommunityHierarchy, cid: str, out: dict[str, Community]) -> None:
    stack = [cid]
    while stack:
        c = old.communities[stack.pop()]
        out[c.id] = c
        stack.extend(c.children)


def _diff(old: CommunityHierarchy, new: CommunityHierarchy,
          report: CommunityUpdate) -> CommunityUpdate:
    before, after = set(old.communities), set(new.communities)
    report.kept, report.added, report.retired = (len(before & after), len(after - before),
                                                 len(before - after))
    return report


# --- quality ------------------------------------------------------------------------------------

def modularity(hierarchy: CommunityHierarchy, graph: GraphData, level: int,
               config: CommunityConfig = CommunityConfig(), edges: Edges | None = None) -> float:
    """Weighted modularity (resolution 1) of the partition at ``level`` on the entity graph
    (NaN when the graph has no edge)."""
    edges = entity_edges(graph, config) if edges is None else edges
    nodes = sorted(graph.entities)
    if not edges:
        return math.nan
    g = EntityGraph.of(nodes, edges).graph
    member = hierarchy.membership(level)
    labels: dict[str, int] = {}
    return float(g.modularity([labels.setdefault(member[k], len(labels)) for k in nodes],
                              weights="weight"))
