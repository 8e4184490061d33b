"""Thread budgets: document embedding runs on the niced ingest lane with its own torch thread
count; query-time torch work runs on the caller's thread with the query budget."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import torch

from rcp_agentic.models.embedder import SentenceTransformerEmbedder
from rcp_agentic.models.threads import IngestLane, caller_torch_threads, ingest_lane


def _where() -> tuple[str, int, int]:
    tid = threading.get_native_id()
    return threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, tid), \
        torch.get_num_threads()


def test_the_lane_runs_niced_with_its_own_torch_threads() -> None:
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    caller_threads = torch.get_num_threads()
    lane = IngestLane(torch_threads=1, nice=3)
    name, nice, threads = lane.run(_where)
    assert name.startswith("rcp-ingest") and lane.niced
    assert nice == min(19, base + 3) and threads == 1
    assert torch.get_num_threads() == caller_threads  # the caller's own count is untouched
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base


def test_the_lane_passes_errors_back_and_runs_nested_calls_in_place() -> None:
    lane = IngestLane(torch_threads=None, nice=0)

    def fail() -> None:
        raise ValueError("bad batch")

    with pytest.raises(ValueError, match="bad batch"):
        lane.run(fail)
    # A call made on the lane itself runs there directly (a queued one would wait forever).
    assert lane.run(lambda: lane.run(_where))[0].startswith("rcp-ingest")


def test_one_lane_per_setting_is_shared() -> None:
    assert ingest_lane(1, 10) is ingest_lane(1, 10)
    assert ingest_lane(1, 10) is not ingest_lane(2, 10)


def test_caller_torch_threads_sets_and_restores_the_callers_count() -> None:
    before = torch.get_num_threads()
    with caller_torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_documents_embed_on_the_lane_and_equal_a_direct_encode() -> None:
    emb = SentenceTransformerEmbedder(query_backend="torch", torch_threads=1, ingest_nice=5)
    texts = ["Vitamin D and bone density.", "Velvet Lanterns were a band from Bergen."]
    seen: list[str] = []
    encode = emb._encode

    def spy(batch: list[str]) -> np.ndarray:
        seen.append(threading.current_thread().name)
        return encode(batch)

    emb._encode = spy  # type: ignore[method-assign]
    got = emb.embed_documents(texts)
    assert seen and seen[0].startswith("rcp-ingest")
    np.testing.assert_allclose(got, encode(texts), atol=1e-6)
    # A torch query runs on the caller's thread, not queued behind an ingest on the lane.
    seen.clear()
    query = emb.embed_query(texts[0])
    assert seen == [threading.current_thread().name]
    np.testing.assert_allclose(query, got[0], atol=1e-5)
