"""The corrective loop against a single retrieve on multi-hop QA (HotpotQA, 2Wiki) and SciFact.

    python bench/corrective.py [--sets hotpotqa 2wikimultihopqa scifact] [--limit N]

For each question: a single hybrid retrieve (top 5 chunks) and the corrective loop
(``CorrectiveRetriever``: k=5 a step, at most 4 steps and 2,000 evidence tokens,
2 confident hits wanted — the default, with ``min_evidence 1`` rows beside it — and no
LLM: re-queries expand the question with words from the confident evidence). Reports Recall@2 and Recall@5 of the labelled supporting
passages (SciFact: relevant abstracts) in the ranked result / evidence set, recall
of the whole set (R@set; a single retrieve at k=10 is the same-token baseline), the
evidence tokens, the engine calls, and the loop's trace statistics, at two
threshold settings.

Every system of a set runs in the same run on one engine that holds a knowledge graph
(``build_graph=True``): the single retrieve and the loop with ``graph=False`` never touch
the graph (hybrid chunks, the graph's units left off the ladder), and the loop with graph
escalation (``graph="escalate"``) turns graph recall on (``graph_recall``) for an
ambiguous / incorrect step and may climb to the graph's units (node → path → subgraph).
At the default thresholds the loop also runs with its default, ``graph=True``: graph recall
on from the first step; a single retrieve with graph recall is the reference for it. For the graph loops the report adds how many questions took graph recall,
asked for a graph unit, and kept one in the evidence. A graph unit counts for the documents it shows
(``meta.doc_ids`` / its citations), in order, at its rank: the issue's "a graph unit is
relevant when it covers a supporting passage".

Engines: the multi-hop ones are copies of ``bench/graph.py``'s
``bench/.cache/graph-engine-<set>`` (same chunks and vectors; no embedding) with the graph
built into the copy (no communities), ``bench/.cache/corrective-graph-engine-<set>`` (the
originals are left untouched); SciFact is ``bench/graph.py scifact``'s ``bench/.cache/graph-engine-scifact``
(full train set, graph built), opened with its cached MiniLM embedder and the shipped
calibration (the embedder's identity names the bench wrapper, not the model, so the engine
would not load the calibration by itself).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scifact  # noqa: E402
from bench.data import data_path  # noqa: E402
from rcp_agentic import Engine  # noqa: E402
from rcp_agentic.agentic import ConfidenceEvaluator, CorrectiveRetriever  # noqa: E402
from rcp_agentic.models.tokenizer import count_tokens  # noqa: E402
from rcp_agentic import units  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "bench" / ".cache"
SETTINGS = {"upper 0.6 / lower 0.2": (0.6, 0.2), "upper 0.6 / lower 0.05 (default)": (0.6, 0.05)}
DEFAULT = "upper 0.6 / lower 0.05 (default)"


def load_set(name: str) -> tuple[list[dict[str, Any]], list[tuple[str, set[str]]]]:
    """Corpus documents and (question, relevant doc ids) pairs."""
    if name == "scifact":
        qrels = scifact.load_qrels()
        queries = scifact.load_queries()
        return [], [(queries[q], set(rel)) for q, rel in qrels.items() if q in queries]
    root = data_path("multihop", name)
    docs = [json.loads(line) for line in (root / "corpus.jsonl").open(encoding="utf-8")]
    questions = [json.loads(line) for line in (root / "questions.jsonl").open(encoding="utf-8")]
    corpus = [{"id": d["_id"], "title": d["title"], "text": f"{d['title']}\n\n{d['text']}"}
              for d in docs]
    return corpus, [(q["question"], set(q["supporting_ids"])) for q in questions]


SAMPLE_SETS = ("scifact", "hotpotqa", "2wikimultihopqa")


def held_out_calibrator(name: str) -> Any:
    """Confidence models fitted without ``name``'s questions: the chunk, document and graph
    models refitted (as ``bench/confidence.py`` fits them) on the labelled hits the other
    sets' runs of ``bench/confidence.py`` cached (``bench/.cache/confidence-<set>.pkl`` and
    ``confidence-graph-<set>.pkl``); every other model as shipped. The loop on a set is then
    judged by confidence that never saw it, as on a corpus a user brings."""
    import pickle

    from rcp_agentic.pipeline.calibration_fit import fit
    from rcp_agentic.pipeline.confidence import Calibrator

    train: list[Any] = []
    for other in SAMPLE_SETS:
        if other == name:
            continue
        for pkl in (CACHE / f"confidence-{other}.pkl", CACHE / f"confidence-graph-{other}.pkl"):
            if pkl.exists():
                with pkl.open("rb") as fh:
                    train += pickle.load(fh)[0]
    if not train:
        raise SystemExit("no cached calibration samples: run `python bench/confidence.py` "
                         "(and `--graph`) first, or pass --calibration shipped")
    fitted = fit(train)
    models = {**Calibrator.default().models, **fitted.models}
    return Calibrator(models, fitted_on={"held_out": name,
                                         "sources": sorted({x.source for x in train})})


def engine_for(name: str) -> Engine:
    """The set's engine with a knowledge graph (see the module docstring), built once."""
    if name == "scifact":
        return _scifact_engine()
    path = CACHE / f"corrective-graph-engine-{name}"
    done = path / "graph-built.json"     # written once the copy holds its graph
    if not done.exists():
        _copy_engine(CACHE / f"graph-engine-{name}", path)
        t0 = time.perf_counter()
        # No communities, as in the release this is compared with (bench/results/
        # corrective_baseline.json); their builder has its own bench/community_scale.py.
        eng = Engine(path, build_graph=True, graph_communities=False)
        eng.config.save(path)            # reopened later with the graph on
        reports = eng.update_derived(full=True)
        done.write_text(json.dumps({"seconds": round(time.perf_counter() - t0, 1),
                                    "derived": [r.__dict__ for r in reports]}, default=str))
        print(f"  built the graph of {name} in {time.perf_counter() - t0:.0f} s: "
              f"{eng.derived_status()}", flush=True)
        return eng
    return Engine(path)


