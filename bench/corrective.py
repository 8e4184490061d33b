"""The corrective loop against a single retrieve on multi-hop QA (HotpotQA, 2Wiki, MuSiQue).

    python bench/corrective.py [--sets hotpotqa 2wikimultihopqa musique-train] [--limit N]
                               [--calibration held-out|shipped] [--tune] [--ablations]

For each question: a single hybrid retrieve (top 5 and top 10 chunks, with and without graph
recall) and the corrective loop (``CorrectiveRetriever``: k=5 a step, at most 4 steps and
2,000 evidence tokens, thresholds 0.6 / 0.05, no LLM) with and without the graph, in two
versions in the same run: *release* (``follow=0, cover=0``: stop at the first step with two
confident hits, re-query with the question expanded by the names of the best hits, that
query's hits ranked after the question's own) and *bridge* (the defaults: follow the bridge
entities of the evidence, stop when the evidence covers the question's terms). Per loop:

* Recall@2 / @5 of the labelled supporting passages in the ranked evidence, recall of the
  whole evidence (R@set; a single retrieve at k=10 is the same-token reference), evidence
  tokens and engine calls — and the same for the loop's *own first step* (its first call's
  hits), so the loop is compared with what it started from;
* per hop position of the supporting passage (MuSiQue, whose passages are in hop order) and
  per question type, R@5 of the first step and of the loop;
* which step found each supporting passage (``meta.step``: 1 = the first retrieve, then
  the follow-ups; "missed" when the evidence lacks it) and why each question stopped.

``--tune`` chooses the loop's knobs held out: ``follow`` (bridge entities per follow step),
``hops`` (bridges followed in a chain) and ``cover`` (the share of the question's terms the
evidence must hold to stop). Each set's loop runs once per ``follow`` to the end of its
trajectory (``cover=1``, the most ``hops``); the stop rule is then replayed for every
(``hops``, ``cover``) from the trace (exact: a stop only cuts a trajectory short). A
setting is scored by R@5 + R@set, averaged over sets and graph on/off, among the settings
whose tokens stay within a single k=10 retrieve's (ties: fewer calls, then the smaller
knobs); chosen 5-fold inside each set and leave-one-set-out across the sets, each reported
on the questions it did not see.

Engines: the multi-hop ones are copies of ``bench/graph.py``'s
``bench/.cache/graph-engine-<set>`` (same chunks and vectors; no embedding) with the graph
built into the copy (no communities), ``bench/.cache/corrective-graph-engine-<set>`` (the
originals are left untouched); SciFact (``--sets scifact``) is ``bench/graph.py scifact``'s
``bench/.cache/graph-engine-scifact`` (full train set, graph built), opened with its cached
MiniLM embedder and the shipped calibration. A graph unit counts for the documents it shows
(``meta.doc_ids`` / its citations), in order, at its rank.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scifact  # noqa: E402
from bench.data import data_path  # noqa: E402
from rcp_agentic import Engine  # noqa: E402
from rcp_agentic import units  # noqa: E402
from rcp_agentic.agentic import (ConfidenceEvaluator, CorrectiveResult,  # noqa: E402
                                 CorrectiveRetriever)
from rcp_agentic.agentic.loop import COVER, FOLLOW, HOPS  # noqa: E402
from rcp_agentic.models.tokenizer import count_tokens  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "bench" / ".cache"
SETS = ("hotpotqa", "2wikimultihopqa", "musique-train")
UPPER, LOWER = 0.6, 0.05
LOOP = {"k": 5, "max_steps": 4, "max_tokens": 2000}      # the README's loop
RELEASE = {"follow": 0, "cover": 0.0}                    # the loop before bridge following
# The tuning grid (--tune).
FOLLOWS = (1, 2, 3, 4)
HOPS_GRID = (1, 2, 3)
COVERS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
FOLDS = 5


@dataclass(frozen=True)
class Question:
    """A question, its supporting documents (in hop order when ``hop_ordered``) and type."""

    text: str
    gold: tuple[str, ...]
    type: str = ""
    hop_ordered: bool = False


def load_questions(name: str) -> tuple[list[dict[str, Any]], list[Question]]:
    """Corpus documents and questions."""
    if name == "scifact":
        qrels = scifact.load_qrels()
        queries = scifact.load_queries()
        return [], [Question(queries[q], tuple(sorted(rel)), "claim")
                    for q, rel in qrels.items() if q in queries]
    root = data_path("multihop", name)
    docs = [json.loads(line) for line in (root / "corpus.jsonl").open(encoding="utf-8")]
    rows = [json.loads(line) for line in (root / "questions.jsonl").open(encoding="utf-8")]
    corpus = [{"id": d["_id"], "title": d["title"], "text": f"{d['title']}\n\n{d['text']}"}
              for d in docs]
    return corpus, [Question(q["question"], tuple(q["supporting_ids"]), q.get("type") or "",
                             "decomposition" in q) for q in rows]


def load_set(name: str) -> tuple[list[dict[str, Any]], list[tuple[str, set[str]]]]:
    """Corpus documents and (question, relevant doc ids) pairs."""
    corpus, questions = load_questions(name)
    return corpus, [(q.text, set(q.gold)) for q in questions]


SAMPLE_SETS = ("scifact", "hotpotqa", "2wikimultihopqa")


def held_out_calibrator(name: str) -> Any:
    """Confidence models fitted without ``name``'s questions: the chunk, document and graph
    models refitted (as ``bench/confidence.py`` fits them) on the labelled hits the other
    sets' runs of ``bench/confidence.py`` cached (``bench/.cache/confidence-<set>.pkl`` and
    ``confidence-graph-<set>.pkl``); every other model as shipped. The loop on a set is then
    judged by confidence that never saw it, as on a corpus a user brings. (MuSiQue is in no
    fit: the shipped models never saw it either.)"""
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
        raise SystemExit(f"{src} is missing or incomplete: run `python bench/graph.py engine "
                         "--sets <set>` first (it indexes the multi-hop corpora there)")
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


def ranked_docs(hits: Iterable[dict[str, Any]]) -> list[str]:
    return [d for h in hits for d in docs_of(h)]


def first_seen(docs: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(docs))


def recall(ranked: Sequence[str], relevant: Iterable[str], at: int | None = None) -> float:
    """The share of ``relevant`` among the first ``at`` distinct documents of ``ranked``."""
    rel = set(relevant)
    return len(set(first_seen(ranked)[:at]) & rel) / len(rel)


def is_graph_unit(unit: Any) -> bool:
    """Whether ``unit`` is one of the knowledge graph's kinds (by the unit registry)."""
    try:
        return units.get(str(unit)).enabled_by == "build_graph"
    except KeyError:
        return False


