"""The HTML pieces every display is made of: escaping, term highlighting, bars, tables.

Everything a display shows passes through :func:`esc` (or :func:`highlight`, which
escapes too), so text from a document can never become markup. Styles are inline
attributes: notebook front-ends, GitHub's viewer and exported HTML keep them, and no
page CSS or JavaScript is needed.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from ..analyzer import analyze

# Characters XML 1.0 forbids (C0 controls but tab, newline, carriage return; lone
# surrogates; U+FFFE/U+FFFF), and the C1 controls and DEL, which it allows but which only
# garble a text: dropped, so the HTML (and an SVG inside it) also parses as XML.
_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
_WORD = re.compile(r"\w+", re.UNICODE)

FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;line-height:1.4"
MUTED = "color:#57606a"
BORDER = "#d0d7de"
# Explicit alignment and layout: notebook front-ends style bare tables (right-aligned cells,
# fixed equal-width columns), and an inline style is what wins over their stylesheets.
TABLE = (f"border-collapse:collapse;{FONT};width:100%;max-width:1100px;table-layout:auto;"
         "margin:0")
TH = (f"text-align:left;padding:4px 8px;border-bottom:2px solid {BORDER};background:#f6f8fa;"
      "white-space:nowrap")
TD = f"text-align:left;padding:4px 8px;border-bottom:1px solid {BORDER};vertical-align:top"
MARK = "background:#fff3b0;padding:0 1px;border-radius:2px"


def legal(value: object) -> str:
    """``value`` as text without the characters XML forbids (and C1 controls, DEL)."""
    return _INVALID.sub("", str(value))


def esc(value: object) -> str:
    """``value`` as HTML text: escaped (quotes too) and without characters XML forbids."""
    return html.escape(legal(value), quote=True)


def shorten(text: str, limit: int) -> str:
    """``text`` with its whitespace folded, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:max(limit - 1, 0)].rstrip() + "…"


def query_terms(query: str | None) -> frozenset[str]:
    """The analysed (stemmed, stopword-free) terms of ``query``, as BM25 sees them."""
    return frozenset(analyze(query)) if query else frozenset()


def highlight(text: str, terms: frozenset[str]) -> str:
    """``text`` escaped, with every word whose analysed form is a query term marked."""
    if not terms:
        return esc(text)
    out, last = [], 0
    for match in _WORD.finditer(text):
        word = match.group(0)
        if set(analyze(word)) & terms:
            out.append(esc(text[last:match.start()]))
            out.append(f'<mark style="{MARK}">{esc(word)}</mark>')
            last = match.end()
    out.append(esc(text[last:]))
    return "".join(out)


def number(value: float | None, digits: int = 3) -> str:
    """A score as text: ``-`` when absent or not finite."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}f}"


def confidence_bar(value: float | None) -> str:
    """A small horizontal bar for a confidence in [0, 1] with the number beside it."""
    if value is None or not math.isfinite(value):
        return f'<span style="{MUTED}">-</span>'
    share = min(max(value, 0.0), 1.0)
    colour = "#1a7f37" if share >= 0.6 else "#bf8700" if share >= 0.3 else "#cf222e"
    return (f'<span title="confidence {share:.3f}" style="display:inline-flex;'
            f'align-items:center;gap:4px"><span style="display:inline-block;width:60px;'
            f'height:8px;background:#eaeef2;border-radius:4px;overflow:hidden">'
            f'<span style="display:block;width:{share * 100:.0f}%;height:100%;'
            f'background:{colour}"></span></span>{share:.2f}</span>')


def link(label: str, uri: str | None) -> str:
    """``label`` as a link to ``uri`` when that is an http(s) or file address, else text."""
    if uri and urlsplit(uri).scheme.lower() in ("http", "https", "file"):
        return f'<a href="{esc(uri)}" target="_blank" rel="noopener noreferrer">{esc(label)}</a>'
    return esc(label)


def badge(text: str, colour: str = "#57606a") -> str:
    """A small rounded label (a unit kind, a trust flag)."""
    return (f'<span style="display:inline-block;padding:0 6px;border-radius:10px;'
            f'border:1px solid {colour};color:{colour};font-size:11px;white-space:nowrap">'
            f'{esc(text)}</span>')


def table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A table; ``head`` is text (escaped here), each cell of ``rows`` is HTML already."""
    header = "".join(f'<th style="{TH}">{esc(h)}</th>' for h in head)
    body = "".join("<tr>" + "".join(f'<td style="{TD}">{cell}</td>' for cell in row) + "</tr>"
                   for row in rows)
    return f'<table style="{TABLE}"><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>'


def details(summary_html: str, body_html: str, *, open_: bool = False) -> str:
    """A collapsible block (HTML ``<details>``: no script needed)."""
    state = ' open=""' if open_ else ""
    return (f'<details{state} style="margin:2px 0 2px 0">'
            f'<summary style="cursor:pointer">{summary_html}</summary>'
            f'<div style="margin-left:18px">{body_html}</div></details>')


def block(inner: str) -> str:
    """The outer box of one display: its own colours, so it reads the same under a dark
    notebook theme (as the SVG pictures do)."""
    return (f'<div style="{FONT};max-width:1100px;color:#1f2328;background:#ffffff">'
            f"{inner}</div>")


def line(text_html: str) -> str:
    """A muted one-line note (usage, counts)."""
    return f'<div style="{MUTED};margin:4px 0">{text_html}</div>'