def _copy_engine(src: Path, dst: Path) -> None:
    """A consistent copy of an engine directory (SQLite through its backup API)."""
    import shutil
    import sqlite3

    if not (src / "indexed.txt").exists():
        raise SystemExit(f"{src} is missing or incomplete: run `python bench/graph.py recall` "
                         "first (it indexes the multi-hop corpora there)")
    if dst.exists():
        shutil.rmtree(dst)               # an interrupted copy: start over
    dst.mkdir(parents=True)
    shutil.copy2(src / "config.json", dst / "config.json")
    shutil.copytree(src / "chroma", dst / "chroma")
    with sqlite3.connect(f"file:{src / 'engine.db'}?mode=ro", uri=True) as a, \
            sqlite3.connect(dst / "engine.db") as b:
        a.backup(b)


def _scifact_engine() -> Engine:
    from bench.embedcache import EmbeddingCache, LangChainCachedEmbeddings
    from rcp_agentic.pipeline.confidence import Calibrator

    path = CACHE / "graph-engine-scifact"
    if not (path / "indexed.json").exists():
        raise SystemExit(f"{path} is missing or incomplete: run `python bench/graph.py "
                         "scifact` first")
    eng = Engine(path, embedder=LangChainCachedEmbeddings(EmbeddingCache(show_progress=False)))
    if eng.calibrator is None:           # same MiniLM vectors under the wrapper's identity
        eng.calibrator = Calibrator.default()
    return eng


def docs_of(hit: dict[str, Any]) -> list[str]:
    """The documents a hit shows: a chunk's own, a graph unit's (``meta.doc_ids``, else the
    documents of its citations), in order."""
    doc = (hit.get("chunk") or {}).get("docId") or (hit.get("meta") or {}).get("doc_id")
    if doc:
        return [doc]
    listed = (hit.get("meta") or {}).get("doc_ids")
    if isinstance(listed, list) and listed:
        return [str(d) for d in listed]
    cited = [c.get("docId") for c in hit.get("citations") or [] if isinstance(c, dict)]
    return list(dict.fromkeys(str(d) for d in cited if d))


def ranked_docs(hits: list[dict[str, Any]]) -> list[str]:
    return [d for h in hits for d in docs_of(h)]


def recall(ranked_docs: list[str], relevant: set[str], at: int) -> float:
    seen: list[str] = []
    for d in ranked_docs:
        if d not in seen:
            seen.append(d)
    return len(set(seen[:at]) & relevant) / len(relevant)


