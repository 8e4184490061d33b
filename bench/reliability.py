"""Reliability under faults: writers SIGKILLed mid-write, and a Chroma server killed, stopped or
restarted empty under a live engine. Counts what must always be 0 and how long recovery takes.

    python bench/reliability.py [--kills 2] [--seed 0] [--hold 3] [--chroma-timeout 2]
                                [--out bench/results/reliability.txt]

Part 1, SIGKILL: a writer process is SIGKILLed at a random point (after a random number
of acknowledged calls plus a random delay) during ingest (``tests/ingest_worker.py``, the
durability test's worker: new documents and upserts), update (re-adding existing ids
with new texts) or delete, with embedded Chroma and with a `chroma run` server. The
engine is then reopened (Chroma-backed dense recall forced with ``dense_exact_max=0``)
and checked against what the writer acknowledged.

Part 2, Chroma faults: an in-process engine on its own `chroma run` server keeps
ingesting (or answering dense queries) while the server is SIGKILLed and restarted on
its directory, SIGSTOPped and SIGCONTed, or SIGKILLed and restarted on an empty
directory; the fault lasts ``--hold`` seconds.

Columns: ``acked`` acknowledged writes (documents) or answered queries; ``lost`` an
acknowledged write not in the reopened engine (a document missing or older than
acknowledged, or an acknowledged delete undone); ``half`` half-visible documents (units
not matching the stored text, units without a document, a call's transaction applied in
part, or an acknowledged document that Chroma-backed dense recall cannot find once
recovered; for queries, an answer that missed an acknowledged document); ``refused``
calls refused for good (a write that raised, or any call still failing after recovery);
``down`` queries answered -32010 (retryable) while the fault lasted; ``recover s``
seconds from the end of the fault (part 1: from reopening the engine right after the
kill) until a Chroma-backed dense query is answered in full. ``lost``, ``half`` and ``refused`` must all be 0.
The real MiniLM embedder runs on short texts; a default run takes about 4 minutes.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import queue
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(TESTS))

from conftest import _heartbeat, free_port, running_server  # noqa: E402

from rcp_agentic import BackendUnavailable, Engine  # noqa: E402
from rcp_agentic.corpus.chunker import chunk_text  # noqa: E402
from rcp_agentic.store.docstore import Docstore  # noqa: E402

_spec = importlib.util.spec_from_file_location("rcp_agentic_bench_ingest_worker",
                                               TESTS / "ingest_worker.py")
assert _spec is not None and _spec.loader is not None
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)

RESULTS = REPO / "bench" / "results" / "reliability.txt"
_VERSION = re.compile(r"^Record (\S+) revision (\d+) ")


# --- the writers (part 1) ----------------------------------------------------------------


def update_plan(seed: int, ids: list[str],
                calls: int = worker.CALLS) -> list[list[tuple[str, int]]]:
    """Calls re-adding existing ids (distinct within a call) with versions above any stored."""
    rng = random.Random(seed)
    versions = {i: 100 for i in ids}
    out = []
    for _ in range(calls):
        call = []
        for doc_id in rng.sample(ids, min(worker.DOCS_PER_CALL, len(ids))):
            versions[doc_id] += 1
            call.append((doc_id, versions[doc_id]))
        out.append(call)
    return out


def delete_plan(seed: int, ids: list[str]) -> list[list[str]]:
    """Calls deleting 1–3 ids each until every id is gone."""
    rng = random.Random(seed)
    left = sorted(ids)
    rng.shuffle(left)
    out = []
    while left:
        n = rng.randint(1, 3)
        out.append(left[:n])
        left = left[n:]
    return out


def child(op: str, engine_dir: str, seed: int) -> None:
    """A writer process (``--child``): report each acknowledged call on one stdout line."""
    engine = Engine(engine_dir, torch_threads=1, **worker.ENGINE_OPTIONS)
    ids = engine.store.document_ids()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    if op == "update":
        for call in update_plan(seed, ids):
            engine.add_documents([{"id": d, "text": worker.doc_text(d, v)} for d, v in call])
            sys.stdout.write("".join(f"committed {d} {v}\n" for d, v in call))
            sys.stdout.flush()
    else:
        for doomed in delete_plan(seed, ids):
            engine.delete_documents(doomed)
            sys.stdout.write(f"deleted {' '.join(doomed)}\n")
            sys.stdout.flush()
    sys.stdout.write("done\n")
    sys.stdout.flush()
    engine.close()


def child_env(chroma_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCP_AGENTIC_")}
    env["TOKENIZERS_PARALLELISM"] = "false"
    if chroma_url:
        env["RCP_AGENTIC_CHROMA_URL"] = chroma_url
    return env


def run_and_kill(cmd: list[str], env: dict[str, str], kill_after: int, delay: float,
                 log: Path, timeout: float = 180.0) -> tuple[list[str], bool, float]:
    """Run a writer; SIGKILL it ``delay`` s after its ``kill_after``-th acknowledgement line.

    Returns (acknowledgement lines, whether it was killed, monotonic time of the kill).
    """
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                cwd=str(REPO))
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        out: list[str] = []
        deadline = time.monotonic() + timeout
        killed_at = 0.0
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    raise RuntimeError(f"writer hung: {out[-3:]}") from None
                if line is None:
                    break
                out.append(line)
                acks = len(out) - 1
                if not killed_at and out[0] == "ready" and acks >= kill_after:
                    time.sleep(delay)
                    proc.send_signal(signal.SIGKILL)
                    killed_at = time.monotonic()
        finally:
            if proc.poll() is None and not killed_at:
                proc.kill()
            proc.wait(timeout=30)
            reader.join(timeout=30)
    if not out or out[0] != "ready":
        raise RuntimeError(f"writer did not start: {log.read_text(errors='replace')[-2000:]}")
    return [x for x in out[1:] if x != "done"], "done" not in out, killed_at


# --- checks ------------------------------------------------------------------------------


def stored_versions(eng: Engine) -> dict[str, int]:
    """Live document id → the revision its stored text carries (worker texts)."""
    out = {}
    for doc_id, text in eng.store.query("SELECT id, text FROM documents WHERE v_to IS NULL"):
        m = _VERSION.match(text)
        out[doc_id] = int(m.group(2)) if m else -1
    return out


def broken_documents(eng: Engine) -> int:
    """Documents whose live units do not match their stored text, plus orphan units."""
    cfg = eng.config
    bad = int(eng.store.query(
        "SELECT COUNT(DISTINCT doc_id) FROM units WHERE v_to IS NULL AND doc_id NOT IN"
        " (SELECT id FROM documents WHERE v_to IS NULL)")[0][0])
    for doc_id, text in eng.store.query("SELECT id, text FROM documents WHERE v_to IS NULL"):
        rows = eng.store.query("SELECT uid, unit, text FROM units WHERE doc_id = ? AND"
                               " v_to IS NULL ORDER BY unit, idx", (doc_id,))
        chunks = [r for r in rows if r[1] == "chunk"]
        whole = [r for r in rows if r[1] == "document"]
        expected = chunk_text(text, cfg.chunk_size, cfg.chunk_overlap)
        ok = ([r[2] for r in chunks] == [c.text for c in expected]
              and [r[0] for r in chunks] == [f"doc:{doc_id}#c{i}" for i in range(len(expected))]
              and len(whole) == 1 and whole[0][2] == text)
        bad += not ok
    return bad


def chroma_gap(eng: Engine) -> int:
    """Rows Chroma has too many or too few against SQLite, plus queued operations."""
    gap = len(eng.store.outbox())
    for unit, level in eng.store.stored_kinds():
        truth = set(eng.store.rowids(unit, level))
        have = eng.chroma.all_ids(unit, level)
        gap += len(truth ^ have)
    return gap


def dense_misses(eng: Engine, ids: list[str], limit: int = 25) -> int:
    """Acknowledged live documents (a sample) Chroma-backed dense recall does not rank first."""
    texts = dict(eng.store.query("SELECT id, text FROM documents WHERE v_to IS NULL"))
    misses = 0
    for doc_id in ids[:limit]:
        hits = eng.retrieve(texts[doc_id], k=1, mode="dense", unit="document").hits
        misses += not hits or hits[0].meta["doc_id"] != doc_id
    return misses


def still_refused(eng: Engine) -> int:
    """After recovery: a dense and a sparse query, an add and a delete; how many fail."""
    failed = 0
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    calls = [lambda: eng.add_documents([{"id": probe, "text": worker.doc_text(probe, 1)}]),
             lambda: eng.retrieve(worker.doc_text(probe, 1), k=1, mode="dense"),
             lambda: eng.retrieve(f"Record {probe}", k=1, mode="sparse"),
             lambda: eng.delete_documents([probe])]
    for call in calls:
        try:
            call()
        except Exception:  # noqa: BLE001 - counted
            failed += 1
    return failed


def first_dense_answer(eng: Engine, text: str, want: str, limit: float = 60.0) -> float | None:
    """Seconds until a Chroma-backed dense query ranks ``want`` first (None: not within limit)."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        try:
            hits = eng.retrieve(text, k=1, mode="dense", unit="document").hits
            if hits and hits[0].meta["doc_id"] == want:
                return time.monotonic() - start
        except BackendUnavailable as exc:
            time.sleep(min(exc.data.get("retryAfterMs", 500) / 1000.0, 5.0))
            continue
        time.sleep(0.1)
    return None


