"""Storage backends (issue 13): embedded vs Milvus Lite on SciFact, and the embedded backend at scale.

    python bench/backends.py scale [--sizes 50000 200000 1000000] [--queries 200]
    python bench/backends.py compare [--limit N] [--queries N] [--backends embedded milvus]

``scale``: the embedded backend at each size, SciFact replicated as ``bench/scale.py``
does (``scale.build``: perturbed ids; the real MiniLM vector of each distinct chunk
text, memoised, plus seeded noise for every replica). Each size is built in its own
``nice -n 10`` subprocess (cached under ``bench/.cache/backends-scale-<size>/``, so a
rerun only queries) and queried in another, so the resident memory is per size:
VmRSS before the engine opens (model loaded), after it opens, after the first
queries, after the timed ones, and ru_maxrss. Hybrid chunk retrieve, k=10, with
text: p50/p95 end to end and beyond the query embedding.

``compare``: SciFact (train split), the same documents indexed once per backend,
with one embedding cache (``bench.embedcache``) so the model runs once per chunk
text ever. Per backend, unit (chunk → its document; document) and mode (dense,
sparse, hybrid): nDCG@10, R@100, p50/p95 latency, and the mean Jaccard overlap of
the top-10 unit ids with the embedded backend. Ingest: seconds, chunks/s, and the
ratio (ingest time beyond the embedder + the model's time over the same chunk
texts) ÷ the model's time — the ratio an uncached ingest would have.

Both write their section of ``bench/results/backends.json``; the text of every
section is rewritten to ``bench/results/backends.txt``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scifact  # noqa: E402
from bench.baselines import _cpu_snapshot, other_cpu_load, time_queries  # noqa: E402
from bench.metrics import ndcg_at_k, percentiles, recall_at_k  # noqa: E402
from rcp_agentic import Engine  # noqa: E402
from rcp_agentic.models.embedder import DEFAULT_IDENTITY  # noqa: E402

BENCH = Path(__file__).resolve().parent
CACHE = BENCH / ".cache"
RESULTS_JSON = BENCH / "results" / "backends.json"
RESULTS_TXT = BENCH / "results" / "backends.txt"
MODEL_TIME = CACHE / "backends-model-seconds.json"
MODES = ("dense", "sparse", "hybrid")
UNITS = ("chunk", "document")
VECTORS = ("real MiniLM vector per distinct chunk text (memoised) + seeded N(0, 0.02^2) noise "
           "per replica, renormalised (bench/scale.py ReplicaEmbedder); queries: real model")
DEFAULT_DEADLINE_S = 2400.0  # the brief's "about 40 min" on this 2-core machine
MILVUS_NOTE = "Milvus Lite is a correctness target, not a speed claim"


class CachedEmbedder:
    """The engine's embedder over ``bench.embedcache.EmbeddingCache``: cached documents, real queries."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.identity = DEFAULT_IDENTITY  # the same model the engine's default loads
        self.texts: list[str] = []  # every document text asked for, in order

    @property
    def dimension(self) -> int:
        from bench.embedcache import DIM

        return DIM

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return self.cache.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.cache.encode_query(text)[0]


def shared_cache() -> Any:
    from bench.embedcache import EmbeddingCache

    return EmbeddingCache(show_progress=False)


# --- memory and disk ------------------------------------------------------------------

def vm_rss_mb() -> float:
    """Current resident set (VmRSS of /proc/self/status), MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def disk_mb(path: Path) -> float:
    """Allocated bytes under ``path`` (like ``du``), MB."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total / 2**20


def load_avg() -> float:
    return os.getloadavg()[0]


# --- scale ----------------------------------------------------------------------------

def scale_dir(size: int) -> Path:
    return CACHE / f"backends-scale-{size}"


class BuildDeadline(Exception):
    """The build ran out of time: the batches committed so far are the engine measured."""


