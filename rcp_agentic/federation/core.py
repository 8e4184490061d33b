"""The I/O-free core of a federation (RCP §16), shared by every federated call.

A federated call is a generator of steps (:mod:`..client.steps`): :class:`Gather` (ask these
engines concurrently within this deadline; sent back: each one's :class:`Outcome`) and, for
each engine, :class:`Connect` and :class:`Call`. The core decides who is asked what, gates
each engine on its capabilities (:class:`Question`), applies the deadline and the
partial-failure policy (a required engine's failure is raised, another's degrades the result)
and writes the per-engine report; it neither does I/O nor knows threads from tasks.
:mod:`.retrieval` and :mod:`.graphcalls` are the calls; :mod:`.shells` performs their steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from ..client import AsyncRCPClient, RCPClient
from ..client.errors import InternalError, RCPError, Timeout
from ..client.gating import DEFAULT_UNITS, switch_offered
from ..options import OPTIONS, VENDOR

# The vendor switches an engine advertises under capabilities["x-rcp-agentic"] (graphRecall).
_VENDOR_SWITCHES = tuple(o.wire for o in OPTIONS if o.vendor and o.boolean)
RESERVE = 0.05  # seconds kept back from each engine's deadline for fusion (§16.2)


@dataclass
class Member:
    """One engine: its source, weight, and whether every query needs it (``required``);
    ``sync`` is its blocking client, given or opened by the sync shell (then ``owned``)."""

    id: str
    source: Any  # RCPClient | AsyncRCPClient | EngineSpec | Engine
    weight: float = 1.0
    required: bool = False
    sync: RCPClient | None = None
    owned: bool = False


@dataclass
class FederationCore:
    """The engines, in registry order, and the settings every federated call reads."""

    members: dict[str, Member]
    deadline: float
    fusion: str
    rrf_k: int
    depth: int
    overfetch: int
    dedup: str
    identity: str
    local: str | None

    @property
    def engines(self) -> tuple[str, ...]:
        return tuple(self.members)

    @property
    def weights(self) -> dict[str, float]:
        return {id_: m.weight for id_, m in self.members.items()}


@dataclass
class Outcome:
    """What one engine did with a call: answered (``result``), failed, or was skipped."""

    id: str
    result: dict[str, Any] | None = None
    error: RCPError | None = None
    skipped: str | None = None
    latency_ms: float | None = None
    notes: list[str] = field(default_factory=list)
    caps: Mapping[str, Any] = field(default_factory=dict)
    refusal: RCPError | None = None  # why a skipped engine could not take the call


# --- steps ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Connect:
    """Step: the member's client, initialized (sent back: the client)."""

    member: Member


@dataclass(frozen=True)
class Call:
    """Step: ``client.call(method, params, timeout=..., strict=...)``, awaited when the client
    is asynchronous (sent back: its wire result)."""

    client: Any  # RCPClient | AsyncRCPClient
    method: str
    params: dict[str, Any]
    timeout: float
    strict: bool | None


# What one engine is asked: Connect and Call steps, then its outcome.
Ask = Generator[Connect | Call, Any, Outcome]


@dataclass(frozen=True)
class Gather:
    """Step: run every ask concurrently (sent back: the outcomes by engine id, see
    :func:`collect`). ``deadline`` None: as long as each engine's client allows, and a
    failure is only reported."""

    asks: list[tuple[Member, Ask]]
    start: float
    deadline: float | None


@dataclass(frozen=True)
class Waiting:
    """Step: wait up to ``seconds`` (None: no limit) for the first of ``pending`` to finish
    (sent back: the ``(done, pending)`` sets)."""

    pending: set[Any]
    seconds: float | None


Step = Gather | Connect | Call


# --- one engine -------------------------------------------------------------------------------

class Asking(NamedTuple):
    """How an engine is asked: its params, ``strict``, and notes for the result."""

    params: dict[str, Any]
    strict: bool | None
    notes: list[str]


