"""Title-lexicon hits kept current under writes: a new title is looked for only where it can be.

:class:`TitleHits` holds every chunk's hits of the document titles (the lexicon of every live
title entry, :class:`~.extract.Lexicon`) and a folded-word index of the chunks: a write's new
titles are scanned for only in the chunks holding their first word, a gone title's hits are
dropped only from the chunks that had one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from ..read_first import checkpoint
from .build_state import rowid_order
from .extract import ChunkExtraction, Lexicon, RawMention, title_entries, title_key, tokens
from .model import ChunkText
from .tallies import count, drop


class TitleHits:
    """Every chunk's title-lexicon hits, with the lexicon and a folded-word index of the
    chunks, so a new title is looked for only in chunks holding its first word."""

    def __init__(self) -> None:
        self.hits: dict[str, tuple[RawMention, ...]] = {}
        self.lexicon = Lexicon((), expand=False)
        self._entries: Counter[str] = Counter()       # title entries of the live chunks
        self._keys: Counter[str] = Counter()          # their lexicon keys
        self._entries_of: dict[str, set[str]] = {}    # lexicon key -> its entries
        self._by_word: dict[str, list[str]] = {}      # folded word -> chunks (dead ones too)
        self._by_title: dict[str, set[str]] = {}      # lexicon key -> chunks with a hit
        self._dead = 0
        self.rescanned = 0      # chunks held before that the last write scanned for new titles

    def apply(self, added: Sequence[tuple[ChunkText, ChunkExtraction]], removed: Iterable[str],
              chunks: Mapping[str, ChunkText], extractions: Mapping[str, ChunkExtraction]
              ) -> set[str]:
        """Update for a write (``chunks`` / ``extractions``: the live chunks before it, the
        removed ones included): the chunks held before whose hits changed."""
        gone_entries: list[str] = []
        new_entries: list[str] = []
        for key in removed:
            c = chunks[key]
            gone_entries += _entries(c.title)
            for h in self.hits.pop(key, ()):
                drop(self._by_title, title_key(h.surface), key)
            self._dead += 1
        for c, _x in added:
            new_entries += _entries(c.title)
        keys_before = set(self._keys)
        entries_before = set(self._entries)
        for sign, entries in ((-1, gone_entries), (1, new_entries)):
            for e in entries:
                count(self._entries, e, sign)
                k = title_key(e)
                if k:
                    count(self._keys, k, sign)
        removed_e = sorted({e for e in gone_entries if e not in self._entries})
        added_e = sorted({e for e in new_entries if e not in entries_before})
        for e in removed_e:
            drop(self._entries_of, title_key(e), e)
        for e in added_e:
            self._entries_of.setdefault(title_key(e), set()).add(e)
        self.lexicon = self.lexicon.changed(removed_e, added_e)
        self.rescanned = 0
        gone_keys = keys_before - set(self._keys)
        new_keys = set(self._keys) - keys_before
        changed: set[str] = set()
        for k in gone_keys:
            for key in self._by_title.pop(k, set()):
                self.hits[key] = tuple(h for h in self.hits[key]
                                       if title_key(h.surface) not in gone_keys)
                changed.add(key)
        if new_keys:
            fresh = Lexicon(sorted(e for k in new_keys for e in self._entries_of.get(k, ())),
                            expand=False)
            todo = {key for k in new_keys for key in self._by_word.get(k.split(" ")[0], ())
                    if key in self.hits}
            self.rescanned = len(todo)
            for key in sorted(todo, key=rowid_order):
                checkpoint()
                more = fresh.scan(chunks[key].text, extractions[key].sentences)
                if more:
                    self.hits[key] = self.hits[key] + tuple(more)
                    for h in more:
                        self._by_title.setdefault(title_key(h.surface), set()).add(key)
                    changed.add(key)
        for c, x in added:
            toks = tokens(c.text)
            self.hits[c.key] = tuple(self.lexicon.scan(c.text, x.sentences, toks))
            for h in self.hits[c.key]:
                self._by_title.setdefault(title_key(h.surface), set()).add(c.key)
            for w in {t for t, _a, _b in toks}:
                self._by_word.setdefault(w, []).append(c.key)
        if self._dead > len(self.hits):
            self._compact()
        return changed

    def _compact(self) -> None:
        self._by_word = {w: live for w, held in self._by_word.items()
                         if (live := [k for k in held if k in self.hits])}
        self._dead = 0


def _entries(title: str | None) -> list[str]:
    return [e for e in title_entries(title)] if title else []
