"""The house's text toolkit: sentences with their spans in a source document, token cuts,
and lone UTF-16 surrogates (legal in JSON escapes, not in Unicode) found and replaced.

One splitter and one cut for every part that quotes or trims text: RAPTOR summaries, graph
evidence and community reports, the evidence snippets of hits, federation's graph answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class Span:
    """Character offsets ``[start, end)`` of a text in its source document."""

    doc_id: str
    start: int
    end: int


@dataclass(frozen=True)
class Sentence:
    """One sentence and where it comes from (``None`` for generated text)."""

    text: str
    span: Span | None


# A boundary: sentence-final punctuation (and closing quotes/brackets) then whitespace
# before something that can start a sentence, or a blank line.
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])|\n\s*\n")
_ABBREVIATION = re.compile(
    r"(?:\b(?:e\.g|i\.e|et al|etc|vs|cf|Fig|Figs|Eq|Eqs|Ref|Refs|No|approx|ca|Dr|Mr|Mrs|Ms|Prof|"
    r"St|Jr|Sr|Inc|Ltd|Co|resp|incl|min|max|vol|pp)\.|\b[A-Z]\.)$")


def split_sentences(text: str, doc_id: str | None, offset: int) -> tuple[Sentence, ...]:
    """Sentences of ``text`` with spans ``offset + i`` into document ``doc_id`` (none if ``None``).

    A rule-based splitter: ends at ``.``, ``!`` or ``?`` before a capital or a
    digit, and at blank lines; common abbreviations and initials do not end a
    sentence. Sentence texts are stripped, so ``document[span.start:span.end]``
    equals the sentence text.
    """
    cuts = [0]
    for m in _BOUNDARY.finditer(text):
        if m.group().startswith("\n") or not _ABBREVIATION.search(text[cuts[-1]:m.start()]):
            cuts.append(m.end())
    cuts.append(len(text))
    out = []
    for a, b in zip(cuts, cuts[1:]):
        segment = text[a:b]
        stripped = segment.strip()
        if not stripped:
            continue
        start = a + (len(segment) - len(segment.lstrip()))
        end = start + len(stripped)
        span = Span(doc_id, offset + start, offset + end) if doc_id is not None else None
        out.append(Sentence(stripped, span))
    return tuple(out)


def cut_to_tokens(text: str, budget: int, count_tokens: CountTokens) -> str:
    """The longest prefix of ``text`` within ``budget`` tokens, cut at a word boundary if one exists."""
    if count_tokens(text) <= budget:
        return text
    lo, hi = 0, len(text)  # binary search on the character length
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    prefix = text[:lo]
    space = prefix.rfind(" ")
    return (prefix[:space] if space > 0 else prefix).rstrip()


def join(sentences: tuple[Sentence, ...] | list[Sentence]) -> str:
    """The text of consecutive sentences (one space between them)."""
    return " ".join(s.text for s in sentences)


def is_unicode(text: str) -> bool:
    """False when ``text`` holds a lone UTF-16 surrogate (legal in JSON escapes, not Unicode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def clean_text(text: str) -> str:
    """``text`` with lone UTF-16 surrogates (legal in JSON escapes, not in Unicode) as U+FFFD."""
    if is_unicode(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
