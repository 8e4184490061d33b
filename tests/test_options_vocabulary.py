"""One vocabulary of retrieve options: the five places that list them agree with rcp_agentic.options.

The engine's validator (``pipeline.params.RetrieveParams``), the client's wire names
(``client.params``), the integrations' field list (``integrations.common``), the
LangChain retriever's pydantic fields and the LlamaIndex retriever's keywords and
attributes are each compared with :data:`rcp_agentic.options.OPTIONS`; an option
added, dropped or renamed in any one of them fails here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast, get_args

import pytest
from conftest import DOCS
from langchain_core.retrievers import BaseRetriever as LCBaseRetriever

from rcp_agentic import Engine
from rcp_agentic.client import params as client_params
from rcp_agentic.errors import InvalidParams
from rcp_agentic.integrations import common
from rcp_agentic.integrations.langchain import RCPRetriever as LCRetriever
from rcp_agentic.integrations.llamaindex import RCPRetriever as LIRetriever
from rcp_agentic.options import (BY_NAME, FIELD_NAMES, OPTIONS, RANK_BY, TREE_SEARCHES, VENDOR,
                                 WIRE_NAMES, doc, option)
from rcp_agentic.pipeline.params import RetrieveParams
from rcp_agentic.wire import Unit

# The call itself, not options.
CALL = {"query", "k"}
# LangChain fields of the retriever that are not retrieve options.
LC_OWN = {"source", "token", "client_options", "engine_name", "k"}


def test_the_vocabulary_is_well_formed() -> None:
    names, wires = [o.name for o in OPTIONS], [o.wire for o in OPTIONS]
    assert len(set(names)) == len(names) and len(set(wires)) == len(wires)
    assert not CALL & (set(names) | set(wires))
    for o in OPTIONS:
        assert o.doc and "\n" not in o.doc and o.doc.endswith("."), o.name
        assert o.name.isidentifier() and o.name == o.name.lower(), o.name
        if o.vendor:
            assert o.wire.startswith(f"{VENDOR}-"), o.name
            assert bool(o.choices) != o.boolean, o.name  # fixed strings, or a true/false switch
            # A vendor option is a retriever field only when servers advertise it and clients
            # gate it: a true/false switch (capabilities["x-rcp-agentic"][<name>]).
            assert not o.field or o.boolean, o.name
        else:
            assert client_params.camel(o.name) == o.wire or (o.name, o.wire) == ("meta", "_meta")
        assert option(o.name) is option(o.wire) is o
    assert option("x-rcp-agentic-treeSearch").choices == TREE_SEARCHES == ("collapsed",
                                                                             "traversal")
    assert option("rank_by").choices == RANK_BY
    assert [o.name for o in OPTIONS if o.vendor and o.field] == ["graph_recall"]
    assert FIELD_NAMES == tuple(o.name for o in OPTIONS if o.field)
    with pytest.raises(KeyError):
        option("top_k")


def test_engine_params_are_the_vocabulary() -> None:
    """pipeline/params.py: every RetrieveParams field (Python name, wire alias) but query/k."""
    fields = {(name, f.alias or name) for name, f in RetrieveParams.model_fields.items()
              if name not in CALL}
    assert fields == {(o.name, o.wire) for o in OPTIONS}


def test_client_wire_names_are_the_vocabulary() -> None:
    """client/params.py: the wire names it knows, and each option's Python name maps to its own."""
    assert client_params.RETRIEVE_OPTIONS == WIRE_NAMES
    for o in OPTIONS:
        for given in (o.name, o.wire):
            assert client_params.retrieve_params("q", 2, {given: "v"}) == {
                "query": "q", "k": 2, o.wire: "v"}, given
    with pytest.raises(TypeError, match="twice"):
        client_params.retrieve_params("q", 2, {"tree_search": "traversal",
                                               "x-rcp-agentic-treeSearch": "collapsed"})


