"""Chroma kept in step with SQLite: the embedded recall backend's copy of the vectors.

Every write queues its Chroma operations in the docstore's outbox, in the same
transaction as the rows (``writes.py``). After each commit :meth:`ChromaSync.after_commit`
replays the outbox, best effort: it never raises, so a write committed in SQLite is
acknowledged even while Chroma is down, and its operations wait in the outbox for the
next write, the next Chroma-backed query or :meth:`ChromaSync.sync_now`. After an open,
an outage, or another process's commit (an embedded Chroma keeps its index in memory,
blind to other processes), every id is compared with SQLite and the difference repaired.
A failed call starts a retry window (:class:`.outage.OutageWindow`) within which Chroma
calls fail at once with ``retryAfterMs``.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from ..errors import BackendUnavailable
from .chroma import ChromaVectors, CollectionLost
from .docstore import Docstore
from .outage import OutageWindow

log = logging.getLogger(__name__)


class ChromaSync:
    """Brings one engine's Chroma up to date from its docstore (module doc). Only the holder
    of its lock changes Chroma; a row committed or deleted meanwhile is also in the outbox,
    replayed on the next sync, so no write lock is needed."""

    def __init__(self, store: Docstore, chroma: ChromaVectors, *, timeout: float) -> None:
        self.store = store
        self.chroma = chroma
        self.timeout = timeout
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._stale = True  # compare every id with SQLite before trusting Chroma
        self._outage = OutageWindow()
        # Another process committed: an embedded Chroma's in-memory HNSW must be reloaded.
        self._reload = False
        store.connection.follow(self)

    # --- the docstore's follower: another process's commit ----------------------------------

    def catch_up(self) -> None:
        self._reload = True

    def begin(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    # --- replay and repair ------------------------------------------------------------------

    def _apply_outbox(self) -> None:
        ops = self.store.outbox()
        if not ops:
            return
        deleted = {(o.unit, o.level, o.urow) for o in ops if o.op == "del"}
        added = [(o.unit, o.level, o.urow) for o in ops if o.op == "add"
                 and (o.unit, o.level, o.urow) not in deleted]
        by_kind: dict[tuple[str, int], list[int]] = {}
        for unit, level, row in deleted:
            by_kind.setdefault((unit, level), []).append(row)
        for (unit, level), rows in by_kind.items():
            self.chroma.delete(unit, level, rows)
        by_kind = {}
        for unit, level, row in added:
            by_kind.setdefault((unit, level), []).append(row)
        for (unit, level), rows in by_kind.items():
            self._push_vectors(unit, level, rows)
        self.store.clear_outbox(ops[-1].seq)

    def _push_vectors(self, unit: str, level: int, rows: list[int]) -> None:
        """Copy the SQLite vectors of ``rows`` (those still stored) into Chroma."""
        for i in range(0, len(rows), 1000):
            vecs = self.store.vectors(rows[i:i + 1000])
            present = [r for r in rows[i:i + 1000] if r in vecs]
            if present:
                self.chroma.add(unit, level, present, np.vstack([vecs[r] for r in present]))

    def _reconcile(self) -> None:
        """Replay the outbox, then repair every difference between Chroma and SQLite."""
        self._apply_outbox()
        for unit, level in self.store.stored_kinds():
            truth = set(self.store.rowids(unit, level))
            have = self.chroma.all_ids(unit, level)
            extra, missing = sorted(have - truth), sorted(truth - have)
            if not extra and not missing:
                continue
            log.warning("repairing Chroma %s/l%d: %d extra, %d missing vectors", unit, level,
                        len(extra), len(missing))
            if extra:
                self.chroma.delete(unit, level, extra)
            self._push_vectors(unit, level, missing)

    def _step(self) -> None:
        """One attempt to bring Chroma up to date (lock held): a full comparison after an
        open or an outage (a server may have lost acknowledged writes or restarted empty),
        else the outbox. Collections a restarted server lost are recreated and refilled at
        once. Any other failure marks Chroma stale and opens the retry window."""
        now = time.monotonic()
        if self._reload and self.chroma.url is None:
            # chromadb keeps an embedded collection's index in memory, blind to other
            # processes' writes: reload it and compare every id with SQLite.
            self._reload = False
            self.chroma.close()
            self._stale = True
        if self._outage.open(now):
            raise self._down(now)
        for attempt in (1, 2):
            try:
                if self._stale or self.chroma.lost:
                    self.chroma.lost = False
                    self._reconcile()
                    self._stale = False
                else:
                    self._apply_outbox()
                self._outage.close()
                return
            except BackendUnavailable as exc:
                self._failed(exc, now)
                if attempt == 1 and isinstance(exc, CollectionLost):
                    continue
                raise self._down(time.monotonic()) from exc

    def _failed(self, exc: BackendUnavailable, started: float) -> None:
        """Remember a failed Chroma call: reconcile fully next time, after a retry window."""
        self._stale = True
        self._outage.failed(exc.message, started)
        log.warning("Chroma is behind SQLite (the outbox waits): %s", exc.message)

    def _down(self, now: float) -> BackendUnavailable:
        wait_ms = self._outage.wait_ms(now)
        return BackendUnavailable(
            f"Chroma-backed dense recall is unavailable: {self._outage.error}. Every write is "
            "committed in SQLite (the source of truth) and queued for Chroma; sparse and exact "
            "dense retrieval keep working, and Chroma is brought up to date from SQLite as soon "
            f"as it answers (retry after {wait_ms} ms)", retryable=True, retryAfterMs=wait_ms)

    # --- the recall backend's calls ---------------------------------------------------------

    def sync_now(self) -> None:
        """Replay the outbox and repair every difference now; BackendUnavailable (-32010) if
        Chroma cannot be reached."""
        with self._lock:
            self._stale = True
            self._outage.close()
            self._step()

    def after_commit(self) -> None:
        """After a commit (outside the write lock): bring Chroma up to date, best effort.

        Never raises for Chroma. A hung server holds only the calling thread, at most
        ``timeout`` per request; a commit made while another thread syncs is left to that
        thread (``_wanted``), so writers never queue here.
        """
        self._wanted.set()
        while self._wanted.is_set():
            if not self._lock.acquire(blocking=False):
                return
            try:
                self._wanted.clear()
                self._step()
            except BackendUnavailable:
                return
            finally:
                self._lock.release()

    def query(self, unit: str, level: int, vector: np.ndarray, n: int,
              rowids: list[int] | None) -> tuple[list[int], list[float]]:
        """Chroma-backed dense recall over a Chroma that holds every committed row.

        Syncs first (waiting at most ``timeout`` for a sync already running); while Chroma is
        behind SQLite and cannot catch up this raises BackendUnavailable (-32010,
        ``retryAfterMs``) instead of answering without the rows it misses. Collections lost
        by a server restarted empty are recreated and refilled from SQLite, and the query is
        retried once.
        """
        for attempt in (1, 2):
            if not self._lock.acquire(timeout=self.timeout):
                raise BackendUnavailable(
                    "Chroma-backed dense recall is unavailable: another call is still bringing "
                    f"Chroma up to date after {self.timeout:g} s", retryable=True,
                    retryAfterMs=1000)
            try:
                if attempt == 2:
                    self._outage.close()  # the server answered: refill it now
                self._step()
            finally:
                self._lock.release()
            started = time.monotonic()
            try:
                return self.chroma.query(unit, level, vector, n, rowids)
            except BackendUnavailable as exc:
                self._failed(exc, started)
                if attempt == 1 and isinstance(exc, CollectionLost):
                    continue
                raise self._down(time.monotonic()) from exc
        raise AssertionError("unreachable")
