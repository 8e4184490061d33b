"""Hosted retrieval REST API: ``POST /api/v1/retrieval/retrieve`` served by one or more engines.

The request and response follow the hosted (LlamaCloud-style) retrieval reference: a
snake_case body whose ``index_id`` picks an engine; ``custom_filters`` and
``static_filters`` become one RCP §8 filter; the pipeline weights pick dense, sparse or
weighted hybrid retrieval; rerank (on by default) reorders the best fused candidates and
``rerank_score`` is null where the engine has no reranker (the ``x-rerank-status`` header
says so). Errors are 422 ``{"detail": [...]}`` for bad requests, 404 for an unknown
``index_id``, 413/415/408 for the body, 503 when a backend is down. What this server
decides where the reference is silent: docs/internals.md, "The hosted retrieval API".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..engine import Engine
from ..errors import BackendUnavailable, InvalidParams, OptionUnsupported
from ..store.filters import BUILTIN_FIELDS
from ..wire import Hit
from .body import DEFAULT_BODY_LIMIT, DEFAULT_BODY_TIMEOUT, BodyRefused, read_body
from ..jsonio import dumps

log = logging.getLogger(__name__)

RETRIEVE_PATH = "/api/v1/retrieval/retrieve"
RERANK_STATUS_HEADER = "x-rerank-status"
DEFAULT_TOP_K = 10

Endpoint = Callable[[Request], Awaitable[Response]]
Operator = Literal["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"]

# Hosted static filter name → the engine's built-in filter field.
STATIC_FILTER_FIELDS = {
    "parsed_directory_file_id": "doc_id",
    "page_range_start": "page_start",
    "page_range_end": "page_end",
    "chunk_index": "chunk_index",
}
# Keys that pipeline.hits.static_fields adds to a hit's meta; the rest is user metadata.
_HIT_BUILTINS = ("doc_id", "chunk_index", "chunk_start_char", "chunk_end_char",
                 "chunk_token_count", "page_range_start", "page_range_end", "file_type")


# --- request ---------------------------------------------------------------------------

class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")


def _is_kind(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, float):
        return float in kinds and math.isfinite(value)
    return isinstance(value, tuple(k for k in kinds if k is not bool))


class Condition(_Strict):
    """One filter condition ``{"operator", "value"}``; ``in``/``nin`` take an array."""

    kinds: ClassVar[tuple[type, ...]] = (str, bool, int, float)
    kinds_text: ClassVar[str] = "a string, a finite number or a boolean"

    operator: Operator
    value: Any

    @field_validator("value")
    @classmethod
    def _check_value(cls, value: Any, info: ValidationInfo) -> Any:
        op = info.data.get("operator")
        if op is not None and isinstance(value, list) != (op in ("in", "nin")):
            raise ValueError(f"operator {op!r} takes "
                             + ("an array of values" if op in ("in", "nin") else "a single value"))
        if not all(_is_kind(v, cls.kinds) for v in (value if isinstance(value, list) else [value])):
            raise ValueError(f"values must be {cls.kinds_text}")
        return value


class FileIdCondition(Condition):
    """A condition on ``parsed_directory_file_id``."""

    kinds = (str,)
    kinds_text = "a string"


class IntCondition(Condition):
    """A condition on an integer built-in field (page range, chunk index)."""

    kinds = (int,)
    kinds_text = "an integer"


class StaticFilters(_Strict):
    """Filters on built-in chunk fields."""

    parsed_directory_file_id: FileIdCondition | None = None
    page_range_start: IntCondition | None = None
    page_range_end: IntCondition | None = None
    chunk_index: IntCondition | None = None


class Rerank(_Strict):
    """Reranking after hybrid search; enabled by default."""

    enabled: bool = True
    top_n: int | None = Field(None, ge=1)


class RetrieveRequest(_Strict):
    """The JSON body of ``POST /api/v1/retrieval/retrieve``; unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    index_id: str = Field(min_length=1)
    query: str = Field(min_length=1)
    custom_filters: dict[str, Condition | None] | None = None
    static_filters: StaticFilters | None = None
    full_text_pipeline_weight: float | None = Field(None, ge=0.0, le=1.0)
    vector_pipeline_weight: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int = Field(DEFAULT_TOP_K, ge=1)
    num_candidates: int | None = Field(None, ge=1)
    rerank: Rerank = Field(default_factory=lambda: Rerank(top_n=None))
    score_threshold: float | None = None

    def weights(self) -> tuple[float, float]:
        """(full-text, vector) weights with a missing one completing the other to 1."""
        ft, vec = self.full_text_pipeline_weight, self.vector_pipeline_weight
        if ft is None:
            ft = 0.5 if vec is None else 1.0 - vec
        if vec is None:
            vec = 1.0 - ft
        return ft, vec


