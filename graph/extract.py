"""Entity mentions from chunk text: a title lexicon plus pluggable extractors.

Two parts with different life cycles, so ingest stays incremental:

* :class:`Lexicon` — the document titles of the corpus as an entity lexicon. It
  finds *every* occurrence of every title (overlaps included) with a token trie;
  the builder picks longest-first among them. When new documents add titles, old
  chunks are re-scanned with a lexicon of only the new titles (``Lexicon(new)``),
  and hits of removed titles are dropped: the union equals a full scan.
* An extractor (``identity`` + ``extract(chunks) -> list[ChunkExtraction]``) —
  per chunk, independent of the rest of the corpus, so its output is cached by
  chunk. :class:`BuiltinExtractor` (rules, no dependencies), :class:`SpacyExtractor`
  (an installed spaCy pipeline, optional) and :class:`LLMExtractor` (GraphRAG-style
  entities and typed relations through :class:`~rcp_agentic.models.llm.ChatLLM`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from ..models.llm import as_chat, json_object
from ..models.llm_guard import DATA_RULE, data_block
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


# --- the built-in rule extractor ---------------------------------------------------------

_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
           "December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec")
_DATE = re.compile(
    rf"\b(?:(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{3,4}}"      # April 1, 1954
    rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:{_MONTHS})\.?,?\s+\d{{3,4}}"          # 1 April 1954
    rf"|(?:{_MONTHS})\.?\s+\d{{4}}"                                          # April 1954
    r"|(?<![\d.,])(?:1[0-9]|20)\d{2}(?:s\b)?(?!\d|,\d|\.\d))")              # 1954, 1970s
# A bare year is a date only in a date-like context: after one of these words, in
# parentheses, or as one end of a range; never before a lowercase noun ("2000 tokens").
_YEAR_BEFORE = frozenset({"in", "since", "until", "till", "during", "circa", "c", "ca", "year",
                          "years", "early", "late", "mid", "born", "died", "spring", "summer",
                          "autumn", "fall", "winter", "founded", "established"})
# Words that also come before counts ("to 2000", "from 1024"), like parentheses ("port
# (1500)") and ranges: a date context only for 1600-2099.
_YEAR_BEFORE_WEAK = frozenset({"from", "by", "before", "after", "between", "and", "to",
                               "around"})
_IDENTIFIER = re.compile(r"[\w\-/.]*$")
_IDENTIFIER_TAIL = re.compile(r"[\w\-/.]*")
_YEAR_AFTER_OK = frozenset({"onwards", "onward", "ad", "bc", "bce", "ce"})
_WORD_BEFORE = re.compile(r"([^\W\d_]+)\.?[\s\u00a0]*$")
_WORD_AFTER = re.compile(r"[\s\u00a0]*([^\W\d_]+)")
_RANGE_AFTER = re.compile(r"\s*[–—\-/]\s*(?:1[0-9]|20)?\d{2}\b")
_RANGE_BEFORE = re.compile(r"(?:1[0-9]|20)\d{2}\s*[–—\-/]\s*$")
_QUOTED = re.compile(r"[\"“]([^\"“”\n]*)[\"”]")
_ACRONYM = re.compile(r"\b(?:[A-Z]\.){2,}|\b[A-Z][A-Z0-9&]*[A-Z][A-Z0-9]*s?\b")
_LETTER = re.compile(r"[^\W\d_]")
_TWO_LETTERS = re.compile(r"[^\W\d_]{2}")
# A quoted span holding these is code or a command, not a name: "A > B", "log.decorate".
_CODE = re.compile(r"[<>{}\[\]|=;\\$_~`^]|&&|[a-z0-9]\.[a-z]")
# Abbreviations that stay inside a name with their full stop ("St. Louis", "John Smith Jr.").
_ABBREVIATIONS = (r"(?:St|Ste|Mt|Ft|Jr|Sr|Bros|Co|Inc|Ltd|Corp|No|Gen|Col|Lt|Sgt|Capt|Maj|Gov|Sen|Rev|"
                  r"Dr|Mr|Mrs|Ms|Prof)\.")
# A capitalised word: a dotted initialism ("D.C."), an abbreviation, an initial capital (or
# a digit-led model name like "3M") then letters, apostrophes or hyphens; initials ("J.")
# count as words inside a name. Words are joined by spaces, tabs or no-break spaces.
_CAP = (rf"(?:(?:[A-Z]\.){{2,}}|(?=[A-Z][a-z]{{0,3}}\.){_ABBREVIATIONS}|[A-Z][\w'’\-]*[\w]"
        r"|[A-Z]\.|[A-Z])")
_CONNECT = r"(?:of|the|de|del|della|der|den|di|da|du|des|la|le|van|von|y|for|on|in|at|al|el|bin|ibn)"
_GAP = r"[ \t\u00a0]+"
_NAME = re.compile(rf"\b{_CAP}(?:(?:{_GAP}{_CONNECT})*{_GAP}{_CAP})*", re.UNICODE)
# "Washington, D.C." is the one name whose comma belongs to it ("Nashville, U.S." is two).
_COMMA_INITIALS = re.compile(r",[ \u00a0]?D\.C\.")
# A name ending in an initialism or an abbreviation keeps its full stop ("D.C.", "Jr.").
_KEEP_FULL_STOP = re.compile(rf"(?:(?:[A-Z]\.){{2,}}|\b{_ABBREVIATIONS})$")
_SPLIT_AT = {"of", "for", "in", "at", "on"}
_CONNECT_WORDS = frozenset(_CONNECT[3:-1].split("|"))
_SPLIT_INSIDE = re.compile(r"\s(?:of|for|in|at|on)\s")
_MONTH_INSIDE = re.compile(rf"\s(?:{_MONTHS})\b")
_POSSESSIVE_END = re.compile(r"['’]s?$")
_WORDS = re.compile(r"\S+")
# Rule lines and table borders ("=====", "~~~~", "-----", "|---|") and line breaks before a
# list item end a sentence: headings and bullets of text that is not prose stay apart.
RULE_RUN = re.compile(r"([=~\-*_#+^.:|<>/\\])\1{3,}")
_LIST_BREAK = re.compile(r"\n[ \t\u00a0]*(?:[*\-•+|]|\d{1,3}[.)])[ \t\u00a0]")


def _split_names(surface: str, start: int) -> list[tuple[str, int]]:
    """"Tony Franklin of The Firm" is two names; "Bank of America" is one: a span splits
    at a relational connector when two or more words precede it, and after a possessive
    ("Valgrind's Memcheck" is "Valgrind" and "Memcheck")."""
    words = [(m.group(), m.start()) for m in _WORDS.finditer(surface)]
    out: list[tuple[str, int]] = []
    first = 0
    for i, (w, _pos) in enumerate(words):
        if w in _SPLIT_AT and i - first >= 2 and i + 1 < len(words):
            a, b = words[first][1], words[i - 1][1] + len(words[i - 1][0])
            out.append((surface[a:b], start + a))
            first = i + 1
        elif i + 1 < len(words) and w[-1] in "s'’" and len(w) > 2 and _POSSESSIVE_END.search(w):
            a, b = words[first][1], words[i][1] + len(w)
            out.append((surface[a:b], start + a))
            first = i + 1
    a = words[first][1] if first < len(words) else len(surface)
    rest = surface[a:]
    lead = _LEADING.match(rest)
    if lead:
        rest, a = rest[lead.end():], a + lead.end()
    if rest:
        out.append((rest, start + a))
    if "'" not in surface and "’" not in surface:
        return out
    # A possessive is not part of the name: "Valgrind's" names Valgrind.
    return [(_POSSESSIVE_END.sub("", p) if len(p) > 2 else p, pos) for p, pos in out]


def _cut_at_month(surface: str) -> str:
    """"France on August" is France: a month after a connector, or one followed by a day,
    ends the name ("Theresa May" keeps hers)."""
    if not _MONTH_INSIDE.search(surface):
        return surface
    words = list(_WORDS.finditer(surface))
    for i in range(1, len(words)):
        if fold(words[i].group().rstrip(".,")) not in _MONTH_WORDS:
            continue
        j = i
        while j > 1 and words[j - 1].group() in _CONNECT_WORDS:
            j -= 1
        if j < i or i == len(words) - 1 and words[i - 1].group() in _CONNECT_WORDS:
            return surface[:words[j - 1].end()]
    return surface


def _tail_part(surface: str, start: int) -> tuple[str, int] | None:
    """The name after a name's last relational connector: "Austria" in "Margraviate of
    Austria", "Falkland Islands" in "Representative of the Falkland Islands"."""
    if not _SPLIT_INSIDE.search(surface):
        return None
    words = list(_WORDS.finditer(surface))
    last = max((i for i, w in enumerate(words[:-1]) if i >= 1 and w.group() in _SPLIT_AT),
               default=None)
    if last is None:
        return None
    i = last + 1
    while i < len(words) - 1 and words[i].group() in _CONNECT_WORDS:
        i += 1
    tail = surface[words[i].start():]
    if not tail[:1].isupper() or fold(tail) in STOPWORDS or fold(tail) in _MONTH_WORDS:
        return None
    return tail, start + words[i].start()


