"""The edges of graph recall's matrix, by owner: each entity's, each relation's, each synonym's.

:class:`~.ppr.GraphView` sums every owner's edges into one symmetric matrix; a view
patched after a write (:mod:`.view_patch`) subtracts the edges of the owners that left
and adds those of the owners that came, with the same functions, so both agree. Nodes
are entities at their slots, then passages at ``n_entities`` + their slots. The weights
are explained in :mod:`.ppr`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from .model import Entity, Relation, Synonym
from .ppr_weights import PPRWeights

LOW_KINDS = frozenset({"date", "number"})
P2P_MAX_TARGETS = 8  # a title shared by more documents than this is no pointer


@dataclass
class EdgeList:
    """Symmetric weighted edges as coordinate triples (each edge in both directions)."""

    rows: list[int] = field(default_factory=list)
    cols: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)

    def add(self, a: int, b: int, w: float) -> None:
        """Add the edge a-b of weight ``w`` both ways (no self-loops, no weight <= 0)."""
        if w > 0 and a != b:
            self.rows.extend((a, b))
            self.cols.extend((b, a))
            self.vals.extend((w, w))

    def matrix(self, n: int) -> sp.csr_matrix:
        """The ``n`` x ``n`` sparse matrix of the edges, parallel edges summed."""
        adj = sp.csr_matrix((np.asarray(self.vals, dtype=np.float64), (self.rows, self.cols)),
                            shape=(n, n))
        adj.sum_duplicates()
        return adj


def entity_edges(edges: EdgeList, entities: Iterable[tuple[int, Entity]],
                 chunk_slot: Mapping[str, int], n_entities: int, w: PPRWeights) -> None:
    """The edges each entity (at its slot) owns: mentions and about-passages, and from
    each passage mentioning it to the passages about it (``p2p``)."""
    for i, e in entities:
        scale = w.date if e.kind in LOW_KINDS else 1.0
        about = set(e.about)
        for ck, mw in e.mentions.items():
            j = chunk_slot.get(ck)
            if j is not None and ck not in about:
                edges.add(i, n_entities + j, w.mention * mw * scale)
        targets = []
        for ck in e.about:
            j = chunk_slot.get(ck)
            if j is not None:
                edges.add(i, n_entities + j, w.about)
                targets.append(n_entities + j)
        if w.p2p <= 0 or not targets or len(targets) > P2P_MAX_TARGETS:
            continue
        for ck, mw in e.mentions.items():
            j = chunk_slot.get(ck)
            if j is None or ck in about:
                continue
            for t in targets:
                edges.add(n_entities + j, t, w.p2p * mw)


def relation_edges(edges: EdgeList, relations: Iterable[Relation],
                   entities: Mapping[str, Entity], slot: Mapping[str, int],
                   w: PPRWeights) -> None:
    """Entity-entity edges of the relations (dates and numbers scaled down)."""
    for r in relations:
        a, b = slot.get(r.subject), slot.get(r.object)
        if a is None or b is None:
            continue
        scale = min(w.date if entities[r.subject].kind in LOW_KINDS else 1.0,
                    w.date if entities[r.object].kind in LOW_KINDS else 1.0)
        edges.add(a, b, w.relation * max(r.weight, 0.0) * scale)


def synonym_edges(edges: EdgeList, synonyms: Iterable[Synonym], slot: Mapping[str, int],
                  w: PPRWeights) -> None:
    """Entity-entity edges of the synonyms, weighted by name cosine."""
    for s in synonyms:
        a, b = slot.get(s.a), slot.get(s.b)
        if a is not None and b is not None:
            edges.add(a, b, w.synonym * s.similarity)


def transition(adj: sp.csr_matrix) -> tuple[np.ndarray, sp.csr_matrix]:
    """The dangling nodes (no edge) of a symmetric adjacency and its column-stochastic
    transition: mass at j moves to i in proportion to w(i, j)."""
    n = adj.shape[0]
    out = np.bincount(adj.indices, weights=adj.data, minlength=n)
    inv = np.where(out > 0, 1.0 / np.where(out > 0, out, 1.0), 0.0)
    return out == 0, sp.csr_matrix((adj.data * inv[adj.indices], adj.indices, adj.indptr),
                                   shape=(n, n))
