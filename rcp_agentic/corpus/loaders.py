"""Load files and folders into :class:`SourceDocument` objects.

Plain text, Markdown, HTML, PDF and JSON Lines are supported. A bad file never stops a
walk: it comes out as a :class:`SkippedFile` with a short reason, so callers can report it
(so does any OSError on one entry, and a symlink leading outside the folder walked unless
symlinks are followed).
"""

from __future__ import annotations

import codecs
import errno
import io
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from pypdf import PdfReader

from .. import jsonio
from ..errors import ParseError

__all__ = ["SUPPORTED_EXTENSIONS", "Page", "SkippedFile", "SourceDocument", "load_path"]

_FILE_TYPES: dict[str, str] = {
    ".txt": "txt",
    ".md": "md",
    ".markdown": "md",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".jsonl": "jsonl",
}
SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(_FILE_TYPES)

_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class Page:
    """One page of a paged source: ``text[start:end]`` of its document is the page's text."""

    number: int
    start: int
    end: int


@dataclass
class SourceDocument:
    """A loaded document: its text plus where it came from."""

    id: str | None
    text: str
    title: str | None = None
    source: str | None = None
    file_type: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    pages: list[Page] = field(default_factory=list)
    modified: float | None = None


@dataclass(frozen=True)
class SkippedFile:
    """A file (or a ``<file>#L<n>`` JSON Lines record) that was not loaded, and why."""

    path: str
    reason: str


