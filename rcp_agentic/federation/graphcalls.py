"""Federated ``graph``, ``memory/build`` and ``memory/recall`` (RCP §7.9, §7.17, §16.4), I/O-free.

Each call is a generator of steps (:mod:`.core`): a :class:`Request` (each asked engine's wire
params, and what an engine must advertise to take it), the outcomes gathered, then the
answers merged by :mod:`.graphs`. Engines lacking the capability, op or scope are skipped
and noted, not counted as degraded. No engine offering the method: CapabilityMissing; none
offering the op or scope: OptionUnsupported; every engine refusing the caller's params: their
InvalidParams; nobody answering: BackendUnavailable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..client.errors import (BackendUnavailable, CapabilityMissing, InternalError, InvalidParams,
                             OptionUnsupported, RCPError)
from ..client.params import graph_params, memory_build_params, memory_recall_params
from ..vocabulary import GRAPH_OPS, MEMORY_SCOPES
from ..wire import GraphResult, MemoryBuildResult, MemoryRecallResult, WireModel
from . import graphs
from .core import (Asking, FederationCore, Gather, Member, Outcome, elapsed_ms, failure, gather,
                   report)
from .fusion import fuse

# What an engine must advertise to take a call: None, or the error naming what it lacks.
Needs = Callable[[Mapping[str, Any]], RCPError | None]


@dataclass
class Request:
    """A ``graph`` or ``memory/*`` call fanned out (§16.4): each asked engine's wire params, and
    what an engine must advertise to take it."""

    method: str
    params: dict[str, dict[str, Any]]
    needs: Needs
    strict: bool | None
    start: float
    deadline: float
    meta: dict[str, Any]
    skipped: dict[str, str] = field(default_factory=dict)  # engines not asked, and why
    # Unqualified seeds went to every engine: one that does not know them is skipped, not failed.
    broadcast: bool = False

    def gate(self, m: Member, caps: Mapping[str, Any], t0: float) -> Outcome | Asking:
        """An engine lacking what the call needs is skipped (a required one: an error)."""
        lacks = self.needs(caps)
        if lacks is None:
            return Asking({**self.params[m.id], "_meta": self.meta}, self.strict, [])
        if not m.required:
            return Outcome(m.id, skipped=lacks.message, caps=caps, refusal=lacks)
        error = type(lacks)(f"required engine {m.id!r} {lacks.message}", **lacks.data)
        return Outcome(m.id, error=error, caps=caps, latency_ms=elapsed_ms(t0))

    def answer(self, m: Member, result: Any, t0: float, caps: Mapping[str, Any],
               notes: list[str]) -> Outcome:
        latency = elapsed_ms(t0)
        wrong = graphs.malformed(self.method, result) if isinstance(result, dict) \
            else "not an object"
        if not wrong:
            try:
                _MODELS[self.method].model_validate(result)
            except ValidationError as exc:
                first = exc.errors()[0]
                wrong = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
        if wrong:
            return Outcome(m.id, error=InternalError(f"engine {m.id!r} returned a malformed "
                                                     f"{self.method} result ({wrong})"),
                           latency_ms=latency, caps=caps)
        own = (result.get("usage") or {}).get("notes") or []
        return Outcome(m.id, result=result, latency_ms=latency, caps=caps,
                       notes=[f"engine {m.id!r}: {n}" for n in own])

    def failed(self, m: Member, error: RCPError, caps: Mapping[str, Any],
               t0: float) -> Outcome:
        """An engine that does not know a broadcast seed is skipped (the seed is another
        engine's), unless it is required."""
        if self.broadcast and not m.required and isinstance(error, InvalidParams) \
                and str(error.data.get("field", "")).startswith("seedIds"):
            return Outcome(m.id, skipped=f"does not know the seeds: {error.message}", caps=caps,
                           refusal=error, latency_ms=elapsed_ms(t0))
        return failure(m, error, caps, t0)


# What each method's merged result is parsed as; an engine's own must parse as one too.
_MODELS: dict[str, type[WireModel]] = {"graph": GraphResult, "memory/build": MemoryBuildResult,
                                       "memory/recall": MemoryRecallResult}


# --- the calls ----------------------------------------------------------------------------------

def graph(core: FederationCore, op: Any, query: Any, k: Any, seed_ids: Any, hops: Any,
          level: Any, session_id: Any, cursor: Any, token_budget: Any, filter: Any,
          timeout: float | None, strict: bool | None) -> Generator[Gather, Any, GraphResult]:
    """Federated ``graph`` as steps: see :meth:`~.fanout.Federation.graph`."""
    req = _graph_request(core, op, query, k, seed_ids, hops, level, session_id, cursor,
                         token_budget, filter, timeout, strict)
    outcomes = yield _gather(core, req)
    return _graph_result(core, req, outcomes, k)


def memory_build(core: FederationCore, documents: Any, memory_id: Any, scope: Any,
                 session_id: Any, timeout: float | None, strict: bool | None
                 ) -> Generator[Gather, Any, MemoryBuildResult]:
    """Federated ``memory/build`` as steps: see :meth:`~.fanout.Federation.memory_build`."""
    req = _build_request(core, documents, memory_id, scope, session_id, timeout, strict)
    answered, meta, notes = _settle(core, req, (yield _gather(core, req)))
    return MemoryBuildResult.model_validate(
        _envelope(req, graphs.merge_build(answered), meta, notes))


def memory_recall(core: FederationCore, query: Any, memory_id: Any, session_id: Any, n: Any,
                  filter: Any, timeout: float | None
                  ) -> Generator[Gather, Any, MemoryRecallResult]:
    """Federated ``memory/recall`` as steps: see :meth:`~.fanout.Federation.memory_recall`."""
    req = _recall_request(core, query, memory_id, session_id, n, filter, timeout)
    answered, meta, notes = _settle(core, req, (yield _gather(core, req)))
    want = n or graphs.DEFAULT_CLUES
    merged = graphs.merge_recall(answered, weights=core.weights, rrf_k=core.rrf_k, n=want,
                                 fuse_hits=_fuse_hits(core, want, notes), notes=notes)
    return MemoryRecallResult.model_validate(_envelope(req, merged, meta, notes))


def _gather(core: FederationCore, req: Request) -> Gather:
    return gather(req, [core.members[id_] for id_ in req.params])


# --- requests -----------------------------------------------------------------------------------

def _request(core: FederationCore, method: str, params: dict[str, dict[str, Any]],
             needs: Needs, timeout: float | None, strict: bool | None,
             skipped: dict[str, str]) -> Request:
    start = time.monotonic()
    seconds = core.deadline if timeout is None else timeout
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        raise InvalidParams("timeout must be a positive number of seconds", field="timeout")
    return Request(method, params, needs, strict, start, start + seconds,
                   {"federation": {"depth": core.depth, "path": []}}, skipped)


def _graph_request(core: FederationCore, op: Any, query: Any, k: Any, seed_ids: Any,
                   hops: Any, level: Any, session_id: Any, cursor: Any, token_budget: Any,
                   filter: Any, timeout: float | None, strict: bool | None) -> Request:
    """Who is asked what: a qualified seed goes to its engine, a page to the engines whose
    listing goes on, anything else to every engine."""
    pages = _check_graph(core, op, query, k, seed_ids, hops, level, cursor, token_budget, filter)
    ranked = op in ("local", "drift")  # hits, fused: ask each engine for headroom
    base = graph_params(op, query, core.overfetch * (k or graphs.DEFAULT_GRAPH_K)
                        if ranked else k, None, hops, level, session_id)
    if token_budget is not None:
        base["tokenBudget"] = token_budget
    if filter is not None:
        base["filter"] = dict(filter)
    routed = graphs.route_seeds(list(seed_ids), core.engines) if seed_ids else None
    params: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for id_ in core.members:
        if pages is not None and id_ not in pages:
            skipped[id_] = "not asked: its listing is complete"
        elif pages is not None:
            params[id_] = {**base, **({"cursor": pages[id_]} if pages[id_] else {})}
        elif routed is None:
            params[id_] = dict(base)
        elif own := [*routed.get(id_, []), *routed.get(None, [])]:
            params[id_] = {**base, "seedIds": own}
        else:
            skipped[id_] = "not asked: no seed names this engine"

    def needs(caps: Mapping[str, Any]) -> RCPError | None:
        if not isinstance(caps.get("graph"), Mapping):
            return CapabilityMissing("does not advertise graph")
        if op not in (caps["graph"].get("ops") or ()):
            return OptionUnsupported(f"does not offer graph op {op!r}", option="op")
        return None

    req = _request(core, "graph", params, needs, timeout, strict, skipped)
    req.broadcast = bool(routed and routed.get(None))
    return req


def _check_graph(core: FederationCore, op: Any, query: Any, k: Any, seed_ids: Any, hops: Any,
                 level: Any, cursor: Any, token_budget: Any,
                 filter: Any) -> dict[str, str] | None:
    """Refuse what no engine could take (InvalidParams); each engine's page of a cursor."""
    if not isinstance(op, str) or op not in GRAPH_OPS:
        raise InvalidParams(f"op must be one of {', '.join(GRAPH_OPS)}", field="op")
    _check_count("k", k)
    _check_count("hops", hops)
    _check_count("level", level, minimum=0)
    _check_count("tokenBudget", token_budget)
    if op in ("local", "drift", "global") and not isinstance(query, str):
        raise InvalidParams(f"op {op!r} needs a query string", field="query")
    if filter is not None and not isinstance(filter, Mapping):
        raise InvalidParams("filter must be an object", field="filter")
    pages = graphs.unpack_cursor(cursor, core.members) if cursor is not None else None
    if (seed_ids is not None or op == "neighbors") and (
            isinstance(seed_ids, (str, bytes)) or not isinstance(seed_ids, Sequence)
            or not seed_ids or not all(isinstance(s, str) for s in seed_ids)):
        raise InvalidParams("seedIds must be a non-empty array of node ids", field="seedIds")
    return pages


def _build_request(core: FederationCore, documents: Any, memory_id: Any, scope: Any,
                   session_id: Any, timeout: float | None, strict: bool | None) -> Request:
    if scope is not None and scope not in MEMORY_SCOPES:
        raise InvalidParams(f"scope must be one of {', '.join(MEMORY_SCOPES)}", field="scope")
    if documents is not None and scope != "session":
        raise OptionUnsupported("a federation does not write documents into its engines: "
                                "add them to one engine (index/add) and build, or pass "
                                "scope='session'", option="documents")
    if documents is not None:
        if isinstance(documents, (str, bytes, Mapping)) or not isinstance(documents, Iterable):
            raise InvalidParams("documents must be an array of objects", field="documents")
        documents = list(documents)
        if not all(isinstance(d, Mapping) for d in documents):
            raise InvalidParams("documents must be an array of objects", field="documents")
    own = graphs.unpack_memory_id(memory_id) if memory_id is not None else {}
    params = {id_: memory_build_params(documents, own.get(id_), scope, session_id)
              for id_ in core.members}

    def needs(caps: Mapping[str, Any]) -> RCPError | None:
        if not isinstance(caps.get("memory"), Mapping):
            return CapabilityMissing("does not advertise memory")
        if scope is not None and scope not in (caps["memory"].get("scopes") or ()):
            return OptionUnsupported(f"does not offer memory scope {scope!r}", option="scope")
        return None

    return _request(core, "memory/build", params, needs, timeout, strict, {})


def _recall_request(core: FederationCore, query: Any, memory_id: Any, session_id: Any, n: Any,
                    filter: Any, timeout: float | None) -> Request:
    if not isinstance(query, str):
        raise InvalidParams("query must be a string", field="query")
    _check_count("n", n)
    if filter is not None and not isinstance(filter, Mapping):
        raise InvalidParams("filter must be an object", field="filter")
    own = graphs.unpack_memory_id(memory_id) if memory_id is not None else None
    params: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for id_ in core.members:
        if own is not None and id_ not in own:
            skipped[id_] = "not asked: not part of this memory"
        else:
            params[id_] = memory_recall_params(query, None if own is None else own[id_],
                                               session_id, n, filter)

    def needs(caps: Mapping[str, Any]) -> RCPError | None:
        return None if isinstance(caps.get("memory"), Mapping) \
            else CapabilityMissing("does not advertise memory")

    return _request(core, "memory/recall", params, needs, timeout, None, skipped)


def _check_count(name: str, value: Any, minimum: int = 1) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < minimum):
        raise InvalidParams(f"{name} must be an integer of at least {minimum}", field=name)


# --- results ------------------------------------------------------------------------------------

def _settle(core: FederationCore, req: Request, outcomes: dict[str, Outcome]
            ) -> tuple[dict[str, dict[str, Any]], dict[str, Any], list[str]]:
    """The answers (registry order), ``_meta`` and notes; raises when none answered."""
    for id_, reason in req.skipped.items():
        outcomes[id_] = Outcome(id_, skipped=reason)
    notes: list[str] = []
    engines, degraded = report(
        core, outcomes, notes,
        lambda o: {"latencyMs": o.latency_ms,
                   **({"indexVersion": o.result["indexVersion"]}  # type: ignore[index]
                      if "indexVersion" in (o.result or {}) else {})},
        lambda o: False)  # a skip is a capability this call does not need from it
    answered = {id_: o.result for id_, o in outcomes.items() if o.result is not None}
    if not answered:
        raise _nothing(req.method, [outcomes[id_] for id_ in core.members], notes, engines)
    return ({id_: answered[id_] for id_ in core.members if id_ in answered},
            {"degraded": degraded, "engines": engines}, notes)


def _envelope(req: Request, merged: dict[str, Any], meta: dict[str, Any],
              notes: list[str]) -> dict[str, Any]:
    return {**merged, "usage": {"latencyMs": elapsed_ms(req.start), "notes": notes},
            "_meta": meta}


def _fuse_hits(core: FederationCore, k: int, notes: list[str]) -> graphs.FuseHits:
    def run(lists: Mapping[str, list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], int, str]:
        return fuse(lists, weights={id_: core.members[id_].weight for id_ in lists},
                    floors={}, method="rrf" if core.fusion == "convex" else core.fusion,
                    rrf_k=core.rrf_k, dedup=core.dedup, k=k, notes=notes)
    return run


def _graph_result(core: FederationCore, req: Request, outcomes: dict[str, Outcome],
                  k: int | None) -> GraphResult:
    answered, meta, notes = _settle(core, req, outcomes)
    want = k or graphs.DEFAULT_GRAPH_K
    seeds = {graphs.qualify(id_, seed) for id_, p in req.params.items() if id_ in answered
             for seed in p.get("seedIds") or ()}
    first = next(iter(req.params.values()), {})
    op = first.get("op")
    merged = graphs.merge_graph(answered, weights=core.weights, rrf_k=core.rrf_k, k=want,
                                seeds=seeds, fuse_hits=_fuse_hits(core, want, notes),
                                notes=notes, op=op, token_budget=first.get("tokenBudget"))
    if op == "communities":
        merged.pop("nextCursor", None)
        more = {e: r["nextCursor"] for e, r in answered.items() if r.get("nextCursor")}
        # Asking a failed engine its page again could page forever: its listing stops.
        lost = [e for e in req.params if e not in answered
                and getattr(outcomes.get(e), "error", None) is not None]
        if lost:
            notes.append(f"the listing of {', '.join(map(repr, lost))} stops here: "
                         "it failed this page")
        if more:
            merged["nextCursor"] = graphs.pack_cursor(more)
    return GraphResult.model_validate(_envelope(req, merged, meta, notes)
                                      ).with_query(first.get("query"))


def _nothing(method: str, outcomes: list[Outcome], notes: list[str],
             engines: dict[str, Any]) -> RCPError:
    """Why a federated ``graph``/``memory`` call has no answer: every engine refused the
    caller's params (their InvalidParams: an unknown seed, say), none offers the op or scope
    (OptionUnsupported) or the capability (CapabilityMissing), or nothing answered
    (BackendUnavailable, §16.2)."""
    errors = [o.error for o in outcomes if o.error is not None]
    refusals = [o.refusal for o in outcomes if o.refusal is not None]
    if errors and all(isinstance(e, InvalidParams) for e in errors):
        return errors[0]
    if not errors and refusals:
        for kind in (InvalidParams, OptionUnsupported):
            first = next((r for r in refusals if isinstance(r, kind)), None)
            if isinstance(first, InvalidParams):
                return first
            if first is not None:
                return OptionUnsupported(f"no engine of the federation can: {first.message}",
                                         option=first.data.get("option"))
        cap = "graph" if method == "graph" else "memory"
        return CapabilityMissing(f"no engine of the federation advertises {cap}")
    return BackendUnavailable("no engine answered: " + "; ".join(notes), engines=engines,
                              errors={o.id: o.error.to_wire() for o in outcomes
                                      if o.error is not None} or None)
