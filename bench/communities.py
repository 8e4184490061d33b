"""Community hierarchy on SciFact: shape, quality, cost, and incremental updates (issue 12).

    python bench/communities.py [--limit N] [--max-size 10] [--embed] [--scale] [--no-variants]

* The graph: SciFact train (5,183 abstracts) chunked by the engine's chunker at its
  defaults (200/30, ``bench/graph.py``'s ``corpus_chunks``), built by
  ``rcp_agentic.graph.build_graph`` with the builtin extractor. Without ``--embed`` no name
  embedding, hence no synonym edges (they are 478 of 55,913 relations with it, and the
  embedding is 90 % of the build's time); the build time is reported either way.
* ``edge_variants``: which edges make the entity graph — relations only, + synonyms,
  + about (entity mentioned in a passage about another), + co-mention (default), and
  co-mention without about (a corpus without titles) — with
  the share of isolated entities, components, the share of entities in non-singleton
  level-0 communities and the modularity of the finest and coarsest levels.
* ``hierarchy`` (default config): levels, communities per level, size min / median / max,
  modularity per level, share of entities covered at each level (must be 100 %), Leiden
  time (the edge computation and the clustering), RSS (sampled during the clustering, and
  what it added to the resident set before it), and the ratio to the graph build time.
* ``incremental``: the graph of a seeded 90 % of the documents (``bench.raptor.split_90_10``)
  and its hierarchy, then the other 10 % through ``update_graph`` and ``update_communities``:
  the share of the old community ids kept, entities re-clustered, update time against a
  full ``build_communities`` of the same graph, and the modularity of both.
* ``--scale``: the hierarchy on SciFact + both multi-hop corpora at 64/8 (≈ 46k chunks).

Results merge into ``bench/results/communities.json`` under ``scifact`` (and ``scale``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.graph import corpus_chunks, peak_rss_mb, save  # noqa: E402
from rcp_agentic.graph import BuiltinExtractor, GraphCache, GraphData, build_graph, update_graph  # noqa: E402
from rcp_agentic.graph.communities import (CommunityConfig, CommunityHierarchy,  # noqa: E402
                                           build_communities, entity_edges, modularity,
                                           update_communities)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "communities.json"

VARIANTS = {
    "relations only": CommunityConfig(synonym=0.0, about=0.0, comention=0.0),
    "relations + synonyms": CommunityConfig(about=0.0, comention=0.0),
    "+ about edges": CommunityConfig(comention=0.0),
    "+ co-mention edges (default)": CommunityConfig(),
    "co-mention without about": CommunityConfig(about=0.0),
}


def shape(h: CommunityHierarchy, g: GraphData, cfg: CommunityConfig,
          edges: dict[tuple[str, str], float]) -> list[dict[str, Any]]:
    """Per level: communities, sizes, singletons, modularity, coverage."""
    everyone = set(g.entities)
    rows = []
    for level in range(h.top_level + 1):
        part = h.level(level)
        sizes = sorted(c.size for c in part)
        covered = [m for c in part for m in c.members]
        assert len(covered) == len(set(covered))
        rows.append({
            "level": level, "communities": len(part),
            "size_min": sizes[0] if sizes else 0,
            "size_median": statistics.median(sizes) if sizes else 0,
            "size_max": sizes[-1] if sizes else 0,
            "singletons": sum(s == 1 for s in sizes),
            "entities_in_non_singletons": round(sum(s for s in sizes if s > 1)
                                                / max(1, len(everyone)), 4),
            "modularity": round(modularity(h, g, level, cfg, edges), 4),
            "coverage": round(len(set(covered) & everyone) / max(1, len(everyone)), 6)})
    return rows


def connectivity(g: GraphData, edges: dict[tuple[str, str], float]) -> dict[str, Any]:
    import igraph as ig

    keys = sorted(g.entities)
    index = {k: i for i, k in enumerate(keys)}
    gr = ig.Graph(n=len(keys), edges=[(index[a], index[b]) for a, b in edges])
    comps = gr.connected_components()
    sizes = sorted(comps.sizes(), reverse=True)
    return {"edges": len(edges),
            "isolated_entities": round(sum(d == 0 for d in gr.degree()) / max(1, len(keys)), 4),
            "components": len(sizes),
            "largest_component_share": round(sizes[0] / max(1, len(keys)), 4) if sizes else 0}


def variants(g: GraphData, max_size: int) -> dict[str, Any]:
    out = {}
    for name, base in VARIANTS.items():
        cfg = CommunityConfig(**{**base.__dict__, "max_community_size": max_size})
        t0 = time.perf_counter()
        edges = entity_edges(g, cfg)
        h = build_communities(g, cfg, edges)
        secs = time.perf_counter() - t0
        levels = shape(h, g, cfg, edges)
        row = {**connectivity(g, edges), "levels": h.top_level + 1,
               "level0_communities": levels[0]["communities"],
               "top_communities": levels[-1]["communities"],
               "entities_in_non_singletons_level0": levels[0]["entities_in_non_singletons"],
               "modularity_level0": levels[0]["modularity"],
               "modularity_top": levels[-1]["modularity"], "seconds": round(secs, 2)}
        print(f"  {name:30s} {row}", flush=True)
        out[name] = row
    return out


class RssSampler:
    """The largest resident set size seen while it runs (``/proc/self/statm``, every 5 ms):
    ``ru_maxrss`` is the process's peak so far, which the graph build already set."""

    def __init__(self) -> None:
        self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> float:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())


