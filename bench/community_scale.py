"""Community build time against entities and edges, new builder vs old (issue 22 part 4a).

    python bench/community_scale.py [--sizes 10000 25000 50000 100000 200000] [--m 3]
                                    [--shared] [--engine SET ...] [--repeats 3]
                                    [--old-cap 600] [--no-old] [--table]

* **Synthetic hub-heavy graphs.** A Barabási–Albert graph (``igraph.Graph.Barabasi(n, m)``,
  power-law degrees: the oldest vertices are hubs, as countries and years are in a wiki) is
  turned into passages: one passage per vertex, one sentence naming the vertex and the
  ``m`` vertices it attached to (``Ent000123 Ent000007 ...``). A fixed-output extractor
  (:class:`MentionLists`) hands those mention lists to the engine's own
  ``rcp_agentic.graph.build_graph``, so the **graph build** time is what the engine spends
  from extracted mentions to ``GraphData`` (resolution, PMI relations, descriptions: every
  step after the extractor, which here costs nothing). Entities = ``n``; the edges are
  the entity graph's (relations + co-mentions).
* ``--shared``: the real entity graphs of the shared corpora (``bench/data.py``; HotpotQA,
  2Wiki, both together, and with SciFact), chunked by the engine's chunker at 200/30
  (``bench/graph.py``'s ``corpus_chunks``), built by ``build_graph`` with the builtin
  extractor (graph build = that whole call, extraction included).
* **Community build** = ``entity_edges`` + ``build_communities`` (what the engine's
  builder times as clustering), at the default config (cap 10). Ratio = community build /
  graph build. Modularity per level (resolution 1, on the same entity graph) and coverage
  (share of entities in exactly one community at every level; must be 1.0) are reported.
* ``--engine SET`` (``hotpotqa`` or ``2wikimultihopqa``): end to end, a fresh
  ``Engine(build_graph=True)`` in a temporary directory indexes the set's passages; the
  graph builder's and the community builder's ``DerivedReport`` (seconds, clustering,
  reports, reason, counts) are recorded. The community builder's whole run (clustering and
  offline reports) against the graph builder's (extraction and name embedding included).
* **Old builder**: ``graph/communities.py`` as it was before this change, read from its
  commit by ``bench/frozen.py`` (``git show``; without that history the bench stops, or
  runs with ``--no-old``), in a child process on the same pickled graph, killed after
  ``--old-cap`` seconds (reported as ``> cap``), with its Leiden-processed vertices per
  entity (the count that ruled out a quadratic recursion).

The new builder and the graph build run ``--repeats`` times (medians); the old one once.
A full garbage collection precedes every timed phase (a pending collection of the large
heap the graph leaves would otherwise land in whichever phase comes first); igraph and
leidenalg are imported before timing, as in a running engine. Rows merge into
``bench/results/community_scale.json``; the table is printed in Markdown for RESULTS.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "community_scale.json"


class MentionLists:
    """An extractor that returns given mention lists (one sentence per chunk)."""

    identity = "bench/mention-lists/1"

    def __init__(self, extractions: dict[str, Any]) -> None:
        self.extractions = extractions

    def extract(self, chunks: Sequence[Any]) -> list[Any]:
        return [self.extractions[c.key] for c in chunks]


def synthetic(n: int, m: int, seed: int = 0) -> tuple[list[Any], MentionLists]:
    """Passages and their mention lists from a Barabási–Albert graph (module doc)."""
    import random

    import igraph as ig

    from rcp_agentic.graph import ChunkExtraction, ChunkText, RawMention

    random.seed(seed)      # igraph's generator is Python's random
    ba = ig.Graph.Barabasi(n, m)
    targets: list[list[int]] = [[] for _ in range(n)]
    for a, b in ba.get_edgelist():
        young, old = max(a, b), min(a, b)
        targets[young].append(old)
    chunks, extractions = [], {}
    for v in range(n):
        names = [f"Ent{x:06d}" for x in [v, *sorted(set(targets[v]))]]
        text = " ".join(names) + "."
        mentions, pos = [], 0
        for name in names:
            mentions.append(RawMention(name, pos, pos + len(name), 0, "name"))
            pos += len(name) + 1
        key = f"r{v + 1}"
        chunks.append(ChunkText(key, f"syn{v}#0", f"syn{v}", None, text, 0))
        extractions[key] = ChunkExtraction(((0, len(text)),), tuple(mentions))
    return chunks, MentionLists(extractions)


def timed(fn: Any) -> tuple[Any, float]:
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def quality(mod: Any, h: Any, g: Any, cfg: Any, edges: Any) -> dict[str, Any]:
    """Modularity per level and coverage (every entity exactly once at every level)."""
    everyone = set(g.entities)
    covered = []
    for level in range(h.top_level + 1):
        members = [m for c in h.level(level) for m in c.members]
        covered.append(len(members) == len(set(members)) and set(members) == everyone)
    return {"levels": h.top_level + 1, "communities": len(h.communities),
            "modularity": [round(mod.modularity(h, g, lv, cfg, edges), 4)
                           for lv in range(h.top_level + 1)],
            "coverage": round(sum(covered) / max(1, len(covered)), 4),
            "max_leaf": max((c.size for c in h.level(0)), default=0)}


def new_builder(g: Any, repeats: int) -> dict[str, Any]:
    from rcp_agentic.graph.communities import build as mod
    from rcp_agentic.graph.communities.config import CommunityConfig

    cfg = CommunityConfig()
    times, h, edges = [], None, None
    for _ in range(repeats):
        (edges, h), secs = timed(lambda: _edges_and_build(mod, g, cfg))
        times.append(secs)
    assert h is not None
    again = mod.build_communities(g, cfg, edges)
    return {"seconds": round(statistics.median(times), 3), "runs": [round(t, 3) for t in times],
            "edges": len(edges), "deterministic": again == h,
            "leiden_nodes_per_entity": round(h.stats.leiden_nodes / max(1, len(g.entities)), 2),
            "guarded": h.stats.guarded, "peeled": h.stats.peeled, "depths": h.stats.depths,
            **quality(mod, h, g, cfg, edges)}


def _edges_and_build(mod: Any, g: Any, cfg: Any) -> tuple[Any, Any]:
    edges = mod.entity_edges(g, cfg)
    return edges, mod.build_communities(g, cfg, edges)


def old_child(graph_file: str, out_file: str) -> None:
    """In the child: the old builder on the pickled graph, its row written to ``out_file``."""
    import igraph  # noqa: F401  (imported before timing, as the parent does)
    import leidenalg  # noqa: F401

    from bench.frozen import old_communities

    mod = old_communities()
    with open(graph_file, "rb") as f:
        g = pickle.load(f)
    counted = {"nodes": 0}
    leiden = mod._leiden

    def counting(graph: Any, *args: Any, **kwargs: Any) -> list[int]:
        counted["nodes"] += graph.vcount()
        return leiden(graph, *args, **kwargs)

    mod._leiden = counting
    cfg = mod.CommunityConfig()
    (edges, h), secs = timed(lambda: _edges_and_build(mod, g, cfg))
    row = {"seconds": round(secs, 3), "edges": len(edges),
           "leiden_nodes_per_entity": round(counted["nodes"] / max(1, len(g.entities)), 2),
           **quality(mod, h, g, cfg, edges)}
    Path(out_file).write_text(json.dumps(row))


def old_builder(g: Any, cap: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        graph_file, out_file = f"{tmp}/graph.pkl", f"{tmp}/row.json"
        with open(graph_file, "wb") as f:
            pickle.dump(g, f, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "--old-child",
                            graph_file, out_file], check=True, timeout=cap)
        except subprocess.TimeoutExpired:
            return {"seconds": None, "capped_at": cap}
        return json.loads(Path(out_file).read_text())


def measure(label: str, build: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Graph build (medians of ``--repeats``), then the new and the old community builds."""
    times, g = [], None
    for _ in range(args.repeats):
        g, secs = timed(build)
        times.append(secs)
    graph_s = statistics.median(times)
    row: dict[str, Any] = {"entities": len(g.entities), "graph_build_s": round(graph_s, 3),
                           "graph_runs": [round(t, 3) for t in times]}
    new = new_builder(g, args.repeats)
    row["edges"] = new.pop("edges")
    row["new"] = {**new, "ratio": round(new["seconds"] / graph_s, 3)}
    if not args.no_old:
        old = old_builder(g, args.old_cap)
        old.pop("edges", None)
        if old.get("seconds") is not None:
            old["ratio"] = round(old["seconds"] / graph_s, 3)
        row["old"] = old
    print(f"{label}: {line(row)}", flush=True)
    return row


