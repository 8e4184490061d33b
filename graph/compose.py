"""Query-time graph work: the graph one request may see, its PageRank, and the composed units.

Everything here reads a :class:`~.ppr.GraphView` of one index version:

* :func:`restrict` / :func:`scoped_view` — the graph as a filtered request may see it (only
  allowed chunks, their entities, relations whose evidence lies in an allowed document), so
  an excluded chunk neither appears nor carries PageRank mass;
* :func:`pagerank` — HippoRAG's personalised PageRank from the query's linked entities plus
  a small share on the passage prior, over entities and passages;
* :class:`Composer` — the ``path`` and ``subgraph`` units (RCP §7.7.2), composed at query
  time and deterministic for a snapshot (cursors page them); :func:`composers` gives them to
  the engine. A path scores the mean PageRank mass of its entities, a subgraph slice the sum
  of its triplets' masses (a triplet's: the mean of its two entities').
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..models.tokenizer import count_tokens
from ..store.reads import RowsOnce, lowest_trust
from .stored import node_uid, object_first
from .stored import triplet_uids as stored_triplet_uids
from .model import Entity, GraphData, Relation
from .ppr import GraphView

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..store.docstore import Docstore

# Endpoints of candidate paths: the strongest linked entities, then the entities PageRank
# ranks highest (so one linked entity still gets paths to where its mass flows).
PATH_LINKED = 4
PATH_EXPANDED = 4
PATH_MAX_HOPS = 4
# Tokens of one subgraph hit when the request sets no tokenBudget.
SUBGRAPH_TOKENS = 256
# At most this many composed candidates per request (pages of a cursor included).
MAX_COMPOSED = 200
# Restricted views kept per process (a filter repeated by an agent reuses its view).
_SCOPED_CACHE = 8


# --- the graph a request may see -------------------------------------------------------------

def restrict(graph: GraphData, allowed: Iterable[str]) -> GraphData:
    """``graph`` reduced to the chunk keys in ``allowed``: mentions, about-passages and
    attestations elsewhere dropped, entities left without any dropped, relations kept only
    when an allowed chunk attests them and their evidence sentence comes from an allowed
    chunk's document (the relation's words are that sentence's)."""
    keep = set(allowed) & set(graph.chunk_docs)
    docs = {graph.chunk_docs[c] for c in keep}
    entities: dict[str, Entity] = {}
    for key, e in graph.entities.items():
        mentions = {c: w for c, w in e.mentions.items() if c in keep}
        about = tuple(c for c in e.about if c in keep)
        if not mentions and not about:
            continue
        spans = tuple(s for s in e.spans if s.doc_id in docs)
        entities[key] = Entity(key=key, name=e.name, kind=e.kind, aliases=e.aliases,
                               description="", spans=spans, mentions=mentions, about=about)
    relations = []
    for r in graph.relations:
        chunks = tuple(c for c in r.chunks if c in keep)
        if not chunks or r.subject not in entities or r.object not in entities:
            continue
        if r.span is not None and r.span.doc_id not in docs:
            continue
        relations.append(Relation(r.subject, r.object, r.relation, r.evidence, r.span, chunks,
                                  r.weight, r.typed))
    synonyms = [s for s in graph.synonyms if s.a in entities and s.b in entities]
    return GraphData(entities, relations, synonyms,
                     {c: d for c, d in graph.chunk_docs.items() if c in keep})


_scoped: OrderedDict[tuple[int, int, frozenset[str]], GraphView] = OrderedDict()
_scoped_lock = threading.Lock()


def scoped_view(view: GraphView, allowed: frozenset[str] | None) -> GraphView:
    """The view a request with chunk keys ``allowed`` may use (``view`` itself without a
    filter); restricted views are cached (LRU, a few) per base view and allowed set."""
    if allowed is None or allowed >= set(view.chunk_keys):
        return view
    key = (id(view), len(view.chunk_keys), allowed)
    with _scoped_lock:
        got = _scoped.get(key)
        if got is not None:
            _scoped.move_to_end(key)
            return got
    scoped = GraphView(restrict(view.graph, allowed), weights=view.weights,
                       word_df=view.word_df)
    with _scoped_lock:
        _scoped[key] = scoped
        while len(_scoped) > _SCOPED_CACHE:
            _scoped.popitem(last=False)
    return scoped


