"""RCP §8 filters on Milvus: typed scalar columns for filter fields and a compiler to Milvus
boolean expressions that select exactly the units SQLite's compiled filter selects.

Built-in fields have ``b_`` columns, a user field ``m_<h>`` (its scalar), ``ma_<h>`` (its
array) and, for ``text`` fields, ``mj_<h>`` (the array's elements joined, for ``contains``),
``h`` hashing the field's name and type (:func:`field_columns`). A row Milvus cannot hold
faithfully, or a derived unit, is marked ``b_inexact``: a compiled expression never selects
it, and the caller adds those rows back from SQLite (:data:`INEXACT_ROWS`). Every leaf is
guarded with ``is null`` tests, so it is two-valued and ``not`` is plain negation, as in
SQLite; a collection that lacks a field's columns makes the compiler answer None (fall back
to SQLite). The columns in full: ``docs/internals.md``, "Filters on Milvus".
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pymilvus import DataType

from .filters import BUILTIN_FIELDS, compile_filter, parse_date

MAX_VARCHAR_BYTES = 65_535
MAX_ARRAY_CAPACITY = 4_096
JOIN_SEPARATOR = "\x1f"  # joins a text array's elements in its mj_ column
# A ``contains`` needle holding one of these is left to SQLite (see _Compiler.leaf).
LIKE_ESCAPED = ("%", "_", "\\")
INEXACT = "b_inexact"
INEXACT_ROWS = f"{INEXACT} == true"  # the rows a compiled filter leaves to SQLite
MAX_EXPR_CHARS = 1 << 20  # a longer expression is left to SQLite (None)
_INT64 = (-2**63, 2**63)

_SCALAR_TYPES: dict[str, DataType] = {
    "keyword": DataType.VARCHAR, "text": DataType.VARCHAR, "int": DataType.INT64,
    "float": DataType.DOUBLE, "bool": DataType.BOOL, "date": DataType.DOUBLE,
}
BUILTIN_COLUMNS: dict[str, str] = {name: f"b_{name}" for name in BUILTIN_FIELDS}


@dataclass(frozen=True)
class ColumnSpec:
    """One Milvus scalar or array column holding filter values (nullable but ``b_inexact``)."""

    name: str
    dtype: DataType
    element_type: DataType | None = None
    max_length: int | None = None
    max_capacity: int | None = None
    nullable: bool = True

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``CollectionSchema.add_field`` for this column."""
        out: dict[str, Any] = {"field_name": self.name, "datatype": self.dtype,
                               "nullable": self.nullable}
        if self.element_type is not None:
            out["element_type"] = self.element_type
        if self.max_length is not None:
            out["max_length"] = self.max_length
        if self.max_capacity is not None:
            out["max_capacity"] = self.max_capacity
        return out


@dataclass(frozen=True)
class FieldColumns:
    """The columns of one user field: scalar, array and (text fields only) joined array."""

    scalar: str
    array: str
    joined: str | None


@lru_cache(maxsize=4096)
def user_columns(name: str, ftype: str) -> FieldColumns:
    """Column names of user field ``name`` of type ``ftype``."""
    h = hashlib.sha1(f"{ftype}:{name}".encode()).hexdigest()[:16]
    return FieldColumns(f"m_{h}", f"ma_{h}", f"mj_{h}" if ftype == "text" else None)


def _varchar(name: str) -> ColumnSpec:
    return ColumnSpec(name, DataType.VARCHAR, max_length=MAX_VARCHAR_BYTES)


