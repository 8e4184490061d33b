"""Retrieve of the composed kinds (``path``, ``subgraph``): units composed at query time from the
graph the request may see, by the kind's composer (``Engine.composers``).

Composition is their recall source: the composer ranks units from the query's linked
entities and the dense/sparse passage prior. The ranking then goes through the stages that
apply to units without vectors or dates — session dedup, rerank of the head, ``minScore`` —
and through the same paging, cursors and session records as stored units
(:mod:`.paging`). A hit's confidence is P(it covers a supporting passage), read off its
leaf chunks (:func:`leaf_confidence_params`, :func:`composed_hits`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from ..errors import OptionUnsupported
from ..models.embedder import TimedEmbedder
from ..models.reranker import Reranker
from ..ranking import ranked as rank_scores
from ..sessions import SessionStore
from ..store.recall import RecallBackend
from ..vocabulary import DENSE_MODES, SPARSE_MODES
from ..wire import Hit
from .candidates import Request
from .hits import build_composed_hit
from .scoring import ceiling
from .session_units import composed_is_new
from .stages import score_passages


@dataclass
class Composition:
    """A request's composed units: all the composer made (``made``), and what is left after
    dedup, rerank and ``minScore`` (``ranked``), with each unit's rerank score and final
    score by id."""

    made: list[Any] = field(default_factory=list)
    ranked: list[Any] = field(default_factory=list)
    rerank: dict[str, float] = field(default_factory=dict)
    score_of: dict[str, float] = field(default_factory=dict)


def check_options(request: Request) -> None:
    """Options that do not apply to composed units: a note each, or OptionUnsupported when
    the request is strict."""
    plan = request.plan

    def unsupported(option: str, message: str) -> None:
        if request.strict:
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


@dataclass(eq=False)
class ComposedRecall:
    """Composes a request's units and ranks them (module doc). ``graph_scope`` and
    ``chunk_prior`` are graph recall's (the graph a request may see, the passage prior)."""

    recall: RecallBackend
    embedder: TimedEmbedder
    sessions: SessionStore
    reranker: Reranker | None
    query_terms: Callable[[str], list[int]]
    _: KW_ONLY
    graph_scope: Callable[..., tuple[Any, frozenset[str] | None]]
    chunk_prior: Callable[..., dict[str, float]]

    def compose(self, request: Request, composer: Callable[..., Any]) -> Composition | None:
        """The ranked units (None, with a note, when the snapshot holds no graph or the query
        names no entity of it)."""
        plan, snapshot = request.plan, request.snapshot
        view, allowed_keys = self.graph_scope(plan, snapshot)
        if view is None:
            return None
        lag = snapshot.lag([("node", 0)])
        if lag:
            plan.notes.append(lag)
        links = view.link(plan.query)
        if not links:
            plan.notes.append(f"the query names no entity of the graph: no {plan.unit} to "
                              "compose")
            return None
        qvec = (self.embedder.embed_query(plan.dense_query or plan.query)
                if plan.mode in DENSE_MODES else None)
        term_ids = (self.query_terms(plan.sparse_query or plan.query)
                    if plan.mode in SPARSE_MODES else [])
        prior = self.chunk_prior(self.recall, plan, snapshot, {}, None, qvec, term_ids,
                                 allowed_keys)
        request.ctl.check()
        made = list(composer(view, links, prior, k=plan.k, token_budget=plan.token_budget))
        found = Composition(made=made, ranked=made)
        self._rank(request, found)
        request.ctl.check()
        return found

    def _rank(self, request: Request, found: Composition) -> None:
        """Session dedup, rerank of the ``topN`` head (the tail keeps its place), ``minScore``."""
        plan = request.plan
        if plan.session_id:
            found.ranked = [c for c in found.ranked
                            if composed_is_new(self.sessions, plan.session_id, c)]
        if plan.rerank_top_n is not None and self.reranker is not None and found.ranked:
            head = found.ranked[:plan.rerank_top_n]
            got = score_passages(self.reranker, plan.query, [c.text for c in head])
            found.rerank = {c.uid: s for c, s in zip(head, got)}
            by_uid = {c.uid: c for c in head}
            found.ranked = ([by_uid[u] for u, _s in rank_scores(found.rerank.items())]
                            + found.ranked[len(head):])
        found.score_of = {c.uid: found.rerank.get(c.uid, c.score) for c in found.ranked}
        if plan.min_score is not None:
            found.ranked = [c for c in found.ranked if found.score_of[c.uid] >= plan.min_score]


def leaf_confidence_params(request: Request, max_k: int) -> dict[str, Any]:
    """The chunk retrieve whose confidences the composed hits read: the same query and scope
    (mode, filter, index version, graph recall on; ``candidateK`` deep)."""
    plan = request.plan
    return {"query": plan.query, "k": min(plan.candidate_k, max_k),
            "candidate_k": plan.candidate_k, "mode": plan.mode, "filter": plan.filter,
            "index_version": request.snapshot.token, "unit": "chunk", "include_text": False,
            "strict": False, "x-rcp-agentic-graphRecall": True}


def leaf_confidences(chunk_hits: list[Hit]) -> dict[str, float] | None:
    """The leaf chunks' confidences by id (None: the chunk retrieve returned hits, none of
    them calibrated)."""
    known = {h.id: h.confidence for h in chunk_hits if h.confidence is not None}
    return known if known or not chunk_hits else None


def composed_hits(request: Request, top: list[Any], found: Composition,
                  leaf_conf: Mapping[str, float] | None) -> list[Hit]:
    """Hits of the composed units ``top``. A hit's confidence is the largest among its leaf
    chunks' (a leaf the chunk retrieve did not return gets the smallest it did return, 0.0
    if it returned none), since a unit covers a relevant passage at least as often as its
    best leaf is relevant; made non-increasing down the list; None without a calibration."""
    plan = request.plan
    confidences: list[float | None] = [None] * len(top)
    if leaf_conf is not None:
        floor = min(leaf_conf.values(), default=0.0)
        confidences = ceiling(max((leaf_conf.get(u, floor) for u in c.leaf_uids), default=floor)
                              for c in top)
    hits = []
    for c, confidence in zip(top, confidences):
        scores = {"graph": float(c.score)}
        if c.uid in found.rerank:
            scores["rerank"] = found.rerank[c.uid]
        hits.append(build_composed_hit(c, score=found.score_of[c.uid], scores=scores,
                                       include_text=plan.include_text,
                                       max_chars=plan.max_hit_chars, notes=plan.notes,
                                       confidence=confidence))
    return hits
