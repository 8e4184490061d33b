"""Opaque, tamper-evident pagination cursors (RCP §10).

A cursor names the snapshot the first page was served from, where the next page
starts in that one ranked list, the hits after that point already returned, a
hash of the query and options, and what the ``rewrite`` option made of the query (an LLM
need not answer the same twice, so the next page searches with the first page's); it is
signed with the engine's secret (HMAC-SHA256).
A cursor that was altered, comes from another engine, or is replayed with other
query options is InvalidParams on ``cursor``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidParams


@dataclass(frozen=True)
class CursorState:
    """Where the next page of one ranked list starts."""

    version: int
    start: int
    exclude: frozenset[int]
    query_hash: str
    rewritten: str | None = None  # the rewrite's query (hyde: its passage)


def query_hash(params: dict[str, Any]) -> str:
    """A stable hash of the options that define the ranked list."""
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:24]


def encode(state: CursorState, secret: bytes) -> str:
    data: dict[str, Any] = {"v": state.version, "s": state.start, "x": sorted(state.exclude),
                            "h": state.query_hash}
    if state.rewritten is not None:
        data["r"] = state.rewritten
    payload = json.dumps(data, separators=(",", ":")).encode("utf-8")
    body = base64.urlsafe_b64encode(payload).decode("ascii").rstrip("=")
    sig = hmac.new(secret, body.encode("ascii"), hashlib.sha256).hexdigest()[:32]
    return f"{body}.{sig}"


def decode(cursor: str, secret: bytes, expected_hash: str) -> CursorState:
    """The state inside ``cursor``, after checking its signature and that it fits this query."""
    if not cursor.isascii():  # every cursor we mint is ASCII; compare_digest needs ASCII too
        raise InvalidParams("cursor is not valid for this engine (altered or foreign)",
                            field="cursor")
    body, _, sig = cursor.partition(".")
    good = hmac.new(secret, body.encode("ascii"), hashlib.sha256).hexdigest()[:32]
    if not sig or not hmac.compare_digest(sig, good):
        raise InvalidParams("cursor is not valid for this engine (altered or foreign)",
                            field="cursor")
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        rewritten = data.get("r")
        state = CursorState(int(data["v"]), int(data["s"]), frozenset(int(x) for x in data["x"]),
                            str(data["h"]), None if rewritten is None else str(rewritten))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidParams(f"cursor is malformed: {exc}", field="cursor") from None
    if state.query_hash != expected_hash:
        raise InvalidParams("cursor belongs to a different query or options", field="cursor")
    return state
