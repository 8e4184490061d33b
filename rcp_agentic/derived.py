"""The contract between the engine and a builder of derived units (the RAPTOR tree, the graph).

A builder reads the committed chunks from the store, decides what changed since
its units were last written, and writes its units in one commit through
``Docstore.write_derived`` (each new unit with the leaf chunks it covers). Until
it has run, units covering a replaced or deleted chunk are invisible (see
``Docstore.unit_arrays``) and retrieve notes the lag; a pinned ``indexVersion``
sees the derived units of its own snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass
class DerivedReport:
    """What one builder run did."""

    unit: str
    mode: str                  # "full", "incremental" or "none" (already up to date)
    added: int = 0             # units written
    retired: int = 0           # units that left
    kept: int = 0              # live units left as they were
    levels: int = 0            # levels above the leaves after the run
    seconds: float = 0.0
    seconds_clustering: float = 0.0
    seconds_summarising: float = 0.0
    seconds_embedding: float = 0.0
    version: int | None = None  # the index version committed (None: nothing written)
    reason: str = ""


class DerivedBuilder(Protocol):
    """Builds and updates the stored units of one derived kind."""

    unit: str

    def update(self, *, full: bool = False) -> DerivedReport:
        """Fold every committed change of the chunks into the derived units (one commit)."""
        ...