def hierarchy(g: GraphData, cfg: CommunityConfig, graph_s: float) -> dict[str, Any]:
    rss0 = RssSampler.now()
    with RssSampler() as sampler:
        t0 = time.perf_counter()
        edges = entity_edges(g, cfg)
        edges_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        h = build_communities(g, cfg, edges)
        leiden_s = time.perf_counter() - t1
    rss = peak_rss_mb()
    levels = shape(h, g, cfg, edges)
    text = json.dumps(h.to_dict())
    again = build_communities(g, cfg, edges)
    row = {"entities": len(g.entities), "relations": len(g.relations),
           "synonyms": len(g.synonyms), **connectivity(g, edges),
           "levels": h.top_level + 1, "communities_total": len(h.communities),
           "per_level": levels, "edges_s": round(edges_s, 2), "leiden_s": round(leiden_s, 2),
           "graph_build_s": round(graph_s, 2),
           "leiden_over_graph_build": round((edges_s + leiden_s) / graph_s, 3),
           "rss_before_mb": round(rss0, 1),
           "rss_peak_during_communities_mb": round(sampler.peak, 1),
           "rss_added_by_communities_mb": round(sampler.peak - rss0, 1),
           "process_peak_rss_mb": round(rss, 1),
           "json_mb": round(len(text) / 2**20, 2), "deterministic": again == h}
    print(f"  entities {row['entities']}  edges {row['edges']}  isolated "
          f"{row['isolated_entities']}  components {row['components']}")
    for lv in levels:
        print(f"  level {lv}", flush=True)
    for k in ("communities_total", "edges_s", "leiden_s", "graph_build_s",
              "leiden_over_graph_build", "rss_before_mb", "rss_peak_during_communities_mb",
              "rss_added_by_communities_mb", "process_peak_rss_mb", "json_mb",
              "deterministic"):
        print(f"  {k:26s} {row[k]}", flush=True)
    return row


