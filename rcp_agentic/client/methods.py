"""The RCP methods as client calls: what each sends and how its answer is read, for both clients.

Each function returns a :class:`Request`: the method, its wire params (:mod:`.params`) and
``read``, which turns the wire ``result`` into what the method returns (the typed results of
:mod:`.results`, embed's decoded vectors, or the wire dict itself). :class:`~.RCPClient` and
:class:`~.AsyncRCPClient` only send it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from . import params
from .results import (GraphResult, MemoryBuildResult, MemoryRecallResult, RerankResult,
                      RetrieveResult, TransformResult, typed)
from .vectors import decode_vectors

T = TypeVar("T")


def _wire(result: Any) -> Any:
    return result


@dataclass(frozen=True)
class Request(Generic[T]):
    """One call: ``method`` with wire ``params``, its result read by ``read``."""

    method: str
    params: dict[str, Any]
    read: Callable[[Any], T] = _wire


def retrieve(query: Any, k: int, options: Mapping[str, Any]) -> Request[RetrieveResult]:
    return Request("retrieve", params.retrieve_params(query, k, options),
                   lambda r: typed(RetrieveResult, "retrieve", r).with_query(query))


def embed(inputs: Sequence[Any], kind: str | None, encoding: str,
          as_numpy: bool) -> Request[dict[str, Any]]:
    return Request("embed", params.embed_params(inputs, kind, encoding),
                   lambda r: decode_vectors(r, as_numpy=as_numpy))


def rerank(query: Any, passages: Sequence[Any], top_n: int | None,
           method: str | None) -> Request[RerankResult]:
    return Request("rerank", params.rerank_params(query, passages, top_n, method),
                   lambda r: typed(RerankResult, "rerank", r))


def index_add(documents: Iterable[Mapping[str, Any]], chunk: bool | None,
              contextual: bool | None) -> Request[dict[str, Any]]:
    return Request("index/add", params.index_add_params(documents, chunk, contextual))


def index_delete(ids: Iterable[str]) -> Request[dict[str, Any]]:
    return Request("index/delete", params.index_delete_params(ids))


def feedback(signals: Iterable[Mapping[str, Any]], session_id: str | None,
             query: str | None) -> Request[dict[str, Any]]:
    return Request("feedback", params.feedback_params(signals, session_id, query))


def graph(op: str, query: Any, k: int | None, seed_ids: Sequence[str] | None, hops: int | None,
          level: int | None, session_id: str | None, cursor: str | None,
          token_budget: int | None, filter: Mapping[str, Any] | None) -> Request[GraphResult]:
    return Request("graph", params.graph_params(op, query, k, seed_ids, hops, level, session_id,
                                                cursor, token_budget, filter),
                   lambda r: typed(GraphResult, "graph", r).with_query(query))


def transform(query: str, method: str, n: int | None) -> Request[TransformResult]:
    return Request("query/transform", params.transform_params(query, method, n),
                   lambda r: typed(TransformResult, "query/transform", r))


def memory_build(documents: Iterable[Mapping[str, Any]] | None, memory_id: str | None,
                 scope: str | None, session_id: str | None,
                 filter: Mapping[str, Any] | None) -> Request[MemoryBuildResult]:
    return Request("memory/build", params.memory_build_params(documents, memory_id, scope,
                                                              session_id, filter),
                   lambda r: typed(MemoryBuildResult, "memory/build", r))


def memory_recall(query: Any, memory_id: str | None, session_id: str | None, n: int | None,
                  filter: Mapping[str, Any] | None) -> Request[MemoryRecallResult]:
    return Request("memory/recall", params.memory_recall_params(query, memory_id, session_id,
                                                                n, filter),
                   lambda r: typed(MemoryRecallResult, "memory/recall", r))
