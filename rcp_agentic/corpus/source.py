"""What loading yields (:class:`SourceDocument`, its :class:`Page` spans, a
:class:`SkippedFile` with its reason) and the checks every file reader applies: the bytes a
character may take under ``max_chars``, text decoding, and :class:`Skip`, raised inside a
reader to turn the file at hand into a SkippedFile."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SNIFF_BYTES = 8192
# Bytes of a file (of a line, for JSON Lines) allowed per character of max_chars, checked
# before anything is read. UTF-8 text holds a character per 4 bytes at least, so a larger
# .txt/.md is certainly too long; markup (tags, PDF structure, JSON escapes) gets more room.
BYTES_PER_CHAR: dict[str, int] = {"txt": 4, "md": 4, "html": 8, "jsonl": 8, "pdf": 32}


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


class Skip(Exception):
    """Raised inside a loader to turn the current file into a SkippedFile."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def too_big(what: str, file_type: str, max_chars: int) -> str:
    """The skip reason for ``what`` (a file or a line) too large for ``max_chars``."""
    per = BYTES_PER_CHAR[file_type]
    reason = f"{what} is longer than max_document_chars ({max_chars:,} characters)"
    return reason if per == 4 else f"{reason} allows for {file_type} ({per} bytes a character)"


def too_long(text: str, max_chars: int | None) -> str | None:
    """The skip reason for a text longer than ``max_chars``, else None."""
    if max_chars is None or len(text) <= max_chars:
        return None
    return f"text of {len(text):,} characters is longer than max_document_chars ({max_chars:,})"


def decode_text(data: bytes, encoding: str = "utf-8-sig") -> str:
    """Bytes to text with newlines normalised; raises Skip for empty or binary content."""
    if not data.strip():
        raise Skip("empty file")
    if b"\0" in data[:SNIFF_BYTES]:
        raise Skip("binary file")
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        raise Skip("binary file") from None
    if not text.strip():
        raise Skip("empty file")
    return text.replace("\r\n", "\n").replace("\r", "\n")
