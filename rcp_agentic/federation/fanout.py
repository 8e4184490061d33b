"""The federation's facades (RCP §16): :class:`FanOut` (federated ``retrieve``) and
:class:`Federation` (plus ``graph``, ``memory/build`` and ``memory/recall``, §16.4).

>>> with Federation.from_registry("rcp.json", deadline=5.0) as fed:     # doctest: +SKIP
...     fed.retrieve("what is reciprocal rank fusion?", k=5).hits

Every engine is asked concurrently within one deadline; a ``required`` engine's failure is
raised as its own error, another's degrades the result (``usage.notes``,
``meta["degraded"]``); nothing answering raises ``BackendUnavailable`` (§16.2). Each method
hands one generator of steps from the I/O-free core (:mod:`.core`, :mod:`.retrieval`,
:mod:`.graphcalls`) to a shell (:mod:`.shells`): threads for the sync methods, tasks for their
asyncio twins (``aretrieve``, ``agraph``, …). Results are the typed ones one engine returns,
the federation's report in ``meta`` (the result's ``_meta``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..client import AsyncRCPClient, RCPClient
from ..client.errors import RCPError
from ..client.registry import EngineSpec, Registry, load_registry
from ..closing import Closable
from ..engine import Engine
from ..vocabulary import FUSIONS
from ..wire import GraphResult, MemoryBuildResult, MemoryRecallResult, RetrieveResult
from . import core, graphcalls, retrieval
from .core import FederationCore, Member
from .retrieval import DEDUP
from .shells import Tasks, Threads

if TYPE_CHECKING:
    import os

    from typing_extensions import Self


class _Setting:
    """A federation setting, kept in (and changed on) its core."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(obj._core, self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(obj._core, self.name, value)


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

    deadline, fusion, rrf_k, depth, overfetch, dedup, local, identity = (
        _Setting() for _ in range(8))

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
        members: dict[str, Member] = {}
        for id_, source in engines.items():
            if not isinstance(source, (RCPClient, AsyncRCPClient, EngineSpec, Engine)):
                raise TypeError(f"engine {id_!r}: expected an RCPClient, AsyncRCPClient, "
                                f"EngineSpec or Engine, not {type(source).__name__}")
            spec = source if isinstance(source, EngineSpec) else None
            members[id_] = Member(
                id_, source, float(weights.get(id_, spec.weight if spec else 1.0)),
                id_ in required or bool(spec and spec.required),
                source if isinstance(source, RCPClient) else None)
        unknown = (set(weights) | required | ({local} if local else set())) - set(members)
        if unknown:
            raise ValueError(f"no engine(s) {sorted(unknown)} in this federation")
        self._core = FederationCore(members, float(deadline), fusion, rrf_k, depth, overfetch,
                                    dedup, identity or f"federation-{uuid.uuid4().hex[:12]}",
                                    local)
        self.client_options = dict(client_options or {})
        self._threads = Threads(self.client_options)
        self._tasks = Tasks(self._threads)

    @classmethod
    def from_registry(cls, source: str | os.PathLike[str] | Mapping[str, Any],
                      **kwargs: Any) -> Self:
        """A federation over every engine of an ``rcp.json`` (path or parsed mapping)."""
        return cls(load_registry(source), **kwargs)

    @property
    def engines(self) -> tuple[str, ...]:
        """The engine ids, in registry order."""
        return self._core.engines

    @property
    def _members(self) -> dict[str, Member]:
        return self._core.members

    def connect(self) -> dict[str, RCPError]:
        """Initialize every engine now (each within its client's timeout); the failures by id."""
        return self._threads.run(core.connect(self._core))

    async def aconnect(self) -> dict[str, RCPError]:
        """The asyncio :meth:`connect`, for this event loop's clients."""
        return await self._tasks.run(core.connect(self._core))

    def close(self) -> None:
        """Close the clients this federation opened (not the ones it was given)."""
        self._threads.close(self._core.members.values())
        self._tasks.close()

    async def aclose(self) -> None:
        """Close this loop's async clients, then (in a thread) everything else we opened."""
        await self._tasks.aclose()
        await asyncio.to_thread(self.close)

    @property
    def capabilities(self) -> dict[str, Any]:
        """``{"union", "intersection", "engines", "unavailable"}`` over the reachable engines
        (§16.4).

        Initializes engines not yet connected. ``union``/``intersection`` hold the
        top-level capability keys (``{}`` values), ``retrieve.modes``/``units``,
        ``graph.ops``, ``memory.scopes`` and ``x-rcp-agentic.graphRecall``.
        """
        return self._threads.run(core.capabilities(self._core))

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
        ``federation``/``deadlineMs`` when this federation serves an aggregator. Each
        engine is asked for ``overfetch·k`` hits; hits are fused by weighted RRF (default),
        weighted min-max or floor-anchored convex scores, deduplicated by id (or
        ``citation.uri``) and tagged with their origin in ``meta.engine`` (§16.3).
        """
        return self._threads.run(retrieval.retrieve(self._core, query, k, timeout, dedup,
                                                    strict, options))

    async def aretrieve(self, query: Any, k: int = 10, *, timeout: float | None = None,
                        dedup: str | None = None, strict: bool | None = None,
                        **options: Any) -> RetrieveResult:
        """The asyncio :meth:`retrieve` (``asyncio`` tasks over AsyncRCPClients)."""
        return await self._tasks.run(retrieval.retrieve(self._core, query, k, timeout, dedup,
                                                        strict, options))


class Federation(FanOut):
    """A facade over several RCP engines (§16): federated ``retrieve`` (:class:`FanOut`)
    and the knowledge-graph methods ``graph``, ``memory_build``, ``memory_recall`` and their
    asyncio twins (``agraph``, …), each on the engines that advertise it (§16.4).

    >>> with Federation.from_registry("rcp.json") as fed:                     # doctest: +SKIP
    ...     clue = fed.memory_recall("who drummed for the band behind Midnight Harbor?").clues[0]
    ...     fed.graph("neighbors", seed_ids=clue.seed_ids, hops=1).nodes

    Hits keep their engine's ids; nodes, edges, communities and clue seeds come back under
    engine-qualified ids (``"<engine>::<id>"``, see :mod:`.graphs`).
    """

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
        return self._threads.run(graphcalls.graph(
            self._core, op, query, k, seed_ids, hops, level, session_id, cursor, token_budget,
            filter, timeout, strict))

    async def agraph(self, op: str, query: Any = None, *, k: int | None = None,
                     seed_ids: Sequence[str] | None = None, hops: int | None = None,
                     level: int | None = None, session_id: str | None = None,
                     cursor: str | None = None, token_budget: int | None = None,
                     filter: Mapping[str, Any] | None = None,
                     timeout: float | None = None, strict: bool | None = None) -> GraphResult:
        """The asyncio :meth:`graph`."""
        return await self._tasks.run(graphcalls.graph(
            self._core, op, query, k, seed_ids, hops, level, session_id, cursor, token_budget,
            filter, timeout, strict))

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
        return self._threads.run(graphcalls.memory_build(
            self._core, documents, memory_id, scope, session_id, timeout, strict))

    async def amemory_build(self, documents: Iterable[Mapping[str, Any]] | None = None, *,
                            memory_id: str | None = None, scope: str | None = None,
                            session_id: str | None = None, timeout: float | None = None,
                            strict: bool | None = None) -> MemoryBuildResult:
        """The asyncio :meth:`memory_build`."""
        return await self._tasks.run(graphcalls.memory_build(
            self._core, documents, memory_id, scope, session_id, timeout, strict))

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
        return self._threads.run(graphcalls.memory_recall(
            self._core, query, memory_id, session_id, n, filter, timeout))

    async def amemory_recall(self, query: Any, *, memory_id: str | None = None,
                             session_id: str | None = None, n: int | None = None,
                             filter: Mapping[str, Any] | None = None,
                             timeout: float | None = None) -> MemoryRecallResult:
        """The asyncio :meth:`memory_recall`."""
        return await self._tasks.run(graphcalls.memory_recall(
            self._core, query, memory_id, session_id, n, filter, timeout))
