"""``retrieve``'s ``rewrite`` option (§7.7): the query transformed by the engine's LLM before
recall (:mod:`rcp_agentic.pipeline.transform`).

``rewrite`` and ``step-back`` search with the LLM's one query. ``hyde`` embeds the LLM's
hypothetical passage for the dense leg (and a tree traversal); BM25, graph linking and the
reranker keep the question (in ``mode: "sparse"`` BM25 reads both). ``multi-query`` and
``decompose`` search with the question's alternatives or sub-questions, one ranking each,
fused by reciprocal rank (ties by unit id). The result's ``rewrittenQuery`` is what was
searched with and ``usage.notes`` says how; a reply the LLM made unusable leaves the
question as given, and says so. A cursor carries the rewritten query, so the next page does
not ask the LLM again; ``multi-query`` and ``decompose`` keep sessions and ``tokenBudget``
but mint no cursor (:func:`.params.make_plan` refuses one) and apply ``minScore`` to each
query's ranking, since the fused score is on another scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import OptionUnsupported
from ..models.llm import ChatLLM
from ..vocabulary import MULTI_QUERY_METHODS
from . import fusion
from .candidates import Ranking, Request
from .transform import transform

JOIN = " | "
# How many queries multi-query and decompose ask the LLM for (query/transform's default n).
QUERIES = 3


@dataclass(frozen=True)
class Rewrite:
    """What a request searches with after its rewrite: its queries (``multi-query`` and
    ``decompose``: each ranked, then fused) and the ``rewrittenQuery`` to report."""

    queries: list[str]
    reported: str


def rewrite(request: Request, chat: ChatLLM | None, max_chars: int) -> Rewrite:
    """Transform the request's query by its plan's ``rewrite`` (or take the cursor's), and
    point the plan at the result (module doc); ``max_chars`` caps each query."""
    plan = request.plan
    method, original = plan.rewrite, plan.query
    assert method is not None
    state = request.cursor
    hypothetical: str | None
    if state is not None and state.rewritten is not None:
        # The first page's transformation: a fresh one could rank differently.
        texts, hypothetical = [state.rewritten], state.rewritten
        fallback = method == "hyde" and state.rewritten == original
    else:
        if chat is None:  # the LLM was taken away after the request was planned
            raise OptionUnsupported("query rewriting is not offered by this engine (it has "
                                    "no LLM)", option="rewrite")
        done = transform(chat, original, method, QUERIES, max_chars=max_chars,
                         control=request.ctl)
        request.ctl.check()
        texts, hypothetical, fallback = done.queries, done.hypothetical, done.fallback
    if fallback or (method == "hyde" and not hypothetical):
        plan.notes.append(f"rewrite {method}: the LLM's reply was not usable, so the query was "
                          "searched as given")
        request.rewritten = original
        return Rewrite([original], original)
    if method == "hyde":
        assert hypothetical is not None
        return _hyde(request, hypothetical)
    if method in MULTI_QUERY_METHODS:
        queries = [original, *texts] if method == "multi-query" else list(texts)
        plan.notes.append(f"rewrite {method}: searched with {len(queries)} "
                          f"quer{'y' if len(queries) == 1 else 'ies'} (rewrittenQuery, joined "
                          f"by {JOIN!r}) and fused their rankings by reciprocal rank")
        return Rewrite(queries, JOIN.join(queries))
    plan.query = request.rewritten = texts[0]
    plan.notes.append(f"rewrite {method}: searched with the LLM's query (rewrittenQuery)")
    return Rewrite([texts[0]], texts[0])


def _hyde(request: Request, passage: str) -> Rewrite:
    """Point the dense leg at the hypothetical ``passage`` (BM25 too in sparse mode)."""
    plan = request.plan
    request.rewritten = plan.dense_query = passage
    if plan.mode == "sparse":
        plan.sparse_query = f"{plan.query}\n{passage}"
        plan.notes.append("rewrite hyde: mode sparse has no dense leg, so BM25 read the query "
                          "and the hypothetical passage (rewrittenQuery) together")
    else:
        plan.notes.append("rewrite hyde: dense recall embedded the hypothetical passage "
                          "(rewrittenQuery); the other stages used the query as given")
    return Rewrite([plan.query], passage)


def fuse(rankings: Sequence[Ranking], rrf_k: int) -> Ranking:
    """The rankings of several queries (positions of one index) fused by reciprocal rank;
    ties go to the smaller position, that is the smaller unit id."""
    return fusion.rrf({str(i): ranked for i, ranked in enumerate(rankings)}, {}, rrf_k)


def best_runs(rankings: Sequence[Ranking], positions: Sequence[int]) -> dict[int, tuple[int, int]]:
    """For each of ``positions``: the ranking that placed it highest and its rank there (ties:
    the earlier ranking) — the one its hit is built from."""
    wanted = set(positions)
    best: dict[int, tuple[int, int]] = {}
    for run, ranked in enumerate(rankings):
        for rank, (pos, _score) in enumerate(ranked):
            if pos in wanted and (pos not in best or rank < best[pos][1]):
                best[pos] = (run, rank)
    return best


def merge_notes(notes: list[str], more: Sequence[list[str]]) -> None:
    """Append the notes of several rankings to ``notes``, each once."""
    for extra in more:
        for note in extra:
            if note not in notes:
                notes.append(note)
