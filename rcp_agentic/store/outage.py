"""A backing service's outage, as a retry window.

After a failed call to a service that holds a derived copy (Chroma, Milvus) the engine
does not call it again at once: for 1 s plus the time the failed attempt took (so a hung
service is not waited on again straight away), every attempt fails fast with the time
left (``retryAfterMs``). The first call after the window tries the service again.
"""

from __future__ import annotations

import time


class OutageWindow:
    """The last failure of one service and the window in which calls fail at once."""

    def __init__(self) -> None:
        self.error = ""
        self._retry_at = 0.0

    def open(self, now: float | None = None) -> bool:
        """Whether calls should fail at once (within the window)."""
        return (time.monotonic() if now is None else now) < self._retry_at

    def wait_ms(self, now: float | None = None) -> int:
        """Milliseconds left in the window (at least 1)."""
        now = time.monotonic() if now is None else now
        return max(1, int((self._retry_at - now) * 1000))

    def failed(self, error: str, started: float) -> None:
        """A call that started at ``started`` (monotonic) failed with ``error``."""
        self.error = error
        now = time.monotonic()
        self._retry_at = now + 1.0 + (now - started)

    def close(self) -> None:
        """The service answered: calls go through again."""
        self._retry_at = 0.0
