"""Agentic retrieval stages: token budgets, sessions, MMR, recency."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import backend_overrides
from rcp_agentic import Engine
from rcp_agentic.pipeline.mmr import mmr_order
from rcp_agentic.pipeline.packing import pack
from rcp_agentic.sessions import Candidate, SessionStore

TOPICS = ["solar panels convert sunlight into electricity",
          "wind turbines generate power from moving air",
          "batteries store energy for the grid at night",
          "hydroelectric dams use falling water to make power"]


def _corpus() -> list[dict]:
    docs = []
    for i in range(24):
        topic = TOPICS[i % len(TOPICS)]
        sentences = " ".join(f"Note {i}.{j}: {topic}, part {j} of the energy series." for j in range(
            1 + i % 6))
        docs.append({"id": f"n{i:02d}", "text": sentences,
                     "meta": {"published": f"20{10 + i % 14:02d}-01-01T00:00:00Z"}})
    return docs


@pytest.fixture(scope="module")
def energy(tmp_path_factory: pytest.TempPathFactory, embedder, backend: str) -> Iterator[Engine]:
    """The energy corpus in each recall backend: budgets, sessions, MMR and recency work
    above recall and must hold on both."""
    path = tmp_path_factory.mktemp(f"energy-{backend}") / "e"
    eng = Engine(path, embedder=embedder, chunk_size=24, chunk_overlap=0,
                 filter_fields={"published": "date"}, **backend_overrides(backend, path))
    eng.add_documents(_corpus())
    # A paged document, so page units exist.
    from rcp_agentic.corpus.source import Page, SourceDocument

    text = "Page one talks about solar energy.\n\nPage two talks about wind energy."
    eng.add_documents([SourceDocument(id="paged", text=text, file_type="pdf", pages=[
        Page(1, 0, 34), Page(2, 36, len(text))])])
    yield eng
    eng.close()


@settings(max_examples=40, deadline=None)
@given(budget=st.integers(1, 400), k=st.integers(1, 30),
       unit=st.sampled_from(["chunk", "page", "document"]))
def test_budget_never_exceeded(energy: Engine, budget: int, k: int, unit: str) -> None:
    res = energy.retrieve("energy power", k=k, unit=unit, token_budget=budget)
    used = sum((h.meta or {})["chunk_token_count"] for h in res.hits)
    assert used <= budget and len(res.hits) <= k
    assert res.usage and res.usage.tokens == used


def test_budget_skips_large_hits_and_keeps_small_ones(energy: Engine) -> None:
    full = energy.retrieve("energy power series", k=30, unit="document")
    sizes = [(h.meta or {})["chunk_token_count"] for h in full.hits]
    budget = min(sizes) + max(sizes) - 1  # the largest cannot join the smallest
    res = energy.retrieve("energy power series", k=30, unit="document", token_budget=budget)
    assert res.usage and res.usage.tokens <= budget and len(res.hits) >= 1
    if any("skipped" in n for n in res.usage.notes or []):
        assert len(res.hits) < len(full.hits)


def test_budget_and_k_whichever_binds_first(energy: Engine) -> None:
    big = energy.retrieve("energy", k=3, token_budget=100_000)
    assert len(big.hits) == 3
    tiny = energy.retrieve("energy", k=30, token_budget=30)
    assert (tiny.usage.tokens if tiny.usage else 0) <= 30 and len(tiny.hits) < 30


def test_pack_unit() -> None:
    assert pack([5, 50, 5, 5], k=10, budget=12).taken == [0, 2]
    assert pack([5, 50, 5, 5], k=10, budget=12).skipped == 1
    assert pack([5, 50, 5, 5], k=10, budget=12).oversized == 1
    assert pack([5, 5, 5], k=2, budget=None).taken == [0, 1]
    assert pack([], k=3, budget=10).taken == []


def test_session_never_repeats_and_backfills(energy: Engine) -> None:
    seen: set[str] = set()
    total = energy.stats()["chunk"]
    for step in range(4):
        res = energy.retrieve("solar energy from sunlight", k=5, session_id="traj-1")
        ids = [h.id for h in res.hits]
        assert len(ids) == 5, f"step {step} got {len(ids)} hits"
        assert not seen & set(ids)
        seen.update(ids)
    assert len(seen) == 20 <= total
    other = energy.retrieve("solar energy from sunlight", k=5, session_id="traj-2")
    assert {h.id for h in other.hits} & seen  # another session starts afresh


def test_session_exhausts_corpus_without_repeats(energy: Engine) -> None:
    total = energy.stats()["document"]
    got: list[str] = []
    for _ in range(10):
        got += [h.id for h in energy.retrieve("energy", k=10, unit="document",
                                              session_id="all-docs").hits]
    assert len(got) == len(set(got)) == total


def test_session_whole_document_hides_its_chunks(energy: Engine) -> None:
    doc = energy.retrieve("wind turbines moving air", k=1, unit="document", session_id="s-doc")
    doc_id = doc.hits[0].chunk.doc_id  # type: ignore[union-attr]
    chunks = energy.retrieve("wind turbines moving air", k=20, unit="chunk", session_id="s-doc")
    assert all(h.chunk.doc_id != doc_id for h in chunks.hits)  # type: ignore[union-attr]
    # The reverse is allowed: escalating from chunks to their document.
    c = energy.retrieve("batteries store energy", k=1, unit="chunk", session_id="s-up")
    parent = c.hits[0].chunk.doc_id  # type: ignore[union-attr]
    d = energy.retrieve("batteries store energy", k=24, unit="document", session_id="s-up")
    assert f"doc:{parent}" in {h.id for h in d.hits}


def test_session_page_hides_its_chunks(energy: Engine) -> None:
    page = energy.retrieve("wind energy page two", k=1, unit="page", session_id="s-page",
                           filter={"field": "doc_id", "op": "eq", "value": "paged"})
    assert page.hits[0].id == "doc:paged#p2"
    chunks = energy.retrieve("wind energy page two", k=5, unit="chunk", session_id="s-page",
                             filter={"field": "doc_id", "op": "eq", "value": "paged"})
    assert [h.citation.page for h in chunks.hits] == [1]  # type: ignore[union-attr]


def test_session_store_ttl_lru_and_item_bounds() -> None:
    now = [0.0]
    store = SessionStore(ttl_seconds=10, max_sessions=3, max_items=4, clock=lambda: now[0])
    c = [Candidate(f"doc:d#c{i}", "chunk", "d", None, None) for i in range(6)]
    store.record("a", c[:2])
    assert store.filter_new("a", c[:3]) == [False, False, True]
    assert store.record("a", c[2:6]) == 2 and store.seen_count("a") == 4  # oldest forgotten
    for name in "bcd":
        now[0] += 1
        store.record(name, c[:1])
    assert len(store) == 3 and store.seen_count("a") == 0  # "a" was least recently used
    now[0] += 11
    assert len(store) == 0  # all expired
    assert store.filter_new("b", c[:1]) == [True]


def test_session_state_is_bounded_in_engine(tmp_path: Path, embedder) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, max_sessions=2, session_max_items=3)
    eng.add_documents([{"id": f"x{i}", "text": f"Item {i} is about apples."} for i in range(6)])
    for sid in ("s1", "s2", "s3"):
        eng.retrieve("apples", k=2, session_id=sid, unit="document")
    assert len(eng.sessions) == 2
    res = eng.retrieve("apples", k=2, session_id="s3", unit="document")
    res2 = eng.retrieve("apples", k=2, session_id="s3", unit="document")
    assert any("forgot" in n for n in (res.usage.notes or []) + (res2.usage.notes or []))
    eng.close()


def test_mmr_spreads_near_duplicates() -> None:
    import numpy as np

    a = np.array([1.0, 0.0, 0.0])
    near_a = np.array([0.99, 0.14, 0.0]) / np.linalg.norm([0.99, 0.14, 0.0])
    b = np.array([0.0, 1.0, 0.0])
    vecs = np.vstack([a, near_a, b])
    scores = np.array([1.0, 0.95, 0.9])
    assert mmr_order(scores, vecs, 1.0, 3) == [0, 1, 2]
    assert mmr_order(scores, vecs, 0.5, 3) == [0, 2, 1]
    assert mmr_order(scores, vecs, 0.0, 2)[1] == 2


def test_mmr_in_engine_diversifies(energy: Engine) -> None:
    plain = energy.retrieve("solar panels sunlight electricity", k=6, unit="chunk", mode="dense")
    diverse = energy.retrieve("solar panels sunlight electricity", k=6, unit="chunk",
                              mode="dense", mmr={"lambda": 0.3})
    def topics(res) -> int:  # type: ignore[no-untyped-def]
        return len({next(t for t in TOPICS if t.split()[0] in h.text) for h in res.hits
                    if any(t.split()[0] in h.text for t in TOPICS)})
    assert topics(diverse) > topics(plain)
    assert diverse.hits[0].id == plain.hits[0].id


def test_recency_prefers_recent(energy: Engine) -> None:
    plain = energy.retrieve("energy", k=24, unit="document", mode="sparse")
    recent = energy.retrieve("energy", k=24, unit="document", mode="sparse",
                             recency={"field": "published", "halfLifeDays": 200})
    def year(h) -> int:  # type: ignore[no-untyped-def]
        return int(h.meta["published"][:4])
    top = [year(h) for h in recent.hits[:5] if "published" in (h.meta or {})]
    assert sum(top) / len(top) > sum(year(h) for h in plain.hits[:5]
                                     if "published" in (h.meta or {})) / 5
    assert recent.hits[0].score <= plain.hits[0].score


# --- containment across unit kinds in the corrective loop (wire-shaped tree-node hits) --------

def _chunk(doc: str, i: int, page: int | None = None, **extra: object) -> dict:
    hit: dict = {"id": f"doc:{doc}#c{i}", "score": 0.5, "unit": "chunk", "level": 0,
                 "text": f"Chunk {i} of {doc}: solar panels and wind turbines.",
                 "chunk": {"docId": doc, "index": i}, "meta": {"doc_id": doc}}
    if page is not None:
        hit["citation"] = {"source": doc, "page": page}
    hit.update(extra)
    return hit


def _tree(node: str, level: int, leaves: list[str], docs: list[str], **extra: object) -> dict:
    hit: dict = {"id": f"tree:{level}:{node}", "score": 0.8, "unit": "tree-node", "level": level,
                 "text": "A summary of " + ", ".join(leaves) + ": renewable energy sources, "
                         "their output and how the grid stores it overnight.",
                 "provenance": {"leaves": leaves}, "meta": {"doc_ids": docs},
                 "citation": {"source": docs[0]}}
    hit.update(extra)
    return hit


def test_containment_follows_the_unit_registry() -> None:
    from rcp_agentic.agentic.trajectory import _contains

    c0, c1, b0 = _chunk("a", 0, page=1), _chunk("a", 1, page=2), _chunk("b", 0)
    top = _tree("top", 2, ["doc:a#c0", "doc:a#c1", "doc:b#c0"], ["a", "b"])
    low = _tree("low", 1, ["doc:a#c0", "doc:a#c1"], ["a"])
    # A tree-node holds the chunks among its leaves, and nodes whose leaves it covers.
    assert _contains(top, c0) and _contains(top, b0) and _contains(low, c1)
    assert not _contains(low, b0)
    assert _contains(top, low) and not _contains(low, top) and not _contains(top, top)
    assert not _contains(c0, low) and not _contains(c0, top)
    passage = {**_chunk("a", 0), "unit": "passage"}  # an alias of chunk: the same leaf
    assert _contains(low, passage)
    # A leaf returned as tree-node level 0 is a chunk.
    assert _contains(low, {**_chunk("a", 1), "unit": "tree-node"})
    # Per-document kinds keep their rules: a document holds its pages and chunks, a page
    # the chunks cited on it, never the reverse, never across documents.
    doc_a = {"id": "doc:a", "unit": "document", "chunk": {"docId": "a", "index": 0}}
    page1 = {"id": "doc:a#p1", "unit": "page", "chunk": {"docId": "a", "index": 0},
             "citation": {"source": "a", "page": 1}}
    assert _contains(doc_a, c0) and _contains(doc_a, page1) and _contains(page1, c0)
    assert not _contains(page1, c1) and not _contains(doc_a, b0)
    assert not _contains(c0, doc_a) and not _contains(page1, doc_a)
    # A document holds a tree-node of itself alone (every leaf is its own), not a wider one;
    # a page cannot tell which of its chunks a node covers.
    assert _contains(doc_a, low) and not _contains(doc_a, top) and not _contains(page1, low)
    # Hits carrying no leaves are never taken to contain anything.
    assert not _contains({**top, "provenance": {}}, c0)


class _TreeEngine:
    """An RCP source answering from fixed wire-shaped hits per unit (chunk, document, tree-node),
    for the loop's side of the tree before the engine builds one."""

    capabilities = {"retrieve": {"units": ["chunk", "passage", "document", "tree-node"]}}

    def __init__(self, hits: dict[str, list[dict]]) -> None:
        self.hits = hits
        self.units: list[str] = []

    def retrieve(self, query: str, k: int, **options: object) -> dict:
        unit = str(options["unit"])
        self.units.append(unit)
        return {"hits": [dict(h) for h in self.hits.get(unit, [])][:k]}


