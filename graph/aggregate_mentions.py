"""The rules that key one chunk's mentions to entities, given what the corpus says.

A chunk's mentions are its title-lexicon hits plus its extractor's, longest first (a title
wins a tie), then read against corpus-wide facts (:mod:`.live_resolve` keeps them): a name
opening a sentence loses its common first words (:func:`truecase`), one-word names are
re-keyed to the longer name of their chunk and lone sentence-initial words dropped
(:func:`name_parts`), nested names kept (:func:`nested_parts`). :class:`Sentence` is one
sentence with the entities it names.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from .build_state import NO_SYNONYM_KINDS
from .extract import STOPWORDS, ChunkExtraction, RawMention, fold
from .resolve import entity_key


@dataclass
class Sentence:
    """One sentence of the tally: its chunk and offsets, the entities it mentions."""

    chunk: str
    index: int
    start: int
    end: int
    keys: list[str]                     # distinct entity keys in reading order
    positions: list[tuple[int, int]]    # first mention offsets of each key


def name_parts(keyed: list[tuple[str, RawMention]], own: str,
                titles: Mapping[str, object], alone: Mapping[str, int] | None = None,
                named: AbstractSet[str] = frozenset(),
                own_entries: AbstractSet[str] = frozenset(),
                common: AbstractSet[str] = frozenset()) -> list[tuple[str, RawMention]]:
    """Re-key a one-word name to the longer name of the chunk it starts or ends: the only
    one, or the chunk's own title among several — unless the word is a title or stands
    alone (no longer name of its chunk holds it) in :data:`ALONE_CHUNKS` chunks or more:
    then it names a thing of its own ("Valgrind" in the chunk headed "Installing
    Valgrind", "Arkansas" in the passage titled "..., White County, Arkansas"). A name
    that is one of ``own_entries`` (the keys of the chunk's own title) is that title, by
    its longest key ("Toto" in "Toto (band)" is "toto band", never "Toto IV"). A
    sentence-initial lone word (kind ``initial``) that is neither such a part nor a title
    nor a name written mid-sentence in :data:`ALONE_CHUNKS` chunks (``named``) and not a
    ``common`` word is dropped."""
    alone = alone or {}
    full = max(own_entries, key=lambda e: (len(e), e)) if own_entries else own
    long_keys = {k for k, m in keyed if " " in k and m.kind not in NO_SYNONYM_KINDS}
    if " " in own:
        long_keys.add(own)
    parts: dict[str, set[str]] = defaultdict(set)
    for k in long_keys:
        words = k.split()
        parts[words[0]].add(k)
        parts[words[-1]].add(k)
    out = []
    for k, m in keyed:
        if k in own_entries:            # "Toto" in "Toto (band)" is the band, not "Toto IV"
            out.append((full, m))
            continue
        if " " not in k and m.kind in ("name", "title", "initial", "person"):
            cands = parts.get(k, set())
            own_thing = k in titles or alone.get(k, 0) >= ALONE_CHUNKS
            if cands and not own_thing and (len(cands) == 1 or own in cands):
                out.append((next(iter(cands)) if len(cands) == 1 else own, m))
                continue
        if m.kind == "initial" and k not in titles and (k not in named
                                                        or fold(m.surface) in common):
            continue
        out.append((k, m))
    return out


ALONE_CHUNKS = 2          # a one-word name standing alone in this many chunks is its own thing
NAME_KINDS = frozenset({"name", "initial", "acronym", "person", "org", "place", "entity"})
LOWER_WORD = re.compile(r"(?<![\w.])[a-z][a-z'’\-]*[a-z](?!\w)")
HAS_LETTER = re.compile(r"[^\W\d_]")


def sentence_initial(text: str, x: ChunkExtraction, m: RawMention) -> bool:
    """Whether ``m`` opens its sentence (or line), bullets and quotes aside."""
    if 0 <= m.sentence < len(x.sentences):
        a = x.sentences[m.sentence][0]
        if a <= m.start and not any(ch.isalnum() for ch in text[a:m.start]):
            return True
    line = text.rfind("\n", 0, m.start) + 1
    return not any(ch.isalnum() for ch in text[line:m.start])


def truecase(text: str, x: ChunkExtraction, m: RawMention,
              common: frozenset[str]) -> RawMention | None:
    """``m`` without its common first words (and the function words among them) when it
    opens a sentence ("BACKGROUND Despite" is no name); None for an all-capitals name of
    common words only."""
    first, *rest = m.surface.split(None, 1)
    if not rest:
        return m
    if m.surface.isupper():
        return None if all(fold(w) in common for w in m.surface.split()) else m
    if fold(first) not in common or not sentence_initial(text, x, m):
        return m
    words = list(re.finditer(r"\S+", m.surface))
    i = 1
    while i < len(words) and (fold(words[i].group()) in STOPWORDS or fold(words[i].group())
                              in common or not words[i].group()[:1].isupper()):
        i += 1
    if i >= len(words):
        return None
    cut = words[i].start()
    return RawMention(m.surface[cut:], m.start + cut, m.end, m.sentence, m.kind)


def nested_parts(x: ChunkExtraction,
            keyed: list[tuple[str, RawMention]]) -> list[tuple[str, RawMention]]:
    """The ``part`` mentions of a chunk (``x``: its extraction) strictly inside one of its chosen mentions
    ("Austria" in "Margraviate of Austria"). Other names inside a chosen one (an inner
    title, "Prague" in "Prague astronomical clock") are left out: measured, they link
    passages through hubs and cost graph recall."""
    spans = [(m.start, m.end) for _k, m in keyed if m.end > m.start]
    if not spans:
        return []
    have = {(m.start, m.end) for _k, m in keyed}
    out: list[tuple[str, RawMention]] = []
    for m in x.mentions:
        if m.kind != "part" or (m.start, m.end) in have:
            continue
        if not any(a <= m.start and m.end <= b and b - a > m.end - m.start for a, b in spans):
            continue
        k = entity_key(m.surface)
        if k and HAS_LETTER.search(k):
            have.add((m.start, m.end))
            out.append((k, m))
    return out