def request_view(catalog: Catalog, filter_: Mapping[str, Any] | None,
                 version: int | None = None) -> tuple[GraphView | None, int]:
    """The graph a request with ``filter_`` may see at ``version`` (default: the current
    one), and that version; the view is None when the version holds no graph."""
    v = catalog.served_version(None) if version is None else version
    view = catalog.graph_view(v)
    if view is None:
        return None, v
    return scoped_view(view, catalog.chunk_scope(filter_, v)), v


# --- PageRank ---------------------------------------------------------------------------------

def chunk_masses(view: GraphView, scores: np.ndarray) -> dict[str, float]:
    """Passage masses by chunk key (positive ones)."""
    part = scores[view.n_entities:]
    return {view.chunk_keys[i]: float(part[i]) for i in np.flatnonzero(part > 0)}


_positions_cache: OrderedDict[tuple[int, int], tuple[GraphView, Any, np.ndarray]] = OrderedDict()


def chunk_positions(view: GraphView, position: Mapping[int, int]) -> np.ndarray:
    """For each passage of ``view`` (in its chunk order), its position in a unit index
    (``position``: rowid -> position; -1 where the index does not hold it). Cached for the
    last few (view, index) pairs: at 50k chunks the lookups cost more than the PageRank."""
    key = (id(view), id(position))
    with _scoped_lock:
        got = _positions_cache.get(key)
        if got is not None and got[0] is view and got[1] is position:
            return got[2]
    out = np.fromiter((position.get(int(k[1:]), -1) for k in view.chunk_keys),
                      dtype=np.int64, count=len(view.chunk_keys))
    with _scoped_lock:
        _positions_cache[key] = (view, position, out)
        while len(_positions_cache) > 4:
            _positions_cache.popitem(last=False)
    return out


def entity_masses(view: GraphView, scores: np.ndarray) -> dict[str, float]:
    """Entity masses by entity key (positive ones)."""
    part = scores[:view.n_entities]
    return {view.entity_keys[i]: float(part[i]) for i in np.flatnonzero(part > 0)}


def community_masses(view: GraphView, scores: np.ndarray,
                     communities: Iterable[Any]) -> dict[str, float]:
    """Community id -> the mass its members hold (positive ones); ``communities`` have
    ``id`` and ``members`` (entity keys), as ``communities.index.StoredCommunity``."""
    ent = entity_masses(view, scores)
    return {c.id: m for c in communities if (m := sum(ent.get(k, 0.0) for k in c.members)) > 0}


def relevance(view: GraphView, scores: np.ndarray) -> dict[str, float]:
    """Entity relevance for composition: PageRank mass times specificity (1 / passages
    mentioning it), so hubs that collect mass from everywhere ("United States") do not
    crowd out the specific entities that bridge the query's."""
    return {k: m * view.specificity(k) for k, m in entity_masses(view, scores).items()}


def node_masses(view: GraphView, scores: np.ndarray) -> dict[str, float]:
    """``node`` unit id -> its entity's mass (the graph score of a node unit)."""
    return {node_uid(k): m for k, m in entity_masses(view, scores).items()}


_triplet_cache: OrderedDict[int, tuple[GraphData, list[str]]] = OrderedDict()


def triplet_uids(graph: GraphData) -> list[str]:
    """The stored ``triplet`` unit id of each relation of ``graph``, in order (the rule of
    :func:`.stored.graph_units`: a repeated (subject, relation, object) is told apart by its
    evidence and sources). Cached for the last few graphs."""
    with _scoped_lock:
        got = _triplet_cache.get(id(graph))
        if got is not None and got[0] is graph:
            return got[1]
    out = stored_triplet_uids(graph)
    with _scoped_lock:
        _triplet_cache[id(graph)] = (graph, out)
        while len(_triplet_cache) > 4:
            _triplet_cache.popitem(last=False)
    return out


