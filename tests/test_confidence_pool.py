"""A hit's confidence is a function of the hit and its query (RCP §7.7.2), never of how it was
asked for: any ``k``, ``tokenBudget``, cursor page, session step, rerank or MMR reordering
gives the same hit of the same query the same confidence (issue 39)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableLambda

from conftest import DOCS, REPO, numbered_docs
from rcp_agentic import Engine

# The README's sample folder (chunks and PDF pages) plus short documents enough for a pool
# of more than Z_MIN_POOL chunks, so both the z-score models and their small-pool companions
# (the pages, the documents) are read.
QUERIES = ("How does reciprocal rank fusion combine rankings?",
           "what does packing do when a passage is too large?",
           "field notes on the glacier", "vitamin D and multiple sclerosis risk")
MODES = ("dense", "sparse", "hybrid")
UNITS = ("chunk", "page", "document")
MAX_CALLS = 12  # pages walked per example


def _judge(messages: Any) -> str:
    """A deterministic LLM stand-in for rerank: passages about fusion or packing first."""
    text = messages if isinstance(messages, str) else " ".join(
        getattr(m, "content", str(m)) for m in messages)
    passage = text.split("<passage>")[-1].lower()
    return "9" if "fusion" in passage or "packing" in passage else "2"


def _engine(path: Path, embedder: Any, **config: Any) -> Engine:
    eng = Engine(path, embedder=embedder, reranker=RunnableLambda(_judge), **config)
    eng.index_paths([REPO / "examples" / "docs"])
    eng.add_documents(DOCS + numbered_docs(60))
    return eng


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[list[Engine]]:
    """The default configuration (every unit is in each query's pool), and one whose pool is
    12 deep (``candidate_k``): a larger ``k`` or a session recalls deeper than the pool."""
    root = tmp_path_factory.mktemp("conf-pool")
    made = [_engine(root / "default", embedder), _engine(root / "shallow", embedder,
                                                         candidate_k=12)]
    yield made
    for eng in made:
        eng.close()


@functools.cache
def _reference(eng: Engine, query: str, mode: str, unit: str) -> dict[str, float | None]:
    """Every hit's confidence from one plain request for all of them (the maximum ``k``)."""
    res = eng.retrieve(query, k=eng.config.max_k, mode=mode, unit=unit, include_text=False)
    return {h.id: h.confidence for h in res.hits}


def _walk(eng: Engine, query: str, options: dict[str, Any], paging: str) -> Iterator[Any]:
    """The hits of successive pages: by cursor, or by one session's successive calls."""
    cursor = None
    for _call in range(MAX_CALLS):
        extra = {"cursor": cursor} if cursor else {}
        res = eng.retrieve(query, **options, **extra)
        yield from res.hits
        if paging == "session":
            if not res.hits:
                return
        else:
            cursor = res.next_cursor
            if cursor is None:
                return


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, str, str, str, dict[str, Any], str]:
    which = draw(st.integers(0, 1))
    query, mode, unit = (draw(st.sampled_from(QUERIES)), draw(st.sampled_from(MODES)),
                         draw(st.sampled_from(UNITS)))
    k = draw(st.integers(1, 30))
    options: dict[str, Any] = {"k": k, "mode": mode, "unit": unit, "include_text": False}
    budget = draw(st.none() | st.integers(20, 600))
    if budget is not None:
        options["token_budget"] = budget
    reorder = draw(st.sampled_from((None, "mmr", "rerank")))
    if reorder == "mmr":
        options["mmr"] = {"lambda": draw(st.sampled_from((0.0, 0.3, 0.7)))}
    elif reorder == "rerank":
        top_n = draw(st.integers(k, max(k, 12 if which else 100)))
        options["rerank"] = {"method": "llm", "topN": top_n}
    paging = draw(st.sampled_from(("cursor", "session")))
    if paging == "session":
        options["session_id"] = f"s{draw(st.integers(0, 2**62))}"
    return which, query, mode, unit, options, paging


@settings(max_examples=60, deadline=None)
@given(request=requests())
def test_a_hits_confidence_does_not_depend_on_how_it_was_asked_for(
        engines: list[Engine], request: tuple[int, str, str, str, dict[str, Any], str]) -> None:
    which, query, mode, unit, options, paging = request
    eng = engines[which]
    reference = _reference(eng, query, mode, unit)
    got = [(h.id, h.confidence) for h in _walk(eng, query, options, paging)]
    assume(got)  # a budget smaller than every unit packs nothing
    assert all(c is not None for _id, c in got), got
    differ = [(hit, c, reference.get(hit)) for hit, c in got if c != reference.get(hit)]
    assert not differ, f"{options} ({paging}): (hit, got, alone) {differ}"


@pytest.mark.parametrize("which", [0, 1])
def test_every_page_and_k_agree_on_the_readme_queries(engines: list[Engine], which: int) -> None:
    """The README's queries, k from 1 to 6, each unit: one value per hit (the issue's case)."""
    eng = engines[which]
    for query, unit in itertools.product(QUERIES[:2], ("chunk", "page")):
        seen: dict[str, set[float | None]] = {}
        for k in range(1, 7):
            for h in eng.retrieve(query, k=k, unit=unit, include_text=False).hits:
                seen.setdefault(h.id, set()).add(h.confidence)
        assert seen and all(len(v) == 1 for v in seen.values()), (query, unit, seen)


def test_a_hit_scores_the_same_whatever_else_is_returned(engines: list[Engine]) -> None:
    """A hit's per-stage scores (which the confidence reads) are its recall list's own, so
    they do not move with the page it is returned in."""
    eng = engines[0]
    alone = {h.id: h.scores for h in eng.retrieve(QUERIES[1], k=eng.config.max_k).hits}
    for k in range(1, 8):
        for h in eng.retrieve(QUERIES[1], k=k).hits:
            assert h.scores == alone[h.id], (k, h.id)

