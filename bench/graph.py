"""Knowledge-graph recall and build cost.

    python bench/graph.py recall [--sets hotpotqa 2wikimultihopqa] [--extractors builtin spacy]
    python bench/graph.py build [--limit N]
    python bench/graph.py engine [--sets hotpotqa 2wikimultihopqa]
    python bench/graph.py scifact [--queries N]
    python bench/graph.py latency [--corpora small large] [--pagerank-only large]

Results merge under each subcommand's key into ``bench/results/graph.json``.

* ``recall`` — per multi-hop set (``../shared/data/multihop``): the passages are indexed
  in an Engine (title as the document title; kept under ``bench/.cache/graph-engine-<set>``
  so reruns skip the embedding), the graph is built from the engine's live chunks
  (``r<rowid>`` keys) with each available extractor, and for every question:
  hybrid chunk retrieve (``mode="hybrid"``, ``k=candidate_k=100``), graph-only recall
  (personalised PageRank from the query's linked entities, with the hybrid scores as
  the small passage prior), and both fused by RRF (``rcp_agentic.pipeline.fusion.rrf``).
  Recall@2 / @5 of the supporting passages over the ranked *documents* (a document
  counts at its first chunk's rank, as ``bench/corrective.py`` counts). A question that
  links no entity falls back to the hybrid list. ``--ablate`` also runs the
  ablations (one setting changed at a time).
* ``engine`` — the shipped path: ``engine.retrieve`` hybrid against ``graph_recall=True``
  on each multi-hop set (an engine copy with its graph built once), Recall@2/@5 and how
  often graph recall fell back to hybrid (and why).
* ``build`` — SciFact (5,183 abstracts; ``--limit N``), chunked by the engine's own chunker
  at its defaults (200/30): graph build time split (extraction + title scans,
  resolution with name embedding, aggregation), entities / relations / synonyms totals
  and per second, peak RSS, and the ratio to the leaves' embedding time (goal <= 0.5x),
  that time extrapolated from a seeded sample of ``--sample`` chunks embedded in the same
  run (same machine load); then +10 % documents through ``update_graph`` (time, and
  equality with the full build). ``--scale``: the same on SciFact + both multi-hop
  corpora at 64/8 (≈ 46k chunks).
* ``scifact`` — issue 11's guard: SciFact train (5,183 abstracts, 505 queries) indexed in an
  Engine with ``build_graph=True`` (kept under ``bench/.cache/graph-engine-scifact``; the
  chunks are embedded through ``bench/embedcache.py``, so a rerun embeds nothing), then
  nDCG@10 over documents (a chunk counts for its document at its first occurrence) of
  hybrid (``k=candidate_k=100``) against hybrid + ``graph_recall=True`` in the same run,
  how many queries link an entity, the graph build (time, ``derived_status()``) and the
  p50 retrieve latency of both on a second pass (query embeddings cached by then).
* ``latency`` — p50 / p95 of ``retrieve(q, mode="hybrid", k=10)`` with and without
  ``graph_recall=True`` and of the PageRank part alone, beyond the query embedding (a first
  pass fills the query-vector cache), on ~5k chunks (a seeded subset of whole documents) and
  ~50k chunks (SciFact + both multi-hop corpora at 64/8), 100 queries each of SciFact,
  HotpotQA and 2Wiki, same run. Engines ``build_graph=True`` under
  ``bench/.cache/latency-engine-<small|large>``, chunk vectors through a private copy of the
  ``bench/embedcache.py`` cache (``bench/.cache/latency-vectors``). ``--pagerank-only large``
  times only the PageRank part at ~50k, on a graph built in memory (no embedding).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings as LCEmbeddings

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.data import data_path  # noqa: E402
from rcp_agentic import Engine  # noqa: E402
from rcp_agentic.graph import (BuiltinExtractor, ChunkText, GraphCache, GraphConfig,  # noqa: E402
                               GraphView, PPRWeights, build_graph, update_graph)
from rcp_agentic.pipeline.fusion import rrf  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "graph.json"
CACHE = ROOT / "bench" / ".cache"
SETS = ("hotpotqa", "2wikimultihopqa")
DEPTH = 100          # hybrid candidate_k and k; the graph list is cut to the same depth


# --- data ------------------------------------------------------------------------------------

def load_set(name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    root = data_path("multihop", name)
    rows = [json.loads(line) for line in (root / "corpus.jsonl").open(encoding="utf-8")]
    docs = [{"id": r["_id"], "title": r["title"], "text": f"{r['title']}\n\n{r['text']}"}
            for r in rows]
    questions = [json.loads(line) for line in (root / "questions.jsonl").open(encoding="utf-8")]
    return docs, questions


def engine_for(name: str, docs: list[dict[str, Any]]) -> Engine:
    path = CACHE / f"graph-engine-{name}"
    done = path / "indexed.txt"          # written once the whole corpus is in
    if path.exists() and not done.exists():
        import shutil

        shutil.rmtree(path)              # an interrupted run: start over
    engine = Engine(path)
    if not done.exists():
        t0 = time.perf_counter()
        engine.add_documents(docs)
        done.write_text(f"{len(docs)}\n")
        print(f"  indexed {len(docs)} passages of {name} in {time.perf_counter() - t0:.0f} s",
              flush=True)
    return engine


def engine_chunks(engine: Engine, titles: dict[str, str]) -> tuple[list[ChunkText], dict[str, str]]:
    """The engine's live chunks as the graph builder reads them, and uid -> row key."""
    chunks = []
    key_of = {}
    for rowid, uid, doc_id, start, _tokens, text in engine.store.live_leaves("chunk"):
        key = f"r{rowid}"
        key_of[uid] = key
        chunks.append(ChunkText(key, uid, doc_id, titles.get(doc_id), text, int(start or 0)))
    return chunks, key_of


