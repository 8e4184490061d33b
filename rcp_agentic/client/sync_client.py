"""The synchronous client, :class:`RCPClient`, over any :class:`~.transport.Transport`."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent import futures
from typing import TYPE_CHECKING, Any, TypeVar

from ..wire import (GraphResult, MemoryBuildResult, MemoryRecallResult, RerankResult,
                    RetrieveResult, TransformResult)
from . import methods
from .cancel import CancelToken
from .core import ClientCore, ProgressCallback, Step
from .errors import Cancelled, ClientTimeout, RCPError, TransportError
from .retry import Reinitialize, RetryPolicy, Send
from .steps import drive
from .transport import Message, Transport, settle

if TYPE_CHECKING:
    import httpx
    from typing_extensions import Self

    from ..engine import Engine
    from ..protocol.dispatcher import Dispatcher

log = logging.getLogger("rcp_agentic.client")
T = TypeVar("T")

DEFAULT_TIMEOUT = 60.0


def default_stdio_command(engine: str | os.PathLike[str] | None = None) -> list[str]:
    """``python -m rcp_agentic.cli serve --stdio [--engine DIR]``."""
    command = [sys.executable, "-m", "rcp_agentic.cli", "serve", "--stdio"]
    return command + ["--engine", os.fspath(engine)] if engine is not None else command


class RCPClient:
    """A synchronous RCP/1 client: one interface over in-process, stdio and HTTP transports.

    Build one with :meth:`in_process`, :meth:`stdio` or :meth:`http`, use it as a
    context manager (or call :meth:`close`). ``initialize`` is sent on first use;
    every call is then gated on the cached capabilities before anything is sent.
    ``retrieve``, ``rerank``, ``graph``, ``transform`` and ``memory_*`` return the typed
    results an :class:`~rcp_agentic.Engine` returns (:mod:`rcp_agentic.wire` models;
    ``result.to_wire()`` is the RCP object), the others the wire ``result`` dict, as does
    :meth:`call` for any method; failures raise
    :class:`~rcp_agentic.errors.RCPError` subclasses (wire errors by code, plus
    :class:`ClientTimeout` and :class:`TransportError`). Safe to share between threads.

    Every call takes ``timeout`` (seconds; None: the client default, ``math.inf``:
    none), which bounds the whole call including retries and travels as
    ``_meta.deadlineMs``, and ``cancel``, a :class:`CancelToken` another thread
    may trigger. Progress callbacks run on a transport thread: keep them short.
    """

    def __init__(self, transport: Transport, *, timeout: float | None = DEFAULT_TIMEOUT,
                 max_retries: int = 3, retry: RetryPolicy | None = None, strict: bool = True,
                 client_name: str | None = None) -> None:
        self.transport = transport
        self._core = ClientCore(timeout=timeout, retry=retry, max_retries=max_retries,
                                strict=strict, client_name=client_name)
        transport.on_notification = self._core.on_notification
        self._init_lock = threading.Lock()
        self._closed = False

    # --- construction -------------------------------------------------------------------

    @classmethod
    def in_process(cls, engine: Engine | Dispatcher, **options: Any) -> RCPClient:
        """A client calling ``engine`` (or a ready Dispatcher) in this process, as the wire would."""
        from .transport_inprocess import InProcessTransport

        return cls(InProcessTransport(engine), **options)

    @classmethod
    def stdio(cls, command: Sequence[str] | None = None, *,
              engine: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
              cwd: str | None = None, **options: Any) -> RCPClient:
        """Spawn an RCP server (default: ``rcp-agentic serve --stdio --engine ENGINE``) and talk NDJSON."""
        from .transport_stdio import StdioTransport

        return cls(StdioTransport(command or default_stdio_command(engine), env=env, cwd=cwd),
                   **options)

    @classmethod
    def http(cls, url: str, token: str | None = None, *,
             headers: Mapping[str, str] | None = None, http_client: httpx.Client | None = None,
             session: str | bool = True, **options: Any) -> RCPClient:
        """Talk to ``url`` (``http://host:port`` means base ``/rcp``), with an optional bearer token.

        ``session``: the ``RCP-Session`` name sent (True: a random one; False: none).
        """
        from .transport_http import HttpTransport

        return cls(HttpTransport(url, token=token, headers=headers, client=http_client,
                                 session=session), **options)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the transport (a stdio server gets EOF, an implicit shutdown)."""
        if not self._closed:
            self._closed = True
            self.transport.close()

    # --- session ------------------------------------------------------------------------

    def initialize(self) -> dict[str, Any]:
        """Send ``initialize`` unless done; returns the cached result (version and capabilities).

        A negotiated version this client cannot speak closes the client and raises
        VersionMismatch (§7.1).
        """
        with self._init_lock:
            if self._core.server is None:
                result = self._send("initialize", self._core.initialize_params(), timeout=None,
                                    cancel=None, on_progress=None)
                try:
                    self._core.accept_initialize(result)
                except RCPError:
                    self.close()
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

    def info(self, *, timeout: float | None = None) -> dict[str, Any]:
        """``info`` (§7.2): identity and capabilities."""
        return self.call("info", {}, timeout=timeout)

    def ping(self, nonce: str | int | None = None, *, timeout: float | None = None) -> dict[str, Any]:
        """``ping`` (§7.15); the server echoes ``nonce``."""
        return self.call("ping", {} if nonce is None else {"nonce": nonce}, timeout=timeout)

    # --- methods ------------------------------------------------------------------------

    def retrieve(self, query: Any, k: int = 10, *, timeout: float | None = None,
                 cancel: CancelToken | None = None, on_progress: ProgressCallback | None = None,
                 strict: bool | None = None, **options: Any) -> RetrieveResult:
        """``retrieve`` (§7.7): a :class:`~rcp_agentic.wire.RetrieveResult` (``hits``,
        ``usage``, ``next_cursor``, …), as :meth:`Engine.retrieve <rcp_agentic.Engine.retrieve>`
        returns; ``to_wire()`` gives the RCP result object.

        ``options`` are the RCP retrieve params, snake_case or camelCase
        (``token_budget``, ``session_id``, ``min_score``, ``candidate_k``,
        ``index_version``, ``include_text``, ``mode``, ``unit``, ``filter``,
        ``fusion``, ``rerank``, ``mmr``, ``cursor``, ``rewrite``, …). ``k`` above ``maxK`` is
        clamped; an unadvertised option raises OptionUnsupported before sending
        unless ``strict=False`` (then the server may degrade, noting it in
        ``usage.notes``). ``rewrite`` (one of the advertised ``transform.methods``) has the
        server's LLM transform the query first; the result's ``rewrittenQuery`` is what it
        searched with. ``on_progress(params)`` gets each progress notification.
        """
        return self._ask(methods.retrieve(query, k, options), timeout=timeout, cancel=cancel,
                         on_progress=on_progress, strict=strict)

    def embed(self, inputs: Sequence[Any], *, kind: str | None = None, encoding: str = "json",
              as_numpy: bool = False, timeout: float | None = None,
              cancel: CancelToken | None = None, strict: bool | None = None) -> dict[str, Any]:
        """``embed`` (§7.3): ``{"vectors": ..., "dimension": ...}``, vectors decoded.

        ``kind`` is ``"query"`` or ``"document"``; ``encoding="f32-base64"`` (when
        advertised) is the compact transfer; ``as_numpy`` returns one float32 matrix.
        """
        return self._ask(methods.embed(inputs, kind, encoding, as_numpy), timeout=timeout,
                         cancel=cancel, strict=strict)

    def rerank(self, query: Any, passages: Sequence[Any], *, top_n: int | None = None,
               method: str | None = None, timeout: float | None = None,
               cancel: CancelToken | None = None, strict: bool | None = None) -> RerankResult:
        """``rerank`` (§7.6): a :class:`~rcp_agentic.wire.RerankResult`; ``scores[i]`` is
        ``passages[i]``'s, ``order`` the indices best first (at most ``top_n``)."""
        return self._ask(methods.rerank(query, passages, top_n, method), timeout=timeout,
                         cancel=cancel, strict=strict)

    def index_add(self, documents: Iterable[Mapping[str, Any]], *, chunk: bool | None = None,
                  contextual: bool | None = None, timeout: float | None = None,
                  cancel: CancelToken | None = None, on_progress: ProgressCallback | None = None,
                  strict: bool | None = None) -> dict[str, Any]:
        """``index/add`` (§7.10) of ``{"id"?, "text", "meta"?}`` documents: ``{"ids": [...]}``.

        Give documents explicit ids: only then is a retry after a failure harmless.
        """
        return self._ask(methods.index_add(documents, chunk, contextual), timeout=timeout,
                         cancel=cancel, on_progress=on_progress, strict=strict)

    def index_delete(self, ids: Iterable[str], *, timeout: float | None = None,
                     cancel: CancelToken | None = None) -> dict[str, Any]:
        """``index/delete`` (§7.11): ``{"deleted": n}`` (absent ids are not an error)."""
        return self._ask(methods.index_delete(ids), timeout=timeout, cancel=cancel)

    def feedback(self, signals: Iterable[Mapping[str, Any]], *, session_id: str | None = None,
                 query: str | None = None, timeout: float | None = None,
                 cancel: CancelToken | None = None) -> dict[str, Any]:
        """``feedback`` (§7.16) signals (``{"hit_id"|"hitId", "used"?, "reward"?, ...}``): ``{"accepted": n}``."""
        return self._ask(methods.feedback(signals, session_id, query), timeout=timeout,
                         cancel=cancel)

    def graph(self, op: str, query: Any = None, *, k: int | None = None,
              seed_ids: Sequence[str] | None = None, hops: int | None = None,
              level: int | None = None, session_id: str | None = None,
              cursor: str | None = None, token_budget: int | None = None,
              filter: Mapping[str, Any] | None = None,
              timeout: float | None = None, cancel: CancelToken | None = None,
              strict: bool | None = None) -> GraphResult:
        """``graph`` (§7.9), gated by the ``graph`` capability and its ``ops``: a
        :class:`~rcp_agentic.wire.GraphResult`, as :meth:`Engine.graph <rcp_agentic.Engine.graph>`
        returns.

        ``op="local"``: ``hits`` for ``query`` (entity-anchored, PageRank-expanded; each hit's
        ``provenance.nodes`` names its entities). ``op="neighbors"``: ``nodes`` and ``edges``
        within ``hops`` of ``seed_ids`` (node unit ids, e.g. from a hit's ``provenance.nodes``
        or a clue's ``seed_ids``). Over Leiden communities: ``op="communities"`` lists one
        ``level`` (default the coarsest), paginated by ``next_cursor`` → ``cursor``;
        ``op="global"`` ranks a level's communities for ``query`` and composes a ``summary``
        within ``token_budget``; ``op="drift"`` returns ``hits`` and the ``followups`` still to
        run (with ``session_id`` the next call continues them).
        ``k``, ``hops`` and ``token_budget`` above the advertised limits are clamped; an op
        the server does not advertise raises OptionUnsupported before sending.
        """
        return self._ask(methods.graph(op, query, k, seed_ids, hops, level, session_id, cursor,
                                     token_budget, filter),
                         timeout=timeout, cancel=cancel, strict=strict)

    def transform(self, query: str, method: str, n: int | None = None, *,
                  timeout: float | None = None, cancel: CancelToken | None = None,
                  strict: bool | None = None) -> TransformResult:
        """``query/transform`` (§7.8) with the server's LLM, gated by ``transform`` and its
        ``methods``: a :class:`~rcp_agentic.wire.TransformResult` (``queries``,
        ``hypothetical``, ``trust``; ``meta["notes"]`` says when the LLM's reply was unusable),
        the wire shape of what :meth:`Engine.transform <rcp_agentic.Engine.transform>` returns.

        ``rewrite`` and ``step-back`` give one query, ``multi-query`` and ``decompose`` up to
        ``n`` (clamped to the advertised ``maxTransformQueries``), ``hyde`` the question and a
        ``hypothetical`` answer passage to embed in its place.
        """
        return self._ask(methods.transform(query, method, n), timeout=timeout, cancel=cancel,
                         strict=strict)

    def memory_build(self, documents: Iterable[Mapping[str, Any]] | None = None, *,
                     memory_id: str | None = None, scope: str | None = None,
                     session_id: str | None = None, filter: Mapping[str, Any] | None = None,
                     timeout: float | None = None, cancel: CancelToken | None = None,
                     strict: bool | None = None) -> MemoryBuildResult:
        """``memory/build`` (§7.17), gated by ``memory``: a
        :class:`~rcp_agentic.wire.MemoryBuildResult` (``memory_id``, ``tokens``).

        No ``documents``: bring the memory (the knowledge graph) up to date with the index.
        ``documents`` (``{"id"?, "text"}``) are added to the corpus first — give them ids, so a
        retry is harmless. ``scope="session"`` with ``session_id`` remembers the entities the
        texts name for that trajectory instead (nothing is added to the corpus), only
        entities of chunks that pass ``filter`` (RCP §8).
        """
        return self._ask(methods.memory_build(documents, memory_id, scope, session_id, filter),
                         timeout=timeout, cancel=cancel, strict=strict)

    def memory_recall(self, query: Any, *, memory_id: str | None = None,
                      session_id: str | None = None, n: int | None = None,
                      filter: Mapping[str, Any] | None = None,
                      timeout: float | None = None,
                      cancel: CancelToken | None = None) -> MemoryRecallResult:
        """``memory/recall`` (§7.17): a :class:`~rcp_agentic.wire.MemoryRecallResult`
        (``clues``, each with ``query``, ``seed_ids`` and ``weight``; draft ``hits``).

        Feed a clue's ``query`` to :meth:`retrieve` (with the same ``session_id``) or its
        ``seed_ids`` to :meth:`graph` (``op="neighbors"``). ``memory_id`` pins the memory a
        :meth:`memory_build` returned; ``session_id`` also seeds recall with the trajectory's
        remembered entities. ``filter`` (RCP §8): clues and hits come only from chunks that
        pass it.
        """
        return self._ask(methods.memory_recall(query, memory_id, session_id, n, filter),
                         timeout=timeout, cancel=cancel)

    def call(self, method: str, params: Mapping[str, Any] | None = None, *,
             timeout: float | None = None, cancel: CancelToken | None = None,
             on_progress: ProgressCallback | None = None, strict: bool | None = None) -> Any:
        """Any method with wire-named ``params``: gated, retried per §12.2, its wire ``result``
        returned as received (a dict; the typed methods parse it)."""
        generation = self._session_generation()
        prepared = self._core.prepare(method, params or {}, strict)
        return self._send(method, prepared, timeout=timeout, cancel=cancel,
                          on_progress=on_progress, generation=generation)

    def batch(self, calls: Sequence[tuple[str, Mapping[str, Any] | None]], *,
              timeout: float | None = None, cancel: CancelToken | None = None,
              strict: bool | None = None) -> list[Any]:
        """Send ``(method, params)`` calls as one JSON-RPC batch (§11), without retries.

        Returns one entry per call, in order: its result, or the RCPError it failed
        with (not raised; a refusal of the whole batch is raised).
        """
        self._session_generation()
        prepared = [(m, self._core.prepare(m, p or {}, strict)) for m, p in calls]
        if not prepared:
            return []
        deadline = self._core.deadline(timeout)
        frames = [self._core.frame(m, p, deadline) for m, p in prepared]
        return self._core.batch_results(frames, self._roundtrip(frames, deadline, cancel, False))

    # --- plumbing -----------------------------------------------------------------------

    def _ask(self, request: methods.Request[T], **options: Any) -> T:
        """``request`` sent by :meth:`call` with ``options``, its result read."""
        return request.read(self.call(request.method, request.params, **options))

    def _session_generation(self) -> int:
        if self._closed:
            raise TransportError("the client is closed")
        self.initialize()
        return self._core.generation

    def _reinitialize(self, generation: int) -> None:
        with self._init_lock:
            self._core.forget_session(generation)
        self.initialize()

    def _send(self, method: str, params: dict[str, Any], *, timeout: float | None,
              cancel: CancelToken | None, on_progress: ProgressCallback | None,
              generation: int | None = None) -> Any:
        """One call with the retry policy of §12.2, all within one deadline."""
        steps = self._core.exchange(method, params, timeout=timeout, on_progress=on_progress,
                                    generation=generation)
        return drive(steps, lambda step: self._perform(step, method, cancel))

    def _perform(self, step: Step, method: str, cancel: CancelToken | None) -> Any:
        if isinstance(step, Send):
            return self._roundtrip(step.message, step.deadline, cancel, step.progress)
        if isinstance(step, Reinitialize):
            return self._reinitialize(step.generation)
        if cancel is None:
            time.sleep(step.seconds)
        elif cancel.wait(step.seconds):
            raise Cancelled(f"{method} was cancelled by the caller") from step.error
        return None

    def _roundtrip(self, message: Message, deadline: float | None, cancel: CancelToken | None,
                   progress: bool) -> Any:
        """Send ``message`` and wait for its response, the deadline, or the cancel token."""
        remaining = self._core.remaining(deadline)
        if cancel is not None and cancel.cancelled:
            raise Cancelled("cancelled before the request was sent")
        future = self.transport.submit(message, timeout=remaining, progress=progress)
        unsubscribe = None
        if cancel is not None:
            unsubscribe = cancel.subscribe(lambda: settle(future, exc=Cancelled(
                "cancelled by the caller" + (f": {cancel.reason}" if cancel.reason else ""))))
        try:
            done, _ = futures.wait([future], timeout=remaining)
            if not done:
                settle(future, exc=ClientTimeout("no response before the deadline"))
            exc = future.exception()
            if isinstance(exc, (Cancelled, ClientTimeout)):  # set locally, never by a transport
                self._abandon(message)
                raise exc
            if exc is not None:
                raise exc
            return future.result()
        finally:
            if unsubscribe is not None:
                unsubscribe()

    def _abandon(self, message: Message) -> None:
        """Stop waiting and tell the server (§7.14); its late answer is discarded (§13.1)."""
        self.transport.abandon(message)
        for frame in self._core.cancel_frames(message):
            try:
                self.transport.notify(frame)
            except RCPError as exc:  # best effort: the transport may be the thing that failed
                log.debug("could not send %s: %s", frame["method"], exc)