# --- what one loop run keeps of each question ------------------------------------------------

@dataclass
class Trajectory:
    """What the bench keeps of one loop result: per step its action, hop, verdict, coverage,
    tokens and the documents of its hits; per evidence hit its documents, step, confidence
    and whether it attests a followed bridge; and why the loop stopped."""

    steps: list[dict[str, Any]]
    evidence: list[dict[str, Any]]
    stop: str
    tokens: int

    @classmethod
    def of(cls, res: CorrectiveResult) -> Trajectory:
        held = {h["id"]: docs_of(h) for h in res.evidence}
        steps = [{"action": s.action, "hop": s.hop, "verdict": s.verdict,
                  "coverage": s.coverage, "tokens": s.tokens, "graph": s.graph, "unit": s.unit,
                  "kept": s.kept,
                  "docs": [d for i in s.hit_ids for d in held.get(i) or _id_docs(i)]}
                 for s in res.trace]
        evidence = [{"docs": docs_of(h), "step": (h.get("meta") or {}).get("step", 1),
                     "confidence": h.get("confidence"), "unit": h.get("unit"),
                     "follows": bool((h.get("meta") or {}).get("follows"))}
                    for h in res.evidence]
        return cls(steps, evidence, res.stop_reason, res.tokens)

    def cut(self, *, cover: float, hops: int, min_evidence: int = 2) -> tuple[int, str]:
        """How many steps the loop takes with ``cover`` and ``hops`` (this trajectory ran with
        ``cover=1`` and more hops), and why it stops: ``CorrectiveRetriever`` stops after the
        first step that is correct (or found a followed bridge) with ``min_evidence``
        confident hits and the coverage, and never runs a step more bridges deep than
        ``hops``."""
        for t, step in enumerate(self.steps, 1):
            if step["hop"] > hops:
                return t - 1, "hops"
            found = any(h["follows"] and h["step"] == t for h in self.evidence)
            confident = sum(1 for h in self.evidence if h["step"] <= t and (
                h["follows"] or (h["confidence"] or 0.0) >= UPPER))
            if (step["verdict"] == "correct" or found) and confident >= min_evidence \
                    and (step["coverage"] or 0.0) >= cover - 1e-9:
                return t, "correct"
        return len(self.steps), stop_kind(self.stop)

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "evidence": self.evidence, "stop": self.stop,
                "tokens": self.tokens}

    def upto(self, steps: int) -> tuple[list[str], int]:
        """The ranked evidence documents and tokens after the first ``steps`` steps."""
        docs = [d for h in self.evidence if h["step"] <= steps for d in h["docs"]]
        return docs, sum(s["tokens"] for s in self.steps[:steps])