def field_columns(fields: Mapping[str, str]) -> list[ColumnSpec]:
    """Every filter column: built-ins, ``b_inexact`` and the columns of each user field in
    ``fields`` (name → type; built-in names in it are skipped)."""
    specs: list[ColumnSpec] = []
    for name, (ftype, _sql) in BUILTIN_FIELDS.items():
        col = BUILTIN_COLUMNS[name]
        specs.append(_varchar(col) if ftype in ("keyword", "text")
                     else ColumnSpec(col, _SCALAR_TYPES[ftype]))
    specs.append(ColumnSpec(INEXACT, DataType.BOOL, nullable=False))  # set on every row
    for name, ftype in sorted(fields.items()):
        if name in BUILTIN_FIELDS:
            continue
        cols = user_columns(name, ftype)
        dtype = _SCALAR_TYPES[ftype]
        text = dtype == DataType.VARCHAR
        specs.append(_varchar(cols.scalar) if text else ColumnSpec(cols.scalar, dtype))
        specs.append(ColumnSpec(cols.array, DataType.ARRAY, element_type=dtype,
                                max_length=MAX_VARCHAR_BYTES if text else None,
                                max_capacity=MAX_ARRAY_CAPACITY))
        if cols.joined:
            specs.append(_varchar(cols.joined))
    return specs


def add_columns(schema: Any, fields: Mapping[str, str]) -> None:
    """Add :func:`field_columns` to a pymilvus ``CollectionSchema``."""
    for spec in field_columns(fields):
        schema.add_field(**spec.kwargs())


class _Inexact(Exception):
    """A value Milvus cannot hold faithfully."""


def _store(ftype: str, value: Any) -> Any:
    """``value`` as its column holds it (the form SQLite compares), or raise _Inexact."""
    if value is None:
        return None
    if ftype in ("keyword", "text"):
        if not isinstance(value, str) or "\x00" in value:
            raise _Inexact
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise _Inexact from None
        if size > MAX_VARCHAR_BYTES:
            raise _Inexact
        return value
    if ftype == "bool":
        if isinstance(value, bool):
            return value
        raise _Inexact
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Inexact
    if ftype == "int":
        if isinstance(value, int) and _INT64[0] <= value < _INT64[1]:
            return value
        raise _Inexact
    # float and date columns are DOUBLE: an int must convert exactly, a float be finite
    out = float(value) if abs(value) < 2**1000 else math.inf
    if not math.isfinite(out) or (isinstance(value, int) and int(out) != value):
        raise _Inexact
    return out + 0.0  # -0.0 → 0.0: SQLite finds them equal, Milvus's `in` does not


def column_values(unit: str, idx: int, doc: Mapping[str, Any] | None, page_start: int | None,
                  page_end: int | None, fields: Mapping[str, str]) -> dict[str, Any]:
    """The filter column values of one unit row (every column of :func:`field_columns`).

    ``doc`` is the unit's document row (``id, source, title, file_type, modified_ms, fmeta``
    with ``fmeta`` a dict), None for a derived unit: then every column is NULL and the row is
    marked ``b_inexact`` (SQLite judges a derived unit by the chunks it covers).
    """
    out: dict[str, Any] = {spec.name: None for spec in field_columns(fields)}
    if doc is None:
        out[INEXACT] = True
        return out
    inexact = False

    def put(col: str, ftype: str, value: Any) -> None:
        nonlocal inexact
        try:
            out[col] = _store(ftype, value)
        except _Inexact:
            inexact = True

    builtin = {"doc_id": doc.get("id"), "source": doc.get("source"), "title": doc.get("title"),
               "file_type": doc.get("file_type"), "modified": doc.get("modified_ms"),
               "chunk_index": idx if unit == "chunk" else None,
               "page_start": page_start, "page_end": page_end}
    for name, value in builtin.items():
        put(BUILTIN_COLUMNS[name], BUILTIN_FIELDS[name][0], value)
    fmeta = doc.get("fmeta") or {}
    for name, ftype in fields.items():
        if name in BUILTIN_FIELDS or fmeta.get(name) is None:
            continue
        value = fmeta[name]
        cols = user_columns(name, ftype)
        if not isinstance(value, list):
            put(cols.scalar, ftype, value)
            continue
        try:
            if len(value) > MAX_ARRAY_CAPACITY:
                raise _Inexact
            items = [_store(ftype, v) for v in value]
            if any(v is None for v in items):
                raise _Inexact
            out[cols.array] = items
            if cols.joined and items:
                if any(JOIN_SEPARATOR in v for v in items):
                    raise _Inexact
                out[cols.joined] = _store(ftype, JOIN_SEPARATOR.join(items))
        except _Inexact:
            out[cols.array] = out[cols.joined or cols.array] = None
            inexact = True
    out[INEXACT] = inexact
    return out


