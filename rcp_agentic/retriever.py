"""The retrieve pipeline of an engine: one request through its stages, in order.

Validate and plan (:mod:`.pipeline.params`) → snapshot (:mod:`.catalog`) → transform the query
with the LLM when ``rewrite`` asks (:mod:`.pipeline.rewrite`; several queries run the stages
below once each and are fused by rank before packing) → recall from each source the plan
wants (dense, sparse: :mod:`.pipeline.sources`; graph recall and its bridge hop from the
graph's plug-in, :mod:`.plugins`; ``candidate_k`` deep, deeper by what the session has seen)
→ fuse → session dedup → rerank → rank by confidence → recency → ``minScore`` → MMR
(:mod:`.pipeline.stages`, :mod:`.pipeline.scoring`) → pack to ``k`` and ``tokenBudget`` from
the cursor's place (:mod:`.pipeline.paging`) → hits with citations, trust and calibrated
confidence (:mod:`.pipeline.hits`). Composed kinds (path, subgraph) take their units from a
composer instead of recall and share the rest (:mod:`.pipeline.composed`).

A :class:`Retriever` is built by the engine from its parts and never calls back into it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from . import plugins, units
from .catalog import Catalog
from .config import EngineConfig
from .control import RequestControl, checked
from .errors import InvalidParams, OptionUnsupported
from .models.embedder import TimedEmbedder
from .models.llm import ChatLLM
from .models.reranker import Reranker
from .pipeline import composed, cursor, paging, rewrite, stages
from .pipeline.candidates import Candidates, Query, Request
from .pipeline.composed import ComposedRecall
from .pipeline.confidence import Calibrator
from .pipeline.cursor import query_hash
from .pipeline.evidence import packing_containment
from .pipeline.hits import stored_hits
from .pipeline.params import PARAM_NAMES, make_plan, parse_params
from .pipeline.scoring import Scorer
from .pipeline.session_units import composed_candidate, stored_candidates
from .pipeline.sources import DenseSource, RecallSource, SparseSource
from .pipeline.traversal import traverse
from .sessions import SessionStore
from .store.filters import compile_filter
from .store.recall import RecallBackend
from .vocabulary import DENSE_MODES, MULTI_QUERY_METHODS, SPARSE_MODES, TRANSFORM_METHODS
from .wire import Hit, RetrieveResult


class Retriever:
    """``retrieve`` over one engine's catalog and recall backend (module doc).

    ``composers`` maps each composed kind the engine serves to its composer; ``secret``
    signs cursors; ``chat`` is the engine's LLM (None: offline, no ``rewrite``; the engine
    sets it again when its LLM changes).
    """

    def __init__(self, *, catalog: Catalog, recall: RecallBackend, embedder: TimedEmbedder,
                 reranker: Reranker | None, calibrator: Calibrator | None,
                 sessions: SessionStore, config: EngineConfig,
                 composers: Mapping[str, Callable[..., Any]], secret: bytes,
                 chat: ChatLLM | None = None) -> None:
        self.catalog = catalog
        self.store = catalog.store
        self.recall = recall
        self.embedder = embedder
        self.reranker = reranker
        self.sessions = sessions
        self.config = config
        self.composers = composers
        self.secret = secret
        self.chat = chat
        self._graph: RecallSource | None = None  # made by the first graph-recall request
        self.sources: list[RecallSource] = [DenseSource(recall, self.store),
                                            SparseSource(recall)]
        self.composed = ComposedRecall(
            recall, embedder, sessions, reranker, catalog.query_terms,
            graph_scope=lambda *a: plugins.graph().graph_scope(*a),
            chunk_prior=lambda *a: plugins.graph().chunk_prior(*a))
        self.calibrator = calibrator

    @property
    def calibrator(self) -> Calibrator | None:
        """The confidence calibration (None: hits carry no confidence)."""
        return self._calibrator

    @calibrator.setter
    def calibrator(self, calibrator: Calibrator | None) -> None:
        self._calibrator = calibrator
        if self._graph is not None:
            self._graph.calibrator = calibrator  # type: ignore[attr-defined]
        self.scorer = (Scorer(calibrator, self.recall, self.store) if calibrator is not None
                       else None)

    def retrieve(self, query: Any, k: int = 10, **options: Any) -> RetrieveResult:
        """Ranked hits for ``query``; options are the RCP/1 retrieve params (§7.7) in
        snake_case (unknown ones are InvalidParams)."""
        unknown = [name for name in options if name not in PARAM_NAMES]
        if unknown:
            raise InvalidParams(f"unknown retrieve option(s): {', '.join(sorted(unknown))}",
                                field=unknown[0])
        return self.retrieve_params({"query": query, "k": k, **options})

    def retrieve_params(self, raw: dict[str, Any],
                        control: RequestControl | None = None) -> RetrieveResult:
        """``retrieve`` from a raw params object (wire camelCase or snake_case). ``control``
        stops the work between stages on cancel or deadline and receives progress, with the
        fused top ``k`` as partial hits after recall."""
        request = self._request(raw, checked(control))
        if request.plan.rewrite is None:
            return self._retrieve(request)
        done = rewrite.rewrite(request, self.chat, self.config.max_query_chars)
        result = (self._retrieve_many(request, done.queries)
                  if request.plan.rewrite in MULTI_QUERY_METHODS else self._retrieve(request))
        result.rewritten_query = done.reported
        return result

    def _retrieve(self, request: Request) -> RetrieveResult:
        """One planned request through the stages (a composed kind through its composer)."""
        if units.get(request.plan.unit).composed:
            return self._retrieve_composed(request)
        query = self._query(request)
        cands = self._recall(query)
        self._rank(query, cands)
        return self._page(query, cands)

    def warm(self, raw: dict[str, Any]) -> int:
        """Load what a retrieve with ``raw`` reads before recall — the offer, the plan's pool
        index at the served version, the query's vector (the query encoder on first use)
        and its terms — without recalling, ranking or touching a session; returns the
        version served."""
        return self._query(self._request(raw, checked(None))).snapshot.version

    # --- the stored-unit path, stage by stage ---------------------------------------------

    def _request(self, raw: dict[str, Any], ctl: RequestControl) -> Request:
        """Validate, plan against what the engine offers, and pin the snapshot (the cursor's,
        else the pinned or current version)."""
        started = time.perf_counter()
        params = parse_params(raw)
        plan = make_plan(params, self.config,
                         rerank_method=self.reranker.method if self.reranker else None,
                         can_rank_by_confidence=self.calibrator is not None,
                         offered=self.catalog.offered(),
                         transform_methods=TRANSFORM_METHODS if self.chat else ())
        qhash = query_hash(params.model_dump(
            mode="json", exclude={"cursor", "meta", "index_version", "strict"}))
        state = (cursor.decode(plan.cursor, self.secret, qhash) if plan.cursor is not None
                 else None)
        if state is not None and plan.index_version not in (None, f"v{state.version}"):
            raise InvalidParams("indexVersion differs from the snapshot the cursor pages",
                                field="indexVersion")
        snapshot = self.catalog.snapshot(f"v{state.version}" if state else plan.index_version)
        if plan.recency_field and snapshot.fields.get(plan.recency_field) != "date":
            raise InvalidParams(f"recency.field {plan.recency_field!r} is not a declared date "
                                "field", field="recency.field")
        return Request(plan, params.strict, state, snapshot, qhash, started, ctl)

    def _query(self, request: Request) -> Query:
        """The pool's index, the units the filter and level allow, the query's vector and
        terms (and the tree traversal's choice of units)."""
        plan, snapshot = request.plan, request.snapshot
        query = Query(request, snapshot.index(plan.kinds))
        lag = snapshot.lag(plan.kinds)
        if lag:
            plan.notes.append(lag)
        self._scope(query)
        if plan.mode in DENSE_MODES or plan.tree_search == "traversal":
            query.qvec = self.embedder.embed_query(plan.dense_query or plan.query)
        if plan.tree_search == "traversal":
            assert query.qvec is not None
            query.allowed = traverse(self.store, plan, query.index, query.qvec, query.allowed)
        if plan.mode in SPARSE_MODES:
            query.term_ids = self.catalog.query_terms(plan.sparse_query or plan.query)
        return query

    def _scope(self, query: Query) -> None:
        """What the filter allows: the backend's own filter where it has one, else the allowed
        positions from SQLite (graph recall and tree traversal walk those themselves); a
        community level keeps only the communities whose range reaches it."""
        plan, snapshot, index = query.plan, query.snapshot, query.index
        if plan.filter is not None:
            compiled = compile_filter(plan.filter, snapshot.fields)
            query.native = self.recall.compile_filter(plan.filter, snapshot.fields, index)
            if query.native is None or plan.graph_recall or plan.tree_search == "traversal":
                rows = self.store.filtered_rowids(plan.kinds, snapshot.version, compiled.sql,
                                                  compiled.params)
                query.allowed = index.positions_of(rows)
        if units.get(plan.unit).spans_levels and plan.level is not None:
            spanning = index.positions_of(
                self.store.spanning_rowids(plan.stored_unit, plan.level, snapshot.version))
            query.allowed = (spanning if query.allowed is None
                             else np.intersect1d(query.allowed, spanning))

    def _recall(self, query: Query) -> Candidates:
        """Each wanted source's list, deeper by what the session already holds (so ``k`` new
        hits remain after dedup). A source that reads the lists before it (graph recall's
        passage prior) is given their heads, ``pool_depth`` deep, so what it finds does not
        depend on ``k`` or the session either."""
        plan = query.plan
        seen = self.sessions.seen_count(plan.session_id) if plan.session_id else 0
        depth = plan.candidate_k + seen
        lists: dict[str, Any] = {}
        heads: dict[str, Any] = {}
        sources = [*self.sources, self._graph_source()] if plan.graph_recall else self.sources
        for source in sources:
            if source.wanted(plan):
                got = source.recall(query, heads, depth)
                if got is not None:
                    lists[source.name] = got
                    heads[source.name] = got[:plan.pool_depth]
        query.request.ctl.check()
        return Candidates(lists, plan.pool_depth)

    def _graph_source(self) -> RecallSource:
        """Graph recall's source (the graph's plug-in), made on first use."""
        if self._graph is None:
            self._graph = plugins.graph().recall_source(self.recall, self._calibrator)
        return self._graph

    def _rank(self, query: Query, cands: Candidates) -> None:
        """Fuse, dedup against the session, report the fused head as progress, rerank, rank
        by confidence, decay by recency, cut at ``minScore``, diversify (MMR). Dedup runs
        before rerank so the reranker spends its budget on units the trajectory has not
        seen yet."""
        plan, ctl = query.plan, query.request.ctl
        stages.fuse(query, cands)
        if plan.graph_recall and plan.kinds == [("chunk", 0)]:
            plugins.graph().follow_bridge(query, cands)
        if plan.session_id:
            new = self.sessions.filter_new(plan.session_id, stored_candidates(
                self.store, query.index, [p for p, _s in cands.ranked]))
            cands.ranked = [ps for ps, ok in zip(cands.ranked, new) if ok]
        stages.keep_fused(query, cands)
        if ctl.wants_progress:
            partial = self._hits(query, cands, cands.ranked[:plan.k])
            ctl.report(0.5, "fuse", f"recalled {len(cands.ranked)} candidate(s)",
                       [h.to_wire() for h in partial])
        ctl.check()
        if plan.rerank_top_n is not None:
            assert self.reranker is not None
            stages.rerank(query, cands, self.reranker, self.store, ctl)
            ctl.report(0.8, "rerank", f"reranked {len(cands.rerank)} candidate(s)")
            ctl.check()
        if plan.rank_by_confidence:
            assert self.scorer is not None
            self.scorer.rank(query, cands)
        if plan.recency_field:
            stages.recency(query, cands, self.store)
        if plan.min_score is not None:
            stages.min_score(query, cands)
        if plan.mmr_lambda is not None:
            stages.mmr(query, cands, self.store)

    def _page(self, query: Query, cands: Candidates) -> RetrieveResult:
        """Pack one page (in a pool of summaries and their leaves, never a unit with one it
        contains), mint its cursor, build the hits, record the session."""
        request, plan, index = query.request, query.plan, query.index
        # Containment matters in a pool of summaries and their leaves (a collapsed tree); a
        # pool of communities of several levels holds no unit's text in another's.
        leaves, keeps = (packing_containment(self.store, index, cands.ranked, plan.query)
                         if plan.pooled and units.get(plan.stored_unit).contains_leaves
                         else (None, None))
        packed = paging.page(request, [int(index.tokens[p]) for p, _s in cands.ranked],
                             leaves=leaves, keeps=keeps)
        top = [cands.ranked[i] for i in packed.taken]
        request.ctl.check()
        next_cursor = paging.next_cursor(request, packed, self.secret)
        hits = self._hits(query, cands, top)
        if plan.session_id:
            paging.record(self.sessions, request,
                          stored_candidates(self.store, index, [p for p, _s in top]))
        request.ctl.report(1.0, "pack", f"packed {len(hits)} hit(s)")
        return paging.result(request, hits, candidates=cands.count, reranked=len(cands.rerank),
                             tokens=packed.tokens, next_cursor=next_cursor)

    def _hits(self, query: Query, cands: Candidates, top: list[tuple[int, float]]) -> list[Hit]:
        """Hits for ``top``, their confidence learned (ranked by confidence) or calibrated
        against the query's pool (:mod:`.scoring`: never from the page)."""
        positions = [p for p, _s in top]
        if cands.learned is not None:
            confidence: list[float | None] | None = [cands.learned[p] for p in positions]
        elif self.scorer is not None:
            confidence = self.scorer.confidence(query, cands, positions)
        else:
            confidence = None
        return stored_hits(self.store, query, cands, top, confidence)

    # --- several queries (rewrite: multi-query, decompose) ---------------------------------

    def _retrieve_many(self, request: Request, texts: list[str]) -> RetrieveResult:
        """One ranking per query (each skipping what the session was given, recording
        nothing, cut at ``minScore``), fused by reciprocal rank, then packed, recorded and
        returned as one page without a cursor (:mod:`.rewrite`)."""
        plan, ctl = request.plan, request.ctl
        runs: list[tuple[Query, Candidates]] = []
        for text in texts:
            # Its own plan (its notes merge below) and a control that reports no progress.
            sub = replace(request, plan=replace(plan, query=text, notes=[]),
                          ctl=RequestControl(parent=ctl))
            query = self._query(sub)
            cands = self._recall(query)
            self._rank(query, cands)
            runs.append((query, cands))
        fused = rewrite.fuse([c.ranked for _q, c in runs], plan.rrf_k)
        ctl.report(0.5, "fuse", f"fused the rankings of {len(runs)} queries")
        index = runs[0][0].index
        leaves, keeps = (packing_containment(self.store, index, fused, plan.query)
                         if plan.pooled and units.get(plan.stored_unit).contains_leaves
                         else (None, None))
        packed = paging.page(request, [int(index.tokens[p]) for p, _s in fused],
                             leaves=leaves, keeps=keeps)
        top = [fused[i] for i in packed.taken]
        ctl.check()
        hits = self._fused_hits(runs, top)
        rewrite.merge_notes(plan.notes, [q.plan.notes for q, _c in runs])
        if plan.session_id:
            paging.record(self.sessions, request,
                          stored_candidates(self.store, index, [p for p, _s in top]))
        elif packed.more:
            plan.notes.append(f"no nextCursor: a {plan.rewrite} retrieve fuses several "
                              "rankings into one page (ask for a larger k or tokenBudget)")
        if plan.min_score is not None:
            plan.notes.append("minScore applied to each query's ranking; a hit's score is "
                              "its reciprocal-rank fusion")
        ctl.report(1.0, "pack", f"packed {len(hits)} hit(s)")
        recalled = {p for _q, c in runs for ranked in c.lists.values() for p, _s in ranked}
        return paging.result(request, hits, candidates=len(recalled),
                             reranked=sum(len(c.rerank) for _q, c in runs),
                             tokens=packed.tokens)

    def _fused_hits(self, runs: list[tuple[Query, Candidates]],
                    top: list[tuple[int, float]]) -> list[Hit]:
        """Hits for the fused ``top`` (scored by the fusion), each built from the ranking
        that placed it highest (its stage scores and confidence)."""
        best = rewrite.best_runs([c.ranked for _q, c in runs], [p for p, _s in top])
        groups: dict[int, list[tuple[int, float]]] = {}
        for pos, score in top:
            run, _rank = best[pos]
            groups.setdefault(run, []).append((pos, score))
        built: dict[str, Hit] = {}
        for run, items in groups.items():
            query, cands = runs[run]
            for hit in self._hits(query, cands, items):
                built[hit.id] = hit
        uids = runs[0][0].index.uids
        return [built[str(uids[p])] for p, _s in top if str(uids[p]) in built]

    # --- composed kinds -------------------------------------------------------------------

    def _retrieve_composed(self, request: Request) -> RetrieveResult:
        """A composed kind: composed from the graph the request may see, then dedup, rerank,
        ``minScore``, paging and cursors as for stored units (:mod:`.composed`)."""
        plan = request.plan
        composed.check_options(request)
        composer = self.composers.get(plan.unit)
        if composer is None:
            raise OptionUnsupported(f"unit {plan.unit!r} is not offered by this engine",
                                    option="unit")
        found = self.composed.compose(request, composer)
        if found is None:
            return paging.result(request, [])
        packed = paging.page(request, [c.tokens for c in found.ranked])
        top = [found.ranked[i] for i in packed.taken]
        next_cursor = paging.next_cursor(request, packed, self.secret)
        leaf_conf = None
        if self.calibrator is not None and top:
            chunk_hits = self.retrieve_params(
                composed.leaf_confidence_params(request, self.config.max_k)).hits
            leaf_conf = composed.leaf_confidences(chunk_hits)
            request.ctl.check()
        hits = composed.composed_hits(request, top, found, leaf_conf)
        # Recorded by id only: a path shows a sentence or two of its chunks, not the chunks
        # (the kind does not contain its leaves), so they stay retrievable.
        paging.record(self.sessions, request, [composed_candidate(c) for c in top])
        return paging.result(request, hits, candidates=len(found.made), tokens=packed.tokens,
                             next_cursor=next_cursor, reranked=len(found.rerank))
