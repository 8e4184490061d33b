"""How every ranking breaks ties: by unit id, among scores equal up to float noise.

Scores equal in exact arithmetic come out of float32 dot products, BLAS builds and backends
up to ~1e-7 apart, so ranking the raw floats orders them by noise, and rounding cannot fix
that (two close values still fall on both sides of a rounding boundary now and then). So a
ranking groups: :func:`ranked` ties every score within :data:`TOLERANCE` of its group's best
to that score and orders the group by key (a score is reported at that precision); PageRank
masses and decayed scores group within :data:`MASS_TOLERANCE` of their group's best,
relatively; fused sums are rounded by :func:`settle_sum` to :data:`SIGNIFICANT` significant
digits, so sums equal in exact arithmetic compare equal. The key is the unit id, or an index
position: ``Docstore.unit_arrays`` reads rows in unit id order, so "ties by position" is
"ties by unit id", whatever order the units were inserted in.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)

TOLERANCE = 1e-6        # cosines, BM25, reranker scores, probabilities (absolute)
MASS_TOLERANCE = 1e-9   # PageRank masses and decayed fused scores (relative to the best)
SIGNIFICANT = 14


def ranked(pairs: Iterable[tuple[K, float]], *, tolerance: float = TOLERANCE,
           relative: bool = False) -> list[tuple[K, float]]:
    """``(key, score)`` pairs best first, ties by the smaller key: a score within
    ``tolerance`` (times the group's best score when ``relative``) of its group's best is
    tied with it and reported as that best score."""
    items = sorted(pairs, key=lambda ks: -ks[1])
    out: list[tuple[K, float]] = []
    i = 0
    while i < len(items):
        best = float(items[i][1])
        floor = best - (tolerance * abs(best) if relative else tolerance)
        j = i
        while j < len(items) and items[j][1] >= floor:
            j += 1
        out.extend((k, best) for k, _s in sorted(items[i:j], key=lambda ks: ks[0]))  # type: ignore[arg-type, return-value]
        i = j
    return out


def top(scores: np.ndarray, keys: np.ndarray, k: int, *, tolerance: float = TOLERANCE,
        relative: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of ``scores`` as (indices, scores), ranked by :func:`ranked` (a tie
    across the cut keeps the smaller keys, not whichever a partition left)."""
    n = len(scores)
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    pool = np.arange(n)
    if n > k:
        kth = float(np.partition(scores, n - k)[n - k])
        slack = 2 * (tolerance * abs(kth) if relative else tolerance)
        pool = np.flatnonzero(scores >= kth - slack)
    order = {int(keys[i]): int(i) for i in pool}
    got = ranked(((int(keys[i]), float(scores[i])) for i in pool), tolerance=tolerance,
                 relative=relative)[:k]
    return (np.array([order[key] for key, _s in got], dtype=np.int64),
            np.array([s for _k, s in got], dtype=np.float64))


def settle_sum(value: float) -> float:
    """A float64 sum rounded to :data:`SIGNIFICANT` significant digits, so sums equal in
    exact arithmetic (of different terms) compare equal."""
    return float(f"{value:.{SIGNIFICANT}g}")


def first_best(gains: np.ndarray, *, tolerance: float = TOLERANCE) -> int:
    """The first index whose gain is within ``tolerance`` of the largest (an argmax that
    float noise cannot move to a later, equally good candidate)."""
    return int(np.flatnonzero(gains >= float(np.max(gains)) - tolerance)[0])
