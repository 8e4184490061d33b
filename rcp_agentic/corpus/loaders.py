"""Load files and folders into :class:`SourceDocument` objects.

Plain text, Markdown, HTML, PDF and JSON Lines are supported. A bad file never stops a
walk: it comes out as a :class:`SkippedFile` with a short reason, so callers can report it
(so does any OSError on one entry, and a symlink leading outside the folder walked unless
symlinks are followed). Every folder and file is checked where it really lies once opened, so
a parent folder swapped for a symlink mid-walk cannot lead outside either. A file too large
for ``max_chars`` is skipped before it is read (``source``); each format's reader is in
``formats`` and ``jsonl``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .formats import markdown_title, read_html, read_pdf
from .jsonl import bounded_skips, load_jsonl
from .source import (BYTES_PER_CHAR, Skip, SkippedFile, SourceDocument, decode_text, too_big,
                     too_long)

# SkippedFile and bounded_skips are imported from here by engine.py and cli/index.py.
__all__ = ["SUPPORTED_EXTENSIONS", "SkippedFile", "bounded_skips", "load_path"]

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
    except Skip as skip:
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
    """Raise Skip when what ``fd`` opened lies outside the walked folder (unless symlinks are
    followed): the walk checks each entry, then opens it by path, and a parent folder swapped
    for a symlink in between would lead elsewhere. So what was opened is checked instead."""
    if walk.follow_symlinks or not walk.inside:
        return
    real = _opened_path(fd, path)
    if not _is_under(real, walk.inside):
        raise Skip(f"opened as {_shown(real)}, outside the indexed folder (a folder on its "
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
        raise Skip("replaced while indexing")
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
                yield from load_jsonl(fh, base, walk.max_chars)
                return
            data = _read_bounded(fh, st.st_size, file_type, walk.max_chars)
        if file_type == "pdf":
            base.text, base.pages, base.title = read_pdf(data)
        elif file_type == "html":
            base.text, base.title = read_html(data)
        else:
            base.text = decode_text(data)
            base.title = markdown_title(base.text) if file_type == "md" else None
        reason = too_long(base.text, walk.max_chars)
        yield SkippedFile(source, reason) if reason else base
    except Skip as skip:
        yield SkippedFile(source, skip.reason)
    except OSError as exc:
        yield SkippedFile(source, _os_reason(exc, path))


@contextlib.contextmanager
def _open_regular(path: Path, walk: _Walk) -> Iterator[BinaryIO]:
    """A regular file inside the walked folder, open for reading; O_NONBLOCK so a FIFO
    swapped in after the walk cannot hang."""
    with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise Skip("not a regular file")
        _check_inside(fh.fileno(), path, walk)
        yield fh


def _read_bounded(fh: BinaryIO, size: int, file_type: str, max_chars: int | None) -> bytes:
    """The bytes of a file, unread when larger than ``max_chars`` allows (BYTES_PER_CHAR)."""
    if max_chars is None:
        return fh.read()
    limit = BYTES_PER_CHAR[file_type] * max_chars
    # One byte past the limit is read, so a file that grew since fstat (or whose size the
    # system reports as 0, as in /proc) is caught too.
    data = b"" if size > limit else fh.read(limit + 1)
    if size > limit or len(data) > limit:
        raise Skip(too_big(f"file of {max(size, len(data)):,} bytes", file_type, max_chars))
    return data
