"""When an engine's derived builders (:class:`~.builder_set.BuilderSet`) run: after each write,
inline or in the background, and on request.

:class:`DerivedUpdates` decides after each write whether they run before the write returns
(``derived_updates="inline"``) or are handed to the engine's worker
(:class:`~.catchup.CatchUp`, the default ``"background"``), and waits for them; and it wakes
that worker when another process's commit leaves a kind lagging (:meth:`DerivedUpdates.notice`).
"""

from __future__ import annotations

import threading
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from .builder_set import BuilderSet
from .build_failures import BuildFailures
from .catchup import GRACE_SECONDS, CatchUp, directory_lock
from .derived import DerivedReport


@dataclass(eq=False)
class DerivedUpdates:
    """After-write runs of an engine's builders, inline or by its worker (module doc).

    ``catch_up`` (the worker) is made on first need: a write in background mode, a wait, an
    engine that opens with a derived kind lagging, or (:meth:`notice`) a commit of another
    process that leaves one lagging.
    """

    builders: BuilderSet
    _: KW_ONLY
    directory: Path
    inline: bool
    failures: BuildFailures
    catch_up: CatchUp | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _closed: bool = field(default=False, init=False)

    def worker(self) -> CatchUp:
        """The worker, started on first need (never after :meth:`close`)."""
        with self._lock:
            if self.catch_up is None:
                self.catch_up = CatchUp(self.directory, self.builders,
                                        failures=self.failures)
                if not self._closed:
                    self.catch_up.start()
            return self.catch_up

    def after_write(self) -> list[DerivedReport]:
        """After a commit of documents: the builders run now (inline), or their lag is handed
        to the worker (background; a ``scheduled`` report per builder)."""
        if not self.builders.builders:
            return []
        if self.inline:
            # Held as the worker holds it: a server's worker waits instead of building too.
            with directory_lock(self.directory):
                return self.builders.update()
        scheduled = [DerivedReport(unit, "scheduled", reason="built in the background")
                     for unit in self.builders.lagging()]
        self.worker().wake()
        return scheduled

    def notice(self, version: int) -> None:
        """A read met index ``version``, committed by another process (the catalog calls this
        once per such version): if a derived kind now lags, wake the worker. It starts after
        :data:`~.catchup.GRACE_SECONDS`, so a live writer's builders take ``derived.lock``
        first (the pass then waits for them and finds nothing left); a writer that died
        between its commit and its builders holds no lock, and the pass builds."""
        if self._closed or not self.builders.builders or not self.builders.lagging():
            return
        self.worker().wake(delay=GRACE_SECONDS)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every derived kind reflects the committed documents (True) or
        ``timeout`` seconds pass (False). Re-raises the last failure of a builder still
        lagging (the worker's; the next write retries it)."""
        if not self.builders.builders or (self.catch_up is None
                                          and not self.builders.lagging()):
            return True
        return self.worker().wait(timeout)

    def close(self) -> None:
        """Stop the worker: the builder running finishes its commit; kinds still lagging are
        caught up by the next open."""
        with self._lock:
            self._closed = True
        if self.catch_up is not None:
            self.catch_up.stop()
