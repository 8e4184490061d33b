"""Where the benchmarks read their datasets from.

``$RCP_AGENTIC_DATA`` if set, else ``../shared/data`` beside the repository root (the
project's reference folder), so the benches run from any clone. Nothing is copied.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "RCP_AGENTIC_DATA"


def data_path(*parts: str) -> Path:
    """``<root>/<parts...>``; the root is ``$RCP_AGENTIC_DATA`` or ``<repo>/../shared/data``."""
    override = os.environ.get(DATA_ENV)
    repo = Path(__file__).resolve().parents[1]
    root = Path(override) if override else repo.parent / "shared" / "data"
    return root.joinpath(*parts)