def triplet_masses(view: GraphView, scores: np.ndarray) -> dict[str, float]:
    """``triplet`` unit id -> the mean mass of its two entities (positive ones)."""
    ent = scores[:view.n_entities]
    out: dict[str, float] = {}
    for uid, r in zip(triplet_uids(view.graph), view.graph.relations):
        a, b = view.e_index.get(r.subject), view.e_index.get(r.object)
        if a is None or b is None:
            continue
        m = 0.5 * float(ent[a] + ent[b])
        if m > 0:
            out[uid] = m
    return out


# --- composed units ---------------------------------------------------------------------------

@dataclass
class Composed:
    """One composed unit (a path or a subgraph slice), before it becomes a Hit."""

    uid: str
    unit: str
    text: str
    score: float
    path: list[str] = field(default_factory=list)      # node ids in order (a path)
    nodes: list[str] = field(default_factory=list)     # node ids shown
    edges: list[tuple[str, str, float]] = field(default_factory=list)  # node ids, weight
    relations: list[str] = field(default_factory=list)  # what joins each edge's two entities
    names: dict[str, str] = field(default_factory=dict)  # node id -> entity name
    leaves: list[int] = field(default_factory=list)    # chunk rowids whose sentences it shows
    leaf_uids: list[str] = field(default_factory=list)
    leaf_docs: list[str] = field(default_factory=list)  # the document of each leaf
    doc_ids: list[str] = field(default_factory=list)   # their documents, most-shown first
    citation: dict[str, Any] = field(default_factory=dict)
    citations: list[dict[str, Any]] = field(default_factory=list)
    trust: dict[str, Any] = field(default_factory=dict)
    tokens: int = 0


def composed_uid(unit: str, nodes: Sequence[str], extra: str = "") -> str:
    """A stable id from the node sequence (a path read either way is one path)."""
    seq = list(nodes)
    if unit == "path" and seq[::-1] < seq:
        seq = seq[::-1]
    raw = "\x1f".join([*seq, extra]).encode("utf-8")
    return f"{unit}:" + hashlib.sha1(raw).hexdigest()[:16]


def _row(key: str) -> int:
    return int(key[1:])


class _Evidence(RowsOnce[dict[str, Any]]):
    """Which allowed chunk shows a relation's evidence sentence (hydrated rows, cached)."""

    def __init__(self, store: Docstore, graph: GraphData) -> None:
        super().__init__(store.hydrate)
        self.store = store
        self.graph = graph

    def chunk_of(self, r: Relation) -> int | None:
        """The allowed chunk holding ``r``'s evidence sentence (None: none visible)."""
        rows = [_row(c) for c in r.chunks]
        self.fetch(rows)
        if r.span is None:
            return rows[0] if rows else None
        for rowid in rows:
            row = self.rows.get(rowid)
            if row is None or row["doc_id"] != r.span.doc_id:
                continue
            start, end = row.get("start"), row.get("end")
            if start is None or end is None or (start <= r.span.start and r.span.end <= end):
                return rowid
        return None


def _finish(c: Composed, ev: _Evidence) -> Composed:
    """Leaf ids, documents, citations and trust of a composed unit from its leaf rows."""
    ev.fetch(c.leaves)
    rows = [ev.rows[r] for r in c.leaves if r in ev.rows]
    c.leaf_uids = [row["uid"] for row in rows]
    c.leaf_docs = [row["doc_id"] for row in rows]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["doc_id"]] = counts.get(row["doc_id"], 0) + 1
    c.doc_ids = sorted(counts, key=lambda d: (-counts[d], d))
    c.citations = [{k: v for k, v in {
        "id": row["uid"], "docId": row["doc_id"], "source": row["source"] or row["doc_id"],
        "uri": row["uri"], "title": row["title"], "start": row["start"], "end": row["end"],
        "page": row["page_start"]}.items() if v is not None} for row in rows]
    if rows:
        first = rows[0]
        c.citation = {"source": first["source"] or first["doc_id"], "uri": first["uri"],
                      "title": first["title"], "start": first["start"], "end": first["end"],
                      "page": first["page_start"]}
        level = lowest_trust(row["trust"] for row in rows)
        suspected = any(bool(row["injection_suspected"]) for row in rows)
        c.trust = {"level": level, "injection_suspected": suspected}
    c.tokens = count_tokens(c.text)
    return c


