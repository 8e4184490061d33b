"""RCP/1 metadata filters (§8): validate a filter tree against typed fields, compile it to SQL.

The engine evaluates every filter in SQLite, whichever retrieval mode runs, so a filter
selects exactly the same units in dense, sparse and hybrid mode. The semantics users rely on
are documented in ``docs/agentic.md``, "Filters": a leaf on a missing field is false except
``ne``, ``nin`` and ``exists: false``; ``not`` is plain negation; ``contains`` is a
case-sensitive substring test on ``text`` fields and membership on arrays; an array never
equals or orders against a scalar; strings compare case-sensitively, byte by byte; dates
compare as instants; ``chunk_index`` exists only on chunk units.

Size: a filter is at most ``max_filter_depth`` objects deep and ``max_filter_nodes`` large
(objects plus the values of ``in``/``nin`` lists); :func:`check_filter_size` refuses a
larger one with InvalidParams on ``filter`` before it is compiled, so no client-sent tree
reaches SQLite's parser or expression limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..errors import InvalidParams, OptionUnsupported

OPERATORS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "exists")
ORDERED_TYPES = ("int", "float", "date")

# Built-in fields and the SQL column each one reads (u = units row, d = documents row).
BUILTIN_FIELDS: dict[str, tuple[str, str]] = {
    "doc_id": ("keyword", "u.doc_id"),
    "source": ("keyword", "d.source"),
    "title": ("text", "d.title"),
    "file_type": ("keyword", "d.file_type"),
    "modified": ("date", "d.modified_ms"),
    "chunk_index": ("int", "(CASE WHEN u.unit = 'chunk' THEN u.idx END)"),
    "page_start": ("int", "u.page_start"),
    "page_end": ("int", "u.page_end"),
}


def parse_date(value: Any) -> float | None:
    """Epoch milliseconds of an RFC 3339 string or an integer epoch-ms; None if neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) < 2**1000 else None  # larger overflows a float
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            return None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return dt.timestamp() * 1000.0
    return None


def coerce_value(ftype: str, value: Any) -> Any:
    """The comparable form of one scalar of type ``ftype``, or raise ValueError."""
    if ftype in ("keyword", "text"):
        if isinstance(value, str):
            return value
    elif ftype == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif ftype == "float":
        if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)
                                        and abs(value) < 2**1000):
            return float(value)
    elif ftype == "bool":
        if isinstance(value, bool):
            return value
    elif ftype == "date":
        ms = parse_date(value)
        if ms is not None:
            return ms
    raise ValueError(f"expected a {ftype} value, got {type(value).__name__} {value!r}")


