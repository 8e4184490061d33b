"""The bounded session-scoped store (``rcp_agentic/bounded.py``): one byte budget shared by
several stores, least-recently-used eviction across them, count and TTL bounds — checked
against a plain reference model under random interleavings (hypothesis), and its users'
size estimates against tracemalloc."""

from __future__ import annotations

import sys
import threading
import tracemalloc
from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from rcp_agentic.bounded import BOOKKEEPING, BoundedStore, ByteBudget
from rcp_agentic.graph.communities.drift import DriftState, Frontiers, drift_bytes
from rcp_agentic.graph.memory import SessionMemory
from rcp_agentic.sessions import Candidate, SessionStore


class Blob:
    """A value whose size the test chooses."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def blob_size(_key: str, value: Blob) -> int:
    return value.nbytes


class Model:
    """The reference: one global LRU order of (store, key) -> (size, last use)."""

    def __init__(self, max_bytes: int, max_entries: list[int], ttl: float) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.ttl = ttl
        self.order: OrderedDict[tuple[int, str], tuple[int, float]] = OrderedDict()

    def expire(self, store: int, now: float) -> None:
        for slot, (_n, used) in list(self.order.items()):
            if slot[0] == store and now - used > self.ttl:
                del self.order[slot]

    def used(self) -> int:
        return sum(n for n, _u in self.order.values())

    def put(self, store: int, key: str, nbytes: int, now: float) -> None:
        self.expire(store, now)
        self.order.pop((store, key), None)
        if nbytes + BOOKKEEPING > self.max_bytes:  # refused, nothing else evicted
            return
        self.order[(store, key)] = (nbytes + BOOKKEEPING, now)
        mine = [s for s in self.order if s[0] == store]
        for slot in mine[:max(0, len(mine) - self.max_entries[store])]:
            del self.order[slot]
        while self.used() > self.max_bytes:
            self.order.popitem(last=False)

    def get(self, store: int, key: str, now: float) -> bool:
        self.expire(store, now)
        if (store, key) not in self.order:
            return False
        n, _u = self.order.pop((store, key))
        self.order[(store, key)] = (n, now)
        return True


op = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 2), st.integers(0, 7), st.integers(0, 14_000)),
    st.tuples(st.just("get"), st.integers(0, 2), st.integers(0, 7), st.just(0)),
    st.tuples(st.just("forget"), st.integers(0, 2), st.integers(0, 7), st.just(0)),
    st.tuples(st.just("tick"), st.just(0), st.just(0), st.integers(0, 40)),
)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(op, max_size=80), max_bytes=st.integers(500, 12_000),
       caps=st.lists(st.integers(1, 5), min_size=3, max_size=3))
def test_random_interleavings_stay_in_budget_and_follow_lru_and_ttl(
        ops: list[tuple[str, int, int, int]], max_bytes: int, caps: list[int]) -> None:
    now = [0.0]
    budget = ByteBudget(max_bytes)
    stores = [BoundedStore(blob_size, budget=budget, max_entries=cap, ttl_seconds=30,
                           clock=lambda: now[0]) for cap in caps]
    model = Model(max_bytes, caps, 30)
    for name, s, k, n in ops:
        key = f"s{k}"
        if name == "put":
            kept = stores[s].put(key, Blob(n))
            model.put(s, key, n, now[0])
            assert kept == ((s, key) in model.order)
        elif name == "get":
            got = stores[s].get(key)
            assert (got is not None) == model.get(s, key, now[0])
        elif name == "forget":
            model.expire(s, now[0])
            stores[s]._expire()  # forget does not sweep: compare after the same sweep
            assert stores[s].forget(key) == (model.order.pop((s, key), None) is not None)
        else:
            now[0] += n
        assert budget.used <= max_bytes
        # Same entries, same global order, same bytes as the model.
        assert list(budget._order) == [(stores[i].serial, key) for i, key in model.order]
        assert budget.used == model.used() == sum(x.nbytes for x in stores)
    for i, store in enumerate(stores):
        model.expire(i, now[0])
        assert len(store) == sum(1 for slot in model.order if slot[0] == i)


def test_an_entry_larger_than_the_budget_is_refused_and_the_rest_kept() -> None:
    budget = ByteBudget(10_000)
    a = BoundedStore(blob_size, budget=budget)
    b = BoundedStore(blob_size, budget=budget)
    assert a.put("x", Blob(1000)) and b.put("y", Blob(1000))
    assert not b.put("huge", Blob(20_000))
    assert "huge" not in b and a.get("x") is not None and b.get("y") is not None
    assert budget.used == 2 * (1000 + BOOKKEEPING)


def test_eviction_is_lru_across_stores() -> None:
    budget = ByteBudget(3 * (1000 + BOOKKEEPING))
    a = BoundedStore(blob_size, budget=budget)
    b = BoundedStore(blob_size, budget=budget)
    a.put("1", Blob(1000))
    b.put("2", Blob(1000))
    a.put("3", Blob(1000))
    assert a.get("1") is not None  # now "2" (in b) is the least recently used
    b.put("4", Blob(1000))
    assert "2" not in b and "1" in a and "3" in a and "4" in b
    assert budget.evictions == 1 and b.evictions == 1 and a.evictions == 0


def test_update_changes_in_place_and_is_charged_even_when_it_fails() -> None:
    budget = ByteBudget(1 << 20)
    store: BoundedStore[list[str]] = BoundedStore(
        lambda key, v: sys.getsizeof(key) + sum(sys.getsizeof(x) for x in v), budget=budget)
    assert store.update("s", lambda v: v.append("a" * 100) or len(v), list) == 1

    def fail(v: list[str]) -> None:
        v.append("b" * 1000)
        raise RuntimeError("half-way")

    try:
        store.update("s", fail, list)
    except RuntimeError:
        pass
    assert store.nbytes == budget.used >= 1100 + BOOKKEEPING
    assert store.peek("s", lambda v: v) == ["a" * 100, "b" * 1000]


def test_threads_never_pass_the_budget() -> None:
    budget = ByteBudget(50_000)
    stores = [BoundedStore(blob_size, budget=budget) for _ in range(3)]
    errors: list[str] = []

    def work(t: int) -> None:
        for i in range(2000):
            stores[(t + i) % 3].put(f"{t}-{i % 50}", Blob((i * 37) % 4000))
            if budget.used > 50_000:
                errors.append(f"over budget: {budget.used}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert budget.used == sum(s.nbytes for s in stores) <= 50_000


# --- the three kinds on one budget ------------------------------------------------------------

def test_the_three_kinds_share_one_budget() -> None:
    budget = ByteBudget(200_000)
    sessions = SessionStore(budget=budget)
    memory = SessionMemory(budget=budget)
    frontiers = Frontiers(budget=budget)
    query = "é" * 16_000
    for n in range(100):
        sid = f"s{n:03d}"
        sessions.record(sid, [Candidate(f"doc:d{n}#c{i}", "chunk", f"d{n}", None, None)
                              for i in range(10)])
        memory.add(sid, {f"entity {n} {i}": 1.0 for i in range(50)})
        frontiers.put(sid, DriftState(query, 0, "", pending=["f" * 300] * 5, asked=[query]))
        assert budget.used <= 200_000
    assert budget.used == sessions.nbytes + memory.nbytes + frontiers.nbytes
    assert budget.evictions > 0
    # The newest session is whole in each kind; the oldest went from each.
    assert sessions.seen_count("s099") == 10 and len(memory.get("s099")) == 50
    assert frontiers.get("s099") is not None
    assert sessions.seen_count("s000") == 0 and memory.get("s000") == {}
    assert frontiers.get("s000") is None


def test_a_drift_state_is_bounded_and_says_what_it_forgot() -> None:
    frontiers = Frontiers()
    state = DriftState("q", 0, "", asked=[f"asked {i}" for i in range(100)],
                       primed=[f"community:{i}" for i in range(70)])
    notes = frontiers.put("s", state)
    kept = frontiers.get("s")
    assert kept is not None and len(kept.asked) == 64 and kept.asked[0] == "asked 36"
    assert kept.forgotten == 36 and len(kept.primed) == 64 and kept.primed[0] == "community:6"
    assert any("forgot its 36 oldest run queries" in n for n in notes)
    assert any("forgot its 6 oldest primer communities" in n for n in notes)
    kept.pending.append("changed outside")  # a copy: the kept state is not changed
    again = frontiers.get("s")
    assert again is not None and again.pending == []


def test_size_estimates_are_not_below_what_tracemalloc_sees() -> None:
    """The charged bytes of each kind are an upper estimate of the memory really held."""
    query = "ü" * 16_000
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        frontiers = Frontiers(max_sessions=10**6)
        for n in range(200):
            # Fresh strings per state, as drift makes them.
            q = (query + str(n))[:16_000]
            frontiers.put(f"sess-{n}", DriftState(q, 1, "", pending=[f"{n} " + "f" * 290] * 5,
                                                  asked=[q, f"{n}x"], primed=[f"c{n}"] * 9))
        held = tracemalloc.get_traced_memory()[0] - base
        assert held <= frontiers.nbytes, (held, frontiers.nbytes)
        base = tracemalloc.get_traced_memory()[0]
        memory = SessionMemory(max_sessions=10**6)
        for n in range(200):
            memory.add(f"sess-{n}", {f"entity {n}-{i}": 1.0 for i in range(256)})
        held = tracemalloc.get_traced_memory()[0] - base
        assert held <= memory.nbytes, (held, memory.nbytes)
    finally:
        tracemalloc.stop()
    one = DriftState(query, 0, "")
    assert drift_bytes("s", one) >= sys.getsizeof(query)
