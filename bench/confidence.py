"""Calibrated hit confidence that transfers: SciFact train + the multi-hop dev sets.

    python bench/confidence.py [--sets scifact hotpotqa 2wikimultihopqa] [--k 20] [--folds 5]
                               [--rerank-k 20 100] [--plot bench/results/reliability.png]
                               [--write-params] [--tree-node] [--graph] [--reuse-samples]
                               [--ablation]

For every judged query of every set, retrieves the top ``k`` hits in each mode (dense,
sparse, hybrid) and unit (chunk, document) from the set's engine, and the query's
recall lists (dense and sparse, ``candidate_k`` deep, as ``retrieve`` recalls them),
and labels a hit relevant iff its document is relevant: SciFact train by its qrels,
HotpotQA / 2WikiMultiHopQA dev (``../shared/data/multihop``) when it is one of the
question's supporting passages. ``--off-domain N`` more questions from another domain
run against each corpus (SciFact claims on a multi-hop corpus, multi-hop questions on
SciFact's) with no relevant hit, so the fit sees queries the corpus cannot answer
(without them the best hit of any query looks relevant: the features are relative).
Then, per mode and unit (tables over the sets' own queries, then with the off-domain ones):

* **leave one data set out** — fit on the other sets, score the held-out one: ECE (10
  equal-width bins) and AUROC of the held-out set's hits (the transfer test; targets
  ECE ≤ 0.05, AUROC ≥ 0.85 on each set);
* **in domain** — fit on all sets with 5 folds by query, score each set's held-out fold;
* a reliability diagram of the in-domain probabilities, and on SciFact the nDCG@10 /
  MRR@10 of plain RRF against the top ``--rerank-k`` hybrid documents re-ranked by the
  held-out probability (``--rerank-k 0`` skips it).

``--write-params`` refits on every query of every set (each set weighted equally) and
writes the package's ``rcp_agentic/data/calibration.json``; the ``tree-node`` models
are kept from the shipped file unless ``--tree-node`` refits them.

``--tree-node`` (a SciFact engine built with ``build_tree=True``) also fits the
``tree-node`` family on the top ``k`` hits of the collapsed tree (chunks and every
summary level in one pool): a node is relevant when a document it covers is. The
signals are recorded exactly as the engine scores them (``RecordingCalibrator``:
the pooled BM25 ceiling and the hit's rank in the pooled list, which counts the
hits packing passed over as contained). Tree-node models use the hit-only features
(``TREE_FEATURES``). It prints the held-out ECE / AUROC of the tree-node hits and of
the pool's chunk hits under the shipped chunk models (``bench/raptor.py scifact
--write-params`` adds tree-node models to the shipped file without touching the others).

``--graph`` also fits the knowledge graph's models on each set's engine built with
``build_graph=True`` (SciFact: ``bench/.cache/graph-engine-scifact``, all 5,183 abstracts,
built by ``bench/graph.py scifact``; a multi-hop set: ``bench/.cache/conf-graph-engine-<set>``,
a copy of ``bench/graph.py``'s passage engine with the graph built in it on first use):
the top ``k`` hits of graph-recall requests (``x-rcp-agentic-graphRecall``; chunk and
document in every mode, node and triplet in hybrid), scored as ``<mode>+graph`` models,
and of node and triplet requests in every mode without it. The signals are recorded as
the engine scores them (``RecordingCalibrator``). A node or triplet is relevant when a
document of its provenance leaves is; a request whose query links no entity runs hybrid
alone and gives no sample. It prints the held-out tables of the new models, the same
hits under their mode's model (as graph-recall hits were scored before), and, per set,
the supporting chunks graph recall brought into the top ``k`` (not in plain hybrid's)
whose confidence reaches the corrective loop's lower threshold (0.05) before and after.
Without ``--graph``, ``--write-params`` keeps the shipped graph models; it always keeps the
shipped community models (``--community`` refits them).

``--community`` fits the ``community`` family alone (every other shipped model untouched) on
``bench/communities.py``'s engines (HotpotQA and 2Wiki with their graph and communities,
plus 100 SciFact claims per corpus as off-domain questions; SciFact has no answers or
supporting sentences, so it is no fold of its own): the top ``k`` community hits of every
question in every mode with no level (every community pooled), and in hybrid mode at each
level too. A community hit is relevant when
its text holds a sentence of a supporting passage (``COMMUNITY_EVENT``). It prints ECE /
AUROC leaving one set out and in domain; ``--write-params`` adds the models fitted on both
sets to the shipped file (``write_community_models``) only when every held-out AUROC
reaches 0.75.

The last release's held-out cells (``results/confidence_baseline.json``) print beside this
run's in one table of every set × unit × mode, against issue 22's targets (hybrid ECE ≤
0.03 and AUROC ≥ 0.90, dense and sparse ECE ≤ 0.04). ``--ablation`` instead fits the
chunk and document models with each feature variant of ``ABLATION`` (the format-3
features, the z-scores alone, no raw cosine in the document models alone, both, both and
no raw cosine anywhere) and prints each variant's worst held-out cell per mode.

Engines live in ``bench/.cache/engine-<set>`` (SciFact: ``bench/scifact_engine.py
--engine bench/.cache/engine-scifact``; the multi-hop ones are built on first use, as
``bench/corrective.py`` builds them); ``--reuse-samples`` reads the labelled hits of a
previous run from ``bench/.cache/confidence-<set>.pkl`` (and ``confidence-graph-<set>.pkl``;
delete those to re-collect after the graph or its linking changes).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scifact  # noqa: E402
from bench.data import data_path  # noqa: E402
from bench.metrics import mrr_at_k, ndcg_at_k  # noqa: E402
from rcp_agentic import units as unit_kinds  # noqa: E402
from rcp_agentic import Engine  # noqa: E402
from rcp_agentic.pipeline import calibration_engine as collecting  # noqa: E402
from rcp_agentic.pipeline import calibration_fit as fitting  # noqa: E402
from rcp_agentic.pipeline import confidence as conf  # noqa: E402
from rcp_agentic.pipeline import confidence_features as conf_features  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "bench" / ".cache"
ECE_TARGET, AUROC_TARGET = 0.05, 0.85
# Issue 22's bar for the chunk and document models on every held-out cell (leave one set
# out and k-fold within the sets): (ECE at most, AUROC at least or None).
CELL_TARGETS = {"hybrid": (0.03, 0.90), "dense": (0.04, None), "sparse": (0.04, None)}
BASELINE = ROOT / "bench" / "results" / "confidence_baseline.json"
UNITS = ("chunk", "document")
SETS = ("scifact", "hotpotqa", "2wikimultihopqa")
CALIBRATION = ROOT / "rcp_agentic" / "data" / "calibration.json"
CONF_K = 20  # hits per query and mode the tree-node models are fitted on
# The collapsed tree's hits are scored from their own signals (format-1 features).
TREE_FEATURES = conf.HIT_FEATURES


def load_set(name: str) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, dict[str, int]]]:
    """Corpus documents (empty for SciFact: its engine is built by scifact_engine.py),
    ``{query_id: text}`` and ``{query_id: {doc_id: 1}}`` of the relevant documents."""
    if name == "scifact":
        _corpus, queries, qrels = scifact.load_dataset()
        return [], queries, qrels
    root = data_path("multihop", name)
    docs = [json.loads(line) for line in (root / "corpus.jsonl").open(encoding="utf-8")]
    questions = [json.loads(line) for line in (root / "questions.jsonl").open(encoding="utf-8")]
    corpus = [{"id": d["_id"], "title": d["title"], "text": f"{d['title']}\n\n{d['text']}"}
              for d in docs]
    return (corpus, {q["_id"]: q["question"] for q in questions},
            {q["_id"]: {d: 1 for d in q["supporting_ids"]} for q in questions})


def engine_for(name: str, corpus: list[dict[str, Any]]) -> Engine | None:
    """The set's cached engine (a multi-hop one is built on first use); None if missing."""
    path = CACHE / f"engine-{name}"
    if not (path / "engine.db").exists():
        if not corpus:
            return None
        eng = Engine(path)
        t0 = time.perf_counter()
        eng.add_documents(corpus)
        print(f"  indexed {len(corpus)} passages of {name} in {time.perf_counter() - t0:.0f} s")
        return eng
    return Engine(path)


