"""Load files and folders into :class:`SourceDocument` objects.

Plain text, Markdown, HTML, PDF and JSON Lines are supported. A bad file never stops a
walk: it comes out as a :class:`SkippedFile` with a short reason, so callers can report it
(so does any OSError on one entry, and a symlink leading outside the folder walked unless
symlinks are followed). Every folder and file is checked where it really lies once opened, so
a parent folder swapped for a symlink mid-walk cannot lead outside either. A file too large
for ``max_chars`` is skipped before it is read, and the bad lines of one JSON Lines file are
reported a few at a time (:func:`bounded_skips`).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, BinaryIO

from pypdf import PdfReader

from .. import jsonio
from ..errors import ParseError

__all__ = ["SUPPORTED_EXTENSIONS", "Page", "SkippedFile", "SourceDocument", "bounded_skips",
           "load_path"]

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
# Bytes of a file (of a line, for JSON Lines) allowed per character of max_chars, checked
# before anything is read. UTF-8 text holds a character per 4 bytes at least, so a larger
# .txt/.md is certainly too long; markup (tags, PDF structure, JSON escapes) gets more room.
_BYTES_PER_CHAR: dict[str, int] = {"txt": 4, "md": 4, "html": 8, "jsonl": 8, "pdf": 32}
# Bad lines of one JSON Lines file reported one by one; the rest are one summary entry.
LISTED_BAD_LINES = 5


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
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            _check_inside(fd, folder, walk)
            st = os.fstat(fd)
            # Each real folder is walked once, which also stops loops through symlinks.
            if (st.st_dev, st.st_ino) in walk.seen:
                return None
            walk.seen.add((st.st_dev, st.st_ino))
            with os.scandir(fd) as it:
                return sorted(entry.name for entry in it)
        finally:
            os.close(fd)
    except _Skip as skip:
        return SkippedFile(_shown(folder), skip.reason)
    except OSError as exc:
        return SkippedFile(_shown(folder), _os_reason(exc, folder, "folder"))


def _leaves_root(path: Path, walk: _Walk) -> str | None:
    """The target of a symlink leading outside the walked root (unless followed), else None."""
    if walk.follow_symlinks or not path.is_symlink():
        return None
    target = os.path.realpath(path, strict=True)  # raises on a loop or a dangling link
    return None if _is_under(target, walk.inside) else target


def _is_under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _check_inside(fd: int, path: Path, walk: _Walk) -> None:
    """Raise _Skip when what ``fd`` opened lies outside the walked folder (unless symlinks are
    followed): the walk checks each entry, then opens it by path, and a parent folder swapped
    for a symlink in between would lead elsewhere. So what was opened is checked instead."""
    if walk.follow_symlinks or not walk.inside:
        return
    real = _opened_path(fd, path)
    if not _is_under(real, walk.inside):
        raise _Skip(f"opened as {_shown(real)}, outside the indexed folder (a folder on its "
                    "path was replaced while indexing)")


def _opened_path(fd: int, path: Path) -> str:
    """The real path of the file open on ``fd``."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    # Without /proc: the path resolved now, provided it still names the file opened.
    real = os.path.realpath(path)
    opened, now = os.fstat(fd), os.stat(real)
    if (opened.st_dev, opened.st_ino) != (now.st_dev, now.st_ino):
        raise _Skip("replaced while indexing")
    return real


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
        with _open_regular(path, walk) as fh:
            st = os.fstat(fh.fileno())
            base = SourceDocument(id=doc_id, text="", source=source, file_type=file_type,
                                  modified=st.st_mtime)
            if file_type == "jsonl":
                yield from _load_jsonl(fh, base, walk.max_chars)
                return
            data = _read_bounded(fh, st.st_size, file_type, walk.max_chars)
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


@contextlib.contextmanager
def _open_regular(path: Path, walk: _Walk) -> Iterator[BinaryIO]:
    """A regular file inside the walked folder, open for reading; O_NONBLOCK so a FIFO
    swapped in after the walk cannot hang."""
    with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise _Skip("not a regular file")
        _check_inside(fh.fileno(), path, walk)
        yield fh


def _read_bounded(fh: BinaryIO, size: int, file_type: str, max_chars: int | None) -> bytes:
    """The bytes of a file, unread when larger than ``max_chars`` allows (_BYTES_PER_CHAR)."""
    if max_chars is None:
        return fh.read()
    limit = _BYTES_PER_CHAR[file_type] * max_chars
    # One byte past the limit is read, so a file that grew since fstat (or whose size the
    # system reports as 0, as in /proc) is caught too.
    data = b"" if size > limit else fh.read(limit + 1)
    if size > limit or len(data) > limit:
        raise _Skip(_too_big(f"file of {max(size, len(data)):,} bytes", file_type, max_chars))
    return data


