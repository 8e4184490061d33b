"""Federated ``graph``, ``memory/build`` and ``memory/recall`` (RCP §7.9, §7.17, §16.4):
:class:`Federation`, the full facade — :class:`~.fanout.FanOut` (engines, clients, the
deadline-bounded fan-out, federated ``retrieve``) plus the knowledge-graph methods.

>>> with Federation.from_registry("rcp.json") as fed:                         # doctest: +SKIP
...     clue = fed.memory_recall("who drummed for the band behind Midnight Harbor?").clues[0]
...     fed.graph("neighbors", seed_ids=clue.seed_ids, hops=1).nodes

A graph op runs on the engines advertising ``graph`` with that op, memory on those
advertising ``memory`` (and the scope asked for); the others are skipped and noted, not
counted as degraded. The deadline, partial failure, ``required`` engines and
``_meta.federation``/``deadlineMs`` work as for ``retrieve`` (§16.2). :mod:`.graphs`
routes seeds and memories to their engines and merges the answers: hits fused as
retrieve's, nodes, edges and clue seeds under engine-qualified ids (``"<engine>::<id>"``).
No engine offering the method: CapabilityMissing; none offering the op or scope:
OptionUnsupported; every engine refusing the caller's params: their InvalidParams; nobody
answering: BackendUnavailable. Results are the typed ones an engine returns
(:class:`~rcp_agentic.wire.GraphResult`, ``MemoryBuildResult``, ``MemoryRecallResult``),
the federation's report in ``meta`` (the result's ``_meta``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..client.errors import (
    BackendUnavailable,
    CapabilityMissing,
    InternalError,
    InvalidParams,
    OptionUnsupported,
    RCPError,
)
from ..client.params import graph_params, memory_build_params, memory_recall_params
from ..vocabulary import GRAPH_OPS, MEMORY_SCOPES
from ..wire import GraphResult, MemoryBuildResult, MemoryRecallResult, WireModel
from . import graphs
from .fanout import Ask, Connect, FanOut, Invoke, Member, Outcome, as_rcp, elapsed_ms
from .fusion import fuse


@dataclass
class _Request:
    """A ``graph`` or ``memory/*`` call fanned out (§16.4): each asked engine's wire params, and
    what an engine must advertise to take it (an error naming what it lacks, or None)."""

    method: str
    params: dict[str, dict[str, Any]]
    needs: Callable[[Mapping[str, Any]], RCPError | None]
    strict: bool | None
    start: float
    deadline: float
    meta: dict[str, Any]
    skipped: dict[str, str] = field(default_factory=dict)  # engines not asked, and why
    # Unqualified seeds went to every engine: one that does not know them is skipped, not failed.
    broadcast: bool = False


class Federation(FanOut):
    """A facade over several RCP engines (§16): federated ``retrieve`` (:class:`~.fanout.FanOut`)
    and the knowledge-graph methods ``graph``, ``memory_build``, ``memory_recall`` and their
    asyncio twins (``agraph``, …), each on the engines that advertise it (§16.4)."""

    def graph(self, op: str, query: Any = None, *, k: int | None = None,
              seed_ids: Sequence[str] | None = None, hops: int | None = None,
              level: int | None = None, session_id: str | None = None,
              cursor: str | None = None, token_budget: int | None = None,
              filter: Mapping[str, Any] | None = None,
              timeout: float | None = None, strict: bool | None = None) -> GraphResult:
        """Federated ``graph`` (§7.9) on the engines advertising ``graph`` with ``op`` (§16.4):
        a :class:`~rcp_agentic.wire.GraphResult`.

        ``local``/``drift`` hits are fused as :meth:`retrieve`'s (each engine asked for
        ``overfetch·k``; ``convex`` falls back to RRF: graph scores have no advertised
        floor); ``neighbors`` nodes and edges come back with engine-qualified ids
        (``"<engine>::node:…"``, see :mod:`.graphs`), the qualified seeds first, at most
        ``max(k, seeds)`` nodes. A qualified seed goes to its engine only, an unqualified
        one to every engine offering the op. No engine offering ``graph``:
        CapabilityMissing; none offering ``op``: OptionUnsupported; every engine refusing
        the params (an unknown seed, say): that InvalidParams.

        ``global``: each engine ranks ``k`` communities of its own and summarises them
        within ``token_budget``; the communities (qualified) are interleaved by weighted RRF,
        the first ``k`` kept, and the summary interleaves the engines' summary lines within
        ``token_budget`` (see :func:`.graphs.merge_summaries`). ``communities``: one page
        of every engine whose listing goes on (so up to ``k`` per engine), ``nextCursor``
        packing each engine's own (an engine that failed a page is asked that page again);
        ``cursor`` is only one this federation returned. ``drift`` runs on every engine with
        the same ``session_id`` (each continues its own frontier); ``followups`` are
        deduplicated. ``filter`` goes to every engine as given (it scopes every op).
        """
        req = self._graph_request(op, query, k, seed_ids, hops, level, session_id, timeout,
                                  strict, cursor, token_budget, filter)
        return self._graph_result(req, self._fan_out(*self._asks(req)), k, seed_ids)

    async def agraph(self, op: str, query: Any = None, *, k: int | None = None,
                     seed_ids: Sequence[str] | None = None, hops: int | None = None,
                     level: int | None = None, session_id: str | None = None,
                     cursor: str | None = None, token_budget: int | None = None,
                     filter: Mapping[str, Any] | None = None,
                     timeout: float | None = None, strict: bool | None = None) -> GraphResult:
        """The asyncio :meth:`graph`."""
        req = self._graph_request(op, query, k, seed_ids, hops, level, session_id, timeout,
                                  strict, cursor, token_budget, filter)
        return self._graph_result(req, await self._afan_out(*self._asks(req)), k, seed_ids)

    def memory_build(self, documents: Iterable[Mapping[str, Any]] | None = None, *,
                     memory_id: str | None = None, scope: str | None = None,
                     session_id: str | None = None, timeout: float | None = None,
                     strict: bool | None = None) -> MemoryBuildResult:
        """Federated ``memory/build`` (§7.17) on the engines advertising ``memory`` (and
        ``scope``): a :class:`~rcp_agentic.wire.MemoryBuildResult`, its ``memory_id`` opaque,
        packing each engine's own (pass it back to :meth:`memory_build` or
        :meth:`memory_recall`).

        ``documents`` only with ``scope="session"``: a federation does not write the same
        documents into every engine (OptionUnsupported; add them to one engine instead).
        """
        req = self._build_request(documents, memory_id, scope, session_id, timeout, strict)
        return self._call_result(req, self._fan_out(*self._asks(req)), graphs.merge_build)

    async def amemory_build(self, documents: Iterable[Mapping[str, Any]] | None = None, *,
                            memory_id: str | None = None, scope: str | None = None,
                            session_id: str | None = None, timeout: float | None = None,
                            strict: bool | None = None) -> MemoryBuildResult:
        """The asyncio :meth:`memory_build`."""
        req = self._build_request(documents, memory_id, scope, session_id, timeout, strict)
        return self._call_result(req, await self._afan_out(*self._asks(req)), graphs.merge_build)

    def memory_recall(self, query: Any, *, memory_id: str | None = None,
                      session_id: str | None = None, n: int | None = None,
                      filter: Mapping[str, Any] | None = None,
                      timeout: float | None = None) -> MemoryRecallResult:
        """Federated ``memory/recall`` (§7.17): a :class:`~rcp_agentic.wire.MemoryRecallResult`,
        the engines' clues with their ``seed_ids`` engine-qualified
        (feed them to :meth:`graph`, a clue's ``query`` to :meth:`retrieve`), interleaved by
        weighted RRF over each engine's own order, the first ``n`` (default 5). With a
        federated ``memory_id`` only the engines it names are asked. ``filter`` goes to
        every engine as given and scopes each one's clues."""
        req = self._recall_request(query, memory_id, session_id, n, timeout, filter)
        return self._recall_result(req, self._fan_out(*self._asks(req)), n)

    async def amemory_recall(self, query: Any, *, memory_id: str | None = None,
                             session_id: str | None = None, n: int | None = None,
                             filter: Mapping[str, Any] | None = None,
                             timeout: float | None = None) -> MemoryRecallResult:
        """The asyncio :meth:`memory_recall`."""
        req = self._recall_request(query, memory_id, session_id, n, timeout, filter)
        return self._recall_result(req, await self._afan_out(*self._asks(req)), n)

    def _request(self, method: str, params: dict[str, dict[str, Any]],
                 needs: Callable[[Mapping[str, Any]], RCPError | None], timeout: float | None,
                 strict: bool | None, skipped: dict[str, str]) -> _Request:
        start = time.monotonic()
        seconds = self.deadline if timeout is None else timeout
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
            raise InvalidParams("timeout must be a positive number of seconds", field="timeout")
        return _Request(method, params, needs, strict, start, start + seconds,
                        {"federation": {"depth": self.depth, "path": []}}, skipped)

    def _graph_request(self, op: Any, query: Any, k: Any, seed_ids: Any, hops: Any, level: Any,
                       session_id: Any, timeout: float | None, strict: bool | None,
                       cursor: Any = None, token_budget: Any = None,
                       filter: Any = None) -> _Request:
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
        pages = (graphs.unpack_cursor(cursor, self._members) if cursor is not None
                 else None)
        if seed_ids is not None or op == "neighbors":
            if isinstance(seed_ids, (str, bytes)) or not isinstance(seed_ids, Sequence) \
                    or not seed_ids or not all(isinstance(s, str) for s in seed_ids):
                raise InvalidParams("seedIds must be a non-empty array of node ids",
                                    field="seedIds")
        ranked = op in ("local", "drift")  # hits, fused: ask each engine for headroom
        base = graph_params(op, query, self.overfetch * (k or graphs.DEFAULT_GRAPH_K)
                            if ranked else k, None, hops, level, session_id)
        if token_budget is not None:
            base["tokenBudget"] = token_budget
        if filter is not None:
            base["filter"] = dict(filter)
        routed = graphs.route_seeds(list(seed_ids), self.engines) if seed_ids else None
        params: dict[str, dict[str, Any]] = {}
        skipped: dict[str, str] = {}
        for id_ in self._members:
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

        req = self._request("graph", params, needs, timeout, strict, skipped)
        req.broadcast = bool(routed and routed.get(None))
        return req

    def _build_request(self, documents: Any, memory_id: Any, scope: Any, session_id: Any,
                       timeout: float | None, strict: bool | None) -> _Request:
        if scope is not None and scope not in MEMORY_SCOPES:
            raise InvalidParams(f"scope must be one of {', '.join(MEMORY_SCOPES)}",
                                field="scope")
        if documents is not None and scope != "session":
            raise OptionUnsupported("a federation does not write documents into its engines: "
                                    "add them to one engine (index/add) and build, or pass "
                                    "scope='session'", option="documents")
        if documents is not None:
            if isinstance(documents, (str, bytes, Mapping)) or not isinstance(documents,
                                                                                Iterable):
                raise InvalidParams("documents must be an array of objects", field="documents")
            documents = list(documents)
            if not all(isinstance(d, Mapping) for d in documents):
                raise InvalidParams("documents must be an array of objects", field="documents")
        own = graphs.unpack_memory_id(memory_id) if memory_id is not None else {}
        params = {id_: memory_build_params(documents, own.get(id_), scope, session_id)
                  for id_ in self._members}

        def needs(caps: Mapping[str, Any]) -> RCPError | None:
            if not isinstance(caps.get("memory"), Mapping):
                return CapabilityMissing("does not advertise memory")
            if scope is not None and scope not in (caps["memory"].get("scopes") or ()):
                return OptionUnsupported(f"does not offer memory scope {scope!r}",
                                         option="scope")
            return None

        return self._request("memory/build", params, needs, timeout, strict, {})

    def _recall_request(self, query: Any, memory_id: Any, session_id: Any, n: Any,
                        timeout: float | None, filter: Any = None) -> _Request:
        if not isinstance(query, str):
            raise InvalidParams("query must be a string", field="query")
        _check_count("n", n)
        if filter is not None and not isinstance(filter, Mapping):
            raise InvalidParams("filter must be an object", field="filter")
        own = graphs.unpack_memory_id(memory_id) if memory_id is not None else None
        params: dict[str, dict[str, Any]] = {}
        skipped: dict[str, str] = {}
        for id_ in self._members:
            if own is not None and id_ not in own:
                skipped[id_] = "not asked: not part of this memory"
            else:
                params[id_] = memory_recall_params(query, None if own is None else own[id_],
                                                   session_id, n, filter)

        def needs(caps: Mapping[str, Any]) -> RCPError | None:
            return None if isinstance(caps.get("memory"), Mapping) \
                else CapabilityMissing("does not advertise memory")

        return self._request("memory/recall", params, needs, timeout, None, skipped)

    def _asks(self, req: _Request) -> tuple[list[Member], _Request, Callable[[Member], Ask]]:
        """Who is asked ``req`` and how: the fan-out's arguments."""
        return [self._members[id_] for id_ in req.params], req, lambda m: self._call(m, req)

    def _call(self, m: Member, req: _Request) -> Ask:
        """Initialize ``m`` and ask it ``req`` if it advertises what it needs; failures are data."""
        t0, caps = time.monotonic(), {}
        try:
            client = yield Connect(m)
            caps = client.capabilities
            refused = self._refused(m, req, caps, t0)
            if refused is not None:
                return refused
            result = yield Invoke(client, "call",
                                  (req.method, {**req.params[m.id], "_meta": req.meta}),
                                  dict(timeout=self._engine_timeout(req), strict=req.strict))
            return _replied(m.id, req.method, result, t0, caps)
        except Exception as exc:  # noqa: BLE001 - one engine's failure is data here (§16.2)
            return _failed(m, req, as_rcp(exc), caps, t0)

    @staticmethod
    def _refused(m: Member, req: _Request, caps: Mapping[str, Any],
                 t0: float) -> Outcome | None:
        """The outcome of an engine that lacks what ``req`` needs (a required one: an error)."""
        lacks = req.needs(caps)
        if lacks is None:
            return None
        if not m.required:
            return Outcome(m.id, skipped=lacks.message, caps=caps, refusal=lacks)
        error = type(lacks)(f"required engine {m.id!r} {lacks.message}", **lacks.data)
        return Outcome(m.id, error=error, caps=caps, latency_ms=elapsed_ms(t0))

    def _settle(self, req: _Request, outcomes: dict[str, Outcome]
                ) -> tuple[dict[str, dict[str, Any]], dict[str, Any], list[str]]:
        """The answers (registry order), ``_meta`` and notes; raises when none answered."""
        for id_, reason in req.skipped.items():
            outcomes[id_] = Outcome(id_, skipped=reason)
        notes: list[str] = []
        engines, degraded = self._report(
            outcomes, notes,
            lambda o: {"latencyMs": o.latency_ms,
                       **({"indexVersion": o.result["indexVersion"]}  # type: ignore[index]
                          if "indexVersion" in (o.result or {}) else {})},
            lambda o: False)  # a skip is a capability this call does not need from it
        answered = {id_: o.result for id_, o in outcomes.items() if o.result is not None}
        if not answered:
            raise _nothing(req.method, [outcomes[id_] for id_ in self._members], notes, engines)
        return ({id_: answered[id_] for id_ in self._members if id_ in answered},
                {"degraded": degraded, "engines": engines}, notes)

    def _envelope(self, req: _Request, merged: dict[str, Any], meta: dict[str, Any],
                  notes: list[str]) -> dict[str, Any]:
        return {**merged, "usage": {"latencyMs": elapsed_ms(req.start), "notes": notes},
                "_meta": meta}

    def _call_result(self, req: _Request, outcomes: dict[str, Outcome],
                     merge: Callable[[Mapping[str, Mapping[str, Any]]], dict[str, Any]]
                     ) -> MemoryBuildResult:
        answered, meta, notes = self._settle(req, outcomes)
        return MemoryBuildResult.model_validate(
            self._envelope(req, merge(answered), meta, notes))

    def _fuse_hits(self, k: int, notes: list[str]) -> graphs.FuseHits:
        def run(lists: Mapping[str, list[dict[str, Any]]]
                ) -> tuple[list[dict[str, Any]], int, str]:
            return fuse(lists, weights={id_: self._members[id_].weight for id_ in lists},
                        floors={}, method="rrf" if self.fusion == "convex" else self.fusion,
                        rrf_k=self.rrf_k, dedup=self.dedup, k=k, notes=notes)
        return run

    def _graph_result(self, req: _Request, outcomes: dict[str, Outcome], k: int | None,
                      seed_ids: Sequence[str] | None) -> GraphResult:
        answered, meta, notes = self._settle(req, outcomes)
        want = k or graphs.DEFAULT_GRAPH_K
        seeds = {graphs.qualify(id_, seed) for id_, p in req.params.items() if id_ in answered
                 for seed in p.get("seedIds") or ()}
        op = next(iter(req.params.values()), {}).get("op")
        budget = next(iter(req.params.values()), {}).get("tokenBudget")
        merged = graphs.merge_graph(answered, weights={i: m.weight
                                                       for i, m in self._members.items()},
                                    rrf_k=self.rrf_k, k=want, seeds=seeds,
                                    fuse_hits=self._fuse_hits(want, notes), notes=notes,
                                    op=op, token_budget=budget)
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
        query = next(iter(req.params.values()), {}).get("query")
        return GraphResult.model_validate(self._envelope(req, merged, meta, notes)
                                          ).with_query(query)

    def _recall_result(self, req: _Request, outcomes: dict[str, Outcome],
                       n: int | None) -> MemoryRecallResult:
        answered, meta, notes = self._settle(req, outcomes)
        want = n or graphs.DEFAULT_CLUES
        merged = graphs.merge_recall(answered, weights={i: m.weight
                                                        for i, m in self._members.items()},
                                     rrf_k=self.rrf_k, n=want,
                                     fuse_hits=self._fuse_hits(want, notes), notes=notes)
        return MemoryRecallResult.model_validate(self._envelope(req, merged, meta, notes))


def _check_count(name: str, value: Any, minimum: int = 1) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < minimum):
        raise InvalidParams(f"{name} must be an integer of at least {minimum}", field=name)


# What each method's merged result is parsed as; an engine's own must parse as one too.
_MODELS: dict[str, type[WireModel]] = {"graph": GraphResult, "memory/build": MemoryBuildResult,
                                       "memory/recall": MemoryRecallResult}


def _replied(id_: str, method: str, result: Any, t0: float, caps: Mapping[str, Any]) -> Outcome:
    latency = elapsed_ms(t0)
    wrong = graphs.malformed(method, result) if isinstance(result, dict) else "not an object"
    if not wrong:
        try:
            _MODELS[method].model_validate(result)
        except ValidationError as exc:
            first = exc.errors()[0]
            wrong = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    if wrong:
        return Outcome(id_, error=InternalError(f"engine {id_!r} returned a malformed "
                                                 f"{method} result ({wrong})"),
                        latency_ms=latency, caps=caps)
    own = (result.get("usage") or {}).get("notes") or []
    return Outcome(id_, result=result, latency_ms=latency, caps=caps,
                    notes=[f"engine {id_!r}: {n}" for n in own])


def _failed(m: Member, req: _Request, error: RCPError, caps: Mapping[str, Any],
            t0: float) -> Outcome:
    """An engine's error as its outcome; an engine that does not know a broadcast seed is
    skipped (the seed is another engine's), unless it is required."""
    if req.broadcast and not m.required and isinstance(error, InvalidParams) \
            and str(error.data.get("field", "")).startswith("seedIds"):
        return Outcome(m.id, skipped=f"does not know the seeds: {error.message}", caps=caps,
                        refusal=error, latency_ms=elapsed_ms(t0))
    return Outcome(m.id, error=error, caps=caps, latency_ms=elapsed_ms(t0))


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
