"""What the corrective loop returns: a :class:`CorrectiveResult`, its evidence and the trace
of its steps (:class:`Step`). In Jupyter it shows through :mod:`rcp_agentic.display_hooks`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .. import display_hooks
from .evaluator import Verdict


@dataclass
class Step:
    """One call of the loop and why it was made."""

    index: int
    action: str
    reason: str
    query: str
    engine: str
    unit: str
    verdict: Verdict | None = None
    max_confidence: float | None = None
    returned: int = 0
    kept: int = 0
    tokens: int = 0
    latency_ms: float = 0.0
    error: str | None = None
    hit_ids: list[str] = field(default_factory=list)
    graph: bool = False  # whether graph recall was on
    followed: list[str] = field(default_factory=list)  # bridge entities its query added
    hop: int = 0  # how many bridges deep its query follows (0: the question's own step)
    coverage: float | None = None  # share of the question's terms the confident evidence holds


@dataclass
class CorrectiveResult:
    """The evidence set in the order found (each step's hits in the engine's rank order; a
    coarser unit takes the place of the finer ones it replaced) within tiers: the question's
    own confident hits, passages about a bridge entity the loop followed, the question's
    other kept hits, passages that only mention a bridge, other re-queries' hits, the first
    step's hits below the lower threshold (``meta.step`` says which step found a hit,
    ``meta.follows`` which bridges it names); the trace of the steps; why the loop stopped."""

    query: str
    evidence: list[dict[str, Any]]
    trace: list[Step]
    verdict: Verdict | None
    tokens: int
    calls: int
    session_id: str
    stop_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "trace": [asdict(s) for s in self.trace]}

    def _repr_html_(self) -> str:
        """In Jupyter: the verdict, the trace table and the evidence hits."""
        return display_hooks.render("loop_html", self)
