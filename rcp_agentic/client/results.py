"""The typed results of the client methods: the models of :mod:`rcp_agentic.wire`.

``retrieve``, ``rerank``, ``graph``, ``query/transform``, ``memory/build`` and
``memory/recall`` return the same pydantic models as their :class:`~rcp_agentic.Engine`
counterparts (``transform``: the wire :class:`~rcp_agentic.wire.TransformResult` of the
engine's own result), parsed from the wire ``result`` by the model's ``model_validate``
(:func:`typed`). So ``result.hits[0].citation.title`` reads the same in process and over
the wire, and ``result.to_wire()`` gives the RCP object back (camelCase; unknown keys a
server adds are ignored, §4.6, and the result's ``_meta`` is kept as ``meta``). The wire
dict exactly as received: ``client.call(method, params)``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import ValidationError

from ..wire import (
    GraphResult,
    MemoryBuildResult,
    MemoryRecallResult,
    RerankResult,
    RetrieveResult,
    TransformResult,
    WireModel,
)
from .errors import TransportError

M = TypeVar("M", bound=WireModel)


def typed(model: type[M], method: str, result: Any) -> M:
    """The wire ``result`` of ``method`` as ``model``; TransportError when it is not one (a
    malformed response, as for a frame without a result)."""
    try:
        return model.model_validate(result)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "result"
        raise TransportError(f"a malformed {method} result: {where}: {first['msg']} "
                             f"(in {str(result)[:200]})") from exc


__all__ = ["GraphResult", "MemoryBuildResult", "MemoryRecallResult", "RerankResult",
           "RetrieveResult", "TransformResult", "typed"]