def off_domain(name: str, n: int) -> dict[str, str]:
    """``n`` questions of another domain for the set's corpus, ids prefixed ``off:``: SciFact
    claims for a multi-hop corpus, multi-hop questions (half each) for SciFact's."""
    if name == "scifact":
        picks = [(s, n // 2 if s == "hotpotqa" else n - n // 2)
                 for s in ("hotpotqa", "2wikimultihopqa")]
    else:
        picks = [("scifact", n)]
    out: dict[str, str] = {}
    for other, m in picks:
        _c, queries, _q = load_set(other)
        out.update({f"off:{qid}": text for qid, text in list(queries.items())[:m]})
    return out


def set_samples(name: str, k: int, reuse: bool,
                n_off: int = 100) -> tuple[list[fitting.Sample], dict[str, Any]]:
    """The set's labelled hits (collected, or read back with ``reuse``) and its fit note:
    its own judged queries plus ``n_off`` off-domain ones, every hit of which is irrelevant
    (a query may have no answer in the corpus; the calibration must see that happen)."""
    cache = CACHE / f"confidence-{name}.pkl"
    if reuse and cache.exists():
        with cache.open("rb") as fh:
            got: tuple[list[fitting.Sample], dict[str, Any]] = pickle.load(fh)
        return got
    corpus, queries, qrels = load_set(name)
    off = off_domain(name, n_off)
    queries = {**queries, **off}
    qrels = {**qrels, **{qid: {} for qid in off}}
    engine = engine_for(name, corpus)
    if engine is None:
        raise SystemExit(f"no engine at {CACHE / ('engine-' + name)}: build it with "
                         "bench/scifact_engine.py --engine DIR")
    start = time.perf_counter()
    samples = collecting.collect_samples(engine, queries, qrels, units=UNITS, k=k, source=name)
    print(f"  {name}: {len(queries)} queries, {len(samples)} labelled hits in "
          f"{time.perf_counter() - start:.0f} s", flush=True)
    note = {"queries": len({x.query_id for x in samples}), "off_domain": len(off),
            **collecting.engine_note(engine)}
    engine.close()
    CACHE.mkdir(parents=True, exist_ok=True)
    with cache.open("wb") as fh:
        pickle.dump((samples, note), fh)
    return samples, note


def _fmt_row(cols: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))


def reliability_plot(samples: list[fitting.Sample], probs: np.ndarray, path: Path,
                     bins: int = 10) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = np.array([x.label for x in samples], dtype=float)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5), sharex=True,
                             gridspec_kw={"height_ratios": [3, 1]})
    edges = np.linspace(0, 1, bins + 1)
    for col, unit in enumerate(UNITS):
        ax, hax = axes[0, col], axes[1, col]
        ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="perfect")
        for mode, color in zip(conf.MODES, ("tab:blue", "tab:orange", "tab:green")):
            m = np.array([x.mode == mode and x.unit == unit for x in samples])
            p, t = probs[m], y[m]
            idx = np.clip((p * bins).astype(int), 0, bins - 1)
            xs, ys, ns = [], [], []
            for b in range(bins):
                sel = idx == b
                if sel.any():
                    xs.append(p[sel].mean())
                    ys.append(t[sel].mean())
                    ns.append(sel.sum())
            ax.plot(xs, ys, marker="o", color=color,
                    label=f"{mode} (ECE {fitting.ece(p, t):.3f}, AUROC {fitting.auroc(p, t):.3f})")
            hax.hist(p, bins=edges, histtype="step", color=color, lw=1.5)
        ax.set_title(f"unit = {unit} (held-out, 5 folds by query)")
        ax.set_ylabel("fraction relevant")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.legend(loc="upper left", fontsize=8)
        hax.set_yscale("log")
        hax.set_xlabel("predicted confidence")
        hax.set_ylabel("hits")
    fig.suptitle("rcp-agentic hit confidence — SciFact train + HotpotQA + 2Wiki dev, "
                 "top-20 hits")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rerank_table(engine: Engine, queries: dict[str, str], qrels: dict[str, dict[str, int]],
                 depths: list[int], folds: int, seed: int, train: list[fitting.Sample],
                 l2: float, source: str = "scifact") -> list[str]:
    """nDCG@10 / MRR@10 of RRF vs re-ranking the top-K hybrid documents by held-out P
    (each fold's queries scored by a model fitted on the other folds and the other sets)."""
    kmax = max(depths)
    cands = collecting.collect_samples(engine, queries, qrels, modes=("hybrid",), units=("document",),
                                 k=kmax, source=source)
    fold_of = fitting.query_folds((x.query_id for x in cands), folds, seed)
    train = [x for x in train if x.mode == "hybrid" and x.unit == "document"]
    probs = np.full(len(cands), np.nan)
    for f in range(folds):
        model = fitting.fit([x for x in train
                          if x.source != source or fold_of.get(x.query_id) != f], l2=l2)
        ix = [i for i, x in enumerate(cands) if fold_of.get(x.query_id) == f]
        probs[ix] = fitting.predict_samples(model, [cands[i] for i in ix])
    by_q: dict[str, list[tuple[int, float, str]]] = {}
    for x, p in zip(cands, probs):
        by_q.setdefault(x.query_id, []).append((x.rank, float(p), str(x.doc_id)))
    head = ["ranking (unit=document)", "nDCG@10", "MRR@10"]
    widths = [36, 8, 8]
    lines = [_fmt_row(head, widths), "-" * (sum(widths) + 4)]
    rrf = {q: [d for _r, _p, d in sorted(v)] for q, v in by_q.items()}
    lines.append(_fmt_row(["hybrid RRF (engine order)", f"{ndcg_at_k(rrf, qrels, 10):.4f}",
                           f"{mrr_at_k(rrf, qrels, 10):.4f}"], widths))
    for depth in depths:
        run = {q: [d for _r, _p, d in sorted((h for h in v if h[0] < depth),
                                             key=lambda h: (-h[1], h[0]))]
               for q, v in by_q.items()}
        lines.append(_fmt_row([f"re-ranked by confidence, top {depth}",
                               f"{ndcg_at_k(run, qrels, 10):.4f}",
                               f"{mrr_at_k(run, qrels, 10):.4f}"], widths))
    # Calibration beyond the fitted depth (ranks k..kmax-1), if any.
    k_fit = 1 + max(x.rank for x in train)
    deep = np.array([x.rank >= k_fit for x in cands])
    if deep.any():
        y = np.array([x.label for x in cands], dtype=float)
        lines.append("")
        lines.append(f"hybrid/document ranks {k_fit}–{kmax - 1} (beyond the fitted top {k_fit}): "
                     f"ECE {fitting.ece(probs[deep], y[deep]):.4f}, mean p "
                     f"{probs[deep].mean():.4f} vs base rate {y[deep].mean():.4f}")
    return lines


# --- tree-node hits (the collapsed RAPTOR tree) ------------------------------------------

def collect_pool_samples(engine: Engine, queries: dict[str, str],
                         qrels: dict[str, dict[str, int]], k: int = CONF_K) -> list[fitting.Sample]:
    """Labelled top-``k`` hits of the collapsed tree in every mode, with the engine's signals.

    A tree-node is relevant when one of the documents it covers is; a chunk when its
    document is.
    """
    shipped = engine.calibrator
    recorder = collecting.RecordingCalibrator(shipped)
    engine.calibrator = recorder  # type: ignore[assignment]
    samples: list[fitting.Sample] = []
    try:
        for qid, text in queries.items():
            rels = {d for d, g in qrels.get(qid, {}).items() if g > 0}
            for mode in conf.MODES:
                recorder.calls.clear()
                res = engine.retrieve(text, k=k, mode=mode, unit="tree-node", include_text=False)
                by_family: dict[str, list[Any]] = {}
                for h in res.hits:
                    by_family.setdefault(unit_kinds.calibration_family(str(h.unit)), []).append(h)
                if sum(len(c["ranks"]) for c in recorder.calls) < len(res.hits):
                    raise RuntimeError("the engine did not score every hit's confidence")
                for call in recorder.calls:
                    hits = by_family.get(call["family"], [])
                    assert len(hits) <= len(call["ranks"]), "hits and recorded signals differ"
                    for j, h in enumerate(hits):
                        docs = [h.chunk.doc_id] if h.chunk else list(h.meta.get("doc_ids") or [])
                        samples.append(fitting.Sample(
                            query_id=str(qid), mode=mode, unit=h.unit, rank=int(call["ranks"][j]),
                            dense=None if call["dense"] is None else float(call["dense"][j]),
                            sparse=None if call["sparse"] is None else float(call["sparse"][j]),
                            ceiling=None if call["ceiling"] is None else float(call["ceiling"]),
                            label=int(any(d in rels for d in docs)),
                            doc_id=docs[0] if docs else None, source="scifact"))
    finally:
        engine.calibrator = shipped
    return samples