@dataclass
class Row:
    """One scenario's totals over its trials."""

    name: str
    trials: int = 0
    acked: int = 0
    lost: int = 0
    half: int = 0
    refused: int = 0
    down: int = 0
    recover: list[float] = field(default_factory=list)

    def line(self) -> str:
        rec = (f"{statistics.median(self.recover):6.2f} / {max(self.recover):6.2f}"
               if self.recover else "     -")
        return (f"{self.name:<32} {self.trials:>6} {self.acked:>6} {self.lost:>5} {self.half:>5} "
                f"{self.refused:>8} {self.down:>5}   {rec}")


HEADER = (f"{'scenario':<32} {'trials':>6} {'acked':>6} {'lost':>5} {'half':>5} {'refused':>8} "
          f"{'down':>5}   recover s (median / max)")


# --- part 1: SIGKILL ---------------------------------------------------------------------


@contextmanager
def chroma_server(data: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A `chroma run` server on loopback (SIGCONTed before it is stopped)."""
    exe = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
    url = f"http://127.0.0.1:{port}"
    with running_server([exe, "run", "--path", str(data), "--host", "127.0.0.1", "--port",
                         str(port)], lambda: _heartbeat(url), timeout=90) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)


def prefill(path: Path, embedder: Any, url: str | None) -> None:
    """An engine holding the ingest worker's full plan (seed 0), built in-process."""
    with Engine(path, embedder=embedder, chroma_url=url, **worker.ENGINE_OPTIONS) as eng:
        latest: dict[str, int] = {}
        for call in worker.plan(0):
            latest.update(call)
        eng.add_documents([{"id": d, "text": worker.doc_text(d, v)} for d, v in latest.items()])


@dataclass
class KillTrial:
    """One writer to SIGKILL: its command, kill point and what the engine held before."""

    op: str
    url: str | None
    seed: int
    work: Path
    cmd: list[str]
    kill_after: int
    delay: float
    before: dict[str, int]
    acks: list[str] = field(default_factory=list)
    error: BaseException | None = None

    @property
    def engine_dir(self) -> Path:
        return self.work / "engine"


def prepare_trial(op: str, url: str | None, seed: int, work: Path, template: Path) -> KillTrial:
    rng = random.Random(seed)
    engine_dir = work / "engine"
    before: dict[str, int] = {}
    if op == "ingest":
        cmd = [sys.executable, str(TESTS / "ingest_worker.py"), str(engine_dir), str(seed)]
        kill_after = rng.randint(0, 60)
    else:
        shutil.copytree(template, engine_dir)
        # Read with SQLite alone: an engine opened here would keep chromadb's in-memory copy
        # of an embedded store that the writer then changes (see the report on Engine.close).
        store = Docstore(engine_dir / "engine.db")
        try:
            if url:  # a copy must not share the template's Chroma collections
                store.set_info("engine_id", uuid.uuid4().hex[:12])
            for doc_id, text in store.query("SELECT id, text FROM documents WHERE v_to IS NULL"):
                m = _VERSION.match(text)
                before[doc_id] = int(m.group(2)) if m else -1
        finally:
            store.close()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", op, str(engine_dir),
               str(seed)]
        kill_after = rng.randint(0, 60) if op == "update" else rng.randint(0, 20)
    return KillTrial(op, url, seed, work, cmd, kill_after, rng.uniform(0.0, 0.3), before)