def line(row: dict[str, Any]) -> str:
    new, old = row["new"], row.get("old", {})
    old_s = ("-" if not old else f"> {old['capped_at']:.0f}" if old.get("seconds") is None
             else f"{old['seconds']:.2f}")
    return (f"entities {row['entities']}  edges {row['edges']}  graph {row['graph_build_s']:.2f} s  "
            f"communities {new['seconds']:.2f} s (ratio {new['ratio']:.2f}; old {old_s} s, "
            f"ratio {old.get('ratio', '-')})  modularity {new['modularity'][0]}..{new['modularity'][-1]}"
            f" (old {old.get('modularity', ['-'])[0]}..{old.get('modularity', ['-'])[-1]})  "
            f"coverage {new['coverage']}")


def shared_sets() -> dict[str, Any]:
    """The shared corpora's graph builds, by name (module doc)."""
    from bench.graph import corpus_chunks
    from bench.raptor import load_multihop, scifact_docs
    from rcp_agentic.graph import BuiltinExtractor, build_graph

    hotpot = load_multihop("hotpotqa")[0]
    wiki = load_multihop("2wikimultihopqa")[0]
    scifact = scifact_docs()[0]
    out = {}
    for name, docs in (("hotpotqa", hotpot), ("2wikimultihopqa", wiki),
                       ("hotpotqa+2wiki", hotpot + wiki),
                       ("scifact+hotpotqa+2wiki", scifact + hotpot + wiki)):
        chunks = corpus_chunks(docs, 200, 30)
        out[name] = (len(docs), lambda chunks=chunks: build_graph(chunks, BuiltinExtractor()))
    return out


