"""Entity mentions from chunk text: a title lexicon plus pluggable extractors.

Two parts with different life cycles, so ingest stays incremental:

* :class:`Lexicon` — the document titles of the corpus as an entity lexicon. It
  finds *every* occurrence of every title (overlaps included) with a token trie;
  the builder picks longest-first among them. When new documents add titles, old
  chunks are re-scanned with a lexicon of only the new titles (``Lexicon(new)``),
  and hits of removed titles are dropped: the union equals a full scan.
* An extractor (``identity`` + ``extract(chunks) -> list[ChunkExtraction]``) —
  per chunk, independent of the rest of the corpus, so its output is cached by
  chunk. The extractors live beside this module: ``extract_rules`` (rules, no
  dependencies), ``extract_spacy`` (an installed spaCy pipeline, optional) and
  ``extract_llm`` (GraphRAG-style entities and typed relations through a chat model).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from ..text import split_sentences
from .model import ChunkText


@dataclass(frozen=True)
class RawMention:
    """A mention as found, before resolution: offsets within the chunk's text."""

    surface: str
    start: int
    end: int
    sentence: int          # index into ``ChunkExtraction.sentences``
    kind: str              # title | name | acronym | quoted | date | number | <NER/LLM type>


@dataclass(frozen=True)
class RawRelation:
    """A typed relation an LLM stated between two surfaces of one chunk."""

    subject: str
    object: str
    relation: str
    description: str
    weight: float = 1.0


