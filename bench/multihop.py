"""Multi-hop retrieval through the engine: hybrid, graph recall, and graph recall with the
bridge hop, per set, per hop position and question type, with the bridge's knobs chosen
held out.

    python bench/multihop.py [--sets hotpotqa 2wikimultihopqa musique-train] [--no-grid]

Each set (``../shared/data/multihop``) is indexed once in an Engine with its knowledge graph
(``bench/graph.py``'s ``graph_engine``: ``bench/.cache/graph-engine-<set>-graph``). Every
question is one ``engine.retrieve(question, mode="hybrid", k=10)`` chunk retrieve; a passage
counts at its first chunk's rank. Reported per set: R@2 / R@5 / R@10 of the supporting
passages, R@5 by the gold passage's hop position (MuSiQue: ``supporting_ids`` are in hop
order; HotpotQA / 2Wiki: the order the set lists them), by question type, the tokens of the
first five hits, and p50 latency, for

* ``hybrid``: dense + sparse, RRF;
* ``graph, no bridge``: + graph recall (``x-rcp-agentic-graphRecall``), the bridge hop off;
* ``graph recall``: + the bridge hop (``rcp_agentic.graph.bridge``), as shipped;

``--ablate`` adds graph recall with item 1's dense-neighbour passage-passage edges (each
passage joined to its 3 or 10 nearest by cosine) added to the PageRank graph; and, on a set
with decompositions (MuSiQue), how often the composed ``path`` / ``subgraph``
hits of a question whose second-hop passage graph recall found name the bridge entity.

The bridge's knobs (``BRIDGE_SLOT``, ``BRIDGE_HOP1_DEPTH``, ``BRIDGE_SPARSE``,
``BRIDGE_COUNT``) are chosen held out over a small grid, by R@5 then R@3 (the slot moves
only the latter, while the bridges stay in the top five): 5-fold within
each set (the setting best on four folds is scored on the fifth) and leave-one-set-out (the
setting best on the other sets' mean is scored on this one); both are reported per set
beside the shipped setting's in-set number.
Results merge under ``--key`` (default ``multihop``) into ``bench/results/multihop.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.graph import graph_engine, load_set  # noqa: E402
from rcp_agentic import Engine  # noqa: E402
from rcp_agentic.models.tokenizer import count_tokens  # noqa: E402
from rcp_agentic.graph import bridge  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "multihop.json"
SETS = ("hotpotqa", "2wikimultihopqa", "musique-train")
K = 10
GRID = {"BRIDGE_SLOT": (2, 3, 4), "BRIDGE_HOP1_DEPTH": (3, 5), "BRIDGE_SPARSE": (0.0, 0.5, 1.0),
        "BRIDGE_COUNT": (1, 2)}
FOLDS = 5


@contextmanager
def bridge_setting(**values: Any) -> Iterator[None]:
    """The bridge module's knobs set to ``values`` for the block (``off=True``: no bridge)."""
    off = values.pop("off", False)
    saved = {name: getattr(bridge, name) for name in values}
    saved_follow = bridge.follow_bridge
    try:
        for name, value in values.items():
            setattr(bridge, name, value)
        if off:
            bridge.follow_bridge = lambda query, cands: None  # type: ignore[assignment]
        yield
    finally:
        for name, value in saved.items():
            setattr(bridge, name, value)
        bridge.follow_bridge = saved_follow


def per_question(engine: Engine, questions: list[dict[str, Any]], doc_of: dict[str, str],
                 **options: Any) -> list[dict[str, Any]]:
    """Each question's gold ranks (1-based among distinct passages; 0 = not in the top K),
    the tokens of the first five hits, and the retrieve's milliseconds."""
    out = []
    for q in questions:
        t0 = time.perf_counter()
        res = engine.retrieve(q["question"], k=K, mode="hybrid", **options)
        ms = (time.perf_counter() - t0) * 1000
        docs: list[str] = []
        tokens = 0
        for h in res.hits:
            d = doc_of.get(h.id)
            if d is not None and d not in docs:
                docs.append(d)
                if len(docs) <= 5:
                    tokens += count_tokens(h.text or "")
        ranks = [docs.index(s) + 1 if s in docs else 0 for s in q["supporting_ids"]]
        out.append({"ranks": ranks, "type": q.get("type", ""), "tokens": tokens, "ms": ms})
    return out


