"""Validated ``retrieve`` parameters (§7.7): wire camelCase or Python snake_case in, one plan out.

Structural problems (wrong JSON type, out-of-range value, funnel violated) are
InvalidParams with ``data.field``; a well-formed value the engine does not offer
is OptionUnsupported with ``data.option`` — unless ``strict`` is false, in which
case the option is dropped and ``usage.notes`` says so.

An unknown param is ignored (§4.6) but never silently: :func:`unknown_params` names it in
``usage.notes``, with the known param it most likely misspells. A client that sets
``"strict": true`` explicitly asks for the opposite, and gets -32602 naming it (a
misspelled ``filter`` must not widen a tenant's results); another vendor's ``x-…`` param
is only noted, even then. ``retrieve`` and the methods of :mod:`.method_params` (``graph``,
``memory/*``, ``query/transform``) all use it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, StrictFloat,
                      StrictInt, StrictStr, ValidationError)
from pydantic.alias_generators import to_camel

from .. import units
from ..config import EngineConfig
from ..errors import InvalidParams, OptionUnsupported
from ..options import RANK_BY, TREE_SEARCHES, VENDOR
from ..store.filters import check_filter_size
from ..text import clean_text, is_unicode
from ..vocabulary import FUSIONS, MODES, MULTI_QUERY_METHODS, RECALL_SOURCES, TRANSFORM_METHODS

# What a plan is checked against when the caller passes no configuration.
DEFAULT_CONFIG = EngineConfig.model_validate({})
# Unknown params named one by one in usage.notes; the rest are counted.
MAX_UNKNOWN_NOTED = 16
SHOWN_KEY_CHARS = 80


class _Params(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class FusionParams(_Params):
    """``fusion`` of a hybrid retrieve."""

    method: StrictStr = "rrf"
    weights: dict[StrictStr, StrictFloat] | None = None
    rrf_k: StrictInt | None = Field(default=None, ge=1)
    alpha: StrictFloat | None = Field(default=None, ge=0.0, le=1.0)


class RetrieveParams(_Params):
    """Every ``retrieve`` option of RCP/1; unknown fields are ignored (§4.6)."""

    query: StrictStr | dict[str, Any] | list[Any]
    k: StrictInt = Field(10, ge=1)
    mode: StrictStr | None = None
    modality: StrictStr | None = None
    candidate_k: StrictInt | None = Field(None, ge=1)
    fusion: FusionParams | None = None
    rerank: dict[str, Any] | StrictBool | None = None
    mmr: dict[str, Any] | None = None
    rewrite: StrictStr | StrictBool | None = None
    filter: dict[str, Any] | None = None
    min_score: StrictFloat | None = None
    recency: dict[str, Any] | None = None
    unit: StrictStr | None = None
    level: StrictInt | None = Field(None, ge=0)
    token_budget: StrictInt | None = Field(None, ge=1)
    session_id: StrictStr | None = None
    include_text: StrictBool = True
    include_vectors: StrictBool = False
    seed: StrictInt | None = None
    index_version: StrictStr | None = None
    strict: StrictBool = True
    cursor: StrictStr | None = None
    meta: dict[str, Any] | None = Field(None, alias="_meta")
    rank_by: StrictStr | None = Field(None, alias="x-rcp-agentic-rankBy")
    tree_search: StrictStr | None = Field(None, alias="x-rcp-agentic-treeSearch")
    graph_recall: StrictBool | None = Field(None, alias="x-rcp-agentic-graphRecall")
    # Notes naming the unknown params the request carried (unknown_params).
    _unknown: list[str] = PrivateAttr(default_factory=list)


PARAM_NAMES = frozenset(
    name for f_name, f in RetrieveParams.model_fields.items()
    for name in (f_name, f.alias or f_name))
# The wire names (what a misspelling is matched against); PARAM_NAMES adds the Python ones.
WIRE_NAMES = frozenset(f.alias or f_name for f_name, f in RetrieveParams.model_fields.items())


@dataclass
class Plan:
    """What the pipeline will run, after validation, defaults and clamping."""

    query: str
    k: int
    mode: str
    unit: str
    stored_unit: str
    level: int | None
    candidate_k: int
    # How deep each recall list is read as the query's pool, which every confidence feature
    # reads a hit against (and ranks it in): the request's candidateK when given, else the
    # engine's candidate_k; never k, so a hit's confidence does not change with k, the
    # page or what a session has seen (recall may run deeper: max(k, candidate_k), plus
    # what the session has seen).
    pool_depth: int
    fusion: str
    weights: dict[str, float]
    rrf_k: int
    alpha: float
    filter: dict[str, Any] | None
    min_score: float | None
    include_text: bool
    include_vectors: bool
    index_version: str | None
    token_budget: int | None = None
    session_id: str | None = None
    cursor: str | None = None
    rerank_top_n: int | None = None
    rank_by_confidence: bool = False
    mmr_lambda: float | None = None
    recency_field: str | None = None
    recency_half_life_days: float | None = None
    max_hit_chars: int = DEFAULT_CONFIG.max_hit_chars
    notes: list[str] = field(default_factory=list)
    # The (stored unit, level) pairs pooled for recall: one, or every layer of a collapsed tree.
    kinds: list[tuple[str, int]] = field(default_factory=list)
    tree_search: str = "collapsed"
    # Whether the graph's PageRank list joins recall (x-rcp-agentic-graphRecall), and whether
    # the request set its fusion weight (else it scales with the query's subject share).
    graph_recall: bool = False
    graph_weight_given: bool = False
    # The query transformation to run before recall (None: the query as given), and what it
    # made of the query: the dense leg's text (hyde's passage) and the sparse leg's.
    rewrite: str | None = None
    dense_query: str | None = None
    sparse_query: str | None = None

    @property
    def pooled(self) -> bool:
        """Whether recall pools several kinds or levels (containment matters inside one result)."""
        return len(self.kinds) > 1


def lone_surrogate_at(value: Any, path: str, *, keys_only: bool = False) -> str | None:
    """The path of the first string in ``value`` (an object key, or a value unless ``keys_only``)
    holding a lone surrogate, or None. Iterative: any nesting depth is safe."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if not keys_only and not is_unicode(item):
                return where
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and not is_unicode(key):
                    return where
                stack.append((child, f"{where}.{key}"))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
    return None


