"""Build the graph from chunks: extract (cached per chunk), resolve, aggregate into GraphData.

:func:`build_graph` is the whole job; :func:`update_graph` is the incremental path
(added / removed chunks) on a :class:`GraphCache` that keeps every chunk's
extraction, title-lexicon hits and name vectors. Only the aggregation is redone in
full, from cached per-chunk results, so an update gives exactly the graph a rebuild
gives (extraction — the expensive part — and name embedding are what is saved).

Aggregation, all deterministic (chunks in row order, ties broken by key):

* mentions per chunk: title-lexicon hits plus the extractor's, overlaps resolved
  longest first (a title wins a tie); a one-word name that is the first or last word
  of exactly one longer name in the same chunk is that name ("Porcaro" in the
  passage about Jeff Porcaro);
* entities: key = :func:`~.resolve.entity_key`; mention weight ``1 + ln(count)``;
  ``about`` = the chunks of the documents whose title has that key; description =
  its most informative mention sentences (the about-passage's lead first, then the
  sentences joining most other entities) within ``description_tokens``;
* relations: entity pairs in one sentence (each mention with the next ``pair_window``),
  weighted by normalised PMI over sentences; each entity keeps its
  ``max_relations_per_entity`` strongest pairs (so large corpora do not explode);
  LLM relations are added as typed triplets;
* synonyms: name-embedding cosine between entity names (when ``embed`` is given).
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..models.tokenizer import count_tokens, count_tokens_batch
from ..read_first import checkpoint
from .extract import (ChunkExtraction, Extractor, Lexicon, RawMention, choose_mentions,
                      sentence_spans,
                      title_entries, title_key, title_name)
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
        return (f"graph/1;desc={self.description_tokens};win={self.pair_window};"
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
                titles: Mapping[str, object]) -> list[tuple[str, RawMention]]:
    """Re-key a one-word name to the longer name of the chunk it starts or ends: the only
    one, or the chunk's own title among several. A sentence-initial lone word (kind
    ``initial``) that is neither such a part nor a title is dropped."""
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
        if " " not in k and m.kind in ("name", "title", "initial", "person"):
            cands = parts.get(k, set())
            if len(cands) == 1:
                k = next(iter(cands))
            elif own in cands:
                k = own
            elif m.kind == "initial" and k not in titles:
                continue
        elif m.kind == "initial" and k not in titles:
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
    for key in order:
        checkpoint()
        _tally_chunk(tally, key, cache, title_keys, stats)
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


def _tally_chunk(tally: _Tally, key: str, cache: GraphCache, title_keys: Mapping[str, str],
                 stats: BuildStats) -> None:
    """Add one chunk's mentions, sentences, title entities and LLM results to ``tally``."""
    c = cache.chunks[key]
    x = cache.extractions[key]
    keyed = _keyed_mentions(c, x, cache.title_hits.get(key, ()), title_keys)
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


def _keyed_mentions(c: ChunkText, x: ChunkExtraction, title_hits: Iterable[RawMention],
                    title_keys: Mapping[str, str]) -> list[tuple[str, RawMention]]:
    """The chunk's chosen mentions with their entity keys, one-word name parts re-keyed."""
    chosen = choose_mentions([*x.mentions, *title_hits])
    keyed = [(entity_key(m.surface), m) for m in chosen]
    return _name_parts([(k, m) for k, m in keyed if k],
                       entity_key(title_name(c.title)) if c.title else "", title_keys)


def _count_mentions(tally: _Tally, key: str, keyed: list[tuple[str, RawMention]],
                    x: ChunkExtraction, stats: BuildStats) -> dict[int, _Sent]:
    """Count each mention of chunk ``key``; its sentences with the entities they name."""
    local: dict[int, _Sent] = {}
    for k, m in keyed:
        tally.counts[k][key] += 1
        tally.surfaces[k][m.surface] += 1
        tally.kinds[k]["name" if m.kind == "initial" else m.kind] += 1
        stats.mentions += 1
        if not 0 <= m.sentence < len(x.sentences):
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
    return [_cooccurrence_relation(pair, pairs[pair], scored[pair], sents, cache)
            for pair in sorted(keep)]


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
                           sents: list[_Sent], cache: GraphCache) -> Relation:
    """The relation of one pair, attested by its first sentence, weighted by its NPMI."""
    checkpoint()
    s = sents[where[0]]
    c = cache.chunks[s.chunk]
    evidence = c.text[s.start:s.end]
    return Relation(
        subject=pair[0], object=pair[1], relation=_between(c.text, s, pair),
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


def _between(text: str, s: _Sent, pair: tuple[str, str]) -> str:
    """The words joining the two mentions in their sentence (the offline 'relation')."""
    pos = dict(zip(s.keys, s.positions))
    (a0, a1), (b0, b1) = sorted((pos[pair[0]], pos[pair[1]]))
    words = text[a1:b0].strip(" ,;:()\"'").split()
    if not words:
        return "and"
    if len(words) > 12:
        return " ".join(words[:6] + ["…"] + words[-5:])
    return " ".join(words)


def _cap(text: str, budget: int) -> str:
    from ..raptor.summarize import cut_to_tokens

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