def _is_year(text: str, m: re.Match[str]) -> bool:
    """Whether a bare 4-digit number (or a decade) written at ``m`` is a year: a decade
    always; never inside an identifier ("CVE-2019-1348"); from 1600 on, after an article
    ("a 1979 single"); never before a lowercase word that is not a function word ("2000
    tokens" is a count); else after a date word ("in", "since", "born"…), or, from 1600
    on, after a word that also precedes counts ("from", "to"…), in parentheses ("(1954)",
    not "malloc(1000)") or in a range ("1939–1945")."""
    if m.group().endswith("s"):
        return True
    left = _IDENTIFIER.search(text, max(0, m.start() - 24), m.start())
    right = _IDENTIFIER_TAIL.match(text, m.end(), m.end() + 24)
    if _LETTER.search((left.group() if left else "") + (right.group() if right else "")):
        return False                   # part of an identifier: "CVE-2019-1348", "v2000"
    head = text[max(0, m.start() - 24):m.start()]
    before = _WORD_BEFORE.search(head)
    word = fold(before.group(1)) if before else ""
    if word in ("a", "an", "the") and int(m.group()[:4]) >= 1600:
        return True                    # "a 1979 single", "the 1998 film"
    after = _WORD_AFTER.match(text, m.end())
    if after and after.group(1).islower():
        w = after.group(1)
        if w not in STOPWORDS and w not in _YEAR_AFTER_OK and fold(w) not in _MONTH_WORDS:
            return False
    if word in _YEAR_BEFORE:
        return True
    if int(m.group()[:4]) < 1600:
        return False
    if word in _YEAR_BEFORE_WEAK:
        return True
    opened = head.rstrip()
    if opened.endswith("(") and not opened[-2:-1].isalnum() \
            and text[m.end():m.end() + 1] in (")", "–", "—", "-"):
        return True
    return bool(_RANGE_AFTER.match(text, m.end()) or _RANGE_BEFORE.search(head))