def query_text(query: Any, *, field: str = "query", allow_empty: bool = False,
               max_chars: int | None = None) -> str:
    """The text of a query or passage: a string, a text Content block, or a list of them (§4.8).

    Lone surrogates become U+FFFD (:func:`clean_text`); a text longer than ``max_chars``
    is InvalidParams on ``field``.
    """
    blocks = query if isinstance(query, list) else [query]
    parts = []
    for i, block in enumerate(blocks):
        if isinstance(block, str):
            parts.append(block)
            continue
        where = f"{field}[{i}]" if isinstance(query, list) else field
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise InvalidParams(f"{field} must be a string or text Content blocks", field=where)
        if block["type"] != "text":
            raise OptionUnsupported(f"content of type {block['type']!r} is not supported "
                                    "(this engine is text-only)", option="modality")
        if not isinstance(block.get("text"), str):
            raise InvalidParams("a text Content block needs a string 'text'", field=f"{where}.text")
        parts.append(block["text"])
    text = clean_text("\n".join(parts))
    if max_chars is not None and len(text) > max_chars:
        raise InvalidParams(f"{field} has {len(text)} characters, more than the limit of "
                            f"{max_chars}", field=field)
    if not allow_empty and not text.strip():
        raise InvalidParams(f"{field} must not be empty", field=field)
    return text


def _squashed(name: str) -> str:
    """``name`` for matching: lower case, without ``-`` and ``_`` (``seed_ids`` ~ ``seedIds``)."""
    return name.lower().replace("-", "").replace("_", "")