def is_graph_unit(unit: Any) -> bool:
    """Whether ``unit`` is one of the knowledge graph's kinds (by the unit registry)."""
    try:
        return units.get(str(unit)).enabled_by == "build_graph"
    except KeyError:
        return False


def run_single(eng: Engine, name: str, questions: list[tuple[str, set[str]]], k: int,
               **extra: Any) -> dict[str, float]:
    single: dict[str, list[float]] = {"r2": [], "r5": [], "rset": [], "tokens": [], "ms": []}
    for q, rel in questions:
        t0 = time.perf_counter()
        hits = [h.to_wire() for h in eng.retrieve(q, k=k, **extra).hits]
        single["ms"].append((time.perf_counter() - t0) * 1000)
        docs = ranked_docs(hits)
        single["r2"].append(recall(docs, rel, 2))
        single["r5"].append(recall(docs, rel, 5))
        single["rset"].append(recall(docs, rel, len(docs)))
        single["tokens"].append(sum(count_tokens(h.get("text") or "") for h in hits))
    row = _summary(single)
    label = f"single retrieve k={k}" + (" + graph recall" if extra else "")
    print(f"  {name:<16} {label:<66}R@2 {row['R@2']:.3f}  "
          f"R@5 {row['R@5']:.3f}  R@set {row['R@set']:.3f}  tokens {row['tokens']:.0f}  "
          "calls 1", flush=True)
    return row


def run_loop(eng: Engine, name: str, questions: list[tuple[str, set[str]]], label: str,
             upper: float, lower: float, graph: bool | str,
             min_evidence: int | None = None, refine_first: bool = False) -> dict[str, Any]:
    """The loop at one threshold setting; ``graph``: the loop's own argument (True: graph
    recall from the first step, the default; "escalate": only on retries; False: never);
    ``min_evidence``: None for the loop's default (as the README runs it); ``refine_first``:
    drop the first step's hits below ``lower`` too (the release's loop)."""
    extra: dict[str, Any] = {} if min_evidence is None else {"min_evidence": min_evidence}
    if refine_first:
        extra["refine_first"] = True
    loop = CorrectiveRetriever(eng, k=5, max_steps=4, max_tokens=2000,
                               evaluator=ConfidenceEvaluator(upper, lower), graph=graph, **extra)
    stats: dict[str, list[float]] = {"r2": [], "r5": [], "rset": [], "tokens": [], "ms": [],
                                     "calls": [], "evidence": []}
    actions: Counter[str] = Counter()
    verdicts: Counter[str] = Counter()
    units_asked: Counter[str] = Counter()
    took = {"graph recall": 0, "graph step kept nothing": 0, "graph unit asked": 0,
            "graph unit kept": 0}
    for q, rel in questions:
        t0 = time.perf_counter()
        res = loop.run(q)
        stats["ms"].append((time.perf_counter() - t0) * 1000)
        docs = ranked_docs(res.evidence)
        stats["r2"].append(recall(docs, rel, 2))
        stats["r5"].append(recall(docs, rel, 5))
        stats["rset"].append(recall(docs, rel, len(docs)))
        stats["tokens"].append(res.tokens)
        stats["calls"].append(res.calls)
        stats["evidence"].append(len(res.evidence))
        actions.update(s.action for s in res.trace)
        units_asked.update(s.unit for s in res.trace)
        verdicts[res.trace[0].verdict or "error"] += 1
        took["graph recall"] += any(s.graph for s in res.trace)
        # the graph step's new hits were all below the lower threshold (or none came back)
        took["graph step kept nothing"] += any(s.action == "graph" and not s.kept
                                               for s in res.trace)
        took["graph unit asked"] += any(is_graph_unit(s.unit) for s in res.trace)
        took["graph unit kept"] += any(is_graph_unit(h.get("unit")) for h in res.evidence)
    summary: dict[str, Any] = _summary(stats)
    summary["actions"] = dict(actions)
    summary["first verdicts"] = dict(verdicts)
    if graph:
        summary["units asked"] = dict(units_asked)
        summary["questions taking"] = took
    title = f"corrective {label}" + (" + graph" if graph else "") + \
        (" from the start" if graph is True else "") + \
        (f", min_evidence {min_evidence}" if min_evidence is not None else "") + \
        (", first step refined" if refine_first else "")
    print(f"  {name:<16} {title:<66}R@2 {summary['R@2']:.3f}  "
          f"R@5 {summary['R@5']:.3f}  R@set {summary['R@set']:.3f}  "
          f"tokens {summary['tokens']:.0f}  "
          f"calls {summary['calls']:.2f}  evidence {summary['evidence']:.1f}  "
          f"first verdicts {dict(verdicts)}", flush=True)
    if graph:
        print(f"  {'':<16} {'':<66}questions taking graph recall {took['graph recall']} "
              f"(its step kept nothing: {took['graph step kept nothing']}), asking a graph unit {took['graph unit asked']}, keeping one "
              f"{took['graph unit kept']}; units asked {dict(units_asked)}", flush=True)
    return summary


