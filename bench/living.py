"""A living corpus at scale (issue 41): what one write costs the derived units, per corpus size.

Corpora (all chunked at ``bench.graph.LATENCY_CHUNKING``, 64/8 tokens):

* ``5k``   — a seeded ~5k-chunk subset of SciFact + HotpotQA + 2Wiki passages;
* ``46k``  — all of them (~46k chunks);
* ``200k`` — those plus synthetic copies whose capitalised words carry a per-copy suffix
  (new entities with the real corpus's shape: names, titles, sentence pairs).

Every engine embeds with :class:`bench.graph.HashedEmbeddings` (seeded vectors: the embedding
cost is not what this measures) and builds the graph and its communities; ``--tree`` adds the
RAPTOR tree. Engines are built once under ``bench/.cache/living-<size>[-tree]``.

``writes``: on a fresh copy of an engine with ``derived_updates="inline"``, one-document
writes — an add of a new document, an upsert changing an indexed one, a delete — each timed
per builder (the builder's own report) and whole (the call). ``stream``: background derived
updates, one new document per second for ``--seconds``; every second the lag (commits not yet
reflected by every derived kind, and the age of the oldest) is sampled. Numbers only: no
timed assertion. To measure an earlier checkout in the same run, run this file under a
copy of this file in that checkout with ``LIVING_HOME`` set to this ``bench/`` (``--label``
names its rows).

    python bench/living.py build --sizes 5k 46k
    python bench/living.py writes --sizes 5k 46k --repeat 3 --label now
    python bench/living.py stream --sizes 46k --seconds 120 --label now
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.graph import LATENCY_CHUNKING, HashedEmbeddings, latency_corpora  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# Another checkout's copy of this file shares the engines and the results (LIVING_HOME).
HOME = Path(os.environ.get("LIVING_HOME", ROOT / "bench"))
CACHE = HOME / ".cache"
RESULTS = HOME / "results" / "living.json"
SIZES = {"5k": 5000, "46k": None, "200k": 200_000}
_CAPITAL = re.compile(r"\b([A-Z][a-z]+)")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def synthetic_copy(doc: dict[str, Any], n: int) -> dict[str, Any]:
    """``doc`` with every capitalised word suffixed by copy ``n`` (new names, same shape)."""
    tag = "abcdefghij"[n % 10] * (1 + n // 10)

    def rename(text: str) -> str:
        return _CAPITAL.sub(lambda m: m.group(1) + tag, text)

    return {"id": f"{doc['id']}~{n}", "title": rename(doc.get("title") or "") or None,
            "text": rename(doc["text"])}


def corpus(size: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The documents of ``size`` and a pool of documents not among them (for adds)."""
    large, small = latency_corpora(5000)
    if size == "5k":
        ids = {d["id"] for d in small}
        return small, [d for d in large if d["id"] not in ids]
    pool = [synthetic_copy(d, 99) for d in large[:2000]]
    if size == "46k":
        return large, pool
    docs = list(large)
    chunks_per_doc = 46_000 / len(large)
    n = 1
    while len(docs) * chunks_per_doc < SIZES["200k"]:
        docs += [synthetic_copy(d, n) for d in large]
        n += 1
    return docs, pool


def engine_dir(size: str, tree: bool) -> Path:
    return CACHE / f"living-{size}{'-tree' if tree else ''}"


def open_engine(path: Path, *, inline: bool) -> Any:
    """The engine at ``path``: derived units built inside each write (``inline``, what
    :func:`time_writes` times) or by the engine's background worker."""
    from rcp_agentic import Engine

    return Engine(path, embedder=HashedEmbeddings(),
                  derived_updates="inline" if inline else "background")


