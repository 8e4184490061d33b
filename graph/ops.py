"""The ``graph`` method (RCP §7.9) and ``memory/build`` / ``memory/recall`` (§7.17) over an
engine's knowledge graph: :class:`GraphOps`, handed the engine's parts
(:class:`.context.GraphContext`), never the engine, runs each call from its checked params
(:mod:`rcp_agentic.pipeline.method_params`). ``local`` and ``neighbors`` run here, ``global``,
``drift`` and ``communities`` over the stored communities (:mod:`.communities.ops`; offered
only while the served version holds them). Every op sees only the graph restricted to the
chunks its ``filter`` passes (:func:`.compose.scoped_view`): a node id outside it is answered
as one that does not exist, so ids are no oracle of names the caller cannot see. Each text an
op returns carries the trust of the chunks it comes from (:class:`.sources.SourceTrust`), and
every op runs under the request's deadline and cancellation, checked between stages.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..control import RequestControl, checked
from ..errors import (BackendUnavailable, CapabilityMissing, InvalidParams, NotFound,
                      OptionUnsupported)
from ..pipeline.method_params import MAX_HOPS as MAX_HOPS  # re-exported: the tests' bounds
from ..pipeline.method_params import MAX_SEEDS as MAX_SEEDS
from ..pipeline.method_params import (MAX_NODES, GraphParams, MemoryBuildParams,
                                      MemoryRecallParams, session_id)
from ..pipeline.params import query_text
from ..vocabulary import COMMUNITY_OPS, ENTITY_OPS
from ..wire import (GraphEdge, GraphNode, GraphResult, Hit, MemoryBuildResult, MemoryClue,
                    MemoryRecallResult, Usage)
from .communities.ops import CommunityOps
from .communities.reads import version_of
from .compose import reading_order, relevance, request_view
from .context import GraphContext
from .index import node_uid
from .memory import SessionMemory
from .ppr import GraphView, Subgraph
from .sources import SourceTrust
from .warm import warm_view

MAX_EDGES = 2000  # edges a neighbors or local answer draws
# A session's remembered entities seed recall at this share of the query's own.
SESSION_SHARE = 0.3
NO_GRAPH = ("this engine has no knowledge graph (open it with build_graph=True, or "
            "`rcp-agentic index --graph`)")
_MEMORY_ID = re.compile(r"graph@v(0|[1-9][0-9]{0,17})")
MethodParams = GraphParams | MemoryBuildParams | MemoryRecallParams


def _untrusted(_doc: Any) -> bool:
    """``memory/build`` documents come over the protocol: the operator grants them no trust."""
    return False


class GraphOps:
    """``graph``, ``memory_build`` and ``memory_recall`` of one engine, over its
    :class:`~.context.GraphContext`."""

    def __init__(self, ctx: GraphContext) -> None:
        self.ctx = ctx
        self.memory = SessionMemory(max_sessions=ctx.config.max_sessions,
                                    ttl_seconds=ctx.config.session_ttl_seconds,
                                    budget=ctx.session_budget)
        self.community = CommunityOps(ctx, self._keys_of)

    # --- helpers ----------------------------------------------------------------------------

    def _view(self, version: int | None = None) -> GraphView:
        view = self.ctx.catalog.graph_view(version)
        if view is None:
            raise CapabilityMissing(NO_GRAPH)
        return view

    def scope(self, filter_: Mapping[str, Any] | None,
              version: int | None = None) -> tuple[GraphView, int]:
        """The graph a request with ``filter_`` may see at ``version`` (default: the current
        one): restricted to the chunks that pass the filter; and that version."""
        view, v = request_view(self.ctx.catalog, filter_, version)
        if view is None:
            raise CapabilityMissing(NO_GRAPH)
        return view, v

    def _sources(self) -> SourceTrust:
        return SourceTrust(self.ctx.store.reader, self.ctx.screen)

    def warm(self, version: int, query: str) -> bool:
        """Load what the graph ops and graph recall read lazily at ``version`` (its graph
        view and what the view caches, :func:`.warm.warm_view`; node ids; the communities'
        store and search pool, :meth:`.communities.ops.CommunityOps.warm`), ``query`` being
        any text to link and embed. Whether ``version`` holds communities; nothing to do
        without a graph."""
        view = self.ctx.catalog.graph_view(version)
        if view is None:
            return False
        warm_view(view, self.ctx.catalog.index([("chunk", 0)], version), query)
        self._keys_of(view)
        return self.community.warm(version, query)

    def ops(self) -> list[str]:
        """The ``graph`` ops that work now (``graph.ops`` of the capabilities): none without
        a graph; ``global``, ``drift`` and ``communities`` while communities are stored."""
        if self.ctx.catalog.graph_view() is None:
            return []
        return [*ENTITY_OPS, *COMMUNITY_OPS] if self.community.offered() else list(ENTITY_OPS)

    # --- graph (§7.9) -----------------------------------------------------------------------

    def run(self, params: MethodParams, control: RequestControl | None = None) -> Any:
        """The ``graph``, ``memory/build`` or ``memory/recall`` call ``params`` make."""
        if isinstance(params, MemoryBuildParams):
            return self._memory_build(params, control)
        if isinstance(params, MemoryRecallParams):
            return self._memory_recall(params, control)
        return self._graph(params, control)

    def graph(self, op: str, *, control: RequestControl | None = None,
              **params: Any) -> GraphResult:
        """Run one ``graph`` op; ``params`` are :class:`GraphParams`' (snake_case)."""
        return self._graph(GraphParams.of(self.ctx.config, op=op, **params), control)

    def graph_params(self, raw: Mapping[str, Any]) -> GraphResult:
        """``graph`` from wire params (camelCase, §7.9), under the engine's own limits."""
        return self._graph(GraphParams.wire(raw, config=self.ctx.config), None)

    def _graph(self, p: GraphParams, control: RequestControl | None) -> GraphResult:
        ctl = checked(control)
        ctl.check()
        if p.op == "communities":
            return self.community.communities(level=p.level, k=p.k, cursor=p.cursor,
                                              filter=p.filter, control=ctl)
        if p.op == "global":
            return self.community.global_search(p.query, level=p.level, k=p.k,
                                                token_budget=p.token_budget, filter=p.filter,
                                                control=ctl)
        if p.op == "drift":
            return self.community.drift(p.query, k=p.k, level=p.level, session_id=p.session_id,
                                        filter=p.filter, control=ctl)
        if p.level not in (None, 0):
            raise OptionUnsupported(f"op {p.op!r} works on the entity graph: level 0 only",
                                    option="level")
        if p.op == "local":
            return self.local(p.query, k=p.k or 10, session_id=p.session_id, filter=p.filter,
                              control=ctl)
        return self.neighbors(p.seed_ids or [], hops=p.hops or 1, k=p.k or 10,
                              filter=p.filter, control=ctl)

    def local(self, query: Any, *, k: int = 10, session_id: str | None = None,
              filter: Mapping[str, Any] | None = None,
              control: RequestControl | None = None) -> GraphResult:
        """Entity-anchored, PageRank-expanded chunk hits (``op: "local"``) within ``filter``:
        ranked by graph-aware recall (PageRank fused with dense and sparse, as retrieve with
        ``x-rcp-agentic-graphRecall``: a passage the query names should not lose to one only
        the graph reaches); each hit's ``provenance.nodes`` are the entities it mentions that
        carry the query's PageRank, most relevant first."""
        ctl = checked(control)
        self._view()  # no graph: CapabilityMissing before any work
        raw: dict[str, Any] = {"query": query, "k": k, "unit": "chunk",
                               "x-rcp-agentic-graphRecall": True}
        if session_id is not None:
            raw["sessionId"] = session_id
        if filter is not None:
            raw["filter"] = dict(filter)
        res = self.ctx.retriever.retrieve_params(raw, ctl)
        view, version = self.scope(filter, version_of(res.index_version))
        text = query_text(query, max_chars=self.ctx.config.max_query_chars)
        links = view.link(text)
        rel = relevance(view, view.mass(links)) if links else {}
        ctl.check()
        anchored = [self._anchor(view, h, rel, version) for h in res.hits]
        hits = [hit for hit, _keys in anchored]
        # The picture's nodes: the query's entities (the seeds), then those the hits name.
        shown = [k for k in links if k in view.graph.entities]
        shown += [k for _hit, keys in anchored for k in keys]
        shown = list(dict.fromkeys(shown))[:MAX_NODES]
        if not shown:
            return GraphResult(hits=hits, index_version=res.index_version, usage=res.usage)
        nodes, edges, notes = self._subgraph(view, view.neighbors(shown, hops=0,
                                                                  limit=len(shown)),
                                             set(links), rel)
        usage = res.usage.model_copy(update={"notes": [*(res.usage.notes or []), *notes]
                                             or None}) if res.usage else None
        return GraphResult(hits=hits, nodes=nodes, edges=edges,
                           index_version=res.index_version, usage=usage)

    def _anchor(self, view: GraphView, hit: Hit, rel: Mapping[str, float],
                version: int) -> tuple[Hit, list[str]]:
        """``hit`` with ``provenance.nodes``: the entities its chunk mentions or is about
        that carry the query's PageRank, most relevant first (at most 8); and their keys."""
        if not rel:
            return hit, []
        index = self.ctx.catalog.index([("chunk", 0)], version)
        pos = index.positions_of_uids([hit.id])
        if not len(pos):
            return hit, []
        key = f"r{int(index.rowids[pos[0]])}"
        mine = [e for e in rel if key in view.graph.entities[e].mentions
                or key in view.graph.entities[e].about]
        mine.sort(key=lambda e: (-rel[e], e))
        if not mine:
            return hit, []
        wire = hit.to_wire()
        wire.setdefault("provenance", {})
        wire["provenance"]["nodes"] = [node_uid(e) for e in mine[:8]]
        wire["provenance"].setdefault("leaves", [hit.id])
        return Hit.model_validate(wire), mine[:8]

    def neighbors(self, seed_ids: Sequence[str], *, hops: int = 1, k: int = 10,
                  filter: Mapping[str, Any] | None = None,
                  control: RequestControl | None = None) -> GraphResult:
        """Nodes within ``hops`` of the seeds (at most ``max(k, seeds)``), scored by PageRank
        from the seeds, and the weighted edges among them (strongest first, bounded); all
        within the graph ``filter`` allows (a seed outside it is not a node of this graph)."""
        ctl = checked(control)
        view, version = self.scope(filter)
        ctl.check()
        keys = self._keys_of(view)
        seeds = []
        for i, sid in enumerate(seed_ids):
            if not isinstance(sid, str) or sid not in keys:
                raise InvalidParams(f"seedIds[{i}] is not a node of this graph",
                                    field=f"seedIds[{i}]")
            seeds.append(keys[sid])
        seeds = list(dict.fromkeys(seeds))
        sub = view.neighbors(seeds, hops=hops, limit=min(MAX_NODES, max(k, len(seeds))))
        scores = view.mass({s: 1.0 for s in seeds})
        ctl.check()
        ent = scores[:view.n_entities]
        mass = {key: float(ent[view.e_index[key]]) for key in sub.nodes}
        nodes, edges, notes = self._subgraph(view, sub, set(seeds), mass)
        return GraphResult(nodes=nodes, edges=edges, index_version=f"v{version}",
                           usage=Usage(notes=notes or None))

    def _subgraph(self, view: GraphView, sub: Subgraph, seeds: set[str],
                  mass: Mapping[str, float]) -> tuple[list[GraphNode], list[GraphEdge], list[str]]:
        """``sub``'s nodes (seeds first, then by ``mass``, ties by key) with their names and
        trust, and its edges (one per pair, the strongest; strongest first, bounded)."""
        order = sorted(sub.nodes, key=lambda e: (e not in seeds, -mass.get(e, 0.0), e))
        sources = self._sources()
        entities = view.graph.entities
        sources.prefetch(c for e in order for c in _chunks_of(view, e))
        nodes = [GraphNode(id=node_uid(e), score=round(mass.get(e, 0.0), 8),
                           name=entities[e].name, seed=True if e in seeds else None,
                           trust=sources.of(_chunks_of(view, e), entities[e].name))
                 for e in order]
        best: dict[tuple[str, str], float] = {}
        for a, b, w, _r in sub.edges:
            pair = (min(a, b), max(a, b))
            best[pair] = max(best.get(pair, 0.0), float(w))
        edges = [GraphEdge(src=node_uid(a), dst=node_uid(b), weight=round(w, 6))
                 for (a, b), w in sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))]
        notes = []
        if len(edges) > MAX_EDGES:
            notes.append(f"kept the {MAX_EDGES} strongest of {len(edges)} edges")
            edges = edges[:MAX_EDGES]
        return nodes, edges, notes

    def _keys_of(self, view: GraphView) -> dict[str, str]:
        """Node unit id -> entity key, per view (cached on it)."""
        cached: dict[str, str] | None = getattr(view, "_node_keys", None)
        if cached is None:
            cached = {node_uid(k): k for k in view.entity_keys}
            view._node_keys = cached  # type: ignore[attr-defined]
        return cached

    # --- memory (§7.17) ---------------------------------------------------------------------

    def memory_build(self, documents: Sequence[Mapping[str, Any]] | None = None, *,
                     control: RequestControl | None = None, **params: Any) -> MemoryBuildResult:
        """``memory/build``; ``params`` are :class:`MemoryBuildParams`' (snake_case)."""
        return self._memory_build(MemoryBuildParams.of(self.ctx.config, documents=documents,
                                                       **params), control)

    def _memory_build(self, p: MemoryBuildParams,
                      control: RequestControl | None) -> MemoryBuildResult:
        """Build or refresh the memory: the graph is the memory. Global: inline documents are
        added through the engine's normal add path, the graph brought up to date with it, and
        the id ``graph@v<version>`` is stable for a corpus version and pins that snapshot for
        recall. Session: the entities the documents name (within ``filter``) are kept under
        the session; nothing is added to the corpus. ``tokens``: the memory's size (node and
        triplet texts, or the session's entity names)."""
        if "node" not in self.ctx.builders.builders:
            raise CapabilityMissing("memory is the knowledge graph, which this engine does not "
                                    "build (open it with build_graph=True)")
        if p.filter is not None and p.scope != "session":
            raise OptionUnsupported("filter scopes a session memory; the global memory is the "
                                    "corpus's graph, built from every document", option="filter")
        ctl = checked(control)
        if p.memory_id is not None:
            self._memory_version(p.memory_id)
        docs = p.documents or []
        if p.scope == "session" and p.session_id is not None:
            session = p.session_id
            view, _v = self.scope(p.filter)
            found: dict[str, float] = {}
            for doc in docs:
                ctl.check()
                for key, w in view.link(doc["text"]).items():
                    found[key] = max(found.get(key, 0.0), float(w))
            ctl.check()  # nothing is remembered for a request stopped before here
            held = self.memory.add(session, found)
            names = [view.graph.entities[k].name for k in self.memory.get(session)
                     if k in view.graph.entities]
            from ..models.tokenizer import count_tokens

            return MemoryBuildResult(memory_id=f"session:{session}",
                                     tokens=count_tokens(" ".join(names)) if held else 0)
        if docs:
            self.ctx.ingest.add(docs, _untrusted, None, ctl)  # the normal add path
        if not docs or self.ctx.config.derived_updates != "inline":
            # The memory answers with its graph built: not left to the background worker.
            self.ctx.builders.update(only="node")
        version = self.ctx.store.index_version()
        tokens = 0
        for kind in ("node", "triplet"):
            tokens += int(self.ctx.catalog.index([(kind, 0)], version).tokens.sum())
        return MemoryBuildResult(memory_id=f"graph@v{version}", tokens=tokens)

    def _memory_version(self, memory_id: str) -> int | None:
        """The snapshot a ``graph@v<N>`` memory id pins (None for a session memory id). An id
        this engine never gave is NotFound (-32015); a snapshot since collected is
        BackendUnavailable (-32010, not retryable), as a pinned ``indexVersion`` is."""
        if memory_id.startswith("session:"):
            return None
        shown = memory_id if len(memory_id) <= 40 else memory_id[:40] + "…"
        match = _MEMORY_ID.fullmatch(memory_id)
        current = self.ctx.catalog.served_version(None)
        if match is None or int(match[1]) > current:
            raise NotFound(f"memoryId {shown!r} is not a memory of this engine (graph@v<version> "
                           "as memory/build returned it, or session:<sessionId>)",
                           field="memoryId")
        try:
            return self.ctx.catalog.served_version(f"v{match[1]}")
        except BackendUnavailable as exc:
            raise BackendUnavailable(f"memoryId {shown!r} pins a snapshot this engine no longer "
                                     f"keeps: {exc.message}", field="memoryId",
                                     retryable=False) from None

    def memory_recall(self, query: Any, *, control: RequestControl | None = None,
                      **params: Any) -> MemoryRecallResult:
        """``memory/recall``; ``params`` are :class:`MemoryRecallParams`' (snake_case)."""
        return self._memory_recall(MemoryRecallParams.of(self.ctx.config, query=query,
                                                         **params), control)

    def _memory_recall(self, p: MemoryRecallParams,
                       control: RequestControl | None) -> MemoryRecallResult:
        """Clues for the query: its entities (``seedIds``, weight 1), then up to ``n - 1``
        bridging facts — an entity the query's PageRank reaches (relevance = mass x
        specificity), joined to a query entity by an attested relation — as a surrogate query
        ``"<A> <relation words> <B>"`` with both seed ids, weighted by relevance relative to
        the best; and draft hits (``local``, k=n). A session's remembered entities also seed
        PageRank (``SESSION_SHARE``), and the entities of this recall are remembered.
        Everything comes from the graph ``filter`` allows; a ``memoryId`` of a session that
        holds no memory is NotFound."""
        n, session, filter_, memory_id = p.n, p.session_id, p.filter, p.memory_id
        text = query_text(p.query, max_chars=self.ctx.config.max_query_chars)
        ctl = checked(control)
        version = self._memory_version(memory_id) if memory_id is not None else None
        if memory_id is not None and memory_id.startswith("session:"):
            named = session_id(memory_id[len("session:"):], self.ctx.config.max_session_id_chars)
            if named is None or named not in self.memory:
                raise NotFound("memoryId names no session memory of this engine (build it with "
                               "memory/build scope 'session'; it expires unused)",
                               field="memoryId")
            session = session or named
        view, version = self.scope(filter_, version)
        ctl.check()
        notes: list[str] = []
        links = view.link(text)
        if not links:
            links = self._fallback_links(view, text, version, filter_, ctl)
            if links:
                notes.append("the query names no entity of the graph: clues start from the "
                             "entities of its best hybrid passages")
        remembered = self.memory.get(session) if session else {}
        seeds = {k: w for k, w in links.items()}
        if remembered:
            top = max(remembered.values())
            total = sum(links.values()) or 1.0
            for key, w in remembered.items():
                if key in view.e_index:
                    seeds[key] = seeds.get(key, 0.0) + SESSION_SHARE * total * w / top / len(
                        remembered)
        clues: list[MemoryClue] = []
        if seeds:
            rel = relevance(view, view.mass(seeds))
            ctl.check()
            names = view.graph.entities
            sources = self._sources()
            anchors = sorted(links, key=lambda e: (-links[e], e))
            if anchors:
                said = " ".join(names[e].name for e in anchors[:4])
                clues.append(MemoryClue(query=said, seed_ids=[node_uid(e) for e in anchors],
                                        weight=1.0, trust=sources.of(
                                            [c for e in anchors[:4] for c in _chunks_of(view, e)],
                                            said)))
            clues.extend(self._bridges(view, set(seeds), rel, n - len(clues), sources))
            if session:
                self.memory.add(session, {**{k: 1.0 for k in links},
                                          **{k: 0.5 for c in clues[1:] for k in
                                             self._keys_from(view, c.seed_ids or [])}})
        draft = None
        if clues and version == self.ctx.store.index_version():
            draft = self.local(text, k=n, session_id=None, filter=filter_, control=ctl).hits
        return MemoryRecallResult(clues=clues[:n], hits=draft, usage=Usage(notes=notes or None))

    def _keys_from(self, view: GraphView, ids: Sequence[str]) -> list[str]:
        keys = self._keys_of(view)
        return [keys[i] for i in ids if i in keys]

    def _bridges(self, view: GraphView, anchors: set[str], rel: Mapping[str, float],
                 n: int, sources: SourceTrust) -> list[MemoryClue]:
        """Bridging facts from the anchors to the entities PageRank reaches, best first, each
        with the trust of the chunks attesting its relation."""
        if n <= 0:
            return []
        names = view.graph.entities
        sub = view.neighbors(sorted(anchors), hops=1, limit=MAX_NODES)
        best: dict[str, tuple[float, str, list[str], tuple[str, ...]]] = {}
        for a, b, _w, r in sub.edges:
            if (a in anchors) == (b in anchors) or r is None:
                continue
            anchor, other = (a, b) if a in anchors else (b, a)
            score = rel.get(other, 0.0)
            if score <= 0:
                continue
            first, second = reading_order(r, names[r.subject], names[r.object])
            query = f"{first} {r.relation} {second}".strip()
            if other not in best or score > best[other][0]:
                best[other] = (score, query, [node_uid(anchor), node_uid(other)], r.chunks)
        ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:n]
        if not ranked:
            return []
        top = ranked[0][1][0]
        return [MemoryClue(query=q, seed_ids=ids, weight=round(s / top, 6),
                           trust=sources.of(chunks, q))
                for _k, (s, q, ids, chunks) in ranked]

    def _fallback_links(self, view: GraphView, text: str, version: int,
                        filter_: Mapping[str, Any] | None,
                        control: RequestControl) -> dict[str, float]:
        """Entities of the best three hybrid passages within the filter, by specificity (for a
        query that names no entity of the graph)."""
        raw: dict[str, Any] = {"query": text, "k": 3, "unit": "chunk", "includeText": False,
                               "indexVersion": f"v{version}"}
        if filter_ is not None:
            raw["filter"] = dict(filter_)
        res = self.ctx.retriever.retrieve_params(raw, control)
        if not res.hits:
            return {}
        index = self.ctx.catalog.index([("chunk", 0)], version)
        wanted = {f"r{int(index.rowids[p])}" for p in index.positions_of_uids(
            [h.id for h in res.hits])}
        out: dict[str, float] = {}
        for key, e in view.graph.entities.items():
            if e.kind in ("date", "number"):
                continue
            if wanted & (set(e.mentions) | set(e.about)):
                out[key] = view.specificity(key)
        best = sorted(out.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        return dict(best)


def _chunks_of(view: GraphView, key: str) -> list[str]:
    """The chunk keys that mention an entity or are about it, in the view's scope."""
    e = view.graph.entities[key]
    return [*e.mentions, *e.about]