def structural_spans(text: str, spans: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """``spans`` cut at rule lines (left out) and at line breaks before a list item; pieces
    with no letter or digit are dropped. Prose without either is returned as it is."""
    cuts: list[tuple[int, int]] = [(m.start(), m.end()) for m in RULE_RUN.finditer(text)]
    cuts += [(m.start(), m.start() + 1) for m in _LIST_BREAK.finditer(text)]
    if not cuts:
        return tuple(spans)
    cuts.sort()
    out: list[tuple[int, int]] = []
    for a, b in spans:
        pos = a
        for c0, c1 in cuts:
            if c1 <= pos or c0 >= b:
                continue
            out.append((pos, c0))
            pos = max(pos, c1)
        out.append((pos, b))
    kept = []
    for a, b in out:
        piece = text[a:b]
        stripped = piece.strip()
        if not stripped or not any(ch.isalnum() for ch in stripped):
            continue
        a += len(piece) - len(piece.lstrip())
        kept.append((a, a + len(stripped)))
    return tuple(kept) or tuple(spans)


_LEADING = re.compile(r"^(?:(?:The|A|An|In|On|At|Of|For|And|But|Or|As|By|From|To|With|"
                      r"After|Before|During|Since|Under|When|While|His|Her|Its|Their|This|"
                      r"That|These|Those|He|She|It|They|We|I|There|Here|Some|Many|Most|Both|"
                      r"Each|Every|All|No|Not|Later|Also|Then|According|Following|"
                      r"Dr\.?|Mr\.?|Mrs\.?|Ms\.?|Prof\.?)[ \t\u00a0]+)+")
_TRAILING_CONNECT = re.compile(rf"(?:{_GAP}{_CONNECT})+$")
_WEEKDAYS = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
_MONTH_WORDS = {fold(m) for m in _MONTHS.split("|")}


class BuiltinExtractor:
    """Rules with no dependencies: capitalised multi-word spans, quoted spans, acronyms, dates.

    Cleanliness rules: a capitalised span loses leading function words ("The", "In",
    "After"…) and honorifics ("Dr."), trailing connectors, a possessive "'s" (and splits
    after one), and a month after a connector ("France on August"); single stop words,
    weekday and month names are never names; a lone capitalised word at the start of a
    sentence is kind ``initial`` — mostly an ordinary word, so the builder keeps it only
    when it is part of a longer name of the same chunk ("Porcaro was…" after "Jeff
    Porcaro") or a title. Names hold across full stops of initials and abbreviations ("G.
    Stanley Hall", "St. Louis", "Washington, D.C."); the name after a name's last
    connector is also given, kind ``part`` ("Austria" in "Margraviate of Austria"), for
    the builder to nest. A name, quoted span or acronym has a letter. Dates keep their
    written form (kind ``date``); a bare year is a date only in a date-like context
    (:func:`_is_year`), so a count like "2000 tokens" is no entity. Sentences are cut at
    rule lines and before list items (:func:`structural_spans`).
    """

    identity = "builtin/2"

    def __init__(self, *, dates: bool = True, quoted: bool = True) -> None:
        self.dates = dates
        self.quoted = quoted
        self.identity = f"builtin/2;dates={int(dates)};quoted={int(quoted)}"

    def extract(self, chunks: Sequence[ChunkText]) -> list[ChunkExtraction]:
        """One :class:`ChunkExtraction` per chunk, in order."""
        return [self.extract_text(c.text) for c in chunks]

    def extract_text(self, text: str) -> ChunkExtraction:
        """Sentences and rule mentions of one text."""
        spans = structural_spans(text, sentence_spans(text))
        starts = {a for a, _b in spans}
        out: list[RawMention] = []
        taken: list[tuple[int, int]] = []

        def add(surface: str, start: int, kind: str, take: bool = True) -> None:
            end = start + len(surface)
            out.append(RawMention(surface, start, end, sentence_of(spans, start), kind))
            if take:
                taken.append((start, end))

        if self.dates:
            for m in _DATE.finditer(text):
                if m.group()[:1].isdigit() and len(m.group().rstrip("s")) == 4 \
                        and not _is_year(text, m):
                    continue
                add(m.group(), m.start(), "date")
        if self.quoted:
            for m in _QUOTED.finditer(text):
                inner = m.group(1).strip()
                words = inner.split()
                if 1 <= len(words) <= 8 and (inner[0].isupper() or inner[0].isdigit()) \
                        and _TWO_LETTERS.search(inner) and not _CODE.search(inner):
                    add(inner, m.start(1) + m.group(1).index(inner), "quoted")
        for m in _NAME.finditer(text):
            self._name(text, m, starts, taken, add)
        return ChunkExtraction(spans, tuple(sorted(out, key=lambda x: (x.start, -x.end))))

    @staticmethod
    def _name(text: str, m: re.Match[str], starts: set[int], taken: list[tuple[int, int]],
              add: Any) -> None:
        """The names of one capitalised span (see the class doc for the rules)."""
        surface, start = m.group(), m.start()
        tail = _COMMA_INITIALS.match(text, m.end())
        if tail:
            surface = text[start:tail.end()]
        lead = _LEADING.match(surface)
        if lead:
            surface, start = surface[lead.end():], start + lead.end()
        while " " in surface:  # "Are Sutera", "Did Hector Berlioz": a capitalised stop word
            first = surface.split(None, 1)[0]
            if fold(first) not in STOPWORDS:
                break
            cut = len(first) + 1
            surface, start = surface[cut:].lstrip(), start + cut
        surface = _cut_at_month(surface)
        trail = _TRAILING_CONNECT.search(surface)
        if trail:
            surface = surface[:trail.start()]
        if surface.endswith(".") and not _KEEP_FULL_STOP.search(surface):
            surface = surface.rstrip(".")  # "J." at the end of a span is a full stop
        if not surface:
            return
        for part, pos in _split_names(surface, start):
            words = part.split()
            if not words or not _LETTER.search(part):
                continue
            folded = [fold(w) for w in words]
            initial = False
            if len(words) == 1:
                w = folded[0]
                if w in STOPWORDS or w in _WEEKDAYS or w in _MONTH_WORDS or len(w) < 2:
                    continue
                initial = pos in starts or text[max(0, pos - 1):pos] == "\n"
            elif all(w in STOPWORDS or w in _MONTH_WORDS for w in folded):
                continue
            end = pos + len(part)
            if any(a <= pos and end <= b for a, b in taken):
                continue
            kind = ("acronym" if len(words) == 1 and _ACRONYM.fullmatch(part) else
                    "initial" if initial else "name")
            add(part, pos, kind)
            inner = _tail_part(part, pos)
            if inner is not None:
                add(*inner, "part", take=False)


# --- spaCy ------------------------------------------------------------------------------

_SPACY_KINDS = {"PERSON": "person", "ORG": "org", "GPE": "place", "LOC": "place",
                "FAC": "place", "NORP": "group", "EVENT": "event", "WORK_OF_ART": "work",
                "PRODUCT": "product", "LAW": "law", "LANGUAGE": "language", "DATE": "date"}


class SpacyExtractor:
    """Named entities from an installed spaCy pipeline (``spacy.load(model_name)``), or a
    pipeline object passed as ``nlp``. Never downloads: a missing pipeline raises
    :class:`~rcp_agentic.errors.InvalidParams` naming what to install."""

    def __init__(self, model_name: str = "en_core_web_sm", *, nlp: Any = None,
                 batch_size: int = 64) -> None:
        from ..errors import InvalidParams

        if nlp is None:
            try:
                import spacy
            except ImportError as exc:
                raise InvalidParams("the spaCy extractor needs `pip install spacy` and an "
                                    "English pipeline", field="extractor") from exc
            try:
                # Only the entity recogniser (and the tok2vec it listens to) is needed.
                nlp = spacy.load(model_name, exclude=["lemmatizer", "parser", "tagger",
                                                      "attribute_ruler", "morphologizer",
                                                      "senter"])
            except OSError as exc:
                raise InvalidParams(f"spaCy pipeline {model_name!r} is not installed",
                                    field="extractor") from exc
        self.nlp = nlp
        self.batch_size = batch_size
        meta = getattr(nlp, "meta", {}) or {}
        self.identity = f"spacy/1:{meta.get('name', model_name)}:{meta.get('version', '')}"

    def extract(self, chunks: Sequence[ChunkText]) -> list[ChunkExtraction]:
        """Entities of every chunk; sentences from the rule splitter (same as the builtin)."""
        out = []
        texts = [c.text for c in chunks]
        for text, doc in zip(texts, self.nlp.pipe(texts, batch_size=self.batch_size)):
            spans = sentence_spans(text)
            mentions = []
            for ent in doc.ents:
                kind = _SPACY_KINDS.get(ent.label_)
                if kind is None:
                    continue
                surface = ent.text.strip()
                lead = _LEADING.match(surface)
                start = ent.start_char + (lead.end() if lead else 0)
                surface = surface[lead.end():] if lead else surface
                if not surface or fold(surface) in STOPWORDS:
                    continue
                mentions.append(RawMention(surface, start, start + len(surface),
                                           sentence_of(spans, start), kind))
            out.append(ChunkExtraction(spans, tuple(mentions)))
        return out


# --- LLM --------------------------------------------------------------------------------

LLM_SYSTEM = ("You extract a knowledge graph from a passage. Use only facts stated in the "
              "passage. " + DATA_RULE + " Reply with JSON only.")
LLM_PROMPT = (
    "Extract the named entities of the passage and the relations between them.\n"
    'Reply with one JSON object: {{"entities": [{{"name": str, "type": str, '
    '"description": str}}], "relations": [{{"subject": str, "relation": str, "object": str, '
    '"description": str, "strength": number 1-10}}]}}. Types: person, organization, place, '
    "event, work, date, concept. Names exactly as written in the passage.\n\n{data}")


@dataclass
class ParsedReply:
    """Entities (name, type, description) and relations read from one LLM reply."""

    entities: list[tuple[str, str, str]] = field(default_factory=list)
    relations: list[RawRelation] = field(default_factory=list)


def _json_candidates(reply: str) -> Iterable[Any]:
    data = json_object(reply)
    if data is not None:
        yield data
    # GraphRAG's tuple format: ("entity"<|>NAME<|>TYPE<|>DESC) ("relationship"<|>S<|>O<|>DESC<|>W)
    tuples = re.findall(r"\(\s*\"?(entity|relationship)\"?\s*(?:<\|>|\|)(.*?)\)\s*(?:##|\n|$)",
                        reply, re.S | re.I)
    if tuples:
        ents, rels = [], []
        for tag, body in tuples:
            parts = [p.strip().strip('"') for p in re.split(r"<\|>|\|", body)]
            if tag.lower() == "entity" and len(parts) >= 2:
                ents.append({"name": parts[0], "type": parts[1],
                             "description": parts[2] if len(parts) > 2 else ""})
            elif tag.lower() == "relationship" and len(parts) >= 2:
                rels.append({"subject": parts[0], "object": parts[1], "relation": "related to",
                             "description": parts[2] if len(parts) > 2 else "",
                             "strength": parts[3] if len(parts) > 3 else 1})
        yield {"entities": ents, "relations": rels}


def parse_llm_reply(reply: str) -> ParsedReply:
    """Entities and relations from an LLM reply; malformed parts are skipped, never raised."""
    out = ParsedReply()
    for data in _json_candidates(reply):
        if not isinstance(data, dict):
            continue
        for e in data.get("entities") or []:
            if isinstance(e, str):
                e = {"name": e}
            if not isinstance(e, dict):
                continue
            name = " ".join(str(e.get("name") or "").split())
            if name:
                out.entities.append((name, str(e.get("type") or "entity").strip().lower()
                                     or "entity", " ".join(str(e.get("description") or "").split())))
        for r in data.get("relations") or []:
            if not isinstance(r, dict):
                continue
            s = " ".join(str(r.get("subject") or r.get("source") or "").split())
            o = " ".join(str(r.get("object") or r.get("target") or "").split())
            if not s or not o or s == o:
                continue
            try:
                strength = float(r.get("strength", r.get("weight", 1)) or 1)
            except (TypeError, ValueError):
                strength = 1.0
            out.relations.append(RawRelation(
                s, o, " ".join(str(r.get("relation") or r.get("type") or "related to").split()),
                " ".join(str(r.get("description") or "").split()),
                max(0.1, min(strength, 10.0)) / 10.0))
        if out.entities or out.relations:
            break
    return out


class LLMExtractor:
    """GraphRAG-style extraction with a LangChain chat model or LlamaIndex LLM.

    One LLM call per chunk (concurrent through ``ChatLLM.ask_many``). Entity names are
    located in the chunk text (case-insensitive); a name the passage does not contain
    is kept as a mention at the chunk's first sentence only when a relation uses it.
    Unparseable replies yield the builtin rules' mentions, so every chunk has some.
    """

    def __init__(self, llm: Any) -> None:
        self.chat = as_chat(llm)
        self.identity = f"llm/2:{self.chat.identity}"
        self.fallback = BuiltinExtractor()

    def extract(self, chunks: Sequence[ChunkText]) -> list[ChunkExtraction]:
        """One extraction per chunk, in order."""
        replies = self.chat.ask_many(LLM_SYSTEM, [LLM_PROMPT.format(data=data_block(c.text))
                                                  for c in chunks], stage="graph")
        return [self._one(c.text, reply) for c, reply in zip(chunks, replies)]

    def _one(self, text: str, reply: str) -> ChunkExtraction:
        parsed = parse_llm_reply(reply)
        if not parsed.entities and not parsed.relations:
            if reply:  # an empty reply was counted by the door already
                self.chat.fallback("graph", "unparsed")
            return self.fallback.extract_text(text)
        spans = sentence_spans(text)
        folded = text.lower()
        mentions: list[RawMention] = []
        kinds = {name.lower(): kind for name, kind, _d in parsed.entities}
        names = [n for n, _k, _d in parsed.entities]
        names += [x for r in parsed.relations for x in (r.subject, r.object)]
        seen: set[str] = set()
        for name in names:
            low = name.lower()
            if low in seen:
                continue
            seen.add(low)
            kind = kinds.get(low, "entity")
            found = [m.start() for m in re.finditer(re.escape(low), folded)]
            for pos in found:
                mentions.append(RawMention(text[pos:pos + len(name)], pos, pos + len(name),
                                           sentence_of(spans, pos), kind))
            if not found:
                mentions.append(RawMention(name, 0, 0, 0, kind))
        descriptions = tuple((n, d) for n, _k, d in parsed.entities if d)
        return ChunkExtraction(spans, tuple(sorted(mentions, key=lambda x: (x.start, -x.end))),
                               tuple(parsed.relations), descriptions)
