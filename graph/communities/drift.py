"""DRIFT search, the ``drift`` op of ``graph`` (RCP §7.9; GraphRAG's DRIFT): a primer (the
``PRIMER_K`` best communities: by the PageRank mass, from the entities the question names,
their members hold; then retrieve's ranking), follow-up queries from it, then a local search
per follow-up (graph-aware chunk retrieve), fused by RRF.

Follow-ups offline are the primer's most central entities the question does not name, each
phrased as its attested relation, else as the question's entity-free words plus its name,
then its members' facts about entities new to the question; with an LLM, DRIFT's primer
prompt. The first call also searches the question itself. ``followups`` is the frontier not
yet run; with a ``sessionId`` it is kept (:class:`Frontiers`: bounded, expiring) and the next
``drift`` call of that session with the same question runs the next ``FOLLOWUPS_PER_CALL``
of it (a new primer from the next communities once it is empty), the session's dedup keeping
hits from repeating.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ...bounded import DEFAULT_MAX_BYTES, ByteBudget, SessionKeyed
from ...control import RequestControl, checked
from ...models.llm import as_chat, json_object
from ...models.llm_guard import DATA_RULE, data_block
from ...pipeline import fusion
from ...trust import derived_trust, strip_markup
from ...wire import GraphResult, Hit, Trust, Usage
from ..compose import community_masses, reading_order, request_view
from ..sources import SourceTrust
from .reads import CommunityReader, filter_key, version_of

if TYPE_CHECKING:
    from ..context import GraphContext
    from ..ppr import GraphView
    from .index import CommunityStore, StoredCommunity

PRIMER_K = 3
MAX_FOLLOWUPS = 5  # follow-ups derived from one primer
FOLLOWUPS_PER_CALL = 2  # follow-ups one drift call runs (the first also runs the question)
MAX_FOLLOWUP_CHARS = 300
MAX_ASKED = 64  # run queries a kept DRIFT state remembers (the newest)
MAX_PRIMED = 64  # primer communities it remembers (the newest)
# Bytes charged for a kept DRIFT state, on top of its strings' own size: tracemalloc on
# CPython 3.11 measured ~310 B for the dataclass and its three empty lists, ~8 B per list
# slot; rounded up (lists over-allocate).
DRIFT_OVERHEAD = 512
DRIFT_SLOT = 16
RRF_K = 60
_LOW_KINDS = frozenset({"date", "number"})

DRIFT_SYSTEM = (
    "You help search a knowledge graph. From a question and one community report, write an "
    "intermediate answer and follow-up queries that would find the details the report lacks "
    "(about entities or facts the question does not name). " + DATA_RULE + " Reply with "
    "JSON only: "
    "{\"intermediate_answer\": \"...\", \"score\": 0-100, \"follow_up_queries\": [\"...\"]}.")
DRIFT_PROMPT = "Question: {query}\n\nCommunity report {id}:\n{data}"


# --- frontiers ----------------------------------------------------------------------------------

@dataclass
class DriftState:
    """Where a session's DRIFT search stands: its question and level, the follow-ups still to
    run (the frontier), those already run (the newest ``MAX_ASKED``; ``forgotten`` counts the
    older ones), and the primer communities already used (the newest ``MAX_PRIMED``)."""

    query: str
    level: int
    filter_key: str
    pending: list[str] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)
    primed: list[str] = field(default_factory=list)
    trust: Trust | None = None  # of every follow-up derived so far (their sources, combined)
    forgotten: int = 0

    def copy(self) -> DriftState:
        return replace(self, pending=list(self.pending), asked=list(self.asked),
                       primed=list(self.primed))


def drift_bytes(session_id: str, state: DriftState) -> int:
    """What one kept DRIFT state holds, key included (an upper estimate; a string held in
    two places, the question among ``asked``, is one object: its slots count twice, its
    characters once)."""
    strings = [session_id, state.query, state.filter_key, *state.pending, *state.asked,
               *state.primed]
    distinct = {id(x): x for x in strings}.values()
    return (DRIFT_OVERHEAD + DRIFT_SLOT * len(strings)
            + sum(sys.getsizeof(x) for x in distinct))


class Frontiers(SessionKeyed[DriftState]):
    """DRIFT states by session id, in the engine's session byte budget (a
    :class:`~rcp_agentic.bounded.SessionKeyed`): least recently used evicted, expiring,
    thread-safe; each state's lists bounded (oldest first)."""

    def __init__(self, *, max_sessions: int = 10_000, ttl_seconds: int = 3600,
                 budget: ByteBudget | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(drift_bytes, max_sessions=max_sessions, ttl_seconds=ttl_seconds,
                         budget=budget, max_bytes=max_bytes, clock=clock)

    def get(self, session_id: str) -> DriftState | None:
        """A copy of the session's state (None for an unknown or expired session): the kept
        one changes only through :meth:`put`."""
        with self._store.lock:
            got = self._store.get(session_id)
            return None if got is None else got.copy()

    def put(self, session_id: str, state: DriftState) -> list[str]:
        """Keep ``state`` as the session's (now the most recently used), its run queries and
        primer communities cut to the newest ``MAX_ASKED`` / ``MAX_PRIMED``; returns notes
        saying what was forgotten."""
        notes = []
        extra = len(state.asked) - MAX_ASKED
        if extra > 0:
            del state.asked[:extra]
            state.forgotten += extra
            notes.append(f"drift frontier full: forgot its {extra} oldest run queries "
                         "(they may be suggested again)")
        extra = len(state.primed) - MAX_PRIMED
        if extra > 0:
            del state.primed[:extra]
            notes.append(f"drift frontier full: forgot its {extra} oldest primer communities "
                         "(they may prime again)")
        if not self._store.put(session_id, state.copy()):
            notes.append("drift frontier not kept: it is larger than the session budget")
        return notes



def parse_followups(reply: str) -> list[str]:
    """The follow-up queries of a DRIFT primer reply ([] when there are none)."""
    data = json_object(reply)
    raw = data.get("follow_up_queries") if data else None
    if not isinstance(raw, list):
        return []
    return [" ".join(q.split())[:MAX_FOLLOWUP_CHARS] for q in raw
            if isinstance(q, str) and q.strip()]



def round_robin(lists: Sequence[Sequence[str]]) -> list[str]:
    """The lists' items interleaved, first items first, each once."""
    out: list[str] = []
    for i in range(max((len(x) for x in lists), default=0)):
        for x in lists:
            if i < len(x) and x[i] not in out:
                out.append(x[i])
    return out


class DriftSearch:
    """The ``drift`` op over one engine's communities (see the module doc).

    ``node_keys``: node unit id -> entity key for a graph view; ``frontiers``: the kept
    DRIFT states, owned by the caller (they share the engine's session budget).
    """

    def __init__(self, ctx: GraphContext, reader: CommunityReader,
                 node_keys: Callable[[GraphView], Mapping[str, str]],
                 frontiers: Frontiers) -> None:
        self.ctx = ctx
        self.reader = reader
        self.node_keys = node_keys
        self.frontiers = frontiers

    def run(self, query: Any, *, k: int | None = None, level: int | None = None,
              session_id: str | None = None, filter: Mapping[str, Any] | None = None,
              control: RequestControl | None = None) -> GraphResult:
        """Primer, follow-ups and local search (see the module doc); with ``session_id`` a
        call with the same question continues the session's frontier. Primer, follow-ups
        and hits come only from what ``filter`` allows (the follow-ups from the graph
        restricted to its chunks, whatever the communities' lag behind the graph); the
        follow-ups' trust is ``GraphResult.trust``."""
        t0 = time.perf_counter()
        ctl = checked(control)
        text, store, lvl = self.reader.searched(query, "drift", level)
        k = 10 if k is None else k
        filter_ = filter
        made_under = filter_key(filter_)
        state = self.frontiers.get(session_id) if session_id else None
        continued = (state is not None and state.query == text and state.level == lvl
                     and state.filter_key == made_under)
        notes = [f"level {lvl} of 0..{store.top_level}"]
        if not continued or state is None:
            state = DriftState(text, lvl, made_under)
        else:
            notes.append(f"continued the session's search: "
                         f"{state.forgotten + len(state.asked)} queries run "
                         f"before, {len(state.pending)} follow-ups pending")
        if not state.pending:
            state.pending.extend(self._followups(text, lvl, state, filter_, notes, ctl))
        run = [] if continued else [text]  # the question itself opens a search
        while state.pending and len(run) < FOLLOWUPS_PER_CALL + (0 if continued else 1):
            run.append(state.pending.pop(0))
        if not run:
            notes.append("no follow-up left: the question again")
            run = [text]
        hits, version = self._local(run, k, session_id, filter_, ctl,
                                    first_step=state.forgotten + len(state.asked))
        state.asked.extend(q for q in run if q not in state.asked)
        if session_id:
            notes.extend(self.frontiers.put(session_id, state))
        notes.append(f"ran {len(run)} searches; {len(state.pending)} follow-ups left")
        notes += self.reader.lag(version_of(version), ("community", "node"))
        return GraphResult(hits=hits, followups=list(state.pending), index_version=version,
                           trust=state.trust,
                           usage=Usage(candidates=len(hits),
                                       latency_ms=round((time.perf_counter() - t0) * 1000, 3),
                                       notes=notes))

    def _followups(self, text: str, level: int, state: DriftState,
                   filter_: Mapping[str, Any] | None, notes: list[str],
                   control: RequestControl) -> list[str]:
        """Follow-ups from the next primer communities (those not used by the session yet);
        ``state.trust`` takes in the trust of their sources."""
        primer, view, store = self._primer(text, level, state.primed, filter_, control)
        state.primed.extend(c.id for c in primer)
        if not primer:
            return []
        control.check()
        done = {q.casefold() for q in [*state.asked, *state.pending, text]}
        llm = self.ctx.llm
        found: list[tuple[str, Trust | None]] = []
        if llm is not None:
            # Written from the primer reports: each carries the reports' trust.
            reports = self.reader.trust(store, [c.id for c in primer])
            from_reports = SourceTrust.combine(reports.values())
            found = [(q, from_reports)
                     for q in self._llm_followups(text, primer, llm, control)]
            control.check()
            if not found:
                notes.append("the primer replies held no follow-up queries: derived offline")
        if not found and view is not None:
            found = self._offline_followups(text, primer, view)
        out: list[str] = []
        kept: list[Trust | None] = [state.trust]
        for raw, trust in found:
            # A follow-up carries its sources' trust and its own screening (it claims no level
            # itself); a model's markup is taken out of it, and flags it.
            q, sanitized = strip_markup(raw)
            if q and q.casefold() not in done and len(out) < MAX_FOLLOWUPS:
                done.add(q.casefold())
                out.append(q)
                kept += [trust, derived_trust((), [q], self.ctx.screen, sanitized=sanitized,
                                              default="trusted")]
        state.trust = SourceTrust.combine(kept)
        notes.append(f"primer: {', '.join(c.id for c in primer)}")
        return out

    def _primer(self, text: str, level: int, used: Sequence[str],
                filter_: Mapping[str, Any] | None, control: RequestControl
                ) -> tuple[list[StoredCommunity], GraphView | None, CommunityStore]:
        """The next ``PRIMER_K`` communities of the level for the question: by the personalised
        PageRank mass (from the entities it names, over the graph the filter allows) their
        members hold, then retrieve's ranking; only communities that pass the filter. Also
        the filtered graph and the store of the version served."""
        ranked, store, _token = self.reader.ranked(text, level, PRIMER_K, filter_, control,
                                                   skip=used)
        view, _v = request_view(self.ctx.catalog, filter_, store.version)
        control.check()
        first: list[StoredCommunity] = []
        links = view.link(text) if view is not None else {}
        if view is not None and links:
            passing = self.reader.passing(store, filter_) if filter_ is not None else None
            weight = community_masses(view, view.mass(links), (
                c for c in store.level(level)
                if c.id not in used and (passing is None or c.id in passing)))
            first = sorted((store.by_id[i] for i in weight),
                           key=lambda c: (-weight[c.id], c.id))
        out = list({c.id: c for c in [*first, *(c for _h, c in ranked)]}.values())
        return out[:PRIMER_K], view, store

    def _llm_followups(self, text: str, primer: Sequence[StoredCommunity],
                       llm: Any, control: RequestControl) -> list[str]:
        chat = as_chat(llm)
        replies = chat.ask_many(DRIFT_SYSTEM, [DRIFT_PROMPT.format(query=text, id=c.id,
                                                                   data=data_block(c.text))
                                               for c in primer], stage="drift",
                                     control=control)
        return round_robin([parse_followups(r) for r in replies])

    def _offline_followups(self, text: str, primer: Sequence[StoredCommunity],
                           view: GraphView) -> list[tuple[str, Trust | None]]:
        """Per primer community, its most central members the question does not name, each
        phrased by its strongest attested relation (to a question entity, else a fellow
        member, else any entity), else as the question's other words plus its name; then its
        members' facts about entities outside it the question does not name. Round-robin
        over the communities, best first. ``view`` is the graph the request may see (members
        and relations outside it are never read), and each follow-up carries the trust of
        the chunks its words come from."""
        keys = self.node_keys(view)
        entities = view.graph.entities
        linked = set(view.link(text))
        folded = text.casefold()

        def new(key: str) -> bool:
            e = entities[key]
            return (key not in linked and e.kind not in _LOW_KINDS
                    and e.name.casefold() not in folded)

        core = text
        for key in sorted(linked, key=lambda e: -len(entities[e].name)):
            core = re.sub(re.escape(entities[key].name), " ", core, flags=re.I)
        core = " ".join(core.replace("?", " ").split()).strip(" ,;:")
        lists: list[list[str]] = []
        sources: dict[str, Sequence[str]] = {}  # follow-up -> the chunks its words come from
        for c in primer:
            members = [keys[u] for u in c.entities if u in keys] or list(c.members)
            inside = set(c.members)
            own = [self._phrase(view, key, linked, inside, core)
                   for key in members[:8] if key in entities and new(key)]
            facts = self._facts(view, [m for m in members[:8] if m in entities], inside, new)
            for phrase, chunks in [*own, *facts]:
                sources.setdefault(phrase, chunks)
            lists.append([phrase for phrase, _c in [*own, *facts]])
        trust = SourceTrust(self.ctx.store.reader, self.ctx.screen)
        trust.prefetch(c for chunks in sources.values() for c in chunks)
        return [(q, trust.of(sources[q])) for q in round_robin(lists)]

    @staticmethod
    def _phrase(view: GraphView, key: str, linked: set[str], members: set[str],
                core: str) -> tuple[str, Sequence[str]]:
        """An entity's follow-up and the chunks its words come from."""
        names = view.graph.entities
        best: tuple[int, float, str, Sequence[str]] | None = None  # (rank, weight, phrase, src)
        for a, b, w, r in view.neighbors([key], hops=1, limit=64).edges:
            if r is None or key not in (a, b):
                continue
            other = b if a == key else a
            # A question entity, else a fellow member, else any; dates and numbers last.
            rank = (0 if other in linked else 1 if other in members else 3) + (
                names[other].kind in _LOW_KINDS)
            first, second = reading_order(r, names[r.subject], names[r.object])
            phrase = " ".join(f"{first} {r.relation} {second}".split())
            if best is None or (rank, -w) < (best[0], -best[1]):
                best = (rank, w, phrase, r.chunks)
        if best is not None:
            return best[2][:MAX_FOLLOWUP_CHARS], best[3]
        e = names[key]
        return (" ".join(f"{core} {e.name}".split())[:MAX_FOLLOWUP_CHARS],
                [*e.mentions, *e.about])

    @staticmethod
    def _facts(view: GraphView, members: Sequence[str], inside: set[str],
               new: Callable[[str], bool]) -> list[tuple[str, Sequence[str]]]:
        """Attested relations from ``members`` to entities outside the community that are
        new to the question, strongest first, as ``"<A> <relation> <B>"`` with the chunks
        attesting them."""
        names = view.graph.entities
        found: dict[str, tuple[float, str, Sequence[str]]] = {}
        for a, b, w, r in view.neighbors(members, hops=1, limit=64).edges:
            if r is None or (a in inside) == (b in inside):
                continue
            other = b if a in inside else a
            if not new(other):
                continue
            first, second = reading_order(r, names[r.subject], names[r.object])
            phrase = " ".join(f"{first} {r.relation} {second}".split())[:MAX_FOLLOWUP_CHARS]
            if other not in found or w > found[other][0]:
                found[other] = (w, phrase, r.chunks)
        return [(p, src) for _o, (_w, p, src) in
                sorted(found.items(), key=lambda kv: (-kv[1][0], kv[0]))]

    def _local(self, run: Sequence[str], k: int, session_id: str | None,
               filter_: Mapping[str, Any] | None, control: RequestControl, *,
               first_step: int = 0) -> tuple[list[Hit], str | None]:
        """Graph-aware chunk hits for each query of ``run``, fused by RRF; each hit's
        ``meta.drift`` names the query that found it first and its ``step`` (the number of
        queries the session ran before it). With a session the
        engine's session dedup keeps hits from repeating, and ``k`` is split among the
        queries (so every hit marked seen is returned)."""
        if session_id is not None:
            run = run[:k]
            shares = [k // len(run) + (1 if i < k % len(run) else 0) for i in range(len(run))]
        else:
            shares = [k] * len(run)
        recall = self.ctx.catalog.graph_view() is not None
        lists: dict[str, list[tuple[str, float]]] = {}
        first: dict[str, tuple[Hit, str, int]] = {}
        version = None
        for step, (q, n) in enumerate(zip(run, shares)):
            raw: dict[str, Any] = {"query": q, "k": n, "unit": "chunk"}
            if recall:
                raw["x-rcp-agentic-graphRecall"] = True
            if session_id is not None:
                raw["sessionId"] = session_id
            if filter_ is not None:
                raw["filter"] = dict(filter_)
            res = self.ctx.retriever.retrieve_params(raw, control)
            version = version or res.index_version
            lists[str(step)] = [(hit.id, hit.score) for hit in res.hits]
            for hit in res.hits:
                first.setdefault(hit.id, (hit, q, step))
        fused = dict(fusion.rrf(lists, {}, RRF_K))
        order = sorted(fused, key=lambda i: (-fused[i], first[i][2], i))[:k]
        hits = []
        for id_ in order:
            hit, q, step = first[id_]
            wire = hit.to_wire()
            wire["meta"] = {**(wire.get("meta") or {}),
                            "drift": {"followup": q, "step": first_step + step}}
            wire["scores"] = {**(wire.get("scores") or {}), "local": wire["score"]}
            wire["score"] = round(fused[id_], 8)
            hits.append(Hit.model_validate(wire))
        return hits, version

