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

    python bench/communities.py usefulness [--sets hotpotqa 2wikimultihopqa] [--questions N]
                                           [--no-drift]

* ``usefulness``: on each multi-hop dev set (every question), a ``cp -a`` copy of
  ``bench/corrective.py``'s engine with its graph (``bench/.cache/communities-engine-<set>``)
  gets its communities (``update_derived(only="community")``, timed against the graph
  build); then in the same run, at 500 / 1,000 / 2,000 tokens (``token_budget``): hybrid
  chunks, community units (no level, and each level), half chunks + half communities, and
  ``graph drift`` (``k=40``; its hits packed greedily into the budget with ``count_tokens``,
  a hit that would overflow passed over, as ``retrieve`` packs). Per question:
  answer-in-context (the SQuAD-normalised answer occurs in the packed text on word
  boundaries; yes/no answers are left out: "yes" occurs anywhere) and evidence recall (a
  supporting passage counts when the packed text holds one of its sentences —
  ``rcp_agentic.text.split_sentences``, normalised, of >= 4 words); p50 latency of chunk and
  community retrieve (1,000 tokens) and drift. Per-question rows are cached in
  ``bench/.cache/communities-usefulness-<set>.json``.

Results merge into ``bench/results/communities.json`` under ``scifact`` (and ``scale``,
``usefulness``).
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
from collections.abc import Mapping, Sequence
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.graph import corpus_chunks, peak_rss_mb, save  # noqa: E402
from rcp_agentic.graph import BuiltinExtractor, GraphCache, GraphData, build_graph, update_graph  # noqa: E402
from rcp_agentic.graph.communities.build import (CommunityHierarchy,  # noqa: E402
                                                 build_communities, entity_edges, modularity,
                                                 update_communities)
from rcp_agentic.graph.communities.config import CommunityConfig  # noqa: E402

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


# --- usefulness at a token budget (HotpotQA, 2Wiki) ---------------------------------------

CACHE = ROOT / "bench" / ".cache"
MULTIHOP = ("hotpotqa", "2wikimultihopqa")


