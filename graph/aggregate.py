"""The graph's aggregation: cached per-chunk results -> entities, relations, synonyms.

:func:`aggregate` reads the chunks in row order (their resolved mentions,
``aggregate_mentions``), then makes the entities (:func:`~.resolve.entity_key`, mention
weights, ``about`` chunks, a description), the relations (pairs in one sentence weighted by
normalised PMI, the strongest kept per entity; LLM relations as typed triplets) and the
synonyms (name cosine). Deterministic: chunks in row order, ties by key.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Mapping

import numpy as np

from ..models.tokenizer import count_tokens, count_tokens_batch
from ..read_first import checkpoint
from ..text import cut_to_tokens
from .aggregate_mentions import (HAS_LETTER, Sentence, Tally, resolve_mentions, tally_chunk,
                                 title_index)
from .build_state import NO_SYNONYM_KINDS, BuildStats, Embed, GraphCache, GraphConfig, rowid_order
from .extract import sentence_spans
from .extract_rules import RULE_RUN
from .model import Entity, GraphData, Relation, Span, Synonym
from .resolve import synonym_edges

_LIST_PUNCT = re.compile(r"[\s,;/&+\-–—]*")
_POSSESSIVE_GAP = re.compile(r"['’]s?\s+")


def aggregate(cache: GraphCache, embed: Embed | None, config: GraphConfig,
              stats: BuildStats) -> GraphData:
    """The graph of the cached per-chunk results: entities, relations, synonyms."""
    t0 = time.perf_counter()
    order = sorted(cache.chunks, key=rowid_order)
    title_keys, about = title_index(cache, order)
    tally = Tally()
    resolved = resolve_mentions(cache, order, title_keys)
    for key in order:
        checkpoint()
        tally_chunk(tally, key, cache, resolved[key], stats)
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


# --- aggregation: synonyms (resolution) by name embeddings ---------------------------------

def _synonyms(tally: Tally, names: Mapping[str, str], title_keys: Mapping[str, str],
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


def _synonym_candidates(tally: Tally, title_keys: Mapping[str, str],
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

def _entities(tally: Tally, names: Mapping[str, str], title_keys: Mapping[str, str],
              about: Mapping[str, list[str]]) -> dict[str, Entity]:
    """One entity per key, in key order, with its mention weights ``1 + ln(count)``."""
    entities: dict[str, Entity] = {}
    for k in sorted(tally.counts):
        checkpoint()
        mention_w = {ck: round(1.0 + math.log(n), 6) if n > 0 else 1.0
                     for ck, n in sorted(tally.counts[k].items(),
                                         key=lambda kv: rowid_order(kv[0]))}
        alias = tuple(sorted(s for s in tally.surfaces[k] if s != names[k]))
        entities[k] = Entity(key=k, name=names[k], kind=_kind(tally.kinds[k], k in title_keys),
                             aliases=alias, mentions=mention_w, about=tuple(about.get(k, ())))
    return entities


def _cooccurrence_relations(sents: list[Sentence], cache: GraphCache,
                            config: GraphConfig) -> list[Relation]:
    """Relations of entity pairs in one sentence, weighted by normalised PMI, in pair order."""
    df, pairs = _sentence_pairs(sents, config)
    scored = _score_pairs(pairs, df, max(1, len(sents)), config)
    keep = _strongest_pairs(scored, config)
    out = [_cooccurrence_relation(pair, pairs[pair], scored[pair], sents, cache)
           for pair in sorted(keep)]
    return [r for r in out if r is not None]


def _sentence_pairs(sents: list[Sentence], config: GraphConfig
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
                           sents: list[Sentence], cache: GraphCache) -> Relation | None:
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
        chunks=tuple(sorted({sents[i].chunk for i in where}, key=rowid_order)),
        weight=round(score / math.log1p(len(where)), 6))


def _typed_relations(typed: list[tuple[str, str, str, str, float, str]]) -> list[Relation]:
    """The LLM's typed triplets, distinct and sorted."""
    return [Relation(subject=a, object=b, relation=rel, evidence=desc or rel, span=None,
                     chunks=(ck,), weight=w, typed=True)
            for a, b, rel, desc, w, ck in sorted(set(typed))]


def _add_descriptions(entities: dict[str, Entity], tally: Tally, cache: GraphCache,
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


def _between(text: str, s: Sentence, pair: tuple[str, str]) -> str | None:
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


def _cap(text: str, budget: int) -> str:
    return cut_to_tokens(text, budget, count_tokens)


def _describe(e: Entity, where: list[int], sents: list[Sentence], cache: GraphCache,
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
