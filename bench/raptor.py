"""RAPTOR tree-node units: quality at a token budget, build cost, incremental updates, confidence.

    python bench/raptor.py multihop [--sets hotpotqa 2wikimultihopqa] [--budgets 500 1000 2000]
    python bench/raptor.py scifact [--write-params]
    python bench/raptor.py scale [--chunk-size 64 --chunk-overlap 8]

Each subcommand prints its tables and merges its numbers under its own key into
``bench/results/raptor.json``. Every engine is built into a fresh temporary
directory (``--keep DIR`` keeps it) with the default embedder and ``build_tree=True``.

* ``multihop`` — per set (``../shared/data/multihop``): index 90 % of the passages, add
  the other 10 % (the tree is updated incrementally), score the tree, rebuild the
  tree in full (``update_derived(full=True)``) and score every method again. For each
  question and cl100k budget, the packed hits (``k=200`` so the budget binds) of
  chunk-only hybrid (``unit="chunk"``), the collapsed tree (``unit="tree-node"``),
  ``unit="document"`` and the tree traversal (``tree_search="traversal"`` at k=200 and
  k=10: traversal keeps the best ``k`` nodes per layer) are joined and scored:
  answer-in-context (the SQuAD-normalised answer occurs in the normalised text) and
  evidence recall (a supporting passage counts when the text holds one of its
  sentences of ≥ 4 normalised words, or its longest sentence if none is that long).
* ``scifact`` — SciFact train (``--limit N``: a subset of N docs holding every relevant
  one, as ``bench/scifact.py`` makes it): index 90 %, add 10 % (incremental), score, rebuild in
  full, score again. Build cost: leaf embedding (``AddResult.seconds_embedding`` minus
  the tree's), the full tree build split into clustering (everything else in the
  builder's run, store writes included), summarising and embedding summaries, its
  ratio to the leaves' embedding time, peak RSS (``ru_maxrss``). nDCG@10 of hybrid
  tree-node retrieval, a node counting for the documents it covers (``meta.doc_ids``,
  most-covered first): "expanded" puts each hit's documents at consecutive ranks
  (trec_eval's first-occurrence dedup); "by hit" gives hit *i* the gain of the
  relevant documents it covers not counted above it (capped at 1 per query). Then
  confidence: the top 20 of the collapsed tree in every mode for every query, a
  tree-node relevant when it covers a leaf of a relevant document; the ``tree-node``
  models are fitted with 5 folds by query (the engine's own features: the pooled
  BM25 ceiling and the pooled rank, recorded as the engine computes them) and the
  held-out ECE / AUROC reported next to the chunk hits of the same pool under the
  shipped chunk models. ``--write-params`` adds the tree-node models (fitted on all
  queries) to ``rcp_agentic/data/calibration.json``, the other models unchanged.
* ``scale`` — SciFact + both multi-hop corpora (``--corpora``) with small chunks (64/8:
  ≈ 46k leaves), one ``add_documents`` call: the same build-cost split and peak RSS.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import random
import re
import resource
import string
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scifact  # noqa: E402
from bench.confidence import (  # noqa: E402
    collect_pool_samples,
    fit_tree_node,
    print_tree_table,
    write_tree_models,
)
from bench.data import data_path  # noqa: E402
from bench.metrics import ndcg_at_k  # noqa: E402
from rcp_agentic import Engine  # noqa: E402
from rcp_agentic.engine import AddResult  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "raptor.json"
SETS = ("hotpotqa", "2wikimultihopqa")
BUDGETS = (500, 1000, 2000)
# name -> (retrieve options, k)
METHODS: dict[str, tuple[dict[str, Any], int]] = {
    "chunk": ({"unit": "chunk"}, 200),
    "tree (collapsed)": ({"unit": "tree-node"}, 200),
    "document": ({"unit": "document"}, 200),
    "tree traversal k=200": ({"unit": "tree-node", "tree_search": "traversal"}, 200),
    "tree traversal k=10": ({"unit": "tree-node", "tree_search": "traversal"}, 10),
}
TREE_METHODS = ("tree (collapsed)", "tree traversal k=200", "tree traversal k=10")


# --- text matching ----------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def normalize(text: str) -> str:
    """SQuAD answer normalisation: lowercase, no punctuation, no articles, single spaces."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def evidence_sentences(passage: str, min_words: int = 4) -> list[str]:
    """The normalised sentences of a passage that count as evidence of it."""
    sents = [normalize(s) for s in _SENTENCE_END.split(passage) if s.strip()]
    sents = [s for s in sents if s]
    long = [s for s in sents if len(s.split()) >= min_words]
    return long or ([max(sents, key=len)] if sents else [])


