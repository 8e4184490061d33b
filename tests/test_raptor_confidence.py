"""Tree-node hits carry calibrated confidence from the shipped calibration (fitted by
``bench/raptor.py scifact --write-params``), and chunk hits of the collapsed tree keep theirs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib import resources

import pytest
from test_unit_seam import TOPICS, corpus

from rcp_agentic import Engine
from rcp_agentic.models.embedder import SentenceTransformerEmbedder
from rcp_agentic.pipeline.confidence import MODES, Calibrator


def _shipped() -> dict:
    path = resources.files("rcp_agentic") / "data" / "calibration.json"
    return json.loads(path.read_text(encoding="utf-8"))


def test_calibration_ships_tree_node_models() -> None:
    models = _shipped()["models"]
    missing = [f"{mode}/tree-node" for mode in MODES if f"{mode}/tree-node" not in models]
    assert not missing, f"calibration.json lacks {missing}: run bench/raptor.py scifact " \
                        "--write-params"
    calibrator = Calibrator.default()
    for mode in MODES:
        assert calibrator.supports(mode, "tree-node")
        # The fit's sign constraints hold: never more confident further down the list.
        assert calibrator.monotone(mode, "tree-node")["rank"] in (0, -1)


@pytest.fixture(scope="module")
def tree_engine(tmp_path_factory: pytest.TempPathFactory,
                embedder: SentenceTransformerEmbedder) -> Iterator[tuple[Engine, list[str]]]:
    eng = Engine(tmp_path_factory.mktemp("raptor-conf") / "engine", embedder=embedder,
                 build_tree=True, tree_top_size=2)
    eng.add_documents(corpus())
    eng.wait_for_derived()
    # One question per sentence of the corpus' topics (the documents are offline test data).
    yield eng, [line for lines in TOPICS.values() for line in lines]
    eng.close()


def _check_list(confidences: list[float | None]) -> None:
    known = [c for c in confidences if c is not None]
    assert all(0.0 <= c <= 1.0 for c in known)
    assert all(a >= b for a, b in zip(known, known[1:])), confidences


@pytest.mark.parametrize("mode", MODES)
def test_tree_node_hits_have_confidence(tree_engine: tuple[Engine, list[str]], mode: str) -> None:
    eng, queries = tree_engine
    assert eng.calibrator is not None and eng.calibrator.supports(mode, "tree-node")
    assert eng.derived_status()["tree-node"]["levels"], "the tree was not built"
    chunks = 0
    for query in queries:
        # The collapsed tree: chunks and summaries in one pool, each by its own model.
        res = eng.retrieve(query, k=30, mode=mode, unit="tree-node")
        _check_list([h.confidence for h in res.hits])
        for h in res.hits:
            assert h.confidence is not None, f"{h.unit} hit {h.id} has no confidence"
            chunks += h.unit == "chunk"
        # One summary layer alone: every hit a tree-node scored by the tree-node model.
        layer = eng.retrieve(query, k=5, mode=mode, unit="tree-node", level=1)
        assert layer.hits and all(h.unit == "tree-node" for h in layer.hits)
        assert all(h.confidence is not None for h in layer.hits)
        _check_list([h.confidence for h in layer.hits])
    assert chunks

