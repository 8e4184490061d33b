"""Every graph and memory op runs under its request's deadline and cancellation, as retrieve does.

A cold ``global`` once took seconds and ignored both ``_meta.deadlineMs`` and a client that
hung up. Here each op is asked with a deadline already spent (answered -32014, never a
result), and a batch whose client hangs up after its first request stops every request
still to run (-32006); the batch as a whole never outlives the server's deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rcp_agentic import Engine
from rcp_agentic.control import RequestControl
from rcp_agentic.errors import Cancelled
from rcp_agentic.graph.stored import node_uid
from rcp_agentic.graph.resolve import entity_key
from rcp_agentic.protocol.dispatcher import Dispatcher

from conftest import rpc_call

WIKI = Path(__file__).resolve().parent.parent / "examples" / "wiki"
QUESTION = "Which choir sang on the album Velvet Lanterns?"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    eng = Engine(tmp_path_factory.mktemp("deadlines") / "e", embedder=embedder,
                 build_graph=True, community_max_size=3)
    eng.index_paths([WIKI])
    eng.wait_for_derived()
    yield eng
    eng.close()


def _requests() -> list[tuple[str, dict[str, Any]]]:
    seed = node_uid(entity_key("Velvet Lanterns"))
    return [("graph", {"op": "local", "query": QUESTION}),
            ("graph", {"op": "neighbors", "seedIds": [seed]}),
            ("graph", {"op": "communities"}),
            ("graph", {"op": "global", "query": QUESTION}),
            ("graph", {"op": "drift", "query": QUESTION}),
            ("memory/recall", {"query": QUESTION}),
            ("memory/build", {"scope": "session", "sessionId": "s",
                              "documents": [{"text": QUESTION}]})]


class CancelAfter(RequestControl):
    """A control whose client hangs up at the ``n``-th stage boundary the engine checks."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.checks = 0

    def check(self) -> None:
        self.checks += 1
        if self.checks >= self.n:
            self.cancel("client disconnected")
        super().check()


def _call(engine: Engine, method: str, params: dict[str, Any], control: RequestControl) -> Any:
    args = {k: v for k, v in params.items() if k not in ("op", "seedIds", "sessionId")}
    if method == "graph":
        return engine.graph(params["op"], seed_ids=params.get("seedIds"), control=control,
                            **args)
    if method == "memory/recall":
        return engine.memory_recall(params["query"], control=control)
    return engine.memory_build(params["documents"], scope="session",
                               session_id=params["sessionId"], control=control)


@pytest.mark.parametrize("method,params", _requests(),
                         ids=[f"{m}-{p.get('op', '')}" for m, p in _requests()])
def test_each_op_stops_between_stages(engine: Engine, method: str,
                                      params: dict[str, Any]) -> None:
    """A client hanging up after the op began stops it at its next stage boundary."""
    whole = CancelAfter(10**9)
    _call(engine, method, params, whole)
    assert whole.checks >= 2, "the op checks its control more than once"
    with pytest.raises(Cancelled):
        _call(engine, method, params, CancelAfter(2))


@pytest.mark.parametrize("method,params", _requests(),
                         ids=[f"{m}-{p.get('op', '')}" for m, p in _requests()])
def test_a_spent_deadline_is_a_timeout_on_the_wire(engine: Engine, method: str,
                                                   params: dict[str, Any]) -> None:
    rpc = Dispatcher(engine, stateless=True)
    assert "result" in rpc_call(rpc, method, params), "the op works without a deadline"
    out = rpc_call(rpc, method, {**params, "_meta": {"deadlineMs": 0}})
    assert out.get("error", {}).get("code") == -32014, out


def test_a_batch_stops_when_its_client_hangs_up(engine: Engine) -> None:
    rpc = Dispatcher(engine, stateless=True)
    batch = [{"jsonrpc": "2.0", "id": i, "method": "graph",
              "params": {"op": "global", "query": f"{QUESTION} {i}"}} for i in range(64)]
    started: list[RequestControl] = []

    def on_start(control: RequestControl) -> None:
        started.append(control)
        if len(started) == 3:  # the batch, its first request, and now its second: hang up
            started[0].cancel("client disconnected")

    out = rpc.handle(batch, on_start=on_start)
    assert isinstance(out, list) and len(out) == 64
    assert "result" in out[0]
    assert all(r.get("error", {}).get("code") == -32006 for r in out[1:]), out[1]


def test_a_batch_shares_one_deadline() -> None:
    """Each request of a batch gets at most what is left of the batch's deadline."""
    parent = RequestControl(timeout=0.0)
    child = RequestControl(timeout=3600.0, parent=parent)
    assert child.deadline is not None and parent.deadline is not None
    assert child.deadline <= parent.deadline
    with pytest.raises(Exception) as err:
        child.check()
    assert getattr(err.value, "code", None) == -32014