def composed_bridge(engine: Engine, questions: list[dict[str, Any]],
                    rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Where graph recall found a second-hop passage in its top 5 (questions with a
    decomposition), how often the ``path`` hits (top 5) and the ``subgraph`` hit (top 1)
    name the bridge (the first hop's answer)."""
    found = [(q, row) for q, row in zip(questions, rows)
             if q.get("decomposition") and 0 < row["ranks"][1] <= 5]
    out: dict[str, Any] = {"second hop found": len(found)}
    for unit, k in (("path", 5), ("subgraph", 1)):
        named = 0
        for q, _row in found:
            answer = q["decomposition"][0]["answer"].lower()
            texts = [(h.text or "").lower() for h in engine.retrieve(q["question"], k=k,
                                                                    unit=unit).hits]
            named += any(answer in t for t in texts)
        out[f"{unit} names the bridge"] = named
    return out


@contextmanager
def dense_neighbour_edges(engine: Engine, neighbours: int, weight: float) -> Iterator[None]:
    """Item 1's passage-passage edges by dense similarity, for the block: each passage joined
    to its ``neighbours`` nearest passages (cosine x ``weight``) in the engine's current graph
    view (restored after)."""
    import numpy as np
    import scipy.sparse as sp

    view = engine.catalog.graph_view()
    assert view is not None
    index = engine.catalog.index([("chunk", 0)])
    vecs = np.vstack([index.vectors[index.position[int(k[1:])]] for k in view.chunk_keys])
    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    sims = vecs @ vecs.T
    np.fill_diagonal(sims, -np.inf)
    nearest = np.argsort(-sims, axis=1, kind="stable")[:, :neighbours]
    rows = np.repeat(np.arange(len(vecs)), neighbours)
    cols = nearest.ravel()
    w = weight * np.maximum(sims[rows, cols], 0.0)
    ne = view.n_entities
    extra = sp.csr_matrix((np.concatenate([w, w]), (np.concatenate([rows, cols]) + ne,
                                                    np.concatenate([cols, rows]) + ne)),
                          shape=view.adjacency.shape)
    before = view.adjacency
    view.set_matrix((before + extra).tocsr())
    try:
        yield
    finally:
        view.set_matrix(before)


def recall(rows: list[dict[str, Any]], at: int) -> float:
    """Mean share of a question's gold passages in its top ``at`` (0-100)."""
    if not rows:
        return 0.0
    return 100 * statistics.fmean(sum(1 for r in row["ranks"] if 0 < r <= at) / len(row["ranks"])
                                  for row in rows)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """R@2/3/5/10, R@5 by hop position (4 = fourth or later) and by type, tokens, p50 ms."""
    hops: dict[int, list[bool]] = defaultdict(list)
    for row in rows:
        for i, r in enumerate(row["ranks"]):
            hops[min(i + 1, 4)].append(0 < r <= 5)
    types: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        types[row["type"]].append(row)
    return {"R@2": round(recall(rows, 2), 1), "R@3": round(recall(rows, 3), 1),
            "R@5": round(recall(rows, 5), 1),
            "R@10": round(recall(rows, 10), 1),
            "R@5 by hop": {str(h): round(100 * statistics.fmean(v), 1)
                           for h, v in sorted(hops.items())},
            "R@5 by type": {t: [round(recall(v, 5), 1), len(v)] for t, v in sorted(types.items())},
            "tokens@5": round(statistics.fmean(r["tokens"] for r in rows)),
            "p50 ms": round(statistics.median(r["ms"] for r in rows), 1)}


def settings() -> list[dict[str, Any]]:
    names = list(GRID)
    return [dict(zip(names, values)) for values in itertools.product(*GRID.values())]


def label(setting: dict[str, Any]) -> str:
    return ", ".join(f"{k.removeprefix('BRIDGE_').lower()}={v}" for k, v in setting.items())


def objective(rows: list[dict[str, Any]], setting: str) -> tuple[float, float, float]:
    """What a knob is chosen by: R@5, then R@3 (the bridge's rank moves only that), then
    whether it is the shipped setting."""
    return recall(rows, 5), recall(rows, 3), float(setting == label(SHIPPED))


def kfold(per_setting: dict[str, list[dict[str, Any]]]) -> tuple[float, list[str]]:
    """R@5 of the setting chosen on four folds, scored on the fifth, over the folds (questions
    dealt to folds by position), and the settings chosen."""
    n = len(next(iter(per_setting.values())))
    folds = [list(range(f, n, FOLDS)) for f in range(FOLDS)]
    scored: list[float] = []
    chosen: list[str] = []
    for held in folds:
        train = [i for i in range(n) if i not in set(held)]
        best = max(sorted(per_setting), key=lambda s: objective(
            [per_setting[s][i] for i in train], s))
        chosen.append(best)
        scored.extend(sum(1 for r in per_setting[best][i]["ranks"] if 0 < r <= 5)
                      / len(per_setting[best][i]["ranks"]) for i in held)
    return 100 * statistics.fmean(scored), chosen


SHIPPED = {"BRIDGE_SLOT": bridge.BRIDGE_SLOT, "BRIDGE_HOP1_DEPTH": bridge.BRIDGE_HOP1_DEPTH,
           "BRIDGE_SPARSE": bridge.BRIDGE_SPARSE, "BRIDGE_COUNT": bridge.BRIDGE_COUNT}


def held_out(grid: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per set: the shipped setting's R@5, the 5-fold held-out R@5, and the leave-one-set-out
    R@5 (the setting best on the other sets' mean R@5), with the settings chosen."""
    out: dict[str, Any] = {}
    for name, per_setting in grid.items():
        fold_r5, chosen = kfold(per_setting)
        others = [o for o in grid if o != name]
        loso = max(sorted(per_setting), key=lambda s: tuple(
            statistics.fmean(v) for v in zip(*(objective(grid[o][s], s) for o in others))))
        out[name] = {"shipped R@5": round(recall(per_setting[label(SHIPPED)], 5), 1),
                     "5-fold R@5": round(fold_r5, 1),
                     "5-fold choices": sorted(set(chosen)),
                     "leave-one-set-out R@5": round(recall(per_setting[loso], 5), 1),
                     "leave-one-set-out choice": loso,
                     "best in-set R@5 (optimistic)": round(max(
                         recall(v, 5) for v in per_setting.values()), 1)}
    return out


SYSTEMS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "hybrid": ({}, {"off": True}),
    "graph, no bridge": ({"graph_recall": True}, {"off": True}),
    "graph recall": ({"graph_recall": True}, {}),
}


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"k": K, "shipped": SHIPPED}
    grid: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name in args.sets:
        docs, questions = load_set(name)
        engine = graph_engine(name, docs)
        doc_of = {uid: d for _r, uid, d, *_ in engine.store.live_leaves("chunk")}
        engine.retrieve(questions[0]["question"], k=1)  # load the models before timing
        row: dict[str, Any] = {"questions": len(questions)}
        for system, (options, knobs) in SYSTEMS.items():
            with bridge_setting(**knobs):
                row[system] = summary(per_question(engine, questions, doc_of, **options))
            s = row[system]
            print(f"{name:16s} {system:17s} R@2 {s['R@2']:5.1f} R@5 {s['R@5']:5.1f} "
                  f"R@10 {s['R@10']:5.1f} by hop {s['R@5 by hop']} tokens@5 {s['tokens@5']} "
                  f"p50 {s['p50 ms']} ms", flush=True)
        if args.ablate:
            for neighbours, weight in ((3, 0.5), (10, 0.5)):
                with dense_neighbour_edges(engine, neighbours, weight):
                    got = summary(per_question(engine, questions, doc_of, graph_recall=True))
                key = f"graph recall + dense-neighbour passage edges ({neighbours}, x{weight})"
                row[key] = got
                print(f"{name:16s} {key}: R@2 {got['R@2']} R@5 {got['R@5']} by hop "
                      f"{got['R@5 by hop']}", flush=True)
        if questions[0].get("decomposition"):
            with bridge_setting():
                rows = per_question(engine, questions, doc_of, graph_recall=True)
            row["composed units name the bridge"] = composed_bridge(engine, questions, rows)
            print(f"{name:16s} composed units: {row['composed units name the bridge']}",
                  flush=True)
        if not args.no_grid:
            grid[name] = {}
            for setting in settings():
                with bridge_setting(**setting):
                    grid[name][label(setting)] = per_question(
                        engine, questions, doc_of, graph_recall=True)
        out[name] = row
        engine.close()
    if grid:
        out["held out"] = held_out(grid)
        for name, r in out["held out"].items():
            print(f"{name:16s} bridge knobs: shipped R@5 {r['shipped R@5']}, 5-fold "
                  f"{r['5-fold R@5']} (chose {r['5-fold choices']}), leave-one-set-out "
                  f"{r['leave-one-set-out R@5']} (chose {r['leave-one-set-out choice']}); "
                  f"best in set {r['best in-set R@5 (optimistic)']}", flush=True)
        out["grid R@5"] = {name: {s: round(recall(rows, 5), 1) for s, rows in g.items()}
                           for name, g in grid.items()}
    return out


def save(key: str, value: dict[str, Any]) -> None:
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[key] = value
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS))
    ap.add_argument("--no-grid", action="store_true", help="skip the held-out knob choice")
    ap.add_argument("--ablate", action="store_true",
                    help="also graph recall with dense-neighbour passage-passage edges")
    ap.add_argument("--key", default="multihop")
    args = ap.parse_args(argv)
    save(args.key, run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
