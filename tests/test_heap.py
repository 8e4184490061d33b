"""After a write the freed heap goes back to the OS (glibc keeps it otherwise)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from rcp_agentic.heap import release_free_memory


def _rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc only")
def test_freed_heap_is_returned_after_release() -> None:
    # 3,000 blocks of 100 KiB: under glibc's mmap threshold, so they live in the heap, and
    # one block kept at the end pins the heap's top as a real workload's survivors do.
    blocks = [np.ones(12_800) for _ in range(3_000)]
    keep = np.ones(12_800)
    held = _rss_mib()
    del blocks
    freed = _rss_mib()
    assert release_free_memory() is True
    released = _rss_mib()
    assert keep.sum() == 12_800
    assert freed - released > 150, (held, freed, released)