def run_trial(trial: KillTrial) -> None:
    """Run the writer and SIGKILL it (in a thread: the trials of a row run at once)."""
    try:
        acks, killed, _at = run_and_kill(trial.cmd, child_env(trial.url), trial.kill_after,
                                         trial.delay, trial.work / "writer.log")
        if not killed:
            raise RuntimeError(f"{trial.op} writer finished before the kill")
        trial.acks = acks
    except BaseException as exc:  # noqa: BLE001 - re-raised by check_trial
        trial.error = exc


def check_trial(trial: KillTrial, embedder: Any) -> Row:
    """Reopen the engine of a SIGKILLed writer and check it against the acknowledgements."""
    if trial.error is not None:
        raise trial.error
    op, acks, before = trial.op, trial.acks, trial.before
    row = Row(op, trials=1)
    opened = time.monotonic()
    with Engine(trial.engine_dir, embedder=embedder, chroma_url=trial.url,
                dense_exact_max=0) as eng:
        versions = stored_versions(eng)
        if versions:
            probe = max(versions)
            took = first_dense_answer(eng, worker.doc_text(probe, versions[probe]), probe)
            if took is None:
                row.refused += 1
            else:
                row.recover.append(time.monotonic() - opened)
        row.half += broken_documents(eng)
        if op == "delete":
            plan = delete_plan(trial.seed, sorted(before))
            gone = {d for line in acks for d in line.split()[1:]}
            row.acked = len(gone)
            inflight = set(plan[len(acks)]) if len(acks) < len(plan) else set()
            row.lost += len(gone & set(versions))
            row.lost += len(set(before) - gone - inflight - set(versions))
            n_in = len(inflight & set(versions))
            row.half += n_in if 0 < n_in < len(inflight) else 0
            live = sorted(set(versions) - inflight)
        else:
            plan = (worker.plan(trial.seed) if op == "ingest"
                    else update_plan(trial.seed, sorted(before)))
            acked: dict[str, int] = {}
            for line in acks:
                _w, doc_id, v = line.split()
                acked[doc_id] = int(v)
            row.acked = len(acks)
            calls_done = len(acks) // worker.DOCS_PER_CALL
            inflight = dict(plan[calls_done]) if calls_done < len(plan) else {}
            row.lost += sum(1 for d, v in acked.items() if versions.get(d, -1) < v)
            if op == "update":
                row.lost += sum(1 for d in before if d not in versions)
            applied = [versions.get(d) == v for d, v in inflight.items()]
            row.half += sum(applied) if any(applied) and not all(applied) else 0
            live = sorted(acked)
        row.half += chroma_gap(eng)
        row.half += dense_misses(eng, live)
        row.refused += still_refused(eng)
    return row


