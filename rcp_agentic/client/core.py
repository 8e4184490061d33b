"""The I/O-free half of a client, shared by :class:`RCPClient` and :class:`AsyncRCPClient`.

It owns the session state — the ``initialize`` result and its cached
capabilities (§13.2) — request ids (§4.7), deadlines (``_meta.deadlineMs``,
§16.2), progress tokens and their routing (§9), gating (§14.4), and turning a
response into a result or an exception (§12).
"""

from __future__ import annotations

import itertools
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any

from .errors import ClientTimeout, RCPError, TransportError, VersionMismatch, error_from_wire
from ..protocol.methods import PROTOCOL_VERSION
from ..version import __version__
from .gating import check_method, check_options, clamp
from .retry import Reinitialize, RetryPolicy, RetryState, Send, Wait, repeatable
from .transport import Frame, Message, deliver, request_ids

ProgressCallback = Callable[[dict[str, Any]], object]
Step = Send | Reinitialize | Wait
log = logging.getLogger("rcp_agentic.client")
CLIENT_NAME = "rcp-agentic-client"


class ClientCore:
    """Session state and request building; no I/O."""

    def __init__(self, *, timeout: float | None, retry: RetryPolicy | None, max_retries: int,
                 strict: bool, client_name: str | None) -> None:
        self.timeout = timeout
        self.retry = retry or RetryPolicy(max_retries=max_retries)
        self.strict = strict
        self.client_info = {"name": client_name or CLIENT_NAME, "version": __version__}
        self.server: dict[str, Any] | None = None  # the initialize result
        self.generation = 0  # bumped by every successful initialize
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._token_prefix = secrets.token_hex(4)
        self._progress: dict[Any, ProgressCallback] = {}
        self._lock = threading.Lock()

    # --- session ------------------------------------------------------------------------

    @property
    def capabilities(self) -> dict[str, Any]:
        """The capabilities negotiated at ``initialize`` ({} before it)."""
        if self.server is None:
            return {}
        caps = self.server.get("capabilities")
        return caps if isinstance(caps, dict) else {}

    def initialize_params(self) -> dict[str, Any]:
        # The client consumes progress notifications, so it says so (§7.1).
        return {"protocolVersion": PROTOCOL_VERSION, "client": dict(self.client_info),
                "capabilities": {"streaming": {}}}

    def accept_initialize(self, result: Any) -> dict[str, Any]:
        """Check the negotiated version (abort below 1, §7.1) and cache the session."""
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if isinstance(version, bool) or not isinstance(version, int) \
                or not 1 <= version <= PROTOCOL_VERSION:
            raise VersionMismatch(f"the server negotiated protocol version {version!r}; this "
                                  f"client speaks 1..{PROTOCOL_VERSION}")
        self.server = result
        self.generation += 1
        return result

    def forget_session(self, generation: int) -> bool:
        """Drop the session negotiated as ``generation`` (after -32001); False if already replaced."""
        if self.server is None or self.generation != generation:
            return False
        self.server = None
        return True

    # --- requests -----------------------------------------------------------------------

    def prepare(self, method: str, params: Mapping[str, Any], strict: bool | None) -> dict[str, Any]:
        """Gate and pre-clamp a call against the cached capabilities; raises before any I/O."""
        caps = self.capabilities
        check_method(method, caps)
        out = dict(params)
        if (self.strict if strict is None else strict):
            check_options(method, out, caps)
        else:
            out["strict"] = False
        return clamp(method, out, caps)

    def exchange(self, method: str, params: dict[str, Any], *, timeout: float | None,
                 on_progress: ProgressCallback | None,
                 generation: int | None) -> Generator[Step, Any, Any]:
        """One call as its steps, retried per §12.2 within one deadline: yields :class:`Send`
        (sent back: the response), :class:`Reinitialize` (after -32001, with ``generation``
        the session the call was gated on) and :class:`Wait`; returns the ``result``."""
        deadline = self.deadline(timeout)
        token = self.watch_progress(on_progress) if on_progress is not None else None
        state = RetryState(self.retry, repeatable=repeatable(method, params), deadline=deadline)
        try:
            while True:
                response = yield Send(self.frame(method, params, deadline, token), deadline,
                                      token is not None)
                try:
                    return self.result_of(response)
                except RCPError as err:
                    if generation is not None and state.reinitialize(err):
                        yield Reinitialize(generation)
                        generation = self.generation
                        continue
                    delay = state.delay(err)
                    if delay is None:
                        raise
                    log.info("%s failed with %s; retrying in %.2fs", method, err.code, delay)
                    yield Wait(delay, err)
        finally:
            self.unwatch_progress(token)

    def deadline(self, timeout: float | None) -> float | None:
        """Monotonic deadline of a call (``timeout`` None: the client default; inf: none)."""
        seconds = self.timeout if timeout is None else timeout
        if seconds is None or math.isinf(seconds):
            return None
        return time.monotonic() + max(0.0, seconds)

    @staticmethod
    def remaining(deadline: float | None) -> float | None:
        """Seconds left; ClientTimeout when none are (nothing was sent)."""
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise ClientTimeout("the deadline elapsed before the request could be sent")
        return left

    def frame(self, method: str, params: Mapping[str, Any], deadline: float | None = None,
              progress_token: Any = None) -> Frame:
        """A request with a fresh id and ``_meta`` carrying the deadline and progress token."""
        out = dict(params)
        meta = dict(out["_meta"]) if isinstance(out.get("_meta"), Mapping) else {}
        if deadline is not None:
            meta["deadlineMs"] = max(1, int((deadline - time.monotonic()) * 1000))
        if progress_token is not None:
            meta["progressToken"] = progress_token
        if meta:
            out["_meta"] = meta
        return {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": out}

    @staticmethod
    def cancel_frames(message: Message) -> list[Frame]:
        """``notifications/cancel`` for every request in ``message`` (§7.14)."""
        return [{"jsonrpc": "2.0", "method": "notifications/cancel", "params": {"id": i}}
                for i in request_ids(message)]

    @staticmethod
    def result_of(response: Any) -> Any:
        """The ``result`` of a response, or its error raised as the matching RCPError."""
        if isinstance(response, dict):
            if isinstance(response.get("error"), dict):
                raise error_from_wire(response["error"])
            if "result" in response:
                return response["result"]
        raise TransportError(f"a malformed response: {str(response)[:200]}")

    @staticmethod
    def batch_results(frames: list[Frame], response: Any) -> list[Any]:
        """Batch results in request order: each a result, or the RCPError instance it failed with."""
        if isinstance(response, dict):  # the whole batch was refused (§11)
            ClientCore.result_of(response)
        if response is None:
            response = []
        if not isinstance(response, list):
            raise TransportError(f"a malformed batch response: {str(response)[:200]}")
        by_id = {(type(r.get("id")) is str, r.get("id")): r for r in response
                 if isinstance(r, dict)}
        out: list[Any] = []
        for frame in frames:
            answer = by_id.get((type(frame["id"]) is str, frame["id"]))
            if answer is None:
                out.append(TransportError(f"no response for batch member {frame['id']!r}"))
                continue
            try:
                out.append(ClientCore.result_of(answer))
            except RCPError as err:
                out.append(err)
        return out

    # --- progress -----------------------------------------------------------------------

    def watch_progress(self, callback: ProgressCallback) -> str:
        """A fresh, unique progress token routed to ``callback``."""
        token = f"{self._token_prefix}-{next(self._tokens)}"
        with self._lock:
            self._progress[token] = callback
        return token

    def unwatch_progress(self, token: str | None) -> None:
        if token is not None:
            with self._lock:
                self._progress.pop(token, None)

    def on_notification(self, frame: Frame) -> None:
        """Route ``notifications/progress`` by token; unknown tokens and other notifications are dropped."""
        if frame.get("method") != "notifications/progress":
            return
        params = frame.get("params")
        if not isinstance(params, dict):
            return
        try:
            callback = self._progress.get(params.get("progressToken"))
        except TypeError:  # an unhashable token is nobody's
            return
        if callback is not None:
            deliver(callback, params)
