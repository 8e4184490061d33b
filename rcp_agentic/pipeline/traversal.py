"""RAPTOR's tree traversal (``x-rcp-agentic-treeSearch: traversal``): the best ``k`` nodes of
the top layer, then the best ``k`` of their children, layer by layer down to the leaves. The
units chosen are the ones the usual recall and fusion then rank."""

from __future__ import annotations

import numpy as np

from ..ranking import top
from ..store.docstore import Docstore
from ..store.memindex import UnitIndex
from .params import Plan
from .sources import unit_vectors


def traverse(store: Docstore, plan: Plan, index: UnitIndex, qvec: np.ndarray,
             allowed: np.ndarray | None) -> np.ndarray:
    """The positions the traversal chooses (within ``allowed``)."""
    levels = sorted({lv for u, lv in plan.kinds if u == plan.stored_unit}, reverse=True)
    if not levels:
        return allowed if allowed is not None else np.arange(index.size)
    frontier = index.kind_positions(plan.stored_unit, levels[0])
    chosen: list[np.ndarray] = []
    while len(frontier):
        if allowed is not None:
            frontier = np.intersect1d(frontier, allowed, assume_unique=True)
        if not len(frontier):
            break
        sims = unit_vectors(store, index, frontier) @ qvec
        best = frontier[top(sims, frontier, plan.k)[0]]
        chosen.append(best)
        rows = store.hydrate([int(index.rowids[p]) for p in best])
        children = [c for r in rows.values() for c in (r.get("umeta") or {}).get("children", [])]
        frontier = index.positions_of_uids(children)
    return np.unique(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