def did_you_mean(key: str, names: Collection[str]) -> str | None:
    """The known name ``key`` most likely misspells: equal but for case, ``_`` or ``-``, or
    under our vendor prefix (``x-rcp-agentic-filter`` for ``filter``), else a close match."""
    by_squash = {_squashed(n): n for n in sorted(names)}
    prefix = VENDOR + "-"
    tail = key[len(prefix):] if key.lower().startswith(prefix) else None
    for candidate in (key, tail):
        if candidate and _squashed(candidate) in by_squash:
            return by_squash[_squashed(candidate)]
    close = difflib.get_close_matches(_squashed(tail or key), list(by_squash), n=1, cutoff=0.8)
    return by_squash[close[0]] if close else None


def _foreign_vendor(key: str) -> bool:
    """An ``x-<vendor>-…`` param of another vendor than this engine (§6.2)."""
    lower = key.lower()
    return lower.startswith("x-") and not lower.startswith(VENDOR)


def _shown(key: str) -> str:
    return repr(key if len(key) <= SHOWN_KEY_CHARS else key[:SHOWN_KEY_CHARS] + "…")


def unknown_params(raw: Mapping[str, Any], names: Collection[str], *, method: str,
                   accepted: Collection[str] = ()) -> list[str]:
    """Notes naming the keys of ``raw`` that ``method`` does not define (``names``: its wire
    names, ``_meta`` and ``strict`` included; ``accepted``: other names it also reads).

    Under an explicit ``"strict": true`` the first unknown key is InvalidParams naming it in
    ``data.field``; another vendor's ``x-…`` key is only noted, never refused.
    """
    strict = raw.get("strict") is True
    unknown = [k for k in raw if k not in names and k not in accepted]
    notes: list[str] = []
    for key in unknown:
        guess = did_you_mean(key, names)
        hint = f" (did you mean {guess!r}?)" if guess else ""
        if strict and not _foreign_vendor(key):
            raise InvalidParams(f"unknown {method} param {_shown(key)}{hint}: with strict true "
                                "an unknown param is refused, not ignored", field=key)
        if len(notes) < MAX_UNKNOWN_NOTED:
            notes.append(f"ignored unknown param {_shown(key)}{hint}")
    if len(unknown) > MAX_UNKNOWN_NOTED:
        notes.append(f"ignored {len(unknown) - MAX_UNKNOWN_NOTED} more unknown params")
    return notes


def parse_params(raw: dict[str, Any]) -> RetrieveParams:
    """Validate a raw params object (wire or Python names); unknown names are noted, or
    refused under an explicit ``strict: true`` (:func:`unknown_params`)."""
    if not isinstance(raw, dict):
        raise InvalidParams("params must be an object", field="params")
    unknown = unknown_params(raw, WIRE_NAMES, method="retrieve", accepted=PARAM_NAMES)
    for name, value in raw.items():
        # Lone surrogates are not Unicode: the query's text is cleaned (query_text); any
        # other string of an option holding one is refused. An indexVersion is an opaque
        # token: whatever its form, one the engine cannot serve is -32010 (§7.7.1).
        if name in PARAM_NAMES and name not in ("_meta", "indexVersion", "index_version"):
            bad = lone_surrogate_at(value, name, keys_only=name == "query")
            if bad is not None:
                raise InvalidParams(f"{bad} holds a lone UTF-16 surrogate (not valid Unicode)",
                                    field=bad)
    try:
        params = RetrieveParams.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"] if not str(p).startswith(("str", "dict", "list", "bool"))]
        path = ".".join(p if p.isdigit() or p.startswith(("x-", "_")) else to_camel(p)
                        for p in loc) or "params"
        if err["type"] == "missing":
            raise InvalidParams(f"{path} is required", field=path) from None
        raise InvalidParams(f"{path}: {err['msg']}", field=path) from None
    params._unknown = unknown
    return params


Unsupported = Callable[[str, str], None]


