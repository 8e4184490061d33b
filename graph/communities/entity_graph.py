"""The weighted entity-entity graph the communities cluster: its edges (numpy) and its igraph.

:func:`entity_edges` is the edge dict (``(a, b) -> weight``, ``a < b``) that the reports, the
incremental update and the stored hierarchy share; :func:`edge_arrays` is the same in
arrays, and :class:`EntityGraph` the one igraph of every entity that the builder cuts its
subgraphs from (vertex ``i`` is the ``i``-th entity key in sorted order, so a vertex subset
in increasing order is a key-sorted member list). The weights (``docs/internals.md``, "The
entity graph"; settings in :class:`~.config.CommunityConfig`) are computed with numpy, every
contribution to a pair summed in the order the former pure-Python loop added them and
rounded by ``round(v, 9)``: the output is bit-identical to that loop (tested on a real
graph against the loop, read from its commit by ``bench/frozen.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model import GraphData
from .config import CommunityConfig

__all__ = ["EdgeArrays", "EntityGraph", "Edges", "LOW_KINDS", "edge_arrays", "entity_edges"]

LOW_KINDS = frozenset({"date", "number"})
Edges = dict[tuple[str, str], float]


@dataclass(frozen=True)
class EdgeArrays:
    """Edges as arrays over ``keys`` (sorted entity keys): ``a[i] < b[i]``, sorted by (a, b)."""

    keys: list[str]
    a: np.ndarray
    b: np.ndarray
    weight: np.ndarray

    def as_dict(self) -> Edges:
        keys = self.keys
        return dict(zip(zip([keys[i] for i in self.a.tolist()],
                            [keys[i] for i in self.b.tolist()]), self.weight.tolist()))

    @classmethod
    def of(cls, keys: list[str], edges: Edges) -> EdgeArrays:
        """The arrays of an edge dict over ``keys`` (sorted; every edge end among them)."""
        index = {k: i for i, k in enumerate(keys)}
        n = len(edges)
        a = np.fromiter((index[x] for x, _ in edges), dtype=np.int64, count=n)
        b = np.fromiter((index[y] for _, y in edges), dtype=np.int64, count=n)
        w = np.fromiter(edges.values(), dtype=np.float64, count=n)
        order = np.lexsort((b, a))
        return cls(keys, a[order], b[order], w[order])


def edge_arrays(graph: GraphData, config: CommunityConfig) -> EdgeArrays:
    """The entity edges of ``graph`` under ``config`` (see the module doc)."""
    ents = graph.entities
    keys = sorted(ents)
    index = {k: i for i, k in enumerate(keys)}
    scale = np.array([config.date if ents[k].kind in LOW_KINDS else 1.0 for k in keys])
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    raw: list[np.ndarray] = []      # the weight before the date scale, per contribution

    def pairs(x: list[str], y: list[str], w: list[float]) -> None:
        src.append(np.fromiter((index[k] for k in x), dtype=np.int64, count=len(x)))
        dst.append(np.fromiter((index[k] for k in y), dtype=np.int64, count=len(y)))
        raw.append(np.asarray(w, dtype=np.float64))

    if config.relation > 0:
        rels = [r for r in graph.relations if r.subject in ents and r.object in ents]
        pairs([r.subject for r in rels], [r.object for r in rels],
              [config.relation * max(r.weight, 0.0) for r in rels])
    if config.synonym > 0:
        syns = [s for s in graph.synonyms if s.a in ents and s.b in ents]
        pairs([s.a for s in syns], [s.b for s in syns],
              [config.synonym * s.similarity for s in syns])
    if config.about > 0 or config.comention > 0:
        s, d, w = _passage_pairs(graph, keys, config)
        src.append(s)
        dst.append(d)
        raw.append(w)
    if not src:
        empty = np.zeros(0, dtype=np.int64)
        return EdgeArrays(keys, empty, empty, np.zeros(0))
    s, d, w = np.concatenate(src), np.concatenate(dst), np.concatenate(raw)
    keep = (s != d) & (w > 0)
    s, d, w = s[keep], d[keep], w[keep]
    w = w * np.minimum(scale[s], scale[d])
    lo, hi = np.minimum(s, d), np.maximum(s, d)
    code, inverse = np.unique(lo * len(keys) + hi, return_inverse=True)
    # bincount adds each bin's weights in input order: the old loop's order of additions.
    total = np.bincount(inverse.ravel(), weights=w, minlength=len(code))
    rounded = np.array([round(v, 9) for v in total.tolist()], dtype=np.float64)
    return EdgeArrays(keys, code // len(keys), code % len(keys), rounded)


def _passage_pairs(graph: GraphData, keys: list[str], config: CommunityConfig
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The passage contributions (about, then co-mention, chunk by chunk in key order) as
    (source, target, weight before the date scale), in the order they are summed."""
    ents = graph.entities
    ck_ent: list[int] = []
    ck_key: list[str] = []
    ck_w: list[float] = []
    ab_ent: list[int] = []
    ab_key: list[str] = []
    for i, k in enumerate(keys):
        e = ents[k]
        for ck, mw in e.mentions.items():
            ck_ent.append(i)
            ck_key.append(ck)
            ck_w.append(mw)
        for ck in e.about:
            ab_ent.append(i)
            ab_key.append(ck)
    chunk_names = sorted(set(ck_key))
    rank = {c: r for r, c in enumerate(chunk_names)}
    m_chunk = np.fromiter((rank[c] for c in ck_key), dtype=np.int64, count=len(ck_key))
    m_ent = np.asarray(ck_ent, dtype=np.int64)
    m_w = np.asarray(ck_w, dtype=np.float64)
    order = np.lexsort((m_ent, m_chunk))          # chunk by chunk, entities in key order
    m_chunk, m_ent, m_w = m_chunk[order], m_ent[order], m_w[order]
    n_chunks = len(chunk_names)
    size = np.bincount(m_chunk, minlength=n_chunks)
    start = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    pos = np.arange(len(m_chunk)) - start[m_chunk]  # index of a mention within its chunk

    # Each contribution's place in the old loop: (chunk, phase 0 about / 1 co-mention, i, j).
    parts: list[tuple[np.ndarray, ...]] = []
    if config.about > 0 and ab_ent:
        known = [j for j, c in enumerate(ab_key) if c in rank]
        a_chunk = np.fromiter((rank[ab_key[j]] for j in known), dtype=np.int64, count=len(known))
        a_ent = np.asarray([ab_ent[j] for j in known], dtype=np.int64)
        order = np.lexsort((a_ent, a_chunk))
        a_chunk, a_ent = a_chunk[order], a_ent[order]
        reps = size[a_chunk]                      # every title entity x every mention here
        row = np.repeat(np.arange(len(a_chunk)), reps)
        within = np.arange(int(reps.sum())) - np.repeat(np.cumsum(reps) - reps, reps)
        target = start[a_chunk][row] + within
        parts.append((a_chunk[row], np.zeros(len(row), dtype=np.int64), row, within,
                      a_ent[row], m_ent[target], config.about * m_w[target]))
    if config.comention > 0:
        for n in np.unique(size[size > 1]).tolist():
            chunks = np.flatnonzero(size == n)
            lo, hi = np.triu_indices(n, 1)
            first = (start[chunks][:, None] + lo[None, :]).ravel()
            second = (start[chunks][:, None] + hi[None, :]).ravel()
            c = np.repeat(chunks, len(lo))
            w = np.full(len(c), config.comention / (n - 1))
            parts.append((c, np.ones(len(c), dtype=np.int64), pos[first], pos[second],
                          m_ent[first], m_ent[second], w))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    c, phase, x, y, s, d, w = (np.concatenate(v) for v in zip(*parts))
    order = np.lexsort((y, x, phase, c))
    return s[order], d[order], w[order]