def _id_docs(hit_id: str) -> list[str]:
    """The document of a chunk, page or document id (``doc:<docId>#…``); none for others."""
    return [hit_id[4:].split("#", 1)[0]] if hit_id.startswith("doc:") else []


STOPS = ("correct", "saturated", "hops", "step limit", "token budget", "nothing left to try",
         "the last engine failed")


def stop_kind(reason: str) -> str:
    """A stop reason's kind (its leading words, before the numbers and the details)."""
    for kind in STOPS:
        if reason.startswith(kind):
            return kind
    return "no new query" if reason.endswith("no new query to try") else reason[:40]


# --- metrics ------------------------------------------------------------------------------------

def summarize(questions: Sequence[Question], runs: Sequence[Trajectory],
              cuts: Sequence[tuple[int, str]] | None = None, *,
              per_question: bool = False) -> dict[str, Any]:
    """First step vs loop (cut per ``cuts``, else whole): recall, tokens (the first step's:
    the evidence it kept), calls, per hop position and type, the step that found each
    supporting passage, stop reasons; with ``per_question``, each question's too."""
    rows: dict[str, list[float]] = {k: [] for k in (
        "first R@2", "first R@5", "first R@set", "first tokens", "R@2", "R@5", "R@set",
        "tokens", "calls")}
    hop: dict[int, list[list[int]]] = {}
    kinds: dict[str, list[list[float]]] = {}
    found: Counter[str] = Counter()
    stops: Counter[str] = Counter()
    each: list[list[Any]] = []
    for i, (q, run) in enumerate(zip(questions, runs, strict=True)):
        n, stop = cuts[i] if cuts is not None else (len(run.steps), stop_kind(run.stop))
        first = run.steps[0]["docs"] if run.steps else []
        docs, tokens = run.upto(n)
        rows["first R@2"].append(recall(first, q.gold, 2))
        rows["first R@5"].append(recall(first, q.gold, 5))
        rows["first R@set"].append(recall(first, q.gold))
        rows["first tokens"].append(run.steps[0]["tokens"] if run.steps else 0)
        rows["R@2"].append(recall(docs, q.gold, 2))
        rows["R@5"].append(recall(docs, q.gold, 5))
        rows["R@set"].append(recall(docs, q.gold))
        rows["tokens"].append(tokens)
        rows["calls"].append(n)
        top_first, top_loop = set(first_seen(first)[:5]), set(first_seen(docs)[:5])
        if q.hop_ordered:
            for pos, g in enumerate(q.gold, 1):
                hop.setdefault(pos, [[], []])
                hop[pos][0].append(int(g in top_first))
                hop[pos][1].append(int(g in top_loop))
        kinds.setdefault(q.type or "-", [[], []])
        kinds[q.type or "-"][0].append(recall(first, q.gold, 5))
        kinds[q.type or "-"][1].append(recall(docs, q.gold, 5))
        steps = [min((h["step"] for h in run.evidence if h["step"] <= n and g in h["docs"]),
                     default=None) for g in q.gold]
        found.update("missed" if step is None else f"step {step}" for step in steps)
        stops[stop] += 1
        each.append([steps, stop, n])
    out: dict[str, Any] = {k: round(statistics.mean(v), 4) for k, v in rows.items()}
    if hop:
        out["hop R@5 first / loop"] = {
            f"hop {p}": [round(statistics.mean(a), 3), round(statistics.mean(b), 3), len(a)]
            for p, (a, b) in sorted(hop.items())}
    out["type R@5 first / loop"] = {
        t: [round(statistics.mean(a), 3), round(statistics.mean(b), 3), len(a)]
        for t, (a, b) in sorted(kinds.items())}
    out["found by"] = dict(sorted(found.items()))
    out["stops"] = dict(stops.most_common())
    if per_question:  # the step that found each supporting passage (None: missed), why it
        out["per question"] = each  # stopped, its calls
    return out


