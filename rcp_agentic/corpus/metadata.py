"""User metadata → the typed, filterable copy the engine stores beside it.

Declared fields (EngineConfig.filter_fields, or inferred from the first value seen
when ``infer_filter_fields`` is on) must keep their type across documents: a value
of another type is InvalidParams naming ``meta.<field>``. Values may be scalars or
arrays of scalars; dates are stored as epoch milliseconds. :func:`check_meta_shape`
bounds what a document may carry before anything else reads it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidParams
from ..store.filters import BUILTIN_FIELDS, coerce_value

_FIELD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")


def is_valid_field_name(name: str) -> bool:
    """Whether ``name`` can be a filterable field (letters, digits, ``_.-``; not a built-in)."""
    return bool(_FIELD_NAME.match(name)) and name not in BUILTIN_FIELDS


def check_meta_shape(meta: Any, *, max_keys: int, max_depth: int, where: str) -> None:
    """Refuse metadata with more than ``max_keys`` keys (nested objects' keys count too) or
    nested deeper than ``max_depth`` (the metadata object itself is depth 1).

    Walks iteratively, so any depth is refused with InvalidParams — ``data.field`` is
    ``meta.<name>`` for too deep a value, ``<where>.meta`` for too many keys — and never
    with a RecursionError. ``where`` names the document (``documents[3]``).
    """
    if not isinstance(meta, Mapping):
        return  # not an object: the caller's own validation says so
    containers = (Mapping, list, tuple)
    keys = len(meta)
    stack = [(v, 2, str(k)) for k, v in meta.items() if isinstance(v, containers)]
    while True:
        if keys > max_keys:
            raise InvalidParams(f"{where}.meta has more than {max_keys} keys (nested objects "
                                "included; max_meta_keys)", field=f"{where}.meta")
        if not stack:
            return
        value, depth, name = stack.pop()
        if depth > max_depth:
            raise InvalidParams(f"{where}.meta.{name} is nested deeper than {max_depth} levels "
                                "(max_meta_depth)", field=f"meta.{name}")
        children = value.values() if isinstance(value, Mapping) else value
        if isinstance(value, Mapping):
            keys += len(value)
        stack.extend((v, depth + 1, name) for v in children if isinstance(v, containers))


def infer_type(value: Any) -> str | None:
    """The field type a first value implies, or None when it cannot be filtered on."""
    if isinstance(value, list):
        types = {infer_type(v) for v in value}
        return types.pop() if len(types) == 1 else None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "keyword"
    return None


def filterable_meta(meta: dict[str, Any], fields: dict[str, str], *, infer: bool,
                    declared: frozenset[str] | set[str], new_fields: dict[str, str]
                    ) -> dict[str, Any]:
    """The typed copy of ``meta``'s filterable fields.

    ``fields`` are the known fields and ``declared`` those the user declared; fields
    inferred here are recorded in ``new_fields``, and an inferred int field meeting a
    float is widened to float there.
    """
    out: dict[str, Any] = {}
    for name, value in meta.items():
        ftype = fields.get(name) or new_fields.get(name)
        if ftype is None:
            if not infer or not is_valid_field_name(name) or value is None:
                continue
            ftype = infer_type(value)
            if ftype is None:
                continue
            new_fields[name] = ftype
        elif ftype == "int" and name not in declared and infer_type(value) == "float":
            ftype = new_fields[name] = "float"
        if value is None:
            continue
        try:
            if isinstance(value, list):
                out[name] = [coerce_value(ftype, v) for v in value]
            else:
                out[name] = coerce_value(ftype, value)
        except ValueError as exc:
            raise InvalidParams(f"metadata field {name!r} is declared {ftype}: {exc}",
                                field=f"meta.{name}") from None
    return out