class Question(Protocol):
    """One federated call as each engine sees it: the method, the deadline, and what to make
    of an engine's capabilities, its answer and its failure."""

    @property
    def method(self) -> str: ...

    start: float
    deadline: float

    def gate(self, m: Member, caps: Mapping[str, Any], t0: float) -> Outcome | Asking:
        """How to ask ``m`` given its capabilities, or its outcome without asking."""

    def answer(self, m: Member, result: Any, t0: float, caps: Mapping[str, Any],
               notes: list[str]) -> Outcome:
        """The outcome of ``m``'s wire result."""

    def failed(self, m: Member, error: RCPError, caps: Mapping[str, Any],
               t0: float) -> Outcome:
        """The outcome of ``m``'s failure."""


def ask(m: Member, q: Question) -> Ask:
    """Initialize ``m`` and ask it ``q`` unless its gate says otherwise; every failure becomes
    the outcome (one engine's failure is data here, §16.2)."""
    t0, caps = time.monotonic(), {}
    try:
        client = yield Connect(m)
        caps = client.capabilities
        how = q.gate(m, caps, t0)
        if isinstance(how, Outcome):
            return how
        result = yield Call(client, q.method, how.params, engine_timeout(q.deadline), how.strict)
        return q.answer(m, result, t0, caps, how.notes)
    except Exception as exc:  # noqa: BLE001 - one engine's failure is data here (§16.2)
        return q.failed(m, as_rcp(exc), caps, t0)


def gather(q: Question, members: Iterable[Member]) -> Gather:
    """``q`` asked of each of ``members``, within its deadline."""
    return Gather([(m, ask(m, q)) for m in members], q.start, q.deadline)


def collect(running: Mapping[Any, Member], step: Gather
            ) -> Generator[Waiting, tuple[set[Any], set[Any]], dict[str, Outcome]]:
    """Each engine's outcome by the deadline (a late one: Timeout), waiting on its call still
    ``running`` (a future or task); with a deadline a required engine's failure is raised."""
    outcomes: dict[str, Outcome] = {}
    pending = set(running)
    while pending:
        left = None if step.deadline is None else step.deadline - time.monotonic()
        if left is not None and left <= 0:
            break
        done, pending = yield Waiting(pending, left)
        for f in done:
            outcomes[running[f].id] = _checked(running[f], f.result(), step)
    for f in pending:
        outcomes[running[f].id] = _checked(running[f], _late(running[f], step), step)
    return outcomes


def _checked(m: Member, outcome: Outcome, step: Gather) -> Outcome:
    """A required engine's failure fails the whole call with that engine's error (§16.2)."""
    if step.deadline is not None and m.required and outcome.error is not None:
        outcome.error.data.setdefault("engine", m.id)
        raise outcome.error
    return outcome


def _late(m: Member, step: Gather) -> Outcome:
    assert step.deadline is not None  # without one, every call is waited for
    seconds = step.deadline - step.start
    return Outcome(m.id, error=Timeout(f"engine {m.id!r} did not answer within the "
                                        f"federation deadline ({seconds:.3g} s)"),
                   latency_ms=elapsed_ms(step.start))


def engine_timeout(deadline: float) -> float:
    """One engine's timeout: strictly less than what is left, some kept for the merge."""
    left = deadline - time.monotonic()
    return max(0.001, left - min(RESERVE, left * 0.1))


def failure(m: Member, error: RCPError, caps: Mapping[str, Any], t0: float) -> Outcome:
    return Outcome(m.id, error=error, caps=caps, latency_ms=elapsed_ms(t0))


def as_rcp(exc: BaseException) -> RCPError:
    return exc if isinstance(exc, RCPError) else InternalError(f"{type(exc).__name__}: {exc}")


def elapsed_ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 3)


# --- the report -------------------------------------------------------------------------------