# --- compiler --------------------------------------------------------------------------------

Expr = bool | str  # a folded constant or a two-valued Milvus expression


class _Fallback(Exception):
    """The filter cannot be run faithfully in this collection: SQLite must judge it."""


def _string(value: str) -> str:
    """A Milvus string literal: escapes that every Milvus parser knows; other bytes raw."""
    return '"' + (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
                  .replace("\r", "\\r")) + '"'


def _like_contains(needle: str) -> str:
    """A ``like`` literal matching any string that contains ``needle``."""
    escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return _string(f"%{escaped}%")


def _literal(ftype: str, value: Any) -> str:
    if ftype in ("keyword", "text"):
        return _string(value)
    if ftype == "bool":
        return "true" if value else "false"
    if ftype == "int":
        return str(int(value))
    return repr(float(value) + 0.0)  # shortest round-trip form (0.1, 1e+300); -0.0 → 0.0


def _join(op: str, parts: list[str]) -> str:
    """``parts`` joined by ``op`` as a balanced tree: Milvus's parser recurses once per operand
    of a flat chain, so 511 ``or``-ed leaves nest about 9 levels deep instead of 511."""
    if len(parts) <= 4:
        return "(" + f" {op} ".join(parts) + ")"
    half = len(parts) // 2
    return f"({_join(op, parts[:half])} {op} {_join(op, parts[half:])})"


def _combine(op: str, absorbing: bool, parts: tuple[Expr, ...]) -> Expr:
    """``parts`` joined by ``op``, constants folded: ``absorbing`` (False for ``and``, True for
    ``or``) decides it alone, the other constant drops out."""
    if any(p is absorbing for p in parts):
        return absorbing
    rest = [str(p) for p in parts if p is not (not absorbing)]
    if not rest:
        return not absorbing
    return rest[0] if len(rest) == 1 else _join(op, rest)


def _and(*parts: Expr) -> Expr:
    return _combine("and", False, parts)


def _or(*parts: Expr) -> Expr:
    return _combine("or", True, parts)


def _not(part: Expr) -> Expr:
    return (not part) if isinstance(part, bool) else f"(not {part})"


