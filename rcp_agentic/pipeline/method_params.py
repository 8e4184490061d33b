"""One params model per method: ``graph`` (§7.9), ``memory/build`` and ``memory/recall``
(§7.17) and ``query/transform`` (§7.8), as :mod:`.params` is ``retrieve``'s.

The dispatcher parses wire params (camelCase) with :meth:`MethodParams.wire`, under what its
session advertised; ``Engine.graph`` / ``memory_build`` / ``memory_recall`` / ``transform`` and
the graph ops build the same model from keyword arguments with :meth:`MethodParams.of`. Fields
are checked in order and the first problem raised: a malformed value is InvalidParams naming
``data.field``, an op, scope or method the session did not advertise OptionUnsupported
(``data.option``). Where a limit clamps and where it refuses is decided here, once
(:class:`Rules`, and "Limits: clamped or refused" in ``docs/server.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import (BaseModel, BeforeValidator, ConfigDict, PrivateAttr, ValidationError,
                      ValidationInfo, field_validator, model_validator)
from pydantic.alias_generators import to_camel

from ..config import EngineConfig
from ..errors import InvalidParams, OptionUnsupported
from ..options import VENDOR
from ..vocabulary import GRAPH_OPS, MEMORY_SCOPES, TRANSFORM_METHODS
from .params import DEFAULT_CONFIG, lone_surrogate_at, unknown_params

if TYPE_CHECKING:
    from typing_extensions import Self

# The bounds of the graph and memory ops, advertised under x-rcp-agentic.limits by the graph
# plug-in (its ``limits``), in this order; and the most queries one transformation returns.
MAX_HOPS = 3
MAX_NODES = 500
MAX_SEEDS = 64
MAX_CLUES = 50
MAX_MEMORY_DOCS = 256
MAX_COMMUNITIES = 100  # a communities page / the communities global ranks
MAX_SUMMARY_TOKENS = 8192  # tokens of a global summary
GRAPH_LIMITS: dict[str, int] = {
    "maxGraphHops": MAX_HOPS, "maxGraphNodes": MAX_NODES, "maxSeedIds": MAX_SEEDS,
    "maxClues": MAX_CLUES, "maxMemoryDocuments": MAX_MEMORY_DOCS,
    "maxCommunities": MAX_COMMUNITIES, "maxSummaryTokens": MAX_SUMMARY_TOKENS,
}
MAX_TRANSFORM_QUERIES = 10  # advertised as x-rcp-agentic.limits.maxTransformQueries
MAX_CURSOR_CHARS = 4096
# The limit ``k`` of each graph op is clamped to or refused above.
K_LIMITS = {"local": "maxK", "drift": "maxK", "global": "maxCommunities",
            "communities": "maxCommunities", "neighbors": "maxGraphNodes"}
DOCUMENT_KEYS = ("id", "text", "title", "meta")  # what memory/build adds of a document


@dataclass(frozen=True)
class Rules:
    """What params are checked against. ``limits``: each count's bound, by its advertised name.
    ``wire``: the request came over the protocol, so a well-formed count above its bound is
    clamped (§12) and a query is the schema's string; from Python (which negotiated nothing)
    such a count is refused with InvalidParams, and a query may also be Content blocks (§4.8,
    as retrieve's; lone surrogates cleaned). ``offered``: the capabilities a session
    advertised (§13.2), which an op, scope or method must be in (None: no check)."""

    limits: Mapping[str, int] = field(default_factory=dict)
    wire: bool = False
    offered: Mapping[str, Any] | None = None
    max_session_id_chars: int = DEFAULT_CONFIG.max_session_id_chars

    @classmethod
    def engine(cls, config: EngineConfig | None = None) -> Rules:
        """A Python call's: the engine's own bounds, refused above."""
        config = config or DEFAULT_CONFIG
        return cls({"maxK": config.max_k, **GRAPH_LIMITS,
                    "maxTransformQueries": MAX_TRANSFORM_QUERIES},
                   max_session_id_chars=config.max_session_id_chars)

    @classmethod
    def session(cls, caps: Mapping[str, Any], config: EngineConfig | None = None) -> Rules:
        """A wire request's: the limits ``caps`` advertise (``retrieve.maxK``,
        ``x-rcp-agentic.limits``), clamped above, and what they offer."""
        own = cls.engine(config)
        advertised = {"maxK": _obj(caps, "retrieve").get("maxK"),
                      **_obj(_obj(caps, VENDOR), "limits")}
        limits = {**own.limits, **{k: v for k, v in advertised.items()
                                   if isinstance(v, int) and not isinstance(v, bool)}}
        return cls(limits, True, caps, own.max_session_id_chars)


def _obj(caps: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = caps.get(key)
    return value if isinstance(value, Mapping) else {}


def _rules(info: ValidationInfo) -> Rules:
    return info.context if isinstance(info.context, Rules) else Rules.engine()


# --- the checks each field is made of -------------------------------------------------------

def text(value: Any, name: str, *, required: bool = False) -> str | None:
    """A string param without lone surrogates (None when absent and not ``required``)."""
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


def count(value: Any, name: str, rules: Rules, limit: str | None = None, *, minimum: int = 1,
          clamps: bool = False) -> int | None:
    """An integer param (5.0 is the integer 5 in JSON) of at least ``minimum``, at most the
    ``limit`` of ``rules``: clamped to it on the wire or when it always ``clamps``, refused
    above it otherwise."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParams(f"{name} must be an integer", field=name)
    if value < minimum:
        raise InvalidParams(f"{name} must be at least {minimum}", field=name)
    bound = rules.limits.get(limit) if limit else None
    if bound is None or value <= bound:
        return value
    if rules.wire or clamps:
        return bound
    raise InvalidParams(f"{name} must be between {minimum} and {bound}", field=name)


