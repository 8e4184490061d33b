"""A cancel handle for the synchronous client (§7.14).

Pass a :class:`CancelToken` as ``cancel=`` to any :class:`~rcp_agentic.client.RCPClient`
call and call :meth:`CancelToken.cancel` from another thread: the blocked call
raises :class:`~rcp_agentic.errors.Cancelled` at once and the client sends
``notifications/cancel`` for the request. (The async client uses ordinary task
cancellation instead.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class CancelToken:
    """Thread-safe, one-shot cancellation flag that wakes calls waiting on it."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], object]] = []
        self.reason: str | None = None

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._event.is_set()

    def cancel(self, reason: str | None = None) -> None:
        """Cancel every call using this token (idempotent)."""
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds; True as soon as the token is cancelled."""
        return self._event.wait(timeout)

    def subscribe(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback`` on cancellation (now, if already cancelled); returns an unsubscribe."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return lambda: self._unsubscribe(callback)
        callback()
        return lambda: None

    def _unsubscribe(self, callback: Callable[[], object]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)
