"""JSON Lines files: one document per line (``text``, optional ``id``/``_id`` and ``title``,
the rest as metadata), read a line at a time. A bad line is a SkippedFile
(``<file>#L<n>``); past :data:`LISTED_BAD_LINES` of one file they are counted in one
summary entry, as :func:`bounded_skips` does for any list of skips."""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from .. import jsonio
from ..errors import ParseError
from .source import (BYTES_PER_CHAR, SNIFF_BYTES, Skip, SkippedFile, SourceDocument, too_big,
                     too_long)

# Bad lines of one JSON Lines file reported one by one; the rest are one summary entry.
LISTED_BAD_LINES = 5


def load_jsonl(fh: BinaryIO, base: SourceDocument, max_chars: int | None
                ) -> Iterator[SourceDocument | SkippedFile]:
    """The records of a JSON Lines file, read a line at a time; a line longer than
    ``max_chars`` allows is skipped unread, and past LISTED_BAD_LINES bad lines are counted."""
    if b"\0" in fh.read(SNIFF_BYTES):
        raise Skip("binary file")
    fh.seek(0)
    limit = None if max_chars is None else BYTES_PER_CHAR["jsonl"] * max_chars
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
        raise Skip("empty file")
    if (summary := bad.summary()) is not None:
        yield summary


def _jsonl_item(raw: bytes | int, number: int, base: SourceDocument,
                max_chars: int | None) -> SourceDocument | SkippedFile:
    """One line as a document, or as a SkippedFile with the reason (``raw`` is the length of
    a line too long to be read)."""
    where = f"{base.source}#L{number}"
    if isinstance(raw, int):
        assert max_chars is not None  # only lines over a limit come as lengths
        return SkippedFile(where, too_big(f"line {number} of {raw:,} bytes", "jsonl",
                                           max_chars))
    try:
        doc = _jsonl_record(raw, number, base)
    except Skip as skip:
        return SkippedFile(where, skip.reason)
    reason = too_long(doc.text, max_chars)
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
        raise Skip(f"line {number}: {exc.message}") from None
    if not isinstance(record, dict):
        raise Skip(f"line {number} is not a JSON object")
    body = record.get("text")
    if not isinstance(body, str):
        raise Skip(f'no "text" string on line {number}')
    if not body.strip():
        raise Skip(f"empty text on line {number}")
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