def run_set(name: str, limit: int | None, settings: list[str],
            calibration: str = "held-out") -> dict[str, Any]:
    corpus, questions = load_set(name)
    questions = questions[:limit] if limit else questions
    eng = engine_for(name)
    if calibration == "held-out":
        eng.calibrator = held_out_calibrator(name)
    caps = eng.capabilities()
    offered = (caps.get("retrieve") or {}).get("units") or []
    out: dict[str, Any] = {"questions": len(questions), "engine": str(eng.path.relative_to(REPO)),
                           "calibration": calibration,
                           "units offered": offered,
                           "graph units offered": [u for u in offered if is_graph_unit(u)],
                           "graph recall offered": CorrectiveRetriever(eng).graph_recall_offered(0)}
    print(f"  {name}: {len(questions)} questions on {out['engine']}; graph recall offered "
          f"{out['graph recall offered']}, units {offered}", flush=True)
    for k in (5, 10):
        out[f"single k={k}"] = run_single(eng, name, questions, k)
    for k in (5, 10):  # k=10: the same-token reference of the graph loops' set recall
        out[f"single k={k} + graph recall"] = run_single(eng, name, questions, k,
                                                         graph_recall=True)
    for label in settings:
        upper, lower = SETTINGS[label]
        # graph=False rows: the regression baseline of the loop without the graph.
        for graph, title in ((False, ""), ("escalate", " + graph"),
                             (True, " + graph from the start")):
            if graph is True and label != DEFAULT:
                continue
            for least in (None, 1):
                row = f"corrective {label}{title}" + ("" if least is None else
                                                      f", min_evidence {least}")
                out[row] = run_loop(eng, name, questions, label, upper, lower, graph, least)
            if label == DEFAULT:  # the release's refinement of the first step, beside it
                out[f"corrective {label}{title}, first step refined"] = run_loop(
                    eng, name, questions, label, upper, lower, graph, refine_first=True)
    eng.close()
    return out


def _summary(stats: dict[str, list[float]]) -> dict[str, float]:
    out = {"R@2": statistics.mean(stats["r2"]), "R@5": statistics.mean(stats["r5"]),
           "R@set": statistics.mean(stats["rset"]),
           "tokens": statistics.mean(stats["tokens"]), "p50_ms": statistics.median(stats["ms"])}
    if "calls" in stats:
        out["calls"] = statistics.mean(stats["calls"])
        out["evidence"] = statistics.mean(stats["evidence"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", default=["hotpotqa", "2wikimultihopqa", "scifact"])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--lower", nargs="+", type=float, default=[v[1] for v in SETTINGS.values()],
                    help="the threshold settings to run, by lower threshold (default: all)")
    ap.add_argument("--calibration", choices=("held-out", "shipped"), default="held-out",
                    help="held-out (default): confidence models fitted without the set's "
                         "questions (see held_out_calibrator); shipped: the package's models, "
                         "which were fitted on every set (in domain)")
    ap.add_argument("--out", default=str(REPO / "bench/results/corrective.json"))
    args = ap.parse_args()
    results = {}
    for name in args.sets:
        results[name] = run_set(name, args.limit,
                                [k for k, v in SETTINGS.items() if v[1] in args.lower],
                                args.calibration)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    # As a script, derived units are built inside each write (as before background
    # updates): this bench reads each build's report and queries the units right after
    # the write. Set here, not on import, so a module importing this one keeps its mode.
    os.environ.setdefault("RCP_AGENTIC_DERIVED_UPDATES", "inline")
    main()