def engine_run(name: str) -> dict[str, Any]:
    """The engine's graph and community builds on one multi-hop set (module doc)."""
    from bench.raptor import load_multihop
    from rcp_agentic import Engine

    docs = load_multihop(name)[0]
    with tempfile.TemporaryDirectory() as tmp:
        eng = Engine(Path(tmp) / "engine", build_graph=True)
        try:
            res = eng.add_documents([{"id": d["id"], "title": d["title"], "text": d["text"]}
                                     for d in docs])
        finally:
            eng.close()
    reps = {r.unit: r for r in res.derived}
    graph, comm = reps["node"], reps["community"]
    row = {"docs": len(docs), "graph_s": round(graph.seconds, 2),
           "graph_embedding_s": round(graph.seconds_embedding, 2),
           "community_s": round(comm.seconds, 2),
           "community_clustering_s": round(comm.seconds_clustering, 2),
           "community_reports_s": round(comm.seconds_summarising, 2),
           "ratio": round(comm.seconds / graph.seconds, 3), "reason": comm.reason,
           "counts": comm.counts}
    print(f"engine {name}: {row}", flush=True)
    return row


def table(data: dict[str, Any]) -> str:
    """The Markdown table of every row in ``data`` (synthetic by size, then shared)."""
    head = ("| graph | entities | edges | graph build s | communities s (new) | ratio new | "
            "communities s (old) | ratio old | modularity L0..top new | old | coverage new / old |"
            " Leiden vertices / entity new / old |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for label, row in [(f"BA n={k}", v) for k, v in sorted(
            data.get("synthetic", {}).items(), key=lambda kv: int(kv[0]))] + [
            (k, v) for k, v in data.get("shared", {}).items()]:
        new, old = row["new"], row.get("old", {})
        old_s = ("-" if not old else f"> {old['capped_at']:.0f}" if old.get("seconds") is None
                 else f"{old['seconds']:.2f}")
        mod_old = (f"{old['modularity'][0]:.3f}..{old['modularity'][-1]:.3f}"
                   if old.get("modularity") else "-")
        rows.append(f"| {label} | {row['entities']:,} | {row['edges']:,} | "
                    f"{row['graph_build_s']:.2f} | {new['seconds']:.2f} | **{new['ratio']:.2f}** | "
                    f"{old_s} | {old.get('ratio', '-')} | "
                    f"{new['modularity'][0]:.3f}..{new['modularity'][-1]:.3f} | {mod_old} | "
                    f"{new['coverage']} / {old.get('coverage', '-')} | "
                    f"{new['leiden_nodes_per_entity']} / {old.get('leiden_nodes_per_entity', '-')} |")
    return head + "\n" + "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10000, 25000, 50000, 100000, 200000])
    ap.add_argument("--m", type=int, default=3, help="Barabási–Albert edges per new vertex")
    ap.add_argument("--shared", action="store_true", help="also the shared corpora")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--old-cap", type=float, default=600.0, help="seconds the old builder gets")
    ap.add_argument("--no-old", action="store_true")
    ap.add_argument("--engine", nargs="*", default=[], choices=["hotpotqa", "2wikimultihopqa"],
                    help="also end to end in an Engine on these sets")
    ap.add_argument("--table", action="store_true", help="print the saved table and exit")
    ap.add_argument("--old-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.old_child:
        old_child(*args.old_child)
        return 0
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.table:
        print(table(data))
        return 0
    if not args.no_old:
        from bench.frozen import FrozenUnavailable, old_communities

        try:
            old_communities()
        except FrozenUnavailable as exc:
            print(f"community_scale: the old builder: {exc}; --no-old runs without it",
                  file=sys.stderr)
            return 2
    import igraph  # noqa: F401  (imported before timing, as in a running engine)
    import leidenalg  # noqa: F401

    from rcp_agentic.graph import build_graph

    for n in args.sizes:
        chunks, extractor = synthetic(n, args.m)
        row = measure(f"BA n={n}", lambda: build_graph(chunks, extractor), args)
        row.update(m=args.m, passages=len(chunks))
        data.setdefault("synthetic", {})[str(n)] = {**row, "date": time.strftime("%Y-%m-%d")}
        _save(data)
    if args.shared:
        for name, (docs, build) in shared_sets().items():
            row = measure(name, build, args)
            data.setdefault("shared", {})[name] = {**row, "docs": docs,
                                                   "date": time.strftime("%Y-%m-%d")}
            _save(data)
    for name in args.engine:
        data.setdefault("engine", {})[name] = {**engine_run(name),
                                               "date": time.strftime("%Y-%m-%d")}
        _save(data)
    print()
    print(table(data))
    return 0


def _save(data: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    # As a script, derived units are built inside each write (as before background
    # updates): this bench reads each build's report and queries the units right after
    # the write. Set here, not on import, so a module importing this one keeps its mode.
    os.environ.setdefault("RCP_AGENTIC_DERIVED_UPDATES", "inline")
    raise SystemExit(main())
