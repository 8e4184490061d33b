"""The community ops of ``graph`` (RCP §7.9): ``communities``, ``global`` and ``drift``, over the
stored community units (:mod:`.index`; GraphRAG's global and DRIFT search).

* ``communities`` — the partition at ``level`` (default: the top, coarsest), largest first,
  paged by a signed cursor (§10) that pins its first page's index version, so the pages of
  one listing come from one snapshot and cover the level exactly once.
* ``global`` — the level's communities ranked for the query by the engine's own
  ``retrieve(unit="community", level=L)`` (filters apply), then map-reduce. Offline: the
  reports' sentences scored by cosine to the query, the best across communities,
  near-duplicates dropped, packed into ``summary`` within ``tokenBudget``. With the engine's
  LLM: GraphRAG's map (JSON points rated 0-100) and reduce, the reports delimited as data.
* ``drift`` — DRIFT search (:mod:`.drift`): a primer from the communities, follow-up queries
  from it, a local search per follow-up, fused; a session's frontier kept. The default level
  of ``global``/``drift`` is :func:`.reads.default_level`'s.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...control import RequestControl, checked
from ...errors import BackendUnavailable, InvalidParams
from ...models.embedder import normalize_rows
from ...models.llm import as_chat, json_object
from ...models.llm_guard import DATA_RULE, data_block
from ...models.tokenizer import count_tokens
from ...pipeline import cursor as cursors
from ...pipeline.method_params import MAX_SUMMARY_TOKENS
from ...text import cut_to_tokens, split_sentences
from ...trust import derived_trust, strip_markup
from ...wire import CommunityEntry, GraphResult, Hit, Usage
from ..reports.model import KEY_RELATIONS
from .drift import DriftSearch, Frontiers
from .reads import CommunityReader, default_level, existing_level, filter_key, version_of

if TYPE_CHECKING:
    from ..context import GraphContext
    from ..ppr import GraphView
    from .index import StoredCommunity

DEFAULT_PAGE = 20
DEFAULT_GLOBAL_K = 10
DEFAULT_SUMMARY_TOKENS = 500
MAX_POINTS = 16  # points taken from one report
EMBED_SLICE = 16  # report points embedded between two deadline checks (≈0.1 s each here)
DUPLICATE_COSINE = 0.92  # two points this close say the same thing
POINT_CACHE = 4096  # report points whose vectors are kept

MAP_SYSTEM = (
    "You are an analyst answering a question from one community report of a knowledge graph. "
    + DATA_RULE + " Reply with "
    "JSON only, of the form {\"points\": [{\"description\": \"...\", \"score\": 0-100}]}: each "
    "point one fact from the report that helps answer the question, its score how important it "
    "is for the answer. If the report does not help, reply {\"points\": []}.")
MAP_PROMPT = "Question: {query}\n\nCommunity report {id}:\n{data}"
REDUCE_SYSTEM = (
    "You answer a question from key points that analysts extracted from community reports of a "
    "knowledge graph, most important first. " + DATA_RULE + " Use only what the points "
    "state; if they do not answer the "
    "question, say so. Reply with the answer text only.")
REDUCE_PROMPT = "Question: {query}\n\nAnswer in at most {words} words.\n\nKey points:\n{data}"


# --- LLM replies --------------------------------------------------------------------------------

def parse_points(reply: str) -> list[tuple[str, float]] | None:
    """``(description, score 0..100)`` points of a map reply; None when it is not the JSON
    asked for (an empty list: the report does not help)."""
    data = json_object(reply)
    if data is None or not isinstance(data.get("points"), list):
        return None
    out = []
    for p in data["points"]:
        if not isinstance(p, dict):
            continue
        text = " ".join(str(p.get("description") or "").split())
        try:
            score = float(p.get("score", 50))
        except (TypeError, ValueError):
            score = 50.0
        if text and math.isfinite(score):
            out.append((text, max(0.0, min(score, 100.0))))
    return out



# --- the ops ------------------------------------------------------------------------------------

@dataclass
class _Point:
    text: str
    score: float
    rank: int  # of its community in the ranking
    vector: np.ndarray | None = None



class CommunityOps:
    """``communities``, ``global`` and ``drift`` of one Engine (``GraphOps`` delegates here).

    ``node_keys``: node unit id -> entity key for a graph view (``GraphOps._keys_of``).
    """

    def __init__(self, ctx: GraphContext, node_keys: Callable[[GraphView], Mapping[str, str]]
                 ) -> None:
        self.ctx = ctx
        self.reader = CommunityReader(ctx)
        self.frontiers = Frontiers(max_sessions=ctx.config.max_sessions,
                                   ttl_seconds=ctx.config.session_ttl_seconds,
                                   budget=ctx.session_budget)
        self.drift_search = DriftSearch(ctx, self.reader, node_keys, self.frontiers)
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()  # point text -> vector
        self._cache_lock = threading.Lock()

    def offered(self) -> bool:
        """Whether the served version holds community units."""
        store = self.reader.store()
        return store is not None and bool(store.by_id)

    def warm(self, version: int, query: str) -> bool:
        """Load what ``global`` and ``drift`` read lazily at ``version``: its community store,
        the retrieve pool that ranks the default level, and (offline ``global`` embeds report
        points) the document embedder; ``query``: any text. Whether it holds communities."""
        store = self.reader.store(version)
        if store is None or not store.by_id:
            return False
        self.ctx.retriever.warm({"query": query, "unit": "community",
                                 "level": default_level(store), "indexVersion": f"v{version}"})
        if self.ctx.llm is None:
            # One point loads the model and runs its first (slower) pass; kept with the
            # points, so warming again embeds nothing.
            self._point_vectors([query], checked(None))
        return True

    # --- communities ------------------------------------------------------------------------

    def communities(self, *, level: int | None = None, k: int | None = None,
                    cursor: str | None = None, filter: Mapping[str, Any] | None = None,
                    control: RequestControl | None = None) -> GraphResult:
        """One page of the partition at ``level``, largest first; ``nextCursor`` while more.
        With ``filter`` only the communities all of whose chunks pass it are listed (and a
        cursor pages the listing of its own filter only)."""
        k = DEFAULT_PAGE if k is None else k
        ctl = checked(control)
        qhash = cursors.query_hash({"op": "communities", "level": level,
                                    "filter": filter_key(filter)})
        start, version = 0, None
        if cursor is not None:
            state = cursors.decode(cursor, self.ctx.secret, qhash)
            try:
                version = self.ctx.catalog.served_version(f"v{state.version}")
            except BackendUnavailable:
                raise InvalidParams("cursor pages a snapshot this engine no longer keeps: "
                                    "start the listing again", field="cursor") from None
            start = state.start
        version = version if version is not None else self.ctx.catalog.served_version(None)
        store = self.reader.require("communities", version)
        level_ = existing_level(level, store)
        lvl = store.top_level if level_ is None else level_
        part = store.level(lvl)
        if filter is not None:
            passing = self.reader.passing(store, filter)
            part = [c for c in part if c.id in passing]
        ctl.check()
        if start > len(part):
            raise InvalidParams("cursor is past the end of this level", field="cursor")
        page = part[start:start + k]
        trust = self.reader.trust(store, [c.id for c in page])
        entries = [CommunityEntry(id=c.id, level=lvl, summary=c.text, title=c.title,
                                  size=c.size, rating=c.rating, trust=trust.get(c.id))
                   for c in page]
        after = start + len(page)
        nxt = (cursors.encode(cursors.CursorState(version, after, frozenset(), qhash),
                              self.ctx.secret) if after < len(part) else None)
        notes = [f"level {lvl} of 0..{store.top_level}: communities "
                 f"{start + 1}-{after} of {len(part)}"] if page else []
        notes += self.reader.lag(version, ("community",))
        return GraphResult(communities=entries, next_cursor=nxt, index_version=f"v{version}",
                           usage=Usage(candidates=len(part), notes=notes or None))
    # --- global -----------------------------------------------------------------------------

    def global_search(self, query: Any, *, level: int | None = None, k: int | None = None,
                      token_budget: int | None = None, filter: Mapping[str, Any] | None = None,
                      control: RequestControl | None = None) -> GraphResult:
        """The level's communities ranked for ``query`` and a ``summary`` of the best of their
        reports within ``token_budget`` (see the module doc). The summary carries the lowest
        trust of the reports it draws on (``GraphResult.trust``)."""
        t0 = time.perf_counter()
        ctl = checked(control)
        text, store, lvl = self.reader.searched(query, "global", level)
        k = DEFAULT_GLOBAL_K if k is None else k
        budget = DEFAULT_SUMMARY_TOKENS if token_budget is None else token_budget
        ranked, store, version = self.reader.ranked(text, lvl, k, filter, ctl)
        notes = [f"level {lvl} of 0..{store.top_level}", *self.reader.lag(version_of(version),
                                                                   ("community",))]
        if not ranked:
            return GraphResult(summary="", communities=[], index_version=version,
                               usage=Usage(notes=notes + ["no community matches the query"]))
        ctl.check()
        llm = self.ctx.llm
        if llm is not None:
            summary, n_points = self._llm_global(text, ranked, budget, llm, notes, ctl)
        else:
            points = self._offline_points(text, ranked, ctl)
            summary, n_points = pack_points(points, budget), len(points)
        ctl.check()
        entries = [CommunityEntry(id=c.id, level=lvl, summary=c.text, title=c.title,
                                  size=c.size, rating=c.rating, score=round(float(hit.score), 8),
                                  trust=hit.trust)
                   for hit, c in ranked]
        # The answer carries its reports' trust and its own screening; a model's markup is
        # taken out of it (and flags it).
        summary, sanitized = strip_markup(summary) if llm is not None else (summary, False)
        trust = derived_trust([hit.trust for hit, _c in ranked], [summary], self.ctx.screen,
                              sanitized=sanitized)
        tokens = count_tokens(summary)
        notes.append(f"summary: {tokens} of {budget} tokens from {n_points} points of "
                     f"{len(ranked)} communities" + (" (LLM map-reduce)" if llm else ""))
        return GraphResult(summary=summary, communities=entries, index_version=version,
                           trust=trust,
                           usage=Usage(candidates=n_points, tokens=tokens,
                                       latency_ms=round((time.perf_counter() - t0) * 1000, 3),
                                       notes=notes))

    @staticmethod
    def _report_points(c: StoredCommunity) -> list[str]:
        """A report cut into points: the sentences of its findings' explanations and of its
        text, less the title, the ``Key relations:`` line (the findings hold them) and, for
        an offline report (no rating), the summary line (counts and names, not content)."""
        skip = {c.title.strip()}
        if c.rating is None:
            skip.add(c.summary.strip())
        parts = [str(f.get("explanation") or f.get("summary") or "")
                 for f in c.findings if isinstance(f, Mapping)]
        if c.rating is not None:
            parts.insert(0, c.summary)
        parts += [line for line in (c.text or "").splitlines()
                  if line.strip() and line.strip() not in skip
                  and not line.startswith(KEY_RELATIONS)]
        out: list[str] = []
        for part in parts:
            for sentence in split_sentences(part, None, 0):
                line = " ".join(sentence.text.split())
                if line and line not in out and line not in skip:
                    out.append(line)
        return out[:MAX_POINTS]

    def _offline_points(self, text: str, ranked: Sequence[tuple[Hit, StoredCommunity]],
                        control: RequestControl) -> list[_Point]:
        """Every ranked report's points, scored by the embedder's cosine to the query."""
        raw = [(rank, p) for rank, (_h, c) in enumerate(ranked) for p in self._report_points(c)]
        if not raw:
            return []
        vectors = self._point_vectors([p for _r, p in raw], control)
        q = normalize_rows(self.ctx.embedder.embed_query(text))[0]
        sims = vectors @ q
        return [_Point(p, float(s), rank, v) for (rank, p), s, v in zip(raw, sims, vectors)]

    def _point_vectors(self, texts: list[str], control: RequestControl) -> np.ndarray:
        """Unit vectors of report points; kept (bounded; one engine, one embedder): the same
        reports come back query after query. Embedded in slices, the request's deadline and
        cancellation checked between them (a cold cache is the slow part of ``global``)."""
        with self._cache_lock:
            todo = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        for at in range(0, len(todo), EMBED_SLICE):
            control.check()
            part = todo[at:at + EMBED_SLICE]
            fresh = normalize_rows(self.ctx.embedder.embed_documents(part))
            with self._cache_lock:
                for t, v in zip(part, fresh):
                    self._vectors[t] = v
                while len(self._vectors) > POINT_CACHE:
                    self._vectors.popitem(last=False)
        with self._cache_lock:
            got = [self._vectors.get(t) for t in texts]
        missing = [t for t, v in zip(texts, got) if v is None]  # evicted meanwhile
        if missing:
            again = dict(zip(missing, normalize_rows(
                self.ctx.embedder.embed_documents(missing))))
            got = [v if v is not None else again[t] for t, v in zip(texts, got)]
        return np.stack([np.asarray(v) for v in got])

    def _llm_global(self, text: str, ranked: Sequence[tuple[Hit, StoredCommunity]],
                    budget: int, llm: Any, notes: list[str],
                    control: RequestControl) -> tuple[str, int]:
        """GraphRAG's map (points with importance per community) and reduce (an answer)."""
        chat = as_chat(llm)
        replies = chat.ask_many(MAP_SYSTEM, [MAP_PROMPT.format(query=text, id=c.id,
                                                               data=data_block(c.text))
                                             for _h, c in ranked], stage="global",
                                     control=control)
        control.check()
        points: list[_Point] = []
        fallback: list[tuple[Hit, StoredCommunity]] = []
        for rank, ((hit, c), reply) in enumerate(zip(ranked, replies)):
            parsed = parse_points(reply)
            if parsed is None:
                fallback.append((hit, c))
                continue
            points.extend(_Point(t, s, rank) for t, s in parsed if s > 0)
        if fallback:  # an unparseable map reply: that report's own best sentences
            notes.append(f"{len(fallback)} map replies were not JSON points: their reports' "
                         "sentences stand in")
            for p in self._offline_points(text, fallback, control):
                points.append(_Point(p.text, 100.0 * max(p.score, 0.0), p.rank))
        points.sort(key=lambda p: (-p.score, p.rank))
        context = pack_points(points, min(MAX_SUMMARY_TOKENS, 4 * budget), scored=True)
        if not context:
            return "", len(points)
        control.check()
        answer = chat.ask(REDUCE_SYSTEM, REDUCE_PROMPT.format(
            query=text, words=max(1, int(budget * 0.7)), data=data_block(context)),
            stage="global", control=control)
        summary = cut_to_tokens(" ".join(answer.split()), budget, count_tokens)
        if not summary:
            notes.append("the reduce reply was empty: the best points stand in")
            summary = pack_points(points, budget)
        return summary, len(points)

    # --- drift ------------------------------------------------------------------------------

    def drift(self, query: Any, *, k: int | None = None, level: int | None = None,
              session_id: str | None = None, filter: Mapping[str, Any] | None = None,
              control: RequestControl | None = None) -> GraphResult:
        """DRIFT search (:meth:`.drift.DriftSearch.run`)."""
        return self.drift_search.run(query, k=k, level=level, session_id=session_id,
                                     filter=filter, control=control)


