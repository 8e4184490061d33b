"""The bridge hop of graph recall: the passage a multi-hop question needs but never names.

"Who was the first president of the association which published the Journal of
Psychotherapy Integration?" names the journal; the passage that answers it is about the
American Psychological Association, which only the journal's passage names. After fusion,
:func:`bridge_passages` reads the head of the fused ranking as the first hop, takes the
entities those passages mention or are about that the query does not link (weighted by the
passage's rank and the entity's specificity), and scores every other passage naming one of
them by that weight times its relevance to the query. :func:`insert_bridge` puts the
``BRIDGE_COUNT`` best at ranks ``BRIDGE_SLOT``, ``BRIDGE_SLOT + 1`` … of the ranking, each
hit's ``scores`` holding ``bridge``; a hit's confidence does not change with it. The scoring
in full and why two bridges: ``docs/internals.md``, "The bridge hop"; measured held out:
``bench/RESULTS.md``, "Multi-hop".
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..pipeline.candidates import Candidates, Query
from ..store.memindex import UnitIndex
from .ppr import GraphView
from .recall import GraphList, scoped_graph

# How many passages at the head of the fused ranking count as the first hop.
BRIDGE_HOP1_DEPTH = 3
# The 0-based rank the best bridge passage takes: the first hop keeps the ranks above it.
BRIDGE_SLOT = 3
# How many bridge passages are put in, at consecutive ranks from BRIDGE_SLOT.
BRIDGE_COUNT = 2
# BM25 (over the query's best) beside the cosine in a bridge passage's relevance. Held out
# with two bridges, none: a bridge passage is about another entity than the question's
# words, and the cosine reads its relevance better than shared words do.
BRIDGE_SPARSE = 0.0

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


def bridge_passages(query: Query, cands: Candidates, view: GraphView,
                    links: Mapping[str, float]) -> list[tuple[int, float]]:
    """The index positions of the ``BRIDGE_COUNT`` best bridge passages for this query
    with their bridge scores, best first (module doc); none when the first hop names no
    entity that leads to another allowed passage."""
    index = query.index
    head = [p for p, _s in cands.ranked[:BRIDGE_HOP1_DEPTH]]
    hop1 = [f"r{int(index.rowids[p])}" for p in head]
    found = bridge_candidates(view, bridge_entities(view, hop1, links))
    for key in hop1:
        found.pop(key, None)
    if not found:
        return []
    positions, weights = _positions(index, found)
    if query.allowed is not None:
        inside = np.isin(positions, query.allowed)
        positions, weights = positions[inside], weights[inside]
    fresh = ~np.isin(positions, head)
    positions, weights = positions[fresh], weights[fresh]
    if not len(positions):
        return []
    score = weights * _relevance(cands, positions)
    # Best score first, ties to the smaller position (the unit stored first).
    order = np.lexsort((positions, -score))[:BRIDGE_COUNT]
    return [(int(positions[i]), float(score[i])) for i in order if score[i] > 0]


def insert_bridge(cands: Candidates, positions: list[int]) -> list[int]:
    """Move (or add) ``positions`` to ranks ``BRIDGE_SLOT``, ``BRIDGE_SLOT + 1``, ... of the
    ranking, in their order, each with a fused score between its new neighbours' (the
    ranking stays in score order), and return them; a ranking with no more than
    ``BRIDGE_SLOT`` other units is left as it is (and none returned)."""
    moved = set(positions)
    ranked = [(p, s) for p, s in cands.ranked if p not in moved]
    if len(ranked) <= BRIDGE_SLOT:
        return []
    for slot, position in enumerate(positions, start=BRIDGE_SLOT):
        above, below = ranked[slot - 1][1], ranked[slot][1]
        ranked.insert(slot, (position, (above + below) / 2))
    cands.ranked = ranked
    return list(positions)


def _positions(index: UnitIndex, found: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """The index positions of the found chunk keys the index holds, and their weights."""
    pairs = [(index.position.get(int(k[1:])), w) for k, w in found.items()]
    kept = [(p, w) for p, w in pairs if p is not None]
    return (np.fromiter((p for p, _w in kept), dtype=np.int64, count=len(kept)),
            np.fromiter((w for _p, w in kept), dtype=np.float64, count=len(kept)))


def _relevance(cands: Candidates, positions: np.ndarray) -> np.ndarray:
    """Each position's relevance to the query: cosine clipped at 0 plus ``BRIDGE_SPARSE``
    times its BM25 over the sparse list's best; BM25 over the best alone when the mode
    recalled no dense list."""
    at = positions.tolist()
    out = np.zeros(len(at))
    dense = cands.lists.get("dense")
    if dense is not None:
        got = dense.scores_at(at)
        out += np.maximum(np.array([got.get(p, 0.0) for p in at]), 0.0)
    sparse = cands.lists.get("sparse")
    weight = BRIDGE_SPARSE if dense is not None else 1.0
    if weight and sparse is not None and len(sparse) and sparse[0][1] > 0:
        got = sparse.scores_at(at)
        out += weight * np.array([got.get(p, 0.0) for p in at]) / sparse[0][1]
    return out


def follow_bridge(query: Query, cands: Candidates) -> None:
    """Put the bridge passages (module doc) into a chunk retrieve's fused ranking, over the
    graph the request's filter allows, with a usage note naming each; nothing without a
    graph or a bridge."""
    graph = cands.lists.get("graph")
    if isinstance(graph, GraphList) and graph.view is not None and graph.links is not None:
        view, links = graph.view, graph.links
    else:  # graph recall fell back to hybrid: the first hop is hybrid's head
        view = scoped_graph(query.plan, query.snapshot)[0]
        if view is None:
            return
        links = view.link(query.plan.query)
    found = dict(bridge_passages(query, cands, view, links))
    placed = insert_bridge(cands, list(found))
    cands.bridged = {p: found[p] for p in placed}
    for rank, position in enumerate(placed, start=BRIDGE_SLOT + 1):
        query.plan.notes.append(f"graph recall: bridge passage {query.index.uids[position]} "
                                f"at rank {rank}, through an entity the first hop names")
