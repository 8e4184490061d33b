"""Fusion of the dense and sparse candidate lists (§16.3): RRF, weighted min-max, convex.

Each function takes ranked lists ``{retriever: [(key, score), ...]}`` (best first)
and returns ``[(key, fused score)]`` best first; ties go to the smaller key (an index
position, which ranks unit ids), so fusion is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

from ..ranking import settle_sum

K = TypeVar("K", bound=Hashable)

# Theoretical minimum of each retriever's score: cosine >= -1, BM25 >= 0.
SCORE_FLOORS = {"dense": -1.0, "sparse": 0.0}


def _sorted(parts: dict[K, list[float]]) -> list[tuple[K, float]]:
    # fsum makes a key's total independent of the order the lists arrive in; settling it
    # makes totals equal in exact arithmetic (different terms) compare equal.
    fused = {key: settle_sum(math.fsum(terms)) for key, terms in parts.items()}
    return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))  # type: ignore[operator]


def rrf(lists: Mapping[str, Sequence[tuple[K, float]]], weights: Mapping[str, float],
        rrf_k: int = 60, *, leaf: Callable[[K], bool] | None = None) -> list[tuple[K, float]]:
    """Reciprocal Rank Fusion (Cormack et al. 2009): Σ w / (rrf_k + rank), rank 1-based.

    In a pool of leaves and the summaries above them, ``leaf`` marks the leaves: a
    leaf's rank counts only the leaves above it, so the leaves keep the order a
    leaf-only fusion gives them, while a summary's rank counts everything above it.
    """
    parts: dict[K, list[float]] = {}
    for name, ranked in lists.items():
        w = weights.get(name, 1.0)
        leaves = 0
        for rank, (key, _score) in enumerate(ranked, start=1):
            if leaf is not None and leaf(key):
                leaves += 1
                rank = leaves
            parts.setdefault(key, []).append(w / (rrf_k + rank))
    return _sorted(parts)


def _normalised(ranked: Sequence[tuple[K, float]], floor: float | None,
                fill: Mapping[K, float] | None) -> dict[K, float]:
    scores = dict(ranked)
    if fill:
        for key, s in fill.items():
            scores.setdefault(key, s)
    if not scores:
        return {}
    top = max(scores.values())
    low = min(scores.values()) if floor is None else floor
    span = top - low
    if span <= 0:
        # All equal: min-max calls that the best (1); against a floor they sit at it (0).
        return {key: 1.0 if floor is None else 0.0 for key in scores}
    return {key: max(0.0, (s - low) / span) for key, s in scores.items()}


def weighted(lists: Mapping[str, Sequence[tuple[K, float]]], weights: Mapping[str, float],
             fill: Mapping[str, Mapping[K, float]] | None = None) -> list[tuple[K, float]]:
    """Σ w · min-max normalised score; ``fill`` supplies scores of keys a list did not return."""
    parts: dict[K, list[float]] = {}
    for name, ranked in lists.items():
        norm = _normalised(ranked, None, (fill or {}).get(name))
        for key, s in norm.items():
            parts.setdefault(key, []).append(weights.get(name, 1.0) * s)
    return _sorted(parts)


def convex(lists: Mapping[str, Sequence[tuple[K, float]]], alpha: float,
           fill: Mapping[str, Mapping[K, float]] | None = None) -> list[tuple[K, float]]:
    """TM2C2 (Bruch et al. 2023): α·norm_dense + (1−α)·norm_sparse, normalised from each floor."""
    parts: dict[K, list[float]] = {}
    share = {"dense": alpha, "sparse": 1.0 - alpha}
    for name, ranked in lists.items():
        norm = _normalised(ranked, SCORE_FLOORS[name], (fill or {}).get(name))
        for key, s in norm.items():
            parts.setdefault(key, []).append(share[name] * s)
    return _sorted(parts)