def make_plan(p: RetrieveParams, config: EngineConfig = DEFAULT_CONFIG, *,
              rerank_method: str | None = None, can_rank_by_confidence: bool = False,
              offered: Mapping[str, tuple[int, ...]] | None = None,
              transform_methods: Collection[str] = ()) -> Plan:
    """Check options against what the engine offers and resolve defaults (§7.7, §12).

    ``config`` supplies the defaults (mode, depths, RRF k) and the limits (maxK, query,
    sessionId, tokenBudget, filter, hit text); ``rerank_method``,
    ``can_rank_by_confidence`` and ``transform_methods`` (the query transformations; none
    without an LLM) say what the engine's models offer; ``offered`` maps each
    stored kind the engine holds to its levels (default: the per-document kinds, flat).
    The checks run in a fixed order, so a request with several faults gets the same error.
    """
    notes: list[str] = list(p._unknown)

    def unsupported(option: str, message: str) -> None:
        if p.strict:
            raise OptionUnsupported(message, option=option)
        notes.append(f"ignored {option}: {message}")

    query = query_text(p.query, max_chars=config.max_query_chars)
    if p.modality not in (None, "text"):
        unsupported("modality", f"modality {p.modality!r} is not supported (text only)")
    mode = p.mode or config.default_mode
    if mode not in MODES:
        unsupported("mode", f"mode {mode!r} is not supported")
        mode = config.default_mode
    unit, kinds, level, tree_search = _plan_unit(p, offered, unsupported)
    rerank = _plan_rerank(p, rerank_method, unsupported)
    mmr_lambda = _plan_mmr(p)
    rewrite = _plan_rewrite(p, unit, transform_methods, unsupported)
    recency_field, half_life = _plan_recency(p)
    _check_limits(p, config)
    k = min(p.k, config.max_k)
    if p.k > config.max_k:
        notes.append(f"k clamped to maxK={config.max_k}")
    if p.candidate_k is not None and p.candidate_k < p.k:
        raise InvalidParams("candidateK must be >= k (candidateK >= rerank.topN >= k)",
                            field="candidateK")
    candidate_k = min(p.candidate_k or max(k, config.candidate_k), config.max_candidate_k)
    pool_depth = min(p.candidate_k or config.candidate_k, config.max_candidate_k)
    rank_by_confidence = _plan_rank_by(p, can_rank_by_confidence, rerank, unsupported)
    rerank_top_n = _plan_top_n(p, rerank, k, candidate_k, config, notes)
    graph_recall = _plan_graph_recall(p, unit, offered, unsupported)
    fusion, weights = _plan_fusion(p, mode, graph_recall, unsupported)
    if p.min_score is not None and p.min_score != p.min_score:
        raise InvalidParams("minScore must be a number", field="minScore")
    return Plan(
        query=query, k=k, mode=mode, unit=unit, stored_unit=units.get(unit).stored,
        level=level, kinds=kinds, tree_search=tree_search, candidate_k=candidate_k,
        pool_depth=pool_depth,
        fusion=fusion.method, weights=weights, rrf_k=fusion.rrf_k or config.rrf_k,
        alpha=fusion.alpha if fusion.alpha is not None else 0.5,
        filter=p.filter, min_score=p.min_score, include_text=p.include_text,
        include_vectors=p.include_vectors, index_version=p.index_version,
        token_budget=p.token_budget, session_id=p.session_id, cursor=p.cursor,
        rerank_top_n=rerank_top_n, rank_by_confidence=rank_by_confidence,
        mmr_lambda=mmr_lambda, graph_recall=graph_recall,
        graph_weight_given=fusion.weights is not None and "graph" in fusion.weights,
        recency_field=recency_field,
        recency_half_life_days=float(half_life) if half_life is not None else None,
        max_hit_chars=config.max_hit_chars, notes=notes, rewrite=rewrite)


