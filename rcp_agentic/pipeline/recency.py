"""Recency weighting: a score is multiplied by ``0.5 ** (age_days / half_life_days)``.

Age is measured from the time of the request to the unit's date field (a future
date counts as age 0). A unit without the field keeps its score unchanged.
"""

from __future__ import annotations

import numpy as np

MS_PER_DAY = 86_400_000.0


def decay(dates_ms: list[float | None], now_ms: float, half_life_days: float) -> np.ndarray:
    """The multiplier of each unit (1.0 where the date is missing)."""
    out = np.ones(len(dates_ms))
    for i, d in enumerate(dates_ms):
        if d is not None:
            age = max(0.0, now_ms - float(d)) / MS_PER_DAY
            out[i] = 0.5 ** (age / half_life_days)
    return out
