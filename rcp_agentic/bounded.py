"""One bounded, expiring, thread-safe LRU store for session-scoped state, and the byte budget
several such stores share.

An engine holds three kinds of state per client session: what retrieve has returned
(:mod:`.sessions`), a session's graph memory and a DRIFT frontier. Each is a
:class:`SessionKeyed` over a :class:`BoundedStore`; all three draw on one
:class:`ByteBudget` (``session_max_bytes``). Every entry is charged its store's
``size(key, value)`` (an honest upper estimate) plus :data:`BOOKKEEPING`; a charge that
would pass the budget evicts the least recently used entries first, whatever their store,
and an entry larger than the whole budget is not kept. Each store also keeps at most
``max_entries`` entries and drops one ``ttl_seconds`` after its last use. The stores of one
budget share its lock, and values change only under it (:meth:`BoundedStore.update`,
:meth:`~BoundedStore.put`), so what is charged is what is held. Why one order across the
stores: ``docs/internals.md``, "Session state and its byte budget".
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .config import EngineConfig

V = TypeVar("V")
R = TypeVar("R")

# Bytes charged per entry for the stores' own containers, on top of ``size(key, value)``:
# the store's OrderedDict node and _Entry object, the budget's OrderedDict node and its
# (store, key) tuple. tracemalloc on CPython 3.11 measured ~330 B per entry; rounded up.
BOOKKEEPING = 384
DEFAULT_MAX_BYTES: int = EngineConfig.model_fields["session_max_bytes"].default


class _Entry(Generic[V]):
    __slots__ = ("value", "nbytes", "used")

    def __init__(self, value: V, nbytes: int, used: float) -> None:
        self.value = value
        self.nbytes = nbytes
        self.used = used


class ByteBudget:
    """The bytes all the stores attached to it may hold together (``max_bytes``), their
    entries in one least-recently-used order, and the lock they share."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self.lock = threading.RLock()
        self._order: OrderedDict[tuple[int, str], BoundedStore[Any]] = OrderedDict()
        self._used = 0
        self._serials = itertools.count()
        self.evictions = 0  # entries dropped for room, across the stores

    @property
    def used(self) -> int:
        """Bytes charged now, across the stores (never above ``max_bytes``)."""
        with self.lock:
            return self._used

    @property
    def entries(self) -> int:
        """Entries held now, across the stores."""
        with self.lock:
            return len(self._order)

    # --- called by the stores, lock held --------------------------------------------------

    def _serial(self) -> int:
        return next(self._serials)

    def _touch(self, store: BoundedStore[Any], key: str) -> None:
        slot = (store.serial, key)
        if slot in self._order:
            self._order.move_to_end(slot)
        else:
            self._order[slot] = store

    def _charge(self, delta: int) -> None:
        self._used += delta

    def _release(self, store: BoundedStore[Any], key: str) -> None:
        self._order.pop((store.serial, key), None)

    def _fit(self) -> None:
        """Evict least recently used entries until the total fits in ``max_bytes`` (the entry
        just written, the most recent, is never larger than ``max_bytes`` here)."""
        while self._used > self.max_bytes and self._order:
            (_serial, key), store = next(iter(self._order.items()))
            store._drop(key)
            store.evictions += 1
            self.evictions += 1


