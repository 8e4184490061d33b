"""One capabilities builder: the engine's document and a session's are both its output, the
session adding only what a server answers and its limits."""

from __future__ import annotations

from rcp_agentic import Engine
from rcp_agentic.capabilities import CONFIG_LIMITS, TransportLimits, build
from rcp_agentic.protocol.dispatcher import Dispatcher


def test_engine_and_session_documents_come_from_the_builder(filled_engine: Engine) -> None:
    offer = filled_engine.offer()
    assert filled_engine.capabilities() == build(offer)
    rpc = Dispatcher(filled_engine, max_batch=9, max_body_bytes=1000)
    session = rpc.capabilities()
    assert session == build(offer, TransportLimits(9, rpc.request_timeout, 1000))
    added = set(session) - set(build(offer)) - {"x-rcp-agentic"}
    assert added == {"index", "streaming", "feedback"}
    limits = session["x-rcp-agentic"]["limits"]
    assert (limits["maxBatch"], limits["maxBodyBytes"]) == (9, 1000)
    assert {n: limits[n] for n in CONFIG_LIMITS} == {
        n: getattr(filled_engine.config, key) for n, key in CONFIG_LIMITS.items()}
    assert "maxGraphHops" not in limits  # no graph, no graph limits
