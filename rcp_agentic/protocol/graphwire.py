"""The knowledge-graph surface of the protocol: ``graph`` (§7.9), ``memory/build`` and
``memory/recall`` (§7.17) — their limits, and the wire params checked before the engine sees
them.

The engine advertises ``graph``, ``memory`` and ``x-rcp-agentic.graphRecall`` while it holds a
graph, and a session the graph's bounds under ``x-rcp-agentic.limits`` (:mod:`..capabilities`).
The ``*_call`` functions turn wire params into the keyword
arguments of ``Engine.graph`` / ``memory_build`` / ``memory_recall``, against the session's
advertised capabilities: a malformed value is InvalidParams naming ``data.field``; an op or
scope RCP defines but the session did not advertise is OptionUnsupported (``data.option``); a
well-formed value above an advertised limit is clamped (§12), never refused. The community
ops take ``level``, ``cursor`` (``communities``), ``tokenBudget`` (``global``, a vendor extra
clamped to ``maxSummaryTokens``); every op, ``memory/build`` (session scope) and
``memory/recall`` take a ``filter`` (§8), which scopes every text and id they return. An
unknown param is named in the result's ``usage.notes`` (the :class:`EngineCall`'s ``notes``),
or refused under an explicit ``"strict": true`` (:func:`..pipeline.params.unknown_params`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidParams, OptionUnsupported
from ..pipeline.params import lone_surrogate_at, unknown_params
# Every op and scope RCP/1 defines (§7.9, §7.17); what an engine offers is a subset.
from ..vocabulary import GRAPH_OPS, MEMORY_SCOPES

COMMUNITY_LISTS = ("global", "communities")  # k counts communities (maxCommunities)
MAX_CURSOR_CHARS = 4096
# Every param each method reads: the spec's, the vendor extras above, `_meta` and `strict`.
COMMON_PARAMS = ("_meta", "strict")
GRAPH_PARAMS = ("op", "query", "k", "seedIds", "hops", "level", "sessionId", "cursor",
                "tokenBudget", "filter", *COMMON_PARAMS)
MEMORY_BUILD_PARAMS = ("documents", "memoryId", "scope", "sessionId", "filter", *COMMON_PARAMS)
MEMORY_RECALL_PARAMS = ("query", "memoryId", "sessionId", "n", "filter", *COMMON_PARAMS)


@dataclass
class EngineCall:
    """What a wire request becomes: the engine method's keyword arguments, and the notes for
    its result's ``usage.notes`` (the unknown params it ignored)."""

    kwargs: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def _checked_params(params: Mapping[str, Any], names: tuple[str, ...], method: str) -> list[str]:
    """The notes of ``params``' unknown keys (InvalidParams under an explicit strict true),
    after checking that ``strict`` is a boolean."""
    strict = params.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise InvalidParams("strict must be a boolean", field="strict")
    return unknown_params(params, names, method=method)


