"""The graph kept current under writes: each write redoes what it touched, not the corpus.

:class:`LiveGraph` holds what the aggregation (:mod:`.aggregate`) computes from the per-chunk
results, in a form a write can update: the title lexicon and a word index to scan only the
chunks a new title can occur in (:class:`~.live_titles.TitleHits`), the resolved mentions
(:class:`~.live_resolve.Resolution`), each chunk's share of the tally, the sentence pairs
(:class:`~.live_relations.PairTable`) and the synonym neighbours
(:class:`~.live_synonyms.SynonymTable`). :meth:`LiveGraph.apply` takes the chunks a write
added and removed and returns a :class:`GraphDelta` — the entities and relation pairs whose
units must be made again. A whole build is the same call from an empty state, so the graph
after any sequence of writes equals the graph built from scratch. Rules in full:
``docs/internals.md``, "Building the graph".
"""

from __future__ import annotations

import math
from bisect import insort
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..models.tokenizer import count_tokens
from ..read_first import checkpoint
from .aggregate import cap_tokens, describe, display_name, entity_kind, joining_words
from .aggregate_mentions import Sentence
from .build_state import NO_SYNONYM_KINDS, BuildStats, Embed, GraphConfig, rowid_order
from .extract import ChunkExtraction, RawMention, title_entries
from .live_relations import Pair, PairTable, Sid
from .live_resolve import Resolution, Resolved
from .live_synonyms import SynonymTable
from .live_titles import TitleHits
from .model import ChunkText, Entity, GraphData, Relation, Span, Synonym
from .resolve import entity_key
from .tallies import count, drop

Typed = tuple[str, str, str, str, float, str]


@dataclass
class GraphDelta:
    """What one :meth:`LiveGraph.apply` changed: entity keys whose node must be made again
    (present or gone) and relation pairs (subject, object keys) whose triplets must be made
    again."""

    entities: set[str] = field(default_factory=set)
    pairs: set[Pair] = field(default_factory=set)

    def merge(self, other: GraphDelta) -> None:
        self.entities |= other.entities
        self.pairs |= other.pairs


@dataclass
class _Share:
    """One chunk's share of the tally."""

    counts: dict[str, int]
    surfaces: dict[str, Counter[str]]
    kinds: dict[str, Counter[str]]
    sentences: list[Sentence]
    descriptions: list[tuple[str, str]]
    typed: set[Typed]


def _share(c: ChunkText, x: ChunkExtraction, keyed: list[tuple[str, RawMention]]) -> _Share:
    """What ``tally_chunk`` adds for one chunk."""
    counts: Counter[str] = Counter()
    surfaces: dict[str, Counter[str]] = {}
    kinds: dict[str, Counter[str]] = {}
    local: dict[int, Sentence] = {}
    for k, m in keyed:
        counts[k] += 1
        surfaces.setdefault(k, Counter())[m.surface] += 1
        kinds.setdefault(k, Counter())["name" if m.kind in ("initial", "part") else m.kind] += 1
        if m.kind == "part" or not 0 <= m.sentence < len(x.sentences):
            continue
        s = local.get(m.sentence)
        if s is None:
            s0, s1 = x.sentences[m.sentence]
            s = local[m.sentence] = Sentence(c.key, m.sentence, s0, s1, [], [])
        if k not in s.keys:
            s.keys.append(k)
            s.positions.append((m.start, m.end))
    if c.title:
        for entry in title_entries(c.title):
            ek = entity_key(entry)
            if ek:
                counts[ek] += 0
                surfaces.setdefault(ek, Counter())[entry] += 0
    descs = _descriptions(x)
    typed = {(ka, kb, r.relation, r.description, r.weight, c.key) for r in x.relations
             if (ka := entity_key(r.subject)) and (kb := entity_key(r.object)) and ka != kb}
    return _Share(dict(counts), surfaces, kinds, [local[i] for i in sorted(local)], descs, typed)


def _descriptions(x: ChunkExtraction) -> list[tuple[str, str]]:
    """An LLM extractor's entity descriptions of a chunk, by entity key."""
    return [(k, d) for surface, d in x.descriptions if (k := entity_key(surface))]


