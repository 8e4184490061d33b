"""The aggregation's first step: each chunk's mentions keyed to entities, with corpus-wide
evidence, gathered in a :class:`Tally`.

A chunk's mentions are its title-lexicon hits plus its extractor's, longest first (a title
wins a tie), then checked against the whole corpus (:func:`resolve_mentions`): one-word
names re-keyed to the longer name of their chunk, lowercase common words and lone
sentence-initial words dropped, nested names kept. :func:`tally_chunk` counts one chunk's
mentions, sentences and LLM results.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from ..read_first import checkpoint
from .build_state import NO_SYNONYM_KINDS, BuildStats, GraphCache
from .extract import (STOPWORDS, ChunkExtraction, RawMention, choose_mentions, fold, title_entries,
                      title_name)
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


def _name_parts(keyed: list[tuple[str, RawMention]], own: str,
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


@dataclass
class Tally:
    """What the chunks say, gathered in row order (the input of every aggregation step)."""

    # entity -> chunk -> count; entity -> surface form -> count; entity -> kind -> count
    counts: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    surfaces: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    kinds: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    sents: list[Sentence] = field(default_factory=list)
    llm_desc: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    typed: list[tuple[str, str, str, str, float, str]] = field(default_factory=list)


# --- aggregation: reading the chunks -------------------------------------------------------

def title_index(cache: GraphCache, order: list[str]
                ) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Each title entity's key -> its title text (first chunk wins), and -> the chunks about it."""
    title_keys: dict[str, str] = {}
    about: dict[str, list[str]] = defaultdict(list)
    for key in order:
        c = cache.chunks[key]
        if c.title:  # "Toto (band)": about-entity "toto" and, more specific, "toto band"
            for entry in title_entries(c.title):
                ek = entity_key(entry)
                if ek:
                    title_keys.setdefault(ek, entry)
                    about[ek].append(key)
    return title_keys, about


def tally_chunk(tally: Tally, key: str, cache: GraphCache,
                keyed: list[tuple[str, RawMention]], stats: BuildStats) -> None:
    """Add one chunk's resolved mentions, sentences, title entities and LLM results to
    ``tally``."""
    c = cache.chunks[key]
    x = cache.extractions[key]
    local = _count_mentions(tally, key, keyed, x, stats)
    if c.title:  # the document's title is an entity of its own chunks even if unwritten
        for entry in title_entries(c.title):
            ek = entity_key(entry)
            if ek:
                tally.counts[ek][key] += 0
                tally.surfaces[ek][entry] += 0
    for idx in sorted(local):
        tally.sents.append(local[idx])
    _collect_llm_results(tally, key, x)


# --- aggregation: resolving mentions (corpus-wide evidence) ---------------------------------

ALONE_CHUNKS = 2          # a one-word name standing alone in this many chunks is its own thing
NAME_KINDS = frozenset({"name", "initial", "acronym", "person", "org", "place", "entity"})
_LOWER_WORD = re.compile(r"(?<![\w.])[a-z][a-z'’\-]*[a-z](?!\w)")
HAS_LETTER = re.compile(r"[^\W\d_]")


def resolve_mentions(cache: GraphCache, order: Sequence[str], title_keys: Mapping[str, str]
                     ) -> dict[str, list[tuple[str, RawMention]]]:
    """Every chunk's mentions with their entity keys, from what the whole corpus says:

    1. per chunk, the chosen mentions (longest first, a title wins a tie; ``part``
       mentions wait for step 4);
    2. a name that opens a sentence loses its first word when the corpus writes that word
       lowercase more often than it starts a name mid-sentence ("Installing Valgrind",
       "Currently Valgrind", "Protests in Beijing"), and an all-capitals heading whose
       every word is such a word ("CORE CHANGES") is no name;
    3. one-word names are re-keyed to the chunk's longer name they are part of
       (:func:`_name_parts`), unless they stand alone elsewhere; a lone word opening a
       sentence is kept when it is a title or written as a name mid-sentence somewhere;
    4. ``part`` mentions inside a chosen one are kept too (nested): "Austria" in
       "Margraviate of Austria" (an entity of the chunk, not a relation end).

    Keys without a letter are dropped but for dates and numbers.
    """
    chosen: dict[str, list[RawMention]] = {}
    for key in order:
        checkpoint()
        x = cache.extractions[key]
        chosen[key] = choose_mentions([*(m for m in x.mentions if m.kind != "part"),
                                       *cache.title_hits.get(key, ())])
    common = _common_words(cache, order, chosen)
    keyed_of: dict[str, list[tuple[str, RawMention]]] = {}
    for key in order:
        x = cache.extractions[key]
        keyed = []
        for raw in chosen[key]:
            m = raw
            if common and raw.kind in NAME_KINDS:
                cased = _truecase(cache.chunks[key].text, x, raw, common)
                if cased is None:
                    continue
                m = cased
            k = entity_key(m.surface)
            if k and (m.kind in NO_SYNONYM_KINDS or HAS_LETTER.search(k)):
                keyed.append((k, m))
        keyed_of[key] = keyed
    alone = _standalone_counts(keyed_of)
    named_in = Counter(k for keyed in keyed_of.values()
                       for k in {k for k, m in keyed if m.kind != "initial"})
    named = {k for k, n in named_in.items() if n >= ALONE_CHUNKS}
    out: dict[str, list[tuple[str, RawMention]]] = {}
    for key in order:
        c = cache.chunks[key]
        own = entity_key(title_name(c.title)) if c.title else ""
        entries = {entity_key(e) for e in title_entries(c.title)} if c.title else set()
        keyed = _name_parts(keyed_of[key], own, title_keys, alone, named, entries, common)
        out[key] = keyed + _nested(cache, key, keyed_of[key])
    return out


