"""Mention resolution kept current under writes: each chunk's keyed mentions, redone only
where a corpus-wide fact it read changed.

The rules of :mod:`.aggregate_mentions` key a chunk's mentions from the chunk and
four corpus-wide facts: the *common* words (written lowercase more often than they start a
name), the one-word names that *stand alone* in two chunks or more, the names written
mid-sentence in two chunks or more (*named*) and the *title* entities. :class:`Resolution`
keeps each chunk's contribution to those counts, so a write updates them by what it added
and removed; only chunks that read a fact whose value flipped (found through word and key
indexes) are resolved again. Each step calls the same per-chunk functions as the whole
pass would, so the result equals resolving every chunk afresh.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from .aggregate_mentions import (
    ALONE_CHUNKS,
    HAS_LETTER,
    LOWER_WORD,
    NAME_KINDS,
    name_parts,
    nested_parts,
    sentence_initial,
    truecase,
)
from .build_state import NO_SYNONYM_KINDS, rowid_order
from .extract import ChunkExtraction, RawMention, choose_mentions, fold, title_entries, title_name
from .model import ChunkText
from .resolve import entity_key
from .tallies import count_all, drop

Keyed = list[tuple[str, RawMention]]
Resolved = tuple[ChunkText, ChunkExtraction, Keyed]


@dataclass
class _ChunkFacts:
    """One chunk's inputs and contributions to the corpus-wide counts."""

    chosen: list[RawMention]
    cands: Counter[str]          # words of sentence-initial / all-capital names
    mid: Counter[str]            # first words of names written mid-sentence
    words: frozenset[str]        # every folded word of its names (what `common` it reads)
    keyed: Keyed = field(default_factory=list)
    alone: frozenset[str] = frozenset()
    named: frozenset[str] = frozenset()
    title_eks: tuple[str, ...] = ()          # entity keys of its title's entries


def _word_facts(c: ChunkText, x: ChunkExtraction, chosen: list[RawMention]) -> _ChunkFacts:
    cands: Counter[str] = Counter()
    mid: Counter[str] = Counter()
    words: set[str] = set()
    for m in chosen:
        if m.kind not in NAME_KINDS:
            continue
        ws = m.surface.split()
        folded = [fold(w) for w in ws]
        words.update(folded)
        if (len(ws) > 1 and m.surface.isupper()) or m.kind == "initial" \
                or sentence_initial(c.text, x, m):
            cands.update(folded)
        else:
            mid[folded[0]] += 1
    eks = tuple(dict.fromkeys(ek for e in title_entries(c.title) if (ek := entity_key(e)))) \
        if c.title else ()
    return _ChunkFacts(chosen, cands, mid, frozenset(words), title_eks=eks)


def _lowercase(c: ChunkText) -> Counter[str]:
    return Counter(LOWER_WORD.findall(c.text))


def _standalone(keyed: Keyed) -> frozenset[str]:
    edges: set[str] = set()
    for k, m in keyed:
        if " " in k and m.kind not in NO_SYNONYM_KINDS:
            words = k.split()
            edges.update((words[0], words[-1]))
    return frozenset(k for k, _m in keyed if " " not in k and k not in edges)


