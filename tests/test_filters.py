"""RCP/1 metadata filters (§8): engine results against an independent reference evaluator, and errors.

The reference evaluator below re-implements the semantics documented at the top of
``rcp_agentic/store/filters.py`` in plain Python (it shares no code with the
package): a leaf on a missing field is false except ``ne``/``nin``/``exists: false``;
``contains`` is a case-sensitive substring test on ``text`` fields and element
membership on arrays (equality on other scalars); ``date`` values compare as instants.
Where the docs are silent it takes the reading of the §8 table: ``eq``/``ne``/``in``/
``nin`` and ordered comparisons compare the whole value, so an array never equals (or
is ordered against) a scalar; element membership is what ``contains`` is for.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from conftest import DOCS, backend_overrides
from hypothesis import given, settings
from hypothesis import strategies as st

from rcp_agentic import Engine
from rcp_agentic.errors import InvalidParams, OptionUnsupported
from rcp_agentic.store.filters import compile_filter

# --- the corpus as the reference sees it ------------------------------------------------

USER_TYPES = {"lang": "keyword", "year": "int", "score": "float", "tags": "keyword",
              "reviewed": "bool", "published": "date"}
BUILTIN_TYPES = {"doc_id": "keyword", "chunk_index": "int"}
FIELD_TYPES = {**USER_TYPES, **BUILTIN_TYPES}
ORDERED = ("int", "float", "date")
DOC_IDS = {d["id"] for d in DOCS}
# One query holding words of every document, so sparse retrieval scores every unit > 0
# and the sparse candidate set is the whole corpus; any filtered-out unit is the filter's doing.
QUERY_ALL = " ".join(d["text"] for d in DOCS)
RETRIEVE_ALL = {"k": 50, "candidate_k": 200}

_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?"
                      r"([Zz]|[+-]\d{2}:\d{2})")


def ref_instant(value: Any) -> float:
    """Epoch milliseconds of an RFC 3339 string or integer epoch-ms, computed by hand."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    m = _RFC3339.fullmatch(value)
    assert m, value
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    ms = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) * 1000.0
    if m.group(7):
        ms += float("0" + m.group(7)) * 1000.0
    off = m.group(8)
    if off not in ("Z", "z"):
        sign = 1 if off[0] == "+" else -1
        ms -= sign * (int(off[1:3]) * 60 + int(off[4:6])) * 60_000
    return ms


def unit_record(doc: dict[str, Any], builtins: dict[str, Any] | None = None) -> dict[str, Any]:
    """The field values of one unit of ``doc``: its built-ins (by default those of a chunk unit;
    every DOCS text fits one chunk, chunk 0) and the document's user metadata."""
    rec = dict(builtins) if builtins is not None else {"doc_id": doc["id"], "chunk_index": 0}
    rec.update(doc["meta"])
    return rec


def _norm(ftype: str, v: Any) -> Any:
    if ftype == "date":
        return ref_instant(v)
    if ftype == "float":
        return float(v)
    return v


