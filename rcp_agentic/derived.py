"""The contract between the engine and a builder of derived units (the RAPTOR tree, the graph).

A builder reads the committed chunks from the store, decides what changed since
its units were last written, and writes its units in one commit through
``Docstore.write_derived`` (each new unit with the leaf chunks it covers; a builder
of several kinds, the graph's nodes and triplets, writes them all in that commit).
It records ``derived.<kind>.version`` (the index version its units reflect) for
each kind it writes. Until
it has run, units covering a replaced or deleted chunk are invisible (see
``Docstore.unit_arrays``) and retrieve notes the lag; a pinned ``indexVersion``
sees the derived units of its own snapshot.

A builder runs off the write path (``rcp_agentic/catchup.py``), under the engine's build
lock: writes commit while it computes, which is why its commit is conditional on the
version it read and recomputed when that moved (:func:`run_attempts`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

# A builder's run that lost the race with another write (base version moved) is recomputed
# this often before it gives up until the next write.
ATTEMPTS = 3


@dataclass
class DerivedReport:
    """What one builder run did."""

    unit: str
    mode: str                  # "full", "incremental", "none" (already up to date) or
    #                            "scheduled" (left to the background worker; nothing run yet)
    added: int = 0             # units written
    retired: int = 0           # units that left
    kept: int = 0              # live units left as they were
    levels: int = 0            # levels above the leaves after the run
    seconds: float = 0.0
    seconds_clustering: float = 0.0
    seconds_summarising: float = 0.0
    seconds_embedding: float = 0.0
    seconds_extracting: float = 0.0  # the graph: entity extraction of chunks not seen before
    version: int | None = None  # the index version committed (None: nothing written)
    reason: str = ""
    # Other writes kept committing through every attempt (:func:`run_attempts`); the engine
    # then runs the builder once more under its write lock, and that report says so too.
    contended: bool = False
    # What the build holds, by name (the graph: nodes, triplets, synonyms, chunks read,
    # chunks extracted this run, unit texts embedded this run).
    counts: dict[str, int] = field(default_factory=dict)


class DerivedBuilder(Protocol):
    """Builds and updates the stored units of one derived kind (``unit``). A builder of
    several kinds written in one commit names them all in a ``kinds`` attribute too (the
    graph: node and triplet); see :func:`builder_kinds`."""

    unit: str

    def update(self, *, full: bool = False) -> DerivedReport:
        """Fold every committed change of the chunks into the derived units (one commit)."""
        ...


def builder_kinds(builder: DerivedBuilder) -> tuple[str, ...]:
    """Every unit kind a builder writes."""
    return tuple(getattr(builder, "kinds", (builder.unit,)))


def run_attempts(unit: str, attempt: Callable[[], DerivedReport | None], what: str,
                 rebuild: str) -> DerivedReport:
    """``attempt()`` until it commits (or finds nothing to do), at most :data:`ATTEMPTS`
    times: each None means another write committed while it computed. After that, a
    report (``contended``) saying ``what`` still lags and that ``rebuild`` (a command)
    forces it."""
    for _ in range(ATTEMPTS):
        report = attempt()
        if report is not None:
            return report
    return DerivedReport(unit, "none", contended=True, reason=f"other writes kept committing during {ATTEMPTS} "
                         f"attempts; {what} still lags (it is retried after the next write, or "
                         f"run `{rebuild}`)")