class Resolution:
    """Every live chunk's resolved mentions, with the counts they were resolved against."""

    def __init__(self) -> None:
        self.chunks: dict[str, ChunkText] = {}
        self.extractions: dict[str, ChunkExtraction] = {}
        self.resolved: dict[str, Keyed] = {}
        self.about: dict[str, list[str]] = {}   # title entity -> its chunks, row order
        self._facts: dict[str, _ChunkFacts] = {}
        self._cands: Counter[str] = Counter()
        self._mid: Counter[str] = Counter()
        self._lower: Counter[str] = Counter()
        self._common: set[str] = set()
        self._alone: Counter[str] = Counter()
        self._named: Counter[str] = Counter()
        self._by_word: dict[str, set[str]] = defaultdict(set)  # folded name word -> chunks
        self._by_key: dict[str, set[str]] = defaultdict(set)   # keyed entity -> chunks

    def title_entry(self, ek: str) -> str:
        """The title entry of title entity ``ek`` (its first chunk's, in row order)."""
        first = self.chunks[self.about[ek][0]]
        return next(e for e in title_entries(first.title or "") if entity_key(e) == ek)

    def apply(self, added: Iterable[tuple[ChunkText, ChunkExtraction, tuple[RawMention, ...]]],
              removed: Iterable[str]) -> tuple[set[str], set[str], dict[str, Resolved]]:
        """Remove the chunks ``removed`` and add (or replace) ``added`` (chunk, extraction,
        title hits): the live chunks whose resolved mentions were made again, the title
        entities whose entry or chunks changed, and what the chunks removed or resolved
        again were before (chunk, extraction, keyed mentions)."""
        before: dict[str, Resolved] = {}
        added = list(added)
        gone = [k for k in dict.fromkeys(removed) if k in self._facts]
        new = {c.key: (c, x, _word_facts(c, x, choose_mentions(
            [*(m for m in x.mentions if m.kind != "part"), *hits]))) for c, x, hits in added}
        old = {k: self._facts[k] for k in [*gone, *(k for k in new if k in self._facts)]}
        facts = [*old.values(), *(f for _c, _x, f in new.values())]
        # Lowercase words are counted from the text when a chunk comes and goes (not kept).
        lower_old = {key: _lowercase(self.chunks[key]) for key in old}
        lower_new = {key: _lowercase(c) for key, (c, _x, _f) in new.items()}
        words = {w for f in facts for w in (*f.cands, *f.mid)}
        words.update(w for counts in (*lower_old.values(), *lower_new.values()) for w in counts)
        common_before = {w: w in self._common for w in words}
        titles = {ek for f in facts for ek in f.title_eks}
        key_before: dict[str, tuple[bool, bool, bool]] = {ek: self._key_state(ek) for ek in titles}
        for key, f in old.items():
            before[key] = (self.chunks[key], self.extractions[key], self.resolved[key])
            self._count_words(key, f, lower_old[key], -1)
            self._count_title(key, f, -1)
            self._count_keyed(key, f, -1, key_before)
            del self._facts[key]
            if key not in new:
                del self.chunks[key], self.extractions[key], self.resolved[key]
        for key, (c, x, f) in new.items():
            self.chunks[key], self.extractions[key], self._facts[key] = c, x, f
            self._count_words(key, f, lower_new[key], +1)
            self._count_title(key, f, +1)
        for w in words:
            if self._is_common(w):
                self._common.add(w)
            else:
                self._common.discard(w)
        rekey = set(new)
        for w in words:
            if common_before[w] != (w in self._common):
                rekey.update(self._by_word.get(w, ()))
        for key in rekey:
            f = self._facts[key]
            if key not in new:
                self._count_keyed(key, f, -1, key_before)
            f.keyed = self._keyed(key, f)
            self._count_keyed(key, f, +1, key_before)
        redo = set(rekey)
        for k, state in key_before.items():
            if state != self._key_state(k):
                redo.update(self._by_key.get(k, ()))
        common = frozenset(self._common)
        for key in redo:
            if key not in before and key in self.resolved:
                before[key] = (self.chunks[key], self.extractions[key], self.resolved[key])
            self.resolved[key] = self._resolve(key, common)
        # Every title entity of a chunk that came or went may have another entry or chunks.
        return redo, titles, before

    # --- the corpus-wide counts ---------------------------------------------------------------

    def _is_common(self, w: str) -> bool:
        n = self._lower.get(w, 0)
        return self._cands.get(w, 0) > 0 and n >= 2 and n > self._mid.get(w, 0)

    def _key_state(self, k: str) -> tuple[bool, bool, bool]:
        return (self._alone.get(k, 0) >= ALONE_CHUNKS, self._named.get(k, 0) >= ALONE_CHUNKS,
                k in self.about)

    def _count_words(self, key: str, f: _ChunkFacts, lower: Counter[str], sign: int) -> None:
        for total, part in ((self._cands, f.cands), (self._mid, f.mid), (self._lower, lower)):
            count_all(total, part, sign)
        for w in f.words:
            if sign > 0:
                self._by_word[w].add(key)
            else:
                drop(self._by_word, w, key)

    def _count_title(self, key: str, f: _ChunkFacts, sign: int) -> None:
        for ek in f.title_eks:
            if sign > 0:
                held = self.about.setdefault(ek, [])
                held.append(key)
                held.sort(key=rowid_order)
            else:
                held = self.about[ek]
                held.remove(key)
                if not held:
                    del self.about[ek]

    def _count_keyed(self, key: str, f: _ChunkFacts, sign: int,
                     before: dict[str, tuple[bool, bool, bool]]) -> None:
        if sign > 0:
            f.alone = _standalone(f.keyed)
            f.named = frozenset(k for k, m in f.keyed if m.kind != "initial")
        for k, _m in f.keyed:
            before.setdefault(k, self._key_state(k))
        count_all(self._alone, Counter(f.alone), sign)
        count_all(self._named, Counter(f.named), sign)
        for k, _m in f.keyed:
            if sign > 0:
                self._by_key[k].add(key)
            else:
                drop(self._by_key, k, key)

    # --- one chunk ----------------------------------------------------------------------------

    def _keyed(self, key: str, f: _ChunkFacts) -> Keyed:
        """The chunk's chosen mentions, truecased against the common words, with their keys
        (the first step)."""
        text, x = self.chunks[key].text, self.extractions[key]
        keyed: Keyed = []
        for raw in f.chosen:
            m: RawMention | None = raw
            if self._common and raw.kind in NAME_KINDS:
                m = truecase(text, x, raw, self._common)  # type: ignore[arg-type]
                if m is None:
                    continue
            k = entity_key(m.surface)
            if k and (m.kind in NO_SYNONYM_KINDS or HAS_LETTER.search(k)):
                keyed.append((k, m))
        return keyed

    def _resolve(self, key: str, common: frozenset[str]) -> Keyed:
        """The chunk's keyed mentions re-keyed and filtered by the corpus facts, nested parts added."""
        c, f = self.chunks[key], self._facts[key]
        own = entity_key(title_name(c.title)) if c.title else ""
        keyed = name_parts(f.keyed, own, self.about, self._alone, _AtLeast(self._named),
                            set(f.title_eks), common)
        return keyed + nested_parts(self.extractions[key], f.keyed)


class _AtLeast:
    """``k in view``: whether ``k`` is counted :data:`ALONE_CHUNKS` times or more."""

    def __init__(self, counts: Counter[str]) -> None:
        self._counts = counts

    def __contains__(self, k: object) -> bool:
        return isinstance(k, str) and self._counts.get(k, 0) >= ALONE_CHUNKS
