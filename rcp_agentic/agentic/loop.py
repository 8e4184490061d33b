"""A corrective (CRAG-style) retrieval loop over any RCP engine, driven by hit confidence,
that follows a multi-hop question's bridge entities (IRCoT's move, with no LLM).

Each step retrieves, the evaluator judges the hits, and the next action follows from what
was found: *correct* (``min_evidence`` confident hits) stops once the evidence covers the
question's hops (``cover``); *not covered* or *ambiguous* follows the bridge (the entities
the evidence names and the question does not join the next query, and seed graph recall),
or an LLM's rewrite; *incorrect* or nothing new turns to graph recall, then escalates the
unit along :func:`rcp_agentic.units.ladder`, then falls back to the next engine, then
re-queries; *saturated* (a follow-up adding nothing confident) stops. The first step's hits
are kept unless judged incorrect. One ``session_id`` threads every call; steps and evidence
tokens are bounded; the result is the evidence, in tiers, and a trace of every step. The
same planner drives the sync and the async loop. Each rule, with examples and measurements:
``docs/agentic.md``, "A corrective retrieval loop".
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from .. import units
from ..client.gating import switch_offered
from ..errors import RCPError
from ..integrations.common import HitSource
from ..models.llm import as_chat
from .evaluator import ConfidenceEvaluator
from .result import CorrectiveResult
from .trajectory import GRAPH_RECALL, GRAPH_RECALL_WIRE, Run

# Bridge entities a follow step adds to the question, bridges followed in a chain, and the
# share of the question's terms the confident evidence must hold to stop. Chosen held out
# (bench/corrective.py --tune: 5-fold inside HotpotQA, 2Wiki and MuSiQue and leave-one-set-out
# across them chose 1 hop and cover 0.9 every time, follow 3 or 4; these are the choice on
# all three). A second hop's passages were supporting ones a few times in a hundred.
FOLLOW = 3
HOPS = 1
COVER = 0.9


class CorrectiveRetriever:
    """A corrective retrieval loop over one engine, with optional fallback engines.

    ``source`` and each of ``fallbacks`` is anything
    :class:`~rcp_agentic.integrations.common.HitSource` accepts (an Engine, an RCP
    client, a stdio command, an HTTP URL, a registry entry, a federation).
    ``options`` are extra retrieve options for every call (``mode``, ``filter``…);
    ``llm`` (a LangChain chat model / Runnable or a LlamaIndex LLM) enables
    rewriting and decomposition. ``min_evidence`` confident hits (≥ the upper
    threshold, over the whole trajectory) are needed before a retrieval counts as
    correct. The default, 2, is what a multi-hop question needs: with 1, one confident hit
    ends a question at its first step (held out, without the graph: HotpotQA set recall
    0.843 against 0.890, 2Wiki 0.736 against 0.828; ``bench/corrective.py``, issue 22); a
    single-hop corpus may pass 1 to save a call. ``graph``: where an engine advertises graph
    recall, recall through the graph from the first step and climb to the graph's units
    (True); only retry an ambiguous or incorrect step with it (``"escalate"``); never
    (False). ``graph_recall=True`` in ``options`` turns it on from the first step even with
    ``"escalate"``. Measured (``bench/corrective.py``): from the first step is the best on
    the multi-hop sets and level on SciFact, whose claims rarely give the graph a vote.
    ``refine_first=True`` drops the first step's hits below the lower threshold as well
    (the release's loop: held out, from the start, HotpotQA Recall@5 0.865 against 0.907
    kept whole, 2Wiki 0.904 against 0.913).

    Without an LLM the loop follows the bridge: ``follow`` entities the evidence names and
    the question does not join the question as the next query, a follow-up keeps the
    passages that name one, and those passages' own names are followed in turn, at most
    ``hops`` bridges deep. A correct step ends the loop once the confident evidence (and the
    passages that attest a bridge) hold ``cover`` of the question's content terms.
    ``follow=0`` re-queries with the question expanded by the best hits' names instead, and
    ``cover=0`` stops at the first correct step: both together are the loop before bridge
    following. The defaults were chosen held out (``bench/corrective.py --tune``).
    """

    def __init__(self, source: Any, *, fallbacks: Sequence[Any] = (),
                 evaluator: ConfidenceEvaluator | None = None, k: int = 5, max_steps: int = 4,
                 max_tokens: int = 2000, min_evidence: int = 2, llm: Any = None,
                 llm_queries: int = 2,
                 options: Mapping[str, Any] | None = None,
                 names: Sequence[str] | None = None,
                 graph: bool | Literal["escalate"] = True,
                 refine_first: bool = False, follow: int = FOLLOW,
                 cover: float = COVER, hops: int = HOPS) -> None:
        if min(k, max_steps, max_tokens, min_evidence) < 1:
            raise ValueError("k, max_steps, max_tokens and min_evidence must be at least 1")
        if graph not in (True, False, "escalate"):
            raise ValueError("graph must be True, False or 'escalate'")
        if follow < 0 or hops < 0 or not 0.0 <= cover <= 1.0:
            raise ValueError("follow and hops must be at least 0 and cover within [0, 1]")
        self.sources = [s if isinstance(s, HitSource) else HitSource(s)
                        for s in (source, *fallbacks)]
        self.names = list(names) if names else [f"engine{i}" for i in range(len(self.sources))]
        if len(self.names) != len(self.sources):
            raise ValueError("one name per engine (source and fallbacks)")
        self.evaluator = evaluator or ConfidenceEvaluator()
        self.k = k
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.min_evidence = min_evidence
        self.llm = as_chat(llm) if llm is not None else None
        self.llm_queries = llm_queries
        given = dict(options or {})
        self.graph_from_start = bool(given.pop(GRAPH_RECALL, None)
                                     or given.pop(GRAPH_RECALL_WIRE, None))
        self.graph = graph
        self.refine_first = refine_first
        self.follow = follow
        self.cover = cover
        self.hops = hops
        self.options = {key: v for key, v in given.items()
                        if key not in ("k", "unit", "session_id", "token_budget")}
        self.start_unit = (options or {}).get("unit")
        self._ladders: dict[int, list[str]] = {}

    def engine_name(self, index: int) -> str:
        return self.names[index]

    def _caps(self, index: int) -> dict[str, Any] | None:
        """The engine's capabilities; None when it cannot be reached (its call will fail)."""
        try:
            return dict(self.sources[index].capabilities)
        except RCPError:
            return None

    def _retrieve_caps(self, index: int) -> dict[str, Any] | None:
        """The engine's retrieve capability; None when it cannot be reached."""
        caps = self._caps(index)
        return None if caps is None else dict(caps.get("retrieve") or {})

    def supports(self, index: int, feature: str) -> bool:
        return bool((self._retrieve_caps(index) or {}).get(feature))

    def graph_first(self, index: int) -> bool:
        """Whether this engine's first call already recalls through the graph: with
        ``graph=True`` when it offers graph recall, or when the options turn it on."""
        return self.graph_from_start or (self.graph is True and self.graph_recall_offered(index))

    def graph_recall_offered(self, index: int) -> bool:
        """Whether the loop may turn graph recall on for this engine (it advertises
        ``x-rcp-agentic.graphRecall``)."""
        return self.graph and switch_offered(GRAPH_RECALL_WIRE, self._caps(index) or {})

    def ladder(self, index: int) -> list[str]:
        """The units this engine can escalate through, finest first."""
        if index not in self._ladders:
            caps = self._retrieve_caps(index)
            if caps is None:  # unreachable: its first call fails and the loop falls back
                return [self.start_unit or "chunk"]
            offered = caps.get("units") or ["chunk"]
            ladder = units.ladder(offered)
            if not self.graph:
                ladder = [u for u in ladder
                          if units.get(u).enabled_by not in ("build_graph", "graph_communities")]
            if self.start_unit in ladder:
                ladder = ladder[ladder.index(self.start_unit):]
            self._ladders[index] = ladder or [offered[0]]
        return self._ladders[index]

    def _run(self, query: str, session_id: str | None) -> Run:
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        run = Run(self, query, session_id or f"crag-{uuid.uuid4().hex[:12]}")
        run.start()
        return run

    def run(self, query: str, *, session_id: str | None = None) -> CorrectiveResult:
        """Run the loop for ``query``; returns the evidence and the trace."""
        run = self._run(query, session_id)
        while (call := run.next_call()) is not None:
            start = time.perf_counter()
            try:
                result = self.sources[call.engine].retrieve(call.query, self.k, run.options(call))
            except RCPError as err:
                run.failed(call, err, (time.perf_counter() - start) * 1000)
                continue
            run.observe(call, result, (time.perf_counter() - start) * 1000)
        return run.result()

    async def arun(self, query: str, *, session_id: str | None = None) -> CorrectiveResult:
        """The same loop on asyncio (engine calls awaited; an LLM runs in a worker thread)."""
        run = await asyncio.to_thread(self._run, query, session_id)
        while (call := run.next_call()) is not None:
            start = time.perf_counter()
            try:
                options = await asyncio.to_thread(run.options, call)
                result = await self.sources[call.engine].aretrieve(call.query, self.k, options)
            except RCPError as err:
                run.failed(call, err, (time.perf_counter() - start) * 1000)
                continue
            latency = (time.perf_counter() - start) * 1000
            if self.llm is not None:
                await asyncio.to_thread(run.observe, call, result, latency)
            else:
                run.observe(call, result, latency)
        return run.result()

    def close(self) -> None:
        """Close the clients the loop opened."""
        for source in self.sources:
            source.close()