def _too_big(what: str, file_type: str, max_chars: int) -> str:
    """The skip reason for ``what`` (a file or a line) too large for ``max_chars``."""
    per = _BYTES_PER_CHAR[file_type]
    reason = f"{what} is longer than max_document_chars ({max_chars:,} characters)"
    return reason if per == 4 else f"{reason} allows for {file_type} ({per} bytes a character)"


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

def _load_jsonl(fh: BinaryIO, base: SourceDocument, max_chars: int | None
                ) -> Iterator[SourceDocument | SkippedFile]:
    """The records of a JSON Lines file, read a line at a time; a line longer than
    ``max_chars`` allows is skipped unread, and past LISTED_BAD_LINES bad lines are counted."""
    if b"\0" in fh.read(_SNIFF_BYTES):
        raise _Skip("binary file")
    fh.seek(0)
    limit = None if max_chars is None else _BYTES_PER_CHAR["jsonl"] * max_chars
    bad = _BadLines(base.source or "")
    blank = True
    for number, raw in enumerate(_lines(fh, limit), 1):
        if isinstance(raw, bytes):
            raw = raw.removeprefix(codecs.BOM_UTF8) if number == 1 else raw
            if not raw.strip():
                continue
        blank = False
        item = _jsonl_item(raw, number, base, max_chars)
        if isinstance(item, SourceDocument) or bad.add(item, number):
            yield item
    if blank:
        raise _Skip("empty file")
    if (summary := bad.summary()) is not None:
        yield summary


def _jsonl_item(raw: bytes | int, number: int, base: SourceDocument,
                max_chars: int | None) -> SourceDocument | SkippedFile:
    """One line as a document, or as a SkippedFile with the reason (``raw`` is the length of
    a line too long to be read)."""
    where = f"{base.source}#L{number}"
    if isinstance(raw, int):
        assert max_chars is not None  # only lines over a limit come as lengths
        return SkippedFile(where, _too_big(f"line {number} of {raw:,} bytes", "jsonl",
                                           max_chars))
    try:
        doc = _jsonl_record(raw, number, base)
    except _Skip as skip:
        return SkippedFile(where, skip.reason)
    reason = _too_long(doc.text, max_chars)
    return SkippedFile(doc.source or where, reason) if reason else doc


def _lines(fh: BinaryIO, limit: int | None) -> Iterator[bytes | int]:
    """Each line of ``fh`` without its newline (split on b"\\n" only: str.splitlines() would
    also split on U+2028 inside JSON strings); a line over ``limit`` bytes comes as its
    length, read in pieces and dropped."""
    while line := fh.readline(-1 if limit is None else limit + 1):
        if line.endswith(b"\n"):
            yield line[:-1]
        elif limit is None or len(line) <= limit:
            yield line  # the last line, without a newline
        else:
            size = len(line)
            while line and not line.endswith(b"\n"):
                line = fh.readline(1 << 20)
                size += len(line)
            yield size - line.endswith(b"\n")


@dataclass
class _BadLines:
    """The bad lines of one JSON Lines file: the first LISTED_BAD_LINES are reported one by
    one, the rest only counted, with the first few numbers kept for the summary."""

    source: str
    listed: int = 0
    more: int = 0
    first: list[int] = field(default_factory=list)

    def add(self, skip: SkippedFile, number: int) -> bool:
        """Whether ``skip`` is to be reported on its own (else it is counted)."""
        if self.listed < LISTED_BAD_LINES:
            self.listed += 1
            return True
        self.more += 1
        if len(self.first) < 3:
            self.first.append(number)
        return False

    def summary(self) -> SkippedFile | None:
        """One entry for the lines counted, if any."""
        if not self.more:
            return None
        numbers = ", ".join(map(str, self.first)) + (" …" if self.more > len(self.first) else "")
        return SkippedFile(self.source, f"{self.more:,} more bad lines skipped (lines {numbers})")


def bounded_skips(skipped: Iterable[SkippedFile]) -> list[SkippedFile]:
    """``skipped`` with at most LISTED_BAD_LINES ``<file>.jsonl#L<n>`` entries per file, the
    rest of each file's lines one summary entry at the end, so that however many bad lines
    a file holds, a report of them stays short."""
    shown: list[SkippedFile] = []
    files: dict[str, _BadLines] = {}
    for skip in skipped:
        file, sep, line = skip.path.rpartition("#L")
        if (not (sep and line.isdigit() and file.lower().endswith(".jsonl"))
                or files.setdefault(file, _BadLines(file)).add(skip, int(line))):
            shown.append(skip)
    shown += [s for bad in files.values() if (s := bad.summary()) is not None]
    return shown


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
