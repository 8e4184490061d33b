"""HTML of a ``graph`` result: its summary, communities, picture, hits and follow-ups.

The picture of its nodes and edges is drawn by :mod:`.pictures`, its hits by :mod:`.hits`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .hits import hits_table, usage_line
from .html import block, esc, line, number, shorten, table
from .pictures import result_picture

if TYPE_CHECKING:
    from ..wire import GraphResult


def _communities(result: GraphResult) -> str:
    rows = []
    for c in result.communities or []:
        rows.append([esc(c.title or c.id), "-" if c.level is None else str(c.level),
                     "-" if c.size is None else str(c.size), number(c.score),
                     number(c.rating, 1), esc(shorten(c.summary or "", 300))])
    return table(("community", "level", "entities", "score", "rating", "summary"), rows)


def graph_result_html(result: GraphResult, query: str | None = None) -> str:
    """A whole ``graph`` result: the summary (``global``), the communities, the picture of
    its nodes and edges, the hits (``local``, ``drift``) and the follow-ups."""
    parts = []
    if result.summary:
        parts.append(f'<div style="white-space:pre-wrap;margin:4px 0">{esc(result.summary)}</div>')
    if result.communities:
        parts.append(_communities(result))
    picture = result_picture(result)
    if picture:
        parts.append(picture)
    if result.hits:
        parts.append(hits_table(result.hits, query))
    if result.followups:
        items = "".join(f"<li>{esc(q)}</li>" for q in result.followups)
        parts.append(f'<div style="margin:4px 0">follow-ups:<ul>{items}</ul></div>')
    if not parts:
        parts.append(line("empty result"))
    parts.append(usage_line(result.usage, index_version=result.index_version,
                            more=result.next_cursor is not None))
    return block("".join(parts))