def choice(value: Any, name: str, defined: tuple[str, ...], rules: Rules,
           offered: tuple[str, str]) -> str | None:
    """One of the ``defined`` names, and on the wire one the session advertised (``offered``:
    where in its capabilities)."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in defined:
        raise InvalidParams(f"{name} must be one of {', '.join(defined)}", field=name)
    if rules.offered is not None:
        listed = _obj(rules.offered, offered[0]).get(offered[1])
        if not isinstance(listed, list) or value not in listed:
            raise OptionUnsupported(f"{name} {value!r} is not offered by this server (offered: "
                                    f"{listed!r})", option=name)
    return value


def query(value: Any, rules: Rules, *, required: bool, blocks: bool = True) -> Any:
    """The ``query`` param: on the wire a string without lone surrogates (:func:`text`); from
    Python also text Content blocks when ``blocks`` (``query_text`` reads either later)."""
    if rules.wire:
        return text(value, "query", required=required)
    if value is None and required:
        raise InvalidParams("query is required", field="query")
    if not blocks and value is not None and not isinstance(value, str):
        raise InvalidParams("query must be a string", field="query")
    return value


def session_id(value: Any, max_chars: int, name: str = "sessionId") -> str | None:
    """A session id: a non-empty string of at most ``max_chars`` (None when absent)."""
    value = text(value, name)
    if value is None:
        return None
    if not value:
        raise InvalidParams(f"{name} must be a non-empty string", field=name)
    if len(value) > max_chars:
        raise InvalidParams(f"{name} has more than {max_chars} characters", field=name)
    return value


def filter_object(value: Any) -> dict[str, Any] | None:
    """The RCP §8 ``filter``: an object (its tree is checked where it is compiled)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidParams("filter must be an object", field="filter")
    return dict(value)


# --- the fields they share -----------------------------------------------------------------

