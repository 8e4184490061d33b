"""The aggregation's per-entity and per-pair rules, read by :mod:`.live`: an entity's display
name and kind, the words joining two mentions (an offline relation) and an entity's
description (its most informative mention sentences in a token budget). Deterministic:
ties by key or by sentence order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Protocol

from ..models.tokenizer import count_tokens
from ..text import cut_to_tokens
from .aggregate_mentions import HAS_LETTER, Sentence
from .build_state import GraphConfig, rowid_order
from .extract import ChunkExtraction, sentence_spans
from .extract_rules import RULE_RUN
from .model import ChunkText, Entity, Span

_LIST_PUNCT = re.compile(r"[\s,;/&+\-–—]*")
_POSSESSIVE_GAP = re.compile(r"['’]s?\s+")


class ChunkSource(Protocol):
    """What :func:`describe` reads of the chunks: texts and extractions by key."""

    @property
    def chunks(self) -> Mapping[str, ChunkText]: ...

    @property
    def extractions(self) -> Mapping[str, ChunkExtraction]: ...


def display_name(key: str, surfaces: Counter[str], titles: Mapping[str, str]) -> str:
    """A title entity's title entry, else its most frequent surface (ties by text)."""
    if key in titles:
        return titles[key]
    return min(surfaces.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def entity_kind(kinds: Counter[str], is_title: bool) -> str:
    """``title`` for a title entity, else its most frequent mention kind (ties by name)."""
    if is_title:
        return "title"
    if not kinds:
        return "name"
    return min(kinds.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def joining_words(text: str, s: Sentence, pair: tuple[str, str]) -> str | None:
    """The words joining the two mentions in their sentence (the offline 'relation');
    None when they are markup: a rule line, or symbols and digits without a letter
    ("==== *", "| ... |", "(3.19.0."). List punctuation alone joins as "and"."""
    pos = dict(zip(s.keys, s.positions))
    (_a0, a1), (b0, _b1) = sorted((pos[pair[0]], pos[pair[1]]))
    raw = text[a1:b0]
    if _POSSESSIVE_GAP.fullmatch(raw):      # "Valgrind's Memcheck"
        return "'s"
    words = raw.strip(" ,;:()\"'").split()
    if not words:
        return "and"
    if RULE_RUN.search(raw):
        return None
    if not HAS_LETTER.search(raw):
        return "and" if _LIST_PUNCT.fullmatch(raw) else None
    if len(words) > 12:
        return " ".join(words[:6] + ["…"] + words[-5:])
    return " ".join(words)


def cap_tokens(text: str, budget: int) -> str:
    """``text`` cut to ``budget`` tokens."""
    return cut_to_tokens(text, budget, count_tokens)


def describe(e: Entity, where: list[int], sents: list[Sentence], cache: ChunkSource,
              config: GraphConfig, known: Mapping[str, int]) -> tuple[str, tuple[Span, ...]]:
    """Its most informative mention sentences, in a token cap: the lead of the passage
    it is about first, then sentences that join the most other entities, earlier first."""
    about = set(e.about)
    cands: list[tuple[tuple[float, ...], int, int, str]] = []   # (rank, start, end, chunk)
    for si in where:
        s = sents[si]
        text = cache.chunks[s.chunk].text[s.start:s.end]
        if len(text.split()) < 4:
            continue
        cands.append(((-(s.chunk in about), -min(len(s.keys), 6), s.index,
                       *rowid_order(s.chunk)[:1]), s.start, s.end, s.chunk))
    if about:  # the lead of the passage it is about comes first, even if it names it otherwise
        first = min(about, key=rowid_order)
        c = cache.chunks[first]
        for idx, (a, b) in enumerate(cache.extractions[first].sentences or sentence_spans(c.text)):
            if len(c.text[a:b].split()) >= 4:
                cands.append(((-2, 0, idx, 0), a, b, first))
                break
    cands.sort(key=lambda t: (t[0], t[3]))
    parts: list[str] = []
    spans: list[Span] = []
    used = 0
    seen: set[str] = set()
    for _rank, a, b, ck in cands[:12]:
        c = cache.chunks[ck]
        text = " ".join(c.text[a:b].split())
        if text in seen:
            continue
        n = known.get(text)
        if n is None:
            n = count_tokens(text)
        if used + n > config.description_tokens:
            if parts:
                break
            text = cap_tokens(text, config.description_tokens)
            b = a + len(text)
            n = config.description_tokens
        seen.add(text)
        parts.append(text)
        spans.append(Span(c.doc_id, c.start + a, c.start + b))
        used += n
        if len(parts) >= 3:
            break
    return " ".join(parts), tuple(spans)
