"""The tree outline (`rcp-agentic tree show`, the RAPTOR notebook) against the stored tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from rcp_agentic import Engine
from rcp_agentic.errors import CapabilityMissing
from rcp_agentic.models.embedder import SentenceTransformerEmbedder
from rcp_agentic.raptor.outline import outline

NOTES = [
    "Vitamin D deficiency is linked to a higher risk of multiple sclerosis.",
    "Dietary calcium and vitamin D support bone density in older adults.",
    "Rickets in children results from severe vitamin D deficiency.",
    "Serum vitamin D concentration depends on latitude and season.",
    "BM25 ranks documents by term frequency and inverse document frequency.",
    "Dense retrievers embed queries and passages with a bi-encoder.",
    "Reciprocal rank fusion combines rankings using only rank positions.",
    "Hybrid search fuses sparse BM25 scores with dense embedding similarity.",
    "Exoplanets are detected by the dimming of their host star during a transit.",
    "Black holes form when massive stars collapse at the end of their lives.",
    "The Andromeda galaxy is the nearest large spiral galaxy to the Milky Way.",
    "Neutron stars are dense remnants of supernova explosions.",
]


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


@pytest.fixture()
def tree_dir(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Path:
    path = tmp_path / "engine"
    with Engine(path, embedder=embedder, build_tree=True, tree_top_size=2) as engine:
        engine.add_documents([{"id": f"n{i}", "text": t} for i, t in enumerate(NOTES)])
        assert engine.wait_for_derived()
    return path


def test_outline_matches_the_stored_tree(tree_dir: Path,
                                         embedder: SentenceTransformerEmbedder) -> None:
    with Engine(tree_dir, embedder=embedder) as engine:
        tree = outline(engine, samples=2)
        bare = outline(engine, samples=0)
        nodes = engine.store.live_derived("tree-node")
        status = engine.derived_status()["tree-node"]
    assert (tree.leaves, tree.documents) == (len(NOTES), len(NOTES))
    assert [lv.level for lv in tree.levels] == status["levels"]
    assert {str(lv.level): lv.nodes for lv in tree.levels} == status["counts"]
    assert tree.reflects == status["reflects"] and tree.current
    for lv in tree.levels:
        rows = [n for n in nodes if n["level"] == lv.level]
        assert lv.mean_tokens == pytest.approx(sum(n["tokens"] for n in rows) / len(rows))
        assert lv.leaves_covered == len({c for n in rows for c in n["covers"]})
        assert tree.coverage(lv.level) == 1.0  # every level of a current tree spans every leaf
        widths = sorted((len(n["covers"]) for n in rows), reverse=True)
        assert [s.leaves for s in lv.samples] == widths[:2]
        for s in lv.samples:
            row = next(n for n in rows if n["uid"] == s.uid)
            assert (s.text, s.tokens, s.documents) == (row["text"], row["tokens"], s.leaves)
    text = tree.render()
    assert text.splitlines()[0].startswith(f"RAPTOR tree over {len(NOTES)} chunks from "
                                           f"{len(NOTES)} documents")
    for lv in tree.levels:
        assert f"level {lv.level}: {lv.nodes} nodes" in text
        assert all(s.uid in text for s in lv.samples)
    assert not any(lv.samples for lv in bare.levels) and bare.levels[0].nodes == tree.levels[0].nodes


def test_outline_shows_a_lagging_tree(tree_dir: Path,
                                      embedder: SentenceTransformerEmbedder) -> None:
    # A process that does not build the tree writes: the tree lags until the next update.
    with Engine(tree_dir, embedder=embedder, build_tree=False) as writer:
        writer.add_documents([{"id": "late", "text": "Sourdough is leavened by wild yeast."}])
    with Engine(tree_dir, embedder=embedder, catch_up=False) as engine:  # no catch-up at open
        lagging = outline(engine)
        assert not lagging.current and lagging.leaves == len(NOTES) + 1
        assert lagging.coverage(1) == pytest.approx(len(NOTES) / (len(NOTES) + 1))
        assert "lagging" in lagging.render()
        engine.update_derived()
        caught_up = outline(engine)
    assert caught_up.current and caught_up.coverage(1) == 1.0
    assert caught_up.reflects != lagging.reflects


def test_outline_needs_a_tree(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    with Engine(tmp_path / "flat", embedder=embedder) as engine:
        engine.add_documents([{"id": "a", "text": NOTES[0]}])
        with pytest.raises(CapabilityMissing, match="builds no RAPTOR tree"):
            outline(engine)
    with Engine(tmp_path / "empty", embedder=embedder, build_tree=True) as engine:
        empty = outline(engine)
    assert empty.levels == () and empty.reflects is None
    assert "no tree built yet" in empty.render()
