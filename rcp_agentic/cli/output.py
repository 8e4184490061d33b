"""What the command prints, made inert: text that came from a document or a server (hit texts,
ids, sources, file names, titles, errors, log lines) with its control characters, DEL and bidi
marks escaped (``\\x1b``, ``\\u202e``), so a document cannot clear the screen, write the
clipboard or reorder a line."""

from __future__ import annotations

import logging
import re
import sys
import textwrap

# C0 and C1 controls, DEL, and the marks that reorder or hide text (bidi embeddings,
# overrides, isolates): printed raw, a document's or a server's text could clear the screen,
# retitle the window, write the clipboard (OSC 52) or show a line other than it is.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# The unsafe characters that are whitespace: a snippet folds them into single spaces.
WHITESPACE_CONTROLS = "".join(c for c in map(chr, range(0xa0)) if c.isspace() and c != " ")


def inert(text: str, keep: str = "", *, json_text: bool = False) -> str:
    """``text`` safe to print on a terminal: each unsafe character (but those in ``keep``) as
    a visible escape, ``\\x1b`` or ``\\u202e``; all ``\\uXXXX`` with ``json_text``, which
    keeps JSON valid (JSON puts these characters only inside strings)."""
    def escape(match: re.Match[str]) -> str:
        char = match.group()
        if char in keep:
            return char
        if ord(char) < 0x100 and not json_text:
            return f"\\x{ord(char):02x}"
        return f"\\u{ord(char):04x}"

    return _UNSAFE.sub(escape, text)


def say(text: str, *, err: bool = False) -> None:
    """Print ``text`` (one line or several) on stdout, or stderr with ``err``, made inert."""
    print(inert(text, keep="\n\t"), file=sys.stderr if err else sys.stdout, flush=err)


def snippet(text: str | None, width: int) -> str:
    """``text`` on one line, shortened to ``width`` characters (``…`` where it was cut)."""
    flat = " ".join((text or "").split())
    return textwrap.shorten(flat, width=width, placeholder=" …") if flat else ""


class _InertFormatter(logging.Formatter):
    """Log lines made inert: a warning may quote a document or a server's reply."""

    def format(self, record: logging.LogRecord) -> str:
        return inert(super().format(record), keep="\n\t")


def log_to_stderr() -> None:
    """Warnings and errors of every logger on stderr, made inert."""
    handler = logging.StreamHandler()
    handler.setFormatter(_InertFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])  # unless set up already
    logging.getLogger("pypdf").setLevel(logging.ERROR)
