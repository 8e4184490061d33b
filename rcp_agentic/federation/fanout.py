"""Federation (RCP §16): one ``retrieve`` fanned out to every reachable engine, fused into one list.

>>> with Federation.from_registry("rcp.json", deadline=5.0) as fed:     # doctest: +SKIP
...     fed.retrieve("what is reciprocal rank fusion?", k=5).hits

Engines are RCP clients, ``rcp.json`` entries (:class:`~rcp_agentic.client.registry.EngineSpec`)
or in-process :class:`~rcp_agentic.Engine` s. Each engine advertising ``retrieve`` is
asked for ``overfetch·k`` hits concurrently (threads for :meth:`Federation.retrieve`,
asyncio for :meth:`Federation.aretrieve`) within one deadline. Failures and timeouts
of non-required engines degrade the result (``usage.notes``, ``meta["degraded"]``);
a ``required`` engine's failure is raised as its own error; nothing answering
raises ``BackendUnavailable`` (§16.2). Hits are fused by weighted RRF (default),
weighted min-max or floor-anchored convex scores, deduplicated by id (or
``citation.uri``) and tagged with their origin (§16.3). ``_meta.federation``
carries the hop budget and path downstream (loop detection) and each engine's
client sends the remaining deadline as ``_meta.deadlineMs``.

:class:`FanOut` is the engines, their clients, this deadline-bounded fan-out and federated
``retrieve``; :class:`~.graphcalls.Federation` adds ``graph`` and ``memory/*`` on it. What
one engine is asked, and the wait for the answers, are each written once as a generator of
steps (:mod:`..client.steps`): the sync methods perform them in daemon threads, the asyncio
ones in tasks. Each engine is asked with ``client.call`` and answers its wire result (the
fusion reads and merges wire hits, keeping what each engine sent); the federation returns
the typed result one engine returns (:class:`~rcp_agentic.wire.RetrieveResult`, its report
in ``meta``, the result's ``_meta``).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import ValidationError

from ..client import AsyncRCPClient, RCPClient
from ..client.errors import (
    BackendUnavailable,
    CapabilityMissing,
    InternalError,
    InvalidParams,
    OptionUnsupported,
    RCPError,
    Timeout,
)
from ..client.gating import DEFAULT_UNITS, check_options, switch_offered
from ..client.params import RETRIEVE_OPTIONS, retrieve_params, wire_options
from ..client.registry import EngineSpec, Registry, load_registry
from ..client.steps import adrive, drive
from ..closing import Closable
from ..engine import Engine
from ..options import OPTIONS, VENDOR
from ..vocabulary import FUSIONS
from ..wire import RetrieveResult
from .fusion import fuse

if TYPE_CHECKING:
    import os

    from typing_extensions import Self


DEDUP = ("id", "uri")
# Options meaningless across engines: cursors and snapshot tokens live in one engine's id space.
NOT_FEDERATED = ("cursor", "indexVersion")
# The vendor switches an engine advertises under capabilities["x-rcp-agentic"] (graphRecall).
_VENDOR_SWITCHES = tuple(o.wire for o in OPTIONS if o.vendor and o.boolean)
RESERVE = 0.05  # seconds kept back from each engine's deadline for fusion (§16.2)


@dataclass
class Member:
    id: str
    source: Any  # RCPClient | AsyncRCPClient | EngineSpec | Engine
    weight: float = 1.0
    required: bool = False
    sync: RCPClient | None = None  # given or opened
    owned: bool = False


@dataclass
class _Plan:
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


class Deadlined(Protocol):
    """A fanned-out call: when it started and by when every engine must have answered."""

    start: float
    deadline: float


@dataclass
class Outcome:
    id: str
    result: dict[str, Any] | None = None
    error: RCPError | None = None
    skipped: str | None = None
    latency_ms: float | None = None
    notes: list[str] = field(default_factory=list)
    caps: Mapping[str, Any] = field(default_factory=dict)
    refusal: RCPError | None = None  # why a skipped engine could not take the call


@dataclass(frozen=True)
class Connect:
    """Step: the member's client, initialized (sent back: the client)."""

    member: Member


