"""How many units of each kind a version holds, counted once and then followed write by write.

Counting every valid unit (``Docstore.unit_kinds``) walks the whole table and checks each
derived unit's leaves: ~0.2 s at 60k rows, paid by the first retrieve after each write
(twice: what the version offers, and the size of the pool it indexes). :class:`KindCounts`
keeps the counts of the last few versions and gets a newer version's from the newest
older one plus the rows that changed in between (``Docstore.kind_delta``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .docstore import Docstore

_KEPT = 8


class KindCounts:
    """(unit, level, count) of the units valid at a version, cached per version."""

    def __init__(self, store: Docstore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._counts: OrderedDict[int, list[tuple[str, int, int]]] = OrderedDict()

    def at(self, version: int, follow: bool = True) -> list[tuple[str, int, int]]:
        """The counts at ``version``, sorted by (unit, level), as ``Docstore.unit_kinds``
        (``follow=False``: counted whole, as before the counts followed writes)."""
        with self._lock:
            got = self._counts.get(version)
            older = max((v for v in self._counts if v < version), default=None)
            base = self._counts[older] if older is not None else None
        if got is not None:
            return got
        delta = (self.store.kind_delta(older, version)
                 if follow and older is not None and base is not None else None)
        if delta is None or base is None:
            counts = list(self.store.unit_kinds(version))
        else:
            merged = {(u, lv): n for u, lv, n in base}
            for kind, n in delta.items():
                merged[kind] = merged.get(kind, 0) + n
            counts = [(u, lv, n) for (u, lv), n in sorted(merged.items()) if n > 0]
        with self._lock:
            self._counts[version] = counts
            while len(self._counts) > _KEPT:
                self._counts.popitem(last=False)
        return counts