def _sentence_initial(text: str, x: ChunkExtraction, m: RawMention) -> bool:
    """Whether ``m`` opens its sentence (or line), bullets and quotes aside."""
    if 0 <= m.sentence < len(x.sentences):
        a = x.sentences[m.sentence][0]
        if a <= m.start and not any(ch.isalnum() for ch in text[a:m.start]):
            return True
    line = text.rfind("\n", 0, m.start) + 1
    return not any(ch.isalnum() for ch in text[line:m.start])


def _common_words(cache: GraphCache, order: Sequence[str],
                  chosen: Mapping[str, list[RawMention]]) -> frozenset[str]:
    """Words of names that open a sentence (or of all-capitals names) that the corpus
    writes lowercase at least twice and more often than it starts a name with them
    mid-sentence: "Installing", "Currently", "Analysis" are words, "Valgrind" a name."""
    cands: set[str] = set()
    mid: Counter[str] = Counter()
    for key in order:
        text, x = cache.chunks[key].text, cache.extractions[key]
        for m in chosen[key]:
            if m.kind not in NAME_KINDS:
                continue
            words = m.surface.split()
            if (len(words) > 1 and m.surface.isupper()) or m.kind == "initial" \
                    or _sentence_initial(text, x, m):
                cands.update(fold(w) for w in words)
            else:
                mid[fold(words[0])] += 1
    if not cands:
        return frozenset()
    lower: Counter[str] = Counter()
    for key in order:
        for w in _LOWER_WORD.findall(cache.chunks[key].text):
            if w in cands:
                lower[w] += 1
    return frozenset(w for w in cands if lower[w] >= 2 and lower[w] > mid[w])


def _truecase(text: str, x: ChunkExtraction, m: RawMention,
              common: frozenset[str]) -> RawMention | None:
    """``m`` without its common first words (and the function words among them) when it
    opens a sentence ("BACKGROUND Despite" is no name); None for an all-capitals name of
    common words only."""
    first, *rest = m.surface.split(None, 1)
    if not rest:
        return m
    if m.surface.isupper():
        return None if all(fold(w) in common for w in m.surface.split()) else m
    if fold(first) not in common or not _sentence_initial(text, x, m):
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


def _standalone_counts(keyed_of: Mapping[str, list[tuple[str, RawMention]]]) -> Counter[str]:
    """Per one-word key, the chunks where no longer name of the chunk starts or ends with it."""
    alone: Counter[str] = Counter()
    for keyed in keyed_of.values():
        edges: set[str] = set()
        for k, m in keyed:
            if " " in k and m.kind not in NO_SYNONYM_KINDS:
                words = k.split()
                edges.update((words[0], words[-1]))
        alone.update({k for k, _m in keyed if " " not in k and k not in edges})
    return alone


def _nested(cache: GraphCache, key: str,
            keyed: list[tuple[str, RawMention]]) -> list[tuple[str, RawMention]]:
    """The ``part`` mentions of chunk ``key`` strictly inside one of its chosen mentions
    ("Austria" in "Margraviate of Austria"). Other names inside a chosen one (an inner
    title, "Prague" in "Prague astronomical clock") are left out: measured, they link
    passages through hubs and cost graph recall."""
    spans = [(m.start, m.end) for _k, m in keyed if m.end > m.start]
    if not spans:
        return []
    have = {(m.start, m.end) for _k, m in keyed}
    out: list[tuple[str, RawMention]] = []
    for m in cache.extractions[key].mentions:
        if m.kind != "part" or (m.start, m.end) in have:
            continue
        if not any(a <= m.start and m.end <= b and b - a > m.end - m.start for a, b in spans):
            continue
        k = entity_key(m.surface)
        if k and HAS_LETTER.search(k):
            have.add((m.start, m.end))
            out.append((k, m))
    return out


def _count_mentions(tally: Tally, key: str, keyed: list[tuple[str, RawMention]],
                    x: ChunkExtraction, stats: BuildStats) -> dict[int, Sentence]:
    """Count each mention of chunk ``key``; its sentences with the entities they name."""
    local: dict[int, Sentence] = {}
    for k, m in keyed:
        tally.counts[k][key] += 1
        tally.surfaces[k][m.surface] += 1
        tally.kinds[k]["name" if m.kind in ("initial", "part") else m.kind] += 1
        stats.mentions += 1
        # A nested part links its passage, not its sentence: as a relation end it would pair
        # with its own longer name and crowd the sentence (measured: graph recall drops).
        if m.kind == "part" or not 0 <= m.sentence < len(x.sentences):
            continue
        s = local.get(m.sentence)
        if s is None:
            s0, s1 = x.sentences[m.sentence]
            s = local[m.sentence] = Sentence(key, m.sentence, s0, s1, [], [])
        if k not in s.keys:
            s.keys.append(k)
            s.positions.append((m.start, m.end))
    return local


def _collect_llm_results(tally: Tally, key: str, x: ChunkExtraction) -> None:
    """Keep an LLM extractor's entity descriptions and typed relations of chunk ``key``."""
    for surface, desc in x.descriptions:
        k = entity_key(surface)
        if k and desc not in tally.llm_desc[k]:
            tally.llm_desc[k].append(desc)
    for r in x.relations:
        ka, kb = entity_key(r.subject), entity_key(r.object)
        if ka and kb and ka != kb:
            tally.typed.append((ka, kb, r.relation, r.description, r.weight, key))