def scale_build(size: int, deadline_s: float | None = DEFAULT_DEADLINE_S) -> dict:
    """Build the replicated engine of ``size`` chunks (this process); writes ``build.json``.

    Past ``deadline_s`` the next batch is refused before it is written, so the engine
    holds the whole batches committed in time (``partial``), never a half batch.
    """
    from bench import scale

    out = scale_dir(size)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    embedder = scale.ReplicaEmbedder()
    # Distinct texts come from the shared cache (it has the embed_documents the memo calls).
    embedder.model = CachedEmbedder(shared_cache())  # type: ignore[assignment]
    corpus = scifact.load_corpus()
    start = time.perf_counter()
    replicate = embedder.embed_documents

    stopped: list[bool] = []

    def bounded(texts: list[str]) -> np.ndarray:
        if deadline_s is not None and time.perf_counter() - start > deadline_s:
            stopped.append(True)
            raise BuildDeadline(f"stopped after {deadline_s:.0f}s")
        return replicate(texts)

    embedder.embed_documents = bounded  # type: ignore[method-assign]
    before = _cpu_snapshot()
    partial = None
    try:
        engine, chunks, secs = scale.build(out / "engine", corpus, size, embedder)
    except Exception:  # BuildDeadline, possibly wrapped by the engine
        if not stopped:
            raise
        secs = time.perf_counter() - start
        partial = f"build stopped at the {deadline_s:.0f}s deadline; committed batches kept"
        engine = Engine(out / "engine", embedder=embedder, query_cache_size=0)
        chunks = engine.stats().get("chunk", 0)
    load = other_cpu_load(before, _cpu_snapshot())
    embedder.save()
    info = {"target": size, "chunks": chunks, "ingest_s": secs, "units": engine.stats(),
            "dense_path": ("exact (numpy)" if chunks <= engine.config.dense_exact_max
                           else "HNSW (Chroma)"),
            "build_peak_rss_mb": max_rss_mb(), "build_other_load": load,
            "vectors": VECTORS, "nice": os.nice(0), "partial": partial}
    engine.close()
    info["disk_mb"] = disk_mb(out / "engine")
    (out / "build.json").write_text(json.dumps(info, indent=1))
    return info


def scale_query(size: int, n_queries: int, warmup: int = 5) -> dict:
    """Open the cached engine of ``size`` in this process and time hybrid retrieves."""
    from bench.scifact_engine import _QueryClock
    from rcp_agentic.models.embedder import SentenceTransformerEmbedder

    info = json.loads((scale_dir(size) / "build.json").read_text())
    queries = dict(list(scifact.load_queries().items())[:n_queries])
    rss = {"start": vm_rss_mb()}
    model = SentenceTransformerEmbedder()
    model.embed_query("warm the model before the engine opens")
    rss["model_loaded"] = vm_rss_mb()
    t0 = time.perf_counter()
    engine = Engine(scale_dir(size) / "engine", embedder=model, query_cache_size=0)
    open_s = time.perf_counter() - t0
    rss["engine_open"] = vm_rss_mb()

    def search(text: str) -> list[str]:
        res = engine.retrieve(text, k=10, include_text=True)
        return [h.id for h in res.hits]

    t0 = time.perf_counter()
    search(next(iter(queries.values())))
    first_s = time.perf_counter() - t0
    for text in list(queries.values())[1:warmup]:
        search(text)
    rss["after_first_queries"] = vm_rss_mb()
    timing = time_queries(search, queries, _QueryClock(engine), warmup=0)
    rss["after_timed_queries"] = vm_rss_mb()
    rss["ru_maxrss"] = max_rss_mb()
    engine.close()
    e2e, beyond = percentiles(timing.e2e_ms), percentiles(timing.beyond_ms)
    return {**info, "queries": len(queries), "open_s": open_s, "first_query_s": first_s,
            "e2e_p50_ms": e2e["p50"], "e2e_p95_ms": e2e["p95"],
            "beyond_p50_ms": beyond["p50"], "beyond_p95_ms": beyond["p95"],
            "query_other_load": timing.other_load, "rss_mb": rss,
            "rss_growth_mb": rss["after_timed_queries"] - rss["model_loaded"]}


def _subprocess(args: list[str], nice: int, timeout: float | None) -> dict:
    """Run this script with ``args`` in a child; its last stdout line is a JSON object."""
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    if nice:
        cmd = ["nice", "-n", str(nice), *cmd]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_scale(sizes: Sequence[int], n_queries: int, build_deadline: float,
              build: bool = True, note: str | None = None) -> dict:
    rows: list[dict] = []
    failed: list[dict] = []
    for size in sizes:
        built = (scale_dir(size) / "build.json").exists()
        if not built and not build:
            failed.append({"target": size, "error": "not built (--cached-only, no cached engine)"})
            continue
        if not built:
            print(f"[scale] building {size} chunks (nice -n 10)", file=sys.stderr, flush=True)
            try:
                _subprocess(["_scale-build", str(size), "--deadline", str(build_deadline)],
                            nice=10, timeout=None)
            except RuntimeError as exc:
                failed.append({"target": size, "error": f"build: {exc}"})
                print(f"[scale] {size}: build failed: {exc}", file=sys.stderr, flush=True)
                continue
        print(f"[scale] querying {size} ({'cached' if built else 'fresh'} engine)",
              file=sys.stderr, flush=True)
        try:
            row = _subprocess(["_scale-query", str(size), str(n_queries)], nice=0, timeout=None)
        except RuntimeError as exc:
            failed.append({"target": size, "error": f"query: {exc}"})
            continue
        row["cached_build"] = built
        rows.append(row)
        print(format_scale({"rows": rows, "failed": failed}), file=sys.stderr, flush=True)
    return {"rows": rows, "failed": failed, "vectors": VECTORS, "note": note,
            "machine": f"{os.cpu_count()} cores"}