def fit_tree_node(samples: list[fitting.Sample], engine: Engine, folds: int, seed: int,
                  l2: float, k: int = CONF_K, corpus: str = "all documents",
                  ) -> tuple[conf.Calibrator, dict[str, Any]]:
    """Fit the tree-node models (held-out folds by query); score the pool's chunk hits with
    the shipped chunk models. Returns the tree-node calibrator (all queries) and metrics;
    ``corpus`` says what the engine indexed (noted in ``fitted_on``)."""
    tree = [x for x in samples if x.unit == "tree-node"]
    chunks = [x for x in samples if x.unit != "tree-node"]
    note = {"dataset": "SciFact (BEIR), train split", "split": "train", "corpus": corpus,
            "k": k, "units": ["tree-node"],
            "labels": "relevant iff a document the node covers has qrels grade > 0",
            "ranks": "0-based position in the collapsed tree's ranked pool (chunks and nodes)",
            "sparse_ceiling": "over the collapsed tree's pool (chunks and every level)",
            **collecting.engine_note(engine),
            "tree": {name: getattr(engine.config, name) for name in
                     ("tree_summary_tokens", "tree_cluster_tokens", "tree_top_size",
                      "tree_max_levels", "tree_seed")}}
    calibrator, metrics, oof = collecting.calibrate_samples(tree, folds=folds, l2=l2, seed=seed,
                                                      fitted_on=note, features=TREE_FEATURES)
    out: dict[str, Any] = {"tree_node_cv": metrics.get("cv"), "tree_node_train": metrics["train"]}
    shipped = conf.Calibrator.default()
    if chunks:
        p = fitting.predict_samples(shipped, chunks)
        out["pool_chunk_shipped"] = fitting.evaluate(chunks, p)
    if oof is not None:
        y = np.array([x.label for x in tree], dtype=float)
        rank = np.array([x.rank for x in tree])
        top10 = rank < 10
        out["tree_node_cv_rank_lt_10"] = {
            mode: {"ece": round(fitting.ece(oof[m & top10], y[m & top10]), 5),
                   "auroc": round(fitting.auroc(oof[m & top10], y[m & top10]), 5)}
            for mode in conf.MODES
            for m in [np.array([x.mode == mode for x in tree])]}
    return calibrator, out


def print_tree_table(metrics: dict[str, Any]) -> None:
    print(f"{'group (held-out unless noted)':42s} {'hits':>6s} {'base':>6s} {'mean p':>7s} "
          f"{'ECE':>7s} {'AUROC':>7s}")
    for key, r in (metrics.get("tree_node_cv") or {}).items():
        print(f"{'tree-node ' + key:42s} {r['n']:6d} {r['base_rate']:6.3f} {r['mean_p']:7.3f} "
              f"{r['ece']:7.4f} {r['auroc']:7.4f}")
    for key, r in (metrics.get("pool_chunk_shipped") or {}).items():
        print(f"{'pool chunk ' + key + ' (shipped model)':42s} {r['n']:6d} {r['base_rate']:6.3f} "
              f"{r['mean_p']:7.3f} {r['ece']:7.4f} {r['auroc']:7.4f}")


def merge_tree_models(base: conf.Calibrator, tree: conf.Calibrator) -> conf.Calibrator:
    """``base`` with the ``*/tree-node`` models of ``tree`` added (its own models unchanged);
    the tree fit's note goes under ``fitted_on["tree-node"]``."""
    if tree.fitted_on.get("embedder") != base.fitted_on.get("embedder"):
        raise SystemExit("the tree-node models were fitted with another embedder than the others "
                         f"({tree.fitted_on.get('embedder')!r} vs "
                         f"{base.fitted_on.get('embedder')!r})")
    for key, model in tree.models.items():
        if key.endswith("/tree-node"):
            base.models[key] = model
    base.fitted_on["tree-node"] = {k: v for k, v in tree.fitted_on.items() if k != "embedder"}
    return base


def write_tree_models(tree: conf.Calibrator, path: Path = CALIBRATION) -> None:
    """Add the ``*/tree-node`` models to the shipped calibration, leaving the rest as it was."""
    shipped = conf.Calibrator.from_json(json.loads(path.read_text(encoding="utf-8")))
    merge_tree_models(shipped, tree).save(path)


# --- graph recall and the graph's units (issue 11) ----------------------------------------

# Chunks and documents are sampled with graph recall only (without it they are the format-2
# samples above) in every mode; the graph's stored units in every mode without it and in
# hybrid with it (their graph masses cost ~0.3 s a request on these graphs: a node or
# triplet request with graph recall in dense or sparse mode is scored by that mode's model).
GRAPH_UNITS = ("chunk", "document", "node", "triplet")
GRAPH_UNIT_GRAPH_MODES = ("hybrid",)
ALL_UNITS = ("chunk", "document", "node", "triplet", "tree-node")


def graph_engine_path(name: str) -> Path:
    return CACHE / ("graph-engine-scifact" if name == "scifact" else f"conf-graph-engine-{name}")


def graph_engine_for(name: str) -> Engine:
    """The set's engine with a knowledge graph (``build_graph=True``).

    SciFact: ``bench/.cache/graph-engine-scifact``, built by ``bench/graph.py scifact``. A
    multi-hop set: ``bench/.cache/conf-graph-engine-<set>``, a copy of ``bench/graph.py``'s
    engine cache (``graph-engine-<set>``: the passages, no graph — that bench builds its
    graph outside the engine) with the graph built in it on first use; the source cache is
    only read.
    """
    path = graph_engine_path(name)
    if name == "scifact":
        if not (path / "indexed.json").exists():
            raise SystemExit(f"no graph engine at {path}: build it with bench/graph.py scifact")
        from bench.embedcache import EmbeddingCache, LangChainCachedEmbeddings

        # Built through the bench's MiniLM cache (the same model; its identity differs).
        return Engine(path, embedder=LangChainCachedEmbeddings(EmbeddingCache()),
                      build_graph=True)
    if not path.exists():
        src = CACHE / f"graph-engine-{name}"
        tmp = CACHE / f".conf-graph-engine-{name}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)  # our own interrupted copy
        if (src / "indexed.txt").exists():
            shutil.copytree(src, tmp)
            tmp.rename(path)
    engine = Engine(path, build_graph=True)
    if not engine.store.live_leaves("chunk"):
        corpus, _q, _r = load_set(name)
        engine.add_documents(corpus)  # builds the graph too
    if "node" not in engine.derived_status():
        t0 = time.perf_counter()
        engine.update_derived(full=True)
        print(f"  built the graph of {name} in {time.perf_counter() - t0:.0f} s", flush=True)
    return engine


def _hit_docs(h: Any) -> list[str]:
    """The documents a hit covers: a chunk's or document's own; a graph unit's leaves'."""
    if h.chunk is not None:
        return [str(h.chunk.doc_id)]
    meta = h.meta or {}
    return [str(d) for d in (meta.get("doc_ids") or ([meta["doc_id"]] if "doc_id" in meta
                                                     else []))]