class BoundedStore(Generic[V]):
    """Values by session id: bounded by the bytes of a shared :class:`ByteBudget`, by count
    (``max_entries``) and by time (``ttl_seconds`` after last use); thread-safe.

    ``size(key, value)``: the bytes the entry holds (key included; an upper estimate). A
    store made without a ``budget`` has one of its own of ``max_bytes``.
    """

    def __init__(self, size: Callable[[str, V], int], *, budget: ByteBudget | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, max_entries: int = 10_000,
                 ttl_seconds: float = 3600,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = budget if budget is not None else ByteBudget(max_bytes)
        self.max_entries = max_entries
        self.ttl_seconds = ttl_seconds
        self.serial = self.budget._serial()
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[str, _Entry[V]] = OrderedDict()  # least recent first
        self._bytes = 0
        self.evictions = 0  # entries dropped for room (bytes or count), not for age

    @property
    def lock(self) -> threading.RLock:
        return self.budget.lock

    @property
    def nbytes(self) -> int:
        """Bytes this store's entries are charged now."""
        with self.lock:
            return self._bytes

    def __len__(self) -> int:
        with self.lock:
            self._expire()
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        with self.lock:
            self._expire()
            return key in self._entries

    # --- reads ----------------------------------------------------------------------------

    def get(self, key: str) -> V | None:
        """The value (None: unknown or expired), now the most recently used. Change it only
        through :meth:`update`: what is charged must stay what is held."""
        with self.lock:
            self._expire()
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._use(key, entry)
            return entry.value

    def peek(self, key: str, read: Callable[[V | None], R]) -> R:
        """``read(value)`` (None: unknown or expired) under the lock, not counted as a use."""
        with self.lock:
            self._expire()
            entry = self._entries.get(key)
            return read(None if entry is None else entry.value)

    # --- writes ---------------------------------------------------------------------------

    def update(self, key: str, change: Callable[[V], R], new: Callable[[], V]) -> R:
        """``change(value)`` on the entry (made by ``new()`` when there is none), under the
        lock; then the entry is charged its new size and is the most recently used, and
        older entries are evicted for room. Returns what ``change`` returns."""
        with self.lock:
            self._expire()
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(new(), 0, 0.0)
            try:
                return change(entry.value)
            finally:  # charged even when change fails half-way
                self._settle(key, entry)

    def put(self, key: str, value: V) -> bool:
        """Keep ``value`` as the entry of ``key`` (the most recently used); returns whether it
        was kept (not when it alone is larger than the whole budget)."""
        with self.lock:
            self._expire()
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(value, 0, 0.0)
            entry.value = value
            self._settle(key, entry)
            return key in self._entries

    def forget(self, key: str) -> bool:
        """Drop an entry; returns whether it existed."""
        with self.lock:
            return self._drop(key)

    # --- inside the lock ------------------------------------------------------------------

    def _use(self, key: str, entry: _Entry[V]) -> None:
        entry.used = self._clock()
        self._entries.move_to_end(key)
        self.budget._touch(self, key)

    def _settle(self, key: str, entry: _Entry[V]) -> None:
        nbytes = self._size(key, entry.value) + BOOKKEEPING
        self.budget._charge(nbytes - entry.nbytes)
        self._bytes += nbytes - entry.nbytes
        entry.nbytes = nbytes
        self._use(key, entry)
        if nbytes > self.budget.max_bytes:  # refused alone: it would evict all the others
            self._drop(key)
            self.evictions += 1
            self.budget.evictions += 1
            return
        while len(self._entries) > self.max_entries:
            self._drop(next(iter(self._entries)))
            self.evictions += 1
            self.budget.evictions += 1
        self.budget._fit()

    def _drop(self, key: str) -> bool:
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        self._bytes -= entry.nbytes
        self.budget._charge(-entry.nbytes)
        self.budget._release(self, key)
        return True

    def _expire(self) -> None:
        now = self._clock()
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if now - entry.used <= self.ttl_seconds:
                break
            self._drop(key)


class SessionKeyed(Generic[V]):
    """Base of the engine's per-session stores (sessions, graph memory, DRIFT frontiers): one
    :class:`BoundedStore` of ``V`` by session id, its size and count seen from outside, and
    a session forgotten on request. Subclasses add only the reads and writes of their ``V``.

    ``size(session_id, value)``: the bytes an entry holds (see :class:`BoundedStore`).
    """

    def __init__(self, size: Callable[[str, V], int], *, max_sessions: int = 10_000,
                 ttl_seconds: float = 3600, budget: ByteBudget | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._store: BoundedStore[V] = BoundedStore(
            size, budget=budget, max_bytes=max_bytes, max_entries=max_sessions,
            ttl_seconds=ttl_seconds, clock=clock)

    @property
    def nbytes(self) -> int:
        """Bytes this store's sessions are charged now (within the shared budget)."""
        return self._store.nbytes

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, session_id: object) -> bool:
        """Whether ``session_id`` has an entry (not expired or evicted), even an empty one."""
        return session_id in self._store

    def forget(self, session_id: str) -> bool:
        """Drop a session's entry; returns whether it existed."""
        return self._store.forget(session_id)