def entity_edges(graph: GraphData, config: CommunityConfig | None = None) -> Edges:
    """The weighted entity-entity edges (``docs/internals.md``, "The entity graph"), keyed ``(a, b)``
    with ``a < b``, sorted."""
    if config is None:
        config = CommunityConfig()
    return edge_arrays(graph, config).as_dict()


class EntityGraph:
    """The igraph of every entity (vertex ``i`` = ``keys[i]``), built once, with ``weight``;
    or of some of them (an update's), out of ``total`` entities in all."""

    def __init__(self, arrays: EdgeArrays, total: int | None = None) -> None:
        import igraph as ig

        self.keys = arrays.keys
        self.total = len(arrays.keys) if total is None else total
        # A lazy zip: a list of 2-lists would be container objects the garbage collector
        # scans over and over (measured 0.8 s of 2 s on 225k edges beside a large graph).
        self.graph: Any = ig.Graph(n=len(arrays.keys),
                                   edges=zip(arrays.a.tolist(), arrays.b.tolist()))
        self.graph.es["weight"] = arrays.weight.tolist()

    @classmethod
    def of(cls, keys: list[str], edges: Edges) -> EntityGraph:
        return cls(EdgeArrays.of(keys, edges))

    def as_induced(self) -> Any:
        """The graph as igraph's ``induced_subgraph`` would cut these entities out of the graph
        of all ``total``: it copies (edges in key order) above half of them and builds from
        scratch (edges ordered by their larger end) below, and a clustering must not depend
        on whether the rest of the graph was built."""
        n = self.graph.vcount()
        if n == self.total or n / self.total > 0.5:
            return self.graph
        return self.graph.induced_subgraph(range(n), implementation="create_from_scratch")