def format_scale(section: dict) -> str:
    rows = section.get("rows", [])
    lines = ["Embedded backend at scale: hybrid chunk retrieve k=10 (ms), resident memory (MB)",
             f"vectors: {section.get('vectors', VECTORS)}",
             f"{'chunks':>8} {'dense path':<14} {'e2e p50':>8} {'e2e p95':>8} {'bynd p50':>8} "
             f"{'bynd p95':>8} {'p50 x':>6} {'bynd x':>6} {'RSS open':>8} {'RSS q':>7} {'growth':>7} "
             f"{'maxrss':>7} {'ingest s':>8} {'disk MB':>8} {'load':>5}"]
    base: dict = rows[0] if rows else {}
    for r in rows:
        rss = r["rss_mb"]
        lines.append(
            f"{r['chunks']:>8} {r['dense_path']:<14} {r['e2e_p50_ms']:>8.2f} "
            f"{r['e2e_p95_ms']:>8.2f} {r['beyond_p50_ms']:>8.2f} {r['beyond_p95_ms']:>8.2f} "
            f"{r['e2e_p50_ms'] / base['e2e_p50_ms']:>6.2f} "
            f"{r['beyond_p50_ms'] / base['beyond_p50_ms']:>6.2f} {rss['engine_open']:>8.0f} "
            f"{rss['after_timed_queries']:>7.0f} {r['rss_growth_mb']:>7.0f} {rss['ru_maxrss']:>7.0f} "
            f"{r['ingest_s']:>8.0f} {r['disk_mb']:>8.0f} {r['query_other_load'] or 0:>5.2f}")
    lines.append("RSS open: VmRSS after Engine() (model already loaded); RSS q: after the timed "
                 "queries; growth: RSS q - RSS with the model loaded, before the engine opened; "
                 "load: other processes' share of the cores while timing")
    for r in rows:
        lines.append(f"  {r['chunks']} chunks: units {r['units']}; engine open {r['open_s']:.2f}s, "
                     f"first query {r['first_query_s']:.2f}s; build peak RSS "
                     f"{r['build_peak_rss_mb']:.0f} MB (other load {r['build_other_load'] or 0:.2f})")
        if r.get("partial"):
            lines.append(f"  {r['chunks']} chunks of the {r['target']} asked for: {r['partial']}")
    for f in section.get("failed", []):
        lines.append(f"  FAILED {f['target']}: {f['error']}")
    if section.get("note"):
        lines.append(f"  note: {section['note']}")
    return "\n".join(lines)


# --- compare --------------------------------------------------------------------------

def open_engine(backend: str, root: Path, embedder: CachedEmbedder, **config: Any) -> Engine:
    if backend == "embedded":
        return Engine(root / "engine", embedder=embedder, query_cache_size=0, **config)
    return Engine(root / "engine", embedder=embedder, query_cache_size=0, backend="milvus",
                  milvus_uri=str(root / "milvus.db"), **config)


def ingest(engine: Engine, corpus: dict[str, str], embedder: CachedEmbedder) -> dict:
    docs = [{"id": did, "text": text, "title": text.split("\n\n", 1)[0]}
            for did, text in corpus.items()]
    mark = engine.embedder.seconds_in_model
    start = time.perf_counter()
    res = engine.add_documents(docs)
    total = time.perf_counter() - start
    in_embedder = engine.embedder.seconds_in_model - mark
    # A backend may finish its indexing lazily on the first read (the in-memory BM25 and
    # dense arrays; Milvus Lite rewrites a kind's collection): timed here, once per unit.
    first_read: dict[str, float] = {}
    for unit in UNITS:
        t0 = time.perf_counter()
        engine.retrieve("first read", k=10, unit=unit, include_text=False)
        first_read[unit] = time.perf_counter() - t0
    in_embedder_all = engine.embedder.seconds_in_model - mark
    ready = time.perf_counter() - start
    return {"documents": res.documents, "chunks": res.chunks, "ingest_s": total,
            "in_embedder_s": in_embedder, "beyond_embedding_s": total - in_embedder,
            "first_read_s": first_read, "ready_s": ready,
            "ready_beyond_embedding_s": ready - in_embedder_all, "units": engine.stats()}


