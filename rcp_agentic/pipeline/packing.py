"""Token-budget packing (RCP §7.7.2) and the page boundaries of cursor pagination (§10).

Hits are taken in rank order until ``k`` or the budget binds. A hit larger than
the budget still left is skipped — a smaller one further down may still fit — and
stays pending: the next page starts at the first pending hit, excluding those
this page already took, so pages over one ranked list never repeat or lose a hit.
A hit larger than the whole budget can never be packed; it is passed over and
counted in ``oversized``. The budget is never exceeded.

In a pool of several kinds (a collapsed tree: chunks and the summaries above them)
one result never holds a unit together with a unit it contains: given ``leaves``
(the leaf chunks of the i-th candidate, None when not judged), a candidate whose
leaves contain or lie within those of one already taken is passed over and counted
in ``contained``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Packed:
    """One page: the ranked indices taken, their tokens, and where the next page starts."""

    taken: list[int]
    tokens: int
    skipped: int
    oversized: int
    next_start: int
    next_exclude: frozenset[int] = field(default_factory=frozenset)
    more: bool = False
    contained: int = 0


def pack(tokens: list[int], k: int, budget: int | None, *, start: int = 0,
         exclude: frozenset[int] = frozenset(),
         leaves: Callable[[int], frozenset[str] | None] | None = None) -> Packed:
    """Pack ``tokens`` (token counts of the ranked candidates, best first) from ``start``."""
    taken: list[int] = []
    taken_leaves: list[frozenset[str]] = []
    used = skipped = oversized = contained = 0
    pending: int | None = None
    i = start
    while i < len(tokens) and len(taken) < k:
        if budget is not None and used >= budget:
            break
        n = tokens[i]
        mine = leaves(i) if leaves is not None and i not in exclude else None
        if i in exclude:
            pass
        elif mine and any(mine <= other or other <= mine for other in taken_leaves):
            contained += 1
        elif budget is not None and n > budget:
            oversized += 1
        elif budget is not None and used + n > budget:
            skipped += 1
            if pending is None:
                pending = i
        else:
            taken.append(i)
            used += n
            if mine:
                taken_leaves.append(mine)
        i += 1
    next_start = i if pending is None else pending
    next_exclude = frozenset(x for x in (exclude | set(taken)) if x >= next_start)
    more = any(j not in next_exclude for j in range(next_start, len(tokens)))
    return Packed(taken, used, skipped, oversized, next_start, next_exclude, more, contained)