def hybrid_lists(engine: Engine, name: str, questions: list[dict[str, Any]],
                 key_of: dict[str, str]) -> list[list[tuple[str, float]]]:
    """Per question, the hybrid chunk list (row key, fused score), cached on disk."""
    path = CACHE / f"graph-hybrid-{name}-{DEPTH}.json"
    if path.exists():
        return [[(k, s) for k, s in q] for q in json.loads(path.read_text())]
    out = []
    for q in questions:
        res = engine.retrieve(q["question"], k=DEPTH, mode="hybrid", candidate_k=DEPTH,
                              include_text=False)
        out.append([(key_of[h.id], float(h.score)) for h in res.hits if h.id in key_of])
    path.write_text(json.dumps(out))
    return out


def recall_at(ranked: Sequence[str], doc_of: dict[str, str], relevant: set[str],
              at: int) -> float:
    docs: list[str] = []
    for key in ranked:
        d = doc_of[key]
        if d not in docs:
            docs.append(d)
            if len(docs) >= at:
                break
    return len(set(docs) & relevant) / len(relevant)


# --- recall --------------------------------------------------------------------------------

def score_variant(view: GraphView, questions: list[dict[str, Any]],
                  hybrid: list[list[tuple[str, float]]], doc_of: dict[str, str]
                  ) -> dict[str, Any]:
    """R@2/R@5 of graph-only and hybrid+graph (RRF) for one view; also link statistics."""
    sums = {"graph R@2": 0.0, "graph R@5": 0.0, "fused R@2": 0.0, "fused R@5": 0.0,
            "fused3 R@2": 0.0, "fused3 R@5": 0.0}
    nolink = 0
    ms = []
    for q, hy in zip(questions, hybrid):
        rel = set(q["supporting_ids"])
        t0 = time.perf_counter()
        prior = dict(hy[:20])
        graph = view.recall(q["question"], prior=prior, k=DEPTH)
        ms.append((time.perf_counter() - t0) * 1000)
        if not graph:
            nolink += 1
            graph_keys = [k for k, _ in hy]   # fallback: hybrid
            fused_keys = fused3_keys = graph_keys
        else:
            graph_keys = [k for k, _ in graph]
            fused_keys = [k for k, _ in rrf({"hybrid": hy, "graph": graph},
                                            {"hybrid": 1.0, "graph": 1.0})]
            fused3_keys = [k for k, _ in rrf({"hybrid": hy, "graph": graph},
                                             {"hybrid": 1.0, "graph": 3.0})]
        for label, keys in (("graph", graph_keys), ("fused", fused_keys),
                            ("fused3", fused3_keys)):
            sums[f"{label} R@2"] += recall_at(keys, doc_of, rel, 2)
            sums[f"{label} R@5"] += recall_at(keys, doc_of, rel, 5)
    n = len(questions)
    out: dict[str, Any] = {k: round(v / n, 4) for k, v in sums.items()}
    out["no_link"] = nolink
    out["p50_ms"] = round(float(np.median(ms)), 2)
    return out


ABLATIONS: dict[str, Callable[[PPRWeights], PPRWeights]] = {
    "no passage-passage edges": lambda w: replace(w, p2p=0.0),
    "no synonym edges": lambda w: replace(w, synonym=0.0),
    "no specificity (uniform reset)": lambda w: replace(w, specificity="none"),
    "specificity idf": lambda w: replace(w, specificity="idf"),
    "no prior": lambda w: replace(w, prior=0.0),
    "prior 0.2": lambda w: replace(w, prior=0.2),
    "damping 0.3": lambda w: replace(w, damping=0.3),
    "damping 0.7": lambda w: replace(w, damping=0.7),
    "dates at full weight": lambda w: replace(w, date=1.0),
    "no co-occurrence edges": lambda w: replace(w, relation=0.0),
    "about = mention weight": lambda w: replace(w, about=1.0),
}