def test_loop_escalates_to_tree_nodes_which_replace_their_leaves() -> None:
    from rcp_agentic.agentic import ConfidenceEvaluator, CorrectiveRetriever
    from rcp_agentic.agentic.trajectory import _contains

    chunks = [{**_chunk("a", 0), "confidence": 0.3}, {**_chunk("a", 1), "confidence": 0.3},
              {**_chunk("c", 0), "confidence": 0.3}]
    top = {**_tree("top", 2, ["doc:a#c0", "doc:a#c1", "doc:b#c0"], ["a", "b"]),
           "confidence": 0.8}
    low = {**_tree("low", 1, ["doc:a#c0", "doc:a#c1"], ["a"]), "confidence": 0.7}
    source = _TreeEngine({"chunk": chunks, "tree-node": [top, low]})
    loop = CorrectiveRetriever(source, k=5, max_steps=6, min_evidence=1,
                               evaluator=ConfidenceEvaluator(upper=0.6, lower=0.05))
    assert loop.ladder(0) == ["chunk", "document", "tree-node"]  # units.ladder, finest first
    res = loop.run("renewable energy sources")
    assert source.units == ["chunk", "chunk", "document", "tree-node"]
    assert [s.action for s in res.trace] == ["retrieve", "expand", "escalate", "escalate"]
    assert res.verdict == "correct"
    # The level-2 node took the place of the two chunks it covers; the level-1 node it also
    # covers was not added; the chunk of another document stays.
    assert [h["id"] for h in res.evidence] == ["tree:2:top", "doc:c#c0"]
    assert res.trace[-1].kept == 1
    assert not any(_contains(a, b) for a in res.evidence for b in res.evidence)