def model_seconds(texts: list[str], cache: Any) -> dict:
    """Seconds MiniLM takes over exactly ``texts`` (measured once, remembered by their digest)."""
    digest = hashlib.sha1("\x00".join(texts).encode()).hexdigest()
    known = json.loads(MODEL_TIME.read_text()) if MODEL_TIME.exists() else {}
    if digest not in known:
        print(f"[compare] timing the model over {len(texts)} chunk texts", file=sys.stderr,
              flush=True)
        before = _cpu_snapshot()
        t0 = time.perf_counter()
        for i in range(0, len(texts), 256):
            cache.encode(texts[i:i + 256])
        known[digest] = {"texts": len(texts), "seconds": time.perf_counter() - t0,
                         "other_load": other_cpu_load(before, _cpu_snapshot()),
                         "measured_at": time.strftime("%Y-%m-%d %H:%M")}
        MODEL_TIME.parent.mkdir(parents=True, exist_ok=True)
        MODEL_TIME.write_text(json.dumps(known, indent=1))
    return known[digest]


def run_queries(engine: Engine, queries: dict[str, str], qrels: dict, warmup: int,
                modes: Sequence[str] = MODES) -> dict:
    from bench.scifact_engine import _QueryClock

    clock = _QueryClock(engine)
    qid_of = {text: qid for qid, text in queries.items()}
    out: dict[str, dict] = {}
    for unit in UNITS:
        for mode in modes:
            top10: dict[str, list[str]] = {}

            def search(text: str, unit: str = unit, mode: str = mode,
                       top10: dict[str, list[str]] = top10) -> list[str]:
                res = engine.retrieve(text, k=100, mode=mode, unit=unit, include_text=False)
                top10[qid_of[text]] = [h.id for h in res.hits[:10]]
                return [h.chunk.doc_id if h.chunk else h.id for h in res.hits]

            timing = time_queries(search, queries, clock, warmup=warmup)
            e2e, beyond = percentiles(timing.e2e_ms), percentiles(timing.beyond_ms)
            out[f"{unit}/{mode}"] = {
                "ndcg@10": ndcg_at_k(timing.run, qrels, 10),
                "recall@100": recall_at_k(timing.run, qrels, 100),
                "e2e_p50_ms": e2e["p50"], "e2e_p95_ms": e2e["p95"],
                "beyond_p50_ms": beyond["p50"], "beyond_p95_ms": beyond["p95"],
                "other_load": timing.other_load, "top10": top10}
            print(f"[compare] {unit}/{mode}: nDCG@10 {out[f'{unit}/{mode}']['ndcg@10']:.4f}",
                  file=sys.stderr, flush=True)
    return out