def collect_graph_samples(engine: Engine, queries: dict[str, str],
                          qrels: dict[str, dict[str, int]], *, k: int = CONF_K,
                          source: str = "", modes: tuple[str, ...] = conf.MODES,
                          ) -> tuple[list[fitting.Sample], dict[str, Any]]:
    """Labelled top-``k`` hits of graph-recall requests (every unit of ``GRAPH_UNITS``) and
    of node/triplet requests without it, with the signals exactly as the engine scores them
    (``RecordingCalibrator``: the recall lists of the hit's family, its graph mass).

    A chunk or document is relevant when its document is; a node or triplet when it covers
    one (a chunk of a relevant document is among its ``provenance.leaves``). A graph-recall
    request whose query links no entity runs hybrid alone (scored by the mode's model): it
    gives no sample. Also returns, per query, the hit ids of the ``hybrid+graph`` chunk list
    and of the plain hybrid one (``bridges`` counts the hits only the graph brought in) and
    how many queries linked an entity.
    """
    shipped = engine.calibrator
    recorder = collecting.RecordingCalibrator(shipped)
    engine.calibrator = recorder  # type: ignore[assignment]
    samples: list[fitting.Sample] = []
    ids: dict[str, dict[str, list[str]]] = {"hybrid+graph": {}, "hybrid": {}}
    linked: set[str] = set()
    try:
        for n, (qid, text) in enumerate(queries.items()):
            if n and n % 100 == 0:
                print(f"    {source}: {n} of {len(queries)} queries", flush=True)
            rels = {d for d, g in qrels.get(qid, {}).items() if g > 0}
            plain = engine.retrieve(text, k=k, mode="hybrid", unit="chunk", include_text=False)
            ids["hybrid"][qid] = [h.id for h in plain.hits]
            for unit in GRAPH_UNITS:
                for mode in modes:
                    graphs = (True,) if unit in UNITS else (
                        (False, True) if mode in GRAPH_UNIT_GRAPH_MODES else (False,))
                    for graph in graphs:
                        recorder.calls.clear()
                        res = engine.retrieve(text, k=k, mode=mode, unit=unit,
                                              include_text=False, graph_recall=graph)
                        calls = list(recorder.calls)
                        if sum(len(c["ranks"]) for c in calls) < len(res.hits):
                            raise RuntimeError("the engine did not score every hit's confidence")
                        if graph and not any(c["graph"] is not None for c in calls):
                            continue  # no entity linked: hybrid alone
                        if graph:
                            linked.add(qid)
                        signal_set = mode + conf.GRAPH if graph else mode
                        if graph and mode == "hybrid" and unit == "chunk":
                            ids["hybrid+graph"][qid] = [h.id for h in res.hits]
                        assert len(calls) <= 1, "one unit family per request"
                        for call in calls:
                            for j, h in enumerate(res.hits):
                                docs = _hit_docs(h)
                                samples.append(collecting.recorded_sample(
                                    call, j, query_id=str(qid), mode=signal_set, unit=unit,
                                    label=int(any(d in rels for d in docs)),
                                    doc_id=docs[0] if docs else None, source=source,
                                    docs=float(max(1, len(docs)))))
    finally:
        engine.calibrator = shipped
    return samples, {"ids": ids, "linked": sorted(linked)}


def graph_set_samples(name: str, k: int, reuse: bool, n_off: int = 100,
                      limit: int | None = None,
                      ) -> tuple[list[fitting.Sample], dict[str, Any], dict[str, Any]]:
    """The set's graph samples (``collect_graph_samples`` on its graph engine, its own judged
    queries — the first ``limit`` in file order, if given — plus ``n_off`` off-domain ones),
    cached in ``bench/.cache/confidence-graph-<set>.pkl``; returns them, the fit note and
    the per-query extras."""
    cache = CACHE / f"confidence-graph-{name}.pkl"
    if reuse and cache.exists():
        with cache.open("rb") as fh:
            got: tuple[list[fitting.Sample], dict[str, Any], dict[str, Any]] = pickle.load(fh)
        return got
    _corpus, queries, qrels = load_set(name)
    if limit is not None:
        queries = dict(list((q, t) for q, t in queries.items() if q in qrels)[:limit])
    off = off_domain(name, n_off)
    queries = {**queries, **off}
    qrels = {**qrels, **{qid: {} for qid in off}}
    engine = graph_engine_for(name)
    start = time.perf_counter()
    samples, extra = collect_graph_samples(engine, queries, qrels, k=k, source=name)
    extra["qrels"] = {q: sorted(d for d, g in r.items() if g > 0) for q, r in qrels.items()}
    print(f"  {name} (graph): {len(queries)} queries, {len(extra['linked'])} link an entity, "
          f"{len(samples)} labelled hits in {time.perf_counter() - start:.0f} s", flush=True)
    note = {"queries": len(queries), "linked": len(extra["linked"]), "off_domain": len(off),
            "engine_path": str(graph_engine_path(name).relative_to(ROOT)),
            "graph": {kind: engine.derived_status()[kind]["counts"]["0"]
                      for kind in ("node", "triplet")},
            **collecting.engine_note(engine)}
    if str(note.get("embedder", "")).startswith("langchain:bench.embedcache"):
        from bench.embedcache import MODEL_NAME

        note["embedder"] = MODEL_NAME  # the cache holds that model's vectors
    engine.close()
    with cache.open("wb") as fh:
        pickle.dump((samples, note, extra), fh)
    return samples, note, extra


def bridge_table(samples: list[fitting.Sample], after: np.ndarray, before: np.ndarray,
                 extras: dict[str, dict[str, Any]], lower: float = 0.05,
                 ) -> dict[str, dict[str, int]]:
    """Per set: supporting chunks of the ``hybrid+graph`` top-k that graph recall brought in
    (not in the plain hybrid top-k: ``bridges``; of those, absent from both the dense and the
    sparse recall lists: ``graph_only``), and how many reach the corrective loop's ``lower``
    threshold with the graph model (``after``) and with the mode's model (``before``), each
    made non-increasing down the list as the engine serves it (``after_unclamped``: the
    graph model's own probability)."""
    out: dict[str, dict[str, int]] = {}
    by_q: dict[tuple[str, str], list[int]] = {}
    for i, x in enumerate(samples):
        if x.mode == "hybrid+graph" and x.unit == "chunk":
            by_q.setdefault((x.source, x.query_id), []).append(i)
    for (src, qid), idx in by_q.items():
        idx.sort(key=lambda i: samples[i].rank)
        served = {name: np.minimum.accumulate(p[idx]) for name, p in (("after", after),
                                                                     ("before", before))}
        ids = extras[src]["ids"]
        plain = set(ids["hybrid"].get(qid, []))
        got = ids["hybrid+graph"].get(qid, [])
        row = out.setdefault(src, {"supporting": 0, "bridges": 0, "bridges_before": 0,
                                   "bridges_after": 0, "bridges_after_unclamped": 0,
                                   "graph_only": 0, "graph_only_before": 0,
                                   "graph_only_after": 0, "graph_only_after_unclamped": 0})
        for j, i in enumerate(idx):
            x = samples[i]
            if not x.label:
                continue
            row["supporting"] += 1
            if j >= len(got) or got[j] in plain:
                continue
            only = (x.rank_dense or 0) >= conf_features.ABSENT_RANK and (x.rank_sparse or 0) >= \
                conf_features.ABSENT_RANK
            for key, yes in (("bridges", True), ("graph_only", only)):
                if yes:
                    row[key] += 1
                    row[key + "_before"] += int(served["before"][j] >= lower)
                    row[key + "_after"] += int(served["after"][j] >= lower)
                    row[key + "_after_unclamped"] += int(after[i] >= lower)
    return out


def transfer_table(samples: list[fitting.Sample], probs: np.ndarray) -> tuple[list[str], dict]:
    """ECE / AUROC per mode/unit and data set (rows) of the given probabilities."""
    y = np.array([x.label for x in samples], dtype=float)
    head = ["mode/unit", "data set", "hits", "base", "mean p", "ECE", "AUROC", "target"]
    widths = [22, 16, 6, 6, 6, 7, 7, 6]
    lines = [_fmt_row(head, widths), "-" * (sum(widths) + 2 * (len(widths) - 1))]
    out: dict[str, dict[str, Any]] = {}
    sources = sorted({x.source for x in samples})
    for mode in conf.SIGNAL_SETS:
        for unit in ALL_UNITS:
            for src in sources:
                m = np.array([x.mode == mode and x.unit == unit and x.source == src
                              for x in samples]) & np.isfinite(probs)
                if not m.any():
                    continue
                p, t = probs[m], y[m]
                e, a = fitting.ece(p, t), fitting.auroc(p, t)
                ok = e <= ECE_TARGET and a >= AUROC_TARGET
                out.setdefault(f"{mode}/{unit}", {})[src] = {
                    "n": int(m.sum()), "base_rate": round(float(t.mean()), 5),
                    "mean_p": round(float(p.mean()), 5), "ece": round(e, 5), "auroc": round(a, 5)}
                lines.append(_fmt_row([f"{mode}/{unit}", src, str(len(t)), f"{t.mean():.3f}",
                                       f"{p.mean():.3f}", f"{e:.4f}", f"{a:.4f}",
                                       "ok" if ok else "MISS"], widths))
    return lines, out


