"""Build and incrementally update a RAPTOR tree of summary nodes over leaf chunks.

:func:`build_tree` clusters the leaves (level 0), summarises each cluster into a
level-1 node, embeds the summaries and repeats on the nodes until a level is
small enough, stops shrinking or ``max_levels`` is reached. :func:`update_tree`
applies added and removed leaves without a rebuild: new leaves join their
nearest level-1 node, touched nodes are re-summarised up to the top, emptied
nodes retire. Node ids depend only on the level and the covered leaves, so they
survive rebuilds that do not change a node's leaves. No storage here: the engine
adapter reads leaves and writes the nodes as units.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import numpy as np
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

from ..text import CountTokens
from .cluster import REG_COVAR, cluster, reduce
from .summarize import Passage, Summary

log = logging.getLogger(__name__)

Embed = Callable[[list[str]], np.ndarray]


class Summarizer(Protocol):
    """What the tree needs from a summariser (see :mod:`.summarize`)."""

    identity: str

    def summarize_many(self, jobs: list[tuple[list[Passage], int]]) -> list[Summary]: ...


@dataclass(frozen=True)
class TreeConfig:
    """Tree-building parameters; the defaults follow the RAPTOR paper where it gives one."""

    seed: int = 0
    summary_tokens: int = 200  # budget of one node's summary
    cluster_tokens: int = 3000  # a cluster whose passages exceed this is split
    threshold: float = 0.1  # soft-membership posterior threshold
    max_clusters: int = 50
    reduce_dim: int = 10
    top_size: int = 8  # stop when a level has at most this many nodes
    max_levels: int = 5
    min_shrink: float = 0.8  # stop when a level would keep more than this share of the items


@dataclass(frozen=True, eq=False)
class Leaf:
    """A level-0 item: a chunk with its embedding, passage and token count."""

    uid: str
    vector: np.ndarray
    passage: Passage
    tokens: int


@dataclass(eq=False)
class Node:
    """A tree node at ``level`` >= 1: a summary of its children, covering ``leaves``."""

    uid: str
    level: int
    children: tuple[str, ...]
    leaves: frozenset[str]
    summary: Summary
    tokens: int
    vector: np.ndarray | None = None

    @property
    def passage(self) -> Passage:
        """The node as input to its parent's summary."""
        return Passage(self.uid, self.summary.text, self.summary.sentences)


@dataclass
class TreeDelta:
    """What an update changes: nodes to write (new or rewritten) and node uids to delete."""

    added: list[Node] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)


def node_id(level: int, leaves: Iterable[str]) -> str:
    """``tree:<level>:<16 hex>`` from the sorted leaf uids: stable while the leaves are."""
    digest = hashlib.sha256("\n".join(sorted(leaves)).encode("utf-8")).hexdigest()
    return f"tree:{level}:{digest[:16]}"


@dataclass(frozen=True, eq=False)
class _Item:
    """A clusterable item of one level: a leaf or a node."""

    uid: str
    vector: np.ndarray
    passage: Passage
    tokens: int
    leaves: frozenset[str]


def _split(indices: list[int], vectors: np.ndarray, tokens: np.ndarray, config: TreeConfig
           ) -> list[list[int]]:
    """``indices`` as parts of at most ``cluster_tokens`` tokens (a single item may exceed it).

    An over-long part is divided by a hard Gaussian mixture (on reduced vectors)
    into ``ceil(tokens / cap)`` components, at least two; when the mixture leaves
    it whole, it is cut into halves in order. Parts are split again until they
    fit; every part recursed on is smaller, so this ends.
    """
    total = int(tokens[indices].sum())
    if total <= config.cluster_tokens or len(indices) < 2:
        return [indices]
    capped = int(np.minimum(tokens[indices], config.cluster_tokens).sum())
    k = min(len(indices), config.max_clusters, max(2, math.ceil(capped / config.cluster_tokens)))
    with threadpool_limits(limits=1):  # small problems: thread pools only add contention
        reduced = reduce(vectors[indices], min(config.reduce_dim, len(indices) - 1),
                         n_neighbors=10, seed=config.seed)
        labels = GaussianMixture(n_components=k, random_state=config.seed,
                                 reg_covar=REG_COVAR).fit_predict(reduced)
    parts = [np.flatnonzero(labels == c).tolist() for c in np.unique(labels)]
    if len(parts) < 2:
        half = int(np.searchsorted(np.cumsum(tokens[indices]), total / 2)) + 1
        half = min(max(half, 1), len(indices) - 1)
        parts = [list(range(half)), list(range(half, len(indices)))]
    out: list[list[int]] = []
    for part in parts:
        out.extend(_split([indices[i] for i in part], vectors, tokens, config))
    return out


