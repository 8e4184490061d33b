"""What the notebook displays cost: HTML of a retrieve result, a graph picture, the tree
and the communities, beside the retrieve call itself (the baseline, same engine, same run).

Builds an engine over HotpotQA passages from ../shared/data (graph, communities and tree
on), then times each display over repeated calls and prints medians, the ratio of a
result's HTML to its retrieve, and the HTML sizes. Run: ``python bench/displays.py
[--docs 300] [--repeats 15]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rcp_agentic import Engine
from rcp_agentic.raptor.outline import outline

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multihop" / "hotpotqa"


def median_ms(call: Callable[[], object], repeats: int) -> tuple[float, object]:
    """The median wall time of ``call`` in milliseconds, and its last result."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), out


def documents(limit: int) -> list[dict[str, str]]:
    """The first ``limit`` passages of the HotpotQA corpus, with their titles."""
    out = []
    with (DATA / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            out.append({"id": str(row["_id"]), "title": row.get("title") or "",
                        "text": row["text"]})
            if len(out) == limit:
                break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    docs = documents(args.docs)
    with (DATA / "questions.jsonl").open(encoding="utf-8") as f:
        queries = [json.loads(line)["question"] for _, line in zip(range(5), f)]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        # No query cache: the baseline is a whole retrieve, not a cache hit.
        engine = Engine(Path(tmp) / "e", build_graph=True, build_tree=True, query_cache_size=0)
        engine.add_documents(docs)
        engine.wait_for_derived(timeout=1800)
        print(f"engine: {len(docs)} passages, {engine.stats()}, built in "
              f"{time.perf_counter() - start:.0f} s")
        rows = []
        for k in (10, 100):
            base, result = median_ms(lambda: engine.retrieve(queries[0], k=k), args.repeats)
            html_ms, html = median_ms(result.html, args.repeats)  # type: ignore[union-attr]
            rows.append((f"retrieve k={k}: HTML", html_ms, base, len(str(html))))
        node = engine.retrieve(queries[1], k=1, unit="node").hits[0]
        base, around = median_ms(lambda: engine.graph("neighbors", seed_ids=[node.id], hops=2,
                                                      k=60), args.repeats)
        html_ms, html = median_ms(around.html, args.repeats)  # type: ignore[union-attr]
        rows.append((f"neighbors ({len(around.nodes or [])} nodes): SVG", html_ms, base,  # type: ignore[union-attr]
                     len(str(html))))
        base, local = median_ms(lambda: engine.graph("local", query=queries[2], k=10),
                                args.repeats)
        html_ms, html = median_ms(local.html, args.repeats)  # type: ignore[union-attr]
        rows.append(("local k=10: SVG + table", html_ms, base, len(str(html))))
        base, path = median_ms(lambda: engine.retrieve(queries[3], k=5, unit="subgraph"),
                               args.repeats)
        html_ms, html = median_ms(path.html, args.repeats)  # type: ignore[union-attr]
        rows.append(("subgraph k=5: pictures", html_ms, base, len(str(html))))
        base, tree = median_ms(lambda: outline(engine), args.repeats)
        html_ms, html = median_ms(tree._repr_html_, args.repeats)  # type: ignore[union-attr]
        rows.append(("tree outline", html_ms, base, len(str(html))))
        store = engine.communities()
        html_ms, html = median_ms(store._repr_html_, args.repeats)  # type: ignore[union-attr]
        rows.append(("communities", html_ms, None, len(str(html))))
        html_ms, html = median_ms(engine._repr_html_, args.repeats)
        rows.append(("engine card", html_ms, None, len(str(html))))
        engine.close()
    print(f"\n{'display':<34} {'median ms':>10} {'baseline ms':>12} {'ratio':>7} {'HTML KB':>8}")
    for name, ms, base_ms, size in rows:
        ratio = f"{ms / base_ms:.2f}" if base_ms else "-"
        base_text = f"{base_ms:.1f}" if base_ms else "-"
        print(f"{name:<34} {ms:>10.1f} {base_text:>12} {ratio:>7} {size / 1024:>8.1f}")
    print("\nbaseline: the call that made what is shown (retrieve, graph, outline), "
          f"median of {args.repeats}, same engine, same run")


if __name__ == "__main__":
    main()