def test_integration_fields_are_the_vocabulary() -> None:
    """integrations/common.py: the retriever fields, and what one call may pass besides."""
    assert common.RETRIEVE_OPTIONS == FIELD_NAMES
    vendor = [o.name for o in OPTIONS if o.vendor]
    assert set(common.CALL_OPTIONS) == set(FIELD_NAMES) | set(vendor)
    assert common.retrieve_options({"unit": "chunk"}, {"tree_search": "traversal",
                                                       "rank_by": None}) == {
        "unit": "chunk", "tree_search": "traversal"}
    for name in (o.name for o in OPTIONS if not o.field and not o.vendor):
        with pytest.raises(TypeError, match="unknown retrieve option"):
            common.retrieve_options({}, {name: 1})


def test_langchain_fields_are_the_vocabulary() -> None:
    """integrations/langchain.py: one described field per retriever option, nothing more."""
    fields = LCRetriever.model_fields
    options = set(fields) - set(LCBaseRetriever.model_fields) - LC_OWN
    assert options == set(FIELD_NAMES)
    for name in FIELD_NAMES:
        assert fields[name].description == doc(name), name
        assert fields[name].default is None, name
    # The Unit literal is the wire's, not a copy of it.
    assert set(get_args(fields["unit"].annotation)) == {Unit, type(None)}


def test_llamaindex_keywords_are_the_vocabulary() -> None:
    """integrations/llamaindex.py: typed attributes and constructor keywords, one per option."""
    assert set(LIRetriever.__annotations__) == set(FIELD_NAMES)
    values: dict[str, Any] = {name: f"value-{name}" for name in FIELD_NAMES}
    r = LIRetriever(["unused-command"], **values)
    assert {name: getattr(r, name) for name in FIELD_NAMES} == values
    assert all(getattr(LIRetriever(["unused-command"]), name) is None for name in FIELD_NAMES)
    for o in OPTIONS:
        if not o.field:
            with pytest.raises(TypeError, match="unknown RCPRetriever option"):
                LIRetriever(["unused-command"], **{o.name: cast(Any, "x")})
    # Per call, every field and the vendor options pass; the rest is refused before any I/O.
    k, options = r._call_args({"tree_search": "traversal", "unit": None, "k": 2})
    assert k == 2 and options["tree_search"] == "traversal" and "unit" not in options
    assert set(options) == set(FIELD_NAMES) - {"unit"} | {"tree_search"}
    with pytest.raises(TypeError, match="unknown retrieve option"):
        r._call_args({"include_vectors": True})


# --- the vendor options reach a real engine under their wire names ----------------------------

@pytest.fixture(scope="module")
def small_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Engine]:
    eng = Engine(tmp_path_factory.mktemp("vocab") / "e", embedder=embedder)
    eng.add_documents(DOCS[:3])
    yield eng
    eng.close()


@pytest.fixture()
def sent(small_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The raw params each retrieve hands the engine (after the client and the dispatcher)."""
    seen: list[dict[str, Any]] = []
    inner = small_engine.retrieve_params

    def spy(raw: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        seen.append(json.loads(json.dumps(raw)))
        return inner(raw, *args, **kwargs)

    monkeypatch.setattr(small_engine, "retrieve_params", spy)
    return seen


def test_vendor_options_reach_the_engine_from_both_retrievers(
        small_engine: Engine, sent: list[dict[str, Any]], tmp_path: Path) -> None:
    with LCRetriever.from_engine(small_engine, k=2) as lc:
        assert len(lc.invoke("vitamin D", rank_by="score")) == 2
        assert sent[-1]["x-rcp-agentic-rankBy"] == "score" and "rank_by" not in sent[-1]
        with pytest.raises(InvalidParams) as err:  # the engine validated it: it arrived
            lc.invoke("vitamin D", rank_by="magic")
        assert err.value.field == "x-rcp-agentic-rankBy"
    with LIRetriever.from_engine(small_engine, k=2) as li:
        assert len(li.retrieve_with("vitamin D", **{"x-rcp-agentic-rankBy": "score"})) == 2
        assert sent[-1]["x-rcp-agentic-rankBy"] == "score"
        li.retrieve_with("vitamin D", rank_by="score")
        assert sent[-1]["x-rcp-agentic-rankBy"] == "score"
    assert BY_NAME["rank_by"].wire in sent[-1]
