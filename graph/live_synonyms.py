"""Synonym edges kept current as candidate names come and go, at a cost set by the change.

A pair of entities is a synonym edge when their names' cosine is at least the threshold,
their names differ, and one is among the other's ``top_k + 1`` most similar candidates
(what :func:`.resolve.synonym_edges` keeps). :class:`SynonymTable` holds each candidate's
neighbours above the threshold (ranked by rounded cosine, ties by key), and which
candidates list it: a new name is compared with every held vector once, a name that leaves
makes only the candidates that listed it look again. Cosines are computed in float64 and
rounded to 6 places, so a pair's value does not depend on which side or batch computed it.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable, Mapping

import numpy as np

_BLOCK_CELLS = 4_000_000   # float64 cells of one block of cosines (32 MB)


class SynonymTable:
    """Candidates (entity key -> name, name vector) and the synonym pairs among them."""

    def __init__(self, threshold: float, top_k: int) -> None:
        self.threshold = threshold
        self.keep = top_k + 1
        self.names: dict[str, str] = {}
        self._slot: dict[str, int] = {}
        self._keys: list[str | None] = []
        self._free: list[int] = []
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._near: dict[str, list[tuple[float, str]]] = {}   # key -> [(-cos, other)], best first
        self._listed_by: dict[str, set[str]] = {}

    def pairs_of(self, key: str) -> dict[str, float]:
        """``key``'s synonym partners -> cosine."""
        out = {}
        for neg, other in self._near.get(key, ()):
            if self.names[other] != self.names[key]:
                out[other] = -neg
        for other in self._listed_by.get(key, ()):
            if self.names[other] != self.names[key]:
                out[other] = self._cos(key, other)
        return out

    def _cos(self, a: str, b: str) -> float:
        for neg, other in self._near.get(b, ()):
            if other == a:
                return -neg
        for neg, other in self._near.get(a, ()):
            if other == b:
                return -neg
        raise KeyError((a, b))

    def update(self, wanted: Mapping[str, str], gone: Iterable[str],
               vectors: Mapping[str, np.ndarray]) -> set[str]:
        """Make the candidates ``wanted`` (key -> name; a held key with another name is
        renamed) and drop ``gone``; ``vectors`` maps each new name to its vector. Returns
        the keys whose synonym partners may have changed."""
        touched: set[str] = set()
        refill: set[str] = set()
        drop = [k for k in gone if k in self.names]
        drop += [k for k, name in wanted.items() if k in self.names and self.names[k] != name]
        for key in drop:
            touched.add(key)
            touched.update(self._listed_by.get(key, ()))
            refill.update(self._listed_by.pop(key, ()))
            for _neg, other in self._near.pop(key, []):
                self._listed_by.get(other, set()).discard(key)
                touched.add(other)
            slot = self._slot.pop(key)
            self._keys[slot] = None
            self._free.append(slot)
            del self.names[key]
        new = sorted(k for k in wanted if k not in self.names)
        for key in new:
            self.names[key] = wanted[key]
            self._place(key, vectors[wanted[key]])
        refill -= set(drop) - set(new)
        refill = {k for k in refill if k in self.names} | set(new)
        touched |= refill
        for key, row in self._rows(sorted(refill)):
            for neg, other in self._near.get(key, []):
                self._listed_by.get(other, set()).discard(key)
            near = self._top(key, row)
            self._near[key] = near
            for _neg, other in near:
                self._listed_by.setdefault(other, set()).add(key)
            if key in new:
                touched.update(self._offer(key, row))
        return touched

    def _place(self, key: str, vector: np.ndarray) -> None:
        v = np.asarray(vector, dtype=np.float32)
        n = float(np.linalg.norm(v))
        v = v / n if n > 0 else v
        if self._free:
            slot = self._free.pop()
        else:
            slot = len(self._keys)
            self._keys.append(None)
            if slot >= self._matrix.shape[0]:
                grown = np.zeros((max(64, 2 * self._matrix.shape[0]), v.shape[0]), np.float32)
                if self._matrix.size:
                    grown[:self._matrix.shape[0]] = self._matrix
                self._matrix = grown
        self._matrix[slot] = v
        self._keys[slot] = key
        self._slot[key] = slot

    def _rows(self, keys: list[str]) -> Iterable[tuple[str, np.ndarray]]:
        """Each key's rounded cosines with every slot (dead slots included, skipped later)."""
        used = len(self._keys)
        if not keys or not used:
            return
        whole = self._matrix[:used].astype(np.float64)
        step = max(1, _BLOCK_CELLS // used)
        for lo in range(0, len(keys), step):
            part = keys[lo:lo + step]
            sims = np.round(whole[[self._slot[k] for k in part]] @ whole.T, 6)
            yield from zip(part, sims)

    def _top(self, key: str, row: np.ndarray) -> list[tuple[float, str]]:
        """The ``keep`` best other candidates at or above the threshold, ties by key."""
        idx = np.flatnonzero(row >= self.threshold)
        cands = sorted((-float(row[i]), k) for i in idx
                       if (k := self._keys[i]) is not None and k != key)
        return cands[:self.keep]

    def _offer(self, key: str, row: np.ndarray) -> set[str]:
        """Put new candidate ``key`` in the lists of the held candidates it now ranks in."""
        touched = set()
        for i in np.flatnonzero(row >= self.threshold):
            other = self._keys[i]
            if other is None or other == key:
                continue
            near = self._near.setdefault(other, [])
            entry = (-float(row[i]), key)
            if any(k == key for _n, k in near):
                continue
            if len(near) < self.keep or entry < near[-1]:
                insort(near, entry)
                self._listed_by.setdefault(key, set()).add(other)
                touched.add(other)
                if len(near) > self.keep:
                    _neg, out = near.pop()
                    self._listed_by.get(out, set()).discard(other)
                    touched.add(out)
        return touched
