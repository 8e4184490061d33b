"""When an engine's derived builders run: after each write, inline or in the background, and on
request.

:class:`BuilderSet` runs the builders (the RAPTOR tree, the graph, its communities) in
their order, one at a time, and says which lag the last document write.
:class:`DerivedUpdates` decides after each write whether they run before the write returns
(``derived_updates="inline"``) or are handed to the engine's worker
(:class:`~.catchup.CatchUp`, the default ``"background"``), and waits for them; and it wakes
that worker when another process's commit leaves a kind lagging (:meth:`DerivedUpdates.notice`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .catalog import BuildFailures, Catalog
from .catchup import GRACE_SECONDS, CatchUp, directory_lock
from .derived import DerivedBuilder, DerivedReport, builder_kinds
from .heap import release_free_memory
from .read_first import ReadFirst
from .store.recall import RecallBackend


class BuilderSet:
    """An engine's derived builders, by the unit each is named for, in run order (the graph
    before its communities, which cluster it).

    Builders run one at a time under the build lock, not the write lock, so writes commit
    while a builder computes (its commit is on the version it read, or it recomputes). A
    builder whose every attempt lost that race (``contended``) runs once more under the
    write lock, so steady writes cannot starve it.
    """

    def __init__(self, builders: Mapping[str, DerivedBuilder[Any]], *, catalog: Catalog,
                 recall: RecallBackend, write_lock: threading.Lock,
                 read_first: ReadFirst) -> None:
        self.builders = dict(builders)
        self._read_first = read_first
        self._catalog = catalog
        self._recall = recall
        self._write_lock = write_lock
        self._build_lock = threading.Lock()

    def kinds(self, unit: str) -> tuple[str, ...]:
        """Every unit kind the builder named ``unit`` writes."""
        return builder_kinds(self.builders[unit])

    def lagging(self) -> list[str]:
        """The builders (by ``unit``, in run order) with a kind that does not reflect the last
        document write yet."""
        return [unit for unit, b in self.builders.items()
                if self._catalog.lagging(builder_kinds(b))]

    def update(self, *, full: bool = False, only: str | None = None) -> list[DerivedReport]:
        """Run each builder (``only``: the one writing that kind), each result one commit. A
        builder that raises stops the run; its failure is kept (the catalog's ``failures``,
        shown by ``derived_status``) until it next succeeds."""
        reports = []
        failures = self._catalog.failures
        for unit, builder in self.builders.items():
            if only is not None and only not in builder_kinds(builder):
                continue
            try:
                with self._build_lock, self._read_first.building():
                    report = builder.update(full=full)
                    if report.contended:
                        with self._write_lock:
                            report = builder.update(full=full)
                        report.contended = True
            except Exception as exc:
                failures.record(unit, builder_kinds(builder), exc)
                raise
            failures.clear(unit)
            reports.append(report)
            if report.version is not None:
                self._recall.after_commit()
                self._catalog.follow(report.version)
        release_free_memory()
        return reports


class DerivedUpdates:
    """After-write runs of an engine's builders, inline or by its worker (module doc).

    ``catch_up`` (the worker) is made on first need: a write in background mode, a wait, an
    engine that opens with a derived kind lagging, or (:meth:`notice`) a commit of another
    process that leaves one lagging.
    """

    def __init__(self, builders: BuilderSet, *, directory: Path, inline: bool,
                 failures: BuildFailures) -> None:
        self.builders = builders
        self._directory = directory
        self._inline = inline
        self._failures = failures
        self.catch_up: CatchUp | None = None
        self._lock = threading.Lock()
        self._closed = False

    def worker(self) -> CatchUp:
        """The worker, started on first need (never after :meth:`close`)."""
        with self._lock:
            if self.catch_up is None:
                self.catch_up = CatchUp(self._directory, self.builders,
                                        failures=self._failures)
                if not self._closed:
                    self.catch_up.start()
            return self.catch_up

    def after_write(self) -> list[DerivedReport]:
        """After a commit of documents: the builders run now (inline), or their lag is handed
        to the worker (background; a ``scheduled`` report per builder)."""
        if not self.builders.builders:
            return []
        if self._inline:
            # Held as the worker holds it: a server's worker waits instead of building too.
            with directory_lock(self._directory):
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