class _Skip(Exception):
    """Raised inside a loader to turn the current file into a SkippedFile."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def load_path(path: str | os.PathLike[str], *, follow_symlinks: bool = False,
              max_chars: int | None = None) -> Iterator[SourceDocument | SkippedFile]:
    """A file, or a folder walked recursively in sorted order (names starting with '.' skipped).

    Symlinks are followed while their target stays inside the folder given; one that leaves
    it is a SkippedFile unless ``follow_symlinks``. Any OSError on one entry (a symlink loop,
    an unreadable folder or file, one that vanished mid-walk) makes that entry a SkippedFile
    with the reason, never an exception. With ``max_chars``, a document whose text is longer
    is skipped too.
    """
    root = Path(os.path.abspath(os.fspath(path)))
    # Checked here rather than in the generator so a bad argument fails at call time;
    # lstat, so a dangling or looping symlink named explicitly is reported, not "missing".
    if not os.path.lexists(root):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.fspath(path))
    return _load_root(root, _Walk(follow_symlinks, max_chars))


@dataclass
class _Walk:
    """The options of one load_path call and the real folders it has walked (to stop loops)."""

    follow_symlinks: bool
    max_chars: int | None
    inside: str = ""
    seen: set[tuple[int, int]] = field(default_factory=set)


def _load_root(root: Path, walk: _Walk) -> Iterator[SourceDocument | SkippedFile]:
    try:
        st = root.stat()
    except OSError as exc:
        yield SkippedFile(_shown(root), _os_reason(exc, root, "entry"))
        return
    if stat.S_ISDIR(st.st_mode):
        walk.inside = os.path.realpath(root)
        for entry in _walk(root, walk):
            if isinstance(entry, SkippedFile):
                yield entry
            else:
                doc_id = _shown(entry.relative_to(root.parent).as_posix())
                yield from _load_file(entry, doc_id, walk)
    elif stat.S_ISREG(st.st_mode):
        yield from _load_file(root, _shown(root.name), walk)
    else:
        yield SkippedFile(_shown(root), "not a regular file")


def _walk(top: Path, walk: _Walk) -> Iterator[Path | SkippedFile]:
    """Files under ``top``, depth first in sorted order; an explicit stack, so any depth works."""
    stack: list[tuple[Path, Iterator[str]]] = []
    listed = _list_folder(top, walk)
    if isinstance(listed, SkippedFile):
        yield listed
    elif listed is not None:
        stack.append((top, iter(listed)))
    while stack:
        folder, names = stack[-1]
        name = next(names, None)
        if name is None:
            stack.pop()
            continue
        if name.startswith("."):
            continue
        child = folder / name
        try:
            outside = _leaves_root(child, walk)
            st = child.stat()
        except OSError as exc:
            yield SkippedFile(_shown(child), _os_reason(exc, child, "entry"))
            continue
        if outside:
            yield SkippedFile(_shown(child), f"symlink to {_shown(outside)} leaves the indexed "
                                             "folder (--follow-symlinks follows it)")
        elif stat.S_ISDIR(st.st_mode):
            listed = _list_folder(child, walk)
            if isinstance(listed, SkippedFile):
                yield listed
            elif listed is not None:
                stack.append((child, iter(listed)))
        elif stat.S_ISREG(st.st_mode):
            yield child
        else:
            yield SkippedFile(_shown(child), "not a regular file")


def _list_folder(folder: Path, walk: _Walk) -> list[str] | SkippedFile | None:
    """The sorted entry names of a folder; None if this real folder was walked already."""
    try:
        st = folder.stat()
        # Each real folder is walked once, which also stops loops through symlinks.
        if (st.st_dev, st.st_ino) in walk.seen:
            return None
        walk.seen.add((st.st_dev, st.st_ino))
        with os.scandir(folder) as it:
            return sorted(entry.name for entry in it)
    except OSError as exc:
        return SkippedFile(_shown(folder), _os_reason(exc, folder, "folder"))


def _leaves_root(path: Path, walk: _Walk) -> str | None:
    """The target of a symlink leading outside the walked root (unless followed), else None."""
    if walk.follow_symlinks or not path.is_symlink():
        return None
    target = os.path.realpath(path, strict=True)  # raises on a loop or a dangling link
    inside = walk.inside
    if target == inside or target.startswith(inside.rstrip(os.sep) + os.sep):
        return None
    return target


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _shown(path: str | os.PathLike[str]) -> str:
    """A path as printable text (ids, sources, reasons): bytes that are not UTF-8 and
    control characters are backslash-escaped, so storing or printing it cannot fail."""
    text = os.fsencode(path).decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _os_reason(exc: OSError, path: Path, kind: str = "file") -> str:
    """A short reason for an OSError on one entry."""
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR) and os.path.islink(path):
        return "broken symlink"
    if exc.errno == errno.ENOENT:
        return f"{kind} vanished while indexing"
    return f"unreadable {kind}: {exc.strerror or exc}"


def _load_file(path: Path, doc_id: str, walk: _Walk) -> Iterator[SourceDocument | SkippedFile]:
    source = _shown(path)
    ext = path.suffix.lower()
    file_type = _FILE_TYPES.get(ext)
    if file_type is None:
        yield SkippedFile(source, f"unsupported extension {_shown(ext)}" if ext
                          else "no file extension")
        return
    try:
        data, st = _read_regular(path, file_type, walk.max_chars)
        base = SourceDocument(id=doc_id, text="", source=source, file_type=file_type,
                              modified=st.st_mtime)
        if file_type == "jsonl":
            for item in _load_jsonl(data, base):
                if isinstance(item, SourceDocument) and (reason := _too_long(item.text,
                                                                             walk.max_chars)):
                    yield SkippedFile(item.source or source, reason)
                else:
                    yield item
            return
        if file_type == "pdf":
            base.text, base.pages, base.title = _read_pdf(data)
        elif file_type == "html":
            base.text, base.title = _read_html(data)
        else:
            base.text = _decode(data)
            base.title = _markdown_title(base.text) if file_type == "md" else None
        reason = _too_long(base.text, walk.max_chars)
        yield SkippedFile(source, reason) if reason else base
    except _Skip as skip:
        yield SkippedFile(source, skip.reason)
    except OSError as exc:
        yield SkippedFile(source, _os_reason(exc, path))


def _read_regular(path: Path, file_type: str, max_chars: int | None
                  ) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file; O_NONBLOCK so a FIFO swapped in after the walk cannot hang."""
    with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise _Skip("not a regular file")
        # Plain text has at least a character per 4 bytes (UTF-8): skip it unread when too big.
        if max_chars is not None and file_type in ("txt", "md") and st.st_size > 4 * max_chars:
            raise _Skip(f"file of {st.st_size:,} bytes is longer than max_document_chars "
                        f"({max_chars:,} characters)")
        return fh.read(), st


