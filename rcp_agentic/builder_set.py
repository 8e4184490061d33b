"""An engine's derived builders (the RAPTOR tree, the graph, its communities), run in their order,
one at a time, and which of them lag the last document write."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from .catalog import Catalog
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
