"""The last steps of every retrieve, stored or composed: pack the ranking into one page (``k``,
``tokenBudget``, from the cursor's place), mint the cursor to the next page, record what a
session was given, and assemble the result with its usage."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..sessions import Candidate, SessionStore
from ..wire import Hit, RetrieveResult, Usage
from . import cursor
from .candidates import Request
from .cursor import CursorState
from .packing import Leaves, Packed, pack


def page(request: Request, tokens: list[int], *, leaves: Leaves | None = None,
         keeps: Callable[[int, int], bool] | None = None) -> Packed:
    """One page of the ranking whose units have ``tokens``, with a note for each unit the
    budget or containment passed over."""
    plan, state = request.plan, request.cursor
    packed = pack(tokens, plan.k, plan.token_budget, start=state.start if state else 0,
                  exclude=state.exclude if state else frozenset(), leaves=leaves, keeps=keeps)
    for count, note in ((packed.withheld, "skipped {} summary hit(s) that would displace a "
                         "finer hit whose best-matching sentence they leave out"),
                        (packed.contained, "skipped {} hit(s) contained in or containing a "
                         "hit already packed"),
                        (packed.skipped, "tokenBudget: skipped {} hit(s) larger than the "
                         "budget left"),
                        (packed.oversized, "tokenBudget: {} hit(s) larger than the whole "
                         "budget can never be packed")):
        if count:
            plan.notes.append(note.format(count))
    return packed


def next_cursor(request: Request, packed: Packed, secret: bytes) -> str | None:
    """The cursor to the page after ``packed`` (None: it was the last, or a session's dedup
    makes the list depend on what was returned)."""
    if not packed.more or request.plan.session_id:
        return None
    return cursor.encode(CursorState(request.snapshot.version, packed.next_start,
                                     packed.next_exclude, request.qhash, request.rewritten),
                         secret)


def record(sessions: SessionStore, request: Request, returned: list[Candidate]) -> None:
    """Remember in the request's session (if any) what it was given; a note when the session
    forgot its oldest units for room."""
    plan = request.plan
    if not plan.session_id:
        return
    forgotten = sessions.record(plan.session_id, returned)
    if forgotten:
        plan.notes.append(f"session full: forgot its {forgotten} oldest unit(s)")


def result(request: Request, hits: list[Hit], *, candidates: int = 0, reranked: int = 0,
           tokens: int = 0, next_cursor: str | None = None) -> RetrieveResult:
    """The ``retrieve`` result, with its usage (latency from the request's start)."""
    plan = request.plan
    usage = Usage(candidates=candidates, reranked=reranked, tokens=tokens,
                  latency_ms=round((time.perf_counter() - request.started) * 1000.0, 3),
                  notes=plan.notes or None)
    return RetrieveResult(hits=hits, index_version=request.snapshot.token, usage=usage,
                          next_cursor=next_cursor)
