"""Hits as a pandas DataFrame: one row per hit, for sorting, filtering and plotting.

pandas is an optional extra (``pip install "rcp-agentic[notebook]"``), imported only
when a frame is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas

    from ..wire import Hit

COLUMNS = ("rank", "id", "unit", "level", "score", "confidence", "text", "doc_id", "title",
           "source", "uri", "page", "start", "end", "trust", "injection_suspected")


def hit_record(hit: Hit, rank: int) -> dict[str, Any]:
    """One hit as a flat row; each stage's score becomes a ``score_<stage>`` column."""
    cite = hit.citation
    meta = hit.meta or {}
    doc_id = hit.chunk.doc_id if hit.chunk else meta.get("doc_id")
    if doc_id is None and meta.get("doc_ids"):
        doc_id = meta["doc_ids"][0]
    row: dict[str, Any] = {
        "rank": rank, "id": hit.id, "unit": hit.unit, "level": hit.level, "score": hit.score,
        "confidence": hit.confidence, "text": hit.text, "doc_id": doc_id,
        "title": cite.title if cite else None, "source": cite.source if cite else None,
        "uri": cite.uri if cite else None, "page": cite.page if cite else None,
        "start": cite.start if cite else None, "end": cite.end if cite else None,
        "trust": hit.trust.level if hit.trust else None,
        "injection_suspected": hit.trust.injection_suspected if hit.trust else None}
    for stage, value in sorted((hit.scores or {}).items()):
        row[f"score_{stage}"] = value
    return row


def to_dataframe(hits: Sequence[Hit]) -> pandas.DataFrame:
    """``hits`` as a DataFrame, best first (``rank`` from 1). ImportError without pandas."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError('a DataFrame needs pandas: pip install "rcp-agentic[notebook]"') from exc
    rows = [hit_record(h, i) for i, h in enumerate(hits, 1)]
    stages = sorted({k for r in rows for k in r if k.startswith("score_")})
    return pd.DataFrame(rows, columns=[*COLUMNS, *stages])