def incremental(chunks: list[Any], later: set[str], cfg: CommunityConfig,
                embed: Any) -> dict[str, Any]:
    base = [c for c in chunks if c.doc_id not in later]
    added = [c for c in chunks if c.doc_id in later]
    cache = GraphCache()
    g0 = build_graph(base, BuiltinExtractor(), embed=embed, cache=cache)
    e0 = entity_edges(g0, cfg)
    h0 = build_communities(g0, cfg, e0)
    t0 = time.perf_counter()
    g1 = update_graph(cache, BuiltinExtractor(), added=added, embed=embed)
    graph_update_s = time.perf_counter() - t0
    h1, rep = update_communities(h0, g0, g1, cfg, old_edges=e0)
    t1 = time.perf_counter()
    e1 = entity_edges(g1, cfg)
    full = build_communities(g1, cfg, e1)
    full_s = time.perf_counter() - t1
    old_ids = set(h0.communities)
    row = {"base_chunks": len(base), "added_chunks": len(added),
           "entities_before": len(g0.entities), "entities_after": len(g1.entities),
           "graph_update_s": round(graph_update_s, 2),
           "update_communities_s": round(rep.seconds, 2), "full_rebuild_s": round(full_s, 2),
           "update_over_rebuild": round(rep.seconds / full_s, 3),
           "entities_touched": rep.entities_touched, "entities_added": rep.entities_added,
           "entities_removed": rep.entities_removed,
           "untouched_share": round(rep.untouched / max(1, len(old_ids)), 4),
           "entities_reclustered": rep.entities_reclustered,
           "reclustered_share": round(rep.entities_reclustered / max(1, len(g1.entities)), 4),
           "roots_kept": rep.roots_kept, "roots_before": len(h0.roots()),
           "ids_kept": rep.kept, "ids_added": rep.added, "ids_retired": rep.retired,
           "ids_kept_share": round(rep.kept / max(1, len(old_ids)), 4),
           "rebuild_ids_kept_share": round(len(old_ids & set(full.communities))
                                           / max(1, len(old_ids)), 4),
           "update_vs_rebuild_same_ids": round(len(set(h1.communities) & set(full.communities))
                                               / max(1, len(full.communities)), 4),
           "modularity_update": [round(modularity(h1, g1, lv, cfg, e1), 4)
                                 for lv in range(h1.top_level + 1)],
           "modularity_rebuild": [round(modularity(full, g1, lv, cfg, e1), 4)
                                  for lv in range(full.top_level + 1)],
           "coverage_update": all(set(m for c in h1.level(lv) for m in c.members)
                                  == set(g1.entities) for lv in range(h1.top_level + 1))}
    for k, v in row.items():
        print(f"  {k:28s} {v}", flush=True)
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench.raptor import load_multihop, scifact_docs, split_90_10

    embed = None
    if args.embed:
        from rcp_agentic.models.embedder import as_embedder

        embed = as_embedder(None).embed_documents
    cfg = CommunityConfig(max_community_size=args.max_size)
    docs, _queries, _qrels = scifact_docs(args.limit)
    chunks = corpus_chunks(docs, 200, 30)
    print(f"SciFact: {len(docs)} docs -> {len(chunks)} chunks; name embedding "
          f"{'on' if embed else 'off'}; {cfg.identity}", flush=True)
    t0 = time.perf_counter()
    g = build_graph(chunks, BuiltinExtractor(), embed=embed)
    graph_s = time.perf_counter() - t0
    print(f"  graph built in {graph_s:.1f} s", flush=True)
    out: dict[str, Any] = {"chunks": len(chunks), "docs": len(docs),
                           "name_embedding": bool(embed), "config": cfg.identity}
    if not args.no_variants:
        print("\nedge variants")
        out["edge_variants"] = variants(g, args.max_size)
    print("\nhierarchy")
    out["hierarchy"] = hierarchy(g, cfg, graph_s)
    print("\nincremental (+10 % documents)")
    later = {d["id"] for d in split_90_10(docs, 0)[1]}
    out["incremental"] = incremental(chunks, later, cfg, embed)
    result = {"scifact": out}
    if args.scale:
        for name in ("hotpotqa", "2wikimultihopqa"):
            docs += load_multihop(name)[0]
        chunks = corpus_chunks(docs, 64, 8)
        print(f"\nscale: {len(docs)} docs -> {len(chunks)} chunks (64/8)", flush=True)
        t0 = time.perf_counter()
        g = build_graph(chunks, BuiltinExtractor(), embed=embed)
        graph_s = time.perf_counter() - t0
        print(f"  graph built in {graph_s:.1f} s", flush=True)
        result["scale"] = {"chunks": len(chunks), "docs": len(docs),
                           "hierarchy": hierarchy(g, cfg, graph_s)}
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="SciFact subset (every relevant doc)")
    ap.add_argument("--max-size", type=int, default=CommunityConfig().max_community_size)
    ap.add_argument("--embed", action="store_true", help="name embedding (synonym edges)")
    ap.add_argument("--scale", action="store_true", help="also ~46k chunks (64/8)")
    ap.add_argument("--no-variants", action="store_true")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    result = run(args)
    for key, value in result.items():
        save(key, {**value, "wall_s": round(time.perf_counter() - started, 1)}, RESULTS)
    print(f"\nwrote {RESULTS} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
