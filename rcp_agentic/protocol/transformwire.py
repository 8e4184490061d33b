"""``query/transform`` on the wire (§7.8): its params checked before the engine sees them.

The engine advertises ``transform: {methods}`` only while it has an LLM (the dispatcher
answers -32003 otherwise, as for any method not advertised). ``query`` must be a string and
``method`` one RCP defines — else InvalidParams naming ``data.field`` — and one the session
advertised (else OptionUnsupported, ``data.option``); ``n`` is an integer >= 1, clamped to
``x-rcp-agentic.limits.maxTransformQueries`` (§12: clamped, never refused). An unknown param
is ignored and named in the result's ``_meta.notes`` (§6.2: the result has no ``usage``), or
refused under an explicit ``"strict": true`` (:func:`..pipeline.params.unknown_params`).

The result carries ``trust`` beside ``queries`` (an extension key a peer ignores if it does
not know it, §6.2), shaped as a hit's: ``{level, injectionSuspected, sanitized?}`` — the
question's level and whether it, or a text the model wrote, screens as an injection or
carried markup (:func:`..pipeline.transform.screened`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..pipeline.transform import MAX_QUERIES as MAX_TRANSFORM_QUERIES
from ..errors import InvalidParams
from ..vocabulary import TRANSFORM_METHODS
from .graphwire import COMMON_PARAMS, EngineCall, _checked_params, _choice, _count, _obj, _string

TRANSFORM_PARAMS = ("query", "method", "n", *COMMON_PARAMS)
FALLBACK_NOTE = "the LLM's reply was not usable: the query is returned unchanged"


def transform_call(params: Mapping[str, Any], caps: Mapping[str, Any]) -> EngineCall:
    """The ``Engine.transform`` call of ``query/transform`` params (§7.8)."""
    notes = _checked_params(params, TRANSFORM_PARAMS, "query/transform")
    query = _string(params, "query", required=True)
    if params.get("method") is None:
        raise InvalidParams("method is required", field="method")
    method = _choice(params, "method", TRANSFORM_METHODS, _obj(caps, "transform").get("methods"))
    n = _count(params, "n", limit=MAX_TRANSFORM_QUERIES)
    return EngineCall({"query": query, "method": method, **({"n": n} if n is not None else {})},
                      notes)


def with_meta_notes(result: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """``result`` with ``notes`` in its ``_meta.notes`` (none added when there are none)."""
    if not notes:
        return result
    meta = dict(result.get("_meta") or {})
    meta["notes"] = [*(meta.get("notes") or []), *notes]
    return {**result, "_meta": meta}