def compose_paths(view: GraphView, links: Mapping[str, float], scores: np.ndarray,
                  ev: _Evidence, *, max_hops: int = PATH_MAX_HOPS,
                  limit: int = MAX_COMPOSED) -> list[Composed]:
    """Weighted shortest paths between the query's entities (and the entities their
    PageRank reaches), rendered hop by hop ``A —[evidence sentence]→ B → …``, best first."""
    names = view.graph.entities
    linked = [k for k, _w in sorted(links.items(), key=lambda kv: (-kv[1], kv[0]))
              if k in names][:PATH_LINKED]
    if not linked:
        return []
    mass = relevance(view, scores)
    expanded = [k for k, _m in sorted(mass.items(), key=lambda kv: (-kv[1], kv[0]))
                if k not in linked][:PATH_EXPANDED]
    out: dict[str, Composed] = {}
    for sub in view.paths([*linked, *expanded], max_hops=max_hops):
        seq = list(sub.nodes)
        if not set(seq[::len(seq) - 1]) & set(linked):
            continue  # a path between two expanded entities: not anchored in the query
        if seq[-1] in linked and seq[0] not in linked:
            seq = seq[::-1]
        steps = {(a, b): (w, r) for a, b, w, r in sub.edges}
        steps.update({(b, a): v for (a, b), v in list(steps.items())})
        parts = [names[seq[0]].name]
        leaves: list[int] = []
        edges: list[tuple[str, str, float]] = []
        relations: list[str] = []
        shown = True
        for a, b in zip(seq, seq[1:]):
            w, r = steps[(a, b)]
            if r is None:
                parts.append(f" —[same as]→ {names[b].name}")
                relations.append("same as")
            else:
                rowid = ev.chunk_of(r)
                if rowid is None:  # its evidence is not in a chunk this request may see
                    shown = False
                    break
                leaves.append(rowid)
                parts.append(f" —[{' '.join(r.evidence.split()) or r.relation}]→ {names[b].name}")
                relations.append(r.relation or "related to")
            edges.append((node_uid(a), node_uid(b), round(float(w), 6)))
        if not shown or not leaves:
            continue  # a hidden hop, or only synonym hops: no evidence to show
        ids = [node_uid(k) for k in seq]
        score = float(np.mean([mass.get(k, 0.0) for k in seq]))
        c = Composed(uid=composed_uid("path", ids), unit="path", text="".join(parts),
                     score=score, path=ids, nodes=list(dict.fromkeys(ids)), edges=edges,
                     relations=relations, names={node_uid(k): names[k].name for k in seq},
                     leaves=list(dict.fromkeys(leaves)))
        if c.uid not in out or out[c.uid].score < score:
            out[c.uid] = c
    ranked = sorted(out.values(), key=lambda c: (-c.score, c.uid))[:limit]
    return [_finish(c, ev) for c in ranked]


