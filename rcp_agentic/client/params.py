"""The params object of each method, from Python names (snake_case) to wire names (camelCase, §7).

Only option *names* are converted, never user data: filter field names, document
``meta`` and ``_meta`` keys travel untouched. ``None`` means "absent" and is
omitted (§4.6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..options import OPTIONS, WIRE_NAMES

# The retrieve params of §7.7 beyond query/k, and this engine's vendor options (wire names).
RETRIEVE_OPTIONS: frozenset[str] = WIRE_NAMES
# Each option's wire name by Python name, for those whose camelCase is not it (meta → _meta).
_WIRE_OF: dict[str, str] = {o.name: o.wire for o in OPTIONS}
# Option objects whose own keys are option names too (fusion.rrf_k → rrfK, rerank.top_n → topN).
_NESTED = frozenset({"fusion", "rerank", "mmr", "recency"})


def camel(name: str) -> str:
    """``token_budget`` → ``tokenBudget``; wire names, ``_meta`` and ``x-…`` pass unchanged."""
    if name.startswith(("_", "x-")) or "_" not in name:
        return name
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def wire_options(method: str, options: Mapping[str, Any],
                 known: frozenset[str] | None = None) -> dict[str, Any]:
    """``options`` under wire names; TypeError for a name outside ``known`` (and not ``x-…``).

    A name is its camelCase, or, when that is not ``known``, the wire name the option
    vocabulary (:mod:`rcp_agentic.options`) gives it (``rank_by`` → ``x-rcp-agentic-rankBy``).
    """
    out: dict[str, Any] = {}
    for name, value in options.items():
        key = camel(name)
        if known is not None and key not in known:
            key = _WIRE_OF.get(name, key)
        if known is not None and key not in known and not key.startswith("x-"):
            raise TypeError(f"{method}() got an unknown option {name!r}")
        if key in out:
            raise TypeError(f"{method}() got option {key!r} twice")
        if value is None:
            continue
        if key in _NESTED and isinstance(value, Mapping):
            value = {camel(k): v for k, v in value.items()}
        out[key] = value
    return out


def _present(**params: Any) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def retrieve_params(query: Any, k: int, options: Mapping[str, Any]) -> dict[str, Any]:
    """``retrieve`` (§7.7)."""
    return {"query": query, "k": k, **wire_options("retrieve", options, RETRIEVE_OPTIONS)}


def transform_params(query: str, method: str, n: int | None) -> dict[str, Any]:
    """``query/transform`` (§7.8)."""
    return _present(query=query, method=method, n=n)


def embed_params(inputs: Sequence[Any], kind: str | None, encoding: str) -> dict[str, Any]:
    """``embed`` (§7.3); ``json`` is the default encoding and is left implicit."""
    return _present(inputs=list(inputs), kind=kind,
                    encoding=None if encoding == "json" else encoding)


def rerank_params(query: Any, passages: Sequence[Any], top_n: int | None,
                  method: str | None) -> dict[str, Any]:
    """``rerank`` (§7.6)."""
    return _present(query=query, passages=list(passages), topN=top_n, method=method)


def index_add_params(documents: Iterable[Mapping[str, Any]], chunk: bool | None,
                     contextual: bool | None) -> dict[str, Any]:
    """``index/add`` (§7.10); documents are sent as given (``meta`` is user data)."""
    return _present(documents=[dict(d) for d in documents], chunk=chunk, contextual=contextual)


def index_delete_params(ids: Iterable[str]) -> dict[str, Any]:
    """``index/delete`` (§7.11)."""
    return {"ids": list(ids)}


def feedback_params(signals: Iterable[Mapping[str, Any]], session_id: str | None,
                    query: str | None) -> dict[str, Any]:
    """``feedback`` (§7.16); signal keys may be snake_case (``hit_id`` → ``hitId``)."""
    return _present(signals=[{camel(k): v for k, v in s.items()} for s in signals],
                    sessionId=session_id, query=query)


def graph_params(op: str, query: Any, k: int | None, seed_ids: Sequence[str] | None,
                 hops: int | None, level: int | None, session_id: str | None,
                 cursor: str | None = None, token_budget: int | None = None,
                 filter: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``graph`` (§7.9); ``cursor`` pages ``communities``, ``tokenBudget`` bounds ``global``'s
    summary, ``filter`` scopes every op."""
    return _present(op=op, query=query, k=k,
                    seedIds=None if seed_ids is None else list(seed_ids), hops=hops,
                    level=level, sessionId=session_id, cursor=cursor, tokenBudget=token_budget,
                    filter=None if filter is None else dict(filter))


def memory_build_params(documents: Iterable[Mapping[str, Any]] | None, memory_id: str | None,
                        scope: str | None, session_id: str | None,
                        filter: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``memory/build`` (§7.17); ``sessionId`` names the trajectory of ``scope="session"``,
    whose entities ``filter`` scopes."""
    return _present(documents=None if documents is None else [dict(d) for d in documents],
                    memoryId=memory_id, scope=scope, sessionId=session_id,
                    filter=None if filter is None else dict(filter))


def memory_recall_params(query: Any, memory_id: str | None, session_id: str | None,
                         n: int | None, filter: Mapping[str, Any] | None = None
                         ) -> dict[str, Any]:
    """``memory/recall`` (§7.17); ``filter`` scopes the clues and draft hits."""
    return _present(query=query, memoryId=memory_id, sessionId=session_id, n=n,
                    filter=None if filter is None else dict(filter))