class LiveGraph:
    """The graph of the chunks it holds, kept current by :meth:`apply` (module doc)."""

    def __init__(self, config: GraphConfig, identity: str) -> None:
        self.config = config
        self.identity = identity           # the extractor's: another one starts afresh
        self.titles = TitleHits()
        self.res = Resolution()
        self.counts: dict[str, dict[str, int]] = {}          # entity -> chunk -> mentions
        self._surfaces: dict[str, dict[str, list[int]]] = {}  # entity -> surface -> [n, chunks]
        self._kinds: dict[str, Counter[str]] = {}
        self._sentences: dict[Sid, Sentence] = {}
        self._of_entity: dict[str, list[Sid]] = {}
        self._described_in: dict[str, set[str]] = {}          # entity -> chunks with an LLM one
        self._typed: dict[Pair, set[Typed]] = {}
        self._typed_of: dict[str, set[Pair]] = {}             # entity -> its typed pairs
        self.pairs = PairTable(window=config.pair_window, max_entities=config.max_sentence_entities,
                               keep=config.max_relations_per_entity, min_npmi=config.min_npmi)
        self.synonyms = SynonymTable(config.synonym_threshold, config.synonym_top_k)
        self.name_vectors: dict[str, np.ndarray] = {}
        self.entities: dict[str, Entity] = {}
        self.relations: dict[Pair, list[Relation]] = {}
        self.relation_count = 0
        self._doc_chunks: dict[str, set[str]] = {}            # document -> its chunks
        self.stats = BuildStats()

    @property
    def chunks(self) -> Mapping[str, ChunkText]:
        return self.res.chunks

    def doc_chunks(self, doc_id: str) -> list[ChunkText]:
        """The chunks of one document, in row order."""
        return [self.res.chunks[k]
                for k in sorted(self._doc_chunks.get(doc_id, ()), key=rowid_order)]

    # --- a write ------------------------------------------------------------------------------

    def apply(self, added: Sequence[tuple[ChunkText, ChunkExtraction]], removed: Iterable[str],
              embed: Embed | None) -> GraphDelta:
        """Take out the chunks ``removed`` (keys) and put in ``added`` (a held key is
        replaced); the entities and pairs whose units change."""
        added = sorted({c.key: (c, x) for c, x in added}.values(),
                       key=lambda cx: rowid_order(cx[0].key))
        fresh_keys = {c.key for c, _x in added}
        removed = [k for k in dict.fromkeys(removed) if k in self.res.chunks
                   and k not in fresh_keys]
        replaced = sorted((k for k in fresh_keys if k in self.res.chunks), key=rowid_order)
        retitled = self.titles.apply(added, [*removed, *replaced], self.res.chunks,
                                     self.res.extractions)
        self.stats.chunks_rescanned = self.titles.rescanned
        again = [(self.res.chunks[k], self.res.extractions[k], self.titles.hits[k])
                 for k in sorted(retitled - fresh_keys - set(removed), key=rowid_order)]
        fresh = [(c, x, self.titles.hits[c.key]) for c, x in added]
        for key in [*removed, *replaced]:
            drop(self._doc_chunks, self.res.chunks[key].doc_id, key)
        for c, _x in added:
            self._doc_chunks.setdefault(c.doc_id, set()).add(c.key)
        redo, titles_moved, before = self.res.apply([*again, *fresh], removed)
        delta = GraphDelta()
        self._retally(removed, redo, before, delta)
        delta.entities |= {k for k in titles_moved if k in self.counts or k in self.entities}
        self._remake_entities(delta)
        if embed is not None:
            self._resynonym(delta, embed)
        self._remake_relations(delta)
        return delta

    def _retally(self, removed: list[str], redo: set[str], before: Mapping[str, Resolved],
                 delta: GraphDelta) -> None:
        """Replace the tally shares of the chunks resolved again; take out the removed. A
        share is not kept: it is made again from what the chunk was (``before``)."""
        out_sents: list[tuple[Sid, list[str]]] = []
        in_sents: list[tuple[Sid, list[str]]] = []
        for key in [*removed, *sorted(redo, key=rowid_order)]:
            checkpoint()
            if key in before:
                out_sents += self._count(key, _share(*before[key]), -1, delta)
            if key in redo:
                c, x = self.res.chunks[key], self.res.extractions[key]
                in_sents += self._count(key, _share(c, x, self.res.resolved[key]), 1, delta)
        remake, gone = self.pairs.update(out_sents, in_sents)
        delta.pairs |= remake | gone

    def _count(self, key: str, share: _Share, sign: int,
               delta: GraphDelta) -> list[tuple[Sid, list[str]]]:
        for k, n in share.counts.items():
            delta.entities.add(k)
            held = self.counts.setdefault(k, {})
            if sign > 0:
                held[key] = n
            else:
                held.pop(key, None)
                if not held:
                    del self.counts[k]
        for k, surfaces in share.surfaces.items():
            held_s = self._surfaces.setdefault(k, {})
            for s, n in surfaces.items():
                entry = held_s.setdefault(s, [0, 0])
                entry[0] += sign * n
                entry[1] += sign
                if entry[1] <= 0:
                    del held_s[s]
            if not held_s:
                del self._surfaces[k]
        for k, kinds in share.kinds.items():
            held_k = self._kinds.setdefault(k, Counter())
            for kind, n in kinds.items():
                count(held_k, kind, sign * n)
            if not held_k:
                del self._kinds[k]
        order = rowid_order(key)
        sents = []
        for s in share.sentences:
            sid = (order, s.index)
            sents.append((sid, s.keys))
            if sign > 0:
                self._sentences[sid] = s
            else:
                self._sentences.pop(sid, None)
            for k in s.keys:
                held_i = self._of_entity.setdefault(k, [])
                if sign > 0:
                    insort(held_i, sid)
                else:
                    held_i.remove(sid)
                    if not held_i:
                        del self._of_entity[k]
        for k, _d in share.descriptions:
            delta.entities.add(k)
            if sign > 0:
                self._described_in.setdefault(k, set()).add(key)
            else:
                drop(self._described_in, k, key)
        for t in share.typed:
            pair = (t[0], t[1])
            delta.pairs.add(pair)
            held_t = self._typed.setdefault(pair, set())
            if sign > 0:
                held_t.add(t)
                for k in pair:
                    self._typed_of.setdefault(k, set()).add(pair)
            else:
                held_t.discard(t)
                if not held_t:
                    del self._typed[pair]
                    for k in pair:
                        drop(self._typed_of, k, pair)  # type: ignore[arg-type]
        return sents

    # --- entities -----------------------------------------------------------------------------

    def _remake_entities(self, delta: GraphDelta) -> None:
        """Make the changed entities again; an entity whose name or aliases changed changes
        the text of its triplets too."""
        for k in sorted(delta.entities):
            checkpoint()
            old = self.entities.get(k)
            if k not in self.counts:
                self.entities.pop(k, None)
                new = None
            else:
                new = self.entities[k] = self._entity(k)
            if old is None or new is None or (old.name, old.aliases) != (new.name, new.aliases):
                delta.pairs.update(self.pairs.pairs_with(k))
                delta.pairs.update(self._typed_of.get(k, ()))

    def _entity(self, k: str) -> Entity:
        surfaces = {s: n for s, (n, _c) in self._surfaces.get(k, {}).items()}
        is_title = k in self.res.about
        titles = {k: self.res.title_entry(k)} if is_title else {}
        name = display_name(k, surfaces, titles)  # type: ignore[arg-type]
        mentions = {ck: round(1.0 + math.log(n), 6) if n > 0 else 1.0
                    for ck, n in sorted(self.counts[k].items(), key=lambda kv: rowid_order(kv[0]))}
        e = Entity(key=k, name=name, kind=entity_kind(self._kinds.get(k, Counter()), is_title),
                   aliases=tuple(sorted(s for s in surfaces if s != name)), mentions=mentions,
                   about=tuple(self.res.about.get(k, ())))
        descs = self._llm_descriptions(k)
        if descs:
            e.description = cap_tokens(" ".join(descs), self.config.description_tokens)
        else:
            sids = self._of_entity.get(k, [])
            sents = [self._sentences[sid] for sid in sids]
            e.description, e.spans = describe(e, list(range(len(sents))), sents, self.res,
                                              self.config, _KNOWN)  # type: ignore[arg-type]
        return e

    def _llm_descriptions(self, k: str) -> list[str]:
        out: list[str] = []
        for key in sorted(self._described_in.get(k, ()), key=rowid_order):
            for dk, d in _descriptions(self.res.extractions[key]):
                if dk == k and d not in out:
                    out.append(d)
        return out

    # --- synonyms -----------------------------------------------------------------------------

    def _resynonym(self, delta: GraphDelta, embed: Embed) -> None:
        """Candidates among the changed entities, their name vectors, the synonym pairs."""
        wanted: dict[str, str] = {}
        gone: list[str] = []
        before = {k: self.synonyms.names[k] for k in delta.entities if k in self.synonyms.names}
        for k in delta.entities:
            e = self.entities.get(k)
            if e is not None and e.kind not in NO_SYNONYM_KINDS and (
                    len(self.counts[k]) >= self.config.synonym_min_chunks or k in self.res.about):
                wanted[k] = e.name
            else:
                gone.append(k)
        missing = sorted({n for n in wanted.values() if n not in self.name_vectors})
        if missing:
            vecs = np.asarray(embed(missing), dtype=np.float32)
            self.name_vectors.update(zip(missing, vecs))
            self.stats.names_embedded += len(missing)
        touched = self.synonyms.update(wanted, gone, self.name_vectors)
        left = set(before.values()) - set(wanted.values())
        if left:  # names no candidate has any more: their vectors go
            live = set(self.synonyms.names.values())
            for name in left - live:
                self.name_vectors.pop(name, None)
        delta.entities |= {k for k in touched if k in self.entities}

    def synonym_count(self) -> int:
        """How many synonym pairs there are."""
        return sum(1 for a in self.synonyms.names for b in self.synonyms.pairs_of(a) if a < b)

    def synonym_list(self) -> list[Synonym]:
        """Every synonym pair, sorted."""
        out = {}
        for a in self.synonyms.names:
            for b, s in self.synonyms.pairs_of(a).items():
                out[(min(a, b), max(a, b))] = s
        return [Synonym(a, b, s) for (a, b), s in sorted(out.items())]

    # --- relations ----------------------------------------------------------------------------

    def _remake_relations(self, delta: GraphDelta) -> None:
        for pair in sorted(delta.pairs):
            checkpoint()
            made: list[Relation] = []
            if pair in self.pairs.kept and pair[0] in self.entities and pair[1] in self.entities:
                r = self._cooccurrence(pair)
                if r is not None:
                    made.append(r)
            made += [Relation(subject=a, object=b, relation=rel, evidence=desc or rel,
                              span=None, chunks=(ck,), weight=w, typed=True)
                     for a, b, rel, desc, w, ck in sorted(self._typed.get(pair, ()))
                     if a in self.entities and b in self.entities]
            self.relation_count -= len(self.relations.pop(pair, ()))
            if made:
                self.relations[pair] = made
                self.relation_count += len(made)

    def _cooccurrence(self, pair: Pair) -> Relation | None:
        """The relation of a kept pair: its first sentence joining the two with words."""
        where = self.pairs.where[pair]
        for sid in where:
            s = self._sentences[sid]
            c = self.res.chunks[s.chunk]
            between = joining_words(c.text, s, pair)
            if between is not None:
                break
        else:
            return None
        return Relation(subject=pair[0], object=pair[1], relation=between,
                        evidence=c.text[s.start:s.end],
                        span=Span(c.doc_id, c.start + s.start, c.start + s.end),
                        chunks=tuple(k for _r, k in sorted({sid[0] for sid in where})),
                        weight=self.pairs.weight(pair))

    # --- the whole graph ----------------------------------------------------------------------

    def graph(self) -> GraphData:
        """The graph it holds, as :func:`.aggregate.aggregate` makes it."""
        relations = [r for pair in sorted(self.relations) for r in self.relations[pair]]
        return GraphData(entities={k: self.entities[k] for k in sorted(self.entities)},
                         relations=relations, synonyms=self.synonym_list(),
                         chunk_docs={k: self.res.chunks[k].doc_id
                                     for k in sorted(self.res.chunks, key=rowid_order)})


class _TokenCounts:
    """Token counts of description sentences, remembered (``_describe`` reads ``get``)."""

    def get(self, text: str, default: int | None = None) -> int:
        return _tokens_of(text)


@lru_cache(maxsize=1 << 17)
def _tokens_of(text: str) -> int:
    return count_tokens(text)


_KNOWN = _TokenCounts()
