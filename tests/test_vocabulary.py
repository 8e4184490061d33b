"""The one vocabulary (rcp_agentic.vocabulary) agrees with the protocol schema's enums, and the
modules that use its names read them from it."""

from __future__ import annotations

import json
from typing import Any, get_args

from conftest import REPO

from rcp_agentic import vocabulary as v
from rcp_agentic.config import EngineConfig
from rcp_agentic.wire import Trust

SCHEMA = json.loads((REPO / "tests" / "schema" / "rcp-1.0.json").read_text("utf-8"))["$defs"]


def _items(defn: dict[str, Any], *path: str) -> list[Any]:
    for key in path:
        defn = defn[key]
    return list(defn.get("enum") or defn["items"]["enum"])


def test_wire_names_are_the_schemas() -> None:
    caps = SCHEMA["Capabilities"]["properties"]
    params = SCHEMA["RetrieveParams"]["properties"]
    assert list(v.MODES) == _items(caps, "retrieve", "properties", "modes") \
        == _items(params, "mode") == _items(caps, "retrieve", "properties", "defaultMode")
    assert list(v.FUSIONS) == _items(caps, "retrieve", "properties", "fusion") \
        == _items(params, "fusion", "properties", "method")
    assert list(v.TRUST_LEVELS) == _items(SCHEMA["Trust"]["properties"], "level")
    assert list(v.GRAPH_OPS) == _items(SCHEMA["GraphParams"]["properties"], "op")
    assert list(v.MEMORY_SCOPES) == _items(SCHEMA["MemoryBuildParams"]["properties"], "scope") \
        == _items(caps, "memory", "properties", "scopes")


def test_the_subsets_partition_their_sets() -> None:
    assert sorted(v.ENTITY_OPS + v.COMMUNITY_OPS) == sorted(v.GRAPH_OPS)
    assert set(v.DENSE_MODES) | set(v.SPARSE_MODES) == set(v.MODES)
    assert set(v.RECALL_SOURCES) == {"dense", "sparse", "graph"}
    for literal, values in ((v.Mode, v.MODES), (v.Fusion, v.FUSIONS),
                            (v.RecallSource, v.RECALL_SOURCES), (v.TrustLevel, v.TRUST_LEVELS),
                            (v.GraphOp, v.GRAPH_OPS), (v.MemoryScope, v.MEMORY_SCOPES)):
        assert get_args(literal) == values


def test_the_users_read_the_vocabulary() -> None:
    from rcp_agentic.corpus import documents
    from rcp_agentic.federation import fanout, graphcalls
    from rcp_agentic.pipeline import confidence, params
    from rcp_agentic.pipeline import method_params as graphwire  # the graph params' reader

    assert params.MODES is confidence.MODES is v.MODES
    assert params.FUSIONS is fanout.FUSIONS is v.FUSIONS
    assert params.RECALL_SOURCES is v.RECALL_SOURCES
    assert documents.TRUST_LEVELS is v.TRUST_LEVELS
    assert graphwire.GRAPH_OPS is graphcalls.GRAPH_OPS is v.GRAPH_OPS
    assert graphwire.MEMORY_SCOPES is graphcalls.MEMORY_SCOPES is v.MEMORY_SCOPES
    assert EngineConfig.model_fields["default_mode"].annotation == v.Mode
    assert Trust.model_fields["level"].annotation == v.TrustLevel
