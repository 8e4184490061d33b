"""Warming a graph view: the per-view structures graph recall and the graph ops build on first
use (:meth:`.ops.GraphOps.warm` calls it, ``Engine.warm`` calls that).

Each is built through the view's own public methods, which cache what they compute on the
view (or, for chunk positions, in :mod:`.compose`'s cache): the entity adjacency
(``neighbors``), every entity's specificity (composition's relevance weights), the query
linker, and the view's passages mapped onto the chunk index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .compose import chunk_positions

if TYPE_CHECKING:
    from ..store.memindex import UnitIndex
    from .ppr import GraphView


def warm_view(view: GraphView, chunks: UnitIndex, query: str) -> None:
    """Build what ``view`` computes lazily, and the chunk index's lookups graph ops use;
    ``chunks``: the chunk index of the view's version, ``query``: any text to link."""
    view.neighbors((), hops=0)  # builds the entity adjacency the neighbourhoods walk
    for key in view.entity_keys:
        view.specificity(key)
    view.link(query)
    chunk_positions(view, chunks.position)
    chunks.positions_of_uids([])  # builds the index's unit id -> position map