def _group(items: list[_Item], config: TreeConfig) -> list[list[int]]:
    """Clusters of ``items`` split to the token cap, one per distinct leaf set, in a stable order.

    Clusters covering the same leaves merge (their members united).
    """
    vectors = np.stack([it.vector for it in items])
    tokens = np.array([it.tokens for it in items])
    clusters = cluster(vectors, seed=config.seed, threshold=config.threshold,
                       max_clusters=config.max_clusters, reduce_dim=config.reduce_dim)
    by_leaves: dict[frozenset[str], set[int]] = {}
    for members in clusters:
        for part in _split(members, vectors, tokens, config):
            leaves = frozenset().union(*(items[i].leaves for i in part))
            by_leaves.setdefault(leaves, set()).update(part)
    return sorted((sorted(m) for m in by_leaves.values()), key=lambda m: (m[0], len(m), m))


def _make_nodes(level: int, groups: list[list[_Item]], *, embed: Embed, summarizer: Summarizer,
                config: TreeConfig, count_tokens: CountTokens) -> list[Node]:
    """One node per group: summaries in one batch, their embeddings in one batch."""
    summaries = summarizer.summarize_many([([it.passage for it in g], config.summary_tokens)
                                           for g in groups])
    vectors = np.asarray(embed([s.text for s in summaries]), dtype=np.float32)
    nodes = []
    for group, summary, vector in zip(groups, summaries, vectors):
        leaves = frozenset().union(*(it.leaves for it in group))
        nodes.append(Node(node_id(level, leaves), level, tuple(it.uid for it in group), leaves,
                          summary, count_tokens(summary.text), vector))
    return nodes


def _node_item(node: Node) -> _Item:
    assert node.vector is not None
    return _Item(node.uid, node.vector, node.passage, node.tokens, node.leaves)


def build_tree(leaves: list[Leaf], *, embed: Embed, summarizer: Summarizer, config: TreeConfig,
               count_tokens: CountTokens) -> list[Node]:
    """All nodes of a new tree over ``leaves``, level by level (level 1 first).

    Level 1 is built whenever there are two leaves or more; a further level only
    while the previous one has more than ``top_size`` nodes, ``max_levels`` is not
    reached and clustering still shrinks the level (at most ``min_shrink`` of its
    items). Deterministic for ``config.seed``.
    """
    items = [_Item(lf.uid, np.asarray(lf.vector, dtype=np.float32), lf.passage, lf.tokens,
                   frozenset((lf.uid,))) for lf in leaves]
    nodes: list[Node] = []
    for level in range(1, config.max_levels + 1):
        if len(items) < 2 or (level > 1 and len(items) <= config.top_size):
            break
        groups = _group(items, config)
        if len(items) > 2 and len(groups) > config.min_shrink * len(items):
            log.info("raptor level %d: %d clusters of %d items do not shrink; stop",
                     level, len(groups), len(items))
            break
        made = _make_nodes(level, [[items[i] for i in g] for g in groups], embed=embed,
                           summarizer=summarizer, config=config, count_tokens=count_tokens)
        log.info("raptor level %d: %d items -> %d nodes", level, len(items), len(made))
        nodes.extend(made)
        items = [_node_item(n) for n in made]
    return nodes