def jaccard(a: list[str], b: list[str]) -> float:
    sa, sb = set(a), set(b)
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def run_compare(backends: Sequence[str], limit: int | None, n_queries: int | None,
                warmup: int, modes: Sequence[str] = MODES, bm25_k1: float | None = None) -> dict:
    corpus, queries, qrels = scifact.load_dataset(limit, n_queries)
    print(f"[compare] SciFact train: {len(corpus)} docs, {len(queries)} queries",
          file=sys.stderr, flush=True)
    cache = shared_cache()
    section: dict[str, Any] = {"split": "train", "documents": len(corpus),
                               "queries": len(queries), "backends": {}, "failed": {},
                               "note": MILVUS_NOTE, "bm25_k1": bm25_k1}
    config = {"bm25_k1": bm25_k1} if bm25_k1 is not None else {}
    with tempfile.TemporaryDirectory(prefix="rcp-backends-") as tmp:
        # Prime the shared cache so neither measured ingest runs the model.
        embedder = CachedEmbedder(cache)
        primer = Engine(Path(tmp) / "primer", embedder=embedder, query_cache_size=0)
        primer.add_documents({"id": d, "text": t, "title": t.split("\n\n", 1)[0]}
                             for d, t in corpus.items())
        primer.close()
        section["model"] = model_seconds(embedder.texts, cache)
        for backend in backends:
            root = Path(tmp) / backend
            try:
                embedder = CachedEmbedder(cache)
                engine = open_engine(backend, root, embedder, **config)
                ing = ingest(engine, corpus, embedder)
                engine.close()
                engine = open_engine(backend, root, CachedEmbedder(cache), **config)
                res = run_queries(engine, queries, qrels, warmup, modes)
                engine.close()
            except Exception as exc:  # a backend that fails is reported, the other still runs
                section["failed"][backend] = f"{type(exc).__name__}: {exc}"
                print(f"[compare] {backend} failed: {exc!r}", file=sys.stderr, flush=True)
                continue
            model_s = section["model"]["seconds"]
            ing["chunks_per_s"] = ing["chunks"] / ing["ready_s"]
            ing["ratio_to_model"] = (ing["ready_beyond_embedding_s"] + model_s) / model_s
            ing["disk_mb"] = disk_mb(root)
            section["backends"][backend] = {"ingest": ing, "retrieve": res}
    base = section["backends"].get("embedded")
    if base:
        for name, data in section["backends"].items():
            for key, row in data["retrieve"].items():
                ref = base["retrieve"][key]["top10"]
                row["jaccard_top10_vs_embedded"] = float(np.mean(
                    [jaccard(ref[q], row["top10"].get(q, [])) for q in ref]))
    return section


def format_compare(section: dict) -> str:
    k1 = section.get("bm25_k1")
    lines = [f"SciFact {section['split']}: {section['documents']} docs, {section['queries']} "
             f"queries; k=100, latency in ms; same run, same embedding cache"
             + (f"; engine bm25_k1={k1}" if k1 is not None else "")]
    model = section.get("model")
    if model:
        lines.append(f"model: MiniLM over the {model['texts']} chunk texts took "
                     f"{model['seconds']:.1f}s (other load {model['other_load'] or 0:.2f})")
    backends = section.get("backends", {})
    base = backends.get("embedded")
    lines.append(f"{'backend':<9} {'unit/mode':<16} {'nDCG@10':>8} {'R@100':>7} {'e2e p50':>8} "
                 f"{'e2e p95':>8} {'bynd p50':>8} {'bynd p95':>8} {'e2e x':>6} {'bynd x':>6} "
                 f"{'Jacc@10':>7} {'load':>5}")
    for name, data in backends.items():
        for key, r in data["retrieve"].items():
            ref = base["retrieve"][key] if base else {}
            ratio = r["e2e_p50_ms"] / ref["e2e_p50_ms"] if ref else float("nan")
            bratio = r["beyond_p50_ms"] / ref["beyond_p50_ms"] if ref else float("nan")
            lines.append(
                f"{name:<9} {key:<16} {r['ndcg@10']:>8.4f} {r['recall@100']:>7.4f} "
                f"{r['e2e_p50_ms']:>8.2f} {r['e2e_p95_ms']:>8.2f} {r['beyond_p50_ms']:>8.2f} "
                f"{r['beyond_p95_ms']:>8.2f} {ratio:>6.2f} {bratio:>6.2f} "
                f"{r.get('jaccard_top10_vs_embedded', float('nan')):>7.3f} "
                f"{r['other_load'] or 0:>5.2f}" + ("  <- " + MILVUS_NOTE if name == "milvus"
                                                   and key.endswith("hybrid") else ""))
    lines.append("unit chunk: chunk hits mapped to their document (first rank counts); x: p50 "
                 "÷ the embedded p50 of the same row; Jacc@10: mean Jaccard of the top-10 unit "
                 "ids with the embedded backend; load: other processes' share of the cores")
    lines.append(f"{'backend':<9} {'docs':>6} {'chunks':>7} {'add s':>7} {'1st read s':>10} "
                 f"{'ready s':>8} {'chunks/s':>9} {'in embedder s':>13} {'ratio':>6} "
                 f"{'x embedded':>10} {'disk MB':>8}")
    for name, data in backends.items():
        i = data["ingest"]
        rel = i["ready_s"] / base["ingest"]["ready_s"] if base else float("nan")
        lines.append(f"{name:<9} {i['documents']:>6} {i['chunks']:>7} {i['ingest_s']:>7.1f} "
                     f"{sum(i['first_read_s'].values()):>10.2f} {i['ready_s']:>8.1f} "
                     f"{i['chunks_per_s']:>9.0f} {i['in_embedder_s']:>13.2f} "
                     f"{i['ratio_to_model']:>6.3f} {rel:>10.2f} {i['disk_mb']:>8.0f}")
    lines.append("add: add_documents; 1st read: the first retrieve of each unit kind after it "
                 "(lazy indexing); ready = add + 1st read; chunks/s over ready; embedder: cache "
                 "lookups (warm); ratio: (ready beyond the embedder + model time over the same "
                 "chunk texts) / model time, i.e. an uncached ingest's total / time in the model")
    if "milvus" in backends:
        lines.append(MILVUS_NOTE + ".")
    for name, err in section.get("failed", {}).items():
        lines.append(f"FAILED {name}: {err}")
    return "\n".join(lines)


