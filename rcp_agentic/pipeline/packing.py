"""Token-budget packing (RCP §7.7.2) and the page boundaries of cursor pagination (§10).

Hits are taken in rank order until ``k`` or the budget binds; the budget is never exceeded.
A hit larger than the budget still left is skipped — a smaller one further down may fit —
and stays pending: the next page starts at the first pending hit, excluding those this page
took, so pages over one ranked list never repeat or lose a hit. A hit larger than the whole
budget is passed over and counted in ``oversized``. In a pool of several kinds (a collapsed
tree) one result never holds a unit together with a unit it contains: given ``leaves`` (each
candidate's leaf chunks), such a candidate is passed over and counted in ``contained``.
Given ``keeps`` (``keeps(i, j)``: does candidate ``i`` keep, for this query, the evidence of
the candidate ``j`` it contains), a coarse candidate is taken only when it keeps the evidence
of every finer unit it would displace (those packing would otherwise take from there on);
one that would not is passed over and counted in ``withheld``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Leaves = Callable[[int], "frozenset[str] | None"]


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
    withheld: int = 0


def _clashes(mine: frozenset[str] | None, taken: list[frozenset[str]]) -> bool:
    """Whether a unit with leaves ``mine`` contains or lies within one already taken."""
    if not mine:
        return False
    return any(mine <= other or other <= mine for other in taken)


def pack(tokens: list[int], k: int, budget: int | None, *, start: int = 0,
         exclude: frozenset[int] = frozenset(), leaves: Leaves | None = None,
         keeps: Callable[[int, int], bool] | None = None) -> Packed:
    """Pack ``tokens`` (token counts of the ranked candidates, best first) from ``start``."""
    taken: list[int] = []
    taken_leaves: list[frozenset[str]] = []
    used = skipped = oversized = contained = withheld = 0
    pending: int | None = None

    def rest(i: int) -> list[int]:
        """What plain packing would take below ``i`` if ``i`` were passed over."""
        out: list[int] = []
        held, spent, count = list(taken_leaves), used, len(taken)
        for j in range(i + 1, len(tokens)):
            if count >= k or (budget is not None and spent >= budget):
                break
            theirs = leaves(j) if leaves is not None and j not in exclude else None
            if j in exclude or _clashes(theirs, held) or (
                    budget is not None and spent + tokens[j] > budget):
                continue
            out.append(j)
            spent += tokens[j]
            count += 1
            if theirs:
                held.append(theirs)
        return out

    def displaced(i: int, mine: frozenset[str]) -> list[int]:
        """The finer units inside ``mine`` that packing would take below ``i`` without it."""
        assert leaves is not None
        return [j for j in rest(i) if (leaves(j) or mine) < mine]

    i = start
    while i < len(tokens) and len(taken) < k:
        if budget is not None and used >= budget:
            break
        n = tokens[i]
        mine = leaves(i) if leaves is not None and i not in exclude else None
        if i in exclude:
            pass
        elif _clashes(mine, taken_leaves):
            contained += 1
        elif budget is not None and n > budget:
            oversized += 1
        elif budget is not None and used + n > budget:
            skipped += 1
            if pending is None:
                pending = i
        elif (keeps is not None and mine and len(mine) > 1
              and not all(keeps(i, j) for j in displaced(i, mine))):
            withheld += 1
        else:
            taken.append(i)
            used += n
            if mine:
                taken_leaves.append(mine)
        i += 1
    next_start = i if pending is None else pending
    next_exclude = frozenset(x for x in (exclude | set(taken)) if x >= next_start)
    more = any(j not in next_exclude for j in range(next_start, len(tokens)))
    return Packed(taken, used, skipped, oversized, next_start, next_exclude, more, contained,
                  withheld)