class TreeShape:
    """A tree's nodes with the links an update walks: nodes by uid and by level, the parents
    of every child (leaf or node) and, once computed, the centroid of each level-1 node.

    :func:`update_tree` reads it and never changes it (it only fills the centroid cache), so
    a caller that follows a store keeps one between updates and applies each committed
    change (:meth:`apply`): an update then walks only the nodes it touches.
    """

    def __init__(self, nodes: Iterable[Node] = ()) -> None:
        self.nodes: dict[str, Node] = {}
        self.parents: dict[str, tuple[str, ...]] = {}   # tuples: a leaf has one or two
        self.by_level: dict[int, set[str]] = {}
        self._centroids: dict[str, np.ndarray] = {}
        self.apply((), nodes)

    @property
    def top(self) -> int:
        """The highest level with a node (0: no node)."""
        return max((level for level, uids in self.by_level.items() if uids), default=0)

    def apply(self, retired: Iterable[str], added: Iterable[Node]) -> None:
        """Take the ``retired`` nodes out, then put the ``added`` ones in (a node of a live
        uid replaces it)."""
        for uid in retired:
            node = self.nodes.pop(uid, None)
            if node is None:
                continue
            self._centroids.pop(uid, None)
            self.by_level[node.level].discard(uid)
            for child in node.children:
                parents = tuple(p for p in self.parents.get(child, ()) if p != uid)
                if parents:
                    self.parents[child] = parents
                else:
                    self.parents.pop(child, None)
        for node in added:
            if node.uid in self.nodes:
                self.apply((node.uid,), ())
            self.nodes[node.uid] = node
            self.by_level.setdefault(node.level, set()).add(node.uid)
            for child in node.children:
                if node.uid not in self.parents.get(child, ()):
                    self.parents[child] = (*self.parents.get(child, ()), node.uid)

    def centroid(self, uid: str, leaf_vectors: Mapping[str, np.ndarray]) -> np.ndarray:
        """The mean vector of the leaves of level-1 node ``uid``, computed once."""
        found = self._centroids.get(uid)
        if found is None:
            found = self._centroids[uid] = _mean(self.nodes[uid].children, leaf_vectors)
        return found


class _Links:
    """The tree while it is updated: a :class:`TreeShape` as given, this update's changes
    over it (nodes written or dropped, children and parents copied on write) and the dirty
    nodes, so an update costs what it touches and the shape stays as it was."""

    def __init__(self, shape: TreeShape) -> None:
        self.shape = shape
        self._nodes: dict[str, Node | None] = {}  # None: dropped
        self._children: dict[str, list[str]] = {}
        self._parents: dict[str, set[str]] = {}
        self.dirty: set[str] = set()    # nodes whose children changed

    def has(self, uid: str) -> bool:
        return self._nodes[uid] is not None if uid in self._nodes else uid in self.shape.nodes

    def node(self, uid: str) -> Node:
        node = self._nodes[uid] if uid in self._nodes else self.shape.nodes[uid]
        if node is None:
            raise KeyError(uid)
        return node

    def uids(self) -> list[str]:
        """Every node now in the tree."""
        return [u for u in {**dict.fromkeys(self.shape.nodes), **self._nodes} if self.has(u)]

    def level1(self) -> list[str]:
        """The level-1 nodes that have children, in uid order."""
        uids = set(self.shape.by_level.get(1, set())) | {
            u for u, n in self._nodes.items() if n is not None and n.level == 1}
        return sorted(u for u in uids if self.has(u) and self.children(u))

    def put(self, node: Node) -> None:
        self._nodes[node.uid] = node
        self._children[node.uid] = list(node.children)

    def drop(self, uid: str) -> None:
        self._nodes[uid] = None

    def children(self, uid: str) -> Sequence[str]:
        return self._children[uid] if uid in self._children else self.node(uid).children

    def own_children(self, uid: str) -> list[str]:
        """The children of ``uid`` as a list this update may change."""
        if uid not in self._children:
            self._children[uid] = list(self.children(uid))
        return self._children[uid]

    def set_children(self, uid: str, children: list[str]) -> None:
        self._children[uid] = children

    def own_parents(self, uid: str) -> set[str]:
        """The parents of ``uid`` as a set this update may change."""
        if uid not in self._parents:
            self._parents[uid] = set(self.shape.parents.get(uid, ()))
        return self._parents[uid]

    def pop_parents(self, uid: str) -> set[str]:
        """The parents of ``uid``, which then has none."""
        parents = self.own_parents(uid)
        self._parents[uid] = set()
        return parents

    def centroid(self, uid: str, leaf_vectors: Mapping[str, np.ndarray]) -> np.ndarray:
        if uid in self._children:
            return _mean(self._children[uid], leaf_vectors)
        return self.shape.centroid(uid, leaf_vectors)

    def retired(self) -> list[str]:
        """The nodes of the shape this update dropped, in uid order."""
        return sorted(u for u, n in self._nodes.items() if n is None and u in self.shape.nodes)