@dataclass(frozen=True)
class Invoke:
    """Step: ``client.<name>(*args, **kwargs)``, awaited when the client is asynchronous."""

    client: RCPClient | AsyncRCPClient
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Waiting:
    """Step: wait up to ``seconds`` for the first of ``pending`` to finish (sent back: the
    ``(done, pending)`` sets)."""

    pending: set[Any]
    seconds: float


# What one engine is asked: Connect and Invoke steps (see ..client.steps), then its outcome.
Ask = Generator[Connect | Invoke, Any, Outcome]
R = TypeVar("R")


def as_rcp(exc: BaseException) -> RCPError:
    return exc if isinstance(exc, RCPError) else InternalError(f"{type(exc).__name__}: {exc}")


def spawn(fn: Callable[..., R], *args: Any) -> Future[R]:
    """Run ``fn(*args)`` in a daemon thread: an engine stuck past the deadline never blocks exit."""
    future: Future[R] = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - the caller gets it from the future
            future.set_exception(exc)

    threading.Thread(target=run, name="rcp-federation", daemon=True).start()
    return future


class FanOut(Closable):
    """Several RCP engines behind one facade: concurrent fan-out, partial failure, fusion (§16).

    ``engines`` maps a client-local id to an RCPClient, AsyncRCPClient, EngineSpec
    or Engine (or is a loaded Registry). ``deadline`` bounds every query (seconds);
    ``fusion`` is ``"rrf"`` (weights from the registry or ``weights``), ``"weighted"``
    (min-max) or ``"convex"`` (floor-anchored; falls back to RRF unless every
    answering engine advertises ``retrieve.scoreFloor``). ``depth`` is the hop budget
    sent downstream; ``identity`` names this federation in ``_meta.federation.path``;
    ``local`` is the engine that is this aggregator's own index (asked even when the
    hop budget is spent). Clients it opens it also closes. Use
    :class:`~rcp_agentic.federation.Federation`, which adds the graph methods.
    """

    def __init__(self, engines: Mapping[str, Any] | Registry, *, deadline: float = 10.0,
                 fusion: str = "rrf", rrf_k: int = 60, depth: int = 3, overfetch: int = 2,
                 dedup: str = "id", weights: Mapping[str, float] | None = None,
                 required: Iterable[str] | None = None, identity: str | None = None,
                 local: str | None = None, client_options: Mapping[str, Any] | None = None) -> None:
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, not {fusion!r}")
        if dedup not in DEDUP:
            raise ValueError(f"dedup must be one of {DEDUP}, not {dedup!r}")
        if deadline <= 0 or rrf_k < 0 or depth < 0 or overfetch < 1:
            raise ValueError("need deadline > 0, rrf_k >= 0, depth >= 0 and overfetch >= 1")
        weights, required = dict(weights or {}), set(required or ())
        self._members: dict[str, Member] = {}
        for id_, source in engines.items():
            if not isinstance(source, (RCPClient, AsyncRCPClient, EngineSpec, Engine)):
                raise TypeError(f"engine {id_!r}: expected an RCPClient, AsyncRCPClient, "
                                f"EngineSpec or Engine, not {type(source).__name__}")
            spec = source if isinstance(source, EngineSpec) else None
            self._members[id_] = Member(
                id_, source, float(weights.get(id_, spec.weight if spec else 1.0)),
                id_ in required or bool(spec and spec.required),
                source if isinstance(source, RCPClient) else None)
        unknown = (set(weights) | required | ({local} if local else set())) - set(self._members)
        if unknown:
            raise ValueError(f"no engine(s) {sorted(unknown)} in this federation")
        self.deadline, self.fusion, self.rrf_k = float(deadline), fusion, rrf_k
        self.depth, self.overfetch, self.dedup, self.local = depth, overfetch, dedup, local
        self.identity = identity or f"federation-{uuid.uuid4().hex[:12]}"
        self.client_options = dict(client_options or {})
        self._lock = threading.Lock()
        self._async: dict[asyncio.AbstractEventLoop, dict[str, AsyncRCPClient]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    @classmethod
    def from_registry(cls, source: str | os.PathLike[str] | Mapping[str, Any],
                      **kwargs: Any) -> Self:
        """A federation over every engine of an ``rcp.json`` (path or parsed mapping)."""
        return cls(load_registry(source), **kwargs)

    @property
    def engines(self) -> tuple[str, ...]:
        """The engine ids, in registry order."""
        return tuple(self._members)

    # --- clients --------------------------------------------------------------------------

    def _sync_client(self, m: Member) -> RCPClient:
        with self._lock:
            if m.sync is None:
                if isinstance(m.source, AsyncRCPClient):
                    raise TypeError(f"engine {m.id!r} is an AsyncRCPClient: use aretrieve")
                m.sync = (m.source.connect(**self.client_options)
                          if isinstance(m.source, EngineSpec)
                          else RCPClient.in_process(m.source, **self.client_options))
                m.owned = True
            return m.sync

    def _async_client(self, m: Member) -> AsyncRCPClient | None:
        """This loop's async client for ``m`` (None: a given sync client, run in a thread)."""
        if isinstance(m.source, AsyncRCPClient):
            return m.source
        if isinstance(m.source, RCPClient):
            return None
        loop = asyncio.get_running_loop()
        with self._lock:
            for old in [lp for lp in self._async if lp.is_closed()]:
                del self._async[old]  # its clients died with it (subprocesses are reaped)
            clients = self._async.setdefault(loop, {})
            if m.id not in clients:
                clients[m.id] = (m.source.connect_async(**self.client_options)
                                 if isinstance(m.source, EngineSpec)
                                 else AsyncRCPClient.in_process(m.source, **self.client_options))
            return clients[m.id]

    def connect(self) -> dict[str, RCPError]:
        """Initialize every engine now (each within its client's timeout); the failures by id."""
        return {id_: o.error for id_, o in self._init_all().items() if o.error}

    async def aconnect(self) -> dict[str, RCPError]:
        """The asyncio :meth:`connect`, for this event loop's clients."""
        return {id_: o.error for id_, o in (await self._ainit_all()).items() if o.error}

    def _init_all(self) -> dict[str, Outcome]:
        futures = {m.id: spawn(self._run, self._ask(m, None)) for m in self._members.values()}
        return {id_: f.result() for id_, f in futures.items()}

    async def _ainit_all(self) -> dict[str, Outcome]:
        outcomes = await asyncio.gather(*(self._arun(self._ask(m, None))
                                          for m in self._members.values()))
        return {o.id: o for o in outcomes}

    def close(self) -> None:
        """Close the clients this federation opened (not the ones it was given)."""
        for m in self._members.values():
            if m.owned and m.sync is not None:
                m.sync.close()
                m.sync, m.owned = None, False
        with self._lock:
            loops, self._async = self._async, {}
        for loop, clients in loops.items():
            if not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(asyncio.gather(*(c.close() for c in clients.values())))

    async def aclose(self) -> None:
        """Close this loop's async clients, then (in a thread) everything else we opened."""
        with self._lock:
            clients = self._async.pop(asyncio.get_running_loop(), {})
        await asyncio.gather(*(c.close() for c in clients.values()))
        await asyncio.to_thread(self.close)


    # --- capabilities (§16.4) -------------------------------------------------------------

    @property
    def capabilities(self) -> dict[str, Any]:
        """``{"union", "intersection", "engines", "unavailable"}`` over the reachable engines.

        Initializes engines not yet connected. ``union``/``intersection`` hold the
        top-level capability keys (``{}`` values), ``retrieve.modes``/``units``,
        ``graph.ops``, ``memory.scopes`` and ``x-rcp-agentic.graphRecall``.
        """
        return _combine(self._init_all())

    # --- retrieve -------------------------------------------------------------------------

    def retrieve(self, query: Any, k: int = 10, *, timeout: float | None = None,
                 dedup: str | None = None, strict: bool | None = None,
                 **options: Any) -> RetrieveResult:
        """Federated ``retrieve``: a :class:`~rcp_agentic.wire.RetrieveResult` like one
        engine's, its ``meta`` (the result's ``_meta``) the federation's report: ``degraded``
        (the engines that failed), ``engines`` (each one's hits, latency or error) and
        ``fusion`` (the method used).

        ``options`` are RCP retrieve params (snake_case or camelCase) sent to every
        engine; an engine not advertising one gets it with ``strict=false`` (noted),
        except ``filter``, which an engine that cannot filter is skipped for.
        ``strict=True`` skips every engine that cannot honour all options. ``timeout``
        overrides the federation deadline; ``_meta`` may carry an incoming
        ``federation``/``deadlineMs`` when this federation serves an aggregator.
        """
        plan = self._plan(query, k, timeout, dedup, strict, options)
        return self._finish(plan, self._fan_out(plan.members, plan,
                                                lambda m: self._ask(m, plan)))

    async def aretrieve(self, query: Any, k: int = 10, *, timeout: float | None = None,
                        dedup: str | None = None, strict: bool | None = None,
                        **options: Any) -> RetrieveResult:
        """The asyncio :meth:`retrieve` (``asyncio`` tasks over AsyncRCPClients)."""
        plan = self._plan(query, k, timeout, dedup, strict, options)
        return self._finish(plan, await self._afan_out(plan.members, plan,
                                                       lambda m: self._ask(m, plan)))

    # --- the fan-out: each engine's steps, run in threads or tasks -------------------------

    def _fan_out(self, members: Iterable[Member], plan: Deadlined,
                 ask: Callable[[Member], Ask]) -> dict[str, Outcome]:
        """``ask(m)`` of every member, each in a daemon thread; their outcomes by the deadline."""
        futures = {spawn(self._run, ask(m)): m for m in members}
        return drive(self._collect(futures, plan), lambda step: wait(
            step.pending, timeout=step.seconds, return_when=FIRST_COMPLETED))

    async def _afan_out(self, members: Iterable[Member], plan: Deadlined,
                        ask: Callable[[Member], Ask]) -> dict[str, Outcome]:
        """The asyncio :meth:`_fan_out`; tasks still running at the deadline are cancelled."""
        tasks = {asyncio.create_task(self._arun(ask(m))): m for m in members}
        try:
            return await adrive(self._collect(tasks, plan), lambda step: asyncio.wait(
                step.pending, timeout=step.seconds, return_when=asyncio.FIRST_COMPLETED))
        finally:
            for t in tasks:  # cancelling sends notifications/cancel (§7.14); don't wait for it
                if not t.done():
                    t.cancel()
                    self._tasks.add(t)
                    t.add_done_callback(self._tasks.discard)

    def _collect(self, running: Mapping[Any, Member], plan: Deadlined
                 ) -> Generator[Waiting, tuple[set[Any], set[Any]], dict[str, Outcome]]:
        """Each engine's outcome by the deadline (a late one: Timeout), as it waits on the
        calls still running; a required engine's failure is raised."""
        outcomes: dict[str, Outcome] = {}
        pending = set(running)
        while pending and (left := plan.deadline - time.monotonic()) > 0:
            done, pending = yield Waiting(pending, left)
            for f in done:
                outcomes[running[f].id] = self._checked(running[f], f.result())
        for f in pending:
            outcomes[running[f].id] = self._checked(running[f], self._late(running[f], plan))
        return outcomes

    def _run(self, ask: Ask) -> Outcome:
        """One engine's steps with blocking clients."""
        return drive(ask, self._perform)

    async def _arun(self, ask: Ask) -> Outcome:
        """One engine's steps with this loop's async clients (a given sync one: in threads)."""
        return await adrive(ask, self._aperform)

    def _perform(self, step: Connect | Invoke) -> Any:
        if isinstance(step, Connect):
            client = self._sync_client(step.member)
            client.initialize()
            return client
        return getattr(step.client, step.name)(*step.args, **step.kwargs)

    async def _aperform(self, step: Connect | Invoke) -> Any:
        if isinstance(step, Connect):
            client = self._async_client(step.member)
            if client is None:
                return await asyncio.wrap_future(spawn(self._perform, step))
            await client.initialize()
            return client
        call = getattr(step.client, step.name)
        if isinstance(step.client, RCPClient):
            return await asyncio.wrap_future(spawn(functools.partial(call, *step.args,
                                                                     **step.kwargs)))
        return await call(*step.args, **step.kwargs)

    def _plan(self, query: Any, k: int, timeout: float | None, dedup: str | None,
              strict: bool | None, options: Mapping[str, Any]) -> _Plan:
        """Validate the call, apply loop detection and the deadline: who is asked, with what."""
        start = time.monotonic()
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidParams("k must be a positive integer", field="k")
        dedup = dedup or self.dedup
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
        seconds = self.deadline if timeout is None else timeout
        if isinstance(incoming.get("deadlineMs"), (int, float)):
            seconds = min(seconds, incoming["deadlineMs"] / 1000.0)
        fed = incoming.get("federation") if isinstance(incoming.get("federation"), Mapping) \
            else None
        depth, path = self.depth, []
        if fed is not None:  # we are an aggregator forwarding (§16.2)
            hops = fed.get("depth")
            depth = hops if isinstance(hops, int) and not isinstance(hops, bool) else self.depth
            path = [str(p) for p in fed.get("path") or ()]
        plan = _Plan(query, k, self.overfetch * k, wire, strict, dedup, start, start + seconds,
                     {"federation": {"depth": self.depth, "path": []}}, [])
        halt = None
        if fed is not None:
            plan.meta = {"federation": {"depth": max(0, depth - 1),
                                        "path": [*path, self.identity]}}
            if depth <= 0:
                halt = "hop budget exhausted (_meta.federation.depth 0)"
            elif self.identity in path:
                halt = f"cycle: {self.identity!r} is already in the federation path"
            if halt:
                plan.notes.append(f"{halt}: not forwarding")
        for m in self._members.values():
            if m.id in path:
                plan.skipped[m.id] = "cycle: already in the federation path"
            elif halt and m.id != self.local:
                plan.skipped[m.id] = f"not forwarded ({halt})"
            else:
                plan.members.append(m)
        return plan

    def _engine_timeout(self, plan: Deadlined) -> float:
        left = plan.deadline - time.monotonic()
        return max(0.001, left - min(RESERVE, left * 0.1))  # strictly less downstream

    def _gate(self, m: Member, caps: Mapping[str, Any], plan: _Plan | None,
              t0: float) -> Outcome | tuple[dict[str, Any], bool | None, list[str]]:
        """How to ask one engine, by its capabilities: (options, strict, notes) or an outcome.

        ``plan`` None means initialize only. An engine that cannot honour an option
        gets it with strict=false, unless the caller asked strict=True or the option is
        ``filter`` (its hits would break the caller's constraint): then it is skipped.
        """
        if plan is None:
            return Outcome(m.id, caps=caps)
        unsupported = []
        for name, value in plan.options.items():
            try:
                check_options("retrieve", {name: value}, caps)
            except OptionUnsupported:
                unsupported.append(name)
        names = ", ".join(unsupported)
        skip = ("does not advertise retrieve" if "retrieve" not in caps
                else f"cannot honour {names} (strict)" if unsupported and plan.strict
                else "cannot apply the filter" if "filter" in unsupported else None)
        if skip and not m.required:
            return Outcome(m.id, skipped=skip, caps=caps)
        if skip:  # "required" means the query needs this engine: skipping it is a failure
            cls = CapabilityMissing if "retrieve" not in caps else OptionUnsupported
            return Outcome(m.id, error=cls(f"required engine {m.id!r} {skip}"), caps=caps,
                            latency_ms=elapsed_ms(t0))
        opts = {**plan.options, "_meta": plan.meta}
        if not unsupported:
            return opts, plan.strict, []
        return opts, False, [f"engine {m.id!r}: sent with strict=false ({names} not advertised)"]

    def _ask(self, m: Member, plan: _Plan | None) -> Ask:
        """Initialize ``m`` and (with a plan) ask it; every failure becomes the outcome."""
        t0, caps = time.monotonic(), {}
        try:
            if plan is None and isinstance(m.source, AsyncRCPClient) and m.source.server:
                return Outcome(m.id, caps=m.source.capabilities)
            client = yield Connect(m)
            caps = client.capabilities
            call = self._gate(m, caps, plan, t0)
            if isinstance(call, Outcome):
                return call
            assert plan is not None
            opts, strict, notes = call
            result = yield Invoke(client, "call",
                                  ("retrieve", retrieve_params(plan.query, plan.n, opts)),
                                  dict(timeout=self._engine_timeout(plan), strict=strict))
            return _answered(m.id, result, t0, notes, caps)
        except Exception as exc:  # noqa: BLE001 - one engine's failure is data here (§16.2)
            return Outcome(m.id, error=as_rcp(exc), caps=caps, latency_ms=elapsed_ms(t0))

    def _late(self, m: Member, plan: Deadlined) -> Outcome:
        seconds = plan.deadline - plan.start
        return Outcome(m.id, error=Timeout(f"engine {m.id!r} did not answer within the "
                                            f"federation deadline ({seconds:.3g} s)"),
                        latency_ms=elapsed_ms(plan.start))

    @staticmethod
    def _checked(m: Member, outcome: Outcome) -> Outcome:
        """A required engine's failure fails the whole query with that engine's error (§16.2)."""
        if m.required and outcome.error is not None:
            outcome.error.data.setdefault("engine", m.id)
            raise outcome.error
        return outcome

    def _report(self, outcomes: dict[str, Outcome], notes: list[str],
                answered: Callable[[Outcome], dict[str, Any]],
                degrades: Callable[[Outcome], bool]) -> tuple[dict[str, Any], list[str]]:
        """``_meta.engines`` and ``_meta.degraded``; each engine's notes appended to ``notes``."""
        degraded: list[str] = []
        engines: dict[str, Any] = {}
        for id_ in self._members:
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

    def _finish(self, plan: _Plan, outcomes: dict[str, Outcome]) -> RetrieveResult:
        notes = list(plan.notes)
        for id_, reason in plan.skipped.items():
            outcomes[id_] = Outcome(id_, skipped=reason)
        engines, degraded = self._report(
            outcomes, notes,
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
        hits, candidates, method = self._fuse(answered, plan, notes)
        return RetrieveResult.model_validate({
            "hits": hits,
            "usage": {"candidates": candidates, "latencyMs": elapsed_ms(plan.start),
                      "notes": notes},
            "_meta": {"degraded": degraded, "engines": engines, "fusion": method},
        }).with_query(plan.query)

    # --- fusion (§16.3) -------------------------------------------------------------------

    def _fuse(self, answered: dict[str, Outcome], plan: _Plan,
              notes: list[str]) -> tuple[list[dict[str, Any]], int, str]:
        """Fused hits (top k), the number of distinct candidates, and the method used."""
        lists = {id_: answered[id_].result["hits"]  # type: ignore[index]
                 for id_ in self._members if id_ in answered}
        return fuse(lists, weights={id_: self._members[id_].weight for id_ in lists},
                    floors={id_: (answered[id_].caps.get("retrieve") or {}).get("scoreFloor")
                            for id_ in lists},
                    method=self.fusion, rrf_k=self.rrf_k, dedup=plan.dedup, k=plan.k,
                    notes=notes)


def elapsed_ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 3)


def _answered(id_: str, result: Any, t0: float, notes: list[str],
              caps: Mapping[str, Any]) -> Outcome:
    latency = elapsed_ms(t0)
    try:  # what the fused result is parsed as: an engine whose hits cannot be is left out
        RetrieveResult.model_validate(result)
        malformed = not isinstance(result.get("hits"), list)
    except ValidationError:
        malformed = True
    if malformed:
        return Outcome(id_, error=InternalError(f"engine {id_!r} returned a malformed result"),
                        latency_ms=latency, caps=caps)
    own = (result.get("usage") or {}).get("notes") or []
    return Outcome(id_, result=result, latency_ms=latency, caps=caps,
                    notes=notes + [f"engine {id_!r}: {n}" for n in own])


def _combine(outcomes: Mapping[str, Outcome]) -> dict[str, Any]:
    """Union (effective) and intersection (guaranteed) of the engines' capabilities (§16.4):
    top-level keys, ``retrieve.modes``/``units``, ``graph.ops``, ``memory.scopes`` and the
    ``x-rcp-agentic`` switches (``graphRecall``)."""
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