def run_single(eng: Engine, name: str, questions: Sequence[Question], k: int,
               **extra: Any) -> dict[str, Any]:
    single: dict[str, list[float]] = {"R@2": [], "R@5": [], "R@set": [], "tokens": []}
    hop: dict[int, list[int]] = {}
    for q in questions:
        hits = [h.to_wire() for h in eng.retrieve(q.text, k=k, **extra).hits]
        docs = ranked_docs(hits)
        single["R@2"].append(recall(docs, q.gold, 2))
        single["R@5"].append(recall(docs, q.gold, 5))
        single["R@set"].append(recall(docs, q.gold))
        single["tokens"].append(sum(count_tokens(h.get("text") or "") for h in hits))
        if q.hop_ordered:
            top = set(first_seen(docs)[:5])
            for pos, g in enumerate(q.gold, 1):
                hop.setdefault(pos, []).append(int(g in top))
    row: dict[str, Any] = {k2: round(statistics.mean(v), 4) for k2, v in single.items()}
    if hop:
        row["hop R@5"] = {f"hop {p}": round(statistics.mean(v), 3) for p, v in sorted(hop.items())}
    label = f"single retrieve k={k}" + (" + graph recall" if extra else "")
    print(f"  {name:<16} {label:<44}R@2 {row['R@2']:.3f}  R@5 {row['R@5']:.3f}  "
          f"R@set {row['R@set']:.3f}  tokens {row['tokens']:.0f}  calls 1"
          + (f"  {row['hop R@5']}" if hop else ""), flush=True)
    return row


def run_loop(eng: Engine, questions: Sequence[Question], *, graph: bool | str,
             **knobs: Any) -> list[Trajectory]:
    """One loop setting (``LOOP`` plus ``knobs``) over ``questions``."""
    loop = CorrectiveRetriever(eng, evaluator=ConfidenceEvaluator(UPPER, knobs.pop("lower", LOWER)),
                               graph=graph, **{**LOOP, **knobs})
    return [Trajectory.of(loop.run(q.text)) for q in questions]


def print_loop(name: str, label: str, row: dict[str, Any]) -> None:
    print(f"  {name:<16} {label:<44}R@2 {row['first R@2']:.3f} → {row['R@2']:.3f}  "
          f"R@5 {row['first R@5']:.3f} → {row['R@5']:.3f}  "
          f"R@set {row['first R@set']:.3f} → {row['R@set']:.3f}  "
          f"tokens {row['first tokens']:.0f} → {row['tokens']:.0f}  calls {row['calls']:.2f}",
          flush=True)
    extra = {k: row[k] for k in ("hop R@5 first / loop", "found by", "stops") if k in row}
    print(f"  {'':<16} {'':<44}{extra}", flush=True)


# --- held-out choice of the knobs ----------------------------------------------------------------

@dataclass
class SetRuns:
    """One set's trajectories per (graph, follow), run to the end, and its k=10 tokens."""

    questions: list[Question]
    runs: dict[tuple[bool, int], list[Trajectory]] = field(default_factory=dict)
    k10_tokens: dict[bool, list[float]] = field(default_factory=dict)


Setting = tuple[int, int, float]  # follow, hops, cover


def score(data: dict[str, SetRuns], picks: dict[str, Sequence[int]], setting: Setting
          ) -> tuple[float, bool, float]:
    """(R@5 + R@set averaged over sets and graph modes, whether the tokens stay within one k=10
    retrieve's on every set and mode, mean calls) of ``setting`` on the questions ``picks``."""
    follow, hops, cover = setting
    values, within, calls = [], True, []
    for name, idx in picks.items():
        if not idx:
            continue
        sr = data[name]
        for graph in (False, True):
            runs = sr.runs[(graph, follow)]
            r5 = rs = tok = cl = 0.0
            for i in idx:
                n, _why = runs[i].cut(cover=cover, hops=hops)
                docs, tokens = runs[i].upto(n)
                r5 += recall(docs, sr.questions[i].gold, 5)
                rs += recall(docs, sr.questions[i].gold)
                tok += tokens
                cl += n
            values.append((r5 + rs) / len(idx))
            within &= tok / len(idx) <= statistics.mean(sr.k10_tokens[graph][i] for i in idx)
            calls.append(cl / len(idx))
    return statistics.mean(values), within, statistics.mean(calls)