def _plan_rerank(p: RetrieveParams, rerank_method: str | None,
                 unsupported: Unsupported) -> dict[str, Any] | None:
    """The ``rerank`` option when the engine's reranker can honour it (None: no rerank)."""
    if p.rerank in (None, False):
        return None
    if p.rerank is True or not isinstance(p.rerank, dict):
        raise InvalidParams("rerank must be an object or false", field="rerank")
    method = p.rerank.get("method", rerank_method)
    if rerank_method is None:
        unsupported("rerank", "no reranker is configured")
    elif method != rerank_method:
        unsupported("rerank.method", f"rerank method {method!r} is not offered (this "
                    f"engine: {rerank_method!r})")
    else:
        return p.rerank
    return None


def _plan_mmr(p: RetrieveParams) -> float | None:
    """MMR's lambda in [0, 1] (None: no MMR)."""
    if p.mmr is None:
        return None
    lam = p.mmr.get("lambda", 0.5)
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not 0.0 <= lam <= 1.0:
        raise InvalidParams("mmr.lambda must be a number in [0, 1]", field="mmr.lambda")
    return float(lam)


def _plan_rewrite(p: RetrieveParams, unit: str, methods: Collection[str],
                  unsupported: Unsupported) -> str | None:
    """The query transformation to run (None: none). Several queries fuse several ranked
    lists into one: a composed kind cannot, and no cursor can page the result."""
    if p.rewrite is None or p.rewrite is False:
        return None
    if p.rewrite not in TRANSFORM_METHODS:
        raise InvalidParams(f"rewrite must be one of {', '.join(TRANSFORM_METHODS)} or false",
                            field="rewrite")
    if p.rewrite not in methods:
        unsupported("rewrite", "query rewriting is not offered by this engine (it has no LLM)"
                    if not methods else f"rewrite {p.rewrite!r} is not offered")
        return None
    if p.rewrite in MULTI_QUERY_METHODS and units.get(unit).composed:
        unsupported("rewrite", f"rewrite {p.rewrite!r} fuses one retrieve per query; {unit} "
                    "units are composed per query and cannot be fused (use rewrite or hyde)")
        return None
    if p.rewrite in MULTI_QUERY_METHODS and p.cursor is not None:
        raise InvalidParams(f"a {p.rewrite} retrieve fuses several ranked lists and returns no "
                            "nextCursor, so it cannot continue a cursor", field="cursor")
    return str(p.rewrite)


def _plan_recency(p: RetrieveParams) -> tuple[str | None, Any]:
    """The recency date field and half-life in days (None, None: no recency)."""
    if p.recency is None:
        return None, None
    recency_field = p.recency.get("field")
    half_life = p.recency.get("halfLifeDays", p.recency.get("half_life_days", 30))
    if not isinstance(recency_field, str) or not recency_field:
        raise InvalidParams("recency.field must name a date field", field="recency.field")
    if (isinstance(half_life, bool) or not isinstance(half_life, (int, float))
            or not 0 < half_life < float("inf")):
        raise InvalidParams("recency.halfLifeDays must be a positive number",
                            field="recency.halfLifeDays")
    return recency_field, half_life


def _check_limits(p: RetrieveParams, config: EngineConfig) -> None:
    """The request's sizes against the configuration's bounds, and cursor with session."""
    if p.session_id is not None and not p.session_id:
        raise InvalidParams("sessionId must not be empty", field="sessionId")
    if p.session_id is not None and len(p.session_id) > config.max_session_id_chars:
        raise InvalidParams(f"sessionId has {len(p.session_id)} characters, more than the limit "
                            f"of {config.max_session_id_chars}", field="sessionId")
    if p.token_budget is not None and p.token_budget > config.max_token_budget:
        raise InvalidParams(f"tokenBudget exceeds the limit of {config.max_token_budget}",
                            field="tokenBudget")
    if p.filter is not None:
        check_filter_size(p.filter, max_depth=config.max_filter_depth,
                          max_nodes=config.max_filter_nodes)
    if p.cursor is not None and p.session_id is not None:
        raise InvalidParams("a cursor pages one fixed ranked list; it cannot be combined with "
                            "sessionId, whose dedup changes the list", field="cursor")