def extractors(names: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        if name == "builtin":
            out[name] = BuiltinExtractor()
        elif name.startswith("spacy"):
            from rcp_agentic.graph import SpacyExtractor

            model = name.split(":", 1)[1] if ":" in name else "en_core_web_sm"
            try:
                out[name] = SpacyExtractor(model)
            except Exception as exc:  # noqa: BLE001 - optional extra: report and skip
                print(f"  extractor {name} unavailable: {exc}")
    return out


def run_recall(args: argparse.Namespace) -> dict[str, Any]:
    from rcp_agentic.models.embedder import as_embedder

    out: dict[str, Any] = {"depth": DEPTH, "weights": PPRWeights().__dict__}
    for name in args.sets:
        docs, questions = load_set(name)
        engine = engine_for(name, docs)
        titles = {d["id"]: d["title"] for d in docs}
        chunks, key_of = engine_chunks(engine, titles)
        doc_of = {c.key: c.doc_id for c in chunks}
        hybrid = hybrid_lists(engine, name, questions, key_of)
        embedder = engine.embedder if args.synonyms else None
        embed = (lambda texts: embedder.embed_documents(texts)) if embedder else None
        base = {"hybrid R@2": 0.0, "hybrid R@5": 0.0}
        for q, hy in zip(questions, hybrid):
            rel = set(q["supporting_ids"])
            base["hybrid R@2"] += recall_at([k for k, _ in hy], doc_of, rel, 2)
            base["hybrid R@5"] += recall_at([k for k, _ in hy], doc_of, rel, 5)
        n = len(questions)
        row: dict[str, Any] = {"passages": len(docs), "chunks": len(chunks), "questions": n,
                               **{k: round(v / n, 4) for k, v in base.items()}}
        print(f"\n{name}: {len(docs)} passages, {len(chunks)} chunks, {n} questions; "
              f"hybrid R@2 {row['hybrid R@2']:.3f} R@5 {row['hybrid R@5']:.3f}")
        for ex_name, ex in extractors(args.extractors).items():
            t0 = time.perf_counter()
            graph = build_graph(chunks, ex, embed=embed, config=GraphConfig())
            build_s = time.perf_counter() - t0
            view = GraphView(graph)
            res = score_variant(view, questions, hybrid, doc_of)
            res.update({"build_s": round(build_s, 2), "entities": len(graph.entities),
                        "relations": len(graph.relations), "synonyms": len(graph.synonyms)})
            row[ex_name] = res
            print(f"  {ex_name:10s} graph R@2 {res['graph R@2']:.3f} R@5 {res['graph R@5']:.3f}"
                  f" | hybrid+graph RRF R@2 {res['fused R@2']:.3f} R@5 {res['fused R@5']:.3f}"
                  f" | RRF graph x3 R@2 {res['fused3 R@2']:.3f} R@5 {res['fused3 R@5']:.3f}"
                  f" | no link {res['no_link']}, p50 {res['p50_ms']:.1f} ms; "
                  f"{res['entities']} entities, {res['relations']} relations, "
                  f"{res['synonyms']} synonyms, built in {build_s:.1f} s", flush=True)
            if args.ablate and ex_name == args.extractors[0]:
                abl = {}
                for label, change in ABLATIONS.items():
                    r = score_variant(GraphView(graph, weights=change(PPRWeights())), questions,
                                      hybrid, doc_of)
                    abl[label] = r
                    print(f"    {label:32s} graph R@2 {r['graph R@2']:.3f} "
                          f"R@5 {r['graph R@5']:.3f} | fused R@2 {r['fused R@2']:.3f} "
                          f"R@5 {r['fused R@5']:.3f}", flush=True)
                if embed is None:
                    syn = build_graph(chunks, ex, embed=as_embedder(None).embed_documents)
                    r = score_variant(GraphView(syn), questions, hybrid, doc_of)
                    abl["with name-embedding synonyms"] = r
                    print(f"    {'with name-embedding synonyms':32s} graph R@2 {r['graph R@2']:.3f}"
                          f" R@5 {r['graph R@5']:.3f} | fused R@2 {r['fused R@2']:.3f} "
                          f"R@5 {r['fused R@5']:.3f} ({len(syn.synonyms)} synonyms)", flush=True)
                row[f"{ex_name} ablations"] = abl
        out[name] = row
        engine.close()
    return out


def graph_engine(name: str, docs: list[dict[str, Any]]) -> Engine:
    """The set's cached engine with its knowledge graph built (a copy of ``engine_for``'s,
    under ``bench/.cache/graph-engine-<set>-graph``; the graph is built once and rebuilt
    when the builder's identity changes, as the engine decides on open)."""
    import shutil

    engine_for(name, docs).close()
    path = CACHE / f"graph-engine-{name}-graph"
    if not (path / "graph-built.txt").exists():
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(CACHE / f"graph-engine-{name}", path)
    engine = Engine(path, build_graph=True)
    if not (path / "graph-built.txt").exists():
        t0 = time.perf_counter()
        engine.update_derived()
        (path / "graph-built.txt").write_text(f"{time.perf_counter() - t0:.1f} s\n")
    return engine


def run_engine(args: argparse.Namespace) -> dict[str, Any]:
    """Recall@2/@5 through the engine: ``engine.retrieve`` hybrid (k = candidate_k = 100)
    against the same with ``graph_recall=True``, on an engine with ``build_graph=True`` (a
    copy of the set's cached engine, its graph built once, under
    ``bench/.cache/graph-engine-<set>-graph``); also how often the graph list joined."""
    out: dict[str, Any] = {"depth": DEPTH}
    for name in args.sets:
        docs, questions = load_set(name)
        engine = graph_engine(name, docs)
        doc_of = {uid: d for _r, uid, d, *_ in engine.store.live_leaves("chunk")}
        row: dict[str, Any] = {"questions": len(questions)}
        for label, extra in (("hybrid", {}), ("graph recall", {"graph_recall": True})):
            r2 = r5 = 0.0
            why: dict[str, int] = {}
            for q in questions:
                res = engine.retrieve(q["question"], k=DEPTH, mode="hybrid", candidate_k=DEPTH,
                                      include_text=False, **extra)
                for note in (res.usage.notes if res.usage else None) or []:
                    if note.startswith("graph recall:"):
                        why[note] = why.get(note, 0) + 1
                ranked = [h.id for h in res.hits]
                rel = set(q["supporting_ids"])
                r2 += recall_at(ranked, doc_of, rel, 2)
                r5 += recall_at(ranked, doc_of, rel, 5)
            n = len(questions)
            row[label] = {"R@2": round(r2 / n, 4), "R@5": round(r5 / n, 4), "fallbacks": why}
            print(f"{name:16s} {label:13s} R@2 {r2 / n:.4f} R@5 {r5 / n:.4f}"
                  + (f"  fallbacks {why}" if why else ""), flush=True)
        out[name] = row
        engine.close()
    return out


# --- build cost (SciFact) ----------------------------------------------------------------

def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def corpus_chunks(docs: list[dict[str, Any]], size: int, overlap: int) -> list[ChunkText]:
    """The chunks the engine would make (its own chunker), keyed ``r1, r2, ...`` in order."""
    from rcp_agentic.corpus.chunker import chunk_text

    out: list[ChunkText] = []
    for d in docs:
        for c in chunk_text(d["text"], size, overlap):
            out.append(ChunkText(f"r{len(out) + 1}", f"{d['id']}#{c.index}", d["id"],
                                 d.get("title"), c.text, c.start))
    return out


def leaf_embedding_seconds(chunks: list[ChunkText], sample: int, embed: Any) -> float:
    """Seconds to embed every chunk with the engine's embedder, extrapolated from a seeded
    random sample timed in this run (same machine load as the graph build)."""
    rng = np.random.default_rng(0)
    idx = rng.choice(len(chunks), size=min(sample, len(chunks)), replace=False)
    texts = [chunks[i].text for i in idx]
    embed(texts[:8])  # warm-up (model load)
    t0 = time.perf_counter()
    for lo in range(0, len(texts), 64):
        embed(texts[lo:lo + 64])
    return (time.perf_counter() - t0) * len(chunks) / len(texts)


def build_cost(label: str, chunks: list[ChunkText], later: set[str], embed: Any,
               sample: int, queries: Sequence[str] = ()) -> dict[str, Any]:
    leaf_s = leaf_embedding_seconds(chunks, sample, embed)
    rss0 = peak_rss_mb()
    cache = GraphCache()
    t0 = time.perf_counter()
    graph = build_graph(chunks, BuiltinExtractor(), embed=embed, cache=cache)
    total = time.perf_counter() - t0
    st = cache.stats
    rss = peak_rss_mb()
    t1 = time.perf_counter()
    view = GraphView(graph)
    view_s = time.perf_counter() - t1
    latency = []
    linked = 0
    for q in queries:
        t = time.perf_counter()
        linked += bool(view.recall(q, k=100))
        latency.append((time.perf_counter() - t) * 1000)
    row: dict[str, Any] = {
        "label": label, "chunks": len(chunks), "leaf_embedding_s (extrapolated)": round(leaf_s, 1),
        "graph_s": round(total, 2), "extract_s": round(st.seconds_extract, 2),
        "resolve_s": round(st.seconds_resolve, 2),
        "of which name_embedding_s": round(st.seconds_embedding, 2),
        "aggregate_s": round(st.seconds_aggregate, 2), "view_s": round(view_s, 2),
        "mentions": st.mentions, "entities": st.entities, "relations": st.relations,
        "synonyms": st.synonyms, "names_embedded": st.names_embedded,
        "entities_per_s": round(st.entities / total, 1),
        "relations_per_s": round(st.relations / total, 1),
        "chunks_per_s": round(len(chunks) / total, 1),
        "graph_over_leaf_embedding": round(total / leaf_s, 3),
        "peak_rss_mb": round(rss, 1), "rss_before_build_mb": round(rss0, 1),
        "recall_p50_ms": round(float(np.median(latency)), 2) if latency else None,
        "queries_linked": f"{linked}/{len(latency)}"}
    if later:
        base = [c for c in chunks if c.doc_id not in later]
        added = [c for c in chunks if c.doc_id in later]
        # The 90 % build reuses the full build's name vectors (setup, not measured; it keeps
        # only its own names), so the update embeds exactly the names the 10 % adds.
        inc = GraphCache(name_vectors=dict(cache.name_vectors))
        build_graph(base, BuiltinExtractor(), embed=embed, cache=inc)
        t2 = time.perf_counter()
        updated = update_graph(inc, BuiltinExtractor(), added=added, embed=embed)
        row["update_plus_10pct_s"] = round(time.perf_counter() - t2, 2)
        row["update_equals_rebuild"] = updated == graph
    for k, v in row.items():
        print(f"  {k:34s} {v}", flush=True)
    return row


def run_build(args: argparse.Namespace) -> dict[str, Any]:
    from bench.raptor import load_multihop, scifact_docs, split_90_10
    from rcp_agentic.models.embedder import as_embedder

    embed = as_embedder(None).embed_documents
    docs, queries, _qrels = scifact_docs(args.limit)
    texts = list(queries.values())[:200]
    later = {d["id"] for d in split_90_10(docs, 0)[1]}
    chunks = corpus_chunks(docs, 200, 30)
    print(f"SciFact: {len(docs)} docs -> {len(chunks)} chunks (engine defaults 200/30)")
    out: dict[str, Any] = {"scifact": build_cost("scifact", chunks, later, embed, args.sample,
                                                  texts)}
    if args.scale:
        for name in SETS:
            docs += load_multihop(name)[0]
        chunks = corpus_chunks(docs, 64, 8)
        print(f"\nscale: SciFact + both multi-hop corpora, {len(docs)} docs -> {len(chunks)} "
              "chunks (64/8)")
        out["scale"] = build_cost("scale", chunks, set(), embed, args.sample, texts)
    return out


# --- SciFact nDCG guard (issue 11) --------------------------------------------------------

def scifact_engine(docs: list[dict[str, Any]]) -> tuple[Engine, dict[str, Any]]:
    """The SciFact engine with the graph, built once; returns it and its build record."""
    from bench.embedcache import EmbeddingCache, LangChainCachedEmbeddings, text_key

    path = CACHE / "graph-engine-scifact"
    done = path / "indexed.json"         # written once the whole corpus and graph are in
    if path.exists() and not done.exists():
        import shutil

        shutil.rmtree(path)              # an interrupted run: start over
    cache = EmbeddingCache(show_progress=True)
    engine = Engine(path, embedder=LangChainCachedEmbeddings(cache), build_graph=True)
    if done.exists():
        return engine, json.loads(done.read_text())
    texts = [c.text for c in corpus_chunks(docs, engine.config.chunk_size,
                                           engine.config.chunk_overlap)]
    hits = sum(text_key(t) in cache._index for t in texts)
    print(f"  embedding cache: {hits}/{len(texts)} chunk vectors cached", flush=True)
    t0 = time.perf_counter()
    res = engine.add_documents(docs)
    record: dict[str, Any] = {
        "chunks": res.chunks, "cache_hits": f"{hits}/{len(texts)}",
        "ingest_s": round(time.perf_counter() - t0, 1),
        "embedding_s": round(res.seconds_embedding, 1),
        "derived": [{k: v for k, v in d.__dict__.items()} for d in res.derived]}
    done.write_text(json.dumps(record, default=str))
    return engine, record


def run_scifact(args: argparse.Namespace) -> dict[str, Any]:
    from bench.metrics import ndcg_at_k
    from bench.raptor import scifact_docs

    docs, queries, qrels = scifact_docs()
    if args.queries:
        queries = dict(list(queries.items())[:args.queries])
    engine, build = scifact_engine(docs)
    status = engine.derived_status()
    graph_s = sum(float(d.get("seconds") or 0.0) for d in build["derived"])
    print(f"SciFact: {len(docs)} docs, {build['chunks']} chunks (cache {build['cache_hits']}), "
          f"ingest {build['ingest_s']} s of which embedding {build['embedding_s']} s, "
          f"graph build {graph_s:.1f} s", flush=True)
    for d in build["derived"]:
        print(f"  derived {d['unit']}: mode {d['mode']}, {d['added']} units, "
              f"{d['seconds']:.1f} s (extract {d['seconds_extracting']:.1f} s, embed "
              f"{d['seconds_embedding']:.1f} s), counts {d['counts']}", flush=True)
    print(f"  derived_status: {status}", flush=True)
    variants = {"hybrid": {}, "hybrid + graph_recall": {"graph_recall": True}}
    runs: dict[str, dict[str, list[str]]] = {v: {} for v in variants}
    ms: dict[str, list[float]] = {v: [] for v in variants}
    linked: set[str] = set()             # the query names an entity of the graph
    voted: set[str] = set()              # ... and the graph list joined the fusion
    for rnd in (1, 2):                   # round 1 fills the query-embedding cache; 2 is timed
        for qid, text in queries.items():
            for label, extra in variants.items():
                t0 = time.perf_counter()
                res = engine.retrieve(text, k=DEPTH, mode="hybrid", candidate_k=DEPTH,
                                      include_text=False, **extra)
                elapsed = (time.perf_counter() - t0) * 1000
                if rnd == 2:
                    ms[label].append(elapsed)
                    continue
                runs[label][qid] = [h.chunk.doc_id for h in res.hits if h.chunk is not None]
                notes = (res.usage.notes if res.usage else None) or []
                if extra and not any("names no entity" in n for n in notes):
                    linked.add(qid)
                if extra and not any(n.startswith("graph recall:") for n in notes):
                    voted.add(qid)
        print(f"  pass {rnd} done", flush=True)
    out: dict[str, Any] = {"documents": len(docs), "queries": len(queries), "depth": DEPTH,
                           "build": build, "graph_build_s": round(graph_s, 2),
                           "derived_status": status,
                           "queries_linking_an_entity": len(linked),
                           "queries_graph_list_fused": len(voted)}
    changed = sum(runs["hybrid"][q][:10] != runs["hybrid + graph_recall"][q][:10]
                  for q in queries)
    print(f"\n{'variant':24s} {'nDCG@10':>8s} {'p50 ms':>8s}")
    for label in variants:
        row = {"ndcg10": round(ndcg_at_k(runs[label], qrels, 10), 4),
               "p50_ms": round(float(np.median(ms[label])), 2)}
        out[label] = row
        print(f"{label:24s} {row['ndcg10']:8.4f} {row['p50_ms']:8.2f}")
    delta = out["hybrid + graph_recall"]["ndcg10"] - out["hybrid"]["ndcg10"]
    out["ndcg10_delta"] = round(delta, 4)
    out["queries_top10_changed"] = changed
    sub_qrels = {q: qrels[q] for q in linked}
    per_query = {label: {q: ndcg_at_k({q: runs[label][q]}, {q: qrels[q]}, 10) for q in linked}
                 for label in variants}
    out["linked_only"] = {label: round(ndcg_at_k(runs[label], sub_qrels, 10), 4)
                          for label in variants}
    out["linked_wins_losses"] = [
        sum(per_query["hybrid + graph_recall"][q] > per_query["hybrid"][q] + 1e-9 for q in linked),
        sum(per_query["hybrid + graph_recall"][q] < per_query["hybrid"][q] - 1e-9 for q in linked)]
    print(f"delta {delta:+.4f}; {len(linked)}/{len(queries)} queries link an entity, the graph "
          f"list joined the fusion for {len(voted)}; top-10 documents changed for {changed}")
    print(f"linked queries only: hybrid {out['linked_only']['hybrid']:.4f}, + graph "
          f"{out['linked_only']['hybrid + graph_recall']:.4f}; graph better on "
          f"{out['linked_wins_losses'][0]}, worse on {out['linked_wins_losses'][1]}")
    engine.close()
    return out


# --- query latency at ~5k and ~50k chunks (issue 11) -------------------------------------

LATENCY_CHUNKING = (64, 8)               # as ``build --scale``: SciFact + both multi-hop at 64/8


def latency_corpora(small: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ~50k-chunk corpus (SciFact + HotpotQA + 2Wiki passages) and a nested ~``small``-chunk
    subset of it: whole documents in a seeded random order until ``small`` chunks."""
    from bench.raptor import load_multihop, scifact_docs

    docs = list(scifact_docs()[0])
    for name in SETS:
        docs += load_multihop(name)[0]
    size, overlap = LATENCY_CHUNKING
    counts: dict[str, int] = {}
    for c in corpus_chunks(docs, size, overlap):
        counts[c.doc_id] = counts.get(c.doc_id, 0) + 1
    order = np.random.default_rng(0).permutation(len(docs))
    subset, total = [], 0
    for i in order:
        if total >= small:
            break
        subset.append(docs[int(i)])
        total += counts.get(docs[int(i)]["id"], 0)
    return docs, subset


def latency_queries(per_set: int) -> list[str]:
    """``per_set`` SciFact claims, HotpotQA and 2Wiki questions each (first ones, fixed)."""
    from bench.raptor import scifact_docs

    out = list(scifact_docs()[1].values())[:per_set]
    for name in SETS:
        out += [q["question"] for q in load_set(name)[1][:per_set]]
    return out


class HashedEmbeddings(LCEmbeddings):
    """Seeded random unit vectors (384-d, MiniLM's size) keyed by the text's hash: the latency
    of search beyond the query embedding depends on the number and size of the vectors, not
    on what they mean, so the ≈50k point does not wait an hour for MiniLM."""

    dim = 384

    def _vector(self, text: str) -> list[float]:
        import hashlib

        seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(),
                              "little")
        v = np.random.default_rng(seed).standard_normal(self.dim)
        return (v / np.linalg.norm(v)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def latency_engine(label: str, docs: list[dict[str, Any]], cache: Any, hashed: bool = False
                   ) -> tuple[Engine, dict[str, Any]]:
    """An engine over ``docs`` at :data:`LATENCY_CHUNKING` with ``build_graph=True``, built once
    under ``bench/.cache/latency-engine-<label>`` (chunk vectors through ``cache``, or
    :class:`HashedEmbeddings` with ``hashed``)."""
    from bench.embedcache import LangChainCachedEmbeddings, text_key

    if hashed:
        label = f"{label}-hashed"
    path = CACHE / f"latency-engine-{label}"
    done = path / "indexed.json"         # written once the whole corpus and graph are in
    if path.exists() and not done.exists():
        import shutil

        shutil.rmtree(path)              # an interrupted run: start over
    size, overlap = LATENCY_CHUNKING
    embedder = HashedEmbeddings() if hashed else LangChainCachedEmbeddings(cache)
    engine = Engine(path, embedder=embedder, build_graph=True,
                    chunk_size=size, chunk_overlap=overlap)
    if done.exists():
        return engine, json.loads(done.read_text())
    texts = [c.text for c in corpus_chunks(docs, size, overlap)]
    hits = 0 if hashed else sum(text_key(t) in cache._index for t in texts)
    print(f"  {label}: {len(docs)} docs, {len(texts)} chunks; embedding cache "
          f"{hits}/{len(texts)}", flush=True)
    t0 = time.perf_counter()
    res = engine.add_documents(docs)
    record: dict[str, Any] = {
        "documents": len(docs), "chunks": res.chunks, "cache_hits": f"{hits}/{len(texts)}",
        "ingest_s": round(time.perf_counter() - t0, 1),
        "embedding_s": round(res.seconds_embedding, 1),
        "graph_s": round(sum(float(d.seconds or 0.0) for d in res.derived), 1),
        "peak_rss_mb": round(peak_rss_mb(), 1)}
    done.write_text(json.dumps(record))
    print(f"  {label}: ingested in {record['ingest_s']} s (embedding {record['embedding_s']} s,"
          f" graph {record['graph_s']} s)", flush=True)
    return engine, record


def _pct(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2)


def time_queries(engine: Engine, queries: Sequence[str], rounds: int) -> dict[str, Any]:
    """p50/p95 of ``retrieve(q, mode="hybrid", k=10)`` without and with ``graph_recall``, and
    of the PageRank part alone (``GraphView.recall``), over all queries and over the queries
    that link an entity (the others fall back to hybrid). A first untimed pass fills the
    engine's query-vector cache (and loads the graph view), so the times exclude the query
    embedding; the variants alternate query by query (same machine load)."""
    variants: dict[str, dict[str, Any]] = {"hybrid": {}, "hybrid + graph_recall":
                                           {"graph_recall": True}}
    linked: list[bool] = []
    for q in queries:                    # warm-up: query vectors, graph view, caches
        for extra in variants.values():
            res = engine.retrieve(q, mode="hybrid", k=10, **extra)
            notes = (res.usage.notes if res.usage else None) or []
            if extra:
                linked.append(not any("names no entity" in n for n in notes))
    view = engine.graph_view()
    ms: dict[str, list[list[float]]] = {v: [[] for _ in queries] for v in variants}
    ms[PAGERANK] = [[] for _ in queries]
    for _ in range(rounds):
        for i, q in enumerate(queries):
            for label, extra in variants.items():
                t0 = time.perf_counter()
                engine.retrieve(q, mode="hybrid", k=10, **extra)
                ms[label][i].append((time.perf_counter() - t0) * 1000)
            if view is not None:
                t0 = time.perf_counter()
                view.recall(q, k=DEPTH)
                ms[PAGERANK][i].append((time.perf_counter() - t0) * 1000)
    return {"queries": len(queries), "rounds": rounds,
            "queries_linking_an_entity": sum(linked), **_percentiles(ms, linked)}


PAGERANK = "PageRank part (GraphView.recall)"


def _percentiles(ms: dict[str, list[list[float]]], linked: list[bool]) -> dict[str, Any]:
    """p50/p95 per variant over every timing, and over the linked queries' timings."""
    out: dict[str, Any] = {}
    for label, per_query in ms.items():
        every = [t for times in per_query for t in times]
        if not every:
            continue
        some = [t for times, ok in zip(per_query, linked) if ok for t in times]
        out[label] = {"p50_ms": _pct(every, 50), "p95_ms": _pct(every, 95)}
        if some:
            out[label].update({"linked p50_ms": _pct(some, 50), "linked p95_ms": _pct(some, 95)})
    return out


def time_pagerank(docs: list[dict[str, Any]], queries: Sequence[str],
                  rounds: int) -> dict[str, Any]:
    """The PageRank part alone (``GraphView.recall``, as in :func:`time_queries`) over a graph
    built in memory from ``docs`` at :data:`LATENCY_CHUNKING` by the builtin extractor,
    without name-embedding synonym edges (no leaf or name vectors needed)."""
    size, overlap = LATENCY_CHUNKING
    chunks = corpus_chunks(docs, size, overlap)
    t0 = time.perf_counter()
    graph = build_graph(chunks, BuiltinExtractor(), embed=None)
    view = GraphView(graph)
    build_s = time.perf_counter() - t0
    linked = [bool(view.recall(q, k=DEPTH)) for q in queries]   # warm-up
    ms: list[list[float]] = [[] for _ in queries]
    for _ in range(rounds):
        for i, q in enumerate(queries):
            t1 = time.perf_counter()
            view.recall(q, k=DEPTH)
            ms[i].append((time.perf_counter() - t1) * 1000)
    return {"queries": len(queries), "rounds": rounds, "queries_linking_an_entity": sum(linked),
            "chunks": len(chunks), "documents": len(docs),
            "graph": {"build_s (in memory, no synonyms)": round(build_s, 1),
                      "entities": len(graph.entities), "relations": len(graph.relations)},
            **_percentiles({PAGERANK: ms}, linked)}


def run_latency(args: argparse.Namespace) -> dict[str, Any]:
    """Query latency of graph-aware recall vs hybrid at ~5k and ~50k chunks (see
    :func:`time_queries`); both engines kept under ``bench/.cache/latency-engine-*``."""
    import shutil

    from bench.embedcache import EmbeddingCache

    # A private copy of the shared vector cache: this run adds ~43k vectors and must not race
    # another bench saving the shared file.
    vec_dir = CACHE / "latency-vectors"
    shared = sorted(CACHE.glob("minilm-*.npz"))
    if not vec_dir.exists() and shared:
        vec_dir.mkdir(parents=True)
        for f in shared:
            shutil.copy2(f, vec_dir / f.name)
    cache = EmbeddingCache(cache_dir=vec_dir, save_every=8192, show_progress=True)
    large, small = latency_corpora(args.small)
    queries = latency_queries(args.per_set)
    out: dict[str, Any] = {"chunking": list(LATENCY_CHUNKING), "k": 10, "mode": "hybrid"}
    corpora = {"small": small, "large": large}
    print(f"latency: {len(queries)} queries ({args.per_set} each of SciFact, HotpotQA, 2Wiki), "
          f"{args.rounds} timed round(s)", flush=True)
    print(f"{'corpus':>8s} {'chunks':>7s} {'variant':34s} {'p50 ms':>8s} {'p95 ms':>8s}"
          f" {'linked p50':>10s} {'linked p95':>10s}")
    for label in args.corpora:
        if label in args.pagerank_only:
            row = time_pagerank(corpora[label], queries, args.rounds)
            build = {"chunks": row["chunks"]}
        else:
            engine, build = latency_engine(label, corpora[label], cache,
                                           hashed=label in args.hashed)
            row = time_queries(engine, queries, args.rounds)
            row["build"] = build
            row["chunks"] = build["chunks"]
            engine.close()
        out[label] = row
        for variant, v in row.items():
            if isinstance(v, dict) and "p50_ms" in v:
                print(f"{label:>8s} {build['chunks']:7d} {variant:34s} {v['p50_ms']:8.2f} "
                      f"{v['p95_ms']:8.2f} {v.get('linked p50_ms', float('nan')):10.2f} "
                      f"{v.get('linked p95_ms', float('nan')):10.2f}", flush=True)
        print(f"{'':>8s} {'':>7s} queries linking an entity: "
              f"{row['queries_linking_an_entity']}/{len(queries)}", flush=True)
    return out


# --- main ----------------------------------------------------------------------------------

def save(key: str, value: dict[str, Any], path: Path = RESULTS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        data[key] = {**value, "date": time.strftime("%Y-%m-%d")}
        path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("recall")
    rec.add_argument("--sets", nargs="+", default=list(SETS))
    rec.add_argument("--extractors", nargs="+", default=["builtin", "spacy"])
    rec.add_argument("--ablate", action="store_true")
    rec.add_argument("--synonyms", action="store_true",
                     help="name-embedding synonym edges in the main run")
    bld = sub.add_parser("build")
    bld.add_argument("--limit", type=int, default=None)
    bld.add_argument("--sample", type=int, default=640, help="chunks timed for the leaf "
                     "embedding estimate")
    bld.add_argument("--scale", action="store_true", help="also ~46k chunks (64/8)")
    eng = sub.add_parser("engine")
    eng.add_argument("--sets", nargs="+", default=list(SETS))
    sci = sub.add_parser("scifact")
    sci.add_argument("--queries", type=int, default=None, help="first N queries only")
    lat = sub.add_parser("latency")
    lat.add_argument("--corpora", nargs="+", choices=["small", "large"],
                     default=["small", "large"])
    lat.add_argument("--small", type=int, default=5000, help="chunks of the small corpus")
    lat.add_argument("--per-set", type=int, default=100, help="queries from each data set")
    lat.add_argument("--rounds", type=int, default=2, help="timed passes over the queries")
    lat.add_argument("--hashed", nargs="*", choices=["small", "large"], default=[],
                     help="corpora embedded by seeded random vectors (HashedEmbeddings) "
                     "instead of MiniLM: same search cost, no hour of embedding")
    lat.add_argument("--pagerank-only", nargs="*", choices=["small", "large"], default=[],
                     help="corpora timed for the PageRank part alone, on a graph built in "
                     "memory (no engine, no embedding)")
    for p in (rec, eng, bld, sci, lat):
        p.add_argument("--key", default=None)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    result = {"recall": run_recall, "engine": run_engine, "build": run_build,
              "scifact": run_scifact,
              "latency": run_latency}[args.command](args)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    key = args.key or args.command
    save(key, result)
    print(f"\nwrote {RESULTS} [{key}] in {result['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    # As a script, derived units are built inside each write (as before background
    # updates): this bench reads each build's report and queries the units right after
    # the write. Set here, not on import, so a module importing this one keeps its mode.
    os.environ.setdefault("RCP_AGENTIC_DERIVED_UPDATES", "inline")
    raise SystemExit(main())