GRID: list[Setting] = list(itertools.product(FOLLOWS, HOPS_GRID, COVERS))


def choose(data: dict[str, SetRuns], picks: dict[str, Sequence[int]]) -> Setting:
    """The best setting on ``picks`` (module docstring): within the token bound, highest
    R@5 + R@set, then fewest calls, then the smallest knobs."""
    scored = [(s, *score(data, picks, s)) for s in GRID]
    pool = [x for x in scored if x[2]] or scored
    return min(pool, key=lambda x: (-round(x[1], 6), round(x[3], 6), x[0]))[0]


def tune(data: dict[str, SetRuns]) -> dict[str, Any]:
    """5-fold inside each set and leave-one-set-out: the chosen settings and, per set and
    graph mode, the held-out metrics of what was chosen without those questions."""
    out: dict[str, Any] = {"grid": {"follow": FOLLOWS, "hops": HOPS_GRID, "cover": COVERS}}
    every = {name: list(range(len(sr.questions))) for name, sr in data.items()}
    out["all sets"] = choose(data, every)
    for scheme in ("5-fold", "leave-one-set-out")[:1 if len(data) < 2 else 2]:
        rows: dict[str, Any] = {}
        for name, sr in data.items():
            n = len(sr.questions)
            if scheme == "5-fold":
                folds = [[i for i in range(n) if i % FOLDS == f] for f in range(FOLDS)]
                chosen = [choose(data, {name: [i for i in range(n) if i % FOLDS != f]})
                          for f in range(FOLDS)]
            else:
                folds = [list(range(n))]
                chosen = [choose(data, {o: every[o] for o in data if o != name})]
            rows[name] = {"chosen": [list(c) for c in chosen]}
            for graph in (False, True):
                runs: list[Trajectory] = [sr.runs[(graph, 1)][0]] * n
                cuts: list[tuple[int, str]] = [(0, "")] * n
                for fold, (follow, hops, cover) in zip(folds, chosen, strict=True):
                    for i in fold:
                        runs[i] = sr.runs[(graph, follow)][i]
                        cuts[i] = runs[i].cut(cover=cover, hops=hops)
                rows[name]["graph" if graph else "no graph"] = summarize(sr.questions, runs, cuts)
        out[scheme] = rows
    return out


def tuning_cache(name: str, calibration: str, limit: int | None) -> Path:
    return CACHE / f"corrective-tune-{name}-{calibration}{f'-{limit}' if limit else ''}.json"


def save_tuning(path: Path, sr: SetRuns) -> None:
    path.write_text(json.dumps({
        "questions": [q.__dict__ for q in sr.questions],
        "k10_tokens": {str(g): v for g, v in sr.k10_tokens.items()},
        "runs": {f"{g}:{f}": [t.to_json() for t in runs] for (g, f), runs in sr.runs.items()}}))


def load_tuning(path: Path) -> SetRuns:
    data = json.loads(path.read_text())
    sr = SetRuns([Question(q["text"], tuple(q["gold"]), q["type"], q["hop_ordered"])
                  for q in data["questions"]])
    sr.k10_tokens = {g == "True": v for g, v in data["k10_tokens"].items()}
    for key, runs in data["runs"].items():
        graph, follow = key.split(":")
        sr.runs[(graph == "True", int(follow))] = [Trajectory(**t) for t in runs]
    return sr


def run_tuning(eng: Engine, sr: SetRuns) -> None:
    """Fill ``sr`` with the trajectories ``tune`` replays."""
    for graph in (False, True):
        extra = {"graph_recall": True} if graph else {}
        sr.k10_tokens[graph] = [sum(count_tokens(h.text or "")
                                    for h in eng.retrieve(q.text, k=10, **extra).hits)
                                for q in sr.questions]
        for follow in FOLLOWS:
            loop = CorrectiveRetriever(eng, evaluator=ConfidenceEvaluator(UPPER, LOWER),
                                       graph=graph, follow=follow, cover=1.0,
                                       hops=max(HOPS_GRID), **LOOP)
            sr.runs[(graph, follow)] = [Trajectory.of(loop.run(q.text)) for q in sr.questions]


# --- a set -------------------------------------------------------------------------------------