# --- results --------------------------------------------------------------------------

FORMATTERS: dict[str, Callable[[dict], str]] = {"scale": format_scale, "compare": format_compare}


def code_state() -> str:
    """The commit the run used, and the package files that differed from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=BENCH.parent, capture_output=True,
                              text=True).stdout.strip()

    dirty = git("status", "--short", "--", "rcp_agentic").replace("\n", ";")
    return git("rev-parse", "--short", "HEAD") + (f" + uncommitted: {dirty}" if dirty else "")


def save(name: str, section: dict, seconds: float) -> str:
    """Store ``section`` under ``name`` in the JSON; rewrite the text of every section."""
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
    section = {**section, "run_seconds": seconds, "finished": time.strftime("%Y-%m-%d %H:%M")}
    data[name] = section
    RESULTS_JSON.write_text(json.dumps(data, indent=1))
    texts = []
    for key in sorted(data, key=lambda k: (k != "scale", k)):  # scale, compare, compare-*
        sec = data[key]
        texts.append(f"== {key} ({sec['finished']}, {sec['run_seconds']:.0f}s; code "
                     f"{sec.get('code', '?')}) ==\n{FORMATTERS[key.split('-')[0]](sec)}")
    RESULTS_TXT.write_text("\n\n".join(texts) + "\n")
    return FORMATTERS[name.split("-")[0]](section)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sc = sub.add_parser("scale", help="the embedded backend at 50k, 200k, 1M chunks")
    sc.add_argument("--sizes", type=int, nargs="+", default=[50_000, 200_000, 1_000_000])
    sc.add_argument("--queries", type=int, default=200)
    sc.add_argument("--build-deadline", type=float, default=DEFAULT_DEADLINE_S,
                    help="seconds a size may build; past them the batches committed are measured")
    sc.add_argument("--cached-only", action="store_true",
                    help="query the cached engines; a size without one is reported, not built")
    sc.add_argument("--note", default=None, help="a remark stored with the results")
    co = sub.add_parser("compare", help="embedded vs Milvus Lite on SciFact")
    co.add_argument("--limit", type=int, default=None)
    co.add_argument("--queries", type=int, default=None)
    co.add_argument("--warmup", type=int, default=5)
    co.add_argument("--backends", nargs="+", default=["embedded", "milvus"],
                    choices=["embedded", "milvus"])
    co.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    co.add_argument("--bm25-k1", type=float, default=None,
                    help="the engine's bm25_k1 on both backends (Milvus Lite scores with 1.5)")
    co.add_argument("--section", default="compare",
                    help="results key (compare-<name> keeps the default run's section)")
    b = sub.add_parser("_scale-build")
    b.add_argument("size", type=int)
    b.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE_S)
    q = sub.add_parser("_scale-query")
    q.add_argument("size", type=int)
    q.add_argument("queries", type=int)
    args = ap.parse_args(argv)

    start = time.perf_counter()
    if args.cmd == "_scale-build":
        print(json.dumps(scale_build(args.size, args.deadline)))
    elif args.cmd == "_scale-query":
        print(json.dumps(scale_query(args.size, args.queries)))
    elif args.cmd == "scale":
        section = {"code": code_state(),
                   **run_scale(args.sizes, args.queries, args.build_deadline,
                             build=not args.cached_only, note=args.note)}
        print(save("scale", section, time.perf_counter() - start))
    else:
        if args.section.split("-")[0] != "compare":
            ap.error("--section must be compare or compare-<name>")
        section = {"code": code_state(),
                   **run_compare(args.backends, args.limit, args.queries, args.warmup,
                                 args.modes, args.bm25_k1)}
        print(save(args.section, section, time.perf_counter() - start))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
