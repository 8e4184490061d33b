"""Build the graph from chunks: extract (cached per chunk), resolve, aggregate into GraphData.

:func:`build_graph` is the whole job; :func:`update_graph` is the incremental path (added /
removed chunks) on a :class:`GraphCache` that keeps every chunk's extraction, title-lexicon
hits and name vectors. Only the aggregation is redone in full, from cached per-chunk
results, so an update gives exactly the graph a rebuild gives (extraction and name
embedding are what is saved). The aggregation is deterministic (chunks in row order, ties
by key): mentions per chunk (title-lexicon hits plus the extractor's, checked against the
whole corpus by :func:`_resolve`), entities (:func:`~.resolve.entity_key`, mention weights,
``about`` chunks, a description), relations (pairs in one sentence weighted by normalised
PMI, the strongest kept per entity; LLM relations as typed triplets) and synonyms (name
cosine). Each rule in full: ``docs/internals.md``, "Building the graph".
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..models.tokenizer import count_tokens, count_tokens_batch
from ..read_first import checkpoint
from ..text import cut_to_tokens
from .extract import (STOPWORDS, ChunkExtraction, Extractor, Lexicon, RawMention, choose_mentions,
                      fold, sentence_spans, title_entries, title_key, title_name)
from .extract_rules import RULE_RUN
from .model import ChunkText, Entity, GraphData, Relation, Span, Synonym
from .resolve import entity_key, synonym_edges

Embed = Callable[[list[str]], np.ndarray]
NO_SYNONYM_KINDS = frozenset({"date", "number"})


@dataclass(frozen=True)
class GraphConfig:
    """Settings of the graph build (part of the graph's identity)."""

    description_tokens: int = 120       # cap of an entity's offline description
    pair_window: int = 6                # a mention pairs with the next N mentions of its sentence
    max_relations_per_entity: int = 24  # an entity keeps its strongest N co-occurrence pairs
    min_npmi: float = 0.0               # pairs at or below this normalised PMI are dropped
    synonym_threshold: float = 0.9      # name-embedding cosine for a synonym edge
    synonym_top_k: int = 5
    synonym_min_chunks: int = 2         # names in fewer chunks (titles excepted) are not embedded
    max_sentence_entities: int = 24     # list-like sentences pair only their first N entities

    @property
    def identity(self) -> str:
        return (f"graph/2;desc={self.description_tokens};win={self.pair_window};"
                f"rel={self.max_relations_per_entity};npmi={self.min_npmi};"
                f"syn={self.synonym_threshold}/{self.synonym_top_k}/{self.synonym_min_chunks};"
                f"sent={self.max_sentence_entities}")


@dataclass
class BuildStats:
    """Where the build's time went, and what it made."""

    seconds_extract: float = 0.0        # extractor + title-lexicon scans
    seconds_resolve: float = 0.0        # keys, in-chunk name parts, name embedding, synonyms
    seconds_embedding: float = 0.0      # of which: embedding entity names
    seconds_aggregate: float = 0.0      # entities, descriptions, relations
    chunks_extracted: int = 0
    chunks_rescanned: int = 0
    names_embedded: int = 0
    entities: int = 0
    relations: int = 0
    synonyms: int = 0
    mentions: int = 0


@dataclass
class GraphCache:
    """Per-chunk results kept between builds (in memory; ``ChunkExtraction.to_json`` persists).

    ``identity`` is the extractor's: a different extractor invalidates the cache.
    """

    identity: str = ""
    chunks: dict[str, ChunkText] = field(default_factory=dict)
    extractions: dict[str, ChunkExtraction] = field(default_factory=dict)
    title_hits: dict[str, tuple[RawMention, ...]] = field(default_factory=dict)
    lexicon: frozenset[str] = frozenset()           # the titles the hits were scanned for
    name_vectors: dict[str, np.ndarray] = field(default_factory=dict)
    # Token counts of the sentences descriptions are made of, kept to the current ones.
    sentence_tokens: dict[str, int] = field(default_factory=dict)
    stats: BuildStats = field(default_factory=BuildStats)


@lru_cache(maxsize=1 << 20)
def _rowid_order(key: str) -> tuple[int, str]:
    digits = key[1:] if key[:1] == "r" else ""
    return (int(digits), key) if digits.isdigit() else (1 << 62, key)


def build_graph(chunks: Sequence[ChunkText], extractor: Extractor, *, embed: Embed | None = None,
                config: GraphConfig = GraphConfig(), cache: GraphCache | None = None) -> GraphData:
    """The graph of ``chunks``. With a ``cache`` from an earlier build, only chunks that are
    new or changed are extracted (the rest are re-scanned for new titles only)."""
    cache = cache if cache is not None else GraphCache()
    current = {c.key: c for c in chunks}
    removed = [k for k, c in cache.chunks.items() if current.get(k) != c]
    added = [c for c in chunks if cache.chunks.get(c.key) != c]
    return update_graph(cache, extractor, added=added, removed=removed, embed=embed,
                        config=config)


def update_graph(cache: GraphCache, extractor: Extractor, *, added: Sequence[ChunkText] = (),
                 removed: Iterable[str] = (), embed: Embed | None = None,
                 config: GraphConfig = GraphConfig()) -> GraphData:
    """Apply added and removed chunks to ``cache`` and return the graph of what it now holds
    (equal to ``build_graph`` of the same chunks from scratch)."""
    stats = BuildStats()
    t0 = time.perf_counter()
    removed = set(removed)
    if cache.identity != extractor.identity:
        kept = {k: c for k, c in cache.chunks.items() if k not in removed}
        added = list({**kept, **{c.key: c for c in added}}.values())
        cache.chunks.clear()
        cache.extractions.clear()
        cache.title_hits.clear()
        cache.lexicon = frozenset()
        cache.identity = extractor.identity
    for key in removed:
        cache.chunks.pop(key, None)
        cache.extractions.pop(key, None)
        cache.title_hits.pop(key, None)
    added = sorted({c.key: c for c in added}.values(), key=lambda c: _rowid_order(c.key))
    # Extract first: an extractor that fails (an LLM down, a spent budget) leaves the cache
    # as it was, so the next build retries these chunks.
    extracted = extractor.extract(added) if added else []
    for c, x in zip(added, extracted):
        cache.chunks[c.key] = c
        cache.extractions[c.key] = x
    stats.chunks_extracted = len(added)

    titles = {title_key(e): e for c in cache.chunks.values() if c.title
              for e in title_entries(c.title)}
    titles.pop("", None)
    current = frozenset(titles)
    new_titles = current - cache.lexicon
    gone_titles = cache.lexicon - current
    added_keys = {c.key for c in added}
    full_lexicon = Lexicon(titles.values(), expand=False) if added_keys else None
    new_lexicon = (Lexicon([titles[t] for t in sorted(new_titles)], expand=False)
                   if new_titles else None)
    for key, c in cache.chunks.items():
        checkpoint()
        x = cache.extractions[key]
        if key in added_keys:
            assert full_lexicon is not None
            cache.title_hits[key] = tuple(full_lexicon.scan(c.text, x.sentences))
            continue
        hits = cache.title_hits.get(key, ())
        if gone_titles:
            hits = tuple(h for h in hits if title_key(h.surface) not in gone_titles)
        if new_lexicon is not None and len(new_lexicon):
            hits = hits + tuple(new_lexicon.scan(c.text, x.sentences))
            stats.chunks_rescanned += 1
        cache.title_hits[key] = hits
    cache.lexicon = current
    stats.seconds_extract = time.perf_counter() - t0
    graph = _aggregate(cache, embed, config, stats)
    cache.stats = stats
    return graph


def resolved_mentions(cache: GraphCache) -> dict[str, list[tuple[str, RawMention]]]:
    """Each cached chunk's mentions with the entity keys the aggregation gives them,
    chunks in row order (what a benchmark of entity linking reads)."""
    order = sorted(cache.chunks, key=_rowid_order)
    title_keys, _about = _title_index(cache, order)
    return _resolve(cache, order, title_keys)


# --- aggregation ---------------------------------------------------------------------------

@dataclass
class _Sent:
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
class _Tally:
    """What the chunks say, gathered in row order (the input of every aggregation step)."""

    # entity -> chunk -> count; entity -> surface form -> count; entity -> kind -> count
    counts: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    surfaces: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    kinds: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    sents: list[_Sent] = field(default_factory=list)
    llm_desc: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    typed: list[tuple[str, str, str, str, float, str]] = field(default_factory=list)


def _aggregate(cache: GraphCache, embed: Embed | None, config: GraphConfig,
               stats: BuildStats) -> GraphData:
    """The graph of the cached per-chunk results: entities, relations, synonyms."""
    t0 = time.perf_counter()
    order = sorted(cache.chunks, key=_rowid_order)
    title_keys, about = _title_index(cache, order)
    tally = _Tally()
    resolved = _resolve(cache, order, title_keys)
    for key in order:
        checkpoint()
        _tally_chunk(tally, key, cache, resolved[key], stats)
    stats.seconds_aggregate += time.perf_counter() - t0

    t1 = time.perf_counter()
    names = {k: _display(k, tally.surfaces[k], title_keys) for k in tally.counts}
    synonyms: list[Synonym] = []
    if embed is not None:
        synonyms = _synonyms(tally, names, title_keys, cache, embed, config, stats)
    stats.seconds_resolve = time.perf_counter() - t1

    t2 = time.perf_counter()
    entities = _entities(tally, names, title_keys, about)
    relations = (_cooccurrence_relations(tally.sents, cache, config)
                 + _typed_relations(tally.typed))
    _add_descriptions(entities, tally, cache, config)
    stats.seconds_aggregate += time.perf_counter() - t2
    stats.entities, stats.relations, stats.synonyms = len(entities), len(relations), len(synonyms)
    chunk_docs = {k: cache.chunks[k].doc_id for k in order}
    return GraphData(entities=entities, relations=relations, synonyms=synonyms,
                     chunk_docs=chunk_docs)


# --- aggregation: reading the chunks -------------------------------------------------------

def _title_index(cache: GraphCache, order: list[str]
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


def _tally_chunk(tally: _Tally, key: str, cache: GraphCache,
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
_HAS_LETTER = re.compile(r"[^\W\d_]")
_LIST_PUNCT = re.compile(r"[\s,;/&+\-–—]*")
_POSSESSIVE_GAP = re.compile(r"['’]s?\s+")


def _resolve(cache: GraphCache, order: Sequence[str], title_keys: Mapping[str, str]
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
            if k and (m.kind in NO_SYNONYM_KINDS or _HAS_LETTER.search(k)):
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
        if k and _HAS_LETTER.search(k):
            have.add((m.start, m.end))
            out.append((k, m))
    return out


def _count_mentions(tally: _Tally, key: str, keyed: list[tuple[str, RawMention]],
                    x: ChunkExtraction, stats: BuildStats) -> dict[int, _Sent]:
    """Count each mention of chunk ``key``; its sentences with the entities they name."""
    local: dict[int, _Sent] = {}
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
            s = local[m.sentence] = _Sent(key, m.sentence, s0, s1, [], [])
        if k not in s.keys:
            s.keys.append(k)
            s.positions.append((m.start, m.end))
    return local


def _collect_llm_results(tally: _Tally, key: str, x: ChunkExtraction) -> None:
    """Keep an LLM extractor's entity descriptions and typed relations of chunk ``key``."""
    for surface, desc in x.descriptions:
        k = entity_key(surface)
        if k and desc not in tally.llm_desc[k]:
            tally.llm_desc[k].append(desc)
    for r in x.relations:
        ka, kb = entity_key(r.subject), entity_key(r.object)
        if ka and kb and ka != kb:
            tally.typed.append((ka, kb, r.relation, r.description, r.weight, key))


# --- aggregation: synonyms (resolution) by name embeddings ---------------------------------

def _synonyms(tally: _Tally, names: Mapping[str, str], title_keys: Mapping[str, str],
              cache: GraphCache, embed: Embed, config: GraphConfig,
              stats: BuildStats) -> list[Synonym]:
    """Synonym edges between the candidates' names (their vectors refreshed in ``cache``)."""
    cand = _synonym_candidates(tally, title_keys, config)
    _refresh_name_vectors(cache, embed, {names[k] for k in cand}, stats)
    if len(cand) <= 1:
        return []
    matrix = np.stack([cache.name_vectors[names[k]] for k in cand])
    return synonym_edges(cand, [names[k] for k in cand], matrix,
                         threshold=config.synonym_threshold, top_k=config.synonym_top_k)


def _synonym_candidates(tally: _Tally, title_keys: Mapping[str, str],
                        config: GraphConfig) -> list[str]:
    """Entities whose names are embedded: no dates or numbers; titles or in enough chunks."""
    return sorted(k for k in tally.counts
                  if _kind(tally.kinds[k], k in title_keys) not in NO_SYNONYM_KINDS
                  and (len(tally.counts[k]) >= config.synonym_min_chunks or k in title_keys))


def _refresh_name_vectors(cache: GraphCache, embed: Embed, live: set[str],
                          stats: BuildStats) -> None:
    """Embed the ``live`` names the cache lacks and drop the vectors of names no longer live."""
    missing = sorted(live - set(cache.name_vectors))
    if missing:
        te = time.perf_counter()
        vecs = np.asarray(embed(missing), dtype=np.float32)
        stats.seconds_embedding = time.perf_counter() - te
        stats.names_embedded = len(missing)
        cache.name_vectors.update(zip(missing, vecs))
    for name in [n for n in cache.name_vectors if n not in live]:
        del cache.name_vectors[name]


# --- aggregation: entities and relations ---------------------------------------------------

def _entities(tally: _Tally, names: Mapping[str, str], title_keys: Mapping[str, str],
              about: Mapping[str, list[str]]) -> dict[str, Entity]:
    """One entity per key, in key order, with its mention weights ``1 + ln(count)``."""
    entities: dict[str, Entity] = {}
    for k in sorted(tally.counts):
        checkpoint()
        mention_w = {ck: round(1.0 + math.log(n), 6) if n > 0 else 1.0
                     for ck, n in sorted(tally.counts[k].items(),
                                         key=lambda kv: _rowid_order(kv[0]))}
        alias = tuple(sorted(s for s in tally.surfaces[k] if s != names[k]))
        entities[k] = Entity(key=k, name=names[k], kind=_kind(tally.kinds[k], k in title_keys),
                             aliases=alias, mentions=mention_w, about=tuple(about.get(k, ())))
    return entities


def _cooccurrence_relations(sents: list[_Sent], cache: GraphCache,
                            config: GraphConfig) -> list[Relation]:
    """Relations of entity pairs in one sentence, weighted by normalised PMI, in pair order."""
    df, pairs = _sentence_pairs(sents, config)
    scored = _score_pairs(pairs, df, max(1, len(sents)), config)
    keep = _strongest_pairs(scored, config)
    out = [_cooccurrence_relation(pair, pairs[pair], scored[pair], sents, cache)
           for pair in sorted(keep)]
    return [r for r in out if r is not None]


def _sentence_pairs(sents: list[_Sent], config: GraphConfig
                    ) -> tuple[Counter[str], dict[tuple[str, str], list[int]]]:
    """Sentences per entity, and the sentences of each pair within ``pair_window``."""
    df: Counter[str] = Counter()
    pairs: dict[tuple[str, str], list[int]] = {}
    for si, s in enumerate(sents):
        checkpoint()
        df.update(s.keys)
        keys = s.keys[:config.max_sentence_entities]
        for i, a in enumerate(keys):
            for b in keys[i + 1:i + 1 + config.pair_window]:
                pair = (a, b) if a < b else (b, a)
                pairs.setdefault(pair, []).append(si)
    return df, pairs


def _score_pairs(pairs: Mapping[tuple[str, str], list[int]], df: Counter[str], n_sent: int,
                 config: GraphConfig) -> dict[tuple[str, str], float]:
    """Each pair above ``min_npmi``: its normalised PMI x ``ln(1 + sentences)``."""
    scored: dict[tuple[str, str], float] = {}
    for (a, b), where in pairs.items():
        n_ab = len(where)
        p_ab = n_ab / n_sent
        pmi = math.log(p_ab / ((df[a] / n_sent) * (df[b] / n_sent)))
        npmi = pmi / -math.log(p_ab) if p_ab < 1 else 1.0
        if npmi > config.min_npmi:
            scored[(a, b)] = npmi * math.log1p(n_ab)
    return scored


def _strongest_pairs(scored: Mapping[tuple[str, str], float],
                     config: GraphConfig) -> set[tuple[str, str]]:
    """The pairs among each entity's ``max_relations_per_entity`` strongest (ties by pair)."""
    best: dict[str, list[tuple[float, tuple[str, str]]]] = defaultdict(list)
    for pair, w in scored.items():
        best[pair[0]].append((w, pair))
        best[pair[1]].append((w, pair))
    keep: set[tuple[str, str]] = set()
    for ranked in best.values():
        ranked.sort(key=lambda t: (-t[0], t[1]))
        keep.update(p for _w, p in ranked[:config.max_relations_per_entity])
    return keep


def _cooccurrence_relation(pair: tuple[str, str], where: list[int], score: float,
                           sents: list[_Sent], cache: GraphCache) -> Relation | None:
    """The relation of one pair, attested by its first sentence that joins the two with
    words rather than markup, weighted by its NPMI; None when every sentence is markup."""
    checkpoint()
    for i in where:
        s = sents[i]
        c = cache.chunks[s.chunk]
        between = _between(c.text, s, pair)
        if between is not None:
            break
    else:
        return None
    evidence = c.text[s.start:s.end]
    return Relation(
        subject=pair[0], object=pair[1], relation=between,
        evidence=evidence, span=Span(c.doc_id, c.start + s.start, c.start + s.end),
        chunks=tuple(sorted({sents[i].chunk for i in where}, key=_rowid_order)),
        weight=round(score / math.log1p(len(where)), 6))


def _typed_relations(typed: list[tuple[str, str, str, str, float, str]]) -> list[Relation]:
    """The LLM's typed triplets, distinct and sorted."""
    return [Relation(subject=a, object=b, relation=rel, evidence=desc or rel, span=None,
                     chunks=(ck,), weight=w, typed=True)
            for a, b, rel, desc, w, ck in sorted(set(typed))]


def _add_descriptions(entities: dict[str, Entity], tally: _Tally, cache: GraphCache,
                      config: GraphConfig) -> None:
    """Set each entity's description: the LLM's, else its best mention sentences."""
    by_entity: dict[str, list[int]] = defaultdict(list)
    for si, s in enumerate(tally.sents):
        for k in s.keys:
            by_entity[k].append(si)
    sent_texts = [" ".join(cache.chunks[s.chunk].text[s.start:s.end].split())
                  for s in tally.sents]
    known = cache.sentence_tokens
    new = sorted({t for t in sent_texts if t not in known})
    sent_tokens = {t: known[t] for t in sent_texts if t in known}
    sent_tokens.update(zip(new, count_tokens_batch(new)))
    cache.sentence_tokens = sent_tokens
    for k, e in entities.items():
        checkpoint()
        if tally.llm_desc.get(k):
            e.description = _cap(" ".join(tally.llm_desc[k]), config.description_tokens)
            continue
        e.description, e.spans = _describe(e, by_entity.get(k, []), tally.sents, cache, config,
                                           sent_tokens)


def _display(key: str, surfaces: Counter[str], titles: dict[str, str]) -> str:
    if key in titles:
        return titles[key]
    return min(surfaces.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _kind(kinds: Counter[str], is_title: bool) -> str:
    if is_title:
        return "title"
    if not kinds:
        return "name"
    return min(kinds.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _between(text: str, s: _Sent, pair: tuple[str, str]) -> str | None:
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
    if not _HAS_LETTER.search(raw):
        return "and" if _LIST_PUNCT.fullmatch(raw) else None
    if len(words) > 12:
        return " ".join(words[:6] + ["…"] + words[-5:])
    return " ".join(words)


def _cap(text: str, budget: int) -> str:
    return cut_to_tokens(text, budget, count_tokens)


def _describe(e: Entity, where: list[int], sents: list[_Sent], cache: GraphCache,
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
                       *_rowid_order(s.chunk)[:1]), s.start, s.end, s.chunk))
    if about:  # the lead of the passage it is about comes first, even if it names it otherwise
        first = min(about, key=_rowid_order)
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
            text = _cap(text, config.description_tokens)
            b = a + len(text)
            n = config.description_tokens
        seen.add(text)
        parts.append(text)
        spans.append(Span(c.doc_id, c.start + a, c.start + b))
        used += n
        if len(parts) >= 3:
            break
    return " ".join(parts), tuple(spans)