def _issue(loc: list[Any], msg: str, type_: str = "value_error") -> dict[str, Any]:
    return {"loc": ["body", *loc], "msg": msg, "type": type_}


def _cross_check(req: RetrieveRequest) -> list[dict[str, Any]]:
    """Rules spanning several fields, which pydantic field validation cannot name."""
    issues = []
    if req.weights() == (0.0, 0.0):
        msg = "at least one of full_text_pipeline_weight and vector_pipeline_weight must be > 0"
        issues += [_issue(["full_text_pipeline_weight"], msg),
                   _issue(["vector_pipeline_weight"], msg)]
    if req.num_candidates is not None and req.num_candidates < req.top_k:
        issues.append(_issue(["num_candidates"], f"num_candidates must be >= top_k ({req.top_k})"))
    for name in req.custom_filters or {}:
        if name in BUILTIN_FIELDS:
            issues.append(_issue(["custom_filters", name], f"{name!r} is a built-in field, not "
                                 "user metadata; use static_filters"))
    return issues


# --- retrieval ---------------------------------------------------------------------------

class _Unprocessable(Exception):
    """An engine-side rejection of the request, already in the 422 detail shape."""

    def __init__(self, detail: list[dict[str, Any]]) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass
class _Outcome:
    results: list[dict[str, Any]]
    rerank_status: str


def _widen(value: Any, ftype: str | None) -> Any:
    """Integral floats as ints for int fields: hosted clients send every number as a double."""
    if isinstance(value, list):
        return [_widen(v, ftype) for v in value]
    if ftype == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _rcp_filter(req: RetrieveRequest, field_types: Mapping[str, str]
                ) -> tuple[dict[str, Any] | None, dict[str, list[str]]]:
    """The RCP §8 filter of the request, and the body location of each filtered field."""
    leaves: list[dict[str, Any]] = []
    locs: dict[str, list[str]] = {}
    for name, cond in (req.custom_filters or {}).items():
        if cond is not None:
            leaves.append({"field": name, "op": cond.operator,
                           "value": _widen(cond.value, field_types.get(name))})
            locs[f"filter.{name}"] = ["custom_filters", name]
    for hosted, ours in STATIC_FILTER_FIELDS.items():
        cond = getattr(req.static_filters, hosted, None)
        if cond is not None:
            leaves.append({"field": ours, "op": cond.operator, "value": cond.value})
            locs[f"filter.{ours}"] = ["static_filters", hosted]
    if not leaves:
        return None, locs
    return (leaves[0] if len(leaves) == 1 else {"and": leaves}), locs


def _result(hit: Hit, rerank_score: float | None) -> dict[str, Any]:
    meta = dict(hit.meta or {})
    builtin = {name: meta.pop(name, None) for name in _HIT_BUILTINS}
    static = {name: builtin[name] for name in ("chunk_end_char", "chunk_index", "chunk_start_char",
                                               "chunk_token_count", "page_range_end",
                                               "page_range_start")}
    return {"content": hit.text or "", "metadata": meta, "score": hit.score,
            "rerank_score": rerank_score,
            "static_fields": {"attachments": [], **static,
                              "parsed_directory_file_id": builtin["doc_id"]}}


