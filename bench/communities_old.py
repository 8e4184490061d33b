"""FROZEN copy of graph/communities.py before issue 22 part 4a (commit 02ef80d), for bench/community_scale.py.

The old builder (leidenalg per split, Python subgraph rebuilds, pure-Python entity_edges),
kept only so the scale bench can run it side by side with the new one. Do not edit.

Hierarchical Leiden communities over the entity graph, with stable ids and incremental updates.

**The entity graph** (:func:`entity_edges`) joins two entities by the sum of

* their co-occurrence relation (normalised PMI, :attr:`Relation.weight`) x ``relation``;
* their synonym edge (name cosine) x ``synonym``;
* passages: an entity mentioned in a passage *about* another entity (the document's
  title entity) gets an edge to it, mention weight x ``about``; entities mentioned in
  one passage are joined by ``comention / (n - 1)`` each (a passage with ``n`` entities
  gives every entity at most ``comention`` in total, the clique expansion of a hyperedge).

Relations alone leave entities isolated (an entity alone in its sentence has no
co-occurrence pair: 27 % of SciFact's); the passage edges attach them to their passage's
neighbourhood (1.3 % left isolated; ``bench/communities.py``, ``edge_variants``). Dates and numbers link many
unrelated passages, so their edges are scaled by ``date`` (as in :mod:`.ppr`).

**The hierarchy** is built top-down as GraphRAG's: every connected component that fits
``max_community_size`` is one community; a larger one is partitioned by Leiden
(``leidenalg``, RB configuration / modularity, seeded) and every community still larger than
the cap is re-partitioned on its own subgraph, recursively. Leiden may return its input as
one community (a star, a clique); the cap is then enforced by Leiden again with
``max_comm_size`` set to the cap (its communities all fit, so they are leaves; a higher
resolution instead shatters small subgraphs into singletons), and as a last resort by
cutting a breadth-first order into chunks of the cap. Every split has at least two parts, so the recursion ends and no community equals its parent.
Each subgraph is clustered with its vertices in key order and the same seed, so the result
of a component depends only on that component: same input, same output.

**Levels** count from the leaves (RCP: ``level 0`` is the finest). ``height`` is 0 for a
leaf and ``1 + max(children)`` otherwise; the partition at level ``l`` is, on every
root-to-leaf path, the first community of height ``<= l``. A community thus appears at
levels ``height .. height(parent) - 1`` (a root up to the top level), and every level is a
complete partition of the entities: isolated entities are singleton communities and a
small component is one community, present at every level.

**Ids** are ``community:`` + a hash of the sorted members, so a community whose member set
does not change keeps its id across rebuilds and updates.

**Incremental update** (:func:`update_communities`): an entity is *touched* when it was
added or removed or an incident edge was added, removed or re-weighted beyond
``drift_tolerance`` (relative). A root community with no touched member is kept with its
whole subtree, unchanged. The entities of every other root, and new ones, are clustered
top-down as in a build, except that each node set is split by Leiden on its *units*: the
largest untouched old communities lying wholly inside it (each one node, its internal
weight as a self-loop) and every other entity alone, warm-started (``initial_membership``)
from where they were — each unit in its first old community, root first, that does not
hold the whole set. An untouched old community thus moves as a block, and a part equal to
an untouched old community is reused with its subtree (only its ``parent`` may change).
Blocks are re-chosen for every set split, so the tree keeps its depth. A new or re-linked
entity always touches its neighbours, so it is never cut off from the community it joins.
Relation weights drift a little on every update (PMI counts all sentences), which is why
small drifts do not count; a full rebuild (:func:`build_communities`) gives the exact
hierarchy.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rcp_agentic.errors import InvalidParams
from rcp_agentic.graph.model import GraphData

__all__ = ["Community", "CommunityConfig", "CommunityHierarchy", "CommunityUpdate",
           "build_communities", "community_id", "entity_edges", "modularity",
           "update_communities"]

FORMAT = "rcp-agentic/communities/1"
LOW_KINDS = frozenset({"date", "number"})
Edges = dict[tuple[str, str], float]
CAP_ENFORCEMENT = 1000.0  # strict: at 1 leidenalg still returned 13 nodes for a cap of 5


@dataclass(frozen=True)
class CommunityConfig:
    """Settings of the community hierarchy (its ``identity`` is part of the hierarchy's)."""

    max_community_size: int = 10      # GraphRAG's default cap of a leaf community
    resolution: float = 1.0           # Leiden RB configuration resolution (1.0 = modularity)
    seed: int = 42
    iterations: int = 2               # Leiden passes (-1: until stable; measured 6x slower
                                      # for +0.005 top-level modularity on SciFact)
    relation: float = 1.0             # edge weights (module doc)
    synonym: float = 1.0
    about: float = 1.0
    comention: float = 1.0
    date: float = 0.1                 # scale of edges touching dates and numbers
    drift_tolerance: float = 0.25     # relative edge-weight change an update ignores

    def __post_init__(self) -> None:
        if self.max_community_size < 1:
            raise InvalidParams("max_community_size must be >= 1", field="max_community_size")
        if not self.resolution > 0:
            raise InvalidParams("resolution must be > 0", field="resolution")
        for name in ("relation", "synonym", "about", "comention", "date", "drift_tolerance"):
            if not getattr(self, name) >= 0:
                raise InvalidParams(f"{name} must be >= 0", field=name)

    @property
    def identity(self) -> str:
        return (f"communities/1;max={self.max_community_size};res={self.resolution};"
                f"seed={self.seed};it={self.iterations};rel={self.relation};"
                f"syn={self.synonym};about={self.about};co={self.comention};date={self.date}")


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


@dataclass
class CommunityHierarchy:
    """All communities of one graph, as a forest (roots = the coarsest partition)."""

    communities: dict[str, Community] = field(default_factory=dict)
    identity: str = CommunityConfig().identity

    @property
    def top_level(self) -> int:
        return max((c.height for c in self.roots()), default=0)

    def roots(self) -> list[Community]:
        return [c for c in self.communities.values() if c.parent is None]

    def levels(self, cid: str) -> range:
        """The levels community ``cid`` appears at (lowest .. highest)."""
        c = self.communities[cid]
        high = self.top_level if c.parent is None else self.communities[c.parent].height - 1
        return range(c.height, high + 1)

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


# --- the entity graph -------------------------------------------------------------------------

def entity_edges(graph: GraphData, config: CommunityConfig = CommunityConfig()) -> Edges:
    """The weighted entity-entity edges (module doc), keyed ``(a, b)`` with ``a < b``."""
    ents = graph.entities
    edges: dict[tuple[str, str], float] = defaultdict(float)

    def scale(k: str) -> float:
        return config.date if ents[k].kind in LOW_KINDS else 1.0

    def add(a: str, b: str, w: float) -> None:
        if a != b and w > 0:
            edges[(a, b) if a < b else (b, a)] += w * min(scale(a), scale(b))

    if config.relation > 0:
        for r in graph.relations:
            if r.subject in ents and r.object in ents:
                add(r.subject, r.object, config.relation * max(r.weight, 0.0))
    if config.synonym > 0:
        for s in graph.synonyms:
            if s.a in ents and s.b in ents:
                add(s.a, s.b, config.synonym * s.similarity)
    if config.about > 0 or config.comention > 0:
        in_chunk: dict[str, list[tuple[str, float]]] = defaultdict(list)
        about_of: dict[str, list[str]] = defaultdict(list)
        for k in sorted(ents):
            for ck, mw in ents[k].mentions.items():
                in_chunk[ck].append((k, mw))
            for ck in ents[k].about:
                about_of[ck].append(k)
        for ck in sorted(in_chunk):
            here = in_chunk[ck]
            if config.about > 0:
                for t in about_of.get(ck, ()):
                    for k, mw in here:
                        add(t, k, config.about * mw)
            n = len(here)
            if config.comention > 0 and n > 1:
                w = config.comention / (n - 1)
                for i, (a, _) in enumerate(here):
                    for b, _ in here[i + 1:]:
                        add(a, b, w)
    return {k: round(v, 9) for k, v in sorted(edges.items())}


def _adjacency(edges: Edges) -> dict[str, dict[str, float]]:
    adj: dict[str, dict[str, float]] = defaultdict(dict)
    for (a, b), w in edges.items():
        adj[a][b] = w
        adj[b][a] = w
    return adj


def _igraph(nodes: Sequence[str], adj: Mapping[str, Mapping[str, float]]) -> Any:
    """The subgraph induced by ``nodes`` (kept in the given order)."""
    import igraph as ig

    index = {k: i for i, k in enumerate(nodes)}
    pairs: list[tuple[int, int]] = []
    weights: list[float] = []
    for i, a in enumerate(nodes):
        for b, w in adj.get(a, {}).items():
            j = index.get(b)
            if j is not None and i < j:
                pairs.append((i, j))
                weights.append(w)
    g = ig.Graph(n=len(nodes), edges=pairs)
    g.es["weight"] = weights
    return g


def _components(nodes: Sequence[str], adj: Mapping[str, Mapping[str, float]]) -> list[list[str]]:
    """Connected components of the subgraph induced by ``nodes``, each sorted."""
    inside = set(nodes)
    seen: set[str] = set()
    out = []
    for start in nodes:
        if start in seen:
            continue
        seen.add(start)
        comp = [start]
        queue = deque([start])
        while queue:
            for b in adj.get(queue.popleft(), {}):
                if b in inside and b not in seen:
                    seen.add(b)
                    comp.append(b)
                    queue.append(b)
        out.append(sorted(comp))
    return out


# --- Leiden and the size cap -----------------------------------------------------------------

def _leiden(g: Any, config: CommunityConfig, initial: list[int] | None = None,
            max_size: int = 0) -> list[int]:
    """leidenalg's ``find_partition`` (RB configuration, seeded)."""
    import leidenalg

    part = leidenalg.RBConfigurationVertexPartition(
        g, initial_membership=initial, weights="weight",
        resolution_parameter=config.resolution)
    opt = leidenalg.Optimiser()
    if max_size:    # leidenalg >= 0.12 enforces the cap only with an enforcement > 0
        opt.max_comm_size = max_size
        opt.community_constraint_enforcement = CAP_ENFORCEMENT
    opt.set_rng_seed(config.seed)
    opt.optimise_partition(part, config.iterations)
    return list(part.membership)


def _groups(nodes: Sequence[str], labels: Sequence[int]) -> list[list[str]]:
    by: dict[int, list[str]] = defaultdict(list)
    for k, lab in zip(nodes, labels):
        by[lab].append(k)
    return sorted((sorted(v) for v in by.values()), key=lambda v: (-len(v), v[0]))


def _chunks(nodes: Sequence[str], adj: Mapping[str, Mapping[str, float]],
            size: int) -> list[list[str]]:
    """Last resort: a breadth-first order from the strongest node, cut into ``size`` pieces."""
    inside = set(nodes)
    strength = {k: sum(w for b, w in adj.get(k, {}).items() if b in inside) for k in nodes}
    order: list[str] = []
    seen: set[str] = set()
    for start in sorted(nodes, key=lambda k: (-strength[k], k)):
        if start in seen:
            continue
        seen.add(start)
        queue = deque([start])
        while queue:
            a = queue.popleft()
            order.append(a)
            for b in sorted((b for b in adj.get(a, {}) if b in inside and b not in seen),
                            key=lambda b: (-adj[a][b], b)):
                seen.add(b)
                queue.append(b)
    return [sorted(order[i:i + size]) for i in range(0, len(order), size)]


@dataclass
class _Guide:
    """The old hierarchy an update follows: where each entity was, and what is untouched."""

    old: CommunityHierarchy
    clean: set[str]                   # ids of old communities with no touched member
    path: dict[str, list[str]]        # entity -> its old communities, root first

    @classmethod
    def of(cls, old: CommunityHierarchy, touched: set[str]) -> _Guide:
        path = {m: lineage for c in old.communities.values() if not c.children
                for lineage in [_lineage(old, c.id)] for m in c.members}
        clean = {c.id for c in old.communities.values() if touched.isdisjoint(c.members)}
        return cls(old, clean, path)

    def units(self, nodes: Sequence[str]) -> tuple[list[list[str]], list[int]]:
        """How to split ``nodes`` on an update: its units — the largest untouched old
        communities lying wholly inside it (smaller than it), and every other entity alone —
        and Leiden's start, each unit labelled by its entities' first old community (root
        first) that does not hold all of ``nodes`` (a new entity alone)."""
        count: dict[str, int] = defaultdict(int)
        for v in nodes:
            for c in self.path.get(v, ()):
                count[c] += 1
        n = len(nodes)
        comms = self.old.communities
        unit_of: dict[str, str] = {}
        label_of: dict[str, str] = {}
        for v in nodes:
            path = self.path.get(v, ())
            unit_of[v] = next((c for c in path if c in self.clean and count[c] < n
                               and count[c] == comms[c].size), "\0" + v)
            label_of[v] = next((c for c in path if count[c] < n), "\0" + v)
        members: dict[str, list[str]] = defaultdict(list)
        for v in nodes:
            members[unit_of[v]].append(v)
        units = list(members.values())
        labels: dict[str, int] = {}
        initial = []
        for group in units:
            first = {label_of[v] for v in group}
            key = label_of[group[0]] if len(first) == 1 else unit_of[group[0]]
            initial.append(labels.setdefault(key, len(labels)))
        return units, initial


def _lineage(old: CommunityHierarchy, cid: str) -> list[str]:
    out = [cid]
    while (p := old.communities[out[-1]].parent) is not None:
        out.append(p)
    return out[::-1]


def _split(nodes: list[str], adj: Mapping[str, Mapping[str, float]], config: CommunityConfig,
           guide: _Guide | None) -> list[list[str]]:
    """Partition a connected node set larger than the cap into at least two parts."""
    parts: list[list[str]] = []
    if guide is not None:
        units, initial = guide.units(nodes)
        if len(units) > 1:
            by: dict[int, list[str]] = defaultdict(list)
            for group, label in zip(units, _leiden(_unit_igraph(units, adj), config, initial)):
                by[label].extend(group)
            parts = sorted((sorted(v) for v in by.values()), key=lambda v: (-len(v), v[0]))
    if len(parts) < 2:
        g = _igraph(nodes, adj)
        parts = _groups(nodes, _leiden(g, config))
    if len(parts) < 2:
        parts = _groups(nodes, _leiden(g, config, max_size=config.max_community_size))
    if len(parts) < 2:
        parts = _chunks(nodes, adj, config.max_community_size)
    return parts


def _unit_igraph(units: Sequence[Sequence[str]], adj: Mapping[str, Mapping[str, float]]) -> Any:
    """The graph of ``units`` (entity groups): summed weights between them, and each group's
    internal weight as its self-loop (so its strength is its entities' total)."""
    import igraph as ig

    unit = {v: i for i, group in enumerate(units) for v in group}
    weight: dict[tuple[int, int], float] = defaultdict(float)
    for v, i in unit.items():
        for b, w in adj.get(v, {}).items():
            j = unit.get(b)
            if j is not None and v < b:
                weight[(i, j) if i <= j else (j, i)] += w
    pairs = sorted(weight)
    g = ig.Graph(n=len(units), edges=pairs)
    g.es["weight"] = [weight[p] for p in pairs]
    return g


def _grow(nodes: list[str], adj: Mapping[str, Mapping[str, float]], config: CommunityConfig,
          out: dict[str, Community], parent: str | None, guide: _Guide | None) -> str:
    """Add the community of ``nodes`` and its subtree to ``out``; return its id. On an
    update, an untouched old community with the same members is reused with its subtree."""
    cid = community_id(nodes)
    if guide is not None and cid in guide.clean:
        _copy_subtree(guide.old, cid, out)
        c = out[cid]
        if c.parent != parent:
            out[cid] = replace(c, parent=parent)
        return cid
    children: list[str] = []
    if len(nodes) > config.max_community_size:
        for comp in _components(nodes, adj):
            parts = [comp] if len(comp) < len(nodes) else _split(comp, adj, config, guide)
            children += [_grow(p, adj, config, out, cid, guide) for p in parts]
    height = 1 + max(out[c].height for c in children) if children else 0
    kids = tuple(sorted(children, key=lambda c: (-out[c].size, c)))
    out[cid] = Community(cid, tuple(nodes), parent, kids, height)
    return cid


def _roots(nodes: list[str], adj: Mapping[str, Mapping[str, float]], config: CommunityConfig,
           out: dict[str, Community], guide: _Guide | None = None) -> None:
    """Cluster ``nodes`` (sorted) into root communities and their subtrees: a component
    that fits is one root; a larger one is split by Leiden into roots."""
    for comp in _components(nodes, adj):
        if len(comp) <= config.max_community_size:
            _grow(comp, adj, config, out, None, guide)
            continue
        for part in _split(comp, adj, config, guide):
            _grow(part, adj, config, out, None, guide)


# --- build and update ---------------------------------------------------------------------------

def build_communities(graph: GraphData, config: CommunityConfig = CommunityConfig(),
                      edges: Edges | None = None) -> CommunityHierarchy:
    """The community hierarchy of ``graph`` from scratch (``edges``: a precomputed
    :func:`entity_edges` of the same graph and config)."""
    edges = entity_edges(graph, config) if edges is None else edges
    out: dict[str, Community] = {}
    _roots(sorted(graph.entities), _adjacency(edges), config, out)
    return CommunityHierarchy(communities=out, identity=config.identity)


def update_communities(old: CommunityHierarchy, old_graph: GraphData, new_graph: GraphData,
                       config: CommunityConfig = CommunityConfig(), *,
                       old_edges: Edges | None = None, new_edges: Edges | None = None,
                       ) -> tuple[CommunityHierarchy, CommunityUpdate]:
    """The hierarchy of ``new_graph`` re-clustering only what changed since ``old_graph``
    (module doc), and a report. A hierarchy of another config, or one that does not cover
    ``old_graph``'s entities, is rebuilt in full."""
    t0 = time.perf_counter()
    new_edges = entity_edges(new_graph, config) if new_edges is None else new_edges
    report = CommunityUpdate(mode="incremental")
    if old.identity != config.identity or old.entities() != set(old_graph.entities):
        hier = build_communities(new_graph, config, new_edges)
        report = _diff(old, hier, CommunityUpdate(
            mode="full", entities_reclustered=len(new_graph.entities),
            reason="config changed" if old.identity != config.identity
            else "hierarchy does not match the old graph"))
        report.seconds = time.perf_counter() - t0
        return hier, report
    old_edges = entity_edges(old_graph, config) if old_edges is None else old_edges
    old_keys, new_keys = set(old_graph.entities), set(new_graph.entities)
    touched = (old_keys ^ new_keys)
    for pair in old_edges.keys() | new_edges.keys():
        a, b = old_edges.get(pair, 0.0), new_edges.get(pair, 0.0)
        if abs(a - b) > config.drift_tolerance * max(a, b):
            touched.update(pair)
    report.entities_touched = len(touched)
    report.entities_added, report.entities_removed = (len(new_keys - old_keys),
                                                      len(old_keys - new_keys))

    out: dict[str, Community] = {}
    kept_members: set[str] = set()
    for root in old.roots():
        if touched.isdisjoint(root.members):
            _copy_subtree(old, root.id, out)
            kept_members.update(root.members)
            report.roots_kept += 1
    rest = sorted(new_keys - kept_members)
    report.entities_reclustered = len(rest)
    guide = _Guide.of(old, touched)
    report.untouched = len(guide.clean)
    _roots(rest, _adjacency(new_edges), config, out, guide)
    hier = CommunityHierarchy(communities=out, identity=config.identity)
    report = _diff(old, hier, report)
    report.seconds = time.perf_counter() - t0
    return hier, report


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
    g = _igraph(nodes, _adjacency(edges))
    member = hierarchy.membership(level)
    labels: dict[str, int] = {}
    return float(g.modularity([labels.setdefault(member[k], len(labels)) for k in nodes],
                              weights="weight"))