def part_sigkill(kills: int, seed: int, base: Path, embedder: Any) -> list[Row]:
    rows = []
    port = free_port()
    with chroma_server(base / "kill-server", port):
        url = f"http://127.0.0.1:{port}"
        for mode, mode_url in (("embedded", None), ("server", url)):
            template = base / f"template-{mode}"
            prefill(template, embedder, mode_url)
            for op in ("ingest", "update", "delete"):
                trials = []
                for i in range(kills):
                    work = base / f"{mode}-{op}-{i}"
                    work.mkdir()
                    trials.append(prepare_trial(op, mode_url, seed * 1000 + i * 7 + 1, work,
                                                template))
                threads = [threading.Thread(target=run_trial, args=(t,)) for t in trials]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                total = Row(f"SIGKILL {op} ({mode})")
                for trial in trials:
                    got = check_trial(trial, embedder)
                    for name in ("trials", "acked", "lost", "half", "refused"):
                        setattr(total, name, getattr(total, name) + getattr(got, name))
                    total.recover += got.recover
                print(total.line(), flush=True)
                rows.append(total)
    return rows


# --- part 2: Chroma faults ---------------------------------------------------------------


class Fault:
    """A `chroma run` server that can be SIGKILLed, SIGSTOPped and restarted on demand."""

    def __init__(self, base: Path, stack: ExitStack) -> None:
        self.base, self.stack = base, stack
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data = base / "data-0"
        self.proc = stack.enter_context(chroma_server(self.data, self.port))

    def begin(self, kind: str) -> None:
        if kind == "stop":
            os.kill(self.proc.pid, signal.SIGSTOP)
        else:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def end(self, kind: str) -> None:
        if kind == "stop":
            os.kill(self.proc.pid, signal.SIGCONT)
            return
        if kind == "restart-empty":
            self.data = self.base / f"data-{uuid.uuid4().hex[:6]}"
        self.proc = self.stack.enter_context(chroma_server(self.data, self.port))