def compose_subgraphs(view: GraphView, links: Mapping[str, float], scores: np.ndarray,
                      ev: _Evidence, *, share: int, limit: int = MAX_COMPOSED
                      ) -> list[Composed]:
    """The PageRank neighbourhood of the query's entities as compact triplets
    ``A — relation — B``, strongest first, cut into slices of at most ``share`` tokens:
    the first slice is the tightest neighbourhood, each next one the next ring of facts."""
    if not any(k in view.graph.entities for k in links):
        return []
    names = view.graph.entities
    mass = relevance(view, scores)
    best: dict[tuple[str, str], tuple[float, Relation]] = {}
    for r in view.graph.relations:
        m = 0.5 * (mass.get(r.subject, 0.0) + mass.get(r.object, 0.0))
        if m <= 0:
            continue
        pair = (min(r.subject, r.object), max(r.subject, r.object))
        if pair not in best or (m, r.weight) > (best[pair][0], best[pair][1].weight):
            best[pair] = (m, r)
    ranked = sorted(best.values(), key=lambda mr: (-mr[0], mr[1].subject, mr[1].object))
    out: list[Composed] = []
    lines: list[str] = []
    members: list[tuple[float, Relation, int]] = []
    used = 0

    def flush() -> None:
        nonlocal lines, members, used
        if not members:
            return
        nodes = list(dict.fromkeys(node_uid(k) for _m, r, _rid in members
                                   for k in (r.subject, r.object)))
        edges = [(node_uid(r.subject), node_uid(r.object), round(float(r.weight), 6))
                 for _m, r, _rid in members]
        unit = Composed(uid=composed_uid("subgraph", [f"{a}>{b}" for a, b, _w in edges]),
                        unit="subgraph", text="\n".join(lines),
                        score=float(sum(m for m, _r, _rid in members)), nodes=nodes,
                        edges=edges, leaves=list(dict.fromkeys(rid for _m, _r, rid in members)),
                        relations=[r.relation or "related to" for _m, r, _rid in members],
                        names={node_uid(k): names[k].name for _m, r, _rid in members
                               for k in (r.subject, r.object)})
        out.append(_finish(unit, ev))
        lines, members, used = [], [], 0

    for m, r in ranked:
        if len(out) >= limit:
            break
        rowid = ev.chunk_of(r)
        if rowid is None:
            continue
        first, second = reading_order(r, names[r.subject], names[r.object])
        line = f"{first} — {r.relation or 'related to'} — {second}"
        cost = count_tokens(line) + (1 if lines else 0)
        if cost > share:
            continue  # one fact longer than a whole share is never shown
        if used + cost > share:
            flush()
            cost -= 1
        lines.append(line)
        members.append((m, r, rowid))
        used += cost
    if len(out) < limit:
        flush()
    return out


def reading_order(r: Relation, subject: Entity, obj: Entity) -> tuple[str, str]:
    """The two names in the order the evidence reads them (an offline relation is the words
    between the two mentions), as the stored triplet's text shows them."""
    if object_first(subject, obj, r):
        return obj.name, subject.name
    return subject.name, obj.name


class Composer:
    """Composes one kind (``path`` or ``subgraph``) for a retrieve; set in
    ``engine.composers`` (:func:`composers`). Called with the request's scoped view, its
    linked entities, the passage prior, ``k`` and ``token_budget``; returns the ranked
    candidates (the pipeline then applies sessions, ``minScore``, packing and cursors)."""

    def __init__(self, store: Docstore, unit: str) -> None:
        if unit not in ("path", "subgraph"):
            raise ValueError(f"cannot compose {unit!r}")
        self.store = store
        self.unit = unit

    def __call__(self, view: GraphView, links: Mapping[str, float],
                 prior: Mapping[str, float] | None, *, k: int,
                 token_budget: int | None) -> list[Composed]:
        scores = view.mass(links, prior)
        ev = _Evidence(self.store, view.graph)
        if self.unit == "path":
            return compose_paths(view, links, scores, ev)
        share = max(1, token_budget // max(1, k)) if token_budget else SUBGRAPH_TOKENS
        return compose_subgraphs(view, links, scores, ev, share=share)


def composers(store: Docstore) -> dict[str, Composer]:
    """The path and subgraph composers over ``store``: an engine that holds them offers both
    units while the served version holds a graph."""
    return {unit: Composer(store, unit) for unit in ("path", "subgraph")}
