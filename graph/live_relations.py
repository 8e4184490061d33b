"""Co-occurrence relations kept current as sentences come and go, at a cost set by the change.

Two entities in one sentence (within ``pair_window`` of each other among its first
``max_sentence_entities``) form a pair; its score is normalised PMI x ln(1 + sentences), and
an entity keeps its ``max_relations_per_entity`` best pairs (a pair stays if either end
keeps it). :class:`PairTable` holds each pair's sentences, each entity's sentence count and
a ranked list per entity, so a write rescores only the pairs of the sentences it changed and
of the entities whose counts moved. The corpus size in the PMI is the sentence count rounded
up to a step of 2^(1/4) (:func:`corpus_step`): within a step no other pair's score moves, and
when a write crosses a step every pair is scored again (once per ~19 % of growth).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable

Pair = tuple[str, str]
# A sentence: (its chunk's row order, its index), so sids sort in reading order.
Sid = tuple[tuple[int, str], int]


def corpus_step(n: int) -> int:
    """The sentence count as the PMI reads it: the least 2^(j/4) >= n (an integer)."""
    if n <= 1:
        return 1
    j = math.ceil(4 * math.log2(n) - 1e-9)
    return math.ceil(2 ** (j / 4) - 1e-9)


class PairTable:
    """Sentence pairs, their scores and which are kept."""

    def __init__(self, *, window: int, max_entities: int, keep: int, min_npmi: float) -> None:
        self.window, self.max_entities, self.keep, self.min_npmi = (
            window, max_entities, keep, min_npmi)
        self.where: dict[Pair, list[Sid]] = {}
        self.df: Counter[str] = Counter()
        self.sentences = 0
        self.step = 1
        self._score: dict[Pair, float] = {}
        self._ranked: dict[str, list[tuple[float, Pair]]] = {}
        self._pairs_of: dict[str, set[Pair]] = {}
        self.kept: set[Pair] = set()

    def pairs(self, keys: list[str]) -> Iterable[Pair]:
        """The pairs one sentence with these keys (reading order) forms."""
        keys = keys[:self.max_entities]
        for i, a in enumerate(keys):
            for b in keys[i + 1:i + 1 + self.window]:
                yield (a, b) if a < b else (b, a)

    def update(self, removed: Iterable[tuple[Sid, list[str]]],
               added: Iterable[tuple[Sid, list[str]]]) -> tuple[set[Pair], set[Pair]]:
        """Take sentences out and in: the pairs whose relation must be made again (kept,
        with new sentences or score) and the pairs no longer kept."""
        moved: set[Pair] = set()
        df_moved: set[str] = set()
        for sign, batch in ((-1, removed), (1, added)):
            grouped: dict[Pair, list[Sid]] = {}
            for sid, keys in batch:
                self.sentences += sign
                for k in keys:
                    self.df[k] += sign
                    if self.df[k] <= 0:
                        del self.df[k]
                    df_moved.add(k)
                for pair in set(self.pairs(keys)):
                    grouped.setdefault(pair, []).append(sid)
            for pair, sids in grouped.items():
                moved.add(pair)
                held = self.where.get(pair)
                if sign > 0 and not held:
                    self.where[pair] = sorted(sids)
                elif sign > 0:
                    for sid in sids:
                        insort(held, sid)  # type: ignore[arg-type]
                else:
                    gone = set(sids)
                    left = [sid for sid in held or () if sid not in gone]
                    if left:
                        self.where[pair] = left
                    else:
                        self.where.pop(pair, None)
        step = corpus_step(self.sentences)
        if step != self.step:
            self.step = step
            rescore = set(self.where) | set(self._score)
        else:
            rescore = set(moved)
            for k in df_moved:
                rescore.update(self._pairs_of.get(k, ()))
        ends = {k for pair in rescore for k in pair}
        before = {k: self._top(k) for k in ends}
        self._rescore(rescore)
        entering: set[Pair] = set()
        leaving: set[Pair] = set()
        for k in ends:
            now = self._top(k)
            entering |= now - before[k]
            leaving |= before[k] - now
        was = {pair for pair in entering | leaving | rescore if pair in self.kept}
        self.kept |= entering
        for pair in leaving | rescore:
            if pair in self.kept and not self._in_top(pair):
                self.kept.discard(pair)
        gone = {pair for pair in was if pair not in self.kept}
        remake = {pair for pair in rescore | entering if pair in self.kept}
        return remake, gone

    def _top(self, k: str) -> set[Pair]:
        """The pairs entity ``k`` keeps (its best ``keep``)."""
        return {pair for _s, pair in self._ranked.get(k, ())[:self.keep]}

    def pairs_with(self, k: str) -> set[Pair]:
        """The pairs entity ``k`` is in (scored or not)."""
        return set(self._pairs_of.get(k, ()))

    def weight(self, pair: Pair) -> float:
        """A kept pair's NPMI (its score / ln(1 + sentences)), rounded."""
        return round(self._score[pair] / math.log1p(len(self.where[pair])), 6)

    def _in_top(self, pair: Pair) -> bool:
        s = self._score.get(pair)
        if s is None:
            return False
        for k in pair:
            ranked = self._ranked.get(k, [])
            i = bisect_left(ranked, (-s, pair))
            if i < self.keep:
                return True
        return False

    def _rescore(self, pairs: set[Pair]) -> set[str]:
        """Score ``pairs`` again and move them in their ends' rankings: the ends touched."""
        ends: set[str] = set()
        n = self.step
        for pair in pairs:
            old = self._score.pop(pair, None)
            if old is not None:
                for k in pair:
                    ranked = self._ranked[k]
                    del ranked[bisect_left(ranked, (-old, pair))]
                    if not ranked:
                        del self._ranked[k]
            where = self.where.get(pair)
            for k in pair:
                ends.add(k)
                if where:
                    self._pairs_of.setdefault(k, set()).add(pair)
                else:
                    held = self._pairs_of.get(k)
                    if held is not None:
                        held.discard(pair)
                        if not held:
                            del self._pairs_of[k]
            if not where:
                continue
            a, b = pair
            n_ab = len(where)
            p_ab = n_ab / n
            pmi = math.log(p_ab / ((self.df[a] / n) * (self.df[b] / n)))
            npmi = pmi / -math.log(p_ab) if p_ab < 1 else 1.0
            if npmi <= self.min_npmi:
                continue
            score = npmi * math.log1p(n_ab)
            self._score[pair] = score
            for k in pair:
                insort(self._ranked.setdefault(k, []), (-score, pair))
        return ends
