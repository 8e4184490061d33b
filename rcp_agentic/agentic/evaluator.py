"""The CRAG retrieval evaluator over calibrated ``confidence``: correct, ambiguous or incorrect.

Following CRAG (Yan et al., 2024), a retrieval is *correct* when some hit is
confident enough (≥ ``upper``), *incorrect* when every hit falls below ``lower``,
and *ambiguous* in between. Hits below ``lower`` are dropped from the evidence
(refinement). Hits without a confidence (an engine that has no calibration)
make the verdict *ambiguous* and are all kept: nothing can be refined without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["correct", "ambiguous", "incorrect"]


@dataclass(frozen=True)
class Assessment:
    """The verdict on one retrieval and the hits worth keeping."""

    verdict: Verdict
    kept: list[dict[str, Any]]
    max_confidence: float | None
    reason: str


@dataclass(frozen=True)
class ConfidenceEvaluator:
    """Thresholds on hit confidence: ``upper`` for correct, ``lower`` for keeping a hit."""

    upper: float = 0.6
    # Low on purpose: on HotpotQA and 2Wiki a CRAG-like 0.2 dropped supporting passages
    # whose (SciFact-fitted) confidence was low, costing 0.10 of Recall@5 (bench/RESULTS.md).
    lower: float = 0.05

    def __post_init__(self) -> None:
        if not 0.0 <= self.lower <= self.upper <= 1.0:
            raise ValueError("thresholds must satisfy 0 <= lower <= upper <= 1")

    def assess(self, hits: Sequence[Mapping[str, Any]]) -> Assessment:
        """Judge one retrieval's hits."""
        if not hits:
            return Assessment("incorrect", [], None, "no hits")
        confidences = [h.get("confidence") for h in hits]
        if any(c is None for c in confidences):
            return Assessment("ambiguous", [dict(h) for h in hits], None,
                              "hits carry no confidence: kept all, cannot judge")
        best = max(float(c) for c in confidences)  # type: ignore[arg-type]
        kept = [dict(h) for h in hits if float(h["confidence"]) >= self.lower]
        if best >= self.upper:
            return Assessment("correct", kept, best,
                              f"best confidence {best:.2f} >= upper {self.upper}")
        if best < self.lower:
            return Assessment("incorrect", [], best,
                              f"best confidence {best:.2f} < lower {self.lower}")
        return Assessment("ambiguous", kept, best,
                          f"best confidence {best:.2f} between {self.lower} and {self.upper}")