def pack_points(points: Sequence[_Point], budget: int, *, scored: bool = False) -> str:
    """The best points, one a line, near-duplicates dropped, within ``budget`` tokens
    (``scored``: each line prefixed with its importance, for the reduce prompt)."""
    order = sorted(points, key=lambda p: (-p.score, p.rank))
    kept: list[_Point] = []
    lines: list[str] = []
    used = 0
    for p in order:
        if any(p.text == q.text or (p.vector is not None and q.vector is not None
                                    and float(p.vector @ q.vector) >= DUPLICATE_COSINE)
               for q in kept):
            continue
        line = f"[{round(p.score)}] {p.text}" if scored else p.text
        cost = count_tokens(line) + (1 if lines else 0)  # the newline joining it
        if used + cost > budget:
            continue  # a shorter point further down may still fit
        lines.append(line)
        kept.append(p)
        used += cost
    if not lines and order:  # every point is longer than the budget: the best one's head
        best = order[0]
        head = cut_to_tokens(f"[{round(best.score)}] {best.text}" if scored else best.text,
                             budget, count_tokens)
        lines = [head] if head else []
    text = "\n".join(lines)
    while lines and count_tokens(text) > budget:  # token counts are not quite additive
        lines.pop()
        text = "\n".join(lines)
    return text

