"""The built-in rule extractor: capitalised names, quoted spans, acronyms and dates.

:class:`BuiltinExtractor` needs no dependency; its rules (the regular expressions and the
name clean-up below) are documented on the class. :func:`structural_spans` cuts sentences
at rule lines and before list items.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .extract import STOPWORDS, ChunkExtraction, RawMention, fold, sentence_of, sentence_spans
from .model import ChunkText

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
    lead = LEADING_WORDS.match(rest)
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


LEADING_WORDS = re.compile(r"^(?:(?:The|A|An|In|On|At|Of|For|And|But|Or|As|By|From|To|With|"
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
        lead = LEADING_WORDS.match(surface)
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