def contains(haystack: str, needle: str) -> bool:
    """``needle`` occurs in ``haystack`` on word boundaries (both normalised)."""
    return f" {needle} " in f" {haystack} "


# --- data ---------------------------------------------------------------------------------

def load_multihop(name: str) -> tuple[list[dict[str, Any]], dict[str, list[str]],
                                      list[dict[str, Any]]]:
    """Documents to index, evidence sentences per passage id, and the questions."""
    root = data_path("multihop", name)
    rows = [json.loads(line) for line in (root / "corpus.jsonl").open(encoding="utf-8")]
    docs = [{"id": r["_id"], "title": r["title"], "text": f"{r['title']}\n\n{r['text']}"}
            for r in rows]
    evidence = {r["_id"]: evidence_sentences(r["text"]) for r in rows}
    questions = [json.loads(line) for line in (root / "questions.jsonl").open(encoding="utf-8")]
    return docs, evidence, questions


def scifact_docs(limit: int | None = None,
                 ) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, dict[str, int]]]:
    """SciFact train as documents to index (``limit``: a subset holding every relevant doc)."""
    corpus, queries, qrels = scifact.load_dataset(limit)
    docs = [{"id": did, "text": text, "title": text.split("\n\n", 1)[0]}
            for did, text in corpus.items()]
    return docs, queries, qrels


def split_90_10(docs: list[dict[str, Any]], seed: int = 0) -> tuple[list[dict], list[dict]]:
    """A seeded 90 % / 10 % split of the documents (the 10 % arrive later)."""
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    cut = len(docs) - len(docs) // 10
    return [docs[i] for i in sorted(order[:cut])], [docs[i] for i in sorted(order[cut:])]


# --- build cost ------------------------------------------------------------------------------

