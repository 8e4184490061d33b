"""Federated ``retrieve`` (RCP §16.2, §16.3), I/O-free: who is asked with what, and the fusion.

:func:`retrieve` is the call as steps (:mod:`.core`): the plan (params, loop detection over
``_meta.federation``, the deadline, capped by an incoming ``deadlineMs``), each engine gated
on the options it advertises, then the answers fused (:mod:`.fusion`) into one
:class:`~rcp_agentic.wire.RetrieveResult` whose ``meta`` reports every engine.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import ValidationError

from ..client.errors import (BackendUnavailable, CapabilityMissing, InternalError, InvalidParams,
                             OptionUnsupported, RCPError)
from ..client.gating import check_options
from ..client.params import RETRIEVE_OPTIONS, retrieve_params, wire_options
from ..wire import RetrieveResult
from .core import (Asking, FederationCore, Gather, Member, Outcome, elapsed_ms, failure, gather,
                   report)
from .fusion import fuse

DEDUP = ("id", "uri")
# Options meaningless across engines: cursors and snapshot tokens live in one engine's id space.
NOT_FEDERATED = ("cursor", "indexVersion")


@dataclass
class Plan:
    """One federated retrieve: who is asked (``members``), with what, by when."""

    method: ClassVar[str] = "retrieve"
    query: Any
    k: int
    n: int
    options: dict[str, Any]
    strict: bool | None
    dedup: str
    start: float
    deadline: float
    meta: dict[str, Any]
    members: list[Member]
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def gate(self, m: Member, caps: Mapping[str, Any], t0: float) -> Outcome | Asking:
        """How to ask one engine, by its capabilities. An engine that cannot honour an option
        gets it with strict=false, unless the caller asked strict=True or the option is
        ``filter`` (its hits would break the caller's constraint): then it is skipped."""
        unsupported = []
        for name, value in self.options.items():
            try:
                check_options("retrieve", {name: value}, caps)
            except OptionUnsupported:
                unsupported.append(name)
        names = ", ".join(unsupported)
        skip = ("does not advertise retrieve" if "retrieve" not in caps
                else f"cannot honour {names} (strict)" if unsupported and self.strict
                else "cannot apply the filter" if "filter" in unsupported else None)
        if skip and not m.required:
            return Outcome(m.id, skipped=skip, caps=caps)
        if skip:  # "required" means the query needs this engine: skipping it is a failure
            cls = CapabilityMissing if "retrieve" not in caps else OptionUnsupported
            return Outcome(m.id, error=cls(f"required engine {m.id!r} {skip}"), caps=caps,
                           latency_ms=elapsed_ms(t0))
        params = retrieve_params(self.query, self.n, {**self.options, "_meta": self.meta})
        if not unsupported:
            return Asking(params, self.strict, [])
        return Asking(params, False,
                      [f"engine {m.id!r}: sent with strict=false ({names} not advertised)"])

    def answer(self, m: Member, result: Any, t0: float, caps: Mapping[str, Any],
               notes: list[str]) -> Outcome:
        latency = elapsed_ms(t0)
        try:  # what the fused result is parsed as: an engine whose hits cannot be is left out
            RetrieveResult.model_validate(result)
            malformed = not isinstance(result.get("hits"), list)
        except ValidationError:
            malformed = True
        if malformed:
            return Outcome(m.id, error=InternalError(f"engine {m.id!r} returned a malformed "
                                                     "result"), latency_ms=latency, caps=caps)
        own = (result.get("usage") or {}).get("notes") or []
        return Outcome(m.id, result=result, latency_ms=latency, caps=caps,
                       notes=notes + [f"engine {m.id!r}: {n}" for n in own])

    def failed(self, m: Member, error: RCPError, caps: Mapping[str, Any],
               t0: float) -> Outcome:
        return failure(m, error, caps, t0)


def retrieve(core: FederationCore, query: Any, k: int, timeout: float | None,
             dedup: str | None, strict: bool | None, options: Mapping[str, Any]
             ) -> Generator[Gather, Any, RetrieveResult]:
    """Federated ``retrieve`` as steps: see :meth:`~.fanout.FanOut.retrieve`."""
    plan = _plan(core, query, k, timeout, dedup, strict, options)
    outcomes = yield gather(plan, plan.members)
    return _finish(core, plan, outcomes)


def _plan(core: FederationCore, query: Any, k: int, timeout: float | None, dedup: str | None,
          strict: bool | None, options: Mapping[str, Any]) -> Plan:
    """Validate the call, apply loop detection and the deadline: who is asked, with what."""
    start = time.monotonic()
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidParams("k must be a positive integer", field="k")
    dedup = dedup or core.dedup
    if dedup not in DEDUP:
        raise InvalidParams(f"dedup must be one of {DEDUP}", field="dedup")
    wire = wire_options("retrieve", options, RETRIEVE_OPTIONS)
    wire.pop("strict", None)
    for name in NOT_FEDERATED:
        if name in wire:
            raise OptionUnsupported(f"{name} is per engine and cannot be federated",
                                    option=name)
    incoming = wire.pop("_meta", None) or {}
    if not isinstance(incoming, Mapping):
        raise InvalidParams("_meta must be an object", field="_meta")
    seconds = core.deadline if timeout is None else timeout
    if isinstance(incoming.get("deadlineMs"), (int, float)):
        seconds = min(seconds, incoming["deadlineMs"] / 1000.0)
    plan = Plan(query, k, core.overfetch * k, wire, strict, dedup, start, start + seconds,
                {"federation": {"depth": core.depth, "path": []}}, [])
    fed = incoming.get("federation") if isinstance(incoming.get("federation"), Mapping) \
        else None
    _route(core, plan, fed)
    return plan


def _route(core: FederationCore, plan: Plan, fed: Mapping[str, Any] | None) -> None:
    """Loop detection (§16.2): the hop budget and path sent on, and who is asked; with an
    incoming ``_meta.federation`` this federation is an aggregator forwarding."""
    path: list[str] = []
    halt = None
    if fed is not None:
        hops = fed.get("depth")
        depth = hops if isinstance(hops, int) and not isinstance(hops, bool) else core.depth
        path = [str(p) for p in fed.get("path") or ()]
        plan.meta = {"federation": {"depth": max(0, depth - 1),
                                    "path": [*path, core.identity]}}
        if depth <= 0:
            halt = "hop budget exhausted (_meta.federation.depth 0)"
        elif core.identity in path:
            halt = f"cycle: {core.identity!r} is already in the federation path"
        if halt:
            plan.notes.append(f"{halt}: not forwarding")
    for m in core.members.values():
        if m.id in path:
            plan.skipped[m.id] = "cycle: already in the federation path"
        elif halt and m.id != core.local:
            plan.skipped[m.id] = f"not forwarded ({halt})"
        else:
            plan.members.append(m)


def _finish(core: FederationCore, plan: Plan, outcomes: dict[str, Outcome]) -> RetrieveResult:
    """The fused result with its report; raises when no engine answered."""
    notes = list(plan.notes)
    for id_, reason in plan.skipped.items():
        outcomes[id_] = Outcome(id_, skipped=reason)
    engines, degraded = report(
        core, outcomes, notes,
        lambda o: {"hits": len(o.result["hits"]),  # type: ignore[index]
                   "latencyMs": o.latency_ms},
        lambda o: o.skipped != "does not advertise retrieve")
    for entry in engines.values():
        entry.setdefault("hits", 0)
    answered = {id_: o for id_, o in outcomes.items() if o.result is not None}
    if not answered:
        errors = {i: o.error.to_wire() for i, o in outcomes.items() if o.error is not None}
        if not errors and all(o.skipped == "does not advertise retrieve"
                              for o in outcomes.values()) and outcomes:
            raise CapabilityMissing("no engine of the federation advertises retrieve")
        raise BackendUnavailable("no engine answered: " + "; ".join(notes), engines=engines,
                                 errors=errors or None)
    hits, candidates, method = _fuse(core, answered, plan, notes)
    return RetrieveResult.model_validate({
        "hits": hits,
        "usage": {"candidates": candidates, "latencyMs": elapsed_ms(plan.start),
                  "notes": notes},
        "_meta": {"degraded": degraded, "engines": engines, "fusion": method},
    }).with_query(plan.query)


def _fuse(core: FederationCore, answered: dict[str, Outcome], plan: Plan,
          notes: list[str]) -> tuple[list[dict[str, Any]], int, str]:
    """Fused hits (top k), the number of distinct candidates, and the method used (§16.3)."""
    lists = {id_: answered[id_].result["hits"]  # type: ignore[index]
             for id_ in core.members if id_ in answered}
    return fuse(lists, weights={id_: core.members[id_].weight for id_ in lists},
                floors={id_: (answered[id_].caps.get("retrieve") or {}).get("scoreFloor")
                        for id_ in lists},
                method=core.fusion, rrf_k=core.rrf_k, dedup=plan.dedup, k=plan.k, notes=notes)
