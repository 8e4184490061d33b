"""The asyncio client, :class:`AsyncRCPClient`, over any :class:`~.transport.AsyncTransport`."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..wire import (GraphResult, MemoryBuildResult, MemoryRecallResult, RerankResult,
                    RetrieveResult, TransformResult)
from . import methods
from .core import ClientCore, ProgressCallback, Step
from .errors import ClientTimeout, RCPError, TransportError
from .retry import Reinitialize, RetryPolicy, Send
from .steps import adrive
from .sync_client import DEFAULT_TIMEOUT, default_stdio_command
from .transport import AsyncTransport, Message

if TYPE_CHECKING:
    import httpx
    from typing_extensions import Self

    from ..engine import Engine
    from ..protocol.dispatcher import Dispatcher

log = logging.getLogger("rcp_agentic.client")
T = TypeVar("T")

CANCEL_NOTIFY_TIMEOUT = 5.0


class AsyncRCPClient:
    """The asyncio twin of :class:`~rcp_agentic.client.RCPClient` (same methods, awaited,
    with the same typed results).

    Cancelling the task awaiting a call sends ``notifications/cancel`` for it
    (§7.14) and re-raises ``CancelledError``; the server's late answer is
    discarded. ``timeout`` works as in the sync client and raises ClientTimeout.
    Progress callbacks run on the event loop: keep them short and non-blocking.
    Bound to the event loop it is first used in.
    """

    def __init__(self, transport: AsyncTransport, *, timeout: float | None = DEFAULT_TIMEOUT,
                 max_retries: int = 3, retry: RetryPolicy | None = None, strict: bool = True,
                 client_name: str | None = None) -> None:
        self.transport = transport
        self._core = ClientCore(timeout=timeout, retry=retry, max_retries=max_retries,
                                strict=strict, client_name=client_name)
        transport.on_notification = self._core.on_notification
        self._init_lock = asyncio.Lock()
        self._closed = False

    # --- construction -------------------------------------------------------------------

    @classmethod
    def in_process(cls, engine: Engine | Dispatcher, **options: Any) -> AsyncRCPClient:
        """A client calling ``engine`` (or a ready Dispatcher) in worker threads, as the wire would."""
        from .transport_inprocess import AsyncInProcessTransport

        return cls(AsyncInProcessTransport(engine), **options)

    @classmethod
    def stdio(cls, command: Sequence[str] | None = None, *,
              engine: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
              cwd: str | None = None, **options: Any) -> AsyncRCPClient:
        """An RCP server subprocess (default: ``rcp-agentic serve --stdio``), started on first use."""
        from .transport_stdio import AsyncStdioTransport

        return cls(AsyncStdioTransport(command or default_stdio_command(engine), env=env, cwd=cwd),
                   **options)

    @classmethod
    def http(cls, url: str, token: str | None = None, *,
             headers: Mapping[str, str] | None = None,
             http_client: httpx.AsyncClient | None = None, session: str | bool = True,
             **options: Any) -> AsyncRCPClient:
        """Talk to ``url`` (``http://host:port`` means base ``/rcp``); see :meth:`RCPClient.http`."""
        from .transport_http import AsyncHttpTransport

        return cls(AsyncHttpTransport(url, token=token, headers=headers, client=http_client,
                                      session=session), **options)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the transport (a stdio server gets EOF, an implicit shutdown)."""
        if not self._closed:
            self._closed = True
            await self.transport.aclose()

    aclose = close

    # --- session ------------------------------------------------------------------------

    async def initialize(self) -> dict[str, Any]:
        """Send ``initialize`` unless done; returns the cached result (see RCPClient.initialize)."""
        async with self._init_lock:
            if self._core.server is None:
                result = await self._send("initialize", self._core.initialize_params(),
                                          timeout=None, on_progress=None)
                try:
                    self._core.accept_initialize(result)
                except RCPError:
                    await self.close()
                    raise
                self.transport.on_initialized(result)
            return self._core.server  # type: ignore[return-value]

    connect = initialize

    @property
    def server(self) -> dict[str, Any] | None:
        """The ``initialize`` result (None until it has run)."""
        return self._core.server

    @property
    def capabilities(self) -> dict[str, Any]:
        """The capabilities cached from ``initialize`` ({} until it has run; fixed, §13.2)."""
        return self._core.capabilities

    async def info(self, *, timeout: float | None = None) -> dict[str, Any]:
        """``info`` (§7.2): identity and capabilities."""
        return await self.call("info", {}, timeout=timeout)

    async def ping(self, nonce: str | int | None = None, *,
                   timeout: float | None = None) -> dict[str, Any]:
        """``ping`` (§7.15); the server echoes ``nonce``."""
        return await self.call("ping", {} if nonce is None else {"nonce": nonce}, timeout=timeout)

    # --- methods ------------------------------------------------------------------------

    async def retrieve(self, query: Any, k: int = 10, *, timeout: float | None = None,
                       on_progress: ProgressCallback | None = None, strict: bool | None = None,
                       **options: Any) -> RetrieveResult:
        """``retrieve`` (§7.7): a :class:`~rcp_agentic.wire.RetrieveResult`; options and
        gating as in :meth:`RCPClient.retrieve`."""
        return await self._ask(methods.retrieve(query, k, options), timeout=timeout,
                               on_progress=on_progress, strict=strict)

    async def embed(self, inputs: Sequence[Any], *, kind: str | None = None,
                    encoding: str = "json", as_numpy: bool = False, timeout: float | None = None,
                    strict: bool | None = None) -> dict[str, Any]:
        """``embed`` (§7.3), vectors decoded (lists, or a float32 matrix with ``as_numpy``)."""
        return await self._ask(methods.embed(inputs, kind, encoding, as_numpy), timeout=timeout,
                               strict=strict)

    async def rerank(self, query: Any, passages: Sequence[Any], *, top_n: int | None = None,
                     method: str | None = None, timeout: float | None = None,
                     strict: bool | None = None) -> RerankResult:
        """``rerank`` (§7.6): a :class:`~rcp_agentic.wire.RerankResult`."""
        return await self._ask(methods.rerank(query, passages, top_n, method), timeout=timeout,
                               strict=strict)

    async def index_add(self, documents: Iterable[Mapping[str, Any]], *,
                        chunk: bool | None = None, contextual: bool | None = None,
                        timeout: float | None = None, on_progress: ProgressCallback | None = None,
                        strict: bool | None = None) -> dict[str, Any]:
        """``index/add`` (§7.10): ``{"ids": [...]}``; give documents explicit ids."""
        return await self._ask(methods.index_add(documents, chunk, contextual), timeout=timeout,
                               on_progress=on_progress, strict=strict)

    async def index_delete(self, ids: Iterable[str], *,
                           timeout: float | None = None) -> dict[str, Any]:
        """``index/delete`` (§7.11): ``{"deleted": n}``."""
        return await self._ask(methods.index_delete(ids), timeout=timeout)

    async def feedback(self, signals: Iterable[Mapping[str, Any]], *,
                       session_id: str | None = None, query: str | None = None,
                       timeout: float | None = None) -> dict[str, Any]:
        """``feedback`` (§7.16): ``{"accepted": n}``."""
        return await self._ask(methods.feedback(signals, session_id, query), timeout=timeout)

    async def graph(self, op: str, query: Any = None, *, k: int | None = None,
                    seed_ids: Sequence[str] | None = None, hops: int | None = None,
                    level: int | None = None, session_id: str | None = None,
                    cursor: str | None = None, token_budget: int | None = None,
                    filter: Mapping[str, Any] | None = None,
                    timeout: float | None = None, strict: bool | None = None) -> GraphResult:
        """``graph`` (§7.9): a :class:`~rcp_agentic.wire.GraphResult`; see
        :meth:`RCPClient.graph`."""
        return await self._ask(methods.graph(op, query, k, seed_ids, hops, level, session_id,
                                           cursor, token_budget, filter),
                               timeout=timeout, strict=strict)

    async def transform(self, query: str, method: str, n: int | None = None, *,
                        timeout: float | None = None,
                        strict: bool | None = None) -> TransformResult:
        """``query/transform`` (§7.8): a :class:`~rcp_agentic.wire.TransformResult`; see
        :meth:`RCPClient.transform`."""
        return await self._ask(methods.transform(query, method, n), timeout=timeout,
                               strict=strict)

    async def memory_build(self, documents: Iterable[Mapping[str, Any]] | None = None, *,
                           memory_id: str | None = None, scope: str | None = None,
                           session_id: str | None = None,
                           filter: Mapping[str, Any] | None = None,
                           timeout: float | None = None,
                           strict: bool | None = None) -> MemoryBuildResult:
        """``memory/build`` (§7.17): a :class:`~rcp_agentic.wire.MemoryBuildResult`; see
        :meth:`RCPClient.memory_build`."""
        return await self._ask(methods.memory_build(documents, memory_id, scope, session_id,
                                                  filter),
                               timeout=timeout, strict=strict)

    async def memory_recall(self, query: Any, *, memory_id: str | None = None,
                            session_id: str | None = None, n: int | None = None,
                            filter: Mapping[str, Any] | None = None,
                            timeout: float | None = None) -> MemoryRecallResult:
        """``memory/recall`` (§7.17): a :class:`~rcp_agentic.wire.MemoryRecallResult`; see
        :meth:`RCPClient.memory_recall`."""
        return await self._ask(methods.memory_recall(query, memory_id, session_id, n, filter),
                               timeout=timeout)

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   timeout: float | None = None, on_progress: ProgressCallback | None = None,
                   strict: bool | None = None) -> Any:
        """Any method with wire-named ``params``: gated, retried per §12.2, its wire ``result``
        returned as received (a dict; the typed methods parse it)."""
        generation = await self._session_generation()
        prepared = self._core.prepare(method, params or {}, strict)
        return await self._send(method, prepared, timeout=timeout, on_progress=on_progress,
                                generation=generation)

    async def batch(self, calls: Sequence[tuple[str, Mapping[str, Any] | None]], *,
                    timeout: float | None = None, strict: bool | None = None) -> list[Any]:
        """A JSON-RPC batch (§11): per call, its result or the RCPError it failed with."""
        await self._session_generation()
        prepared = [(m, self._core.prepare(m, p or {}, strict)) for m, p in calls]
        if not prepared:
            return []
        deadline = self._core.deadline(timeout)
        frames = [self._core.frame(m, p, deadline) for m, p in prepared]
        return self._core.batch_results(frames, await self._roundtrip(frames, deadline, False))

    # --- plumbing -----------------------------------------------------------------------

    async def _ask(self, request: methods.Request[T], **options: Any) -> T:
        """``request`` sent by :meth:`call` with ``options``, its result read."""
        return request.read(await self.call(request.method, request.params, **options))

    async def _session_generation(self) -> int:
        if self._closed:
            raise TransportError("the client is closed")
        await self.initialize()
        return self._core.generation

    async def _reinitialize(self, generation: int) -> None:
        async with self._init_lock:
            self._core.forget_session(generation)
        await self.initialize()

    async def _send(self, method: str, params: dict[str, Any], *, timeout: float | None,
                    on_progress: ProgressCallback | None, generation: int | None = None) -> Any:
        """One call with the retry policy of §12.2, all within one deadline."""
        steps = self._core.exchange(method, params, timeout=timeout, on_progress=on_progress,
                                    generation=generation)
        return await adrive(steps, self._perform)

    async def _perform(self, step: Step) -> Any:
        if isinstance(step, Send):
            return await self._roundtrip(step.message, step.deadline, step.progress)
        if isinstance(step, Reinitialize):
            return await self._reinitialize(step.generation)
        await asyncio.sleep(step.seconds)
        return None

    async def _roundtrip(self, message: Message, deadline: float | None, progress: bool) -> Any:
        """Send ``message`` and await its response within the deadline."""
        remaining = self._core.remaining(deadline)
        scope = asyncio.timeout(remaining)
        try:
            async with scope:
                return await self.transport.request(message, timeout=remaining, progress=progress)
        except TimeoutError:
            if not scope.expired():
                raise
            await self._abandon(message)
            raise ClientTimeout("no response before the deadline") from None
        except asyncio.CancelledError:
            # Shielded: a second cancel must not stop the server from hearing about the first.
            await asyncio.shield(self._abandon(message))
            raise

    async def _abandon(self, message: Message) -> None:
        """Tell the server (§7.14); the transport already dropped the request (§13.1)."""
        for frame in self._core.cancel_frames(message):
            try:
                await asyncio.wait_for(self.transport.notify(frame), CANCEL_NOTIFY_TIMEOUT)
            except (RCPError, asyncio.TimeoutError) as exc:
                log.debug("could not send %s: %s", frame["method"], exc)
