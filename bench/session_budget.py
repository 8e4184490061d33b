"""Session-scoped memory under a flood of distinct session ids (issue 21, item 5).

Each session id does what a client's trajectory makes the engine keep: a retrieve that
records 10 chunk hits (``SessionStore.record``), a DRIFT frontier with a legal
16,000-character question (astral characters: CPython holds it at 4 bytes a character),
5 pending follow-ups of 300 characters, the question and 2 follow-ups run and 3 primer
communities (``Frontiers.put``), and a session memory of 64 entities
(``SessionMemory.add``). Printed per budget: the bytes accounted, the bytes tracemalloc
sees held, the entries kept and evicted, and the median latency of each operation
(timed in a pass without tracemalloc).

The stores are the engine's own, made as the engine makes them (one ``ByteBudget`` shared
by the three). Run against an older checkout (``PYTHONPATH=<old tree laid out as the
package>``) it measures the baseline, where each store is bounded on its own (by count
for frontiers and memories).

    python bench/session_budget.py --sessions 20000 --budget-mib 256 16
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import statistics
import sys
import time
import tracemalloc
from typing import Any

from rcp_agentic.graph.communities.drift import DriftState, Frontiers
from rcp_agentic.graph.memory import SessionMemory
from rcp_agentic.sessions import Candidate, SessionStore

# The baseline's stores take no budget (an editable install may still import
# rcp_agentic.bounded from the newer tree: ask the stores, not the module).
if "budget" in inspect.signature(SessionStore).parameters:
    from rcp_agentic.bounded import ByteBudget
else:
    ByteBudget = None  # type: ignore[assignment,misc]

QUERY = "Where did the drummer of Velvet Lanterns 🎸 grow up, and who produced Midnight Harbor? "


def stores(budget_bytes: int) -> tuple[Any, Any, Any, Any]:
    if ByteBudget is None:
        return (SessionStore(max_bytes=budget_bytes), SessionMemory(), Frontiers(), None)
    budget = ByteBudget(budget_bytes)
    return (SessionStore(budget=budget), SessionMemory(budget=budget),
            Frontiers(budget=budget), budget)


def flood(n: int, budget_bytes: int, timed: bool) -> dict[str, Any]:
    sessions, memory, frontiers, budget = stores(budget_bytes)
    times: dict[str, list[int]] = {"record": [], "put": [], "add": []}
    clock = time.perf_counter_ns
    for i in range(n):
        sid = f"session-{i:06d}"
        hits = [Candidate(f"doc:wiki/page-{i % 997}.md#c{j}", "chunk", f"wiki/page-{i % 997}.md",
                          None, None) for j in range(10)]
        question = (f"{i} " + QUERY * 200)[:16_000]
        followups = [f"{i}.{j} " + "follow-up about Tromsø and Bergen " * 9 for j in range(7)]
        state = DriftState(question, 2, "", pending=followups[:5],
                           asked=[question, *followups[5:]],
                           primed=[f"community:{i}:{j}" for j in range(3)])
        entities = {f"entity {i}-{j}": 1.0 for j in range(64)}
        t0 = clock()
        sessions.record(sid, hits)
        t1 = clock()
        frontiers.put(sid, state)
        t2 = clock()
        memory.add(sid, entities)
        t3 = clock()
        if timed:
            times["record"].append(t1 - t0)
            times["put"].append(t2 - t1)
            times["add"].append(t3 - t2)
    out: dict[str, Any] = {
        "sessions_kept": len(sessions), "frontiers_kept": len(frontiers),
        "memories_kept": len(memory),
        "accounted_bytes": (budget.used if budget is not None else sessions.nbytes),
        "evictions": budget.evictions if budget is not None else None,
    }
    if timed:
        out["median_us"] = {k: round(statistics.median(v) / 1000, 2) for k, v in times.items()}
    out["_keep"] = (sessions, memory, frontiers)
    return out


def run(n: int, budget_bytes: int) -> dict[str, Any]:
    timed = flood(n, budget_bytes, timed=True)
    timed.pop("_keep")
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    held = flood(n, budget_bytes, timed=False)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    held.pop("_keep")
    return {"budget_bytes": budget_bytes, "sessions": n, **held,
            "tracemalloc_bytes": traced, "median_us": timed["median_us"],
            "code": "shared budget" if ByteBudget is not None else "baseline (count bounds)"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=20_000)
    ap.add_argument("--budget-mib", type=float, nargs="+", default=[256, 16])
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    rows = []
    for mib in args.budget_mib:
        row = run(args.sessions, int(mib * 1024 * 1024))
        rows.append(row)
        kept = f"{row['sessions_kept']}/{row['frontiers_kept']}/{row['memories_kept']}"
        print(f"{row['code']}: budget {mib:g} MiB, {row['sessions']} session ids: accounted "
              f"{row['accounted_bytes'] / 2**20:.1f} MiB, tracemalloc "
              f"{row['tracemalloc_bytes'] / 2**20:.1f} MiB, kept (retrieve/drift/memory) "
              f"{kept}, evictions {row['evictions']}, median us "
              f"{json.dumps(row['median_us'])}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"python": sys.version.split()[0], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
