"""HTML for hits and retrieve results: one table row per hit, and the usage line.

A row shows the rank, unit and level, score (and each stage's score), a confidence
bar, the text with the query's terms marked, where it comes from (citation link, page,
character span) and its trust flags. A ``path`` or ``subgraph`` hit also draws its
entities and relations (:mod:`rcp_agentic.display.pictures`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING

from .html import (MUTED, badge, block, confidence_bar, details, esc, highlight, line, link,
                   number, query_terms, table)
from .pictures import PICTURED_UNITS, hit_picture

if TYPE_CHECKING:
    from ..wire import Hit, RetrieveResult, Usage

SHOWN_CHARS = 480  # text shown in the row; the rest opens in a details block
HEAD = ("#", "unit", "score", "confidence", "text", "source", "trust")
_TRUST_COLOUR = {"trusted": "#1a7f37", "community": "#57606a", "untrusted": "#bc4c00"}


def _text(hit: Hit, terms: frozenset[str]) -> str:
    if hit.text is None:
        return f'<span style="{MUTED}">(text not included)</span>'
    text = hit.text
    style = 'style="white-space:pre-wrap;word-break:break-word;min-width:280px"'
    if len(text) <= SHOWN_CHARS:
        return f"<div {style}>{highlight(text, terms)}</div>"
    cut = text[:SHOWN_CHARS]
    return (f"<div {style}>{highlight(cut, terms)}…</div>"
            + details(f'<span style="{MUTED}">all {len(text):,} characters</span>',
                      f"<div {style}>{highlight(text, terms)}</div>"))


def _source(hit: Hit) -> str:
    cite = hit.citation
    if cite is None:
        return f'<span style="{MUTED}">{esc(hit.id)}</span>'
    # A source is often a file path: its name reads better, the link keeps the whole address.
    source = cite.source or ""
    parts = [link(cite.title or PurePath(source).name or source or hit.id, cite.uri)]
    where = []
    if cite.page is not None:
        where.append(f"page {cite.page}")
    if cite.start is not None and cite.end is not None:
        where.append(f"chars {cite.start}–{cite.end}")
    if where:
        parts.append(f'<div style="{MUTED}">{esc(", ".join(where))}</div>')
    more = len((hit.meta or {}).get("citations") or []) - 1
    if more > 0:
        parts.append(f'<div style="{MUTED}">and {more} more source{"s" * (more > 1)}</div>')
    parts.append(f'<div style="{MUTED};font-size:11px">{esc(hit.id)}</div>')
    return "".join(parts)


def _trust(hit: Hit) -> str:
    if hit.trust is None:
        return ""
    flags = [badge(hit.trust.level, _TRUST_COLOUR.get(hit.trust.level, "#57606a"))]
    if hit.trust.injection_suspected:
        flags.append(badge("injection suspected", "#cf222e"))
    if hit.trust.sanitized:
        flags.append(badge("sanitized", "#8250df"))
    return " ".join(flags)


def _score(hit: Hit) -> str:
    stages = "".join(f'<div style="white-space:nowrap">{esc(name)} {number(value)}</div>'
                     for name, value in sorted((hit.scores or {}).items()))
    small = f'<div style="{MUTED};font-size:11px">{stages}</div>' if stages else ""
    return f"<b>{number(hit.score, 4)}</b>{small}"


def _unit(hit: Hit) -> str:
    unit = esc(hit.unit or "?")
    return f"{unit}" + (f'<div style="{MUTED}">level {hit.level}</div>' if hit.level else "")


def hit_row(hit: Hit, rank: int, terms: frozenset[str], *, picture_open: bool) -> list[str]:
    """The cells of one hit's row (HTML)."""
    text = _text(hit, terms)
    picture = hit_picture(hit)
    if picture:
        text += details(f'<span style="{MUTED}">the {esc(hit.unit or "")} drawn</span>',
                        picture, open_=picture_open)
    return [str(rank), _unit(hit), _score(hit), confidence_bar(hit.confidence), text,
            _source(hit), _trust(hit)]


def hits_table(hits: Sequence[Hit], query: str | None = None, *, first_rank: int = 1) -> str:
    """The hits as one table, best first; the query's terms marked in their texts."""
    terms = query_terms(query)
    # The first picture is open; the others fold (a page of subgraphs stays readable).
    first = next((i for i, h in enumerate(hits) if h.unit in PICTURED_UNITS), None)
    return table(HEAD, (hit_row(h, first_rank + i, terms, picture_open=i == first)
                        for i, h in enumerate(hits)))


def usage_line(usage: Usage | None, *, index_version: str | None = None,
               more: bool = False, rewritten: str | None = None) -> str:
    """One muted line: candidates, reranked, tokens, latency, index version, notes."""
    parts = []
    if usage is not None:  # a count the op does not keep (graph neighbours) stays 0: not shown
        parts += [text for value, text in (
            (usage.candidates, f"{usage.candidates:,} candidates"),
            (usage.reranked, f"{usage.reranked:,} reranked"),
            (usage.tokens, f"{usage.tokens:,} tokens"),
            (usage.latency_ms, f"{usage.latency_ms:.1f} ms")) if value]
    if index_version:
        parts.append(f"index {index_version}")
    if more:
        parts.append("more on the next page (next_cursor)")
    out = line(esc(" · ".join(parts))) if parts else ""
    if rewritten:
        out += line(f"searched as: <i>{esc(rewritten)}</i>")
    for note in (usage.notes or []) if usage else []:
        out += line(f"note: {esc(note)}")
    return out


def result_html(result: RetrieveResult, query: str | None = None) -> str:
    """A whole retrieve result: a header, the hits table and the usage line."""
    head = (f'<div style="margin:4px 0"><b>{len(result.hits)} hit'
            f'{"s" * (len(result.hits) != 1)}</b>'
            + (f' for <i>{esc(query)}</i>' if query else "") + "</div>")
    body = hits_table(result.hits, query) if result.hits else line("no hits")
    return block(head + body + usage_line(result.usage, index_version=result.index_version,
                                          more=result.next_cursor is not None,
                                          rewritten=result.rewritten_query))


def hit_html(hit: Hit, query: str | None = None) -> str:
    """One hit on its own (a one-row table, its picture open)."""
    return block(hits_table([hit], query))