class _Compiler:
    def __init__(self, fields: Mapping[str, str], columns: Collection[str]) -> None:
        self.fields = fields
        self.columns = columns

    def col(self, name: str | None) -> str:
        if name is None or name not in self.columns:
            raise _Fallback(name)
        return name

    def node(self, node: dict[str, Any]) -> Expr:
        if "not" in node:
            return _not(self.node(node["not"]))
        if "and" in node:
            return _and(*(self.node(c) for c in node["and"]))
        if "or" in node:
            return _or(*(self.node(c) for c in node["or"]))
        return self.leaf(node["field"], node["op"], node["value"])

    def leaf(self, name: str, op: str, value: Any) -> Expr:
        builtin = name in BUILTIN_FIELDS
        ftype = BUILTIN_FIELDS[name][0] if builtin else self.fields[name]
        if builtin:
            scalar, array, joined = self.col(BUILTIN_COLUMNS[name]), None, None
        else:
            cols = user_columns(name, ftype)
            scalar, array = self.col(cols.scalar), self.col(cols.array)
            joined = cols.joined

        def lit(v: Any) -> str:
            if ftype == "date":
                v = parse_date(v)
            elif ftype == "float":
                v = float(v)
            if ftype in ("keyword", "text"):
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    raise _Fallback from None  # SQLite cannot bind it either
            return _literal(ftype, v)

        def unmatchable(v: Any) -> bool:
            """A string no exact row holds: over the column size, or with a NUL."""
            return ftype in ("keyword", "text") and (
                "\x00" in v or len(v.encode("utf-8", "surrogatepass")) > MAX_VARCHAR_BYTES)

        def on_scalar(cmp: str) -> str:
            return f"({scalar} is not null and {scalar} {cmp})"

        if op == "exists":
            present = _or(f"{scalar} is not null", f"{array} is not null" if array else False)
            return present if value else _not(present)
        if op in ("gt", "gte", "lt", "lte"):
            sym = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[op]
            return on_scalar(f"{sym} {lit(value)}")
        if op in ("eq", "ne"):
            eq = False if unmatchable(value) else on_scalar(f"== {lit(value)}")
            return eq if op == "eq" else _not(eq)
        if op in ("in", "nin"):
            inside = self.member(ftype, [v for v in value if not unmatchable(v)], scalar, lit)
            return inside if op == "in" else _not(inside)
        # contains
        if unmatchable(value):
            return False
        if ftype != "text":
            found = [on_scalar(f"== {lit(value)}")]
            if array:
                # ARRAY_CONTAINS_ANY: Milvus Lite refuses a negative number in ARRAY_CONTAINS
                found.append(f"({array} is not null and ARRAY_CONTAINS_ANY({array}, "
                             f"[{lit(value)}]))")
            return _or(*found)
        lit(value)  # refuses a needle that is not UTF-8
        if any(ch in value for ch in LIKE_ESCAPED):
            # Milvus Lite 3.2 drops the escape of ``\%`` / ``\_`` when such a ``like``
            # shares an ``or`` with an array function (measured: ``notes contains "%"`` or
            # ``big contains 0`` lost every row of the first): SQLite filters these.
            raise _Fallback(f"contains {value!r} needs a like escape")
        pattern = _like_contains(value)
        found = [on_scalar(f"like {pattern}")]
        if array and JOIN_SEPARATOR not in value:  # no stored element holds the separator
            mj = self.col(joined)
            found.append(f"({mj} is not null and {mj} like {pattern})")
        return _or(*found)

    @staticmethod
    def member(ftype: str, values: list[Any], scalar: str, lit: Any) -> Expr:
        if not values:
            return False
        if ftype == "bool":
            wanted = {bool(v) for v in values}
            if len(wanted) == 2:
                return f"{scalar} is not null"
            return f"({scalar} is not null and {scalar} == {lit(wanted.pop())})"
        literals = list(dict.fromkeys(lit(v) for v in values))
        return f"({scalar} is not null and {scalar} in [{', '.join(literals)}])"


def compile_milvus_filter(node: Any, fields: Mapping[str, str], columns: Collection[str]
                          ) -> str | None:
    """A Milvus boolean expression selecting the exact rows (``b_inexact`` false) that
    SQLite's :func:`~rcp_agentic.store.filters.compile_filter` selects.

    Validates with ``compile_filter`` first (same InvalidParams / OptionUnsupported). Returns
    None when the collection (``columns``: its column names) lacks a column the filter needs,
    a string literal is not valid UTF-8, a ``contains`` needle needs a ``like`` escape
    (:data:`LIKE_ESCAPED`) or the expression would exceed MAX_EXPR_CHARS: the
    caller then filters with SQLite. A string no exact row can hold (over 65,535 bytes, or
    with a NUL) is folded to a constant, so it never reaches Milvus. Bound an
    untrusted tree with ``check_filter_size`` first (recursive, like ``compile_filter``).
    """
    compile_filter(node, dict(fields))
    if INEXACT not in columns:
        return None
    try:
        expr = _Compiler(fields, columns).node(node)
    except _Fallback:
        return None
    guarded = _and(f"{INEXACT} == false", expr)
    if guarded is False:  # a constant no-row filter, written without a boolean literal
        return f"({INEXACT} == true and {INEXACT} == false)"
    return str(guarded) if len(str(guarded)) <= MAX_EXPR_CHARS else None