def fault_trial(kind: str, phase: str, hold: float, timeout: float, base: Path, embedder: Any,
                rng: random.Random) -> Row:
    """An engine ingesting or querying while its server suffers ``kind`` for ``hold`` s."""
    row = Row(f"Chroma {kind} mid-{phase}", trials=1)
    with ExitStack() as stack:
        server = Fault(base, stack)
        eng = stack.enter_context(Engine(base / "engine", embedder=embedder, chroma_url=server.url,
                                         dense_exact_max=0, chroma_timeout_seconds=timeout,
                                         **worker.ENGINE_OPTIONS))
        texts = {f"f{i:03d}": worker.doc_text(f"f{i:03d}", 1) for i in range(20)}
        eng.add_documents([{"id": d, "text": t} for d, t in texts.items()])
        acked: list[str] = list(texts)
        stop = threading.Event()
        counts = {"refused": 0, "down": 0, "stale": 0, "answered": 0, "late": 0}
        recovered_at = [float("inf")]

        def ingest() -> None:
            n = len(texts)
            for _ in range(400):
                if stop.is_set():
                    return
                batch = {f"f{i:03d}": worker.doc_text(f"f{i:03d}", 1) for i in range(n, n + 3)}
                n += 3
                try:
                    eng.add_documents([{"id": d, "text": t} for d, t in batch.items()])
                except Exception:  # noqa: BLE001 - a refused write, counted
                    counts["refused"] += 1
                    continue
                texts.update(batch)
                acked.extend(batch)
                time.sleep(0.05)

        def query() -> None:
            for _ in range(5000):
                if stop.is_set():
                    return
                doc_id = rng.choice(list(acked))
                asked = time.monotonic()
                try:
                    hits = eng.retrieve(texts[doc_id], k=1, mode="dense", unit="document").hits
                except BackendUnavailable as exc:
                    counts["down"] += 1
                    counts["late"] += asked > recovered_at[0]  # refused after recovery
                    time.sleep(min(exc.data.get("retryAfterMs", 500) / 1000.0, 5.0))
                    continue
                except Exception:  # noqa: BLE001 - a crash, counted as refused
                    counts["refused"] += 1
                    continue
                counts["answered"] += 1
                counts["stale"] += not hits or hits[0].meta["doc_id"] != doc_id
                time.sleep(0.02)

        runner = threading.Thread(target=ingest if phase == "ingest" else query, daemon=True)
        runner.start()
        time.sleep(rng.uniform(0.5, 1.5))
        server.begin(kind)
        if phase == "query":  # writes while the server is down must show up after recovery
            extra = {f"w{i:03d}": worker.doc_text(f"w{i:03d}", 1) for i in range(3)}
            try:
                eng.add_documents([{"id": d, "text": t} for d, t in extra.items()])
                texts.update(extra)
                acked.extend(extra)
            except Exception:  # noqa: BLE001 - counted
                counts["refused"] += 1
        time.sleep(hold)
        server.end(kind)
        ended = time.monotonic()
        newest = acked[-1]
        took = first_dense_answer(eng, texts[newest], newest)
        if took is None:
            row.refused += 1
        else:
            row.recover.append(time.monotonic() - ended)
        recovered_at[0] = time.monotonic()
        time.sleep(1.0)
        stop.set()
        runner.join(timeout=60)
        row.refused += counts["refused"] + counts["late"]
        row.down = counts["down"]
        row.half += counts["stale"] if phase == "query" else 0
        stored = set(eng.store.document_ids())
        row.lost += len(set(acked) - stored)
        row.half += broken_documents(eng) + chroma_gap(eng) + dense_misses(eng, acked[::-1])
        row.acked = len(acked) if phase == "ingest" else counts["answered"]
        row.refused += still_refused(eng)
    return row


