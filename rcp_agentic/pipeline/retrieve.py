"""The retrieve pipeline of an :class:`~rcp_agentic.engine.Engine`: its stages, in order.

Recall (dense / sparse, ``candidate_k`` deep, deeper by what the session has seen)
→ fuse → session dedup → rerank → recency → ``min_score`` → MMR → pack to ``k`` and
``token_budget`` → hits with citations, trust and calibrated confidence. The
:class:`Retrieval` mixin holds this orchestration; the engine supplies the stores,
models and configuration it reads (declared below), and each stage's arithmetic
lives in its own module of this package.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import units
from ..control import RequestControl, checked
from ..errors import InvalidParams, OptionUnsupported
from ..models.analyzer import analyze
from ..ranking import MASS_TOLERANCE, top
from ..ranking import ranked as rank_scores
from ..sessions import Candidate
from ..store.memindex import UnitIndex, bm25_idf
from ..wire import Hit, RetrieveResult, Usage
from ..vocabulary import DENSE_MODES, RECALL_SOURCES, SPARSE_MODES
from . import cursor, fusion
from .cursor import CursorState, query_hash
from .filters import check_filter_size, compile_filter
from .hits import build_composed_hit, build_hit
from .mmr import mmr_order
from .packing import Packed, pack
from .params import PARAM_NAMES, Plan, make_plan, parse_params
from .recency import decay

if TYPE_CHECKING:
    from ..config import EngineConfig
    from ..graph.community_index import CommunityStore
    from ..graph.ppr import GraphView
    from ..models.embedder import TimedEmbedder
    from ..models.reranker import Reranker
    from ..sessions import SessionStore
    from ..store.recall import RecallBackend
    from ..store.docstore import Docstore
    from .confidence import Calibrator

RERANK_SLICE = 16  # rerank in slices, so a cancel or deadline stops a long rerank part-way
# Graph recall's passage prior: the best chunks of the fused dense/sparse lists (HippoRAG seeds
# PageRank with the query's entities; a small share of the reset on these passages).
GRAPH_PRIOR_DEPTH = 20
# A unit joins the graph's list only with at least this share of the best unit's mass: the
# prior alone gives every dense/sparse hit a little mass, and in a rank fusion (RRF) that
# membership would count as a graph vote for passages the query's entities never reach.
# Measured through the engine (bench/graph.py engine; R@5 HotpotQA / 2Wiki): share 0 gives
# 0.895 / 0.764, 0.05 gives 0.915 / 0.916, 0.1 gives 0.908 / 0.819, 0.2 gives 0.868 / 0.747.
GRAPH_MIN_SHARE = 0.05


def _note_budget(plan: Plan, packed: Packed) -> None:
    """What the token budget passed over, as usage notes."""
    if packed.skipped:
        plan.notes.append(f"tokenBudget: skipped {packed.skipped} hit(s) larger than the "
                          "budget left")
    if packed.oversized:
        plan.notes.append(f"tokenBudget: {packed.oversized} hit(s) larger than the whole "
                          "budget can never be packed")


class GraphList(list[tuple[int, float]]):
    """The graph's ranked recall list (positions, PageRank mass, best first, cut to the recall
    depth), with the mass of every position PageRank reached (``scores``: fills the ``graph``
    stage score of units beyond the cut) and the query's subject share (``share``: the part
    of its link weight on entities some passage is about, which scales the list's default
    fusion weight)."""

    def __init__(self, ranked: list[tuple[int, float]], scores: Mapping[int, float],
                 share: float = 1.0) -> None:
        super().__init__(ranked)
        self.scores = scores
        self.share = share


class PositionScores(Mapping[int, float]):
    """Scores by index position, held as two arrays (a dict of every passage PageRank reached
    costs more than the PageRank itself at 50k chunks)."""

    def __init__(self, positions: np.ndarray, scores: np.ndarray) -> None:
        order = np.argsort(positions, kind="stable")
        self._positions = positions[order]
        self._scores = scores[order]

    def __getitem__(self, position: int) -> float:
        i = int(np.searchsorted(self._positions, position))
        if i < len(self._positions) and self._positions[i] == position:
            return float(self._scores[i])
        raise KeyError(position)

    def __iter__(self) -> Iterator[int]:
        return iter(self._positions.tolist())

    def __len__(self) -> int:
        return len(self._positions)


class Retrieval:
    """``retrieve`` and its stages, mixed into the Engine."""

    # Provided by the Engine.
    config: EngineConfig
    store: Docstore
    recall: RecallBackend
    embedder: TimedEmbedder
    reranker: Reranker | None
    calibrator: Calibrator | None
    sessions: SessionStore
    composers: dict[str, Callable[..., Any]]
    _secret: bytes

    def _index(self, kinds: list[tuple[str, int]], version: int | None = None) -> UnitIndex:
        raise NotImplementedError

    def _offered(self) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def _derived_lag(self, kinds: list[tuple[str, int]], served: int) -> str | None:
        raise NotImplementedError

    def _served_version(self, pinned: str | None) -> int:
        raise NotImplementedError

    def filter_fields(self) -> dict[str, str]:
        raise NotImplementedError

    def graph_view(self, version: int | None = None) -> GraphView | None:
        raise NotImplementedError

    def communities(self, version: int | None = None) -> CommunityStore | None:
        raise NotImplementedError

    def retrieve(self, query: Any, k: int = 10, **options: Any) -> RetrieveResult:
        """Ranked hits for ``query``; options are the RCP/1 retrieve params (§7.7) in snake_case.

        ``mode`` dense | sparse | hybrid; ``fusion`` {method: rrf | weighted | convex,
        weights, rrf_k, alpha}; ``candidate_k``; ``unit`` chunk | passage | page |
        document; ``filter`` (§8); ``min_score``; ``include_text``; ``include_vectors``.
        The result's ``to_wire()`` is the exact RCP result object.
        """
        unknown = [name for name in options if name not in PARAM_NAMES]
        if unknown:
            raise InvalidParams(f"unknown retrieve option(s): {', '.join(sorted(unknown))}",
                                field=unknown[0])
        return self.retrieve_params({"query": query, "k": k, **options})

    def query_terms(self, query: str) -> list[int]:
        """Vocabulary ids of the analysed query terms (unknown terms dropped)."""
        return sorted({t for t in (self.store.term_id(w) for w in analyze(query))
                       if t is not None})

    def sparse_ceiling(self, query: str, unit: str = "chunk", level: int = 0) -> float:
        """The largest BM25 any unit of this kind could score for ``query`` (0 if no term is known)."""
        served = self._served_version(None)
        return self.recall.sparse_ceiling(self._index([(unit, level)], served),
                                          self.query_terms(query))

    def retrieve_params(self, raw: dict[str, Any],
                        control: RequestControl | None = None) -> RetrieveResult:
        """``retrieve`` from a raw params object (wire camelCase or snake_case).

        Stages: recall (dense/sparse, ``candidate_k`` deep, deeper by what the
        session has seen) → fuse → session dedup → rerank (``topN``) → recency →
        ``min_score`` → MMR → pack to ``k`` and ``token_budget`` (from the cursor's
        place) → hits with citations, trust and calibrated confidence. Dedup runs
        before rerank so the reranker spends its budget on units the trajectory has
        not seen yet. ``control`` stops the work between stages on cancel or deadline
        and receives progress, with the fused top ``k`` as partial hits after recall.
        """
        start = time.perf_counter()
        ctl = checked(control)
        params = parse_params(raw)
        plan = make_plan(params, self.config,
                         rerank_method=self.reranker.method if self.reranker else None,
                         can_rank_by_confidence=self.calibrator is not None,
                         offered=self._offered())
        qhash = query_hash(params.model_dump(
            mode="json", exclude={"cursor", "meta", "index_version", "strict"}))
        state = (cursor.decode(plan.cursor, self._secret, qhash) if plan.cursor is not None
                 else None)
        if state is not None and plan.index_version not in (None, f"v{state.version}"):
            raise InvalidParams("indexVersion differs from the snapshot the cursor pages",
                                field="indexVersion")
        served = self._served_version(f"v{state.version}" if state else plan.index_version)
        version = f"v{served}"
        fields = self.filter_fields() if (plan.filter or plan.recency_field) else {}
        if plan.recency_field and fields.get(plan.recency_field) != "date":
            raise InvalidParams(f"recency.field {plan.recency_field!r} is not a declared date "
                                "field", field="recency.field")
        if units.get(plan.unit).composed:
            return self._retrieve_composed(plan, params.strict, state, served, fields, qhash,
                                           start, ctl)
        index = self._index(plan.kinds, served)
        lag = self._derived_lag(plan.kinds, served)
        if lag:
            plan.notes.append(lag)
        allowed = None
        native = None
        if plan.filter is not None:
            compiled = compile_filter(plan.filter, fields)
            native = self.recall.compile_filter(plan.filter, fields, index)
            # Graph recall and tree traversal walk the allowed units themselves.
            if native is None or plan.graph_recall or plan.tree_search == "traversal":
                rows = self.store.filtered_rowids(plan.kinds, served, compiled.sql,
                                                  compiled.params)
                allowed = index.positions_of(rows)
        if units.get(plan.unit).spans_levels and plan.level is not None:
            spanning = index.positions_of(
                self.store.spanning_rowids(plan.stored_unit, plan.level, served))
            allowed = spanning if allowed is None else np.intersect1d(allowed, spanning)
        # Backfill: recall deeper by what the session already holds, so k new hits remain.
        seen = self.sessions.seen_count(plan.session_id) if plan.session_id else 0
        depth = plan.candidate_k + seen
        lists: dict[str, list[tuple[int, float]]] = {}
        qvec = None
        term_ids: list[int] = []
        if plan.mode in DENSE_MODES or plan.tree_search == "traversal":
            qvec = self.embedder.embed_query(plan.query)
        if plan.tree_search == "traversal":
            assert qvec is not None
            allowed = self._traverse(plan, index, qvec, allowed)
        if plan.mode in DENSE_MODES:
            assert qvec is not None
            lists["dense"] = self.recall.dense(index, qvec, depth=depth, allowed=allowed,
                                               native=native)
        if plan.mode in SPARSE_MODES:
            term_ids = self.query_terms(plan.query)
            lists["sparse"] = self.recall.sparse(index, term_ids, depth=depth, allowed=allowed,
                                                 native=native)
        if plan.graph_recall:
            graph = self._graph_recall(plan, index, served, fields, lists, allowed, qvec,
                                       term_ids, depth)
            if graph is not None:
                lists["graph"] = graph
        ctl.check()
        ranked_list = self._fuse(plan, lists, index, qvec, term_ids)
        if plan.session_id:
            new = self.sessions.filter_new(plan.session_id,
                                           self._candidates(index, [p for p, _s in ranked_list]))
            ranked_list = [ps for ps, ok in zip(ranked_list, new) if ok]
        fused = dict(ranked_list) if plan.mode == "hybrid" or "graph" in lists else {}
        if ctl.wants_progress:
            first = ranked_list[:plan.k]
            partial = self._hits(plan, index, first, lists, qvec, term_ids,
                                 list(range(len(first))), {}, served=served, fused=fused)
            ctl.report(0.5, "fuse", f"recalled {len(ranked_list)} candidate(s)",
                       [h.to_wire() for h in partial])
        ctl.check()
        rerank_scores: dict[int, float] = {}
        if plan.rerank_top_n is not None:
            ranked_list, rerank_scores = self._rerank(plan, index, ranked_list, ctl)
            ctl.report(0.8, "rerank", f"reranked {len(rerank_scores)} candidate(s)")
            ctl.check()
        learned: dict[int, float] | None = None
        if plan.rank_by_confidence:
            ranked_list, learned = self._rank_by_confidence(plan, index, ranked_list, lists,
                                                            qvec, term_ids)
        if plan.recency_field:
            ranked_list = self._recency(plan, index, ranked_list)
        if plan.min_score is not None:
            ranked_list = [(p, s) for p, s in ranked_list if s >= plan.min_score]
        if plan.mmr_lambda is not None:
            ranked_list = self._mmr(plan, index, ranked_list)
        # Containment matters in a pool of summaries and their leaves (a collapsed tree); a
        # pool of communities of several levels holds no unit's text in another's.
        contains, keeps = (self._containment(index, ranked_list, plan.query)
                           if plan.pooled and units.get(plan.stored_unit).contains_leaves
                           else (None, None))
        packed = pack([int(index.tokens[p]) for p, _s in ranked_list], plan.k, plan.token_budget,
                      start=state.start if state else 0,
                      exclude=state.exclude if state else frozenset(), leaves=contains,
                      keeps=keeps)
        if packed.withheld:
            plan.notes.append(f"skipped {packed.withheld} summary hit(s) that would displace a "
                              "finer hit whose best-matching sentence they leave out")
        if packed.contained:
            plan.notes.append(f"skipped {packed.contained} hit(s) contained in or containing a "
                              "hit already packed")
        _note_budget(plan, packed)
        top = [ranked_list[i] for i in packed.taken]
        ctl.check()
        next_cursor = None
        if packed.more and not plan.session_id:
            next_cursor = cursor.encode(CursorState(served, packed.next_start,
                                                    packed.next_exclude, qhash), self._secret)
        hits = self._hits(plan, index, top, lists, qvec, term_ids, packed.taken, rerank_scores,
                          learned, served=served, fused=fused)
        if plan.session_id:
            forgotten = self.sessions.record(plan.session_id,
                                             self._candidates(index, [p for p, _s in top]))
            if forgotten:
                plan.notes.append(f"session full: forgot its {forgotten} oldest unit(s)")
        candidates = len({p for ranked in lists.values() for p, _s in ranked})
        ctl.report(1.0, "pack", f"packed {len(hits)} hit(s)")
        usage = Usage(candidates=candidates, reranked=len(rerank_scores), tokens=packed.tokens,
                      latency_ms=round((time.perf_counter() - start) * 1000.0, 3),
                      notes=plan.notes or None)
        return RetrieveResult(hits=hits, index_version=version, usage=usage,
                              next_cursor=next_cursor)

    def _recency(self, plan: Plan, index: UnitIndex,
                 ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
        assert plan.recency_field and plan.recency_half_life_days
        rowids = [int(index.rowids[p]) for p, _s in ranked]
        dates = self.store.dates(rowids, plan.recency_field)
        factors = decay([dates.get(r) for r in rowids], time.time() * 1000.0,
                        plan.recency_half_life_days)
        return rank_scores([(p, s * float(f)) for (p, s), f in zip(ranked, factors)],
                           tolerance=MASS_TOLERANCE, relative=True)

    def _mmr(self, plan: Plan, index: UnitIndex,
             ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
        assert plan.mmr_lambda is not None
        pool = ranked[:min(len(ranked), max(4 * plan.k, 50), 400)]
        if len(pool) < 2:
            return ranked
        vecs = self._unit_vectors(index, np.asarray([p for p, _s in pool], dtype=np.int64))
        scores = np.asarray([s for _p, s in pool], dtype=np.float64)
        order = mmr_order(scores, vecs, plan.mmr_lambda, len(pool))
        return [pool[i] for i in order] + ranked[len(pool):]

    def _unit_vectors(self, index: UnitIndex, positions: np.ndarray) -> np.ndarray:
        """Vectors of the units at ``positions``: from memory, or SQLite above dense_exact_max."""
        if index.vectors is not None:
            return index.vectors[positions]
        rowids = index.rowids[positions].tolist()
        got = self.store.vectors(rowids)
        return np.vstack([got[r] for r in rowids])

    def _fill(self, index: UnitIndex, name: str, positions: list[int], qvec: np.ndarray | None,
              term_ids: list[int],
              lists: dict[str, list[tuple[int, float]]] | None = None) -> dict[int, float]:
        """Exact scores of one retriever for the given positions (the graph's: the PageRank
        mass its list recorded, 0 where PageRank did not reach)."""
        if not positions:
            return {}
        if name == "graph":
            mass = getattr((lists or {}).get("graph"), "scores", {})
            return {p: float(mass.get(p, 0.0)) for p in positions}
        pos = np.asarray(positions, dtype=np.int64)
        if name == "dense":
            assert qvec is not None
            return dict(zip(positions, (self._unit_vectors(index, pos) @ qvec).tolist()))
        return dict(zip(positions, self.recall.sparse_scores(index, term_ids, pos).tolist()))

    def _fuse(self, plan: Plan, lists: dict[str, list[tuple[int, float]]], index: UnitIndex,
              qvec: np.ndarray | None, term_ids: list[int]) -> list[tuple[int, float]]:
        """The fused ranking. In a pool of several kinds (a collapsed tree) a chunk's rank in
        each list counts only the chunks above it, so the chunks keep the order a chunk-only
        retrieve gives them; a summary's rank counts every unit above it."""
        if plan.mode != "hybrid" and "graph" not in lists:
            return lists[plan.mode]
        return self._fuse_lists(plan, lists, index, qvec, term_ids)

    def _fuse_lists(self, plan: Plan, lists: dict[str, list[tuple[int, float]]],
                    index: UnitIndex, qvec: np.ndarray | None,
                    term_ids: list[int]) -> list[tuple[int, float]]:
        weights = plan.weights
        graph = lists.get("graph")
        if isinstance(graph, GraphList) and not plan.graph_weight_given:
            weights = {**weights, "graph": weights["graph"] * graph.share}
        if plan.fusion == "rrf":
            leaf = None
            if plan.pooled:
                chunk = units.get("chunk").stored
                leaf = lambda p: index.units[p] == chunk  # noqa: E731
            return fusion.rrf(lists, weights, plan.rrf_k, leaf=leaf)
        union = sorted({p for ranked in lists.values() for p, _s in ranked})
        fill = {name: self._fill(index, name, union, qvec, term_ids, lists) for name in lists}
        if plan.fusion == "weighted":
            return fusion.weighted(lists, weights, fill)
        return fusion.convex(lists, plan.alpha, fill)

    def _hits(self, plan: Plan, index: UnitIndex, top: list[tuple[int, float]],
              lists: dict[str, list[tuple[int, float]]], qvec: np.ndarray | None,
              term_ids: list[int], ranks: list[int], rerank_scores: dict[int, float],
              learned: dict[int, float] | None = None, *, served: int,
              fused: dict[int, float] | None = None) -> list[Hit]:
        """Hits for ``top``; ``scores`` keeps every stage's score (``fused`` before any rerank)."""
        positions = [p for p, _s in top]
        per_stage = {name: self._fill(index, name, positions, qvec, term_ids, lists)
                     for name in lists}
        confidence = ([learned[p] for p in positions] if learned is not None
                      else self._confidence(plan, index, positions, per_stage, term_ids, ranks,
                                            lists))
        rowids = [int(index.rowids[p]) for p in positions]
        rows = self.store.hydrate(rowids)
        vectors = self.store.vectors(rowids) if plan.include_vectors else {}
        kind = units.get(plan.unit)
        spans_level = plan.level if kind.spans_levels else None
        if kind.spans_levels:  # a community names its parent itself
            parents = {row["uid"]: [row["umeta"]["parent"]] for row in rows.values()
                       if (row.get("umeta") or {}).get("parent")}
        elif kind.levelled:
            parents = self.store.parents(plan.stored_unit, [index.uids[p] for p in positions],
                                         served)
        else:
            parents = {}
        alias = kind.alias_of
        hits = []
        for i, ((pos, score), rowid) in enumerate(zip(top, rowids)):
            row = rows.get(rowid)
            if row is None:  # deleted after this query's snapshot was taken
                continue
            scores = {name: per_stage[name][pos] for name in lists}
            if fused and pos in fused:
                scores["fused"] = float(fused[pos])
            if pos in rerank_scores:
                scores["rerank"] = float(rerank_scores[pos])
            if spans_level is not None:  # a community stands for every level of its range
                row = {**row, "level": spans_level}
            hits.append(build_hit(row, unit=plan.unit if alias == row["unit"] else row["unit"],
                                  score=float(score), scores=scores,
                                  include_text=plan.include_text, vector=vectors.get(rowid),
                                  max_chars=plan.max_hit_chars, notes=plan.notes,
                                  confidence=None if confidence is None else confidence[i],
                                  parents=parents.get(row["uid"])))
        return hits

    def _probabilities(self, plan: Plan, index: UnitIndex, positions: list[int],
                       per_stage: dict[str, dict[int, float]], term_ids: list[int],
                       ranks: np.ndarray,
                       lists: dict[str, list[tuple[int, float]]] | None = None,
                       ) -> np.ndarray | None:
        """Calibrated P(relevant) of the units at ``positions``, each by the model of its kind's
        calibration family (NaN where that family has no model; None without any); ``lists``,
        the recall lists, are the query's pool the scores are read against. When graph recall
        ran (a ``graph`` list), the hits' PageRank masses go with them and the mode's graph
        model scores them."""
        if self.calibrator is None or not positions:
            return None
        graph_ran = "graph" in per_stage
        families = [units.calibration_family(index.units[p]) for p in positions]
        if not any(self.calibrator.supports(plan.mode, f, graph_ran) for f in set(families)):
            return None
        stage = {name: np.array([per_stage[name][p] for p in positions])
                 for name in RECALL_SOURCES if name in per_stage}
        ceiling = (self.recall.sparse_ceiling(index, term_ids) if "sparse" in per_stage
                   else None)
        probs = np.full(len(positions), np.nan)
        for family in sorted(set(families)):
            if not self.calibrator.supports(plan.mode, family, graph_ran):
                continue
            at = np.array([i for i, f in enumerate(families) if f == family])
            pool = None if lists is None else {
                name: np.array([s for p, s in ranked
                                if units.calibration_family(index.units[p]) == family])
                for name, ranked in lists.items()}
            got = {name: x[at] for name, x in stage.items()}
            model = self.calibrator.model_for(plan.mode, family, graph_ran)
            docs = (self._doc_counts(index, [positions[i] for i in at])
                    if model is not None and "docs" in model.needs else None)
            probs[at] = self.calibrator.predict(
                mode=plan.mode, unit=family, dense=got.get("dense"), sparse=got.get("sparse"),
                ceiling=ceiling, ranks=ranks[at], pool=pool, graph=got.get("graph"), docs=docs,
                graph_share=getattr((lists or {}).get("graph"), "share", None))
        return np.clip(probs, 0.0, 1.0)

    def _doc_counts(self, index: UnitIndex, positions: list[int]) -> np.ndarray:
        """How many documents each unit's leaves lie in (a graph unit's breadth; 1 for a unit
        of one document): a feature of the node and triplet confidence models."""
        rows = self.store.hydrate([int(index.rowids[p]) for p in positions])
        return np.array([max(1, len((rows.get(int(index.rowids[p])) or {}).get("doc_ids")
                                    or [None])) for p in positions], dtype=np.float64)

    def _confidence(self, plan: Plan, index: UnitIndex, positions: list[int],
                    per_stage: dict[str, dict[int, float]], term_ids: list[int],
                    ranks: list[int], lists: dict[str, list[tuple[int, float]]] | None = None,
                    ) -> list[float | None] | None:
        """Calibrated P(relevant) per hit, made non-increasing down the list (None for a hit
        whose kind has no calibration)."""
        probs = self._probabilities(plan, index, positions, per_stage, term_ids,
                                    np.asarray(ranks, dtype=np.float64), lists)
        if probs is None:
            return None
        out: list[float | None] = []
        ceiling = 1.0
        for x in probs:
            if np.isnan(x):
                out.append(None)
                continue
            # A hit never claims more confidence than the one ranked above it.
            ceiling = min(ceiling, float(x))
            out.append(round(ceiling, 6))
        return out

    def _rank_by_confidence(self, plan: Plan, index: UnitIndex, ranked: list[tuple[int, float]],
                            lists: dict[str, list[tuple[int, float]]], qvec: np.ndarray | None,
                            term_ids: list[int]) -> tuple[list[tuple[int, float]], dict[int, float]]:
        """Re-rank the fused list by calibrated P(relevant); the score becomes that probability.

        Measured on SciFact (held-out folds): nDCG@10 0.879 against RRF's 0.873.
        """
        positions = [p for p, _s in ranked]
        per_stage = {name: self._fill(index, name, positions, qvec, term_ids, lists)
                     for name in lists}
        probs = self._probabilities(plan, index, positions, per_stage, term_ids,
                                    np.arange(len(positions), dtype=np.float64), lists)
        if probs is None or np.isnan(probs).any():
            raise OptionUnsupported(f"no confidence calibration for {plan.mode}/{plan.unit}",
                                    option="x-rcp-agentic-rankBy")
        order = rank_scores(zip(positions, probs.tolist()))
        learned = {p: round(s, 6) for p, s in order}
        return [(p, learned[p]) for p, _s in order], learned

    def _candidates(self, index: UnitIndex, positions: list[int]) -> list[Candidate]:
        """What the session dedup rule needs of each unit; a derived unit that contains its
        leaves (a summary) brings them. A graph unit's leaves only attest it (a node is not
        the chunks that mention it), so it is judged by its id alone."""
        def summary(p: int) -> bool:
            return not index.doc_ids[p] and units.get(index.units[p]).contains_leaves

        derived = [int(index.rowids[p]) for p in positions if summary(p)]
        rows = self.store.hydrate(derived) if derived else {}
        out = []
        for p in positions:
            ps, pe = int(index.page_start[p]), int(index.page_end[p])
            row = rows.get(int(index.rowids[p])) if summary(p) else None
            out.append(Candidate(index.uids[p], index.units[p], index.doc_ids[p],
                                 ps if ps >= 0 else None, pe if pe >= 0 else None,
                                 leaves=None if row is None else frozenset(row["leaves"]),
                                 docs=frozenset() if row is None else frozenset(row["doc_ids"])))
        return out

    def _containment(self, index: UnitIndex, ranked: list[tuple[int, float]], query: str
                     ) -> tuple[Callable[[int], frozenset[str] | None], Callable[[int, int], bool]]:
        """For packing a pooled list: ``leaves(i)``, the leaf chunks of the i-th ranked unit (a
        chunk is its own leaf; None for a unit judged by place, a page or document), and
        ``keeps(i, j)``: whether unit i holds the best query-matching sentence of unit j it
        contains (BM25 idf of the analysed query terms a sentence holds; ties all count).
        A summary's sentences are its stored spans; a chunk's come from the tree's splitter,
        so an extracted sentence is the same string in both. Everything is fetched lazily."""
        from ..raptor.summarize import split_sentences

        cache: dict[int, frozenset[str] | None] = {}
        said: dict[int, list[str]] = {}
        weights: dict[str, float] = {}
        bests: dict[int, frozenset[str]] = {}  # a unit's best query-matching sentences
        terms = set(analyze(query))

        def leaves(i: int) -> frozenset[str] | None:
            if i not in cache:
                pos = ranked[i][0]
                if index.doc_ids[pos]:
                    cache[i] = (frozenset([index.uids[pos]])
                                if units.get(index.units[pos]).stored == "chunk" else None)
                else:
                    rowid = int(index.rowids[pos])
                    cache[i] = frozenset(self.store.covered_leaves([rowid]).get(rowid, []))
            return cache[i]

        def sentences(i: int) -> list[str]:
            if i not in said:
                rowid = int(index.rowids[ranked[i][0]])
                row = self.store.hydrate([rowid]).get(rowid) or {}
                text = row.get("text") or ""
                spans = (row.get("umeta") or {}).get("spans")
                found = ([text[s["at"][0]:s["at"][1]] for s in spans] if spans
                         else [s.text for s in split_sentences(text, None, 0)])
                said[i] = [" ".join(s.split()) for s in found]
            return said[i]

        def weight(term: str) -> float:
            if term not in weights:
                df = index.doc_freq(self.store.term_id(term))
                weights[term] = float(bm25_idf(index.size, df))
            return weights[term]

        def best(j: int) -> frozenset[str]:
            if j not in bests:
                fine = sentences(j)
                scores = [sum(weight(t) for t in terms.intersection(analyze(s))) for s in fine]
                top = max(scores, default=0.0)
                bests[j] = frozenset(s for s, sc in zip(fine, scores) if sc == top)
            return bests[j]

        def keeps(i: int, j: int) -> bool:
            return not best(j) or not best(j).isdisjoint(sentences(i))
        return leaves, keeps

    def _traverse(self, plan: Plan, index: UnitIndex, qvec: np.ndarray,
                  allowed: np.ndarray | None) -> np.ndarray:
        """RAPTOR's tree traversal: the best ``k`` nodes of the top layer, then the best ``k``
        of their children, layer by layer down to the leaves; returns the positions chosen
        (within ``allowed``), over which the usual recall and fusion then rank."""
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
            sims = self._unit_vectors(index, frontier) @ qvec
            best = frontier[top(sims, frontier, plan.k)[0]]
            chosen.append(best)
            rows = self.store.hydrate([int(index.rowids[p]) for p in best])
            children = [c for r in rows.values() for c in (r.get("umeta") or {}).get("children", [])]
            frontier = index.positions_of_uids(children)
        return np.unique(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)

    def _rerank(self, plan: Plan, index: UnitIndex, ranked: list[tuple[int, float]],
                ctl: RequestControl) -> tuple[list[tuple[int, float]], dict[int, float]]:
        assert self.reranker is not None and plan.rerank_top_n is not None
        head = ranked[:plan.rerank_top_n]
        if not head:
            return ranked, {}
        rows = self.store.hydrate([int(index.rowids[p]) for p, _s in head])
        texts = [rows[int(index.rowids[p])]["text"] for p, _s in head]
        scores: list[float] = []
        # In slices, so a cancel or deadline stops a long rerank part-way.
        for at in range(0, len(texts), RERANK_SLICE):
            ctl.check()
            scores.extend(float(x) for x in self.reranker.score(plan.query,
                                                                texts[at:at + RERANK_SLICE]))
            ctl.report(0.5 + 0.3 * len(scores) / len(texts), "rerank",
                       f"reranked {len(scores)}/{len(texts)}")
        got = dict(zip((p for p, _s in head), scores))
        return rank_scores(got.items()), got

    # --- the knowledge graph: graph-aware recall and composed units ----------------------------

    def _graph_scope(self, plan: Plan, served: int, fields: dict[str, str]
                     ) -> tuple[GraphView | None, frozenset[str] | None]:
        """The graph this request may see at version ``served`` (restricted to the chunks its
        filter allows) and those chunk keys (None without a filter); (None, None) without a
        graph, with a usage note."""
        view = self.graph_view(served)
        if view is None:
            plan.notes.append(f"index version v{served} holds no knowledge graph: no graph "
                              "recall")
            return None, None
        allowed = self.chunk_scope(plan.filter, served, fields)
        from ..graph.compose import scoped_view

        return scoped_view(view, allowed), allowed

    def chunk_scope(self, filter_: Mapping[str, Any] | None, version: int,
                    fields: Mapping[str, str] | None = None) -> frozenset[str] | None:
        """The chunk keys (``r<rowid>``) visible at ``version`` that pass ``filter_`` (None
        without a filter: every chunk). Every graph surface — graph recall, the composed
        units, each ``graph`` op and ``memory/recall`` — derives only from these chunks.
        A malformed or oversized filter is InvalidParams (``data.field``), as for retrieve."""
        if filter_ is None:
            return None
        return frozenset(f"r{int(r)}" for r in self.passing_rowids(
            filter_, [("chunk", 0)], version, fields))

    def passing_rowids(self, filter_: Mapping[str, Any], kinds: list[tuple[str, int]],
                       version: int, fields: Mapping[str, str] | None = None) -> np.ndarray:
        """Rowids of the units of ``kinds`` visible at ``version`` that pass ``filter_`` (a
        derived unit only when every chunk it covers passes); the filter is bounded and
        validated first (InvalidParams / OptionUnsupported naming it)."""
        check_filter_size(filter_, max_depth=self.config.max_filter_depth,
                          max_nodes=self.config.max_filter_nodes)
        compiled = compile_filter(dict(filter_), dict(fields or self.filter_fields()))
        return self.store.filtered_rowids(kinds, version, compiled.sql, compiled.params)

    def _chunk_prior(self, plan: Plan, served: int, index: UnitIndex | None,
                     lists: dict[str, list[tuple[int, float]]], qvec: np.ndarray | None,
                     term_ids: list[int], allowed: frozenset[str] | None) -> dict[str, float]:
        """Graph recall's passage prior: the best ``GRAPH_PRIOR_DEPTH`` chunks (by key) of the
        dense/sparse lists of the plan's mode, RRF-fused; read from ``lists`` when the pool
        holds the chunks, else recalled from the chunk index (within ``allowed``)."""
        chunk_lists: dict[str, list[tuple[int, float]]]
        if index is not None and ("chunk", 0) in plan.kinds:
            ci = index
            chunk_lists = {name: [(p, s) for p, s in ranked if index.units[p] == "chunk"]
                           for name, ranked in lists.items() if name in ("dense", "sparse")}
        else:
            ci = self._index([("chunk", 0)], served)
            inside = (ci.positions_of(np.array([int(k[1:]) for k in allowed], dtype=np.int64))
                      if allowed is not None else None)
            chunk_lists = {}
            if qvec is not None and plan.mode in DENSE_MODES:
                chunk_lists["dense"] = self.recall.dense(ci, qvec, depth=GRAPH_PRIOR_DEPTH,
                                                         allowed=inside)
            if plan.mode in SPARSE_MODES and (inside is None or len(inside)):
                chunk_lists["sparse"] = self.recall.sparse(ci, term_ids, depth=GRAPH_PRIOR_DEPTH,
                                                           allowed=inside)
        fused = fusion.rrf({n: r for n, r in chunk_lists.items() if r},
                           {n: 1.0 for n in chunk_lists}, plan.rrf_k)
        return {f"r{int(ci.rowids[p])}": float(s) for p, s in fused[:GRAPH_PRIOR_DEPTH]}

    def _graph_recall(self, plan: Plan, index: UnitIndex, served: int, fields: dict[str, str],
                      lists: dict[str, list[tuple[int, float]]], allowed: np.ndarray | None,
                      qvec: np.ndarray | None, term_ids: list[int], depth: int
                      ) -> GraphList | None:
        """The third recall list (``x-rcp-agentic-graphRecall``): HippoRAG's personalised
        PageRank from the query's linked entities (weighted by specificity) plus a small share
        on the dense/sparse passage prior, over the graph the request's filter allows. Scores
        the plan's unit: a chunk its passage mass; a page or document the best mass of its
        chunks; in a collapsed tree only the chunks; a node its entity's mass; a triplet the
        mean of its two entities'. None (hybrid alone, with a note) when there is no graph
        or the query names no entity of it. By default the list's fusion weight scales with
        the query's subject share (``GraphView.subject_share``); with none (only entities no
        passage is about), hybrid alone, with a note."""
        view, allowed_keys = self._graph_scope(plan, served, fields)
        if view is None:
            return None
        links = view.link(plan.query)
        if not links:
            plan.notes.append("graph recall: the query names no entity of the graph; "
                              "dense/sparse recall only")
            return None
        share = 1.0 if plan.graph_weight_given else view.subject_share(links)
        if share <= 0:
            plan.notes.append("graph recall: no passage is about the entities the query names "
                              "(they are only mentioned); dense/sparse recall only")
            return None
        prior = self._chunk_prior(plan, served, index, lists, qvec, term_ids, allowed_keys)
        positions, masses = self._graph_positions(plan, index, served, view,
                                                  view.mass(links, prior))
        if allowed is not None:
            inside = np.isin(positions, allowed)
            positions, masses = positions[inside], masses[inside]
        best = top(masses, positions, depth, tolerance=MASS_TOLERANCE, relative=True)[0]
        floor = GRAPH_MIN_SHARE * float(masses.max()) if len(masses) else 0.0
        ranked = [(int(positions[i]), float(masses[i])) for i in best[:depth]
                  if masses[i] >= floor]
        model = (self.calibrator.model_for(plan.mode, units.calibration_family(plan.unit),
                                           True) if self.calibrator is not None else None)
        if model is not None and "graph" not in model.needs and ranked:
            plan.notes.append(f"confidence of {plan.mode}/{plan.unit} hits is calibrated on "
                              "dense/sparse signals only: a hit that graph recall found "
                              "through a bridge entity may be relevant despite a low one")
        return GraphList(ranked, PositionScores(positions, masses), share)

    def _graph_positions(self, plan: Plan, index: UnitIndex, served: int, view: GraphView,
                         scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """PageRank masses mapped onto the positions of ``index`` (see ``_graph_recall``):
        the positions reached and their masses. Chunks (also a collapsed tree's, the only
        units of its pool that score) map through a cached array: at 50k chunks a dict of
        every passage reached costs more than the PageRank."""
        if ("chunk", 0) in plan.kinds:
            from ..graph.compose import chunk_positions

            at = chunk_positions(view, index.position)
            passage = scores[view.n_entities:]
            reached = (at >= 0) & (passage > 0)
            return at[reached], passage[reached]
        out = self._graph_masses(plan, index, served, view, scores)
        return (np.fromiter(out.keys(), dtype=np.int64, count=len(out)),
                np.fromiter(out.values(), dtype=np.float64, count=len(out)))

    def _graph_masses(self, plan: Plan, index: UnitIndex, served: int, view: GraphView,
                      scores: np.ndarray) -> dict[int, float]:
        """PageRank masses of a pool without chunks, by position: a node its entity's, a
        triplet the mean of its two entities', a community the sum of its members', a
        document or page the best of its chunks'."""
        from ..graph.compose import (chunk_masses, community_masses, node_masses,
                                     triplet_masses)

        stored = plan.stored_unit
        out: dict[int, float] = {}
        if stored in ("node", "triplet"):
            by_uid = (node_masses if stored == "node" else triplet_masses)(view, scores)
            found = index.positions_of_uids(list(by_uid))
            return {int(p): by_uid[index.uids[p]] for p in found}
        if stored == "community":  # the query's PageRank mass on its members
            stored_communities = self.communities(served)
            by_uid = community_masses(view, scores, stored_communities.by_id.values()
                                      if stored_communities else ())
            return {int(p): by_uid[index.uids[p]]
                    for p in index.positions_of_uids(list(by_uid))}
        chunks = chunk_masses(view, scores)
        if stored == "document":
            where = {index.doc_ids[p]: int(p) for p in index.kind_positions("document", 0)}
            for key, m in chunks.items():
                p = where.get(view.graph.chunk_docs.get(key, ""))
                if p is not None and m > out.get(p, 0.0):
                    out[p] = m
            return out
        if stored == "page":
            ci = self._index([("chunk", 0)], served)
            pages = {(index.doc_ids[p], int(index.page_start[p])): int(p)
                     for p in index.kind_positions("page", 0)}
            for key, m in chunks.items():
                c = ci.position.get(int(key[1:]))
                if c is None or int(ci.page_start[c]) < 0:
                    continue
                first = int(ci.page_start[c])
                last = max(first, int(ci.page_end[c]))
                for page in range(first, last + 1):
                    p = pages.get((ci.doc_ids[c], page))
                    if p is not None and m > out.get(p, 0.0):
                        out[p] = m
            return out
        plan.notes.append(f"graph recall does not score {plan.unit} units")
        return out

    def _retrieve_composed(self, plan: Plan, strict: bool, state: CursorState | None,
                           served: int, fields: dict[str, str], qhash: str, start: float,
                           ctl: Any) -> RetrieveResult:
        """``retrieve`` of a composed unit (``path``, ``subgraph``): composed at query time from
        the graph the request may see by the kind's composer (``composers``), then session
        dedup (a unit whose leaf chunks were all returned already is not returned again),
        rerank, ``minScore``, packing to ``k`` and ``tokenBudget`` and cursors, as for stored
        units. A hit's confidence is P(it covers a supporting passage), read off its leaf
        chunks: the largest calibrated confidence among them in the engine's own chunk
        retrieve for the same query and scope (mode, filter, index version, graph recall on;
        ``candidateK`` deep), since a unit covers a relevant passage at least as often as
        its best leaf is relevant. A leaf that chunk retrieve did not return gets the
        smallest confidence it did return (it ranked below all of them; 0.0 if it returned
        none). Made non-increasing down the list as for stored units; None without a
        calibration."""
        def unsupported(option: str, message: str) -> None:
            if strict:
                raise OptionUnsupported(message, option=option)
            plan.notes.append(f"ignored {option}: {message}")

        if plan.mmr_lambda is not None:
            unsupported("mmr", f"{plan.unit} units are composed per query and have no vectors "
                        "to diversify by")
        if plan.recency_field:
            unsupported("recency", f"{plan.unit} units span documents of many dates")
        if plan.include_vectors:
            unsupported("includeVectors", f"{plan.unit} units are composed and not embedded")
        if plan.rank_by_confidence:
            unsupported("x-rcp-agentic-rankBy", f"{plan.unit} units are ranked by the graph; "
                        "their confidence is read off their leaf chunks once composed")
        version = f"v{served}"

        def result(hits: list[Hit], candidates: int = 0, tokens: int = 0,
                   next_cursor: str | None = None, reranked: int = 0) -> RetrieveResult:
            usage = Usage(candidates=candidates, reranked=reranked, tokens=tokens,
                          latency_ms=round((time.perf_counter() - start) * 1000.0, 3),
                          notes=plan.notes or None)
            return RetrieveResult(hits=hits, index_version=version, usage=usage,
                                  next_cursor=next_cursor)

        composer = self.composers.get(plan.unit)
        if composer is None:
            raise OptionUnsupported(f"unit {plan.unit!r} is not offered by this engine",
                                    option="unit")
        view, allowed_keys = self._graph_scope(plan, served, fields)
        if view is None:
            return result([])
        lag = self._derived_lag([("node", 0)], served)
        if lag:
            plan.notes.append(lag)
        links = view.link(plan.query)
        if not links:
            plan.notes.append(f"the query names no entity of the graph: no {plan.unit} to "
                              "compose")
            return result([])
        qvec = (self.embedder.embed_query(plan.query) if plan.mode in DENSE_MODES
                else None)
        term_ids = self.query_terms(plan.query) if plan.mode in SPARSE_MODES else []
        prior = self._chunk_prior(plan, served, None, {}, qvec, term_ids, allowed_keys)
        ctl.check()
        composed = list(composer(view, links, prior, k=plan.k, token_budget=plan.token_budget))
        ranked = composed
        if plan.session_id:
            ranked = [c for c in ranked if self._composed_is_new(plan.session_id, c)]
        rerank_scores: dict[str, float] = {}
        if plan.rerank_top_n is not None and self.reranker is not None and ranked:
            head = ranked[:plan.rerank_top_n]
            got = [float(x) for x in self.reranker.score(plan.query, [c.text for c in head])]
            rerank_scores = {c.uid: s for c, s in zip(head, got)}
            by_uid = {c.uid: c for c in head}
            ranked = [by_uid[u] for u, _s in rank_scores(rerank_scores.items())] + ranked[len(head):]
        score_of = {c.uid: rerank_scores.get(c.uid, c.score) for c in ranked}
        if plan.min_score is not None:
            ranked = [c for c in ranked if score_of[c.uid] >= plan.min_score]
        ctl.check()
        packed = pack([c.tokens for c in ranked], plan.k, plan.token_budget,
                      start=state.start if state else 0,
                      exclude=state.exclude if state else frozenset())
        _note_budget(plan, packed)
        top = [ranked[i] for i in packed.taken]
        next_cursor = None
        if packed.more and not plan.session_id:
            next_cursor = cursor.encode(CursorState(served, packed.next_start,
                                                    packed.next_exclude, qhash), self._secret)
        leaf_conf: dict[str, float] | None = None
        if self.calibrator is not None and top:
            chunk_hits = self.retrieve_params({
                "query": plan.query, "k": min(plan.candidate_k, self.config.max_k),
                "candidate_k": plan.candidate_k, "mode": plan.mode, "filter": plan.filter,
                "index_version": version, "unit": "chunk", "include_text": False,
                "strict": False, "x-rcp-agentic-graphRecall": True}).hits
            known = {h.id: h.confidence for h in chunk_hits if h.confidence is not None}
            leaf_conf = known if known or not chunk_hits else None
            ctl.check()
        hits = []
        ceiling = 1.0
        for c in top:
            scores = {"graph": float(c.score)}
            if c.uid in rerank_scores:
                scores["rerank"] = rerank_scores[c.uid]
            confidence = None
            if leaf_conf is not None:
                floor = min(leaf_conf.values(), default=0.0)
                best = max((leaf_conf.get(u, floor) for u in c.leaf_uids), default=floor)
                # A hit never claims more confidence than the one ranked above it.
                ceiling = min(ceiling, best)
                confidence = round(ceiling, 6)
            hits.append(build_composed_hit(c, score=score_of[c.uid], scores=scores,
                                           include_text=plan.include_text,
                                           max_chars=plan.max_hit_chars, notes=plan.notes,
                                           confidence=confidence))
        if plan.session_id:
            # Recorded by id only: a path shows a sentence or two of its chunks, not the chunks
            # (the kind does not contain its leaves), so they stay retrievable.
            forgotten = self.sessions.record(plan.session_id, [
                Candidate(c.uid, c.unit, "", None, None) for c in top])
            if forgotten:
                plan.notes.append(f"session full: forgot its {forgotten} oldest unit(s)")
        return result(hits, candidates=len(composed), tokens=packed.tokens,
                      next_cursor=next_cursor, reranked=len(rerank_scores))

    def _composed_is_new(self, session_id: str, c: Any) -> bool:
        """A composed unit is new in a session unless it was returned, or every chunk whose
        sentences it shows was returned already (as a chunk, in a summary or whole document)."""
        if not self.sessions.is_new(session_id, Candidate(c.uid, c.unit, "", None, None)):
            return False
        leaves = [Candidate(uid, "chunk", doc, None, None)
                  for uid, doc in zip(c.leaf_uids, c.leaf_docs)]
        return not leaves or any(self.sessions.filter_new(session_id, leaves))
