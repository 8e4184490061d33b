"""The blend weight of a node's vector: its name against its sources, chosen on held-out data.

    python bench/node_vectors.py [--sets hotpotqa 2wikimultihopqa] [--folds 5]

A ``node`` unit's vector (``graph_unit_vectors='sources'``) is
``w * name + (1 - w) * sources``, normalised: ``name`` the mean embedding of the entity's
name and aliases, ``sources`` the mention-weighted mean of its chunks' vectors. This
measures, on each multi-hop set (the graph built by the builtin extractor over the chunks
of the set's cached engine, ``bench/.cache/graph-engine-<set>`` as ``bench/graph.py``
makes it; every vector from the real default embedder, all-MiniLM-L6-v2, names and
questions through the ``bench/embedcache.py`` cache), for ``w`` in 0, 0.1, ..., 1:

* ``support@5`` — per question, the share of its supporting passages whose title entity
  is among the 5 best nodes by dense cosine to the question (retrieval of nodes by topic);
* ``exact@1`` — per entity that is a passage title, whether the query that is exactly
  its name ranks its node first by dense cosine (ties by unit id).

The objective is their sum. ``w`` is chosen on training data only and scored on held-out
data: k-fold inside a set (questions and title entities split into ``--folds`` folds) and
leave-one-set-out (chosen on one set, scored on the other). Dense only: the weight changes
nothing else, and BM25 already ranks a node whose text starts with the query's words.
Results go to ``bench/results/node_vectors.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.embedcache import EmbeddingCache  # noqa: E402
from bench.graph import SETS, engine_chunks, engine_for, load_set  # noqa: E402
from rcp_agentic.graph import BuiltinExtractor, GraphCache, build_graph  # noqa: E402
from rcp_agentic.graph.extract import title_entries  # noqa: E402
from rcp_agentic.graph.stored import canonical, node_uid  # noqa: E402
from rcp_agentic.graph.resolve import entity_key  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "node_vectors.json"
WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))
TOP = 5


def _unit_rows(m: np.ndarray) -> np.ndarray:
    return (m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)).astype(np.float32)


class SetData:
    """One multi-hop set's nodes (name and source vectors, ordered by unit id), its
    questions' vectors and relevant nodes, and its title entities' name queries."""

    def __init__(self, name: str, cache: EmbeddingCache) -> None:
        docs, questions = load_set(name)
        engine = engine_for(name, docs)
        titles = {d["id"]: d["title"] for d in docs}
        chunks, _key_of = engine_chunks(engine, titles)
        t0 = time.perf_counter()
        graph = canonical(build_graph(chunks, BuiltinExtractor(), cache=GraphCache()))
        print(f"{name}: {len(graph.entities)} nodes from {len(chunks)} chunks "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
        keys = sorted(graph.entities, key=node_uid)      # rank ties by unit id
        self.name, self.keys = name, keys
        at = {k: i for i, k in enumerate(keys)}
        rows = sorted({int(r[1:]) for e in graph.entities.values()
                       for r in (*e.mentions, *e.about)})
        vectors = engine.store.vectors(rows)
        engine.close()
        self.sources = _unit_rows(np.stack([self._mean(graph.entities[k], vectors)
                                            for k in keys]))
        self.names = self._names(graph, keys, cache)
        self.questions = cache.embed_documents([q["question"] for q in questions])
        doc_keys = {d: [at[k] for k in map(entity_key, title_entries(t)) if k in at]
                    for d, t in titles.items()}
        self.relevant = [[doc_keys.get(d, []) for d in q["supporting_ids"]] for q in questions]
        title_nodes = sorted({i for ks in doc_keys.values() for i in ks})
        self.title_nodes = np.array(title_nodes, dtype=np.int64)
        self.title_queries = cache.embed_documents([graph.entities[keys[i]].name
                                                    for i in title_nodes])

    @staticmethod
    def _mean(e: Any, vectors: dict[int, np.ndarray]) -> np.ndarray:
        weights = {int(r[1:]): w for r, w in e.mentions.items()}
        rows = sorted({int(r[1:]) for r in (*e.mentions, *e.about)})
        return np.sum([vectors[r] * weights.get(r, 1.0) for r in rows if r in vectors], axis=0)

    @staticmethod
    def _names(graph: Any, keys: list[str], cache: EmbeddingCache) -> np.ndarray:
        texts = [[graph.entities[k].name, *graph.entities[k].aliases] for k in keys]
        flat = list(dict.fromkeys(t for ts in texts for t in ts))
        by_text = dict(zip(flat, _unit_rows(cache.embed_documents(flat))))
        return _unit_rows(np.stack([np.mean([by_text[t] for t in ts], axis=0) for ts in texts]))

    def scores(self, w: float) -> tuple[np.ndarray, np.ndarray]:
        """Per question its support@5, per title entity its exact@1, at weight ``w``."""
        nodes = _unit_rows(w * self.names + (1.0 - w) * self.sources)
        support = np.zeros(len(self.relevant))
        for qi, sims in enumerate(self.questions @ nodes.T):
            top = set(_best(sims, TOP).tolist())
            docs = [ks for ks in self.relevant[qi] if ks]
            support[qi] = np.mean([bool(top & set(ks)) for ks in docs]) if docs else 0.0
        exact = np.array([_best(sims, 1)[0] == i for sims, i in
                          zip(self.title_queries @ nodes.T, self.title_nodes)], dtype=float)
        return support, exact


def _best(sims: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` best scores (rounded to 6 decimals), ties by position = unit id."""
    return np.lexsort((np.arange(len(sims)), -np.round(sims, 6)))[:k]


