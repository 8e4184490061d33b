"""Agentic stages on SciFact: token-budget packing, session trajectories, and their overhead.

    python bench/agentic.py [--engine bench/.cache/engine-scifact] [--queries N]

Needs the engine ``bench/scifact_engine.py --engine bench/.cache/engine-scifact``
builds. Prints:
- token budget (500/1000/2000/4000, chunk units): tokens used ÷ budget and recall of
  relevant documents in the packed set, for our packing (skips a hit too large for
  what is left and keeps filling) against a plain top-k cut where the budget binds;
- sessions: a 5-step trajectory of rephrasings of each claim (k=3 chunks a step):
  relevant documents first found at each step, with and without a session;
- overhead: p50 latency beyond the query embedding of a retrieve with token budget +
  session + MMR against a plain one (query vectors cached, so both skip the model).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scifact  # noqa: E402
from rcp_agentic import Engine  # noqa: E402
from rcp_agentic.analyzer import STOPWORDS  # noqa: E402

DEFAULT_ENGINE = Path(__file__).resolve().parent / ".cache" / "engine-scifact"


def rephrasings(claim: str) -> list[str]:
    """Five wordings of one claim, without an LLM (keywords, question, halves swapped, ...)."""
    words = claim.rstrip(".").split()
    keywords = " ".join(w for w in words if w.lower() not in STOPWORDS)
    half = len(words) // 2
    return [claim, f"Is it true that {claim.rstrip('.')}?", keywords,
            " ".join(words[half:] + words[:half]), f"Evidence for or against: {keywords}"]


def budget_table(engine: Engine, queries: dict[str, str], qrels: dict) -> list[str]:
    lines = ["budget  ours used/budget  ours recall  top-k used/budget  top-k recall"]
    for budget in (500, 1000, 2000, 4000):
        ours_u, ours_r, plain_u, plain_r = [], [], [], []
        for qid, text in queries.items():
            rel = set(qrels[qid])
            packed = engine.retrieve(text, k=200, unit="chunk", token_budget=budget,
                                     include_text=False)
            ours_u.append((packed.usage.tokens if packed.usage else 0) / budget)
            ours_r.append(len(rel & {h.chunk.doc_id for h in packed.hits if h.chunk}) / len(rel))
            ranked = engine.retrieve(text, k=200, unit="chunk", include_text=False).hits
            used, docs = 0, set()
            for h in ranked:  # plain top-k: stop at the first hit that does not fit
                n = (h.meta or {})["chunk_token_count"]
                if used + n > budget:
                    break
                used += n
                docs.add(h.chunk.doc_id if h.chunk else "")
            plain_u.append(used / budget)
            plain_r.append(len(rel & docs) / len(rel))
        lines.append(f"{budget:>6}  {statistics.mean(ours_u):>16.3f}  {statistics.mean(ours_r):>11.3f}"
                     f"  {statistics.mean(plain_u):>17.3f}  {statistics.mean(plain_r):>12.3f}")
    return lines


def session_table(engine: Engine, queries: dict[str, str], qrels: dict) -> list[str]:
    new_with = [0.0] * 5
    new_without = [0.0] * 5
    for qid, claim in queries.items():
        rel = set(qrels[qid])
        for use_session, counts in ((True, new_with), (False, new_without)):
            found: set[str] = set()
            for step, text in enumerate(rephrasings(claim)):
                opts = {"session_id": f"bench-{qid}"} if use_session else {}
                hits = engine.retrieve(text, k=3, unit="chunk", include_text=False, **opts).hits
                docs = {h.chunk.doc_id for h in hits if h.chunk} & rel
                counts[step] += len(docs - found)
                found |= docs
            if use_session:
                engine.sessions.forget(f"bench-{qid}")
    n = len(queries)
    lines = ["step  new relevant docs/query: with session  without  (cumulative with / without)"]
    cw = cwo = 0.0
    for step in range(5):
        cw += new_with[step] / n
        cwo += new_without[step] / n
        lines.append(f"{step + 1:>4}  {new_with[step] / n:>38.3f}  {new_without[step] / n:>7.3f}"
                     f"  ({cw:.3f} / {cwo:.3f})")
    return lines


def overhead_table(engine: Engine, queries: dict[str, str]) -> list[str]:
    texts = list(queries.values())
    for t in texts:  # cache every query vector
        engine.retrieve(t, k=10)

    def p50(session: bool = False, **opts: object) -> float:
        lat = []
        for i, t in enumerate(texts):
            extra = {"session_id": f"ovh-{i}"} if session else {}
            start = time.perf_counter()
            engine.retrieve(t, k=10, **opts, **extra)
            lat.append((time.perf_counter() - start) * 1000.0)
        return statistics.median(lat)

    plain = p50()
    full = p50(token_budget=1000, mmr={"lambda": 0.7}, session=True)
    return [f"p50 beyond embedding: plain {plain:.2f} ms; budget+session+MMR {full:.2f} ms; "
            f"ratio {full / plain:.2f}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", type=Path, default=DEFAULT_ENGINE)
    ap.add_argument("--queries", type=int, default=None)
    args = ap.parse_args(argv)
    if not (args.engine / "engine.db").exists():
        print(f"no engine at {args.engine}: run bench/scifact_engine.py --engine {args.engine}")
        return 2
    _corpus, queries, qrels = scifact.load_dataset(None, args.queries)
    engine = Engine(args.engine)
    for line in budget_table(engine, queries, qrels):
        print(line)
    print()
    for line in session_table(engine, queries, qrels):
        print(line)
    print()
    for line in overhead_table(engine, queries):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