def cell_table(samples: list[fitting.Sample], loo: np.ndarray, cv: np.ndarray,
               baseline: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """One row per (set × unit × mode) of the chunk and document models: held-out ECE /
    AUROC leaving the set out and in k folds by query, the last release's cells
    (``BASELINE``) beside them, and whether the cell meets ``CELL_TARGETS``. Off-domain
    questions are left out of the scores (they are in the fits)."""
    y = np.array([x.label for x in samples], dtype=float)
    own = np.array([not _off(x) for x in samples])
    head = ["set", "unit", "mode", "LOSO ECE", "AUROC", "was", "k-fold ECE", "AUROC", "was",
            "target"]
    widths = [16, 8, 6, 8, 6, 13, 10, 6, 13, 6]
    lines = [_fmt_row(head, widths), "-" * (sum(widths) + 2 * (len(widths) - 1))]
    out: dict[str, Any] = {}
    for src in sorted({x.source for x in samples}):
        for unit in UNITS:
            for mode in conf.MODES:
                m = own & np.array([x.source == src and x.unit == unit and x.mode == mode
                                    for x in samples])
                if not m.any():
                    continue
                key = f"{mode}/{unit}"
                cell: dict[str, Any] = {"n": int(m.sum()), "base_rate": round(float(y[m].mean()), 5)}
                cols = [src, unit, mode]
                met = True
                max_ece, min_auroc = CELL_TARGETS[mode]
                for name, probs in (("leave_one_out", loo), ("in_domain", cv)):
                    ok = m & np.isfinite(probs)
                    e, a = fitting.ece(probs[ok], y[ok]), fitting.auroc(probs[ok], y[ok])
                    was = (baseline.get(name) or {}).get(key, {}).get(src)
                    cell[name] = {"ece": round(e, 5), "auroc": round(a, 5),
                                  "mean_p": round(float(probs[ok].mean()), 5)}
                    if was:
                        cell[name]["baseline"] = {"ece": was["ece"], "auroc": was["auroc"]}
                    met &= e <= max_ece and (min_auroc is None or a >= min_auroc)
                    cols += [f"{e:.3f}", f"{a:.3f}",
                             f"{was['ece']:.3f}/{was['auroc']:.3f}" if was else "-"]
                cell["meets_target"] = bool(met)
                out.setdefault(src, {})[key] = cell
                lines.append(_fmt_row(cols + ["ok" if met else "MISS"], widths))
    return lines, out


def _without(names: tuple[str, ...], drop: set[str]) -> tuple[str, ...]:
    return tuple(f for f in names if f not in drop)


FORMAT_3 = {m: _without(conf.DEFAULT_FEATURES[m], set(conf_features.MOMENT_FEATURES)) for m in conf.MODES}
# Feature variants of the chunk and document models, by name: {"<mode>/<unit>": features}.
ABLATION: dict[str, dict[str, tuple[str, ...]]] = {
    "format 3": {f"{m}/{u}": FORMAT_3[m] for m in conf.MODES for u in UNITS},
    "z-scores": {f"{m}/{u}": FORMAT_3[m] + conf_features.Z_FEATURES[m] for m in conf.MODES
                 for u in UNITS},
    "no document cosine": {f"{m}/{u}": FORMAT_3[m] if u == "chunk" else
                           _without(FORMAT_3[m], {"dense"}) for m in conf.MODES for u in UNITS},
    "both (shipped)": {f"{m}/{u}": conf.DEFAULT_FEATURES[f"{m}/{u}"]
                       if f"{m}/{u}" in conf.DEFAULT_FEATURES else conf.DEFAULT_FEATURES[m]
                       for m in conf.MODES for u in UNITS},
    "both, no cosine at all": {f"{m}/{u}": _without(FORMAT_3[m] + conf_features.Z_FEATURES[m], {"dense"})
                               for m in conf.MODES for u in UNITS},
}


def ablation(samples: list[fitting.Sample], folds: int, seed: int, l2: float) -> dict[str, Any]:
    """Each ``ABLATION`` variant's held-out cells (leave one set out, k folds by query) and
    its worst cell per mode; prints one line per variant and mode."""
    samples = [x for x in samples if x.unit in UNITS]
    out: dict[str, Any] = {}
    for name, features in ABLATION.items():
        loo = fitting.leave_one_out(samples, features=features, l2=l2)
        cv = fitting.cross_validate(samples, folds=folds, seed=seed, features=features, l2=l2)
        _lines, cells = cell_table(samples, loo, cv, {})
        worst = {}
        for mode in conf.MODES:
            rows = [c for per_set in cells.values() for k, c in per_set.items()
                    if k.startswith(mode + "/")]
            worst[mode] = {split: {"ece": max(c[split]["ece"] for c in rows),
                                   "auroc": min(c[split]["auroc"] for c in rows)}
                           for split in ("leave_one_out", "in_domain")}
            w = worst[mode]
            print(f"  {name:24s} {mode:6s} worst LOSO ECE {w['leave_one_out']['ece']:.3f} "
                  f"AUROC {w['leave_one_out']['auroc']:.3f}  k-fold ECE "
                  f"{w['in_domain']['ece']:.3f} AUROC {w['in_domain']['auroc']:.3f}")
        out[name] = {"cells": cells, "worst": worst,
                     "cells_missing_target": sum(not c["meets_target"]
                                                 for per_set in cells.values()
                                                 for c in per_set.values())}
        print(f"  {name:24s} cells missing the target: {out[name]['cells_missing_target']}")
    return out


def _off(x: fitting.Sample) -> bool:
    return x.query_id.startswith("off:")


def first_step(samples: list[fitting.Sample], probs: np.ndarray, upper: float = 0.6,
               ) -> dict[str, dict[str, int]]:
    """Per set: how many questions' first hybrid chunk hit (the corrective loop's first step)
    reaches ``upper``, and how many of those first hits are relevant."""
    out: dict[str, dict[str, int]] = {}
    for x, p in zip(samples, probs):
        if x.mode == "hybrid" and x.unit == "chunk" and x.rank == 0:
            key = x.source + (" off-domain" if _off(x) else "")
            row = out.setdefault(key, {"questions": 0, "clear_upper": 0, "relevant": 0,
                                       "clear_and_relevant": 0})
            row["questions"] += 1
            row["clear_upper"] += int(p >= upper)
            row["relevant"] += int(x.label > 0)
            row["clear_and_relevant"] += int(p >= upper and x.label > 0)
    return out


def _graph_key(key: str) -> bool:
    """A model of the graph: a graph signal set's, or a node's or triplet's."""
    mode, _, unit = key.partition("/")
    return mode.endswith(conf.GRAPH) or unit in ("node", "triplet")


def leave_one_out_pair(samples: list[fitting.Sample], l2: float) -> tuple[np.ndarray, np.ndarray]:
    """``fitting.leave_one_out`` probabilities, and the same with the graph models left out (a
    graph-recall hit scored by its mode's model, as the engine did before them; NaN for
    node/triplet hits)."""
    samples = list(samples)
    after = np.full(len(samples), np.nan)
    before = np.full(len(samples), np.nan)
    for held in sorted({x.source for x in samples}):
        cal = fitting.fit([x for x in samples if x.source != held], l2=l2)
        plain = conf.Calibrator({k: m for k, m in cal.models.items() if not _graph_key(k)},
                                fallbacks=cal.fallbacks)
        test = [i for i, x in enumerate(samples) if x.source == held]
        held_out = [samples[i] for i in test]
        after[np.asarray(test)] = fitting.predict_samples(cal, held_out)
        before[np.asarray(test)] = fitting.predict_samples(plain, held_out)
    return after, before


# --- community hits (issue 12) -----------------------------------------------------------

COMMUNITY_SETS = ("hotpotqa", "2wikimultihopqa")
COMMUNITY_EVENT = ("the hit's text (its report) holds a sentence of one of the question's "
                   "supporting passages (normalised SQuAD-style, rcp_agentic.text."
                   "split_sentences, sentences of >= 4 words; bench/communities.py "
                   "hit_evidence); off-domain questions have none")


def collect_community_samples(engine: Engine, questions: list[dict[str, Any]], *, k: int,
                              source: str, levels: list[int | None],
                              ) -> list[fitting.Sample]:
    """Labelled top-``k`` community hits of every question in every mode with the first of
    ``levels`` (None: every community pooled) and in hybrid mode at every one of them, with
    the signals recorded as the engine scores them.

    A hit is relevant when its text holds a sentence of a supporting passage
    (``COMMUNITY_EVENT``): a community report is an extract far narrower than the chunks
    it covers, so covering a supporting document (the leaves event) says little about
    what a reader of the report gets; the answer string is no event for yes/no answers."""
    from bench.communities import hit_evidence

    shipped = engine.calibrator
    recorder = collecting.RecordingCalibrator(shipped)
    engine.calibrator = recorder  # type: ignore[assignment]
    samples: list[fitting.Sample] = []
    try:
        for n, q in enumerate(questions):
            if n and n % 100 == 0:
                print(f"    {source}: {n} of {len(questions)} questions", flush=True)
            for mode in conf.MODES:
                # each level in hybrid only (the shipped default mode): a third of the cost
                for level in (levels if mode == "hybrid" else levels[:1]):
                    recorder.calls.clear()
                    extra = {} if level is None else {"level": level}
                    res = engine.retrieve(q["question"], k=k, mode=mode, unit="community",
                                          **extra)
                    calls = list(recorder.calls)
                    if sum(len(c["ranks"]) for c in calls) < len(res.hits):
                        raise RuntimeError("the engine did not score every hit's confidence")
                    for call in calls:
                        for j, h in enumerate(res.hits):
                            samples.append(collecting.recorded_sample(
                                call, j, query_id=str(q["_id"]), mode=mode, unit="community",
                                label=int(hit_evidence(h.text or "", q["evidence"])),
                                doc_id=h.id, source=source))
    finally:
        engine.calibrator = shipped
    return samples


def community_set_samples(name: str, k: int, reuse: bool, n_off: int,
                          ) -> tuple[list[fitting.Sample], dict[str, Any]]:
    """The set's community samples on ``bench/communities.py``'s engine (its own questions
    plus ``n_off`` SciFact claims, every hit irrelevant), cached in
    ``bench/.cache/confidence-community-<set>.pkl``."""
    from bench.communities import community_engine, multihop_questions

    cache = CACHE / f"confidence-community-{name}.pkl"
    if reuse and cache.exists():
        with cache.open("rb") as fh:
            got: tuple[list[fitting.Sample], dict[str, Any]] = pickle.load(fh)
        return got
    questions = multihop_questions(name)
    off = [{"_id": qid, "question": text, "evidence": {}}
           for qid, text in off_domain(name, n_off).items()]
    engine, build = community_engine(name)
    store = engine.communities()
    assert store is not None
    levels: list[int | None] = [None, *range(store.top_level + 1)]
    start = time.perf_counter()
    samples = collect_community_samples(engine, questions + off, k=k, source=name,
                                        levels=levels)
    print(f"  {name} (community): {len(questions)} + {len(off)} off-domain questions, "
          f"{len(samples)} labelled hits in {time.perf_counter() - start:.0f} s", flush=True)
    note = {"queries": len(questions), "off_domain": len(off), "levels": levels,
            "communities": build.get("communities"), **collecting.engine_note(engine)}
    engine.close()
    with cache.open("wb") as fh:
        pickle.dump((samples, note), fh)
    return samples, note


def community_table(samples: list[fitting.Sample], probs: np.ndarray,
                    ) -> tuple[list[str], dict[str, Any]]:
    """ECE / AUROC of community hits per mode and data set (and all modes together)."""
    y = np.array([x.label for x in samples], dtype=float)
    head = ["mode/community", "data set", "hits", "base", "mean p", "ECE", "AUROC", "target"]
    widths = [22, 16, 6, 6, 6, 7, 7, 6]
    lines = [_fmt_row(head, widths), "-" * (sum(widths) + 2 * (len(widths) - 1))]
    out: dict[str, Any] = {}
    for mode in (*conf.MODES, "all"):
        for src in sorted({x.source for x in samples}):
            m = np.array([(mode == "all" or x.mode == mode) and x.source == src
                          for x in samples]) & np.isfinite(probs)
            if not m.any():
                continue
            p, t = probs[m], y[m]
            e, a = fitting.ece(p, t), fitting.auroc(p, t)
            out.setdefault(f"{mode}/community", {})[src] = {
                "n": int(m.sum()), "base_rate": round(float(t.mean()), 5),
                "mean_p": round(float(p.mean()), 5), "ece": round(e, 5), "auroc": round(a, 5)}
            ok = e <= ECE_TARGET and a >= AUROC_TARGET
            lines.append(_fmt_row([f"{mode}/community", src, str(len(t)), f"{t.mean():.3f}",
                                   f"{p.mean():.3f}", f"{e:.4f}", f"{a:.4f}",
                                   "ok" if ok else "MISS"], widths))
    return lines, out


COMMUNITY_WRITE_AUROC = 0.75  # held-out AUROC below which the models are not shipped


def community_main(args: argparse.Namespace) -> int:
    """Fit the ``community`` family alone (the other shipped models untouched): collect,
    leave one set out, 5 folds in domain, and with ``--write-params`` add the models fitted
    on both sets to the shipped file when every held-out AUROC reaches
    ``COMMUNITY_WRITE_AUROC``."""
    samples: list[fitting.Sample] = []
    notes: dict[str, Any] = {}
    for name in COMMUNITY_SETS:
        got, notes[name] = community_set_samples(name, args.k, args.reuse_samples,
                                                 args.off_domain)
        samples += got
    shipped_json = json.loads(CALIBRATION.read_text(encoding="utf-8"))
    embedders = {n.get("embedder") for n in notes.values()}
    if embedders != {shipped_json["fitted_on"].get("embedder")}:
        raise SystemExit(f"the community engines' embedder {embedders} is not the shipped "
                         f"calibration's ({shipped_json['fitted_on'].get('embedder')!r})")
    results: dict[str, Any] = {"k": args.k, "event": COMMUNITY_EVENT,
                               "sets": {n: {k: v for k, v in note.items() if k != "engine"}
                                        for n, note in notes.items()}}
    on = np.array([not _off(x) for x in samples])
    loo = fitting.leave_one_out(samples, l2=args.l2)
    print(f"\nCommunity hits, leave one data set out (targets ECE <= {ECE_TARGET}, "
          f"AUROC >= {AUROC_TARGET})")
    lines, results["leave_one_out"] = community_table([x for x in samples if not _off(x)],
                                                      loo[on])
    print("\n".join(["the sets' own questions:", *lines]))
    lines, results["leave_one_out_with_off_domain"] = community_table(samples, loo)
    print("\n".join(["", "with the off-domain questions:", *lines]))
    note = {"dataset": "HotpotQA and 2WikiMultiHopQA dev (../shared/data/multihop), each set "
                       "weighted equally, plus SciFact claims as off-domain questions",
            "labels": COMMUNITY_EVENT, "k": args.k,
            "levels": "no level (every community pooled) in every mode; each level in hybrid",
            "engines": "bench/.cache/communities-engine-<set> (bench/communities.py)",
            **{k: v for k, v in next(iter(notes.values())).items()
               if k in ("embedder", "engine")}}
    cal, _metrics, oof = collecting.calibrate_samples(samples, folds=args.folds, l2=args.l2,
                                                seed=args.seed, fitted_on=note)
    assert oof is not None
    lines, results["in_domain"] = community_table([x for x in samples if not _off(x)], oof[on])
    print("\n".join(["", f"in domain ({args.folds} folds by question), own questions:",
                      *lines]))
    print("\nModels fitted on both sets (raw-feature weights)")
    for key, model in sorted(cal.models.items()):
        terms = ", ".join(f"{f} {w:+.3f}" for f, w in zip(model.features, model.coef))
        print(f"  {key:18s} b {model.intercept:+.3f}, {terms}")
    worst = min(r["auroc"] for rows in results["leave_one_out"].values() for r in rows.values())
    results["written"] = bool(args.write_params and worst >= COMMUNITY_WRITE_AUROC)
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    args.out.write_text(json.dumps({**old, "community": results}, indent=2) + "\n")
    print(f"\nnumbers: {args.out} (community)")
    if args.write_params and not results["written"]:
        print(f"not written: a held-out AUROC is {worst:.3f} < {COMMUNITY_WRITE_AUROC}")
    elif results["written"]:
        note["leave_one_out"] = {key: {src: {m: r[m] for m in ("ece", "auroc")}
                                       for src, r in rows.items()}
                                 for key, rows in results["leave_one_out"].items()}
        write_community_models(cal, note)
        print(f"wrote the community models into {CALIBRATION}")
    return 0


def write_community_models(cal: conf.Calibrator, note: dict[str, Any],
                           path: Path = CALIBRATION) -> None:
    """Add ``cal``'s ``*/community`` models and ``fitted_on["community"]`` to the shipped
    file, every other entry left as it was (the file is edited as JSON, not refitted)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    models = {k: v for k, v in data["models"].items() if not k.endswith("/community")}
    models.update({k: m.to_json() for k, m in cal.models.items() if k.endswith("/community")})
    data["models"] = dict(sorted(models.items()))
    data["fitted_on"]["community"] = {**note, "date": cal.fitted_on.get("date"),
                                      "cv": cal.fitted_on.get("cv")}
    conf.Calibrator.from_json(data)  # still loads
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--k", type=int, default=20, help="hits per query, mode and unit to fit on")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--rerank-k", type=int, nargs="+", default=[20, 100])
    ap.add_argument("--plot", type=Path, default=ROOT / "bench" / "results" / "reliability.png")
    ap.add_argument("--write-params", action="store_true",
                    help="refit on every query and write rcp_agentic/data/calibration.json")
    ap.add_argument("--tree-node", action="store_true",
                    help="also fit the tree-node family on the SciFact engine's collapsed tree")
    ap.add_argument("--off-domain", type=int, default=100,
                    help="questions of another domain run against each set's corpus")
    ap.add_argument("--reuse-samples", action="store_true",
                    help="read the labelled hits of a previous run from bench/.cache")
    ap.add_argument("--graph", action="store_true",
                    help="also fit graph recall (<mode>+graph) and the node/triplet families "
                         "on each set's engine with a knowledge graph")
    ap.add_argument("--graph-queries", type=int, default=None,
                    help="with --graph: the first N judged queries of each set only")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "confidence.json")
    ap.add_argument("--community", action="store_true",
                    help="fit the community family alone on bench/communities.py's engines "
                         "(HotpotQA, 2Wiki); the other shipped models are left as they are")
    ap.add_argument("--ablation", action="store_true",
                    help="fit the chunk and document models with each feature variant of "
                         "ABLATION and print their worst held-out cells (nothing written "
                         "but --out's 'ablation')")
    return ap


@dataclass
class _Collected:
    """Every set's labelled hits (the graph engines' after ``base_count``) and fit notes."""

    samples: list[fitting.Sample]
    notes: dict[str, Any]
    base_count: int
    graph_notes: dict[str, Any]
    graph_extras: dict[str, Any]


def _collect(args: argparse.Namespace) -> _Collected:
    print(f"collecting the top {args.k} hits per query, mode and unit of "
          f"{', '.join(args.sets)}")
    samples: list[fitting.Sample] = []
    notes: dict[str, Any] = {}
    for name in args.sets:
        got, notes[name] = set_samples(name, args.k, args.reuse_samples, args.off_domain)
        samples += got
    base_count = len(samples)
    graph_notes: dict[str, Any] = {}
    graph_extras: dict[str, Any] = {}
    if args.graph:
        print("collecting graph-recall and graph-unit hits on the graph engines")
        for name in args.sets:
            got, graph_notes[name], graph_extras[name] = graph_set_samples(
                name, args.k, args.reuse_samples, args.off_domain, args.graph_queries)
            samples += got
    embedders = {n.get("embedder") for n in [*notes.values(), *graph_notes.values()]}
    if len(embedders) != 1:
        raise SystemExit(f"the sets' engines use different embedders: {embedders}")
    return _Collected(samples, notes, base_count, graph_notes, graph_extras)


def _leave_one_out_report(args: argparse.Namespace, got: _Collected,
                          results: dict[str, Any]) -> np.ndarray:
    """Fit on the other sets, score each held-out set; print and record the tables (and,
    with ``--graph``, the graph-recall hits as their mode's model scored them before)."""
    samples, base_count = got.samples, got.base_count
    start = time.perf_counter()
    loo, loo_before = leave_one_out_pair(samples, l2=args.l2)
    print(f"\nLeave one data set out: fit on the others, score the held-out set "
          f"({time.perf_counter() - start:.1f} s; targets ECE ≤ {ECE_TARGET}, "
          f"AUROC ≥ {AUROC_TARGET})")
    on = np.array([not _off(x) for x in samples])
    lines, results["leave_one_out"] = transfer_table(
        [x for x in samples if not _off(x)], loo[on])
    print("\n".join(["the sets' own queries:", *lines]))
    lines, results["leave_one_out_with_off_domain"] = transfer_table(samples, loo)
    print("\n".join(["", "with the off-domain queries (every hit irrelevant):", *lines]))
    results["leave_one_out_first_step"] = first_step(samples, loo)
    if args.graph:
        gs = samples[base_count:]
        on = np.array([not _off(x) for x in gs])
        _lines, results["graph_before_leave_one_out"] = transfer_table(
            [x for x in gs if not _off(x)], loo_before[base_count:][on])
        print("\n".join(["", "graph-recall hits scored by their mode's model (as before; "
                         "held-out):", *_lines]))
        results["graph_bridges"] = bridge_table(gs, loo[base_count:],
                                                loo_before[base_count:], got.graph_extras)
        print("\nSupporting chunks graph recall brought into the hybrid+graph top "
              f"{args.k} (not in plain hybrid's), confidence >= lower 0.05 "
              "(held-out, as served):")
        for src, row in results["graph_bridges"].items():
            print(f"  {src:16s} {row['bridges']:4d} bridges: {row['bridges_before']} before, "
                  f"{row['bridges_after']} after ({row['bridges_after_unclamped']} "
                  f"unclamped); {row['graph_only']} absent from both dense and sparse "
                  f"lists: {row['graph_only_before']} before, {row['graph_only_after']} "
                  f"after ({row['graph_only_after_unclamped']} unclamped)")
    return loo


def _fit_note(args: argparse.Namespace, got: _Collected) -> dict[str, Any]:
    """What the shipped calibration says it was fitted on (its ``fitted_on``)."""
    notes = got.notes
    note = {"dataset": "SciFact (BEIR) train split + HotpotQA and 2WikiMultiHopQA dev "
                       "(../shared/data/multihop), each set weighted equally",
            "sets": {n: v["queries"] for n, v in notes.items()},
            "split": "train (SciFact), dev (multi-hop)", "k": args.k, "units": list(UNITS),
            "labels": "relevant iff the hit's document has SciFact qrels grade > 0 or is one "
                      "of the multi-hop question's supporting passages (chunks inherit); "
                      "off-domain questions (SciFact claims on a multi-hop corpus, multi-hop "
                      "questions on SciFact's) have no relevant hit",
            "off_domain": {n: v.get("off_domain", 0) for n, v in notes.items()},
            "ranks": "0-based position in the returned list; hybrid = RRF order",
            "pool": "the query's dense and sparse recall lists, candidate_k deep",
            **{k: v for k, v in next(iter(notes.values())).items()
               if k not in ("queries", "corpus")}}
    corpora = {k: v for n in notes.values() for k, v in (n.get("corpus") or {}).items()}
    if corpora:
        note["corpus"] = corpora
    if args.graph:
        note["graph"] = {
            "models": "<mode>+graph/<unit> (chunk, document, node, triplet) for requests with "
                      "x-rcp-agentic-graphRecall whose query linked an entity; <mode>/node and "
                      "<mode>/triplet without it",
            "labels": "chunk/document as above; a node or triplet is relevant iff one of its "
                      "provenance leaves lies in a relevant document",
            "signals": "recorded as the engine scores them: the hit family's recall lists "
                       "(dense, sparse and graph recall's PageRank masses, cut as fused)",
            "engines": {n: {k: v for k, v in g.items() if k not in ("embedder",)}
                        for n, g in got.graph_notes.items()}}
    return note


def _in_domain_report(args: argparse.Namespace, got: _Collected, loo: np.ndarray | None,
                      results: dict[str, Any]) -> conf.Calibrator:
    """Fit on every set (out-of-fold probabilities by query); print and record the tables,
    every held-out cell, the corrective loop's first step and the reliability diagram."""
    samples, base_count = got.samples, got.base_count
    start = time.perf_counter()
    calibrator, _metrics, oof = collecting.calibrate_samples(samples, folds=args.folds, l2=args.l2,
                                                          seed=args.seed,
                                                          fitted_on=_fit_note(args, got))
    assert oof is not None
    print(f"\nIn domain: fitted on all sets, {args.folds} folds by query "
          f"({time.perf_counter() - start:.1f} s)")
    on = np.array([not _off(x) for x in samples])
    lines, results["in_domain"] = transfer_table([x for x in samples if not _off(x)], oof[on])
    print("\n".join(["the sets' own queries:", *lines]))
    lines, results["in_domain_with_off_domain"] = transfer_table(samples, oof)
    print("\n".join(["", "with the off-domain queries:", *lines]))
    results["in_domain_first_step"] = first_step(samples, oof)
    if loo is not None:
        base = json.loads(BASELINE.read_text(encoding="utf-8")) if BASELINE.exists() else {}
        lines, results["cells"] = cell_table(samples[:base_count], loo[:base_count],
                                             oof[:base_count], base)
        print("\nEvery held-out cell of the chunk and document models (targets: hybrid ECE <= "
              "0.03 and AUROC >= 0.90, dense and sparse ECE <= 0.04; 'was': the last "
              f"release, {BASELINE.name}):")
        print("\n".join(lines))
    print("\nCorrective loop's first step (hybrid chunk, rank 0) against upper = 0.6:")
    for label, key in (("leave-one-out", "leave_one_out_first_step"),
                       ("in domain", "in_domain_first_step")):
        for src, row in (results.get(key) or {}).items():
            print(f"  {label:14s} {src:16s} {row['clear_upper']:4d} of {row['questions']} clear "
                  f"it; {row['relevant']} first hits relevant, "
                  f"{row['clear_and_relevant']} of those that clear it")
    reliability_plot(samples, oof, args.plot)
    print(f"\nreliability diagram: {args.plot}")
    return calibrator


def _tree_node_models(args: argparse.Namespace, calibrator: conf.Calibrator,
                      results: dict[str, Any]) -> conf.Calibrator | None:
    """With ``--tree-node``, the tree-node models fitted on the SciFact engine's collapsed
    tree merged in (None when that engine has no tree); else the shipped ones kept."""
    if not args.tree_node:
        shipped = conf.Calibrator.from_json(json.loads(CALIBRATION.read_text(encoding="utf-8")))
        calibrator.models.update({k: m for k, m in shipped.models.items()
                                  if k.endswith("/tree-node")})
        if "tree-node" in shipped.fitted_on:
            calibrator.fitted_on["tree-node"] = shipped.fitted_on["tree-node"]
        return calibrator
    engine = Engine(CACHE / "engine-scifact")
    if "tree-node" not in engine.derived_status():
        print(f"no tree in {CACHE / 'engine-scifact'}: build it with build_tree=True",
              file=sys.stderr)
        return None
    _corpus, queries, qrels = load_set("scifact")
    start = time.perf_counter()
    pool = collect_pool_samples(engine, queries, qrels, k=args.k)
    print(f"\ncollected {len(pool)} labelled hits of the collapsed tree in "
          f"{time.perf_counter() - start:.1f}s")
    tree, tree_metrics = fit_tree_node(pool, engine, args.folds, args.seed, args.l2, args.k)
    print_tree_table(tree_metrics)
    results["tree_node"] = tree_metrics
    calibrator = merge_tree_models(calibrator, tree)
    engine.close()
    return calibrator


def _keep_shipped(args: argparse.Namespace, calibrator: conf.Calibrator) -> None:
    """The shipped models this run did not fit: the graph ones without ``--graph``, and the
    community ones always (``--community`` fits them alone)."""
    if not args.graph:
        shipped = conf.Calibrator.from_json(json.loads(CALIBRATION.read_text(encoding="utf-8")))
        calibrator.models.update({k: m for k, m in shipped.models.items() if _graph_key(k)})
        features = calibrator.fitted_on.setdefault("features", {})
        for key, names in (shipped.fitted_on.get("features") or {}).items():
            if key in conf.GRAPH_MODES or _graph_key(key):
                features[key] = names
        for key in ("graph", "graph_leave_one_out"):
            if key in shipped.fitted_on:
                calibrator.fitted_on[key] = shipped.fitted_on[key]
    shipped = conf.Calibrator.from_json(json.loads(CALIBRATION.read_text(encoding="utf-8")))
    calibrator.models.update({k: m for k, m in shipped.models.items() if k.endswith("/community")})
    if "community" in shipped.fitted_on:
        calibrator.fitted_on["community"] = shipped.fitted_on["community"]


def _note_transfer(args: argparse.Namespace, calibrator: conf.Calibrator,
                   results: dict[str, Any]) -> None:
    """The held-out ECE / AUROC leaving each set out, in the calibration's ``fitted_on``."""
    if "leave_one_out" not in results:
        return
    for name in ("leave_one_out", "leave_one_out_with_off_domain"):
        calibrator.fitted_on[name] = {
            key: {src: {m: r[m] for m in ("ece", "auroc")} for src, r in rows.items()}
            for key, rows in results[name].items() if not _graph_key(key)}
    if args.graph:
        calibrator.fitted_on["graph_leave_one_out"] = {
            key: {src: {m: r[m] for m in ("ece", "auroc")} for src, r in rows.items()}
            for key, rows in results["leave_one_out"].items() if _graph_key(key)}


def _write(args: argparse.Namespace, calibrator: conf.Calibrator,
           results: dict[str, Any]) -> None:
    print("\nModels fitted on all queries (raw-feature weights; P = sigmoid(b + Σ w·f))")
    for key, model in sorted(calibrator.models.items()):
        terms = ", ".join(f"{f} {w:+.3f}" for f, w in zip(model.features, model.coef))
        print(f"  {key:16s} b {model.intercept:+.3f}, {terms}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nnumbers: {args.out}")
    if args.write_params:
        calibrator.save(CALIBRATION)
        print(f"wrote {CALIBRATION}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.community:
        return community_main(args)
    got = _collect(args)
    results: dict[str, Any] = {"k": args.k,
                               "sets": {n: v["queries"] for n, v in got.notes.items()}}
    if args.ablation:
        print("\nFeature variants of the chunk and document models (held out):")
        results["ablation"] = ablation(got.samples, args.folds, args.seed, args.l2)
        path = args.out.with_name(args.out.stem + "_ablation.json")
        path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"numbers: {path}")
        return 0
    loo = _leave_one_out_report(args, got, results) if len(args.sets) > 1 else None
    calibrator = _in_domain_report(args, got, loo, results)
    if "scifact" in args.sets and max(args.rerank_k) > 0:
        _corpus, queries, qrels = load_set("scifact")
        engine = Engine(CACHE / "engine-scifact")
        print("\nRanking quality on SciFact, held-out probabilities")
        print("\n".join(rerank_table(engine, queries, qrels, args.rerank_k, args.folds,
                                     args.seed, got.samples, args.l2)))
        engine.close()
    merged = _tree_node_models(args, calibrator, results)
    if merged is None:
        return 2
    _keep_shipped(args, merged)
    _note_transfer(args, merged, results)
    _write(args, merged, results)
    return 0


if __name__ == "__main__":
    # As a script, derived units are built inside each write (as before background
    # updates): this bench reads each build's report and queries the units right after
    # the write. Set here, not on import, so a module importing this one keeps its mode.
    os.environ.setdefault("RCP_AGENTIC_DERIVED_UPDATES", "inline")
    raise SystemExit(main())