def run_set(name: str, limit: int | None, calibration: str, ablations: bool,
            tuning: SetRuns | None) -> dict[str, Any]:
    _corpus, questions = load_questions(name)
    questions = questions[:limit] if limit else questions
    eng = engine_for(name)
    if calibration == "held-out":
        eng.calibrator = held_out_calibrator(name)
    out: dict[str, Any] = {"questions": len(questions), "engine": str(eng.path.relative_to(REPO)),
                           "calibration": calibration,
                           "loop": {**LOOP, "upper": UPPER, "lower": LOWER},
                           "defaults": {"follow": FOLLOW, "hops": HOPS, "cover": COVER},
                           "graph recall offered": CorrectiveRetriever(eng).graph_recall_offered(0)}
    print(f"  {name}: {len(questions)} questions on {out['engine']}; graph recall offered "
          f"{out['graph recall offered']}", flush=True)
    for k in (5, 10):
        out[f"single k={k}"] = run_single(eng, name, questions, k)
    for k in (5, 10):
        out[f"single k={k} + graph recall"] = run_single(eng, name, questions, k,
                                                         graph_recall=True)
    for graph, title in ((False, "no graph"), (True, "graph")):
        for version, knobs in (("release", RELEASE), ("bridge", {})):
            label = f"loop {version}, {title}"
            row = summarize(questions, run_loop(eng, questions, graph=graph, **knobs),
                            per_question=True)
            out[label] = row
            print_loop(name, label, row)
    if ablations:
        for label, graph, knobs in (
                ("loop bridge, graph escalate", "escalate", {}),
                ("loop bridge, graph, min_evidence 1", True, {"min_evidence": 1}),
                ("loop bridge, graph, first step refined", True, {"refine_first": True}),
                ("loop bridge, graph, lower 0.2", True, {"lower": 0.2}),
                ("loop bridge, no graph, lower 0.2", False, {"lower": 0.2})):
            row = summarize(questions, run_loop(eng, questions, graph=graph, **knobs))
            out[label] = row
            print_loop(name, label, row)
    if tuning is not None:
        tuning.questions = list(questions)
        run_tuning(eng, tuning)
    eng.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS))
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--calibration", choices=("held-out", "shipped"), default="held-out",
                    help="held-out (default): confidence models fitted without the set's "
                         "questions (see held_out_calibrator); shipped: the package's models, "
                         "which were fitted on SciFact, HotpotQA and 2Wiki (not MuSiQue)")
    ap.add_argument("--ablations", action="store_true",
                    help="also graph escalation, min_evidence 1, the first step refined, and "
                         "lower 0.2")
    ap.add_argument("--tune", action="store_true",
                    help="choose follow / hops / cover held out (module docstring); the "
                         "trajectories are kept in bench/.cache/corrective-tune-<set>-*.json")
    ap.add_argument("--retune", action="store_true",
                    help="only the choice, replayed from the trajectories a --tune run kept")
    ap.add_argument("--out", default=str(REPO / "bench/results/corrective.json"))
    args = ap.parse_args()
    results: dict[str, Any] = {}
    tuning: dict[str, SetRuns] = {}
    for name in args.sets:
        path = tuning_cache(name, args.calibration, args.limit)
        if args.retune:
            tuning[name] = load_tuning(path)
            continue
        sr = SetRuns([]) if args.tune and name != "scifact" else None
        results[name] = run_set(name, args.limit, args.calibration, args.ablations, sr)
        if sr is not None:
            save_tuning(path, sr)
            tuning[name] = sr
    out = Path(args.out)
    if args.retune and out.exists():
        results = {**json.loads(out.read_text()), **results}
    if tuning:
        results["tuning"] = tune(tuning)
        print_tuning(results["tuning"])
    out.write_text(json.dumps(results, indent=2) + "\n")


def print_tuning(res: dict[str, Any]) -> None:
    print(f"\nknobs (follow, hops, cover) chosen on all sets: {res['all sets']}", flush=True)
    for scheme in ("5-fold", "leave-one-set-out"):
        for name, row in res.get(scheme, {}).items():
            print(f"  {scheme:<18} {name:<16} chosen {row['chosen']}", flush=True)
            for mode in ("no graph", "graph"):
                print_loop(name, f"  {scheme}, {mode}", row[mode])


if __name__ == "__main__":
    # As a script, derived units are built inside each write (as before background
    # updates): this bench reads each build's report and queries the units right after
    # the write. Set here, not on import, so a module importing this one keeps its mode.
    os.environ.setdefault("RCP_AGENTIC_DERIVED_UPDATES", "inline")
    main()