def grid(data: SetData) -> dict[float, tuple[np.ndarray, np.ndarray]]:
    """Per weight, the per-question and per-entity scores."""
    return {w: data.scores(w) for w in WEIGHTS}


def pick(table: dict[float, tuple[np.ndarray, np.ndarray]], qs: np.ndarray,
         es: np.ndarray) -> float:
    """The weight of the best objective (support@5 + exact@1) on questions ``qs`` and title
    entities ``es``; the smallest such weight on a tie."""
    return max(WEIGHTS, key=lambda w: (round(float(table[w][0][qs].mean() + table[w][1][es].mean()),
                                             6), -w))


def kfold(table: dict[float, tuple[np.ndarray, np.ndarray]], folds: int, seed: int = 0
          ) -> dict[str, Any]:
    """Held-out support@5 and exact@1 of the weight chosen on the other folds, per fold."""
    n_q, n_e = len(table[0.0][0]), len(table[0.0][1])
    rng = np.random.default_rng(seed)
    fq, fe = rng.permutation(n_q) % folds, rng.permutation(n_e) % folds
    chosen, support, exact = [], [], []
    for f in range(folds):
        w = pick(table, np.flatnonzero(fq != f), np.flatnonzero(fe != f))
        chosen.append(w)
        support.append(float(table[w][0][fq == f].mean()))
        exact.append(float(table[w][1][fe == f].mean()))
    return {"weights": chosen, "support@5": round(float(np.mean(support)), 4),
            "exact@1": round(float(np.mean(exact)), 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=list(SETS))
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()
    started = time.perf_counter()
    cache = EmbeddingCache(show_progress=False)
    tables = {name: grid(SetData(name, cache)) for name in args.sets}
    out: dict[str, Any] = {"weights": list(WEIGHTS), "top": TOP}
    for name, table in tables.items():
        every_q, every_e = np.arange(len(table[0.0][0])), np.arange(len(table[0.0][1]))
        row = {"questions": len(every_q), "title_entities": len(every_e),
               "by_weight": {str(w): {"support@5": round(float(s.mean()), 4),
                                      "exact@1": round(float(e.mean()), 4)}
                             for w, (s, e) in table.items()},
               "kfold": kfold(table, args.folds),
               "best_in_set": pick(table, every_q, every_e)}
        others = [o for o in tables if o != name]
        for other in others:  # leave-one-set-out: chosen on the other set, scored here
            w = pick(tables[other], np.arange(len(tables[other][0.0][0])),
                     np.arange(len(tables[other][0.0][1])))
            row[f"chosen_on_{other}"] = {"weight": w, **row["by_weight"][str(w)]}
        out[name] = row
        print(f"\n{name}: {row['questions']} questions, {row['title_entities']} title entities")
        print("   w  support@5  exact@1")
        for w, v in row["by_weight"].items():
            print(f"{float(w):4.1f}  {v['support@5']:9.4f}  {v['exact@1']:7.4f}")
        k = row["kfold"]
        print(f"{args.folds}-fold held out: support@5 {k['support@5']:.4f} exact@1 "
              f"{k['exact@1']:.4f} (weights chosen {k['weights']})")
        for other in others:
            c = row[f"chosen_on_{other}"]
            print(f"chosen on {other}: w={c['weight']} support@5 {c['support@5']:.4f} "
                  f"exact@1 {c['exact@1']:.4f}")
    if len(tables) > 1:
        pooled = {w: sum(float(t[w][0].mean() + t[w][1].mean()) for t in tables.values())
                  for w in WEIGHTS}
        out["pooled_choice"] = max(WEIGHTS, key=lambda w: (round(pooled[w], 6), -w))
        print(f"\nchosen on both sets: w={out['pooled_choice']}")
    out["wall_s"] = round(time.perf_counter() - started, 1)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    print(f"saved {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