def part_faults(hold: float, timeout: float, seed: int, base: Path, embedder: Any) -> list[Row]:
    rng = random.Random(seed)
    rows = []
    for kind in ("kill", "stop", "restart-empty"):
        for phase in ("ingest", "query"):
            work = base / f"{kind}-{phase}"
            work.mkdir()
            row = fault_trial(kind, phase, hold, timeout, work, embedder, rng)
            print(row.line(), flush=True)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=2, help="SIGKILLs per writer and mode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hold", type=float, default=3.0, help="seconds each Chroma fault lasts")
    parser.add_argument("--chroma-timeout", type=float, default=2.0,
                        help="chroma_timeout_seconds of the engines in part 2")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", nargs=3, metavar=("OP", "ENGINE_DIR", "SEED"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        op, engine_dir, seed = args.child
        child(op, engine_dir, int(seed))
        return

    from rcp_agentic.models.embedder import SentenceTransformerEmbedder

    logging.getLogger("rcp_agentic").setLevel(logging.ERROR)  # the table is the output
    embedder = SentenceTransformerEmbedder()
    start = time.monotonic()
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="rcp-reliability-") as tmp:
        base = Path(tmp)
        (base / "kills").mkdir()
        (base / "faults").mkdir()
        rows = part_sigkill(args.kills, args.seed, base / "kills", embedder)
        rows += part_faults(args.hold, args.chroma_timeout, args.seed, base / "faults", embedder)
    total = time.monotonic() - start
    bad = sum(r.lost + r.half + r.refused for r in rows)
    summary = (f"{sum(r.trials for r in rows)} trials, {sum(r.lost for r in rows)} lost, "
               f"{sum(r.half for r in rows)} half-visible, {sum(r.refused for r in rows)} "
               f"refused for good; {total:.0f} s (--kills {args.kills} --hold {args.hold:g} "
               f"--chroma-timeout {args.chroma_timeout:g} --seed {args.seed})")
    print(summary)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join([HEADER] + [r.line() for r in rows] + [summary]) + "\n",
                        "utf-8")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