def _plan_rank_by(p: RetrieveParams, can_rank_by_confidence: bool,
                  rerank: dict[str, Any] | None, unsupported: Unsupported) -> bool:
    """Whether the ranking is by calibrated confidence (``x-rcp-agentic-rankBy``)."""
    if p.rank_by is not None and p.rank_by not in RANK_BY:
        raise InvalidParams(f"x-rcp-agentic-rankBy must be one of {', '.join(RANK_BY)}",
                            field="x-rcp-agentic-rankBy")
    rank_by_confidence = p.rank_by == "confidence"
    if rank_by_confidence and not can_rank_by_confidence:
        unsupported("x-rcp-agentic-rankBy", "no confidence calibration for this engine")
        rank_by_confidence = False
    if rank_by_confidence and rerank is not None:
        raise InvalidParams("rank by confidence or rerank, not both", field="x-rcp-agentic-rankBy")
    return rank_by_confidence


def _plan_top_n(p: RetrieveParams, rerank: dict[str, Any] | None, k: int, candidate_k: int,
                config: EngineConfig, notes: list[str]) -> int | None:
    """How many candidates the reranker scores: candidateK >= topN >= k, clamped to
    ``rerank_max_candidates`` (None: no rerank)."""
    if rerank is None:
        return None
    top_n = rerank.get("topN", rerank.get("top_n"))
    if top_n is None:
        top_n = min(candidate_k, max(2 * k, 20))
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
        raise InvalidParams("rerank.topN must be a positive integer", field="rerank.topN")
    if top_n < p.k or top_n > candidate_k:
        raise InvalidParams(f"rerank.topN must satisfy candidateK ({candidate_k}) >= topN >= "
                            f"k ({p.k})", field="rerank.topN")
    if top_n > config.rerank_max_candidates:
        notes.append(f"rerank.topN clamped to maxCandidates={config.rerank_max_candidates}")
    return min(top_n, config.rerank_max_candidates)


def _plan_graph_recall(p: RetrieveParams, unit: str,
                       offered: Mapping[str, tuple[int, ...]] | None,
                       unsupported: Unsupported) -> bool:
    """Whether the graph's PageRank list joins recall (a composed unit is composed from the
    graph anyway; without a graph it cannot)."""
    graph_recall = bool(p.graph_recall)
    if graph_recall and units.get(unit).composed:
        return False
    if graph_recall and "node" not in (offered if offered is not None else {}):
        unsupported("x-rcp-agentic-graphRecall", "this engine has no knowledge graph (build "
                    "it with build_graph / `rcp-agentic index --graph`)")
        return False
    return graph_recall


def _plan_fusion(p: RetrieveParams, mode: str, graph_recall: bool,
                 unsupported: Unsupported) -> tuple[FusionParams, dict[str, float]]:
    """The fusion method and each recall source's weight."""
    fusion = p.fusion or FusionParams()
    if fusion.method not in FUSIONS:
        unsupported("fusion.method", f"fusion {fusion.method!r} is not supported")
        fusion = FusionParams()
    if graph_recall and fusion.method == "convex":
        unsupported("fusion.method", "convex fusion combines exactly dense and sparse; use rrf "
                    "or weighted with x-rcp-agentic-graphRecall")
        fusion = FusionParams(weights=fusion.weights, rrf_k=fusion.rrf_k)
    weights = {name: 1.0 for name in RECALL_SOURCES}
    if fusion.weights is not None:
        for name, w in fusion.weights.items():
            if name not in weights:
                raise InvalidParams(f"fusion.weights has unknown retriever {name!r} (use "
                                    f"{', '.join(map(repr, RECALL_SOURCES))})",
                                    field=f"fusion.weights.{name}")
            if not w >= 0 or w == float("inf"):
                raise InvalidParams("fusion weights must be finite and >= 0",
                                    field=f"fusion.weights.{name}")
            weights[name] = float(w)
        if not any(weights.values()):
            raise InvalidParams("at least one fusion weight must be positive",
                                field="fusion.weights")
    if graph_recall and (fusion.weights is None or "graph" not in fusion.weights):
        # By default the graph's list carries as much of the vote as the others together
        # (HippoRAG fuses its PageRank ranking 1:1 with the hybrid one).
        weights["graph"] = sum(w for n, w in weights.items()
                               if n != "graph" and (mode == "hybrid" or n == mode)) or 1.0
    return fusion, weights