def _retrieve(engine: Engine, req: RetrieveRequest) -> _Outcome:
    """Run one hosted retrieve on ``engine`` (synchronous; call it in a worker thread)."""
    cfg = engine.config
    flt, locs = _rcp_filter(req, engine.filter_fields() if req.custom_filters else {})
    ft, vec = req.weights()
    options: dict[str, Any] = {"unit": "chunk", "filter": flt}
    if vec == 0.0:
        options["mode"] = "sparse"
    elif ft == 0.0:
        options["mode"] = "dense"
    else:
        options["mode"] = "hybrid"
        options["fusion"] = {"method": "weighted", "weights": {"sparse": ft, "dense": vec}}
    n = min(req.top_k, cfg.max_k)
    if req.rerank.enabled and req.rerank.top_n is not None:
        n = min(n, req.rerank.top_n)
    candidate_k = min(req.num_candidates or max(n, cfg.candidate_k), cfg.max_candidate_k)
    n = min(n, candidate_k)
    options["candidate_k"] = candidate_k
    try:
        if not (req.rerank.enabled and engine.reranker is not None):
            found = engine.retrieve(req.query, k=n, min_score=req.score_threshold, **options)
            return _Outcome([_result(h, None) for h in found.hits],
                            "disabled" if not req.rerank.enabled else "unavailable")
        # Rerank through engine.rerank rather than retrieve(rerank=...): the latter ranks
        # the same head in the same order but replaces the fused score by the rerank score,
        # and the hosted response keeps both. Thresholding the fused head before reranking
        # is exact, as the head is sorted by that score.
        depth = min(max(2 * n, 20), candidate_k, cfg.rerank_max_candidates, cfg.max_k)
        found = engine.retrieve(req.query, k=depth, min_score=req.score_threshold, **options)
        hits = found.hits
        if not hits:
            return _Outcome([], "applied")
        ranked = engine.rerank(req.query, [h.text or "" for h in hits])
        order = ranked.order or []
        return _Outcome([_result(hits[i], ranked.scores[i]) for i in order[:n]], "applied")
    except (InvalidParams, OptionUnsupported) as exc:
        where = exc.field or exc.option or ""
        loc = locs.get(where) or {"query": ["query"], "k": ["top_k"],
                                  "candidateK": ["num_candidates"]}.get(where, [])
        raise _Unprocessable([_issue(loc, exc.message)]) from exc


# --- HTTP ------------------------------------------------------------------------------

def _json(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Response:
    try:
        text = dumps(body)
    except ValueError:
        log.error("hosted retrieve produced a non-finite number")
        status, text = 500, dumps({"detail": "internal server error"})
    return Response(text, status_code=status, media_type="application/json",
                    headers=dict(headers or {}))


def retrieve_endpoint(engines: Mapping[str, Engine], *, body_limit: int = DEFAULT_BODY_LIMIT,
                      body_timeout: float = DEFAULT_BODY_TIMEOUT) -> Endpoint:
    """The ``async`` Starlette endpoint of the hosted retrieve, over ``index_id → engine``.

    It reads the body itself (``application/json``, up to ``body_limit`` bytes within
    ``body_timeout`` seconds, else 415 / 413 / 408), so a wrapper that
    adds authentication must look only at headers, or read the body with
    ``await request.body()`` (which Starlette caches), never ``request.stream()``.
    """
    async def retrieve(request: Request) -> Response:
        try:
            body = await read_body(request, body_limit, body_timeout)
        except BodyRefused as refused:  # the rest of the body may still come: close
            return _json(refused.status, {"detail": refused.error.message},
                         {"Connection": "close"})
        try:
            req = RetrieveRequest.model_validate_json(body)
        except ValidationError as exc:
            return _json(422, {"detail": [_issue(list(e["loc"]), e["msg"], e["type"])
                                          for e in exc.errors(include_url=False)]})
        issues = _cross_check(req)
        if issues:
            return _json(422, {"detail": issues})
        engine = engines.get(req.index_id)
        if engine is None:
            return _json(404, {"detail": f"index_id {req.index_id!r} not found"})
        try:
            outcome = await run_in_threadpool(_retrieve, engine, req)
        except _Unprocessable as exc:
            return _json(422, {"detail": exc.detail})
        except BackendUnavailable as exc:
            return _json(503, {"detail": exc.message})
        except Exception:
            log.exception("hosted retrieve failed on index %r", req.index_id)
            return _json(500, {"detail": "internal server error"})
        return _json(200, {"results": outcome.results},
                     {RERANK_STATUS_HEADER: outcome.rerank_status})

    return retrieve


def hosted_routes(engines: Mapping[str, Engine], *,
                  wrap: Callable[[Endpoint], Endpoint] | None = None,
                  body_limit: int = DEFAULT_BODY_LIMIT,
                  body_timeout: float = DEFAULT_BODY_TIMEOUT) -> list[Route]:
    """Routes of the hosted retrieval API, to mount in a Starlette app.

    ``engines`` maps each ``index_id`` to its engine (looked up per request, so a
    mutable mapping may gain indexes later). ``wrap`` decorates the endpoint, e.g. with
    a bearer-token check; see :func:`retrieve_endpoint` for what it may do.
    """
    endpoint = retrieve_endpoint(engines, body_limit=body_limit, body_timeout=body_timeout)
    return [Route(RETRIEVE_PATH, wrap(endpoint) if wrap else endpoint, methods=["POST"])]
