"""Maximal Marginal Relevance (Carbonell & Goldstein 1998) over unit embeddings.

Greedy: at each step pick the candidate maximising
``λ · relevance − (1 − λ) · max cosine to the already picked``, where relevance is
the pipeline score min-max normalised over the pool. λ = 1 keeps the input order;
λ = 0 is pure diversity. Ties (within float noise) go to the earlier (better ranked)
candidate.
"""

from __future__ import annotations

import numpy as np

from ..ranking import first_best


def mmr_order(scores: np.ndarray, vectors: np.ndarray, lam: float, limit: int) -> list[int]:
    """Indices of up to ``limit`` pool items in MMR order (unit-length ``vectors``)."""
    n = len(scores)
    if n == 0 or limit <= 0:
        return []
    span = float(scores.max() - scores.min())
    relevance = (scores - scores.min()) / span if span > 0 else np.ones(n)
    sims = vectors @ vectors.T
    picked: list[int] = []
    max_sim = np.full(n, -np.inf)
    available = np.ones(n, dtype=bool)
    for _ in range(min(limit, n)):
        penalty = np.where(np.isfinite(max_sim), max_sim, 0.0)
        gain = lam * relevance - (1.0 - lam) * penalty
        gain[~available] = -np.inf
        best = first_best(gain)  # the first maximum (within float noise): the better-ranked one
        picked.append(best)
        available[best] = False
        max_sim = np.maximum(max_sim, sims[best])
    return picked