def _obj(caps: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = caps.get(key)
    return value if isinstance(value, Mapping) else {}


def _limit(caps: Mapping[str, Any], name: str) -> int | None:
    value = _obj(_obj(caps, "x-rcp-agentic"), "limits").get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _string(params: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = params.get(name)
    if value is None:
        if required:
            raise InvalidParams(f"{name} is required", field=name)
        return None
    if not isinstance(value, str):
        raise InvalidParams(f"{name} must be a string", field=name)
    if lone_surrogate_at(value, name) is not None:
        raise InvalidParams(f"{name} holds a lone UTF-16 surrogate (not valid Unicode)",
                            field=name)
    return value


def _count(params: Mapping[str, Any], name: str, *, minimum: int = 1,
           limit: int | None = None) -> int | None:
    """An integer param (None when absent), clamped to ``limit``; InvalidParams when it is not
    an integer or is below ``minimum``."""
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 5.0 is the integer 5 in JSON
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParams(f"{name} must be an integer", field=name)
    if value < minimum:
        raise InvalidParams(f"{name} must be at least {minimum}", field=name)
    return value if limit is None else min(value, limit)


def _choice(params: Mapping[str, Any], name: str, defined: tuple[str, ...],
            offered: Any) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or value not in defined:
        raise InvalidParams(f"{name} must be one of {', '.join(defined)}", field=name)
    if not isinstance(offered, list) or value not in offered:
        raise OptionUnsupported(f"{name} {value!r} is not offered by this server (offered: "
                                f"{offered!r})", option=name)
    return value


def graph_call(params: Mapping[str, Any], caps: Mapping[str, Any]) -> EngineCall:
    """The ``Engine.graph`` call of ``graph`` params (§7.9)."""
    notes = _checked_params(params, GRAPH_PARAMS, "graph")
    if params.get("op") is None:
        raise InvalidParams("op is required", field="op")
    op = _choice(params, "op", GRAPH_OPS, _obj(caps, "graph").get("ops"))
    call: dict[str, Any] = {"op": op}
    query = _string(params, "query", required=op == "local")
    if query is not None:
        call["query"] = query
    if op in ("local", "drift"):
        k = _count(params, "k", limit=_obj(caps, "retrieve").get("maxK"))
    elif op in COMMUNITY_LISTS:
        k = _count(params, "k", limit=_limit(caps, "maxCommunities"))
    else:
        k = _count(params, "k", limit=_limit(caps, "maxGraphNodes"))
    if k is not None:
        call["k"] = k
    seeds = params.get("seedIds")
    if seeds is not None or op == "neighbors":
        call["seed_ids"] = _seed_ids(seeds, _limit(caps, "maxSeedIds"))
    hops = _count(params, "hops", limit=_limit(caps, "maxGraphHops"))
    if hops is not None:
        call["hops"] = hops
    level = _count(params, "level", minimum=0)  # checked against the levels by the engine
    if level is not None:
        call["level"] = level
    session = _string(params, "sessionId")
    if session is not None:
        call["session_id"] = session
    cursor = _string(params, "cursor")
    if cursor is not None:
        if op != "communities":
            raise OptionUnsupported("cursor pages the communities op only", option="cursor")
        if not cursor or len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii():
            raise InvalidParams("cursor is not one this server returned", field="cursor")
        call["cursor"] = cursor
    budget = _count(params, "tokenBudget", limit=_limit(caps, "maxSummaryTokens"))
    if budget is not None:
        if op != "global":
            raise OptionUnsupported("tokenBudget applies to the global op only",
                                    option="tokenBudget")
        call["token_budget"] = budget
    filter_ = _filter(params)
    if filter_ is not None:
        call["filter"] = filter_
    return EngineCall(call, notes)


def _filter(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request's RCP §8 filter (an object), which scopes every graph and memory op."""
    value = params.get("filter")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidParams("filter must be an object", field="filter")
    return value


def _seed_ids(value: Any, limit: int | None) -> list[str]:
    if value is None:
        raise InvalidParams("op 'neighbors' needs seedIds", field="seedIds")
    if not isinstance(value, list):
        raise InvalidParams("seedIds must be an array of node ids", field="seedIds")
    if not value:
        raise InvalidParams("seedIds must not be empty", field="seedIds")
    if limit is not None and len(value) > limit:  # dropping seeds would change the answer
        raise InvalidParams(f"seedIds holds {len(value)} ids; the limit is {limit}",
                            field="seedIds")
    for i, seed in enumerate(value):
        if not isinstance(seed, str) or lone_surrogate_at(seed, "") is not None:
            raise InvalidParams("a seed id must be a string of valid Unicode",
                                field=f"seedIds[{i}]")
    return list(value)


def memory_build_call(params: Mapping[str, Any], caps: Mapping[str, Any]) -> EngineCall:
    """The ``Engine.memory_build`` call of ``memory/build`` params (§7.17).

    ``sessionId`` (a vendor extra, §4.6) names the trajectory of ``scope: "session"``; a
    ``memoryId`` of the form ``session:<id>`` names it too.
    """
    notes = _checked_params(params, MEMORY_BUILD_PARAMS, "memory/build")
    scopes = _obj(caps, "memory").get("scopes")
    scope = _choice(params, "scope", MEMORY_SCOPES, scopes) or "global"
    call: dict[str, Any] = {"scope": scope}
    docs = params.get("documents")
    if docs is not None:
        call["documents"] = _documents(docs, _limit(caps, "maxMemoryDocuments"))
    memory_id = _string(params, "memoryId")
    if memory_id is not None:
        call["memory_id"] = memory_id
    session = _string(params, "sessionId")
    if session is None and scope == "session" and memory_id is not None \
            and memory_id.startswith("session:"):
        session = memory_id[len("session:"):]
    if scope == "session":
        if not session:
            raise InvalidParams("scope 'session' needs a sessionId (or a memoryId "
                                "'session:<sessionId>')", field="sessionId")
        call["session_id"] = session
    filter_ = _filter(params)
    if filter_ is not None:
        call["filter"] = filter_
    return EngineCall(call, notes)


def _documents(value: Any, limit: int | None) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise InvalidParams("documents must be an array", field="documents")
    if limit is not None and len(value) > limit:
        raise InvalidParams(f"documents holds {len(value)} items; the limit is {limit}",
                            field="documents")
    out = []
    for i, doc in enumerate(value):
        if not isinstance(doc, dict):
            raise InvalidParams("a document must be an object", field=f"documents[{i}]")
        if not isinstance(doc.get("text"), str):
            raise InvalidParams("each document needs a string text", field=f"documents[{i}].text")
        if doc.get("id") is not None and not isinstance(doc["id"], str):
            raise InvalidParams("a document id must be a string", field=f"documents[{i}].id")
        bad = lone_surrogate_at(doc, f"documents[{i}]")
        if bad is not None:
            raise InvalidParams(f"{bad} holds a lone UTF-16 surrogate (not valid Unicode)",
                                field=bad)
        out.append(doc)
    return out


def memory_recall_call(params: Mapping[str, Any], caps: Mapping[str, Any]) -> EngineCall:
    """The ``Engine.memory_recall`` call of ``memory/recall`` params (§7.17)."""
    notes = _checked_params(params, MEMORY_RECALL_PARAMS, "memory/recall")
    call: dict[str, Any] = {"query": _string(params, "query", required=True)}
    for wire, name in (("memoryId", "memory_id"), ("sessionId", "session_id")):
        value = _string(params, wire)
        if value is not None:
            call[name] = value
    n = _count(params, "n", limit=_limit(caps, "maxClues"))
    if n is not None:
        call["n"] = n
    filter_ = _filter(params)
    if filter_ is not None:
        call["filter"] = filter_
    return EngineCall(call, notes)