def report(core: FederationCore, outcomes: dict[str, Outcome], notes: list[str],
           answered: Callable[[Outcome], dict[str, Any]],
           degrades: Callable[[Outcome], bool]) -> tuple[dict[str, Any], list[str]]:
    """``_meta.engines`` and ``_meta.degraded``; each engine's notes appended to ``notes``."""
    degraded: list[str] = []
    engines: dict[str, Any] = {}
    for id_ in core.members:
        o = outcomes[id_]
        if o.result is not None:
            engines[id_] = answered(o)
            notes += o.notes
        elif o.error is not None:
            engines[id_] = {"latencyMs": o.latency_ms, "error": o.error.to_wire()}
            kind = "timed out" if isinstance(o.error, Timeout) else "failed"
            notes.append(f"engine {id_!r} {kind} ({o.error.code}): {o.error.message}")
            degraded.append(id_)
        else:
            engines[id_] = {"skipped": o.skipped}
            notes.append(f"engine {id_!r} skipped: {o.skipped}")
            if degrades(o):
                degraded.append(id_)
    return engines, degraded


# --- initialize and capabilities (§16.4) ------------------------------------------------------

def initialize(core: FederationCore) -> Generator[Gather, Any, dict[str, Outcome]]:
    """Initialize every engine (each within its client's timeout): outcomes in registry order."""
    members = list(core.members.values())
    outcomes = yield Gather([(m, _initialized(m)) for m in members], time.monotonic(), None)
    return {m.id: outcomes[m.id] for m in members}


def _initialized(m: Member) -> Ask:
    t0 = time.monotonic()
    try:
        if isinstance(m.source, AsyncRCPClient) and m.source.server:
            return Outcome(m.id, caps=m.source.capabilities)
        client = yield Connect(m)
        return Outcome(m.id, caps=client.capabilities)
    except Exception as exc:  # noqa: BLE001 - one engine's failure is data here (§16.2)
        return failure(m, as_rcp(exc), {}, t0)


def connect(core: FederationCore) -> Generator[Gather, Any, dict[str, RCPError]]:
    """Initialize every engine now: the failures by engine id."""
    outcomes = yield from initialize(core)
    return {id_: o.error for id_, o in outcomes.items() if o.error}


def capabilities(core: FederationCore) -> Generator[Gather, Any, dict[str, Any]]:
    """Union (effective) and intersection (guaranteed) of the engines' capabilities (§16.4):
    top-level keys, ``retrieve.modes``/``units``, ``graph.ops``, ``memory.scopes`` and the
    ``x-rcp-agentic`` switches (``graphRecall``)."""
    outcomes = yield from initialize(core)
    caps = {id_: dict(o.caps) for id_, o in outcomes.items() if o.error is None}
    union: dict[str, Any] = {key: {} for c in caps.values() for key in sorted(c)}
    common = set.intersection(*(set(c) for c in caps.values())) if caps else set()
    inter: dict[str, Any] = {key: {} for key in sorted(common)}
    for cap, name, default in (("retrieve", "modes", ()), ("retrieve", "units", DEFAULT_UNITS),
                               ("graph", "ops", ()), ("memory", "scopes", ())):
        sets = [set(c[cap].get(name) or default) for c in caps.values()
                if isinstance(c.get(cap), dict)]
        if sets:
            union[cap][name] = sorted(set.union(*sets))
        if sets and cap in inter:
            inter[cap][name] = sorted(set.intersection(*sets))
    for wire in _VENDOR_SWITCHES:  # x-rcp-agentic-graphRecall: capabilities["x-rcp-agentic"]
        offered = [switch_offered(wire, c) for c in caps.values()]
        name = wire.removeprefix(f"{VENDOR}-")
        if any(offered):
            union[VENDOR][name] = True
        if offered and all(offered):
            inter[VENDOR][name] = True
    return {"union": union, "intersection": inter, "engines": caps,
            "unavailable": {id_: o.error.to_wire() for id_, o in outcomes.items()
                            if o.error is not None}}