def _too_long(text: str, max_chars: int | None) -> str | None:
    """The skip reason for a text longer than ``max_chars``, else None."""
    if max_chars is None or len(text) <= max_chars:
        return None
    return f"text of {len(text):,} characters is longer than max_document_chars ({max_chars:,})"


def _decode(data: bytes, encoding: str = "utf-8-sig") -> str:
    """Bytes to text with newlines normalised; raises _Skip for empty or binary content."""
    if not data.strip():
        raise _Skip("empty file")
    if b"\0" in data[:_SNIFF_BYTES]:
        raise _Skip("binary file")
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        raise _Skip("binary file") from None
    if not text.strip():
        raise _Skip("empty file")
    return text.replace("\r\n", "\n").replace("\r", "\n")


# --- Markdown ---------------------------------------------------------------------------

_ATX_HEADING = re.compile(r" {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


def _markdown_title(text: str) -> str | None:
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


def _read_html(data: bytes) -> tuple[str, str | None]:
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
    parser.feed(_decode(data, encoding))
    parser.close()
    text = parser.text()
    if not text:
        raise _Skip("no text extracted")
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

def _read_pdf(data: bytes) -> tuple[str, list[Page], str | None]:
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise _Skip("unreadable PDF: encrypted")
        page_texts = [(page.extract_text() or "").strip() for page in reader.pages]
        title = _pdf_title(reader)
    except _Skip:
        raise
    except Exception as exc:  # pypdf raises many types (and RecursionError) on damaged files
        raise _Skip(f"unreadable PDF: {_describe(exc)}") from exc
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
        raise _Skip("no text extracted")
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


# --- JSON Lines -------------------------------------------------------------------------

def _load_jsonl(data: bytes, base: SourceDocument) -> Iterator[SourceDocument | SkippedFile]:
    if not data.strip():
        raise _Skip("empty file")
    if b"\0" in data[:_SNIFF_BYTES]:
        raise _Skip("binary file")
    data = data.removeprefix(codecs.BOM_UTF8)
    # Split bytes on "\n" only: str.splitlines() would also split on U+2028 inside JSON strings.
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        where = f"{base.source}#L{number}"
        try:
            yield _jsonl_record(raw, number, base)
        except _Skip as skip:
            yield SkippedFile(where, skip.reason)


def _jsonl_record(raw: bytes, number: int, base: SourceDocument) -> SourceDocument:
    try:
        record = jsonio.loads(raw)
    except ParseError as exc:  # bad UTF-8, bad JSON, or nested past jsonio.MAX_DEPTH
        raise _Skip(f"line {number}: {exc.message}") from None
    if not isinstance(record, dict):
        raise _Skip(f"line {number} is not a JSON object")
    body = record.get("text")
    if not isinstance(body, str):
        raise _Skip(f'no "text" string on line {number}')
    if not body.strip():
        raise _Skip(f"empty text on line {number}")
    id_key = next((k for k in ("_id", "id") if record.get(k) is not None), None)
    if id_key is None:
        doc_id = f"{base.id}#L{number}"
    else:
        value = record[id_key]
        doc_id = value if isinstance(value, str) else json.dumps(value)
    raw_title = record.get("title")
    title = raw_title.strip() if isinstance(raw_title, str) else None
    dropped = {"text", id_key} | ({"title"} if isinstance(raw_title, str) else set())
    return SourceDocument(
        id=doc_id,
        text=f"{title}\n\n{body}" if title else body,
        title=title or None,
        source=f"{base.source}#L{number}",
        file_type="jsonl",
        meta={k: v for k, v in record.items() if k not in dropped},
        modified=base.modified,
    )
