"""Token-aware, sentence-aware chunking with exact character offsets.

Sentences are packed greedily until the next would pass ``size`` tokens; the
next chunk starts with the trailing sentences of the previous one that fit in
``overlap`` tokens. A sentence longer than ``size`` is cut at token boundaries.
Every chunk is an exact slice ``text[start:end]`` of its document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..models.tokenizer import get_encoding

# A sentence ends at . ! ? (optionally followed by closing quotes/brackets) before
# whitespace, or at a blank line; each span keeps its trailing whitespace.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n\s*\n+")


@dataclass(frozen=True)
class Chunk:
    """A span of a document: ``text == document_text[start:end]``."""

    index: int
    start: int
    end: int
    text: str
    tokens: int


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences of ``text``, covering it without gaps."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for m in _SENTENCE_END.finditer(text):
        if m.end() > pos:
            spans.append((pos, m.end()))
            pos = m.end()
    if pos < len(text):
        spans.append((pos, len(text)))
    return spans


def _split_long(text: str, start: int, end: int, size: int) -> list[tuple[int, int, int]]:
    """Cut ``text[start:end]`` into pieces of at most ``size`` tokens: (start, end, tokens)."""
    enc = get_encoding()
    piece = text[start:end]
    tokens = enc.encode(piece, disallowed_special=())
    _, offsets = enc.decode_with_offsets(tokens)
    out = []
    for i in range(0, len(tokens), size):
        s = start + offsets[i]
        e = start + offsets[i + size] if i + size < len(tokens) else end
        if e > s:
            out.append((s, e, min(size, len(tokens) - i)))
    return out


def chunk_text(text: str, size: int = 200, overlap: int = 30) -> list[Chunk]:
    """Split ``text`` into chunks of at most ``size`` tokens with about ``overlap`` tokens of overlap."""
    if size <= 0:
        raise ValueError("chunk size must be positive")
    if not 0 <= overlap < size:
        raise ValueError("chunk overlap must be >= 0 and smaller than the chunk size")
    enc = get_encoding()
    pieces: list[tuple[int, int, int]] = []  # (start, end, tokens) units that are never split
    spans = sentence_spans(text)
    counts = [len(t) for t in enc.encode_ordinary_batch([text[s:e] for s, e in spans])]
    for (s, e), n in zip(spans, counts):
        if n > size:
            pieces.extend(_split_long(text, s, e, size))
        else:
            pieces.append((s, e, n))

    chunks: list[Chunk] = []
    i = 0
    while i < len(pieces):
        j, total = i, 0
        while j < len(pieces) and total + pieces[j][2] <= size:
            total += pieces[j][2]
            j += 1
        j = max(j, i + 1)
        start, end = pieces[i][0], pieces[j - 1][1]
        body = text[start:end]
        # Trailing whitespace carries no meaning; keep offsets exact by trimming the span.
        stripped = body.rstrip()
        if stripped.strip():
            end = start + len(stripped)
            chunks.append(Chunk(len(chunks), start, end, stripped, total))
        if j >= len(pieces):
            break
        # Step back over trailing pieces that fit in the overlap, but always advance.
        k, back = j, 0
        while k - 1 > i and back + pieces[k - 1][2] <= overlap:
            back += pieces[k - 1][2]
            k -= 1
        i = k
    # Token counts of joined sentences can differ from the sum of their parts by a token.
    exact = [len(t) for t in enc.encode_ordinary_batch([c.text for c in chunks])]
    return [Chunk(c.index, c.start, c.end, c.text, n) for c, n in zip(chunks, exact)]