def ref_eval(node: dict[str, Any], rec: dict[str, Any], types: dict[str, str]) -> bool:
    """The reference semantics of one filter tree on one unit's fields."""
    if "and" in node:
        return all(ref_eval(c, rec, types) for c in node["and"])
    if "or" in node:
        return any(ref_eval(c, rec, types) for c in node["or"])
    if "not" in node:
        return not ref_eval(node["not"], rec, types)
    name, op, value = node["field"], node["op"], node["value"]
    ftype = types[name]
    if op == "exists":
        return (name in rec) is value
    if name not in rec:
        return op in ("ne", "nin")
    stored = rec[name]
    is_array = isinstance(stored, list)

    def equal(x: Any) -> bool:
        return not is_array and _norm(ftype, stored) == _norm(ftype, x)

    if op == "eq":
        return equal(value)
    if op == "ne":
        return not equal(value)
    if op == "in":
        return any(equal(x) for x in value)
    if op == "nin":
        return not any(equal(x) for x in value)
    if op in ("gt", "gte", "lt", "lte"):
        if is_array:
            return False
        a, b = _norm(ftype, stored), _norm(ftype, value)
        return {"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[op]
    assert op == "contains"
    items = stored if is_array else [stored]
    if ftype == "text":
        return any(value in item for item in items)
    return any(_norm(ftype, item) == _norm(ftype, value) for item in items)


def ref_select(node: dict[str, Any],
               builtins: dict[str, dict[str, Any]] | None = None) -> set[str]:
    """Ids of the DOCS whose unit satisfies ``node``; ``builtins`` maps doc id → built-in values."""
    return {d["id"] for d in DOCS
            if ref_eval(node, unit_record(d, builtins and builtins[d["id"]]), FIELD_TYPES)}


def mentions(node: Any, field: str) -> bool:
    if isinstance(node, dict):
        return node.get("field") == field or any(mentions(v, field) for v in node.values())
    if isinstance(node, list):
        return any(mentions(v, field) for v in node)
    return False


# --- engines --------------------------------------------------------------------------


def _dated(path: Path, embedder: Any, backend: str) -> Engine:
    """DOCS with ``published`` declared a date (strings would otherwise be inferred keyword)."""
    eng = Engine(path, embedder=embedder, filter_fields={"published": "date"},
                 **backend_overrides(backend, path))
    eng.add_documents(DOCS)
    return eng


@pytest.fixture(scope="module")
def dated_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any,
                 backend: str) -> Iterator[Engine]:
    """The dated corpus in each recall backend: what a filter selects must not depend on it."""
    eng = _dated(tmp_path_factory.mktemp(f"filters-{backend}") / "engine", embedder, backend)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def checked_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    """The dated corpus in the default backend, for the errors of filter validation (which
    happens before recall, the same for every backend)."""
    eng = _dated(tmp_path_factory.mktemp("filters-checked") / "engine", embedder, "embedded")
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def hit_builtins(dated_engine: Engine) -> dict[str, dict[str, dict[str, Any]]]:
    """Per unit kind, doc id → the built-in fields its (only) unit's hit reports in ``meta``.

    The reference filters on exactly the values a caller sees on the hits, so a filter
    and the hits it returns can never disagree about a built-in field.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for unit in UNITS:
        hits = dated_engine.retrieve(QUERY_ALL, unit=unit, mode="dense", **RETRIEVE_ALL).hits
        out[unit] = {h.meta["doc_id"]: {f: h.meta[f] for f in BUILTIN_TYPES if f in h.meta}
                     for h in hits}
        assert len(out[unit]) == len(hits) == len(DOCS), unit
    return out


def retrieved(eng: Engine, flt: dict[str, Any] | None, **options: Any) -> list[str]:
    hits = eng.retrieve(QUERY_ALL, filter=flt, **RETRIEVE_ALL, **options).hits
    return [h.meta["doc_id"] for h in hits]


MODES: list[dict[str, Any]] = [
    {"mode": "dense"}, {"mode": "sparse"},
    {"mode": "hybrid", "fusion": {"method": "rrf"}},
    {"mode": "hybrid", "fusion": {"method": "weighted"}},
    {"mode": "hybrid", "fusion": {"method": "convex"}},
]
UNITS = ("chunk", "document")


def test_engine_fields_and_unfiltered_baseline(
        dated_engine: Engine, hit_builtins: dict[str, dict[str, dict[str, Any]]]) -> None:
    """The premises of the property: field types as declared/inferred, no filter returns every
    document once in every mode and unit, and chunk units are chunk 0 of their document."""
    fields = dated_engine.filter_fields()
    for name, ftype in FIELD_TYPES.items():
        assert fields[name] == ftype, name
    for unit in UNITS:
        for mode in MODES:
            got = retrieved(dated_engine, None, unit=unit, **mode)
            assert sorted(got) == sorted(DOC_IDS), (unit, mode)
    assert hit_builtins["chunk"] == {d: {"doc_id": d, "chunk_index": 0} for d in DOC_IDS}
    assert all(b["doc_id"] == d for d, b in hit_builtins["document"].items())


# --- the hypothesis strategy ----------------------------------------------------------


def _rfc3339(dt: datetime, offset_minutes: int, style: str) -> str:
    local = dt.astimezone(timezone(timedelta(minutes=offset_minutes)))
    base = local.strftime("%Y-%m-%dT%H:%M:%S")
    if local.microsecond:
        base += f".{local.microsecond // 1000:03d}"
    if offset_minutes == 0 and style == "Z":
        return base + "Z"
    sign = "+" if offset_minutes >= 0 else "-"
    hh, mm = divmod(abs(offset_minutes), 60)
    return f"{base}{sign}{hh:02d}:{mm:02d}"


DOC_DATES = [datetime.fromisoformat(d["meta"]["published"].replace("Z", "+00:00"))
             for d in DOCS if "published" in d["meta"]]
_instants = st.one_of(
    st.sampled_from(DOC_DATES),
    st.sampled_from(DOC_DATES).flatmap(
        lambda dt: st.sampled_from([timedelta(milliseconds=1), timedelta(hours=-3),
                                    timedelta(days=400)]).map(lambda d: dt + d)),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2030, 1, 1),
                 timezones=st.just(timezone.utc)).map(
        lambda dt: dt.replace(microsecond=dt.microsecond // 1000 * 1000)),
)
_date_values = st.tuples(_instants, st.sampled_from([0, 0, 120, -300, 330, 14 * 60]),
                         st.sampled_from(["Z", "offset", "epoch"])).map(
    lambda t: round(t[0].timestamp() * 1000) if t[2] == "epoch" else _rfc3339(*t))

SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "lang": st.one_of(st.sampled_from(["en", "de", "fr", "EN", "e", "es", "", "ën"]),
                      st.text(max_size=3)),
    "year": st.one_of(st.sampled_from(sorted({d["meta"]["year"] for d in DOCS})),
                      st.integers(1990, 2030)),
    "score": st.one_of(st.sampled_from([0.1, 0.5, 0.9, 1.1, 1.5, 2.0, 2, 1, 0]),
                       st.floats(-1, 3, allow_nan=False), st.integers(-1, 3)),
    "tags": st.sampled_from(["health", "neuro", "ir", "biology", "neural", "fusion", "Health",
                             "neur", "x"]),
    "reviewed": st.booleans(),
    "published": _date_values,
    "doc_id": st.sampled_from(sorted(DOC_IDS) + ["d9", "D1", "d", ""]),
    "chunk_index": st.integers(-2, 3),
}


@st.composite
def leaves(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(FIELD_TYPES)))
    ops = ["eq", "ne", "in", "nin", "contains", "exists"]
    if FIELD_TYPES[name] in ORDERED:
        ops += ["gt", "gte", "lt", "lte"]
    op = draw(st.sampled_from(ops))
    if op == "exists":
        value: Any = draw(st.booleans())
    elif op in ("in", "nin"):
        value = draw(st.lists(SCALARS[name], max_size=4))
    else:
        value = draw(SCALARS[name])
    return {"field": name, "op": op, "value": value}


def filter_trees(depth: int = 3) -> st.SearchStrategy[dict[str, Any]]:
    """Random filter trees: and/or/not nested up to ``depth`` combinator levels."""
    if depth == 0:
        return leaves()
    sub = filter_trees(depth - 1)
    return st.one_of(
        leaves(),
        st.lists(sub, min_size=1, max_size=3).map(lambda cs: {"and": cs}),
        st.lists(sub, min_size=1, max_size=3).map(lambda cs: {"or": cs}),
        sub.map(lambda c: {"not": c}),
    )


def test_reference_evaluator_on_known_cases() -> None:
    """The reference itself, on cases worked out by hand from DOCS."""
    assert ref_select({"field": "lang", "op": "eq", "value": "en"}) == \
        {"d1", "d2", "d4", "d5", "d6", "d8"}
    assert ref_select({"field": "score", "op": "ne", "value": 0.5}) == DOC_IDS - {"d1"}
    assert ref_select({"field": "score", "op": "nin", "value": [0.5, 2]}) == DOC_IDS - {"d1", "d4"}
    assert ref_select({"field": "score", "op": "lt", "value": 1}) == {"d1", "d5", "d7"}
    assert ref_select({"field": "tags", "op": "contains", "value": "ir"}) == {"d2", "d4", "d5"}
    assert ref_select({"field": "tags", "op": "eq", "value": "ir"}) == set()
    assert ref_select({"field": "reviewed", "op": "exists", "value": False}) == {"d3", "d5", "d7"}
    assert ref_select({"not": {"field": "reviewed", "op": "eq", "value": True}}) == \
        DOC_IDS - {"d1", "d4", "d8"}
    assert ref_select({"field": "published", "op": "gt",
                       "value": "2019-05-01T01:59:59+02:00"}) == {"d1", "d2", "d7"}
    assert ref_select({"field": "published", "op": "gte", "value": 1556668800000}) == \
        {"d1", "d2", "d7"}
    assert ref_select({"field": "published", "op": "gt", "value": 1556668800000}) == {"d2", "d7"}
    assert ref_select({"and": [{"field": "doc_id", "op": "in", "value": ["d1", "d3"]},
                               {"field": "chunk_index", "op": "lte", "value": 0}]}) == {"d1", "d3"}


def _check_exact(eng: Engine, builtins: dict[str, dict[str, dict[str, Any]]],
                 flt: dict[str, Any]) -> None:
    for unit in UNITS:
        if unit != "chunk" and mentions(flt, "chunk_index"):
            continue  # chunk_index of non-chunk units: test_chunk_index_of_document_units
        expected = ref_select(flt, builtins[unit])
        for mode in MODES:
            got = retrieved(eng, flt, unit=unit, **mode)
            assert len(got) == len(set(got)), (unit, mode, got)
            assert set(got) == expected, (unit, mode, flt)


@settings(max_examples=80, deadline=None)
@given(flt=leaves())
def test_single_leaf_selects_exactly_the_reference_set(
        dated_engine: Engine, hit_builtins: dict[str, dict[str, dict[str, Any]]],
        flt: dict[str, Any]) -> None:
    """Each leaf alone (where a wrong missing-field rule cannot be masked by a combinator)."""
    _check_exact(dated_engine, hit_builtins, flt)


@settings(max_examples=80, deadline=None)
@given(flt=filter_trees())
def test_filter_selects_exactly_the_reference_set(
        dated_engine: Engine, hit_builtins: dict[str, dict[str, dict[str, Any]]],
        flt: dict[str, Any]) -> None:
    """Every mode and unit returns exactly the units the reference evaluator selects."""
    _check_exact(dated_engine, hit_builtins, flt)


@pytest.mark.parametrize("flt", [
    {"field": "chunk_index", "op": "exists", "value": True},
    {"field": "chunk_index", "op": "exists", "value": False},
    {"field": "chunk_index", "op": "eq", "value": 0},
], ids=lambda f: f"{f['op']}-{f['value']}")
def test_chunk_index_of_document_units(
        dated_engine: Engine, hit_builtins: dict[str, dict[str, dict[str, Any]]],
        flt: dict[str, Any]) -> None:
    """A filter on chunk_index sees a document unit's chunk_index exactly as its hit reports it
    (absent from ``meta`` = a missing field, §8 semantics above)."""
    expected = ref_select(flt, hit_builtins["document"])
    for mode in MODES:
        assert set(retrieved(dated_engine, flt, unit="document", **mode)) == expected, mode


@pytest.mark.parametrize("flt, expected", [
    # published: d1 2019-05-01T00:00Z, d2 2021-01-15T12:00Z, d3 2015-07-30, d7 2020-02-02.
    ({"field": "published", "op": "eq", "value": "2019-05-01T02:00:00+02:00"}, {"d1"}),
    ({"field": "published", "op": "eq", "value": "2019-04-30T19:00:00-05:00"}, {"d1"}),
    ({"field": "published", "op": "eq", "value": 1556668800000}, {"d1"}),
    ({"field": "published", "op": "in", "value": [1556668800000, "2015-07-30T00:00:00.000Z"]},
     {"d1", "d3"}),
    ({"field": "published", "op": "lt", "value": "2019-05-01T00:00:00.001Z"}, {"d1", "d3"}),
    ({"field": "published", "op": "ne", "value": "2019-05-01T00:00:00Z"},
     DOC_IDS - {"d1"}),
    # string order would put "2019-05-01T01:00:00+02:00" after d1's "2019-05-01T00:00:00Z";
    # as instants it is 23:00 the day before.
    ({"field": "published", "op": "lt", "value": "2019-05-01T01:00:00+02:00"}, {"d3"}),
])
def test_dates_compare_as_instants(dated_engine: Engine, flt: dict[str, Any],
                                   expected: set[str]) -> None:
    assert ref_select(flt) == expected
    for unit in UNITS:
        for mode in MODES:
            assert set(retrieved(dated_engine, flt, unit=unit, **mode)) == expected


# --- bugs found while writing the property: values compared against an array's JSON text ----


@pytest.mark.parametrize("flt", [
    {"field": "tags", "op": "eq", "value": '["ir"]'},
    {"field": "tags", "op": "eq", "value": "[]"},
    {"field": "tags", "op": "in", "value": ['["health","neuro"]']},
])
def test_scalar_comparison_never_matches_an_arrays_json_text(dated_engine: Engine,
                                                             flt: dict[str, Any]) -> None:
    """A keyword value must not equal the serialised JSON of an array-valued field.

    d2 has tags ["ir"], d8 has [] and d1 ["health", "neuro"]; whether eq on an array
    means "whole value" or "membership", none of these strings is a tag of any document.
    """
    assert ref_select(flt) == set()
    assert retrieved(dated_engine, flt, mode="dense") == []


@pytest.fixture(scope="module")
def misc_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any,
                backend: str) -> Iterator[Engine]:
    """A declared text field (scalar and array), a keyword scalar and an int array."""
    path = tmp_path_factory.mktemp(f"filters-misc-{backend}") / "engine"
    eng = Engine(path, embedder=embedder,
                 filter_fields={"note": "text", "kw": "keyword", "nums": "int"},
                 **backend_overrides(backend, path))
    eng.add_documents([
        {"id": "m1", "text": "The first test document about apples.",
         "meta": {"note": "Alpha beta gamma", "kw": "alpha", "nums": [1, 2]}},
        {"id": "m2", "text": "The second test document about pears.",
         "meta": {"note": ["x-ray", "Gamma"], "kw": "beta", "nums": [5]}},
        {"id": "m3", "text": "The third test document about plums.", "meta": {}},
    ])
    yield eng
    eng.close()


def _misc_ids(eng: Engine, flt: dict[str, Any]) -> set[str]:
    hits = eng.retrieve("test document", k=50, candidate_k=200, mode="dense", filter=flt).hits
    return {h.meta["doc_id"] for h in hits}


MISC_RECORDS = {
    "m1": {"doc_id": "m1", "note": "Alpha beta gamma", "kw": "alpha", "nums": [1, 2]},
    "m2": {"doc_id": "m2", "note": ["x-ray", "Gamma"], "kw": "beta", "nums": [5]},
    "m3": {"doc_id": "m3"},
}
MISC_TYPES = {"note": "text", "kw": "keyword", "nums": "int", "doc_id": "keyword"}


@pytest.mark.parametrize("flt, expected", [
    ({"field": "note", "op": "contains", "value": "beta"}, {"m1"}),
    ({"field": "note", "op": "contains", "value": "Beta"}, set()),  # case-sensitive
    ({"field": "note", "op": "contains", "value": "amm"}, {"m1", "m2"}),  # an element's substring
    ({"field": "note", "op": "contains", "value": "ray"}, {"m2"}),
    ({"field": "note", "op": "contains", "value": "a g"}, {"m1"}),
    ({"not": {"field": "note", "op": "contains", "value": "x"}}, {"m1", "m3"}),
    ({"field": "kw", "op": "contains", "value": "alpha"}, {"m1"}),  # keyword scalar: equality
    ({"field": "kw", "op": "contains", "value": "alp"}, set()),  # ... not substring
    ({"field": "nums", "op": "contains", "value": 5}, {"m2"}),
    ({"field": "nums", "op": "contains", "value": 3}, set()),
    ({"field": "nums", "op": "nin", "value": [5]}, {"m1", "m2", "m3"}),
    ({"field": "doc_id", "op": "contains", "value": "m"}, set()),  # keyword built-in: equality
    ({"field": "doc_id", "op": "contains", "value": "m3"}, {"m3"}),
])
def test_contains_semantics(misc_engine: Engine, flt: dict[str, Any], expected: set[str]) -> None:
    ref = {i for i, rec in MISC_RECORDS.items() if ref_eval(flt, rec, MISC_TYPES)}
    assert ref == expected
    assert _misc_ids(misc_engine, flt) == expected


@pytest.mark.parametrize("op, value", [("gt", 1_000_000), ("gte", 10**12), ("lt", -5),
                                       ("lte", -1)])
def test_ordered_comparison_on_an_int_array_does_not_compare_json_text(
        misc_engine: Engine, op: str, value: int) -> None:
    """nums is [1, 2] / [5]: no element is > 1e6 or < -5, whatever an ordered op on an array means."""
    assert _misc_ids(misc_engine, {"field": "nums", "op": op, "value": value}) == set()


# --- integers SQLite cannot bind ------------------------------------------------------


@pytest.mark.parametrize("flt, expected", [
    ({"field": "year", "op": "eq", "value": 2**64}, set()),
    ({"field": "year", "op": "lt", "value": 2**64}, DOC_IDS),
    ({"field": "year", "op": "in", "value": [2019, 2**63]}, {"d1"}),
    ({"field": "chunk_index", "op": "gte", "value": -(2**70)}, DOC_IDS),
])
def test_out_of_range_integer_is_evaluated_or_rejected_as_invalid_params(
        dated_engine: Engine, flt: dict[str, Any], expected: set[str]) -> None:
    """A JSON integer beyond 64 bits is either compared correctly or is -32602, never a crash."""
    try:
        got = set(retrieved(dated_engine, flt, mode="dense"))
    except InvalidParams as exc:
        assert exc.code == -32602
        assert exc.data["field"] == f"filter.{flt['field']}"
    else:
        assert got == expected


# --- errors ---------------------------------------------------------------------------


def _leaf(field: str, op: str, value: Any) -> dict[str, Any]:
    return {"field": field, "op": op, "value": value}


def _invalid(eng: Engine, flt: Any) -> InvalidParams:
    with pytest.raises(InvalidParams) as info:
        eng.retrieve("vitamin", k=5, filter=flt)
    exc = info.value
    assert exc.code == -32602
    assert exc.to_wire()["code"] == -32602
    return exc


@pytest.mark.parametrize("flt, field", [
    (_leaf("nope", "eq", "x"), "filter.nope"),
    (_leaf("Lang", "eq", "en"), "filter.Lang"),  # names are case-sensitive
    ({"and": [_leaf("lang", "eq", "en"), {"not": _leaf("colour", "exists", True)}]},
     "filter.colour"),
])
def test_undeclared_field_is_invalid_params(checked_engine: Engine, flt: dict[str, Any],
                                            field: str) -> None:
    assert _invalid(checked_engine, flt).data["field"] == field


@pytest.mark.parametrize("flt", [
    _leaf("lang", "eq", 5), _leaf("lang", "eq", True), _leaf("lang", "in", ["en", 3]),
    _leaf("tags", "contains", 3), _leaf("doc_id", "eq", 1),
    _leaf("year", "eq", "2019"), _leaf("year", "gte", 2019.5), _leaf("year", "eq", True),
    _leaf("year", "in", [[2019]]), _leaf("chunk_index", "eq", "0"),
    _leaf("score", "gt", "1.5"), _leaf("score", "eq", False), _leaf("score", "nin", [1.0, None]),
    _leaf("reviewed", "eq", "true"), _leaf("reviewed", "eq", 1), _leaf("reviewed", "in", [0]),
    _leaf("published", "gt", "yesterday"), _leaf("published", "eq", True),
    _leaf("published", "lt", "2019-13-01T00:00:00Z"), _leaf("published", "in", [{"ms": 1}]),
], ids=lambda f: f"{f['field']}-{f['op']}-{f['value']!r}")
def test_mistyped_value_is_invalid_params(checked_engine: Engine, flt: dict[str, Any]) -> None:
    assert _invalid(checked_engine, flt).data["field"] == f"filter.{flt['field']}"


@pytest.mark.parametrize("flt", [
    _leaf("lang", "gt", "a"), _leaf("tags", "lte", "x"), _leaf("reviewed", "gte", True),
    _leaf("doc_id", "lt", "d5"),
], ids=lambda f: f"{f['field']}-{f['op']}")
def test_ordered_operator_on_unordered_field_is_invalid_params(
        checked_engine: Engine, flt: dict[str, Any]) -> None:
    assert _invalid(checked_engine, flt).data["field"] == f"filter.{flt['field']}"


@pytest.mark.parametrize("flt", [
    _leaf("year", "in", 2019), _leaf("lang", "nin", "en"), _leaf("tags", "in", {"a": 1}),
    _leaf("lang", "eq", ["en"]), _leaf("tags", "contains", ["ir"]), _leaf("lang", "ne", None),
], ids=lambda f: f"{f['field']}-{f['op']}")
def test_wrong_value_shape_is_invalid_params(checked_engine: Engine, flt: dict[str, Any]) -> None:
    assert _invalid(checked_engine, flt).data["field"] == f"filter.{flt['field']}"


@pytest.mark.parametrize("flt, field", [
    ({"and": []}, "filter.and"),
    ({"or": []}, "filter.or"),
    ({"not": {"and": []}}, "filter.not.and"),
    ({"or": [_leaf("lang", "eq", "en"), {"and": []}]}, "filter.or[1].and"),
    ({"and": _leaf("lang", "eq", "en")}, "filter.and"),  # not an array
])
def test_empty_or_malformed_combinator_is_invalid_params(checked_engine: Engine,
                                                         flt: dict[str, Any], field: str) -> None:
    assert _invalid(checked_engine, flt).data["field"] == field


@pytest.mark.parametrize("flt, field", [
    ({"and": [_leaf("lang", "eq", "en")], "field": "lang", "op": "eq", "value": "en"}, "filter"),
    ({"and": [_leaf("lang", "eq", "en")], "or": [_leaf("lang", "eq", "de")]}, "filter"),
    ({"or": [{"not": _leaf("year", "gt", 2000), "field": "year"}]}, "filter.or[0]"),
])
def test_combinator_mixed_with_field_is_invalid_params(checked_engine: Engine,
                                                       flt: dict[str, Any], field: str) -> None:
    assert _invalid(checked_engine, flt).data["field"] == field


@pytest.mark.parametrize("flt", [
    _leaf("lang", "regex", "^e"),
    {"and": [_leaf("year", "gt", 2000), {"not": _leaf("lang", "regex", "^e")}]},
])
def test_unknown_operator_is_option_unsupported(checked_engine: Engine,
                                                flt: dict[str, Any]) -> None:
    with pytest.raises(OptionUnsupported) as info:
        checked_engine.retrieve("vitamin", k=5, filter=flt)
    assert info.value.code == -32005
    assert info.value.data["option"] == "regex"
    assert "field" not in info.value.data


@pytest.mark.parametrize("value", ["yes", 1, 0, None, ["true"]])
def test_exists_takes_a_boolean(checked_engine: Engine, value: Any) -> None:
    assert _invalid(checked_engine, _leaf("lang", "exists", value)).data["field"] == "filter.lang"


def test_compile_filter_raises_the_same_errors_without_an_engine() -> None:
    """The validator alone (what the engine calls) gives the same codes and paths."""
    fields = dict(USER_TYPES)
    with pytest.raises(InvalidParams) as info:
        compile_filter({"field": "nope", "op": "eq", "value": 1}, fields)
    assert info.value.data["field"] == "filter.nope"
    with pytest.raises(OptionUnsupported) as unsupported:
        compile_filter({"field": "lang", "op": "regex", "value": "x"}, fields)
    assert unsupported.value.data["option"] == "regex"
    with pytest.raises(InvalidParams) as info:
        compile_filter({"and": []}, fields)
    assert info.value.data["field"] == "filter.and"


# --- ingest of a mistyped value for a declared field ----------------------------------


@pytest.fixture(scope="module")
def typed_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    eng = Engine(tmp_path_factory.mktemp("filters-ingest") / "engine", embedder=embedder,
                 filter_fields={"published": "date", "year": "int", "score": "float",
                                "lang": "keyword", "reviewed": "bool", "tags": "keyword"})
    eng.add_documents(DOCS[:3])
    yield eng
    eng.close()


@pytest.mark.parametrize("name, bad", [
    ("published", "last spring"), ("published", True), ("year", "2020"), ("year", 2020.5),
    ("score", "high"), ("score", True), ("lang", 5), ("reviewed", "yes"), ("reviewed", 0),
    ("tags", ["ok", 3]),
])
def test_ingest_mistyped_declared_field_stores_nothing_of_the_batch(
        typed_engine: Engine, name: str, bad: Any) -> None:
    before_docs = typed_engine.store.document_ids()
    before_counts = typed_engine.stats()
    before_fields = typed_engine.filter_fields()
    before_version = typed_engine.index_version
    batch = [
        {"id": "new-good", "text": "A brand new and valid document about comets.",
         "meta": {"lang": "en", "colour": "red"}},  # colour would be a newly inferred field
        {"id": "d1", "text": "A replacement text for d1 that must not be stored.",
         "meta": {"lang": "xx"}},
        {"id": "new-bad", "text": "A document with one mistyped metadata value.",
         "meta": {name: bad}},
    ]
    with pytest.raises(InvalidParams) as info:
        typed_engine.add_documents(batch)
    assert info.value.code == -32602
    assert info.value.data["field"] == f"meta.{name}"
    assert typed_engine.store.document_ids() == before_docs
    assert typed_engine.stats() == before_counts
    assert typed_engine.filter_fields() == before_fields
    assert typed_engine.index_version == before_version
    hits = typed_engine.retrieve("document", k=10, mode="dense",
                                 filter={"field": "doc_id", "op": "eq", "value": "d1"}).hits
    assert [h.text for h in hits] == [DOCS[0]["text"]]
    assert typed_engine.retrieve("comets replacement mistyped", k=10, mode="sparse").hits == []