def community_engine(name: str, vectors: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The set's engine with its graph and communities, and the community build's report.

    A ``cp -a`` copy of ``bench/corrective.py``'s ``corrective-graph-engine-<set>`` (the full
    corpus with its graph; never written to) at ``communities-engine-<set>`` (``-text`` with
    ``vectors="text"``: ``community_vectors``, default the engine's), the communities
    built in the copy once (``update_derived(only="community")``, timed; the report kept in
    ``communities-built.json`` with the graph build's seconds from the source's
    ``graph-built.json``)."""
    import shutil
    import subprocess

    from rcp_agentic import Engine

    from rcp_agentic.config import EngineConfig

    default = EngineConfig.model_fields["community_vectors"].default
    vectors = vectors or default
    src = CACHE / f"corrective-graph-engine-{name}"
    path = CACHE / (f"communities-engine-{name}" + ("" if vectors == default else f"-{vectors}"))
    done = path / "communities-built.json"
    if done.exists():
        return (Engine(path, build_graph=True, community_vectors=vectors),
                json.loads(done.read_text()))
    if not (src / "graph-built.json").exists():
        raise SystemExit(f"{src} is missing: run `python bench/corrective.py` first")
    if path.exists():
        shutil.rmtree(path)            # our own interrupted copy
    subprocess.run(["cp", "-a", str(src), str(path)], check=True)
    graph = json.loads((src / "graph-built.json").read_text())
    eng = Engine(path, build_graph=True, community_vectors=vectors)
    t0 = time.perf_counter()
    reports = eng.update_derived(only="community")
    wall = time.perf_counter() - t0
    rep = next((r for r in reports if r.unit == "community"), None)
    if rep is None or not rep.added:
        raise SystemExit(f"no communities were built in {path}: {reports}")
    graph_s = float(graph["seconds"])
    row = {"seconds": round(wall, 1), "seconds_clustering": round(rep.seconds_clustering, 1),
           "seconds_reports": round(rep.seconds_summarising, 1),
           "seconds_embedding": round(rep.seconds_embedding, 1), "levels": rep.levels + 1,
           "communities": rep.added, "counts": rep.counts, "graph_build_s": graph_s,
           "community_vectors": vectors,
           "over_graph_build": round(wall / graph_s, 3)}
    done.write_text(json.dumps(row))
    print(f"  {name}: communities built in {wall:.0f} s ({row})", flush=True)
    return eng, row


BUDGETS = (500, 1000, 2000)
YES_NO = {"yes", "no"}


def supporting_sentences(passage: str, min_words: int = 4) -> list[str]:
    """The normalised sentences of a supporting passage that count as evidence of it
    (``rcp_agentic.text.split_sentences``, the splitter the community reports cut with;
    sentences of fewer than ``min_words`` words are left out unless nothing else is left)."""
    from bench.raptor import normalize
    from rcp_agentic.text import split_sentences

    sents = [normalize(x.text) for x in split_sentences(passage, None, 0)]
    sents = [x for x in sents if x]
    long = [x for x in sents if len(x.split()) >= min_words]
    return long or ([max(sents, key=len)] if sents else [])


def pack_texts(texts: Sequence[str], budget: int) -> list[str]:
    """The texts, best first, that fit in ``budget`` tokens (``count_tokens``), a text that
    would overflow passed over as ``retrieve``'s packing passes it over."""
    from rcp_agentic.models.tokenizer import count_tokens

    out: list[str] = []
    used = 0
    for text in texts:
        n = count_tokens(text)
        if used + n <= budget:
            out.append(text)
            used += n
    return out


def judge_context(texts: Sequence[str], answer: str | None,
                  evidence: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """Answer-in-context (None when there is no answer to look for), evidence recall (a
    supporting passage counts when the packed text holds one of its sentences) and tokens
    of a packed context."""
    from bench.raptor import contains, normalize
    from rcp_agentic.models.tokenizer import count_tokens

    packed = normalize(" ".join(texts))
    found = [pid for pid, sents in evidence.items() if any(contains(packed, x) for x in sents)]
    return {"answer": None if answer is None else contains(packed, normalize(answer)),
            "recall": len(found) / max(1, len(evidence)), "found": found,
            "tokens": sum(count_tokens(t) for t in texts)}


def hit_evidence(text: str, evidence: Mapping[str, Sequence[str]]) -> bool:
    """Whether one hit's text holds a sentence of a supporting passage (the event of the
    ``community`` confidence family)."""
    from bench.raptor import contains, normalize

    norm = normalize(text)
    return any(contains(norm, x) for sents in evidence.values() for x in sents)


def multihop_questions(name: str) -> list[dict[str, Any]]:
    """The set's dev questions with ``evidence`` ({supporting id: its sentences}) and
    ``target`` (the answer, None for yes/no answers: "yes" occurs in any text)."""
    from bench.data import data_path

    root = data_path("multihop", name)
    text = {r["_id"]: r["text"] for r in map(json.loads, (root / "corpus.jsonl").open())}
    out = []
    for q in map(json.loads, (root / "questions.jsonl").open()):
        ans = str(q.get("answer") or "").strip()
        out.append({**q, "evidence": {pid: supporting_sentences(text[pid])
                                      for pid in q["supporting_ids"]},
                    "target": None if not ans or ans.lower() in YES_NO else ans})
    return out


def _texts(hits: Sequence[Any]) -> list[str]:
    return [h.text or "" for h in hits]


def usefulness_set(name: str, limit: int | None, drift: bool,
                   vectors: str | None = None) -> dict[str, Any]:
    """Every system at every budget on one set, per question (cached per question)."""
    eng, build = community_engine(name, vectors)
    store = eng.communities()
    assert store is not None
    levels = list(range(store.top_level + 1))
    questions = multihop_questions(name)[:limit]
    ops = (eng.capabilities().get("graph") or {}).get("ops") or []
    drift = drift and "drift" in ops
    cache = CACHE / f"communities-usefulness-{name}-{eng.config.community_vectors}.json"
    per_q: dict[str, Any] = json.loads(cache.read_text()) if cache.exists() else {}
    lat: dict[str, list[float]] = {"community": [], "drift": [], "chunk": []}
    t_start = time.perf_counter()
    for n, q in enumerate(questions):
        key = q["_id"] + ("+drift" if drift else "")
        if key in per_q:
            continue
        ev, target, text = q["evidence"], q["target"], q["question"]
        row: dict[str, Any] = {}
        for b in BUDGETS:
            t0 = time.perf_counter()
            chunks = eng.retrieve(text, k=60, mode="hybrid", unit="chunk", token_budget=b).hits
            ms_chunk = (time.perf_counter() - t0) * 1000
            t0 = time.perf_counter()
            comm = eng.retrieve(text, k=60, mode="hybrid", unit="community", token_budget=b).hits
            ms_comm = (time.perf_counter() - t0) * 1000
            if b == 1000:
                lat["chunk"].append(ms_chunk)
                lat["community"].append(ms_comm)
            row[f"chunk@{b}"] = judge_context(_texts(chunks), target, ev)
            row[f"community@{b}"] = judge_context(_texts(comm), target, ev)
            for lv in levels:
                got = eng.retrieve(text, k=60, mode="hybrid", unit="community", level=lv,
                                   token_budget=b).hits
                row[f"community L{lv}@{b}"] = judge_context(_texts(got), target, ev)
            half_c = eng.retrieve(text, k=60, mode="hybrid", unit="chunk",
                                  token_budget=b // 2).hits
            half_m = eng.retrieve(text, k=60, mode="hybrid", unit="community",
                                  token_budget=b - b // 2).hits
            row[f"chunks+communities@{b}"] = judge_context(_texts(half_c) + _texts(half_m),
                                                          target, ev)
        if drift:
            t0 = time.perf_counter()
            res = eng.graph("drift", query=text, k=40)
            ms = (time.perf_counter() - t0) * 1000
            lat["drift"].append(ms)
            texts = _texts(res.hits)
            row["drift_hits"] = len(texts)
            row["drift_followups"] = len(res.followups or [])
            row["drift_units"] = sorted({str(h.unit) for h in res.hits})
            for b in BUDGETS:
                row[f"drift@{b}"] = judge_context(pack_texts(texts, b), target, ev)
        row["ms"] = {k: v[-1] for k, v in lat.items() if v}
        per_q[key] = row
        if (n + 1) % 20 == 0:
            cache.write_text(json.dumps(per_q))
            print(f"    {name}: {n + 1}/{len(questions)} questions "
                  f"({time.perf_counter() - t_start:.0f} s)", flush=True)
    cache.write_text(json.dumps(per_q))
    rows = [per_q[q["_id"] + ("+drift" if drift else "")] for q in questions]
    eng.close()
    # A comparison question names its answer ("... Forbidden Ground or Free Guy?"): any text
    # about either option holds it, so answer-in-context is also given without them.
    from bench.raptor import contains, normalize

    named = [q["target"] is not None and contains(normalize(q["question"]), normalize(q["target"]))
             for q in questions]
    return {"build": build, "levels": len(levels), "questions": len(questions),
            "with_answer": sum(q["target"] is not None for q in questions),
            "answer_named_in_question": sum(named),
            "drift": drift, "summary": summarise(rows),
            "summary_answer_not_in_question": summarise([r for r, n in zip(rows, named)
                                                         if not n]),
            "head_to_head": head_to_head(rows),
            "latency_p50_ms": {k: round(statistics.median([r["ms"][k] for r in rows
                                                           if k in r.get("ms", {})]), 1)
                               for k in ("chunk", "community", "drift")
                               if any(k in r.get("ms", {}) for r in rows)}}


def summarise(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per system@budget: mean answer-in-context (over questions with an answer), mean
    evidence recall, share of questions with every supporting passage, mean tokens."""
    out: dict[str, dict[str, float]] = {}
    for key in rows[0]:
        if "@" not in key:
            continue
        got = [r[key] for r in rows if key in r]
        answers = [g["answer"] for g in got if g["answer"] is not None]
        out[key] = {"answer_in_context": round(statistics.mean(answers), 4) if answers else 0.0,
                    "evidence_recall": round(statistics.mean(g["recall"] for g in got), 4),
                    "all_evidence": round(statistics.mean(g["recall"] == 1.0 for g in got), 4),
                    "tokens": round(statistics.mean(g["tokens"] for g in got), 1)}
    return out


def head_to_head(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per budget and system vs chunk-only: questions whose answer only one of them holds."""
    out: dict[str, dict[str, int]] = {}
    for key in rows[0]:
        system, _, b = key.partition("@")
        if not b or system == "chunk":
            continue
        pairs = [(r[f"chunk@{b}"]["answer"], r[key]["answer"]) for r in rows
                 if key in r and r[key]["answer"] is not None]
        out[key] = {"only_chunk": sum(c and not m for c, m in pairs),
                    "only_" + system: sum(m and not c for c, m in pairs),
                    "both": sum(c and m for c, m in pairs)}
    return out


def print_usefulness(name: str, res: Mapping[str, Any]) -> None:
    print(f"\n{name}: {res['questions']} questions ({res['with_answer']} with a non-yes/no "
          f"answer), {res['levels']} levels; latency p50 {res['latency_p50_ms']} ms")
    print(f"  {'system':30s} {'budget':>6s} {'answer':>7s} {'answer*':>7s} {'ev.rec':>7s} "
          f"{'all ev':>7s} {'tokens':>7s}")
    summary = res["summary"]
    other = res["summary_answer_not_in_question"]
    print(f"  (answer* = answer-in-context without the {res['answer_named_in_question']} "
          "questions that name their answer)")
    for b in BUDGETS:
        for key, r in summary.items():
            system, _, kb = key.partition("@")
            if kb == str(b):
                print(f"  {system:30s} {b:6d} {r['answer_in_context']:7.3f} "
                      f"{other[key]['answer_in_context']:7.3f} {r['evidence_recall']:7.3f} "
                      f"{r['all_evidence']:7.3f} {r['tokens']:7.0f}")


def run_usefulness(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in args.sets:
        res = usefulness_set(name, args.questions, not args.no_drift, args.vectors)
        label = name if args.vectors is None else f"{name} (vectors={args.vectors})"
        print_usefulness(label, res)
        out[label] = res
    return out


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


def save_usefulness(result: Mapping[str, Any]) -> None:
    """Merge the sets' results into ``usefulness`` (the other sets' and keys kept)."""
    old = json.loads(RESULTS.read_text()).get("usefulness", {}) if RESULTS.exists() else {}
    save("usefulness", {**{k: v for k, v in old.items() if k != "date"}, **result}, RESULTS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("part", nargs="?", default="hierarchy", choices=("hierarchy", "usefulness"))
    ap.add_argument("--limit", type=int, default=None, help="SciFact subset (every relevant doc)")
    ap.add_argument("--max-size", type=int, default=CommunityConfig().max_community_size)
    ap.add_argument("--embed", action="store_true", help="name embedding (synonym edges)")
    ap.add_argument("--scale", action="store_true", help="also ~46k chunks (64/8)")
    ap.add_argument("--no-variants", action="store_true")
    ap.add_argument("--sets", nargs="+", default=list(MULTIHOP), choices=MULTIHOP)
    ap.add_argument("--questions", type=int, default=None, help="usefulness: first N per set")
    ap.add_argument("--no-drift", action="store_true", help="usefulness: skip drift")
    ap.add_argument("--vectors", choices=("text", "sources"), default=None,
                    help="usefulness: community_vectors (default: the engine's default)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    if args.part == "usefulness":
        save_usefulness(run_usefulness(args))
        print(f"\nwrote {RESULTS} (usefulness) in {time.perf_counter() - started:.0f} s")
        return 0
    result = run(args)
    for key, value in result.items():
        save(key, {**value, "wall_s": round(time.perf_counter() - started, 1)}, RESULTS)
    print(f"\nwrote {RESULTS} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    # As a script, derived units are built inside each write (as before background
    # updates): this bench reads each build's report and queries the units right after
    # the write. Set here, not on import, so a module importing this one keeps its mode.
    os.environ.setdefault("RCP_AGENTIC_DERIVED_UPDATES", "inline")
    raise SystemExit(main())