def _counted(name: str, limit: str | None = None, *, minimum: int = 1, clamps: bool = False,
             default: int | None = None) -> BeforeValidator:
    """The check of a count field (:func:`count`), ``default`` when absent."""
    def check(value: Any, info: ValidationInfo) -> int | None:
        checked = count(value, name, _rules(info), limit, minimum=minimum, clamps=clamps)
        return default if checked is None else checked
    return BeforeValidator(check)


MemoryId = Annotated[str | None, BeforeValidator(lambda value: text(value, "memoryId"))]
# A session id is a string where it stands, non-empty and short enough once every other param
# is checked (:meth:`MethodParams._session_id_in_bounds`).
SessionId = Annotated[str | None, BeforeValidator(lambda value: text(value, "sessionId"))]
Filter = Annotated[dict[str, Any] | None, BeforeValidator(filter_object)]


# --- the models -----------------------------------------------------------------------------

class MethodParams(BaseModel):
    """The params of one method call, checked (see the module doc)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              extra="ignore", validate_default=True, frozen=True)
    METHOD: ClassVar[str]
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    # Where a wire result carries ``notes``: its ``usage``, or ``_meta`` (a result without one).
    NOTES_IN: ClassVar[str] = "usage"
    _notes: list[str] = PrivateAttr(default_factory=list)

    @property
    def notes(self) -> list[str]:
        """The unknown wire params the request carried (for the result's notes)."""
        return self._notes

    @classmethod
    def wire_names(cls) -> frozenset[str]:
        """Every param the method reads on the wire: its fields', ``_meta`` and ``strict``."""
        return frozenset({*(f.alias or n for n, f in cls.model_fields.items()), "_meta",
                          "strict"})

    @classmethod
    def of(cls, config: EngineConfig | None = None, /, **kwargs: Any) -> Self:
        """From Python keyword arguments (snake_case), under the engine's own :class:`Rules`."""
        for name in kwargs:
            if name not in cls.model_fields:
                raise TypeError(f"{cls.METHOD} got an unexpected keyword argument {name!r}")
        return cls._checked(kwargs, Rules.engine(config))

    @classmethod
    def wire(cls, raw: Any, caps: Mapping[str, Any] | None = None,
             config: EngineConfig | None = None) -> Self:
        """From wire params (camelCase): an unknown param noted (refused under an explicit
        ``"strict": true``, :func:`.params.unknown_params`); under a session's ``caps``
        (:meth:`Rules.session`), else the engine's own rules."""
        if not isinstance(raw, Mapping):
            raise InvalidParams("params must be an object", field="params")
        strict = raw.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise InvalidParams("strict must be a boolean", field="strict")
        names = cls.wire_names()
        notes = unknown_params(raw, names, method=cls.METHOD)
        rules = Rules.session(caps, config) if caps is not None else Rules.engine(config)
        params = cls._checked({k: v for k, v in raw.items() if k in names}, rules)
        params._notes = notes
        return params

    @classmethod
    def _checked(cls, values: dict[str, Any], rules: Rules) -> Self:
        try:
            return cls.model_validate(values, context=rules)
        except ValidationError as exc:  # a shape no check above foresaw
            where = ".".join(str(p) for p in exc.errors()[0]["loc"]) or "params"
            raise InvalidParams(f"{where} is not valid", field=where) from None

    @model_validator(mode="before")
    @classmethod
    def _required_reach_their_check(cls, data: Any) -> Any:
        """A required param left out reaches its field's check, which names it."""
        if isinstance(data, dict):
            return {**{name: None for name in cls.REQUIRED}, **data}
        return data

    @model_validator(mode="after")
    def _session_id_in_bounds(self, info: ValidationInfo) -> Self:
        """A ``session_id`` given is non-empty and at most ``max_session_id_chars`` long."""
        value = getattr(self, "session_id", None)
        if value is not None:
            session_id(value, _rules(info).max_session_id_chars)
        return self


class GraphParams(MethodParams):
    """``graph`` (§7.9): ``op`` and what it reads — ``query`` (``local``, ``global``,
    ``drift``), ``k``, ``seed_ids`` and ``hops`` (``neighbors``), ``level`` (a community
    level), ``session_id``, ``cursor`` (``communities``), ``token_budget`` (``global``, a
    vendor extra) and ``filter`` (every op)."""

    METHOD = "graph"
    REQUIRED = ("op",)
    op: str
    query: Any = None  # a string; from Python also Content blocks (:class:`Rules`)
    k: int | None = None
    seed_ids: list[str] | None = None
    hops: Annotated[int | None, _counted("hops", "maxGraphHops")] = None
    level: Annotated[int | None, _counted("level", minimum=0)] = None  # the ops check its levels
    session_id: SessionId = None
    cursor: str | None = None
    token_budget: int | None = None
    filter: Filter = None

    @field_validator("op", mode="before")
    @classmethod
    def _op(cls, value: Any, info: ValidationInfo) -> str:
        if value is None:
            raise InvalidParams("op is required", field="op")
        return str(choice(value, "op", GRAPH_OPS, _rules(info), ("graph", "ops")))

    @field_validator("query", mode="before")
    @classmethod
    def _query(cls, value: Any, info: ValidationInfo) -> Any:
        return query(value, _rules(info), required=info.data["op"] == "local")

    @field_validator("k", mode="before")
    @classmethod
    def _k(cls, value: Any, info: ValidationInfo) -> int | None:
        return count(value, "k", _rules(info), K_LIMITS[info.data["op"]])

    @field_validator("seed_ids", mode="before")
    @classmethod
    def _seed_ids(cls, value: Any, info: ValidationInfo) -> list[str] | None:
        if value is None and info.data["op"] != "neighbors":
            return None
        if value is None:
            raise InvalidParams("op 'neighbors' needs seedIds", field="seedIds")
        if not isinstance(value, (list, tuple)):
            raise InvalidParams("seedIds must be an array of node ids", field="seedIds")
        if not value:
            raise InvalidParams("seedIds must not be empty", field="seedIds")
        limit = _rules(info).limits.get("maxSeedIds")
        if limit is not None and len(value) > limit:  # dropping seeds would change the answer
            raise InvalidParams(f"seedIds holds {len(value)} ids; the limit is {limit}",
                                field="seedIds")
        for i, seed in enumerate(value):
            if not isinstance(seed, str) or lone_surrogate_at(seed, "") is not None:
                raise InvalidParams("a seed id must be a string of valid Unicode",
                                    field=f"seedIds[{i}]")
        return list(value)

    @field_validator("cursor", mode="before")
    @classmethod
    def _cursor(cls, value: Any, info: ValidationInfo) -> str | None:
        cursor = text(value, "cursor")
        if cursor is None:
            return None
        if info.data["op"] != "communities":
            raise OptionUnsupported("cursor pages the communities op only", option="cursor")
        if not cursor or len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii():
            raise InvalidParams("cursor is not one this server returned", field="cursor")
        return cursor

    @field_validator("token_budget", mode="before")
    @classmethod
    def _token_budget(cls, value: Any, info: ValidationInfo) -> int | None:
        budget = count(value, "tokenBudget", _rules(info), "maxSummaryTokens")
        if budget is not None and info.data["op"] != "global":
            raise OptionUnsupported("tokenBudget applies to the global op only",
                                    option="tokenBudget")
        return budget


class MemoryBuildParams(MethodParams):
    """``memory/build`` (§7.17): ``scope`` (``global``: the corpus's graph, ``documents``
    added to the corpus; ``session``: the entities ``documents`` name, kept under
    ``session_id`` — or the id of a ``memory_id`` ``session:<id>``), ``memory_id`` and
    ``filter`` (the entities a session memory links)."""

    METHOD = "memory/build"
    scope: str | None = None  # "global" when absent: not checked against the offered scopes
    documents: list[dict[str, Any]] | None = None
    memory_id: MemoryId = None
    session_id: str | None = None
    filter: Filter = None

    @field_validator("scope", mode="before")
    @classmethod
    def _scope(cls, value: Any, info: ValidationInfo) -> str:
        return choice(value, "scope", MEMORY_SCOPES, _rules(info), ("memory", "scopes")) \
            or "global"

    @field_validator("documents", mode="before")
    @classmethod
    def _documents(cls, value: Any, info: ValidationInfo) -> list[dict[str, Any]] | None:
        if value is None:
            return None
        if not isinstance(value, (list, tuple)):
            raise InvalidParams("documents must be an array", field="documents")
        limit = _rules(info).limits.get("maxMemoryDocuments")
        if limit is not None and len(value) > limit:
            raise InvalidParams(f"documents holds {len(value)} items; the limit is {limit}",
                                field="documents")
        out = []
        for i, doc in enumerate(value):
            if not isinstance(doc, Mapping):
                raise InvalidParams("a document must be an object", field=f"documents[{i}]")
            if not isinstance(doc.get("text"), str):
                raise InvalidParams("each document needs a string text",
                                    field=f"documents[{i}].text")
            if doc.get("id") is not None and not isinstance(doc["id"], str):
                raise InvalidParams("a document id must be a string", field=f"documents[{i}].id")
            bad = lone_surrogate_at(dict(doc), f"documents[{i}]")
            if bad is not None:
                raise InvalidParams(f"{bad} holds a lone UTF-16 surrogate (not valid Unicode)",
                                    field=bad)
            out.append({k: v for k, v in doc.items() if k in DOCUMENT_KEYS})
        return out

    @field_validator("session_id", mode="before")
    @classmethod
    def _session_id(cls, value: Any, info: ValidationInfo) -> str | None:
        value = text(value, "sessionId")
        if info.data["scope"] != "session":
            return None  # only a session memory is kept under a session
        memory_id = info.data["memory_id"]
        if value is None and memory_id is not None and memory_id.startswith("session:"):
            value = memory_id[len("session:"):]
        if not value:
            raise InvalidParams("scope 'session' needs a sessionId (or a memoryId "
                                "'session:<sessionId>')", field="sessionId")
        return value


class MemoryRecallParams(MethodParams):
    """``memory/recall`` (§7.17): clues for ``query`` from the memory ``memory_id`` (default:
    the corpus's graph now), steered by ``session_id``'s, at most ``n``, within ``filter``."""

    METHOD = "memory/recall"
    REQUIRED = ("query",)
    query: Any  # a string; from Python also Content blocks (:class:`Rules`)
    memory_id: MemoryId = None
    session_id: SessionId = None
    n: Annotated[int, _counted("n", "maxClues", default=5)] = 5
    filter: Filter = None

    @field_validator("query", mode="before")
    @classmethod
    def _query(cls, value: Any, info: ValidationInfo) -> Any:
        return query(value, _rules(info), required=True)


class TransformParams(MethodParams):
    """``query/transform`` (§7.8): ``query`` transformed by ``method`` into at most ``n``
    queries (``multi-query``, ``decompose``); ``n`` is clamped to
    :data:`MAX_TRANSFORM_QUERIES` for every caller."""

    METHOD = "query/transform"
    REQUIRED = ("query", "method")
    NOTES_IN = "_meta"  # the result has no usage (§6.2)
    query: str
    method: str
    n: Annotated[int, _counted("n", "maxTransformQueries", clamps=True, default=3)] = 3

    @field_validator("query", mode="before")
    @classmethod
    def _query(cls, value: Any, info: ValidationInfo) -> str:
        return str(query(value, _rules(info), required=True, blocks=False))

    @field_validator("method", mode="before")
    @classmethod
    def _method(cls, value: Any, info: ValidationInfo) -> str:
        if value is None:
            raise InvalidParams("method is required", field="method")
        return str(choice(value, "method", TRANSFORM_METHODS, _rules(info),
                          ("transform", "methods")))
