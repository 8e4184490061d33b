"""Equivalence harness: a refactor changed no behaviour (wire shapes, numbers to the last digit).

    python bench/equivalence.py --out before.json [--engine-dir DIR] [--data DIR]
    python bench/equivalence.py --compare before.json after.json

Builds a real Engine (build_graph, build_tree, graph communities) over ``examples/`` and the
first 150 MuSiQue-train passages, then drives it through the in-process RCP dispatcher with
JSON-RPC text: initialize/info/ping, retrieve (every mode x unit x graph recall, filters,
budgets, sessions, cursors, MMR, recency ...), graph ops, memory, embed, rerank, feedback,
index/add + delete, and error cases. Each request and its wire response go to one JSON file
(keys sorted); only what varies between runs is canonicalised: ``latencyMs`` is dropped,
cursor signatures (HMAC under the engine's random secret) become ``<sig>``, and the clock
recency decays against is fixed. ``--compare`` prints every differing entry (request, path,
A vs B) and exits 1, or 0 when identical. Run it from the checkout whose code is imported.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread: the float sums come out the same each run

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
PASSAGES = 150
FIXED_NOW = 1_767_225_600.0            # 2026-01-01T00:00:00Z: the clock recency decays against
FILE_EPOCH = 1_735_689_600.0           # 2025-01-01: example files dated a week apart from here
VENDOR = "x-rcp-agentic"
GRAPH_RECALL = f"{VENDOR}-graphRecall"
# Keys whose values are timings: dropped wherever they occur in a response.
TIMING_KEYS = frozenset({"latencyMs"})
CURSOR_KEYS = frozenset({"cursor", "nextCursor"})
SIGNED = re.compile(r"^([A-Za-z0-9_\-]+)\.([0-9a-f]{16,64})$")
WIKI_QUERIES = ("In which city was the group behind the single Midnight Harbor founded?",
                "Where did the drummer of Velvet Lanterns grow up?")
DOCS_QUERY = "How are dense and sparse results fused in hybrid search?"
MUSIQUE_QUESTIONS = 3


# --- the corpus and the engine --------------------------------------------------------------

def data_root(given: str | None) -> Path:
    """``--data``, ``$RCP_AGENTIC_DATA``, ``<repo>/../shared/data`` or ``/work/shared/data``."""
    for candidate in (given, os.environ.get("RCP_AGENTIC_DATA"),
                      str(ROOT.parent / "shared" / "data"), "/work/shared/data"):
        if candidate and (Path(candidate) / "multihop" / "musique-train").is_dir():
            return Path(candidate)
    raise SystemExit("no multihop/musique-train under --data, $RCP_AGENTIC_DATA or ../shared/data")


def corpus(examples: Path, musique: Path) -> list[Any]:
    """The fixed corpus: every file under ``examples`` (as ``index_paths`` loads them, with the
    absolute path and the mtime made fixed so the checkout's place and age do not show), then
    the first PASSAGES MuSiQue passages as ``bench/graph.py``'s ``load_set`` makes them."""
    from rcp_agentic.corpus.loaders import SkippedFile, load_path

    docs: list[Any] = []
    for item in load_path(examples):
        if isinstance(item, SkippedFile):
            raise SystemExit(f"an example file was skipped: {item}")
        item.source = f"/rcp-equivalence/{item.id}"
        item.modified = FILE_EPOCH + 7 * 86400.0 * len(docs)
        docs.append(item)
    with (musique / "corpus.jsonl").open(encoding="utf-8") as fh:
        rows = [json.loads(line) for _, line in zip(range(PASSAGES), fh)]
    docs += [{"id": r["_id"], "title": r["title"], "text": f"{r['title']}\n\n{r['text']}"}
             for r in rows]
    return docs


def questions(musique: Path, ids: set[str]) -> list[str]:
    """The first MuSiQue questions whose supporting passages are all in the corpus."""
    out = []
    with (musique / "questions.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            if set(q["supporting_ids"]) <= ids:
                out.append(q["question"])
            if len(out) == MUSIQUE_QUESTIONS:
                break
    return out


def open_engine(path: Path, docs: list[Any]) -> Any:
    """A new engine at ``path`` with the tree, the graph and its communities, every derived
    kind current. Inline derived updates: one write, then each builder once, in order, so the
    index versions do not depend on a worker's timing."""
    from rcp_agentic import Engine

    engine = Engine(path, build_graph=True, build_tree=True, graph_communities=True,
                    derived_updates="inline", torch_threads=1)
    engine.add_documents(docs)
    if not engine.wait_for_derived(timeout=1800):
        raise SystemExit("derived units did not become current")
    return engine


# --- talking to it --------------------------------------------------------------------------

class Battery:
    """Sends JSON-RPC text through one dispatcher and keeps every request and answer."""

    def __init__(self, engine: Any) -> None:
        try:
            from rcp_agentic.protocol.dispatcher import Dispatcher
        except ImportError:  # the refactor may move it; the package root is the next guess
            from rcp_agentic.protocol import Dispatcher  # type: ignore[attr-defined,no-redef]
        self.dispatcher_type = Dispatcher
        self.engine = engine
        self.rpc = Dispatcher(engine)
        self.entries: list[dict[str, Any]] = []
        self.labels: set[str] = set()

    def raw(self, label: str, text: str, rpc: Any = None) -> dict[str, Any]:
        """``text`` as the frame, answered by ``rpc`` (default: the session's dispatcher)."""
        assert label not in self.labels, label
        self.labels.add(label)
        started = time.perf_counter()
        answer = (rpc or self.rpc).handle_text(text)
        seconds = time.perf_counter() - started
        response = json.loads(answer) if answer is not None else None
        try:
            request: Any = json.loads(text)
        except ValueError:
            request = {"raw": text}
        self.entries.append({"id": label, "request": request, "response": response,
                             "_seconds": seconds})
        return response if isinstance(response, dict) else {}

    def call(self, label: str, method: str, params: Any = None, *, rpc: Any = None,
             frozen_clock: bool = False) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": label, "method": method}
        if params is not None:
            message["params"] = params
        text = json.dumps(message, ensure_ascii=False)
        with frozen(frozen_clock):
            return self.raw(label, text, rpc)


@contextlib.contextmanager
def frozen(on: bool) -> Iterator[None]:
    """``time.time()`` fixed at FIXED_NOW (recency decays by age from now) while ``on``."""
    if not on:
        yield
        return
    with mock.patch.object(time, "time", lambda: FIXED_NOW):
        yield


def result(response: dict[str, Any]) -> dict[str, Any]:
    got = response.get("result")
    return got if isinstance(got, dict) else {}


def run(b: Battery, queries: dict[str, str]) -> None:
    """The fixed battery. Everything it sends derives from the capabilities and earlier
    answers, so it runs on any version of the code; what it cannot do is recorded as an
    error answer, not skipped."""
    # Lifecycle.
    fresh = b.dispatcher_type(b.engine)
    b.call("lifecycle/retrieve-before-initialize", "retrieve", {"query": "x"}, rpc=fresh)
    init = b.call("lifecycle/initialize", "initialize", {"protocolVersion": 1})
    b.call("lifecycle/initialize-again", "initialize", {"protocolVersion": 1})
    b.call("lifecycle/info", "info", {})
    b.call("lifecycle/ping", "ping", {"nonce": {"n": 1, "s": "équivalence"}})
    caps = result(init).get("capabilities", {})
    retrieve_caps = caps.get("retrieve", {})
    units = retrieve_caps.get("units", ["chunk"])
    modes = retrieve_caps.get("modes", ["hybrid"])
    graph_recall = [False, True] if caps.get(VENDOR, {}).get("graphRecall") else [False]
    unit_info = caps.get(VENDOR, {}).get("units", {})

    # Every mode x unit x graph recall, each query.
    for qname, query in queries.items():
        for unit in units:
            for mode in modes:
                for recall in graph_recall:
                    params: dict[str, Any] = {"query": query, "k": 5, "mode": mode,
                                              "unit": unit}
                    if recall:
                        params[GRAPH_RECALL] = True
                    b.call(f"retrieve/{qname}/{unit}/{mode}" + ("/graph" if recall else ""),
                           "retrieve", params)

    q, wiki = queries["musique1"], queries["wiki1"]
    # Options, one at a time.
    opt = {
        "k1": {"k": 1},
        "k20": {"k": 20},
        "candidateK": {"k": 5, "candidateK": 10},
        "fusion-weighted": {"k": 5, "fusion": {"method": "weighted",
                                               "weights": {"dense": 0.7, "sparse": 0.3}}},
        "fusion-convex": {"k": 5, "fusion": {"method": "convex", "alpha": 0.3}},
        "fusion-rrfK": {"k": 5, "fusion": {"method": "rrf", "rrfK": 10}},
        "minScore": {"k": 10, "minScore": 0.02},
        "tokenBudget": {"k": 20, "tokenBudget": 300},
        "tokenBudget-document": {"k": 20, "tokenBudget": 500, "unit": "document"},
        "includeText-false": {"k": 3, "includeText": False},
        "includeVectors": {"k": 2, "includeVectors": True},
        "seed": {"k": 5, "seed": 12345},
        "rankBy-confidence": {"k": 5, f"{VENDOR}-rankBy": "confidence"},
        "mmr": {"k": 8, "mmr": {"lambda": 0.3}},
        "mmr-graph": {"k": 8, "mmr": {"lambda": 0.5}, GRAPH_RECALL: True},
        "filter-file_type": {"k": 5, "filter": {"field": "file_type", "op": "eq",
                                                "value": "md"}},
        "filter-and-or": {"k": 5, "filter": {"and": [
            {"field": "doc_id", "op": "nin", "value": ["musiquetrain-00006"]},
            {"or": [{"field": "title", "op": "contains", "value": "Journal"},
                    {"field": "chunk_index", "op": "gte", "value": 1}]}]}},
        "filter-exists-not": {"k": 5, "filter": {"not": {"field": "modified", "op": "exists",
                                                          "value": True}}},
        "filter-graph": {"k": 5, GRAPH_RECALL: True, "filter": {
            "field": "doc_id", "op": "in",
            "value": [f"musiquetrain-{i:05d}" for i in range(0, 150, 2)]}},
        "strict-false-rerank": {"k": 5, "strict": False, "rerank": {"method": "cross-encoder"}},
        "rerank-false": {"k": 5, "rerank": False},
        "unknown-param-notes": {"k": 3, "colour": "blue"},
        "level-tree-1": {"k": 5, "unit": "tree-node", "level": 1},
        "tree-traversal": {"k": 5, "unit": "tree-node", f"{VENDOR}-treeSearch": "traversal"},
        "level-community-1": {"k": 5, "unit": "community", "level": 1},
        "page-pdf": {"k": 3, "unit": "page", "filter": {"field": "file_type", "op": "eq",
                                                        "value": "pdf"}},
        "passage-budget": {"k": 10, "unit": "passage", "tokenBudget": 200},
        "path-budget": {"k": 5, "unit": "path", "tokenBudget": 200},
        "subgraph-k2": {"k": 2, "unit": "subgraph", "mode": "sparse"},
        "triplet-filter": {"k": 5, "unit": "triplet", "filter": {
            "field": "doc_id", "op": "eq", "value": "musiquetrain-00010"}},
    }
    for name, params in opt.items():
        b.call(f"options/{name}", "retrieve", {"query": q, **params})
    b.call("options/recency", "retrieve", {"query": DOCS_QUERY, "k": 8, "recency": {
        "field": "modified", "halfLifeDays": 30}}, frozen_clock=True)
    b.call("options/recency-graph", "retrieve", {"query": wiki, "k": 8, GRAPH_RECALL: True,
                                                 "recency": {"field": "modified",
                                                             "halfLifeDays": 90}},
           frozen_clock=True)
    b.call("options/query-content", "retrieve", {"query": [{"type": "text", "text": wiki}],
                                                 "k": 3})
    version = result(init).get("_meta", {}).get(VENDOR, {}).get("indexVersion")
    b.call("options/indexVersion-current", "retrieve", {"query": q, "k": 3,
                                                        "indexVersion": version})
    b.call("options/indexVersion-v3", "retrieve", {"query": q, "k": 3, "indexVersion": "v3"})

    # Sessions: the same query twice in one trajectory (the second dedups), a third unit kind.
    for i in (1, 2):
        b.call(f"session/chunk-{i}", "retrieve", {"query": wiki, "k": 3, "sessionId": "eq-s1"})
    b.call("session/document", "retrieve", {"query": wiki, "k": 3, "unit": "document",
                                            "sessionId": "eq-s1"})
    for i in (1, 2):
        b.call(f"session/graph-{i}", "retrieve", {"query": q, "k": 3, "sessionId": "eq-s2",
                                                  "unit": "node", GRAPH_RECALL: True})

    # Cursors: a first page and the next two, for a stored and a composed kind.
    for unit in ("chunk", "path"):
        params = {"query": q, "k": 3, "unit": unit}
        page = b.call(f"cursor/{unit}-page1", "retrieve", params)
        for n in (2, 3):
            cursor = result(page).get("nextCursor")
            if not cursor:
                break
            page = b.call(f"cursor/{unit}-page{n}", "retrieve", {**params, "cursor": cursor})
    b.call("cursor/budget-page1", "retrieve", {"query": q, "k": 10, "tokenBudget": 250})
    cursor = result(b.entries[-1]["response"] or {}).get("nextCursor")
    if cursor:
        b.call("cursor/budget-page2", "retrieve", {"query": q, "k": 10, "tokenBudget": 250,
                                                   "cursor": cursor})
        b.call("cursor/other-options", "retrieve", {"query": q, "k": 9, "tokenBudget": 250,
                                                    "cursor": cursor})
    b.call("cursor/foreign", "retrieve", {"query": q, "k": 3,
                                          "cursor": "eyJ2IjoxfQ.0123456789abcdef0123456789abcdef"})

    # graph (§7.9): every op offered.
    ops = caps.get("graph", {}).get("ops", [])
    levels = unit_info.get("community", {}).get("levels", [0])
    for qname in ("musique1", "wiki1"):
        query = queries[qname]
        if "local" in ops:
            local = b.call(f"graph/local/{qname}", "graph", {"op": "local", "query": query,
                                                             "k": 5})
            seeds = [n["id"] for n in result(local).get("nodes", []) if "id" in n][:2]
            if "neighbors" in ops and seeds:
                b.call(f"graph/neighbors/{qname}", "graph", {"op": "neighbors",
                                                             "seedIds": seeds, "hops": 2,
                                                             "k": 15})
        if "global" in ops:
            b.call(f"graph/global/{qname}", "graph", {"op": "global", "query": query, "k": 5})
        if "drift" in ops:
            b.call(f"graph/drift/{qname}", "graph", {"op": "drift", "query": query, "k": 5})
    if "local" in ops:
        b.call("graph/local-filter", "graph", {"op": "local", "query": wiki, "k": 5, "filter": {
            "field": "doc_id", "op": "in", "value": ["examples/wiki/velvet-lanterns.md",
                                                     "examples/wiki/oskar-brandvik.md"]}})
    if "global" in ops:
        b.call("graph/global-budget-level", "graph", {"op": "global", "query": q, "k": 3,
                                                      "tokenBudget": 120, "level": levels[-1]})
    if "drift" in ops:
        for i in (1, 2):
            b.call(f"graph/drift-session-{i}", "graph", {"op": "drift", "query": wiki,
                                                         "k": 4, "sessionId": "eq-drift"})
    if "communities" in ops:
        for level in levels:
            b.call(f"graph/communities/level{level}", "graph", {"op": "communities",
                                                                "level": level, "k": 10})
        page = b.call("graph/communities/page1", "graph", {"op": "communities", "k": 5})
        cursor = result(page).get("nextCursor")
        if cursor:
            b.call("graph/communities/page2", "graph", {"op": "communities", "k": 5,
                                                        "cursor": cursor})
    b.call("graph/error-no-op", "graph", {"query": q})
    b.call("graph/error-unknown-op", "graph", {"op": "teleport", "query": q})
    b.call("graph/error-local-no-query", "graph", {"op": "local"})
    b.call("graph/error-neighbors-no-seeds", "graph", {"op": "neighbors"})
    b.call("graph/error-budget-local", "graph", {"op": "local", "query": q,
                                                 "tokenBudget": 100})
    b.call("graph/error-unknown-seed", "graph", {"op": "neighbors", "seedIds": ["nope"]})
    b.call("graph/error-level", "graph", {"op": "communities", "level": 99})

    # memory (§7.17).
    if "memory" in caps:
        built = b.call("memory/build-global", "memory/build", {"scope": "global"})
        memory_id = result(built).get("memoryId")
        b.call("memory/build-session", "memory/build", {
            "scope": "session", "sessionId": "eq-mem",
            "documents": [{"text": "Velvet Lanterns recorded Midnight Harbor. Oskar Brandvik "
                                   "kept time for them."}]})
        b.call("memory/recall-global", "memory/recall", {"query": wiki, "memoryId": memory_id,
                                                         "n": 5})
        b.call("memory/recall-session", "memory/recall", {"query": wiki, "sessionId": "eq-mem",
                                                          "n": 3})
        b.call("memory/recall-musique", "memory/recall", {"query": q, "n": 4})
        b.call("memory/recall-filter", "memory/recall", {"query": q, "n": 4, "filter": {
            "field": "file_type", "op": "exists", "value": False}})
        b.call("memory/error-unknown-id", "memory/recall", {"query": q, "memoryId": "nope"})
        b.call("memory/error-session-no-id", "memory/build", {"scope": "session"})
        b.call("memory/error-global-filter", "memory/build", {"scope": "global", "filter": {
            "field": "file_type", "op": "eq", "value": "md"}})

    # embed, rerank, query/transform, feedback.
    b.call("embed/json", "embed", {"inputs": [wiki, "Bergen"], "kind": "query"})
    b.call("embed/base64", "embed", {"inputs": ["Velvet Lanterns"], "encoding": "f32-base64"})
    b.call("embed/error-no-inputs", "embed", {})
    b.call("rerank/passages", "rerank", {"query": wiki, "passages": [
        "Velvet Lanterns began playing in Bergen during 1974.",
        "Glass Orchard released the album Paper Moons."], "topN": 2})
    b.call("rerank/error-no-query", "rerank", {"passages": []})
    b.call("transform/rewrite", "query/transform", {"query": wiki, "method": "rewrite"})
    b.call("feedback/signals", "feedback", {"sessionId": "eq-s1", "query": wiki, "signals": [
        {"hitId": "examples/wiki/velvet-lanterns.md", "used": True, "reward": 0.5},
        {"hitId": "doc:examples/wiki/velvet-lanterns.md#c0", "helpful": True}]})
    b.call("feedback/error-hit-id", "feedback", {"signals": [{"hitId": 42}]})

    # Errors: bad params, unknown unit / mode / method, malformed frames.
    bad = {
        "no-query": {"k": 3},
        "k-negative": {"query": q, "k": -1},
        "k-string": {"query": q, "k": "five"},
        "unit-unknown": {"query": q, "unit": "paragraph"},
        "mode-unknown": {"query": q, "mode": "psychic"},
        "fusion-unknown": {"query": q, "fusion": {"method": "borda"}},
        "filter-field-unknown": {"query": q, "filter": {"field": "colour", "op": "eq",
                                                        "value": "red"}},
        "filter-op-unknown": {"query": q, "filter": {"field": "title", "op": "near",
                                                     "value": "x"}},
        "filter-empty-and": {"query": q, "filter": {"and": []}},
        "tokenBudget-zero": {"query": q, "tokenBudget": 0},
        "level-missing": {"query": q, "unit": "tree-node", "level": 9},
        "indexVersion-unknown": {"query": q, "indexVersion": "v999"},
        "rerank-strict": {"query": q, "rerank": {"method": "cross-encoder"}},
        "rewrite-no-llm": {"query": q, "rewrite": "hyde"},
        "strict-unknown": {"query": q, "strict": True, "colour": "blue"},
        "query-empty": {"query": "", "k": 3},
        "mmr-lambda": {"query": q, "mmr": {"lambda": 2}},
    }
    for name, params in bad.items():
        b.call(f"error/retrieve-{name}", "retrieve", params)
    b.call("error/unknown-method", "retrieve/everything", {"query": q})
    b.call("error/params-array", "retrieve", [q])  # type: ignore[arg-type]
    b.call("error/initialize-bad-version", "initialize", {"protocolVersion": "one"},
           rpc=b.dispatcher_type(b.engine))
    b.raw("error/parse", '{"jsonrpc": "2.0", "id": 1, "method": ')
    b.raw("error/not-an-object", "[1, 2]")
    b.raw("error/no-jsonrpc", '{"id": "x", "method": "ping"}')
    b.raw("batch/two", json.dumps([
        {"jsonrpc": "2.0", "id": "b1", "method": "ping", "params": {}},
        {"jsonrpc": "2.0", "id": "b2", "method": "retrieve", "params": {"query": wiki, "k": 2}},
        {"jsonrpc": "2.0", "method": "notifications/cancel", "params": {"id": "zz"}}]))

    # Writes last: one document in (every derived kind updated inline), read back, then out.
    b.call("index/error-empty", "index/add", {"documents": []})
    b.call("index/add", "index/add", {"documents": [{
        "id": "eq-new", "title": "Lantern Hall",
        "text": "Lantern Hall is a concert venue in Bergen where Velvet Lanterns played in 1975.",
        "meta": {"lang": "en"}}]})
    b.call("index/retrieve-after-add", "retrieve", {"query": "Lantern Hall Bergen venue", "k": 3})
    b.call("index/graph-after-add", "graph", {"op": "local", "query": "Lantern Hall", "k": 3})
    b.call("index/delete", "index/delete", {"ids": ["eq-new", "never-there"]})
    b.call("index/retrieve-after-delete", "retrieve", {"query": "Lantern Hall Bergen venue",
                                                       "k": 3})
    b.call("lifecycle/info-end", "info", {})
    b.call("lifecycle/shutdown", "shutdown", {})


# --- canonical form -------------------------------------------------------------------------

def canonical(value: Any) -> Any:
    """``value`` without what varies between runs of the same code (module doc)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in TIMING_KEYS:
                continue
            if key in CURSOR_KEYS and isinstance(item, str):
                match = SIGNED.match(item)
                out[key] = f"{match.group(1)}.<sig>" if match else item
                continue
            out[key] = canonical(item)
        return out
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def git(*args: str) -> str | None:
    """What ``git -C <repo> args`` prints (None without git or a repository)."""
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def tree_state() -> dict[str, Any]:
    """The commit and what the working tree changes on it: the files, and a hash of the diff."""
    import hashlib

    diff = git("diff", "HEAD") or ""
    status = git("status", "--porcelain") or ""
    return {"git": git("rev-parse", "HEAD"), "changed": status.splitlines(),
            "diff_sha256": hashlib.sha256(diff.encode("utf-8")).hexdigest()[:16]}


def record(args: argparse.Namespace) -> int:
    import rcp_agentic.graph  # binds rcp_agentic too
    import rcp_agentic.raptor

    started = time.perf_counter()
    state = tree_state()  # before the run: the code it imports is the code of this moment
    musique = data_root(args.data) / "multihop" / "musique-train"
    examples = Path(args.examples) if args.examples else ROOT / "examples"
    docs = corpus(examples, musique)
    ids = {d["id"] for d in docs if isinstance(d, dict)}
    qs = questions(musique, ids)
    queries = {f"musique{i + 1}": text for i, text in enumerate(qs)}
    queries.update({f"wiki{i + 1}": text for i, text in enumerate(WIKI_QUERIES)})
    queries["docs"] = DOCS_QUERY

    temp = None
    if args.engine_dir:
        path = Path(args.engine_dir)
        if path.exists() and any(path.iterdir()):
            raise SystemExit(f"--engine-dir {path} is not empty (the engine is built anew)")
    else:
        temp = tempfile.mkdtemp(prefix="rcp-equivalence-")
        path = Path(temp) / "engine"
    try:
        engine = open_engine(path, docs)
        built = time.perf_counter() - started
        try:
            battery = Battery(engine)
            battery.entries.append({"id": "engine/stats", "request": {"python": "engine.stats()"},
                                    "response": engine.stats(), "_seconds": 0.0})
            run(battery, queries)
        finally:
            engine.close()
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    seconds = time.perf_counter() - started
    slowest = sorted(battery.entries, key=lambda e: -e["_seconds"])[:5]
    entries = [canonical({k: v for k, v in e.items() if k != "_seconds"})
               for e in battery.entries]
    # Where each part was imported from (unresolved: a layout of symlinks shows as itself).
    code = {name: str(Path(module.__file__).parent) for name, module in (
        ("rcp_agentic", rcp_agentic), ("graph", rcp_agentic.graph),
        ("raptor", rcp_agentic.raptor))}
    out = {"run": {"code": code, **state, "python": sys.version.split()[0],
                   "seconds": round(seconds, 1), "build_seconds": round(built, 1)},
           "corpus": {"documents": len(docs), "queries": queries},
           "entries": entries}
    Path(args.out).write_text(json.dumps(out, sort_keys=True, indent=1, ensure_ascii=False)
                              + "\n", "utf-8")
    print(f"{len(entries)} entries -> {args.out} in {seconds:.0f} s (engine {built:.0f} s); "
          f"code {code}")
    print("slowest: " + ", ".join(f"{e['id']} {e['_seconds']:.2f}s" for e in slowest))
    return 0


# --- comparing ------------------------------------------------------------------------------

def differences(a: Any, b: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """Every place where ``a`` and ``b`` differ: (path, value in a, value in b); a missing
    key or list item is ``<absent>``. Floats compare exactly (and 1 differs from 1.0)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            sub = f"{path}.{key}" if path else key
            if key not in a:
                yield sub, "<absent>", b[key]
            elif key not in b:
                yield sub, a[key], "<absent>"
            else:
                yield from differences(a[key], b[key], sub)
    elif isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            sub = f"{path}[{i}]"
            if i >= len(a):
                yield sub, "<absent>", b[i]
            elif i >= len(b):
                yield sub, a[i], "<absent>"
            else:
                yield from differences(a[i], b[i], sub)
    elif type(a) is not type(b) or a != b:
        yield path, a, b


def short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def compare(path_a: str, path_b: str, per_entry: int) -> int:
    a = json.loads(Path(path_a).read_text("utf-8"))
    b = json.loads(Path(path_b).read_text("utf-8"))
    by_a = {e["id"]: e for e in a["entries"]}
    by_b = {e["id"]: e for e in b["entries"]}
    order = [e["id"] for e in a["entries"]] + [e["id"] for e in b["entries"]
                                               if e["id"] not in by_a]
    differing = 0
    for label in order:
        if label not in by_b or label not in by_a:
            differing += 1
            print(f"\n[{label}] only in {'A' if label in by_a else 'B'}")
            continue
        ea, eb = by_a[label], by_b[label]
        found = list(differences({"request": ea["request"], "response": ea["response"]},
                                 {"request": eb["request"], "response": eb["response"]}))
        if not found:
            continue
        differing += 1
        print(f"\n[{label}] request: {short(ea['request'], 300)}")
        for where, va, vb in found[:per_entry]:
            print(f"  {where}\n    A: {short(va)}\n    B: {short(vb)}")
        if len(found) > per_entry:
            print(f"  ... and {len(found) - per_entry} more difference(s)")
    for key in ("corpus",):
        for where, va, vb in differences(a.get(key), b.get(key), key):
            differing += 1
            print(f"\n[{where}] A: {short(va)} B: {short(vb)}")
    runs = "; ".join(f"{name} git {r.get('git')}, code {short(r.get('code'), 300)}"
                     for name, r in (("A", a.get("run", {})), ("B", b.get("run", {}))))
    if differing:
        print(f"\n{differing} of {len(order)} entries differ; {runs}")
        return 1
    print(f"identical: {len(order)} entries; {runs}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", help="record the battery's answers to this JSON file")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"),
                        help="compare two recordings; exit 1 if any entry differs")
    parser.add_argument("--engine-dir", help="build the engine here (empty or absent; default: "
                        "a temporary directory, removed after)")
    parser.add_argument("--data", help="the shared data root (holding multihop/musique-train)")
    parser.add_argument("--examples", help="the examples folder (default: <repo>/examples)")
    parser.add_argument("--per-entry", type=int, default=12,
                        help="differences printed per entry (--compare)")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare, per_entry=args.per_entry)
    if not args.out:
        parser.error("give --out FILE to record, or --compare A B")
    return record(args)


if __name__ == "__main__":
    sys.exit(main())
