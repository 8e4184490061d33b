"""A graph view patched to a newer version's graph instead of built again.

:func:`patched_view` takes the view of an older version and what moved since
(:class:`~.follow.GraphChange`) and returns the view of the newer graph: the edges of the
entities, relations and synonyms that left are subtracted and those of the ones that came
are added (:mod:`.edges`, the functions a full build uses), as one sparse update of the
adjacency; then the transition, dangling nodes, node counts, the title lexicon and the word
index are updated for the changed entities only. Nodes keep their slots: a new entity or
passage is appended (entities before passages), an entity that comes back takes its old
slot, and one that left stays as an isolated node with no reset weight (its mass is 0, as
its absence would make it). Passages are appended in row order, so ties between passages
still fall by row. Once isolated nodes are more than :data:`DEAD_SHARE` of all, the caller
builds the view whole again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import scipy.sparse as sp

from .edges import LOW_KINDS, EdgeList, entity_edges, relation_edges, synonym_edges
from .follow import GraphChange
from .model import Entity, GraphData
from .ppr import GraphView

DEAD_SHARE = 0.5
# An entry that a subtraction left at float noise is no edge (stored weights are >= 1e-6).
_ZERO = 1e-10


def patched_view(view: GraphView, graph: GraphData, change: GraphChange,
                 word_df: Callable[[str], int] | None) -> GraphView | None:
    """The view of ``graph`` from ``view`` (of the graph ``change`` leads from); None when
    the view must be built whole (name vectors, or too many isolated nodes)."""
    if view.embed is not None:
        return None
    new = GraphView.__new__(GraphView)
    new.graph, new.weights, new.word_df = graph, view.weights, word_df
    new._specificity = {}
    _renumber(new, view, change)
    if len(new.e_index) + len(new.c_index) < (1 - DEAD_SHARE) * new.n:
        return None
    new.set_matrix(_adjacency(new, view, change))
    df = np.ones(new.n_entities)
    df[:view.n_entities] = view.df
    for k, e in change.entities_added.items():
        df[new.e_index[k]] = max(1, len(set(e.mentions) | set(e.about)))
    new.df = df
    new.lexicon = view.lexicon.changed(_titles(change.entities_removed.values()),
                                       _titles(change.entities_added.values()))
    new.extractor = view.extractor
    new.by_word = _by_word(view.by_word, change)
    new.embed, new.name_vectors, new.vector_keys = None, None, []
    return new


def _renumber(new: GraphView, view: GraphView, change: GraphChange) -> None:
    """Slots for the new graph's nodes: the old ones kept, new ones appended."""
    new.entity_keys, new.entity_slot = list(view.entity_keys), dict(view.entity_slot)
    new.e_index = dict(view.e_index)
    for k in change.entities_removed:
        del new.e_index[k]
    for k in change.entities_added:
        i = new.entity_slot.get(k)
        if i is None:
            i = new.entity_slot[k] = len(new.entity_keys)
            new.entity_keys.append(k)
        new.e_index[k] = i
    new.chunk_keys, new.c_index = list(view.chunk_keys), dict(view.c_index)
    for ck in change.chunks_removed:
        del new.c_index[ck]
    for ck in change.chunks_added:
        new.c_index[ck] = len(new.chunk_keys)
        new.chunk_keys.append(ck)
    new.n_entities = len(new.entity_keys)
    new.n = new.n_entities + len(new.chunk_keys)


def _adjacency(new: GraphView, view: GraphView, change: GraphChange) -> sp.csr_matrix:
    """The old adjacency in the new numbering, less the edges of what left, plus those of
    what came."""
    w, ne, n = view.weights, new.n_entities, new.n
    gone, came = EdgeList(), EdgeList()
    entity_edges(gone, ((new.entity_slot[k], e) for k, e in change.entities_removed.items()),
                 view.c_index, ne, w)
    relation_edges(gone, change.relations_removed, view.graph.entities, new.entity_slot, w)
    synonym_edges(gone, change.synonyms_removed, new.entity_slot, w)
    entity_edges(came, ((new.e_index[k], e) for k, e in change.entities_added.items()),
                 new.c_index, ne, w)
    relation_edges(came, change.relations_added, new.graph.entities, new.e_index, w)
    synonym_edges(came, change.synonyms_added, new.e_index, w)
    adj = _grown(view.adjacency, view.n_entities, ne - view.n_entities, n)
    adj = (adj + came.matrix(n) - gone.matrix(n)).tocsr()
    adj.data[np.abs(adj.data) < _ZERO] = 0.0
    adj.eliminate_zeros()
    return adj


def _grown(adj: sp.csr_matrix, n_entities: int, new_entities: int, n: int) -> sp.csr_matrix:
    """``adj`` with ``new_entities`` empty rows and columns after its entities and empty
    ones appended up to ``n`` (its arrays shared, not copied)."""
    indptr, indices = adj.indptr, adj.indices
    if new_entities:
        indices = np.where(indices >= n_entities, indices + new_entities, indices)
        indptr = np.concatenate([indptr[:n_entities + 1],
                                 np.full(new_entities, indptr[n_entities]),
                                 indptr[n_entities + 1:]])
    tail = n + 1 - len(indptr)
    if tail:
        indptr = np.concatenate([indptr, np.full(tail, indptr[-1])])
    return sp.csr_matrix((adj.data, indices, indptr), shape=(n, n))


def _titles(entities: Iterable[Entity]) -> list[str]:
    return [e.name for e in entities if e.kind == "title"]


def _by_word(by_word: dict[str, list[str]], change: GraphChange) -> dict[str, list[str]]:
    """The word index with the changed entities' lists replaced (never edited in place:
    the old view keeps its own)."""
    out = dict(by_word)
    for k, e in change.entities_removed.items():
        if e.kind not in LOW_KINDS:
            for word in set(k.split()):
                left = [x for x in out.get(word, ()) if x != k]
                if left:
                    out[word] = left
                else:
                    out.pop(word, None)
    for k, e in change.entities_added.items():
        if e.kind not in LOW_KINDS:
            for word in set(k.split()):
                out[word] = [*out.get(word, ()), k]
    return out