def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (``getrusage`` ru_maxrss, Linux KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def tree_report(res: AddResult | list[Any]) -> Any:
    derived = res.derived if isinstance(res, AddResult) else res
    return next(r for r in derived if r.unit == "tree-node")


def cost_row(label: str, report: Any, leaf_embed: float, extra: dict[str, Any]) -> dict[str, Any]:
    """One build: the tree's run split into its parts, as a ratio to the leaves' embedding."""
    return {"label": label, "mode": report.mode, "nodes_added": report.added,
            "retired": report.retired, "kept": report.kept, "levels": report.levels,
            "leaf_embedding_s": round(leaf_embed, 2), "tree_s": round(report.seconds, 2),
            "clustering_s": round(report.seconds_clustering, 2),
            "summarising_s": round(report.seconds_summarising, 2),
            "summary_embedding_s": round(report.seconds_embedding, 2),
            "tree_over_leaf_embedding": round(report.seconds / leaf_embed, 3)
            if leaf_embed > 0 else None, **extra}


def ingest(engine: Engine, docs: list[dict[str, Any]]) -> tuple[AddResult, float]:
    """``add_documents``; returns the result and the seconds spent embedding the leaves."""
    res = engine.add_documents(docs)
    tree = tree_report(res)
    return res, res.seconds_embedding - tree.seconds_embedding


def print_cost(rows: Sequence[dict[str, Any]]) -> None:
    head = f"{'build':34s} {'mode':11s} {'leaves emb':>10s} {'tree':>7s} {'cluster':>8s} " \
           f"{'summ':>6s} {'sum emb':>7s} {'ratio':>6s} {'nodes':>6s} {'lv':>3s}"
    print(head)
    print("-" * len(head))
    for r in rows:
        ratio = r["tree_over_leaf_embedding"]
        print(f"{r['label']:34s} {r['mode']:11s} {r['leaf_embedding_s']:10.1f} {r['tree_s']:7.1f} "
              f"{r['clustering_s']:8.1f} {r['summarising_s']:6.1f} {r['summary_embedding_s']:7.1f} "
              f"{'-' if ratio is None else f'{ratio:.3f}':>6s} {r['nodes_added']:6d} "
              f"{r['levels']:3d}")


# --- quality at a token budget -------------------------------------------------------------

def score_questions(engine: Engine, questions: list[dict[str, Any]],
                    evidence: dict[str, list[str]], methods: Iterable[str],
                    budgets: Sequence[int]) -> dict[str, dict[str, dict[str, float]]]:
    """Mean answer-in-context, evidence recall, tokens and hits per method and budget."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for method in methods:
        options, k = METHODS[method]
        out[method] = {}
        for budget in budgets:
            ans = rec = tokens = hits = tree_hits = 0.0
            for q in questions:
                res = engine.retrieve(q["question"], k=k, token_budget=budget, **options)
                packed = normalize("\n".join(h.text or "" for h in res.hits))
                ans += contains(packed, normalize(q["answer"]))
                sup = q["supporting_ids"]
                rec += sum(any(contains(packed, s) for s in evidence[d]) for d in sup) / len(sup)
                tokens += (res.usage.tokens if res.usage else 0) or 0
                hits += len(res.hits)
                tree_hits += sum(h.unit == "tree-node" for h in res.hits)
            n = len(questions)
            out[method][str(budget)] = {"answer_in_context": round(ans / n, 4),
                                        "evidence_recall": round(rec / n, 4),
                                        "tokens": round(tokens / n, 1), "hits": round(hits / n, 2),
                                        "tree_node_hits": round(tree_hits / n, 2)}
    return out


def print_quality(name: str, table: dict[str, dict[str, dict[str, float]]]) -> None:
    budgets = list(next(iter(table.values())))
    head = f"{name:28s}" + "".join(f" {'ans@' + b:>9s} {'evid@' + b:>10s}" for b in budgets)
    print(head)
    print("-" * len(head))
    for method, per in table.items():
        print(f"{method:28s}" + "".join(f" {per[b]['answer_in_context']:9.3f} "
                                        f"{per[b]['evidence_recall']:10.3f}" for b in budgets))


def run_multihop(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"budgets": list(args.budgets),
                           "methods": {m: {**o, "k": k} for m, (o, k) in METHODS.items()}}
    for name in args.sets:
        docs, evidence, questions = load_multihop(name)
        first, later = split_90_10(docs, args.seed)
        with tempfile.TemporaryDirectory(prefix="rcp-raptor-") as tmp:
            path = args.keep / name if args.keep else Path(tmp) / "engine"
            engine = Engine(path, build_tree=True)
            t0 = time.perf_counter()
            res1, emb1 = ingest(engine, first)
            res2, emb2 = ingest(engine, later)
            print(f"\n{name}: {len(docs)} passages ({res1.chunks + res2.chunks} chunks), "
                  f"{len(questions)} questions; indexed in {time.perf_counter() - t0:.0f} s")
            incremental = score_questions(engine, questions, evidence, TREE_METHODS, args.budgets)
            status_incr = engine.derived_status()
            rebuild = tree_report(engine.update_derived(full=True))
            full = score_questions(engine, questions, evidence, METHODS, args.budgets)
            status = engine.derived_status()
            engine.close()
        print_quality(f"{name} (tree rebuilt)", full)
        print()
        print_quality(f"{name} after +10 % (incremental)",
                      {f"{m} (incr.)": v for m, v in incremental.items()})
        rows = [cost_row("90 % (first build)", tree_report(res1), emb1, {}),
                cost_row("+10 % (incremental)", tree_report(res2), emb2, {}),
                cost_row("full rebuild (100 %)", rebuild, emb1 + emb2, {})]
        print()
        print_cost(rows)
        out[name] = {"passages": len(docs), "chunks": res1.chunks + res2.chunks,
                     "questions": len(questions), "after_rebuild": full,
                     "after_incremental": incremental, "build": rows,
                     "tree_after_incremental": status_incr.get("tree-node"),
                     "tree_after_rebuild": status.get("tree-node")}
    return out


# --- SciFact: nDCG, build cost, incremental, confidence ---------------------------------

def ranked_docs(hits: Iterable[Any]) -> list[list[str]]:
    """Per hit, the documents it stands for: a chunk's own, a node's covered ones."""
    out = []
    for h in hits:
        if h.chunk is not None:
            out.append([h.chunk.doc_id])
        else:
            out.append(list((h.meta or {}).get("doc_ids") or []))
    return out


def ndcg_by_hit(per_hit: dict[str, list[list[str]]], qrels: dict[str, dict[str, int]],
                k: int = 10) -> float:
    """nDCG@k over hits: hit i gains the grades of the relevant documents it covers that no
    hit above it covered; the ideal is the usual one over documents; capped at 1."""
    scores = []
    for qid, rels in qrels.items():
        pos = {d: g for d, g in rels.items() if g > 0}
        if not pos:
            continue
        seen: set[str] = set()
        dcg = 0.0
        for i, docs in enumerate(per_hit.get(qid, [])[:k]):
            new = [d for d in docs if d in pos and d not in seen]
            seen.update(new)
            dcg += sum(pos[d] for d in new) / math.log2(i + 2)
        ideal = sorted(pos.values(), reverse=True)[:k]
        scores.append(min(1.0, dcg / sum(g / math.log2(i + 2) for i, g in enumerate(ideal))))
    return sum(scores) / len(scores) if scores else 0.0


def scifact_ndcg(engine: Engine, queries: dict[str, str],
                 qrels: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """Hybrid nDCG@10 of chunk, document and the collapsed tree (both tree-node countings)."""
    out: dict[str, dict[str, float]] = {}
    for label, options in (("chunk", {"unit": "chunk"}), ("document", {"unit": "document"}),
                           ("tree (collapsed)", {"unit": "tree-node"}),
                           ("tree traversal k=10", {"unit": "tree-node",
                                                    "tree_search": "traversal"})):
        per_hit: dict[str, list[list[str]]] = {}
        node_share = []
        for qid, text in queries.items():
            res = engine.retrieve(text, k=10, include_text=False, **options)
            per_hit[qid] = ranked_docs(res.hits)
            node_share.append(sum(h.unit == "tree-node" for h in res.hits) / max(1, len(res.hits)))
        expanded = {q: [d for docs in v for d in docs] for q, v in per_hit.items()}
        out[label] = {"ndcg10_expanded": round(ndcg_at_k(expanded, qrels, 10), 4),
                      "ndcg10_by_hit": round(ndcg_by_hit(per_hit, qrels, 10), 4),
                      "tree_node_share_top10": round(float(np.mean(node_share)), 4)}
    return out


def print_ndcg(title: str, table: dict[str, dict[str, float]]) -> None:
    print(f"{title:28s} {'nDCG@10 exp.':>12s} {'nDCG@10 hit':>12s} {'node share':>11s}")
    for label, r in table.items():
        print(f"{label:28s} {r['ndcg10_expanded']:12.4f} {r['ndcg10_by_hit']:12.4f} "
              f"{r['tree_node_share_top10']:11.3f}")


def run_scifact(args: argparse.Namespace) -> dict[str, Any]:
    docs, queries, qrels = scifact_docs(args.limit)
    first, later = split_90_10(docs, args.seed)
    out: dict[str, Any] = {"documents": len(docs), "queries": len(queries), "limit": args.limit}
    with tempfile.TemporaryDirectory(prefix="rcp-raptor-") as tmp:
        path = args.keep / "scifact" if args.keep else Path(tmp) / "engine"
        engine = Engine(path, build_tree=True)
        rss0 = peak_rss_mb()
        res1, emb1 = ingest(engine, first)
        res2, emb2 = ingest(engine, later)
        incr = scifact_ndcg(engine, queries, qrels)
        incr_status = engine.derived_status().get("tree-node")
        rebuild = tree_report(engine.update_derived(full=True))
        rss = peak_rss_mb()
        full = scifact_ndcg(engine, queries, qrels)
        status = engine.derived_status().get("tree-node")
        chunks = res1.chunks + res2.chunks
        print(f"SciFact train: {len(docs)} docs → {chunks} chunks; 90 % then +10 %; "
              f"peak RSS {rss:.0f} MB (model loaded: {rss0:.0f} MB)")
        rows = [cost_row("90 % (first build)", tree_report(res1), emb1,
                         {"ingest_s": round(res1.seconds, 2)}),
                cost_row("+10 % (incremental)", tree_report(res2), emb2,
                         {"ingest_s": round(res2.seconds, 2)}),
                cost_row(f"full rebuild (all {len(docs)} docs)", rebuild, emb1 + emb2,
                         {"peak_rss_mb": round(rss, 1)})]
        print_cost(rows)
        print(f"tree after rebuild: {status}\n")
        print_ndcg("SciFact, tree rebuilt", full)
        print_ndcg("SciFact, after +10 % (incr.)", incr)
        out.update({"chunks": chunks, "build": rows, "peak_rss_mb": round(rss, 1),
                    "ndcg_after_rebuild": full, "ndcg_after_incremental": incr,
                    "tree_after_incremental": incr_status, "tree_after_rebuild": status})

        t0 = time.perf_counter()
        samples = collect_pool_samples(engine, queries, qrels)
        print(f"\ncollected {len(samples)} labelled pool hits in {time.perf_counter() - t0:.0f} s")
        corpus = (f"{len(docs)} documents: every relevant one and the first others in file order"
                  if args.limit else "all documents")
        calibrator, metrics = fit_tree_node(samples, engine, args.folds, args.seed, args.l2,
                                            corpus=corpus)
        print_tree_table(metrics)
        print("\ntree-node models fitted on all queries (P = sigmoid(b + Σ w·f)):")
        for key, model in sorted(calibrator.models.items()):
            terms = ", ".join(f"{f} {w:+.3f}" for f, w in zip(model.features, model.coef))
            print(f"  {key:20s} b {model.intercept:+.3f}, {terms}")
        out["confidence"] = metrics
        out["confidence"]["models"] = {k: m.to_json() for k, m in calibrator.models.items()}
        if args.write_params:
            write_tree_models(calibrator)
            print("added the tree-node models to rcp_agentic/data/calibration.json")
        engine.close()
    return out


# --- scale -------------------------------------------------------------------------------------

def run_scale(args: argparse.Namespace) -> dict[str, Any]:
    docs = scifact_docs()[0] if "scifact" in args.corpora else []
    for name in SETS:
        if name in args.corpora:
            docs += load_multihop(name)[0]
    with tempfile.TemporaryDirectory(prefix="rcp-raptor-") as tmp:
        path = args.keep / "scale" if args.keep else Path(tmp) / "engine"
        engine = Engine(path, build_tree=True, chunk_size=args.chunk_size,
                        chunk_overlap=args.chunk_overlap)
        rss0 = peak_rss_mb()
        t0 = time.perf_counter()
        res, emb = ingest(engine, docs)
        wall = time.perf_counter() - t0
        rss = peak_rss_mb()
        status = engine.derived_status().get("tree-node")
        engine.close()
    row = cost_row(f"{res.chunks} leaves, one add_documents", tree_report(res), emb,
                   {"ingest_s": round(wall, 2), "peak_rss_mb": round(rss, 1)})
    print(f"{' + '.join(args.corpora)}: {len(docs)} docs → {res.chunks} chunks "
          f"(chunk_size {args.chunk_size}, overlap {args.chunk_overlap}); ingest {wall:.0f} s; "
          f"peak RSS {rss:.0f} MB (model loaded: {rss0:.0f} MB)")
    print_cost([row])
    print(f"tree: {status}")
    return {"corpora": list(args.corpora), "documents": len(docs), "chunks": res.chunks,
            "chunk_size": args.chunk_size,
            "chunk_overlap": args.chunk_overlap, "build": [row], "peak_rss_mb": round(rss, 1),
            "tree": status}


# --- main --------------------------------------------------------------------------------------

def save(key: str, value: dict[str, Any], path: Path = RESULTS) -> None:
    """Merge one subcommand's numbers into the results file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # subcommands may run side by side
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        data[key] = {**value, "date": time.strftime("%Y-%m-%d")}
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    runners: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
        "multihop": run_multihop, "scifact": run_scifact, "scale": run_scale}
    parsers = {name: sub.add_parser(name) for name in runners}
    for p in parsers.values():
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--keep", type=Path, default=None, help="build the engines under DIR")
        p.add_argument("--key", default=None, help="results key (default: the subcommand)")
    parsers["multihop"].add_argument("--sets", nargs="+", default=list(SETS))
    parsers["multihop"].add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS))
    parsers["scifact"].add_argument("--folds", type=int, default=5)
    parsers["scifact"].add_argument("--l2", type=float, default=1.0)
    parsers["scifact"].add_argument("--write-params", action="store_true")
    parsers["scifact"].add_argument("--limit", type=int, default=None,
                                    help="a corpus subset holding every relevant document")
    parsers["scale"].add_argument("--chunk-size", type=int, default=64)
    parsers["scale"].add_argument("--chunk-overlap", type=int, default=8)
    parsers["scale"].add_argument("--corpora", nargs="+", default=["scifact", *SETS],
                                  choices=["scifact", *SETS])
    args = ap.parse_args(argv)
    started = time.perf_counter()
    result = runners[args.command](args)
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
