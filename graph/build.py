"""Build the graph from chunks: extract (cached per chunk), resolve, aggregate into GraphData.

:func:`build_graph` is the whole job; :func:`update_graph` applies added and removed chunks
to the :class:`~.live.LiveGraph` a :class:`GraphCache` keeps, redoing only what they touch
(:mod:`.live`): the graph after any sequence of updates equals the graph built from scratch
of the same chunks. Each rule in full: ``docs/internals.md``, "Building the graph".
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from .build_state import BuildStats, Embed, GraphCache, GraphConfig, rowid_order
from .extract import Extractor, RawMention
from .live import GraphDelta, LiveGraph
from .model import ChunkText, GraphData


def build_graph(chunks: Sequence[ChunkText], extractor: Extractor, *, embed: Embed | None = None,
                config: GraphConfig = GraphConfig(), cache: GraphCache | None = None) -> GraphData:
    """The graph of ``chunks``. With a ``cache`` from an earlier build, only chunks that are
    new or changed are extracted and aggregated again."""
    cache = cache if cache is not None else GraphCache()
    held = cache.live.chunks if cache.live is not None else {}
    current = {c.key: c for c in chunks}
    removed = [k for k, c in held.items() if current.get(k) != c]
    added = [c for c in chunks if held.get(c.key) != c]
    return update_graph(cache, extractor, added=added, removed=removed, embed=embed,
                        config=config)


def update_graph(cache: GraphCache, extractor: Extractor, *, added: Sequence[ChunkText] = (),
                 removed: Iterable[str] = (), embed: Embed | None = None,
                 config: GraphConfig = GraphConfig()) -> GraphData:
    """Apply added and removed chunks to ``cache`` and return the graph of what it now holds
    (equal to ``build_graph`` of the same chunks from scratch)."""
    apply_chunks(cache, extractor, added=added, removed=removed, embed=embed, config=config)
    return cache.live.graph()


def apply_chunks(cache: GraphCache, extractor: Extractor, *, added: Sequence[ChunkText] = (),
                 removed: Iterable[str] = (), embed: Embed | None = None,
                 config: GraphConfig = GraphConfig()) -> GraphDelta:
    """Apply added and removed chunks to ``cache``: what changed. A new extractor or other
    settings start the graph afresh (the chunks it held are extracted again)."""
    stats = BuildStats()
    t0 = time.perf_counter()
    removed = set(removed)
    live = cache.live
    if live is None or live.identity != extractor.identity or live.config != config:
        kept = {k: c for k, c in (live.chunks.items() if live is not None else ())
                if k not in removed}
        added = list({**kept, **{c.key: c for c in added}}.values())
        removed = set()
        live = LiveGraph(config, extractor.identity)
    added = sorted({c.key: c for c in added}.values(), key=lambda c: rowid_order(c.key))
    # Extract first: an extractor that fails (an LLM down, a spent budget) leaves the cache
    # as it was, so the next build retries these chunks.
    extracted = extractor.extract(added) if added else []
    stats.chunks_extracted = len(added)
    stats.seconds_extract = time.perf_counter() - t0
    cache.live = live
    live.stats = stats
    try:
        delta = live.apply(list(zip(added, extracted)), removed, embed)
    except BaseException:
        cache.live = None   # half applied (an embedder down, an interrupt): start afresh
        raise
    stats.seconds_aggregate = time.perf_counter() - t0 - stats.seconds_extract
    stats.entities, stats.synonyms = len(live.entities), len(live.synonyms.names)
    cache.stats = stats
    return delta


def resolved_mentions(cache: GraphCache) -> dict[str, list[tuple[str, RawMention]]]:
    """Each cached chunk's mentions with the entity keys the aggregation gives them,
    chunks in row order (what a benchmark of entity linking reads)."""
    res = cache.live.res
    return {k: res.resolved[k] for k in sorted(res.resolved, key=rowid_order)}