def update_tree(nodes: Iterable[Node] | TreeShape, leaf_vectors: Mapping[str, np.ndarray],
                added: list[Leaf], removed: set[str], *, embed: Embed, summarizer: Summarizer,
                config: TreeConfig, count_tokens: CountTokens,
                passages: Mapping[str, Passage]) -> TreeDelta:
    """The change to ``nodes`` (or to a :class:`TreeShape`, left as it is) after adding and
    removing leaves, without a full rebuild.

    ``leaf_vectors`` gives the vector of every leaf the tree covers (removed ones
    may be missing); ``passages`` the passage of every such leaf (node passages
    come from the nodes' summaries); only those of the leaves the update touches are
    read, so either may read on demand. Removed leaves leave their level-1 nodes;
    each added leaf joins the level-1 node with the nearest centroid (mean of its
    leaf vectors, cosine). Every node whose children changed is re-summarised and
    re-embedded, and so are its ancestors up to the top; its id changes when its
    leaf set does. A level-1 node grown past ``cluster_tokens`` is split; emptied
    nodes retire. With no tree yet, the tree is built from every known leaf.
    """
    shape = nodes if isinstance(nodes, TreeShape) else TreeShape(nodes)
    added = [lf for lf in added if lf.uid not in removed]
    if not shape.nodes:
        return _rebuild(leaf_vectors, added, removed, embed=embed, summarizer=summarizer,
                        config=config, count_tokens=count_tokens, passages=passages)
    links = _Links(shape)
    _detach_removed(links, removed)
    level1 = links.level1()
    if not level1:  # every leaf removed: whatever was added starts a new tree
        fresh = _rebuild(leaf_vectors, added, removed, embed=embed, summarizer=summarizer,
                         config=config, count_tokens=count_tokens, passages=passages)
        fresh_ids = {n.uid for n in fresh.added}
        return TreeDelta(fresh.added, sorted(u for u in links.uids() if u not in fresh_ids))
    if added:
        _attach_added(links, added, level1, leaf_vectors)
    leaf_item = partial(_leaf_item, new_leaf={lf.uid: lf for lf in added},
                        leaf_vectors=leaf_vectors, passages=passages, count_tokens=count_tokens)
    delta = TreeDelta()
    for level in range(1, shape.top + 1):
        todo = sorted(u for u in links.dirty if links.node(u).level == level)
        jobs = _level_jobs(links, level, todo, leaf_item, config)
        made = _make_nodes(level, [g for _, g in jobs], embed=embed, summarizer=summarizer,
                           config=config, count_tokens=count_tokens) if jobs else []
        replaced, produced = _install(links, jobs, made, todo, delta)
        _relink(links, todo, replaced, produced)
    delta.retired = links.retired()
    return delta


def _detach_removed(links: _Links, removed: set[str]) -> None:
    """Take the removed leaves out of their level-1 nodes (which become dirty)."""
    for uid in removed:
        for p in links.pop_parents(uid):
            links.own_children(p).remove(uid)
            links.dirty.add(p)


def _attach_added(links: _Links, added: list[Leaf], level1: list[str],
                  leaf_vectors: Mapping[str, np.ndarray]) -> None:
    """Put each added leaf in the level-1 node of the nearest centroid (cosine)."""
    centroids = _normalize(np.stack([links.centroid(u, leaf_vectors) for u in level1]))
    sims = _normalize(np.stack([lf.vector for lf in added])) @ centroids.T
    for lf, row in zip(added, sims):
        target = level1[int(np.argmax(row))]
        links.own_children(target).append(lf.uid)
        links.own_parents(lf.uid).add(target)
        links.dirty.add(target)