def _plan_unit(p: RetrieveParams, offered: Mapping[str, tuple[int, ...]] | None,
               unsupported: Unsupported
               ) -> tuple[str, list[tuple[str, int]], int | None, str]:
    """The unit, the (stored unit, level) pairs to pool, the level and the tree search.

    A levelled kind (tree-node) without ``level`` pools every level, leaves included
    (RAPTOR's collapsed tree); ``level: 0`` is its leaves, ``level: N`` one layer.
    """
    have = dict(offered) if offered is not None else {
        units.get(n).stored: (0,) for n in units.per_document_kinds()}
    unit = p.unit or "chunk"
    if unit not in units.RCP_UNITS:
        raise InvalidParams(f"unit {unit!r} is not an RCP unit", field="unit")
    if unit not in units.known() or units.get(unit).stored not in have:
        unsupported("unit", f"unit {unit!r} is not offered by this engine")
        unit = "chunk"
    kind = units.get(unit)
    levels = have[kind.stored]
    tree_search = p.tree_search or "collapsed"
    if tree_search not in TREE_SEARCHES:
        raise InvalidParams(f"x-rcp-agentic-treeSearch must be one of {', '.join(TREE_SEARCHES)}",
                            field="x-rcp-agentic-treeSearch")
    if not kind.levelled:
        if p.level:
            unsupported("level", f"level {p.level} does not exist: {unit} units are flat "
                        "(level 0)")
        if p.tree_search is not None:
            unsupported("x-rcp-agentic-treeSearch", f"{unit} units are not a tree")
        return unit, [(kind.stored, 0)], 0, "collapsed"
    zero = [(kind.level_zero, 0)] if kind.level_zero else []
    if kind.spans_levels:
        return _plan_spanning(p, unit, kind.stored, levels, unsupported)
    if p.level is None:
        return unit, zero + [(kind.stored, lv) for lv in levels], None, tree_search
    if p.tree_search is not None:
        unsupported("x-rcp-agentic-treeSearch", "tree search applies without a level")
    if p.level == 0 and zero:
        return unit, zero, 0, "collapsed"
    if p.level not in levels:
        shown = ", ".join(str(lv) for lv in (([0] if zero else []) + list(levels)))
        unsupported("level", f"level {p.level} does not exist: {unit} levels are {shown}")
        return unit, zero + [(kind.stored, lv) for lv in levels], None, "collapsed"
    return unit, [(kind.stored, p.level)], p.level, "collapsed"


def _plan_spanning(p: RetrieveParams, unit: str, stored: str, levels: tuple[int, ...],
                   unsupported: Unsupported
                   ) -> tuple[str, list[tuple[str, int]], int | None, str]:
    """The plan of a kind whose rows span levels (communities): no ``level`` pools every row
    once; ``level: L`` pools the rows stored at levels <= L (retrieve keeps those whose range
    reaches L: the complete partition at L)."""
    if p.tree_search is not None:
        unsupported("x-rcp-agentic-treeSearch", f"{unit} levels are partitions of the graph; "
                    "ask for one with level, or none to search every community")
    if p.level is None:
        return unit, [(stored, lv) for lv in levels], None, "collapsed"
    top = max(levels, default=0)
    if p.level > top:
        unsupported("level", f"level {p.level} does not exist: {unit} levels are 0..{top}")
        return unit, [(stored, lv) for lv in levels], None, "collapsed"
    return unit, [(stored, lv) for lv in levels if lv <= p.level], p.level, "collapsed"
