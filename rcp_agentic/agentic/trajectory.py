"""One trajectory of the corrective loop: :class:`Run` holds its state (the queue of calls,
the evidence, the trace) and, from each step's judged hits, plans the next call (follow a
bridge, graph recall, escalate the unit, fall back to the next engine, re-query) or stops.
It reads the loop's settings and engines through :class:`Loop`, which
:class:`~.loop.CorrectiveRetriever` is; the rules: :mod:`.loop`."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import units
from ..containment import Extent, contains
from ..errors import RCPError
from ..integrations.common import HitSource
from ..models.llm import ChatLLM
from ..models.tokenizer import count_tokens
from ..options import BY_NAME
from ..wire import RetrieveResult
from .bridge import about, attests, bridge_entities, coverage, question_terms
from .evaluator import ConfidenceEvaluator, Verdict
from .result import CorrectiveResult, Step
from .rewrite import expand_query, frequent_words, llm_queries

# The retrieve option (Python name) and capability flag (its wire name) of graph recall.
GRAPH_RECALL = "graph_recall"
GRAPH_RECALL_WIRE = BY_NAME[GRAPH_RECALL].wire


class Loop(Protocol):
    """What a trajectory reads of its loop: the settings and the engines (module doc)."""

    sources: list[HitSource]
    evaluator: ConfidenceEvaluator
    llm: ChatLLM | None
    llm_queries: int
    max_steps: int
    max_tokens: int
    min_evidence: int
    options: dict[str, Any]
    refine_first: bool
    follow: int
    cover: float
    hops: int

    def engine_name(self, index: int) -> str: ...

    def supports(self, index: int, feature: str) -> bool: ...

    def graph_first(self, index: int) -> bool: ...

    def graph_recall_offered(self, index: int) -> bool: ...

    def ladder(self, index: int) -> list[str]: ...


@dataclass
class Call:
    query: str
    engine: int
    unit: str
    action: str
    reason: str
    graph: bool = False
    followed: tuple[str, ...] = ()
    hop: int = 0

    @property
    def key(self) -> tuple[int, str, str, bool]:
        return self.engine, self.unit, self.query, self.graph


@dataclass
class Run:
    """The state of one trajectory; ``observe`` decides the next call."""

    loop: Loop
    query: str
    session_id: str
    queue: deque[Call] = field(default_factory=deque)
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    trace: list[Step] = field(default_factory=list)
    tried: set[tuple[int, str, str, bool]] = field(default_factory=set)
    tokens: int = 0
    verdict: Verdict | None = None
    stop_reason: str = ""
    held_confident: int = 0  # confident hits of the evidence before the step observed
    followed: list[str] = field(default_factory=list)  # bridge entities queried so far
    terms: frozenset[str] = frozenset()  # the question's content terms
    covered: float = 0.0  # the share of them the confident evidence holds

    def __post_init__(self) -> None:
        self.terms = question_terms(self.query)

    def start(self) -> None:
        unit = self.loop.ladder(0)[0]
        self.queue.append(Call(self.query, 0, unit, "retrieve", "initial retrieval",
                                self.loop.graph_first(0)))

    def next_call(self) -> Call | None:
        if self.stop_reason:
            return None
        while self.queue:
            call = self.queue.popleft()
            if call.key not in self.tried:
                self.tried.add(call.key)
                return call
        self.stop_reason = self.stop_reason or "nothing left to try"
        return None

    def options(self, call: Call) -> dict[str, Any]:
        opts = {**self.loop.options, "unit": call.unit, "session_id": self.session_id}
        if call.graph:
            opts[GRAPH_RECALL] = True
        if self.loop.supports(call.engine, "tokenBudget"):
            opts["token_budget"] = max(1, self.loop.max_tokens - self.tokens)
        return opts

    def failed(self, call: Call, error: RCPError, latency_ms: float) -> None:
        self.trace.append(Step(len(self.trace) + 1, call.action, call.reason, call.query,
                               self.loop.engine_name(call.engine), call.unit,
                               latency_ms=latency_ms, error=f"{type(error).__name__}: {error}",
                               graph=call.graph, followed=list(call.followed), hop=call.hop))
        if call.engine + 1 < len(self.loop.sources):
            nxt = call.engine + 1
            self.queue.appendleft(Call(self.query, nxt, self.loop.ladder(nxt)[0], "fallback",
                                        f"engine {self.loop.engine_name(call.engine)} failed",
                                        self.loop.graph_first(nxt)))
        elif not self.evidence:
            raise error
        else:
            self.stop_reason = "the last engine failed; returning the evidence found"

    def observe(self, call: Call, result: RetrieveResult, latency_ms: float) -> None:
        loop = self.loop
        # The evidence holds wire hits (CorrectiveResult): the loop adds its meta to them.
        hits = [h.to_wire() for h in result.hits if h.id not in self.evidence]
        assessment = loop.evaluator.assess(hits)
        self.verdict = assessment.verdict
        kept = 0
        new_tokens = 0
        step = len(self.trace) + 1
        joining = assessment.kept
        if step == 1 and not loop.refine_first and assessment.verdict != "incorrect":
            joining = [dict(h) for h in hits]  # the loop starts from what one retrieve gives
        attested: dict[str, list[str]] = {}
        if call.followed:
            # A hit that names an entity the step followed attests the bridge and joins
            # whatever its confidence: that is relative to the expanded query, whose
            # question words keep pulling the first hop's look-alikes above it.
            for hit in hits:
                names = [n for n in call.followed if attests(hit.get("text") or "", n)]
                if names:
                    attested[hit["id"]] = names
            # The others only bring back the first hop's look-alikes (held out, a few per
            # cent of them are supporting passages): they stay out of the evidence.
            joining = [dict(h) for h in hits if h["id"] in attested]
        for hit in joining:
            if any(_contains(held, hit) for held in self.evidence.values()):
                continue  # already held inside a coarser unit
            inside = [i for i, held in self.evidence.items() if _contains(hit, held)]
            size = count_tokens(hit.get("text") or "")
            freed = sum(count_tokens(self.evidence[i].get("text") or "") for i in inside)
            if inside and size <= freed:
                continue  # the coarser unit holds nothing beyond what is already kept
            if self.tokens - freed + size > loop.max_tokens:
                continue
            hit["meta"] = {**(hit.get("meta") or {}), "step": step,
                           "engine": (hit.get("meta") or {}).get("engine",
                                                                 loop.engine_name(call.engine))}
            if hit["id"] in attested:
                hit["meta"]["follows"] = attested[hit["id"]]
            self._keep(hit, inside)
            self.tokens += size - freed
            new_tokens += size - freed
            kept += 1
        confident = self.confident()
        self.covered = self._coverage()
        self.trace.append(Step(len(self.trace) + 1, call.action, call.reason, call.query,
                               loop.engine_name(call.engine), call.unit, assessment.verdict,
                               assessment.max_confidence, len(hits), kept, new_tokens,
                               round(latency_ms, 3), hit_ids=[h["id"] for h in hits],
                               graph=call.graph, followed=list(call.followed), hop=call.hop,
                               coverage=round(self.covered, 4)))
        # The next bridge is read from the hits that attest this one, one hop further; else
        # from what the question itself found (its next entities).
        source = [self.evidence[i] for i in attested if i in self.evidence]
        found = sorted({n for h in source for n in h["meta"]["follows"]}, key=call.followed.index)
        hop = call.hop if source else 0
        if not source:
            source = [h for h in self.evidence.values() if self._own(h)]
        self._plan(call, assessment.verdict, assessment.reason, found_new=bool(hits),
                   confident=confident, source=source, hop=hop, found=found)
        self.held_confident = confident

    def _own(self, hit: Mapping[str, Any]) -> bool:
        """Whether the question itself found ``hit`` (not a rewritten or expanded query)."""
        step = (hit.get("meta") or {}).get("step")
        return not isinstance(step, int) or self.trace[step - 1].query == self.query

    def confident(self) -> int:
        """How many hits of the evidence reach the upper threshold, or attest a bridge the
        loop followed."""
        upper = self.loop.evaluator.upper
        return sum(1 for h in self.evidence.values()
                   if (h.get("confidence") or 0.0) >= upper or _follows(h))

    def _coverage(self) -> float:
        """The share of the question's terms the confident evidence (the hits counted by
        :meth:`confident`) holds."""
        upper = self.loop.evaluator.upper
        return coverage(self.terms, (h.get("text") or "" for h in self.evidence.values()
                                     if (h.get("confidence") or 0.0) >= upper or _follows(h)))

    def _keep(self, hit: dict[str, Any], inside: list[str]) -> None:
        """Add ``hit`` to the evidence, in the place of the finer units it contains."""
        if not inside:
            self.evidence[hit["id"]] = hit
            return
        rebuilt: dict[str, dict[str, Any]] = {}
        for key, held in self.evidence.items():
            if key == inside[0]:
                rebuilt[hit["id"]] = hit
            if key not in inside:
                rebuilt[key] = held
        self.evidence = rebuilt

    def _plan(self, call: Call, verdict: Verdict, why: str, *, found_new: bool,
              confident: int, source: list[dict[str, Any]], hop: int,
              found: list[str]) -> None:
        loop = self.loop
        gained = confident - self.held_confident
        if found:
            # The bridge was found, whatever the confidence relative to the expanded query.
            verdict, why = "correct", f"{why}; passages name {', '.join(found)}"
        if verdict == "correct":
            if confident >= loop.min_evidence:
                if self.covered >= loop.cover:
                    self.stop_reason = (f"correct: {why}; the confident evidence holds "
                                        f"{self.covered:.0%} of the question's terms")
                    return
                verdict, why = "ambiguous", (f"{why}, but the confident evidence holds "
                                             f"{self.covered:.0%} of the question's terms")
            else:
                verdict, why = "ambiguous", (f"{confident} of {loop.min_evidence} confident "
                                             "hit(s) needed")
        if len(self.trace) > 1 and confident and gained <= 0 and not self.queue:
            # A follow-up that adds no confident hit to evidence that already holds one: the
            # question has what there is to find (escalating or falling back is for a
            # trajectory that has found nothing confident yet).
            self.stop_reason = (f"saturated: step {len(self.trace)} added no confident hit "
                                f"({confident} held)")
            return
        if len(self.trace) >= loop.max_steps:
            self.stop_reason = f"step limit ({loop.max_steps}) reached"
            return
        if self.tokens >= loop.max_tokens:
            self.stop_reason = f"token budget ({loop.max_tokens}) spent"
            return
        if self.queue:  # sub-queries of a decomposition still to run
            return
        if verdict == "incorrect" or not found_new:
            reason = why if found_new else "no new hits"
            if self._graph(call, reason) or self._escalate(call, reason) \
                    or self._fall_back(call, reason):
                return
        elif self._graph(call, why):
            return
        self._requery(call, why, source, hop)

    def _graph(self, call: Call, why: str) -> bool:
        """The same query and unit again, recalling through the knowledge graph (once per
        engine trajectory, when the engine offers it and the unit is not composed from the
        graph anyway)."""
        if call.graph or not self.loop.graph_recall_offered(call.engine) \
                or _composed(call.unit):
            return False
        again = Call(call.query, call.engine, call.unit, "graph",
                      f"{why}: recall through the knowledge graph", graph=True)
        if again.key in self.tried:
            return False
        self.queue.append(again)
        return True

    def _escalate(self, call: Call, why: str) -> bool:
        ladder = self.loop.ladder(call.engine)
        at = ladder.index(call.unit) if call.unit in ladder else len(ladder) - 1
        if at + 1 >= len(ladder):
            return False
        self.queue.append(Call(self.query, call.engine, ladder[at + 1], "escalate",
                                f"{why}: {call.unit} → {ladder[at + 1]}", call.graph))
        return True

    def _fall_back(self, call: Call, why: str) -> bool:
        nxt = call.engine + 1
        if nxt >= len(self.loop.sources):
            return False
        self.queue.append(Call(self.query, nxt, self.loop.ladder(nxt)[0], "fallback",
                                f"{why}: trying engine {self.loop.engine_name(nxt)}",
                                self.loop.graph_first(nxt)))
        return True

    def _requery(self, call: Call, why: str, source: list[dict[str, Any]], hop: int) -> None:
        """The next query: the LLM's; else the bridge entities ``source`` names (``hop``
        bridges deep) with the question; else the question with words of the evidence."""
        ranked = sorted(self.evidence.values(), key=lambda h: -(h.get("confidence") or 0.0))
        followed: tuple[str, ...] = ()
        if self.loop.llm is not None:
            queries = llm_queries(self.loop.llm, self.query, ranked, n=self.loop.llm_queries)
            action = "decompose" if len(queries) > 1 else "rewrite"
        elif self.loop.follow:
            bridges = bridge_entities(self.query, source, skip=self.followed,
                                      limit=self.loop.follow, terms=self.terms)
            followed = tuple(b.name for b in bridges)
            if followed and hop >= self.loop.hops:
                self.stop_reason = (f"hops: {hop} bridge(s) followed, as many as asked; "
                                    f"{why}")
                return
            if followed:
                queries, action = [f"{self.query} {' '.join(followed)}"], "follow"
                why = f"{why}: follow {', '.join(followed)}"
                hop += 1
            else:  # the evidence names no one new
                queries, action = [frequent_words(self.query, ranked[:3])], "expand"
        else:
            queries = [expand_query(self.query, ranked[:3])]
            action = "expand"
        fresh = [q for q in queries
                 if (call.engine, call.unit, q, call.graph) not in self.tried]
        if not fresh:
            if not (self._escalate(call, f"{why}; no new query") or
                    self._fall_back(call, f"{why}; no new query")):
                self.stop_reason = f"{why}; no new query to try"
            return
        self.followed.extend(followed)
        for q in fresh:
            self.queue.append(Call(q, call.engine, call.unit, action, why, call.graph,
                                    followed, hop if followed else 0))

    def ranked_evidence(self) -> list[dict[str, Any]]:
        """The evidence in the order found within six tiers: the question's own confident
        hits (its retrievals, graph retries and escalations, at or above ``upper``); the
        bridge passages — the question's own hits the engine's graph recall put in through
        the first hop's entities (``scores["bridge"]``), and the passages about a bridge
        the loop followed (their title names it); the question's other hits at or above
        ``lower``; the passages that only mention a bridge; what other rewritten or
        expanded queries found; the question's hits below ``lower`` (kept for recall). A
        confidence is relative to the query that found the hit, so a follow-up's hit is
        placed by what it attests, not by its confidence (held out, ``bench/corrective.py``:
        merging bridge hits in by confidence won R@2 on MuSiQue and lost as much on
        HotpotQA; these tiers win on both). An engine bridge passage's confidence reads its
        place in the pool the question's lists recalled, which it did not reach; placed by
        it, the first step's bridges fell below the follow-ups' finds (MuSiQue R@5 77.5 ->
        73.5 over the loop; in the bridge tier, 79.4)."""
        upper, lower = self.loop.evaluator.upper, self.loop.evaluator.lower

        def tier(hit: dict[str, Any]) -> int:
            if not self._own(hit):
                follows = (hit.get("meta") or {}).get("follows")
                if not follows:
                    return 4
                return 1 if about(hit, follows) else 3
            confidence = hit.get("confidence")
            if confidence is None or float(confidence) >= upper:
                return 0
            if "bridge" in (hit.get("scores") or {}):
                return 1
            return 2 if float(confidence) >= lower else 5

        return sorted(self.evidence.values(), key=tier)  # stable: the order found

    def result(self) -> CorrectiveResult:
        return CorrectiveResult(self.query, self.ranked_evidence(), self.trace,
                                self.verdict, self.tokens, len(self.trace), self.session_id,
                                self.stop_reason)


def _follows(hit: Mapping[str, Any]) -> bool:
    """Whether a hit attests a bridge entity the loop followed (``meta.follows``)."""
    return bool((hit.get("meta") or {}).get("follows"))


def _place(hit: Mapping[str, Any]) -> tuple[str | None, int | None]:
    meta = hit.get("meta") or {}
    doc = (hit.get("chunk") or {}).get("docId") or meta.get("doc_id")
    return doc, (hit.get("citation") or {}).get("page")


def _kind(hit: Mapping[str, Any]) -> str | None:
    """The stored kind of a hit by the unit registry (a levelled kind at level 0 is its leaf
    kind; None: a kind this registry does not know)."""
    try:
        kind = units.get(str(hit.get("unit") or "chunk"))
    except KeyError:
        return None
    if kind.levelled and hit.get("level") == 0 and kind.level_zero is not None:
        kind = units.get(kind.level_zero)
    return kind.stored


def _composed(unit: str) -> bool:
    """Whether ``unit`` is composed from the graph at query time (graph recall adds nothing)."""
    try:
        return units.get(unit).composed
    except KeyError:
        return False


def _holds_leaves(hit: Mapping[str, Any]) -> bool:
    """Whether a hit's text holds what its leaves say (a chunk, a document, a summary) — False
    for the graph's units (``contains_leaves``), whose leaves only attest them."""
    try:
        return units.get(str(hit.get("unit") or "chunk")).contains_leaves
    except KeyError:
        return True  # another engine's kind: judged by its leaves as before


def _extent(hit: Mapping[str, Any]) -> Extent:
    """What containment reads of a wire hit: a summary lists its leaves
    (``provenance.leaves``) and documents (``meta.doc_ids``); a per-document unit is placed
    by its document and pages; a graph unit by its id alone."""
    meta = hit.get("meta") or {}
    doc, page = _place(hit)
    listed = (hit.get("provenance") or {}).get("leaves")
    holds = _holds_leaves(hit)
    leaves = (frozenset(str(leaf) for leaf in listed)
              if holds and isinstance(listed, list) and listed else None)
    docs = meta.get("doc_ids")
    start = meta.get("page_range_start", page)
    return Extent(str(hit.get("id")), (_kind(hit) or "") if holds else "graph", doc or "",
                  start, meta.get("page_range_end", start), leaves=leaves,
                  docs=frozenset(str(d) for d in docs) if isinstance(docs, list) else frozenset())


def _contains(outer: Mapping[str, Any], inner: Mapping[str, Any]) -> bool:
    """Whether ``outer`` holds ``inner`` (:func:`~rcp_agentic.containment.contains`: every
    leaf chunk of ``inner`` is among its own)."""
    return contains(_extent(outer), _extent(inner))