def check_filter_size(node: Any, *, max_depth: int, max_nodes: int) -> None:
    """Refuse a filter deeper than ``max_depth`` or larger than ``max_nodes`` (-32602, ``filter``).

    Depth counts filter objects from the root (a lone leaf is 1); size counts the
    objects and every value of an ``in``/``nin`` list. The walk is iterative and stops
    at the first limit crossed, so a tree 100,000 deep or wide costs no more than
    the limits. Malformed parts are left to :func:`compile_filter` to name.
    """
    nodes = 1
    stack: list[tuple[Any, int]] = [(node, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict):
            continue
        if depth > max_depth:
            raise InvalidParams(f"filter nests deeper than {max_depth} levels "
                                "(max_filter_depth)", field="filter")
        children = [item["not"]] if "not" in item else []
        for key in ("and", "or"):
            if isinstance(item.get(key), list):
                children.extend(item[key])
        value = item.get("value")
        nodes += len(children) + (len(value) if isinstance(value, list) else 0)
        if nodes > max_nodes:
            raise InvalidParams(f"filter has more than {max_nodes} nodes (operators, leaves and "
                                "in/nin values; max_filter_nodes)", field="filter")
        stack.extend((child, depth + 1) for child in children)


@dataclass(frozen=True)
class CompiledFilter:
    """A SQL boolean expression over ``units u JOIN documents d`` and its bound parameters.

    ``nodes`` counts the filter objects it was compiled from (for ordering operands).
    """

    sql: str
    params: tuple[Any, ...]
    nodes: int = 1


def compile_filter(node: Any, fields: dict[str, str], path: str = "filter") -> CompiledFilter:
    """Validate ``node`` against ``fields`` (user field → type) and compile it.

    Raises InvalidParams (with ``data.field``) for malformed trees, unknown fields
    and mistyped values, and OptionUnsupported for an operator RCP does not define.
    Recursive: bound an untrusted tree with :func:`check_filter_size` first.
    """
    if not isinstance(node, dict):
        raise InvalidParams(f"{path} must be an object", field=path)
    combinators = [k for k in ("and", "or", "not") if k in node]
    if combinators:
        if len(combinators) > 1 or "field" in node:
            raise InvalidParams(f"{path} must have exactly one of and/or/not or a field",
                                field=path)
        key = combinators[0]
        child = node[key]
        if key == "not":
            inner = compile_filter(child, fields, f"{path}.not")
            return CompiledFilter(f"(NOT {inner.sql})", inner.params, inner.nodes + 1)
        if not isinstance(child, list) or not child:
            raise InvalidParams(f"{path}.{key} must be a non-empty array", field=f"{path}.{key}")
        parts = [compile_filter(c, fields, f"{path}.{key}[{i}]") for i, c in enumerate(child)]
        # Largest operand first: SQLite's parser stacks every operand left of a nested
        # one, so this keeps any tree within the size limits under its stack of 100.
        parts.sort(key=lambda part: -part.nodes)
        joiner = " AND " if key == "and" else " OR "
        return CompiledFilter("(" + joiner.join(p.sql for p in parts) + ")",
                              tuple(v for p in parts for v in p.params),
                              1 + sum(p.nodes for p in parts))
    return _compile_leaf(node, fields, path)


def _compile_leaf(node: dict[str, Any], fields: dict[str, str], path: str) -> CompiledFilter:
    name = node.get("field")
    if not isinstance(name, str) or not name:
        raise InvalidParams(f"{path}.field must be a non-empty string", field=f"{path}.field")
    fpath = f"filter.{name}"
    op = node.get("op")
    if not isinstance(op, str):
        raise InvalidParams(f"{path}.op must be a string", field=fpath)
    if op not in OPERATORS:
        raise OptionUnsupported(f"filter operator {op!r} is not supported", option=op)
    if name in BUILTIN_FIELDS:
        ftype, col = BUILTIN_FIELDS[name]
        json_path = None
    elif name in fields:
        ftype = fields[name]
        json_path = '$."' + name + '"'
        # An array value never equals or orders against a scalar; `contains` tests its elements.
        col = (f"(CASE json_type(d.fmeta, '{json_path}') WHEN 'array' THEN NULL"
               f" ELSE json_extract(d.fmeta, '{json_path}') END)")
    else:
        raise InvalidParams(f"filter field {name!r} is not a declared filterable field", field=fpath)
    if "value" not in node:
        raise InvalidParams(f"{path}.value is required", field=fpath)
    value = node["value"]

    def one(v: Any) -> Any:
        try:
            out = coerce_value(ftype, v)
        except ValueError as exc:
            raise InvalidParams(f"filter on {name!r} ({ftype}): {exc}", field=fpath) from None
        if isinstance(out, int) and not isinstance(out, bool) and not -2**63 <= out < 2**63:
            raise InvalidParams(f"filter on {name!r}: integer out of the 64-bit range",
                                field=fpath)
        if isinstance(out, float) and not math.isfinite(out):
            raise InvalidParams(f"filter on {name!r}: a number must be finite", field=fpath)
        return int(out) if isinstance(out, bool) else out

    if op == "exists":
        if not isinstance(value, bool):
            raise InvalidParams(f"exists on {name!r} takes true or false", field=fpath)
        present = (f"(json_type(d.fmeta, '{json_path}') IS NOT NULL)" if json_path
                   else f"({col} IS NOT NULL)")
        return CompiledFilter(present if value else f"(NOT {present})", ())
    if op in ("gt", "gte", "lt", "lte"):
        if ftype not in ORDERED_TYPES:
            raise InvalidParams(f"operator {op} needs an int, float or date field; {name!r} is "
                                f"{ftype}", field=fpath)
        sym = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[op]
        return CompiledFilter(f"COALESCE({col} {sym} ?, 0)", (one(value),))
    if op in ("eq", "ne"):
        if isinstance(value, (list, dict)) or value is None:
            raise InvalidParams(f"{op} on {name!r} takes a scalar value", field=fpath)
        expr = f"COALESCE({col} = ?, 0)"
        return CompiledFilter(expr if op == "eq" else f"(NOT {expr})", (one(value),))
    if op in ("in", "nin"):
        if not isinstance(value, list):
            raise InvalidParams(f"{op} on {name!r} takes an array of values", field=fpath)
        vals = tuple(one(v) for v in value)
        if not vals:
            return CompiledFilter("0" if op == "in" else "1", ())
        expr = f"COALESCE({col} IN ({','.join('?' * len(vals))}), 0)"
        return CompiledFilter(expr if op == "in" else f"(NOT {expr})", vals)
    # contains
    if isinstance(value, (list, dict)) or value is None:
        raise InvalidParams(f"contains on {name!r} takes a scalar value", field=fpath)
    v = one(value)
    if ftype == "text":
        if json_path is None:
            return CompiledFilter(f"COALESCE(instr({col}, ?) > 0, 0)", (v,))
        return CompiledFilter(
            f"(CASE json_type(d.fmeta, '{json_path}') WHEN 'array' THEN EXISTS(SELECT 1 FROM "
            f"json_each(d.fmeta, '{json_path}') WHERE instr(value, ?) > 0) ELSE "
            f"COALESCE(instr({col}, ?) > 0, 0) END)", (v, v))
    if json_path is None:
        return CompiledFilter(f"COALESCE({col} = ?, 0)", (v,))
    return CompiledFilter(
        f"(CASE json_type(d.fmeta, '{json_path}') WHEN 'array' THEN EXISTS(SELECT 1 FROM "
        f"json_each(d.fmeta, '{json_path}') WHERE value = ?) ELSE COALESCE({col} = ?, 0) END)",
        (v, v))
