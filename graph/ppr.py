"""Graph-aware recall: HippoRAG-style personalised PageRank over entities and passages.

:class:`GraphView` turns a :class:`~.model.GraphData` into one symmetric sparse matrix (scipy
CSR) over entity nodes then passage nodes: passage–entity mentions and *about* links,
entity–entity relations (normalised PMI) and synonyms, passage–passage links, each weighted
by a field of :class:`~.ppr_weights.PPRWeights` (dates and numbers scaled down by ``date``).
:meth:`GraphView.link` finds the query's entities as the builder did (plus partial-name and
optional name-embedding matches), weighted by specificity; :meth:`GraphView.subject_share`
says how much of a query's links fall on entities some passage is about (which scales the
list in fusion); :meth:`GraphView.recall` runs PageRank from those entities plus a small
share of the dense/sparse passage scores and ranks passages by their mass. Also
:meth:`neighbors` and :meth:`paths` for the graph units. Each edge and weight:
``docs/internals.md``, "Personalised PageRank".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..ranking import MASS_TOLERANCE, top
from .edges import LOW_KINDS, EdgeList, entity_edges, relation_edges, synonym_edges, transition
from .extract import Lexicon, choose_mentions
from .extract_rules import BuiltinExtractor
from .model import GraphData, Relation
from .ppr_weights import PPRWeights
from .resolve import entity_key

Embed = Callable[[list[str]], np.ndarray]


@dataclass
class Subgraph:
    """Entities and the weighted edges between them (a neighbourhood or a path)."""

    nodes: list[str] = field(default_factory=list)
    edges: list[tuple[str, str, float, Relation | None]] = field(default_factory=list)


class GraphView:
    """The sparse matrix of one GraphData, with query linking, PageRank, neighbours and paths."""

    def __init__(self, graph: GraphData, *, weights: PPRWeights = PPRWeights(),
                 embed: Embed | None = None,
                 name_vectors: Mapping[str, np.ndarray] | None = None,
                 word_df: Callable[[str], int] | None = None) -> None:
        self.graph = graph
        self.weights = weights
        self.word_df = word_df
        self._specificity: dict[str, float] = {}
        self._index_nodes()
        edges = EdgeList()
        entity_edges(edges, ((self.e_index[k], e) for k, e in graph.entities.items()),
                     self.c_index, self.n_entities, weights)
        relation_edges(edges, graph.relations, graph.entities, self.e_index, weights)
        synonym_edges(edges, graph.synonyms, self.e_index, weights)
        self.set_matrix(edges.matrix(self.n))
        self.lexicon = Lexicon(e.name for e in graph.entities.values() if e.kind == "title")
        self.extractor = BuiltinExtractor()
        self.by_word = self._entities_by_word()
        # Embedding links need the query embedder and the entities' name vectors (as the
        # builder keeps them in ``GraphCache.name_vectors``, by name); the view never embeds
        # the whole vocabulary itself.
        self.embed = embed
        self.name_vectors: np.ndarray | None = None
        self.vector_keys: list[str] = []
        if embed is not None and name_vectors:
            self._set_name_vectors(name_vectors)

    # --- the matrix --------------------------------------------------------------------

    def _index_nodes(self) -> None:
        """Number the nodes (entities by key, then passages by row) and count entity passages."""
        graph = self.graph
        self.entity_keys = sorted(graph.entities)
        self.chunk_keys = sorted(graph.chunk_docs, key=_rowid_order)
        self.e_index = {k: i for i, k in enumerate(self.entity_keys)}
        # Every entity key holding a slot: a patched view (.view_patch) keeps the slots of
        # entities that left (isolated) for when they come back.
        self.entity_slot = self.e_index
        self.c_index = {k: i for i, k in enumerate(self.chunk_keys)}
        ne, nc = len(self.entity_keys), len(self.chunk_keys)
        self.n = ne + nc
        self.n_entities = ne
        # How many passages mention each entity (about-passages count as mentions).
        self.df = np.array([max(1, len(set(graph.entities[k].mentions) | set(
            graph.entities[k].about))) for k in self.entity_keys], dtype=np.float64)

    def set_matrix(self, adj: sp.csr_matrix) -> None:
        """Keep the adjacency, its dangling nodes and its column-stochastic transition."""
        self.adjacency = adj
        self.dangling, self.transition = transition(adj)

    def _entities_by_word(self) -> dict[str, list[str]]:
        """Each word of an entity key -> the entities (no dates or numbers) holding it."""
        by_word: dict[str, list[str]] = {}
        for k in self.entity_keys:
            if self.graph.entities[k].kind in LOW_KINDS:
                continue
            for word in set(k.split()):
                by_word.setdefault(word, []).append(k)
        return by_word

    def _set_name_vectors(self, name_vectors: Mapping[str, np.ndarray]) -> None:
        """Keep the unit-length name vectors of the entities that have one, in key order."""
        entities = self.graph.entities
        self.vector_keys = [k for k in self.entity_keys if entities[k].name in name_vectors]
        if self.vector_keys:
            vecs = np.stack([np.asarray(name_vectors[entities[k].name], np.float32)
                             for k in self.vector_keys])
            self.name_vectors = vecs / np.maximum(
                np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)

    # --- linking -----------------------------------------------------------------------

    def specificity(self, key: str) -> float:
        """How specific an entity is: ``1 / passages mentioning it`` (or idf / 1).

        For an entity no passage is about, the passages counted are also those holding its
        words in any case (``word_df``, the engine's BM25 document frequency): a word the
        rules took for a name ("Increased" opening a sentence) is as specific as the word.
        """
        mode = self.weights.specificity
        if mode == "none":
            return 1.0
        if key not in self._specificity:
            i = self.e_index[key]
            df = float(self.df[i])
            if self.word_df is not None and not self.graph.entities[key].about:
                df = max(df, float(self.word_df(key)))
            self._specificity[key] = (math.log(1 + len(self.graph.chunk_docs) / df) if mode == "idf"
                                      else 1.0 / df)
        return self._specificity[key]

    def subject_share(self, links: Mapping[str, float]) -> float:
        """The share of a query's link weight on entities some passage is about (a document
        or section titled by them), in [0, 1]. Graph recall's vote scales with it: an entity
        that is only mentioned leads PageRank to the passages that mention it, which the
        sparse list already ranks, and measured on SciFact's claims that re-ranking hurts
        (bench/RESULTS.md, "Knowledge graph")."""
        total = sum(links.values())
        if total <= 0:
            return 0.0
        return sum(w for k, w in links.items() if self.graph.entities[k].about) / total

    def link(self, query: str) -> dict[str, float]:
        """The query's entities with their reset weights (empty when it names none).

        Exact matches (title lexicon, names, acronyms, quoted spans, dates of the
        builtin rules) first; a name with no exact match links the entities that
        contain all of its words and at most ``1 / partial_cover`` times as many
        (``partial_link``), or, given an embedder and name
        vectors, the nearest entity name above cosine ``embed_link``.
        """
        text = " ".join(str(query).split())
        if not text:
            return {}
        found = self.extractor.extract_text(text).mentions
        titles = self.lexicon.scan(text)
        out: dict[str, float] = {}
        unmatched: list[str] = []
        for m in choose_mentions([*titles, *found]):
            key = entity_key(m.surface)
            if not key:
                continue
            if key in self.e_index:
                kind_scale = self.weights.date if self.graph.entities[key].kind in LOW_KINDS \
                    else 1.0
                out[key] = max(out.get(key, 0.0), self.specificity(key) * kind_scale)
            elif m.kind not in LOW_KINDS:
                unmatched.append(key)
        for key in unmatched:
            if any(key in k for k in out):
                continue
            words = key.split()
            pools = [set(self.by_word.get(wd, ())) for wd in words]
            partial = set.intersection(*pools) if pools and all(pools) else set()
            # "asymptomatic" is no link to a paper titled "Asymptomatic spinal cord lesions …"
            partial = {k for k in partial
                       if len(words) >= self.weights.partial_cover * len(k.split())}
            if partial and len(partial) <= self.weights.partial_max:
                for k in partial:
                    out[k] = max(out.get(k, 0.0),
                                 self.weights.partial_link * self.specificity(k) / len(partial))
            elif self.embed is not None and self.name_vectors is not None:
                v = np.asarray(self.embed([key]), dtype=np.float32)[0]
                v = v / max(float(np.linalg.norm(v)), 1e-12)
                sims = self.name_vectors @ v
                best = int(np.argmax(sims))
                if sims[best] >= self.weights.embed_link:
                    k = self.vector_keys[best]
                    out[k] = max(out.get(k, 0.0), float(sims[best]) * self.specificity(k))
        return dict(sorted(out.items()))

    # --- PageRank ----------------------------------------------------------------------

    def mass(self, links: Mapping[str, float],
             prior: Mapping[str, float] | None = None) -> np.ndarray:
        """PageRank mass of every node (entities, then passages) for a reset on the linked
        entities plus ``weights.prior`` of it on the passage ``prior`` (dense/sparse scores
        >= 0 by chunk key). Zeros when nothing links."""
        reset_e = _normalised(links)
        if not reset_e:
            return np.zeros(self.n)
        reset_c: dict[str, float] = {}
        p = _normalised({c: max(0.0, s) for c, s in (prior or {}).items() if c in self.c_index})
        if p:
            share = self.weights.prior
            reset_e = {e: (1 - share) * v for e, v in reset_e.items()}
            reset_c = {c: share * v for c, v in p.items()}
        return self.personalized_pagerank(reset_e, reset_c)

    def personalized_pagerank(self, entities: Mapping[str, float],
                              chunks: Mapping[str, float] | None = None, *,
                              damping: float | None = None, max_iter: int | None = None,
                              tol: float | None = None) -> np.ndarray:
        """Stationary scores of all nodes (entities first, then passages) for a reset vector
        on ``entities`` and ``chunks`` (weights normalised to sum 1). Power iteration;
        mass at nodes with no edge returns to the reset vector."""
        d = self.weights.damping if damping is None else damping
        reset = np.zeros(self.n)
        for k, v in entities.items():
            i = self.e_index.get(k)
            if i is not None and v > 0:
                reset[i] += v
        for k, v in (chunks or {}).items():
            j = self.c_index.get(k)
            if j is not None and v > 0:
                reset[self.n_entities + j] += v
        total = reset.sum()
        if total <= 0:
            return np.zeros(self.n)
        reset /= total
        r = reset.copy()
        for _ in range(max_iter or self.weights.max_iter):
            nxt = d * (self.transition @ r)
            nxt += (1 - d + d * r[self.dangling].sum()) * reset
            delta = float(np.abs(nxt - r).sum())
            r = nxt
            if delta < (tol or self.weights.tol):
                break
        return r

    def recall(self, query: str | None = None, *, links: Mapping[str, float] | None = None,
               prior: Mapping[str, float] | None = None, k: int = 100) -> list[tuple[str, float]]:
        """Passages ranked by PageRank mass, best first (``[]`` when the query links no entity:
        fall back to hybrid). ``prior``: dense/sparse passage scores (>= 0), which get
        ``weights.prior`` of the reset mass."""
        links = dict(links) if links is not None else self.link(query or "")
        if not links:
            return []
        scores = self.mass(links, prior)[self.n_entities:]
        order, best = top(scores, np.arange(len(scores)), k, tolerance=MASS_TOLERANCE,
                          relative=True)  # ties: the passage stored first
        return [(self.chunk_keys[i], float(s)) for i, s in zip(order, best) if s > 0]

    # --- neighbourhoods and paths ------------------------------------------------------

    def _entity_edges(self) -> dict[str, list[tuple[str, float, Relation | None]]]:
        cached = getattr(self, "_edges", None)
        if cached is not None:
            return cached
        edges: dict[str, list[tuple[str, float, Relation | None]]] = {}
        for r in self.graph.relations:
            edges.setdefault(r.subject, []).append((r.object, r.weight, r))
            edges.setdefault(r.object, []).append((r.subject, r.weight, r))
        for s in self.graph.synonyms:
            edges.setdefault(s.a, []).append((s.b, s.similarity, None))
            edges.setdefault(s.b, []).append((s.a, s.similarity, None))
        for v in edges.values():
            v.sort(key=lambda t: (-t[1], t[0]))
        self._edges = edges
        return edges

    def neighbors(self, seeds: Iterable[str], hops: int = 1, *,
                  limit: int = 50) -> Subgraph:
        """Entities within ``hops`` of ``seeds`` over relation and synonym edges (the
        strongest edges first, at most ``limit`` nodes) and the edges among them."""
        edges = self._entity_edges()
        nodes = [s for s in dict.fromkeys(seeds) if s in self.graph.entities]
        seen = set(nodes)
        frontier = list(nodes)
        for _ in range(max(0, hops)):
            nxt: list[str] = []
            for a in frontier:
                for b, _w, _r in edges.get(a, ()):
                    if b not in seen and len(seen) < limit:
                        seen.add(b)
                        nxt.append(b)
            nodes.extend(nxt)
            frontier = nxt
        out = Subgraph(nodes=nodes)
        done: set[tuple[str, str, int]] = set()
        for a in nodes:
            for b, w, r in edges.get(a, ()):
                if b in seen:
                    ident = (min(a, b), max(a, b), id(r))
                    if ident not in done:
                        done.add(ident)
                        out.edges.append((a, b, w, r))
        return out

    def paths(self, keys: Sequence[str], *, max_hops: int = 4,
              limit: int = 200) -> list[Subgraph]:
        """Weighted shortest paths (cost ``-ln`` of the edge weight share) between every
        pair of ``keys`` through relation and synonym edges, at most ``max_hops`` long."""
        import networkx as nx

        keys = [k for k in dict.fromkeys(keys) if k in self.graph.entities]
        if len(keys) < 2:
            return []
        sub = self.neighbors(keys, hops=max(1, max_hops // 2), limit=limit)
        g = nx.Graph()
        for a, b, w, r in sub.edges:
            cost = 1.0 + -math.log(max(min(w, 1.0), 1e-6))
            if not g.has_edge(a, b) or g[a][b]["cost"] > cost:
                g.add_edge(a, b, cost=cost, weight=w, relation=r)
        out = []
        for i, a in enumerate(keys):
            for b in keys[i + 1:]:
                if a not in g or b not in g:
                    continue
                try:
                    nodes = nx.shortest_path(g, a, b, weight="cost")
                except nx.NetworkXNoPath:
                    continue
                if len(nodes) - 1 > max_hops:
                    continue
                path = Subgraph(nodes=list(nodes))
                for x, y in zip(nodes, nodes[1:]):
                    data = g[x][y]
                    path.edges.append((x, y, data["weight"], data["relation"]))
                out.append(path)
        return out

    def to_networkx(self, nodes: Iterable[str] | None = None) -> Any:
        """The entity graph (or the subgraph on ``nodes``) as a networkx Graph."""
        import networkx as nx

        g = nx.Graph()
        keep = set(nodes) if nodes is not None else None
        for k in (keep if keep is not None else self.entity_keys):
            e = self.graph.entities.get(k)
            if e is not None:
                g.add_node(k, name=e.name, kind=e.kind)
        for a, targets in self._entity_edges().items():
            if keep is not None and a not in keep:
                continue
            for b, w, r in targets:
                if keep is None or b in keep:
                    g.add_edge(a, b, weight=w, relation=r.relation if r else "synonym")
        return g


def _normalised(weights: Mapping[str, float]) -> dict[str, float]:
    total = sum(v for v in weights.values() if v > 0)
    return {k: v / total for k, v in weights.items() if v > 0} if total > 0 else {}


def _rowid_order(key: str) -> tuple[int, str]:
    digits = key[1:] if key[:1] == "r" else ""
    return (int(digits), key) if digits.isdigit() else (1 << 62, key)