@dataclass(frozen=True)
class ChunkExtraction:
    """What an extractor found in one chunk (independent of every other chunk)."""

    sentences: tuple[tuple[int, int], ...]          # sentence offsets within the chunk text
    mentions: tuple[RawMention, ...] = ()
    relations: tuple[RawRelation, ...] = ()
    descriptions: tuple[tuple[str, str], ...] = ()  # (surface, description), LLM only

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (for a persistent extraction cache)."""
        return {"s": [list(s) for s in self.sentences],
                "m": [[m.surface, m.start, m.end, m.sentence, m.kind] for m in self.mentions],
                "r": [[r.subject, r.object, r.relation, r.description, r.weight]
                      for r in self.relations],
                "d": [list(d) for d in self.descriptions]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChunkExtraction:
        """The inverse of :meth:`to_json`."""
        return cls(tuple((int(a), int(b)) for a, b in data.get("s", [])),
                   tuple(RawMention(str(m[0]), int(m[1]), int(m[2]), int(m[3]), str(m[4]))
                         for m in data.get("m", [])),
                   tuple(RawRelation(str(r[0]), str(r[1]), str(r[2]), str(r[3]), float(r[4]))
                         for r in data.get("r", [])),
                   tuple((str(d[0]), str(d[1])) for d in data.get("d", [])))


class Extractor(Protocol):
    """Finds mentions (and, for an LLM, relations) in chunks, one result per chunk in order."""

    identity: str

    def extract(self, chunks: Sequence[ChunkText]) -> list[ChunkExtraction]: ...


# --- text helpers ------------------------------------------------------------------------

# Apostrophes split words, so "Kent's" holds the title "Kent" and "You're" matches "You’re".
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def fold(text: str) -> str:
    """Lowercase without diacritics (``Pál`` -> ``pal``)."""
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()


def tokens(text: str) -> list[tuple[str, int, int]]:
    """Word tokens of ``text`` as (folded token, start, end); punctuation is dropped."""
    if text.isascii():
        low = text.lower()
        return [(low[m.start():m.end()], m.start(), m.end()) for m in _WORD.finditer(text)]
    return [(fold(m.group()), m.start(), m.end()) for m in _WORD.finditer(text)]


def sentence_spans(text: str) -> tuple[tuple[int, int], ...]:
    """Sentence offsets of ``text`` (the RAPTOR splitter: abbreviations and initials kept)."""
    spans = tuple((s.span.start, s.span.end) for s in split_sentences(text, "", 0)
                  if s.span is not None)
    return spans or ((0, len(text)),)


def sentence_of(spans: Sequence[tuple[int, int]], pos: int) -> int:
    """Index of the sentence holding character ``pos`` (the last one starting at or before it)."""
    lo, hi = 0, len(spans) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if spans[mid][0] <= pos:
            lo = mid
        else:
            hi = mid - 1
    return lo


# --- the title lexicon ---------------------------------------------------------------------

STOPWORDS = frozenset(ENGLISH_STOP_WORDS) | {"s", "also", "however", "although", "though",
                                             "thus", "hence", "like", "yes", "ok", "did",
                                             "does", "do", "was", "were", "are", "is", "has",
                                             "had", "have", "who", "whom", "whose", "which",
                                             "what", "where", "when", "why", "how"}


class Lexicon:
    """Document titles as an entity lexicon, matched on folded word tokens with a trie.

    A title matches, as written, without a trailing "(disambiguation)" and by the head of
    a place-style comma title (:func:`title_entries`), where its tokens occur in order
    (case, diacritics and punctuation ignored) and the matched text starts with a capital or a digit, unless the title
    itself is lowercase — "free guy" in running text is not the film. Titles made only
    of stop words, or a single token of fewer than 2 characters, are left out.
    """

    def __init__(self, titles: Iterable[str], *, expand: bool = True) -> None:
        self.trie: dict[str, Any] = {}
        self.titles: dict[str, str] = {}   # token key -> a title (the first seen, sorted)
        self._expand = expand
        # How many titles give each entry, and the entries of each key: what ``changed`` needs.
        self._count: dict[str, int] = {}
        self._entries: dict[str, frozenset[str]] = {}
        for title in titles:
            for entry in self._entries_of(title):
                self._count[entry] = self._count.get(entry, 0) + 1
        by_key: dict[str, set[str]] = {}
        for entry in self._count:
            key = _lexicon_key(entry)
            if key is not None:
                by_key.setdefault(key, set()).add(entry)
        own = {id(self.trie)}
        for key in sorted(by_key):
            self._entries[key] = frozenset(by_key[key])
            self._place(key, own)

    def _entries_of(self, title: str) -> tuple[str, ...]:
        return title_entries(title) if self._expand else (title,)

    def _place(self, key: str, own: set[int]) -> None:
        """Set (or clear) ``key``'s title in ``titles`` and the trie from its entries (the
        first in sorted order). Trie nodes not in ``own`` (ids of the nodes this lexicon
        made) may be shared with the lexicon this one was ``changed`` from: copied first."""
        entries = self._entries.get(key)
        node = self.trie
        for t in key.split(" "):
            child = node.get(t)
            if child is None or id(child) not in own:
                child = dict(child or {})
                own.add(id(child))
                node[t] = child
            node = child
        if not entries:
            self.titles.pop(key, None)
            node.pop("", None)
            return
        title = min(entries)
        self.titles[key] = title
        node[""] = (key, title[:1].islower())

    def changed(self, removed: Iterable[str], added: Iterable[str]) -> Lexicon:
        """This lexicon less the titles ``removed`` (one count each) plus ``added``: equal
        to one built from the changed titles, sharing the unchanged part of the trie."""
        new = Lexicon((), expand=self._expand)
        new.trie, new.titles = dict(self.trie), dict(self.titles)
        new._count, new._entries = dict(self._count), dict(self._entries)
        keys: set[str] = set()
        own = {id(new.trie)}
        for title, step in [*((t, -1) for t in removed), *((t, 1) for t in added)]:
            for entry in self._entries_of(title):
                count = new._count.get(entry, 0) + step
                if count > 0:
                    new._count[entry] = count
                else:
                    new._count.pop(entry, None)
                key = _lexicon_key(entry)
                if key is not None and (count == 0 or (step > 0 and count == 1)):
                    held = new._entries.get(key, frozenset())
                    new._entries[key] = held | {entry} if count else held - {entry}
                    keys.add(key)
        for key in sorted(keys):
            new._place(key, own)
        return new

    def __len__(self) -> int:
        return len(self.titles)

    def scan(self, text: str, spans: Sequence[tuple[int, int]] | None = None,
             toks: list[tuple[str, int, int]] | None = None) -> list[RawMention]:
        """Every occurrence of every title in ``text`` (overlapping ones too), kind ``title``."""
        if not self.trie:
            return []
        toks = tokens(text) if toks is None else toks
        spans = sentence_spans(text) if spans is None else spans
        out = []
        trie = self.trie
        for i, (tok, start, _e) in enumerate(toks):
            node = trie.get(tok)
            j = i
            while node is not None:
                hit = node.get("")
                if hit is not None:
                    end = toks[j][2]
                    if hit[1] or text[start].isupper() or text[start].isdigit():
                        out.append(RawMention(text[start:end], start, end,
                                              sentence_of(spans, start), "title"))
                j += 1
                if j >= len(toks):
                    break
                node = node.get(toks[j][0])
        return out


_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")


def title_name(title: str) -> str:
    """A title without its trailing disambiguation: "Toto (band)" is written "Toto"."""
    return _DISAMBIGUATION.sub("", title).strip() or title.strip()


@lru_cache(maxsize=1 << 16)
def title_entries(title: str) -> tuple[str, ...]:
    """What the lexicon looks for: the title as written, without its disambiguation, and
    the head of a place-style comma title ("Jacksonville, Florida" is also written
    "Jacksonville"; "Earth, Wind & Fire", "Albert, King of Sweden" and "Washington, D.C."
    stay whole: a list, a qualifier with lowercase words, an initialism)."""
    name = title_name(title)
    out = (name,) if name == title.strip() else (name, title.strip())
    head, comma, rest = name.partition(", ")
    if comma and head[:1].isupper() and "&" not in rest and "." not in rest \
            and all(w[:1].isupper() or w[:1].isdigit() for w in rest.replace(",", " ").split()):
        head = title_name(head)
        if head not in out:
            out = (*out, head)
    return out


def choose_mentions(mentions: Iterable[RawMention]) -> list[RawMention]:
    """Non-overlapping mentions, longest first; a title wins a tie with any other kind.
    Mentions without offsets (an LLM entity not found in the text) are all kept."""
    ordered = sorted(mentions, key=lambda m: (-(m.end - m.start), m.kind != "title", m.start,
                                              m.surface))
    taken: list[tuple[int, int]] = []
    out = []
    for m in ordered:
        if m.end <= m.start:
            out.append(m)
            continue
        if any(m.start < b and a < m.end for a, b in taken):
            continue
        taken.append((m.start, m.end))
        out.append(m)
    return sorted(out, key=lambda m: (m.start, m.end, m.surface))


def _lexicon_key(entry: str) -> str | None:
    """A lexicon entry's key (its folded tokens), None when it is left out: only stop
    words, or a single token of fewer than 2 characters."""
    toks = tuple(t for t, _a, _b in tokens(entry))
    if not toks or all(t in STOPWORDS for t in toks) or (len(toks) == 1 and len(toks[0]) < 2):
        return None
    return " ".join(toks)


def title_key(text: str) -> str:
    """The lexicon key of a lexicon entry or a hit's surface (its folded tokens)."""
    return " ".join(t for t, _a, _b in tokens(text))