def _mean(leaves: Iterable[str], leaf_vectors: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.asarray(np.mean([leaf_vectors[leaf] for leaf in leaves], axis=0))


def _leaf_item(uid: str, *, new_leaf: Mapping[str, Leaf], leaf_vectors: Mapping[str, np.ndarray],
               passages: Mapping[str, Passage], count_tokens: CountTokens) -> _Item:
    """The item of leaf ``uid``: an added leaf as given, a known one from its vector and
    passage."""
    if uid in new_leaf:
        lf = new_leaf[uid]
        return _Item(uid, np.asarray(lf.vector, np.float32), lf.passage, lf.tokens,
                     frozenset((uid,)))
    passage = passages[uid]
    return _Item(uid, np.asarray(leaf_vectors[uid], np.float32), passage,
                 count_tokens(passage.text), frozenset((uid,)))


def _level_jobs(links: _Links, level: int, todo: list[str], leaf_item: Callable[[str], _Item],
                config: TreeConfig) -> list[tuple[str, list[_Item]]]:
    """The groups to summarise for the dirty nodes ``todo`` of one level, each with the node
    it replaces (a level-1 node over the token cap gives several; an emptied node none)."""
    jobs: list[tuple[str, list[_Item]]] = []
    for uid in todo:
        if level == 1:
            group = [leaf_item(c) for c in links.children(uid)]
            vectors = np.stack([it.vector for it in group]) if group else np.empty((0, 0))
            tokens = np.array([it.tokens for it in group])
            parts = _split(list(range(len(group))), vectors, tokens, config) if group else []
            jobs.extend((uid, [group[i] for i in part]) for part in parts)
        elif links.children(uid):
            jobs.append((uid, [_node_item(links.node(c)) for c in links.children(uid)]))
    return jobs


def _install(links: _Links, jobs: list[tuple[str, list[_Item]]], made: list[Node],
             todo: list[str], delta: TreeDelta) -> tuple[dict[str, list[str]], set[str]]:
    """Add the new nodes to the tree and ``delta``; returns which nodes replace each of
    ``todo`` and the uids written."""
    replaced: dict[str, list[str]] = {uid: [] for uid in todo}
    produced: set[str] = set()
    for (old, _), node in zip(jobs, made):
        # A node with the same level and leaves as one left alone, or as one just
        # written, is that node: link to it instead of writing a duplicate.
        if node.uid not in produced and (not links.has(node.uid) or node.uid in replaced):
            produced.add(node.uid)
            links.put(node)
            delta.added.append(node)
        if node.uid not in replaced[old]:
            replaced[old].append(node.uid)
    return replaced, produced


def _relink(links: _Links, todo: list[str], replaced: Mapping[str, list[str]],
            produced: set[str]) -> None:
    """Drop the replaced nodes of ``todo`` and point their parents (now dirty) at the
    replacements."""
    links.dirty.difference_update(todo)
    old_parents = {old: links.pop_parents(old) for old in todo}
    for old in todo:
        if old not in produced:
            links.drop(old)
    for old, new in replaced.items():
        for u in new:
            links.own_parents(u).update(old_parents[old])
    for p in set().union(*old_parents.values()):
        kids = [k for c in links.children(p) for k in replaced.get(c, [c])]
        links.set_children(p, list(dict.fromkeys(kids)))
        links.dirty.add(p)


def _rebuild(leaf_vectors: Mapping[str, np.ndarray], added: list[Leaf], removed: set[str], *,
             embed: Embed, summarizer: Summarizer, config: TreeConfig,
             count_tokens: CountTokens, passages: Mapping[str, Passage]) -> TreeDelta:
    """A tree built from scratch over the known leaves plus ``added``, minus ``removed``."""
    new = {lf.uid for lf in added}
    known = [Leaf(uid, np.asarray(vec), passages[uid], count_tokens(passages[uid].text))
             for uid, vec in sorted(leaf_vectors.items())
             if uid not in removed and uid not in new and uid in passages]
    built = build_tree(known + added, embed=embed, summarizer=summarizer, config=config,
                       count_tokens=count_tokens)
    return TreeDelta(built, [])


def _normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.asarray(x / norms)
