"""One session byte budget in a real engine: a flood of distinct session ids, each with a
16,000-character query through ``drift`` (frontier + retrieve sessions) and through session
memory (``memory_build(scope="session")`` / ``memory_recall``), stays within
``session_max_bytes``, and the memory really held grows no more than the accounting says
(tracemalloc)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import REPO

from rcp_agentic import Engine

WIKI = REPO / "examples" / "wiki"
BUDGET = 1024 * 1024
SESSIONS = 16


def long_query(n: int) -> str:
    """A legal 16,000-character question, distinct per session, naming wiki entities; its
    astral characters make CPython hold it at 4 bytes a character (~64 KiB)."""
    head = f"Session {n}: where did Oskar Brandvik of Velvet Lanterns grow up? "
    return (head + "Tromsø 🎸 Bergen Midnight Harbor " * 600)[:16_000]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    eng = Engine(tmp_path_factory.mktemp("budget") / "e", embedder=embedder, build_graph=True,
                 community_max_size=3, session_max_bytes=BUDGET)
    eng.index_paths([WIKI])
    eng.wait_for_derived()
    yield eng
    eng.close()


def test_a_flood_of_sessions_stays_in_one_byte_budget(engine: Engine) -> None:
    budget = engine.session_budget
    ops = engine.graph_ops
    assert engine.sessions._store.budget is budget
    assert ops.memory._store.budget is budget and ops.community.frontiers._store.budget is budget
    # Warm the caches a session does not own (indexes, graph view, query vectors).
    engine.graph("drift", query=long_query(-1), k=4)
    ops.memory_recall(long_query(-1), n=3)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for n in range(SESSIONS):
            sid = f"flood-{n:04d}-" + "s" * 200
            text = long_query(n)
            res = engine.graph("drift", query=text, k=4, session_id=sid)
            assert res.hits
            again = engine.graph("drift", query=text, k=4, session_id=sid)  # continues
            assert again.usage and any("continued the session" in x for x in again.usage.notes or [])
            ops.memory_build([{"text": text}], scope="session", session_id=sid)
            ops.memory_recall(text, session_id=sid, n=3)
            assert budget.used <= BUDGET
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    kinds = (engine.sessions.nbytes, ops.memory.nbytes, ops.community.frontiers.nbytes)
    assert budget.used == sum(kinds) and all(kinds)  # all three kinds draw on the one budget
    assert budget.evictions > 0 and budget.used > BUDGET // 2
    # The newest sessions are kept in every kind, the oldest went.
    newest, oldest = f"flood-{SESSIONS - 1:04d}-" + "s" * 200, "flood-0000-" + "s" * 200
    assert ops.community.frontiers.get(newest) is not None and ops.memory.get(newest)
    assert ops.community.frontiers.get(oldest) is None and ops.memory.get(oldest) == {}
    # What is really held grows at most as much as the budget lets the accounting grow (plus
    # the engine's own bounded caches, warmed above: 1 MiB of slack).
    assert held <= BUDGET + 1024 * 1024, (held, budget.used)