def build(size: str, tree: bool) -> dict[str, Any]:
    """Build (once) the engine of ``size``: documents in batches of 2,000, derived units
    brought current after each batch (what a growing corpus does); returns its record."""
    from rcp_agentic import Engine

    path = engine_dir(size, tree)
    done = path / "built.json"
    if done.exists():
        return json.loads(done.read_text())
    if path.exists():
        shutil.rmtree(path)
    docs, _pool = corpus(size)
    chunk_size, overlap = LATENCY_CHUNKING
    t0 = time.perf_counter()
    engine = Engine(path, embedder=HashedEmbeddings(), chunk_size=chunk_size,
                    chunk_overlap=overlap, build_graph=True, build_tree=tree,
                    derived_updates="inline")
    chunks = 0
    per_builder: dict[str, float] = {}
    for i in range(0, len(docs), 2000):
        res = engine.add_documents(docs[i:i + 2000])
        chunks += res.chunks
        for r in res.derived:
            per_builder[r.unit] = per_builder.get(r.unit, 0.0) + float(r.seconds or 0.0)
        print(f"  {size}: {i + len(docs[i:i + 2000])}/{len(docs)} documents, {chunks} chunks, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    engine.close()
    record = {"documents": len(docs), "chunks": chunks, "tree": tree,
              "seconds": round(time.perf_counter() - t0, 1),
              "builder_seconds": {k: round(v, 1) for k, v in per_builder.items()},
              "peak_rss_mb": round(peak_rss_mb(), 1)}
    done.write_text(json.dumps(record))
    return record


def warm_up(engine: Any, doc: dict[str, Any]) -> None:
    """Bring every derived kind current (a graph of another version's rules is rebuilt
    here), then write one document untimed: a builder that keeps state between runs makes
    it on its first run in a process, which reads the whole corpus once."""
    engine.update_derived()
    engine.add_documents([{**doc, "id": "warm-up"}])
    engine.update_derived()


def fresh_copy(size: str, tree: bool) -> Path:
    base = engine_dir(size, tree)
    dest = Path(tempfile.mkdtemp(prefix=f"living-{size}-"))
    shutil.copytree(base, dest / "engine")
    return dest / "engine"


def _changed(doc: dict[str, Any], n: int) -> dict[str, Any]:
    """``doc`` with one sentence added (an upsert that changes a few chunks)."""
    extra = f" In {1900 + n}, {doc.get('title') or 'it'} was renamed Novel Entity {n}."
    return {**doc, "text": doc["text"] + extra}


def time_writes(size: str, tree: bool, repeat: int) -> dict[str, Any]:
    """Add / upsert / delete of one document, ``repeat`` times each, on a copy of the engine
    with inline derived updates: the write's own part, the derived update it runs (every
    builder to current) and each builder's seconds (its report)."""
    docs, pool = corpus(size)
    path = fresh_copy(size, tree)
    engine = open_engine(path, inline=True)
    warm_up(engine, pool[-1])
    derived = engine.derived
    runs: list[tuple[float, list[Any]]] = []
    after_write = derived.after_write

    def timed() -> list[Any]:
        t0 = time.perf_counter()
        reports = after_write()
        runs.append((time.perf_counter() - t0, reports))
        return reports

    derived.after_write = timed         # type: ignore[method-assign]
    rng = np.random.default_rng(41)
    picks = [docs[int(i)] for i in rng.choice(len(docs), size=2 * repeat, replace=False)]
    out: dict[str, list[dict[str, float]]] = {"add": [], "upsert": [], "delete": []}
    ops: list[tuple[str, Any]] = []
    for n in range(repeat):
        ops += [("add", [pool[n]]), ("upsert", [_changed(picks[n], n)]),
                ("delete", picks[repeat + n]["id"])]
    for op, arg in ops:
        runs.clear()
        t0 = time.perf_counter()
        if op == "delete":
            engine.delete_documents([arg])
        else:
            engine.add_documents(arg)
        call = time.perf_counter() - t0
        spent = sum(t for t, _r in runs)
        row = {"write_s": call - spent, "derived_s": spent}
        for _t, reports in runs:
            for r in reports:
                row[r.unit] = row.get(r.unit, 0.0) + float(r.seconds or 0.0)
        out[op].append(row)
        print(f"  {size} {op}: " + ", ".join(f"{k} {v:.2f}s" for k, v in row.items()), flush=True)
    engine.close()
    shutil.rmtree(path.parent, ignore_errors=True)
    return {op: {k: round(statistics.median(r.get(k, 0.0) for r in rows), 3)
                 for k in sorted({k for r in rows for k in r})} for op, rows in out.items()}


def stream(size: str, tree: bool, seconds: int, drain_limit: float = 600.0) -> dict[str, Any]:
    """One new document per second for ``seconds`` with background derived updates; the lag
    sampled each second: commits the derived kinds do not reflect yet."""
    _docs, pool = corpus(size)
    path = fresh_copy(size, tree)
    engine = open_engine(path, inline=False)
    warm_up(engine, pool[-1])
    kinds = [k for k in ("tree-node", "node", "community")
             if engine.store.info(f"derived.{k}.version") is not None]
    samples: list[dict[str, float]] = []
    started = time.monotonic()
    committed: list[tuple[int, float]] = []     # (data version, when)
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(1.0):
            data = int(engine.store.info("data_version") or 0)
            reflected = min(int(engine.store.info(f"derived.{k}.version") or 0)
                            for k in kinds)
            behind = [t for v, t in committed if v > reflected]
            now = time.monotonic()
            row = {"t": round(now - started, 1), "behind": data - reflected,
                   "oldest_s": round(now - min(behind), 1) if behind else 0.0}
            for k in kinds:     # each kind's own lag: which one holds the others back
                at = int(engine.store.info(f"derived.{k}.version") or 0)
                late = [t for v, t in committed if v > at]
                row[f"oldest_s {k}"] = round(now - min(late), 1) if late else 0.0
            samples.append(row)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    for n in range(seconds):
        due = started + n
        time.sleep(max(0.0, due - time.monotonic()))
        engine.add_documents([pool[500 + n]])
        committed.append((int(engine.store.info("data_version") or 0), time.monotonic()))
    t_end = time.monotonic()
    drained = engine.wait_for_derived(timeout=drain_limit)
    drain = time.monotonic() - t_end
    stop.set()
    watcher.join()
    engine.close()
    shutil.rmtree(path.parent, ignore_errors=True)
    quarters = [samples[i * len(samples) // 4:(i + 1) * len(samples) // 4] for i in range(4)]
    return {"writes": seconds, "drain_after_last_s": round(drain, 1), "drained": drained,
            "samples": samples,
            "max_behind_per_quarter": [max((s["behind"] for s in q), default=0)
                                       for q in quarters],
            "max_oldest_s_per_quarter": [max((s["oldest_s"] for s in q), default=0.0)
                                         for q in quarters],
            **{f"max_oldest_s_per_quarter {k}": [max((s[f"oldest_s {k}"] for s in q),
                                                     default=0.0) for q in quarters]
               for k in kinds},
            "peak_rss_mb": round(peak_rss_mb(), 1)}


def save(key: str, value: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[key] = {**value, "date": time.strftime("%Y-%m-%d")}
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("command", choices=["build", "writes", "stream"])
    ap.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["5k", "46k"])
    ap.add_argument("--tree", action="store_true", help="engines with the RAPTOR tree too")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--label", default="now")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for size in args.sizes:
        if args.command == "build":
            rec = build(size, args.tree)
            print(f"{size}: {json.dumps(rec)}", flush=True)
            continue
        build(size, args.tree)
        fn = time_writes if args.command == "writes" else stream
        rec = fn(size, args.tree, args.repeat if args.command == "writes" else args.seconds)
        print(f"{size} {args.label}: {json.dumps(rec)}", flush=True)
        save(f"{args.command}-{size}{'-tree' if args.tree else ''}-{args.label}", rec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
