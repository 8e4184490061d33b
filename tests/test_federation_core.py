"""The federation's and the clients' cores are I/O-free: they import no task, future or shell,
and a federated call runs by hand, its steps answered by the test, with no engine at all."""

from __future__ import annotations

import ast
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from rcp_agentic.client.errors import CapabilityMissing, Timeout
from rcp_agentic.client.steps import drive
from rcp_agentic.federation import core, retrieval
from rcp_agentic.federation.core import Call, Connect, FederationCore, Gather, Member, Outcome

ROOT = Path(__file__).resolve().parents[1] / "rcp_agentic"
PURE = ["federation/core.py", "federation/retrieval.py", "federation/graphcalls.py",
        "federation/graphs.py", "federation/fusion.py", "client/core.py", "client/methods.py",
        "client/steps.py", "client/retry.py", "client/gating.py", "client/params.py"]
IO = {"asyncio", "concurrent", "subprocess", "socket", "httpx"}  # a lock is not I/O
SHELLS = {"shells", "fanout", "sync_client", "async_client", "transport_http",
          "transport_stdio", "transport_inprocess"}


@pytest.mark.parametrize("path", PURE)
def test_the_cores_import_no_io_and_no_shell(path: str) -> None:
    imported = set()
    for node in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {node.module or ""} | {f"{node.module}.{a.name}" for a in node.names}
    parts = {p for name in imported for p in name.split(".")}
    assert not parts & IO and not parts & SHELLS, sorted(parts & (IO | SHELLS))


class FakeClient:
    def __init__(self, caps: dict[str, Any], answer: Any) -> None:
        self.capabilities, self.answer = caps, answer


def hit(id_: str, score: float) -> dict[str, Any]:
    return {"id": id_, "score": score, "unit": "chunk", "text": id_}


def run_by_hand(steps: Any, clients: dict[str, FakeClient], late: set[str]) -> Any:
    """Perform a federated call's steps with no I/O: each engine answers at once, except the
    ``late`` ones, which never do (the deadline passes)."""
    asked: list[tuple[str, dict[str, Any]]] = []

    def perform(step: Any) -> Any:
        if isinstance(step, Gather):
            running: dict[Future[Outcome], Member] = {}
            for m, ask in step.asks:
                future: Future[Outcome] = Future()
                if m.id not in late:
                    future.set_result(drive(ask, perform))
                running[future] = m
            return drive(core.collect(running, step), wait)
        if isinstance(step, Connect):
            return clients[step.member.id]
        assert isinstance(step, Call)
        asked.append((step.method, step.params))
        return step.client.answer

    def wait(step: Any) -> tuple[set[Any], set[Any]]:
        done = {f for f in step.pending if f.done()}
        if not done:
            time.sleep(max(0.0, step.seconds))
        return done, step.pending - done

    return drive(steps, perform), asked


def federation(*ids: str, deadline: float = 0.2) -> FederationCore:
    return FederationCore({i: Member(i, object()) for i in ids}, deadline, "rrf", 60, 3, 2,
                          "id", "test-fed", None)


def test_a_federated_retrieve_runs_without_io() -> None:
    caps: dict[str, Any] = {"retrieve": {}}
    clients = {"a": FakeClient(caps, {"hits": [hit("x", 0.9), hit("y", 0.5)]}),
               "b": FakeClient(caps, {"hits": [hit("y", 0.8)]}),
               "c": FakeClient(caps, {"hits": []})}
    steps = retrieval.retrieve(federation("a", "b", "c"), "q", 2, None, None, None, {})
    result, asked = run_by_hand(steps, clients, late={"c"})
    assert [h.id for h in result.hits] == ["y", "x"]  # y in both lists: RRF puts it first
    assert [m for m, _p in asked] == ["retrieve", "retrieve"]
    assert all(p["k"] == 4 and p["_meta"]["federation"]["depth"] == 3 for _m, p in asked)
    assert result.meta["degraded"] == ["c"]
    assert result.meta["engines"]["c"]["error"]["code"] == Timeout.code


def test_a_required_engine_failing_fails_the_call() -> None:
    fed = federation("a", "b")
    fed.members["b"].required = True
    clients = {"a": FakeClient({"retrieve": {}}, {"hits": [hit("x", 1.0)]}),
               "b": FakeClient({}, None)}  # b advertises no retrieve
    with pytest.raises(CapabilityMissing) as raised:
        run_by_hand(retrieval.retrieve(fed, "q", 1, None, None, None, {}), clients, set())
    assert raised.value.data["engine"] == "b"
