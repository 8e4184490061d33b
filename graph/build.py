"""Build the graph from chunks: extract (cached per chunk), resolve, aggregate into GraphData.

:func:`build_graph` is the whole job; :func:`update_graph` is the incremental path (added /
removed chunks) on a :class:`GraphCache` that keeps every chunk's extraction, title-lexicon
hits and name vectors. Only the aggregation (``aggregate``: mentions per chunk, entities,
relations, synonyms) is redone in full, from cached per-chunk results, so an update gives
exactly the graph a rebuild gives (extraction and name embedding are what is saved). Each
rule in full: ``docs/internals.md``, "Building the graph".
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from ..read_first import checkpoint
from .aggregate import aggregate
from .aggregate_mentions import resolve_mentions, title_index
from .build_state import BuildStats, Embed, GraphCache, GraphConfig, rowid_order
from .extract import Extractor, Lexicon, RawMention, title_entries, title_key
from .model import ChunkText, GraphData


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
    added = sorted({c.key: c for c in added}.values(), key=lambda c: rowid_order(c.key))
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
    graph = aggregate(cache, embed, config, stats)
    cache.stats = stats
    return graph


def resolved_mentions(cache: GraphCache) -> dict[str, list[tuple[str, RawMention]]]:
    """Each cached chunk's mentions with the entity keys the aggregation gives them,
    chunks in row order (what a benchmark of entity linking reads)."""
    order = sorted(cache.chunks, key=rowid_order)
    title_keys, _about = title_index(cache, order)
    return resolve_mentions(cache, order, title_keys)


