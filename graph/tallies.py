"""Counts and indexes that drop an entry once it reaches zero or empty (the live graph's
bookkeeping: a write adds and takes out each chunk's share)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping


def count(counter: Counter[str], key: str, step: int) -> None:
    """Add ``step`` to ``key``'s count, dropping it at zero."""
    n = counter.get(key, 0) + step
    if n > 0:
        counter[key] = n
    else:
        counter.pop(key, None)


def count_all(counter: Counter[str], part: Mapping[str, int], sign: int) -> None:
    """Add (``sign`` 1) or take out (-1) every count of ``part``."""
    for key, n in part.items():
        count(counter, key, sign * n)


def drop(index: dict[str, set[str]], k: str, key: str) -> None:
    """Take ``key`` out of ``index[k]``, dropping the entry once empty."""
    held = index.get(k)
    if held is not None:
        held.discard(key)
        if not held:
            del index[k]
