"""The bridge hop of graph recall: the passage a multi-hop question needs but never names.

"Who was the first president of the association which published the Journal of
Psychotherapy Integration?" names the journal; the passage that answers it is about the
American Psychological Association, which only the journal's passage names. Dense, sparse
and PageRank recall all rank the first hop; the second is one entity further and rarely
reaches the top five.

After fusion, :func:`bridge_passage` reads the head of the fused ranking as the first hop
(its ``BRIDGE_HOP1_DEPTH`` best passages), takes the entities those passages mention or are
about that the query does not link (the *bridge* candidates, weighted by the passage's rank
``1 / (1 + r)`` times the entity's specificity ``1 / passages mentioning it``; dates and
numbers excluded), and scores every other passage that mentions or is about one of them:
its best bridge weight times its relevance to the query (cosine, clipped at 0, plus
``BRIDGE_SPARSE`` times its BM25 over the query's best). :func:`insert_bridge` puts the
best such passage at rank ``BRIDGE_SLOT`` (0-based) of the ranking, ahead of the fused
list's own passages from there on, with a fused score between its neighbours'.

Measured held out (``bench/multihop.py``: k-fold within each multi-hop set and
leave-one-set-out across them; the numbers are in ``bench/RESULTS.md``, "Multi-hop").
A chunk retrieve with graph recall takes a bridge also when graph recall's own list stays
out of the fusion (the query names no entity some passage is about): its first hop is then
hybrid's head, and measured that gains as much (HotpotQA +1.2 R@5 from those questions).
What a hit's confidence reads (its scores and its rank in the pool) does not change with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ..store.memindex import UnitIndex
from .candidates import Candidates, Query
from .graph_recall import GraphList, scoped_graph

if TYPE_CHECKING:
    from ..graph.ppr import GraphView

# How many passages at the head of the fused ranking count as the first hop.
BRIDGE_HOP1_DEPTH = 3
# The 0-based rank the bridge passage takes: the first hop keeps the ranks above it.
BRIDGE_SLOT = 3
# BM25 (over the query's best) beside the cosine in a bridge passage's relevance.
BRIDGE_SPARSE = 0.5

_SKIP_KINDS = frozenset({"date", "number"})


def bridge_entities(view: GraphView, hop1: list[str],
                    links: Mapping[str, float]) -> dict[int, float]:
    """Entity node index -> bridge weight: every entity the first-hop passages (chunk keys,
    best first) mention or are about, except those the query links and dates/numbers."""
    adjacency, ne = view.adjacency, view.n_entities
    entities, keys = view.graph.entities, view.entity_keys
    weights: dict[int, float] = {}
    for rank, key in enumerate(hop1):
        j = view.c_index.get(key)
        if j is None:
            continue
        row = adjacency[ne + j]
        for i in row.indices[row.indices < ne].tolist():
            ek = keys[i]
            if ek in links or entities[ek].kind in _SKIP_KINDS:
                continue
            weights[i] = weights.get(i, 0.0) + view.specificity(ek) / (1 + rank)
    return weights


def bridge_candidates(view: GraphView, weights: Mapping[int, float]) -> dict[str, float]:
    """Chunk key -> its best bridge weight, over every passage linked to a bridge entity."""
    adjacency, ne = view.adjacency, view.n_entities
    out: dict[str, float] = {}
    for i, w in sorted(weights.items()):
        row = adjacency[i]
        for j in row.indices[row.indices >= ne].tolist():
            key = view.chunk_keys[j - ne]
            if w > out.get(key, 0.0):
                out[key] = w
    return out


def bridge_passage(query: Query, cands: Candidates, view: GraphView,
                   links: Mapping[str, float]) -> int | None:
    """The index position of the best bridge passage for this query (module doc), or None
    when the first hop names no entity that leads to another allowed passage."""
    index = query.index
    head = [p for p, _s in cands.ranked[:BRIDGE_HOP1_DEPTH]]
    hop1 = [f"r{int(index.rowids[p])}" for p in head]
    found = bridge_candidates(view, bridge_entities(view, hop1, links))
    for key in hop1:
        found.pop(key, None)
    if not found:
        return None
    positions, weights = _positions(index, found)
    if query.allowed is not None:
        inside = np.isin(positions, query.allowed)
        positions, weights = positions[inside], weights[inside]
    fresh = ~np.isin(positions, head)
    positions, weights = positions[fresh], weights[fresh]
    if not len(positions):
        return None
    relevance = _relevance(cands, positions)
    score = weights * relevance
    # Best score first, ties to the smaller position (the unit stored first).
    best = int(np.lexsort((positions, -score))[0])
    return int(positions[best]) if score[best] > 0 else None


def insert_bridge(cands: Candidates, position: int) -> None:
    """Move (or add) ``position`` to rank ``BRIDGE_SLOT`` of the ranking, with a fused score
    between its new neighbours' (the ranking stays in score order)."""
    ranked = [(p, s) for p, s in cands.ranked if p != position]
    if len(ranked) <= BRIDGE_SLOT:
        return
    above, below = ranked[BRIDGE_SLOT - 1][1], ranked[BRIDGE_SLOT][1]
    ranked.insert(BRIDGE_SLOT, (position, (above + below) / 2))
    cands.ranked = ranked


def _positions(index: UnitIndex, found: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """The index positions of the found chunk keys the index holds, and their weights."""
    pairs = [(index.position.get(int(k[1:])), w) for k, w in found.items()]
    kept = [(p, w) for p, w in pairs if p is not None]
    return (np.fromiter((p for p, _w in kept), dtype=np.int64, count=len(kept)),
            np.fromiter((w for _p, w in kept), dtype=np.float64, count=len(kept)))


def _relevance(cands: Candidates, positions: np.ndarray) -> np.ndarray:
    """Each position's relevance to the query: cosine clipped at 0 plus ``BRIDGE_SPARSE``
    times its BM25 over the sparse list's best (the parts its mode recalled)."""
    at = positions.tolist()
    out = np.zeros(len(at))
    dense = cands.lists.get("dense")
    if dense is not None:
        got = dense.scores_at(at)
        out += np.maximum(np.array([got.get(p, 0.0) for p in at]), 0.0)
    sparse = cands.lists.get("sparse")
    if sparse is not None and len(sparse) and sparse[0][1] > 0:
        got = sparse.scores_at(at)
        out += BRIDGE_SPARSE * np.array([got.get(p, 0.0) for p in at]) / sparse[0][1]
    return out


def follow_bridge(query: Query, cands: Candidates) -> None:
    """Put the bridge passage (module doc) into a chunk retrieve's fused ranking, over the
    graph the request's filter allows, with a usage note naming it; nothing without a graph
    or a bridge."""
    graph = cands.lists.get("graph")
    if isinstance(graph, GraphList) and graph.view is not None and graph.links is not None:
        view, links = graph.view, graph.links
    else:  # graph recall fell back to hybrid: the first hop is hybrid's head
        view = scoped_graph(query.plan, query.snapshot)[0]
        if view is None:
            return
        links = view.link(query.plan.query)
    found = bridge_passage(query, cands, view, links)
    if found is not None:
        insert_bridge(cands, found)
        uid = query.index.uids[found]
        query.plan.notes.append(f"graph recall: bridge passage {uid} at rank "
                                f"{BRIDGE_SLOT + 1}, through an entity the first hop names")
