"""JSON in and out of every transport, safe against hostile frames.

``loads`` turns any frame into a value or a ``ParseError`` (-32700): bad UTF-8,
bad JSON and nesting deeper than ``MAX_DEPTH`` included — the standard parser
recurses, so a few kilobytes of ``[`` would otherwise exhaust the interpreter's
stack. ``dumps`` always produces text that encodes as UTF-8: a lone surrogate a
client sent (and that is echoed back, in an id or a nonce) is written as its
JSON escape, so the client gets its own value back exactly.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import ParseError

# Deeper than any valid RCP message (filters are bounded far below this).
MAX_DEPTH = 128


def _too_deep(value: Any, limit: int) -> bool:
    """True when ``value`` nests arrays/objects deeper than ``limit`` (iterative walk)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children if isinstance(c, (list, dict)))
    return False


def loads(frame: str | bytes | bytearray, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one frame; raises ParseError for anything that is not JSON within the depth limit."""
    if isinstance(frame, (bytes, bytearray)):
        try:
            frame = bytes(frame).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(f"the frame is not UTF-8: {exc}") from None
    try:
        value = json.loads(frame)
    except RecursionError:
        raise ParseError(f"JSON nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise ParseError(f"invalid JSON: {exc}") from None
    # Cheap bound first: fewer brackets than the limit cannot nest deeper than it.
    if frame.count("[") + frame.count("{") > max_depth and _too_deep(value, max_depth):
        raise ParseError(f"JSON nested deeper than {max_depth} levels")
    return value


def dumps(value: Any) -> str:
    """Compact JSON that always encodes as UTF-8 (lone surrogates are escaped, not dropped).

    Raises ValueError for NaN or Infinity, which JSON cannot carry.
    """
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text
