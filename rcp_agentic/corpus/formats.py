"""The text of one file's bytes, by format: a Markdown file's title, HTML (visible text with
block structure kept, and its title) and PDF (page texts joined, with their spans, and its
title). An unreadable file raises :class:`~.source.Skip`."""

from __future__ import annotations

import codecs
import io
import re
from html.parser import HTMLParser

from pypdf import PdfReader

from .source import Page, Skip, decode_text

_ATX_HEADING = re.compile(r" {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


def markdown_title(text: str) -> str | None:
    """The first ATX heading outside fenced code blocks (where '# ...' is often a shell comment)."""
    fence: str | None = None
    for line in text.split("\n"):
        opener = _FENCE.match(line)
        if fence is not None:
            if opener and opener.group(1)[0] == fence[0] and len(opener.group(1)) >= len(fence):
                fence = None
            continue
        if opener:
            fence = opener.group(1)
            continue
        heading = _ATX_HEADING.fullmatch(line)
        if heading and heading.group(1) and heading.group(1).strip():
            return heading.group(1).strip()
    return None


# --- HTML -------------------------------------------------------------------------------

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_HTML_SPACE = re.compile(r"[ \t\n\r\f]+")
_SKIPPED_TAGS = frozenset({"script", "style", "template", "noscript", "svg", "math"})
_BLOCK_TAGS = frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "center", "details",
    "dialog", "div", "dl", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2",
    "h3", "h4", "h5", "h6", "header", "hgroup", "hr", "html", "legend", "main", "menu", "nav",
    "ol", "p", "pre", "section", "summary", "table", "tbody", "tfoot", "thead", "ul",
})
_LINE_TAGS = frozenset({"br", "dd", "dt", "li", "option", "tr"})
_CELL_TAGS = frozenset({"td", "th"})


def read_html(data: bytes) -> tuple[str, str | None]:
    encoding = "utf-8-sig"
    declared = _META_CHARSET.search(data[:4096])
    if declared and not data.startswith(codecs.BOM_UTF8):
        try:
            name = codecs.lookup(declared.group(1).decode("ascii")).name
        except LookupError:
            name = encoding
        # A UTF-16/32 declaration in bytes we can read as ASCII is wrong; browsers use UTF-8.
        if not name.startswith(("utf-16", "utf-32")):
            encoding = name
    parser = _HTMLText()
    parser.feed(decode_text(data, encoding))
    parser.close()
    text = parser.text()
    if not text:
        raise Skip("no text extracted")
    return text, parser.title()


class _HTMLText(HTMLParser):
    """Visible text of an HTML page: blocks separated by newlines, whitespace collapsed outside <pre>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._out: list[str] = []
        self._pending_newlines = 0
        self._pending_space = False
        self._skip_depth = 0
        self._in_head = False
        self._pre_depth = 0
        self._pre_just_opened = False
        self._title_parts: list[str] | None = None
        self._title: str | None = None

    def text(self) -> str:
        return "".join(self._out).strip()

    def title(self) -> str | None:
        return self._title

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._pre_just_opened = False
        if tag in _SKIPPED_TAGS:
            self._skip_depth += 1
        elif tag == "head":
            self._in_head = True
        elif tag == "body":
            self._in_head = False  # tolerate a missing </head>
        elif tag == "title" and self._title is None and not self._skip_depth:
            self._title_parts = []
        elif tag == "pre":
            self._pre_depth += 1
            self._pre_just_opened = True
        self._break(tag)

    def handle_endtag(self, tag: str) -> None:
        self._pre_just_opened = False
        if tag in _SKIPPED_TAGS:
            self._skip_depth = max(0, self._skip_depth - 1)
        elif tag == "head":
            self._in_head = False
        elif tag == "title" and self._title_parts is not None:
            self._title = _HTML_SPACE.sub(" ", "".join(self._title_parts)).strip() or None
            self._title_parts = None
        elif tag == "pre":
            self._pre_depth = max(0, self._pre_depth - 1)
        if tag not in ("br", "hr"):  # void elements break once, on their start tag
            self._break(tag)

    def handle_data(self, data: str) -> None:
        if self._title_parts is not None:
            self._title_parts.append(data)
        elif self._skip_depth or self._in_head:
            return
        elif self._pre_depth:
            if self._pre_just_opened and data.startswith("\n"):
                data = data[1:]  # HTML ignores a newline right after <pre>
            self._pre_just_opened = False
            self._emit(data)
        else:
            collapsed = _HTML_SPACE.sub(" ", data)
            core = collapsed.strip(" ")
            if collapsed.startswith(" "):
                self._pending_space = True
            if core:
                self._emit(core)
                self._pending_space = collapsed.endswith(" ")

    def _break(self, tag: str) -> None:
        if tag in _BLOCK_TAGS:
            self._pending_newlines = 2
        elif tag in _LINE_TAGS:
            self._pending_newlines = max(self._pending_newlines, 1)
        elif tag in _CELL_TAGS:
            self._pending_space = True

    def _emit(self, chunk: str) -> None:
        if not chunk:
            return
        if self._out:
            if self._pending_newlines:
                self._out.append("\n" * self._pending_newlines)
            elif self._pending_space:
                self._out.append(" ")
        self._pending_newlines = 0
        self._pending_space = False
        self._out.append(chunk)


# --- PDF --------------------------------------------------------------------------------

def read_pdf(data: bytes) -> tuple[str, list[Page], str | None]:
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise Skip("unreadable PDF: encrypted")
        page_texts = [(page.extract_text() or "").strip() for page in reader.pages]
        title = _pdf_title(reader)
    except Skip:
        raise
    except Exception as exc:  # pypdf raises many types (and RecursionError) on damaged files
        raise Skip(f"unreadable PDF: {_describe(exc)}") from exc
    parts: list[str] = []
    pages: list[Page] = []
    offset = 0
    for number, page_text in enumerate(page_texts, 1):
        # Separators go only between pages with text; an empty page is a zero-width span.
        if page_text and parts:
            parts.append("\n\n")
            offset += 2
        pages.append(Page(number, offset, offset + len(page_text)))
        if page_text:
            parts.append(page_text)
            offset += len(page_text)
    if not parts:
        raise Skip("no text extracted")
    return "".join(parts), pages, title


def _pdf_title(reader: PdfReader) -> str | None:
    try:
        title = reader.metadata.title if reader.metadata else None
    except Exception:  # noqa: BLE001 - damaged metadata should not cost us the text
        return None
    return (title.strip() or None) if isinstance(title, str) else None


def _describe(exc: BaseException) -> str:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return detail if len(detail) <= 200 else detail[:197] + "..."
