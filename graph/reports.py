"""Community reports: one text per community, extractive offline or GraphRAG-style with an LLM.

:class:`ExtractiveReporter` (the offline default) writes, within a token budget::

    <title: the 1-3 most central entities>
    <summary: size, kinds, relations, documents, the most central entities>
    Key relations: <subject — relation — object>; ...
    <evidence sentence> <evidence sentence> ...

* **Centrality** of a member is its weighted degree inside the community (edges among
  members, :func:`~.communities.entity_graph.entity_edges`), ties by mention count then key.
* **Key relations** are the relations among members ranked by weight x the geometric mean
  of their endpoints' centralities, shown as the triplet headers of the ``triplet`` units
  (offline relations in reading order).
* **Evidence** is read from a capped set of chunks (those of the :data:`TOP_MEMBERS` most
  central members, at most :data:`MAX_CHUNKS`), so a report costs about the same for a
  community of 10 entities or of 3,000: sentences naming the most (and most central)
  members, picked greedily with a bonus for members not yet covered and near-duplicates
  skipped; each keeps its span in its document and its place (``at``) in the report.
* Sentences (and relation headers) the injection ``screen`` flags are left out and
  counted in ``sanitized``.

:class:`LLMReporter` asks a LangChain chat model or LlamaIndex LLM (through
:class:`~rcp_agentic.models.llm.ChatLLM`) for GraphRAG's JSON report (title, summary,
findings, rating) from the community's entities and relations; when that context exceeds
``context_tokens`` the children's report titles and summaries stand in for it, as GraphRAG
substitutes sub-community reports. A reply that cannot be parsed, or whose rendered text
the screen flags, falls back to the extractive report (counted in ``fallbacks``).

:func:`report_key` hashes what a report depends on, so the builder rewrites only the
reports whose key (or reporter identity) changed. Everything a report depends on is a
function of the plan (:func:`_plan`): the members' order, the ranked relations and the
candidate chunks. Weights enter only through those orders, so weight drift that reorders
nothing rewrites nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidParams
from ..models.llm import as_chat, json_object
from ..models.llm_guard import DATA_RULE, data_block
from ..text import Sentence, Span, cut_to_tokens, split_sentences
from .communities.build import Community
from .index import object_first, triplet_header
from .model import ChunkText, GraphData, Relation

__all__ = ["CommunityReport", "ExtractiveReporter", "Finding", "LLMReporter", "ReportInput",
           "report_key"]

# The offline report's line of key relations starts with this (readers skip it: the findings
# hold the same relations with their evidence).
KEY_RELATIONS = "Key relations: "

CountTokens = Callable[[str], int]
Screen = Callable[[str], bool]

TOP_MEMBERS = 24          # members whose chunks are read for evidence
MAX_CHUNKS = 24           # chunks read per community
MAX_RELATIONS = 6         # key relations shown at most
RANKED_RELATIONS = 200    # relations kept in the plan (what any reporter may show)
TITLE_NAMES = 3
SUMMARY_NAMES = 5
NAME_WORDS = 12           # a longer display name is shortened in the title and summary
MIN_WORDS = 4             # shorter sentences are not evidence
DUPLICATE = 0.6           # word-set Jaccard at which a sentence repeats a chosen one
COVERED = 0.25            # the value of a member already named by a chosen sentence
RELATION_SHARE = 0.4      # of the budget left after title and summary
CHUNK_CACHE = 4096        # chunks whose sentences a reporter keeps (a chunk is read by a
                          # community and by each of its ancestors)
COUNT_CACHE = 20000       # token counts of sentences and headers kept


@dataclass(frozen=True)
class Finding:
    """One finding of a report: a short statement and its explanation."""

    summary: str
    explanation: str


@dataclass
class CommunityReport:
    """The report of one community (see the module doc for the text's shape)."""

    title: str
    summary: str
    findings: list[Finding]
    rating: float | None          # GraphRAG's impact severity 0-10 from an LLM; None offline
    entities: list[str]           # member keys, most central first (all members)
    relations: list[int]          # indexes into graph.relations of the relations shown
    spans: list[dict[str, Any]]   # {doc_id, start, end, at: [a, b]} of the evidence shown
    text: str                     # the rendered report: embedded, indexed, returned as hit text
    sanitized: int                # pieces left out because the injection screen flagged them
    identity: str                 # the reporter's identity


@dataclass(frozen=True)
class ReportInput:
    """Everything one report is made from."""

    community: Community
    graph: GraphData
    chunks: Mapping[str, ChunkText]             # chunk key "r<rowid>" -> its text
    edges: Mapping[tuple[str, str], float]      # entity_edges(graph), keyed (a, b) with a < b
    children: Sequence[CommunityReport] = ()    # the child communities' reports


# --- the plan: what a report depends on ------------------------------------------------------

@dataclass
class _Indexes:
    """Per-graph lookups shared by every community of one build."""

    adjacency: dict[str, dict[str, float]]
    relations_of: dict[str, list[int]]          # entity key -> indexes of its relations


_CACHE_LOCK = threading.Lock()
_CACHE: list[tuple[Any, Any, _Indexes]] = []    # (graph, edges, indexes); one slot


def _indexes(graph: GraphData, edges: Mapping[tuple[str, str], float]) -> _Indexes:
    """The lookups of ``graph`` and ``edges``, built once for a run over many communities."""
    with _CACHE_LOCK:
        if _CACHE and _CACHE[0][0] is graph and _CACHE[0][1] is edges:
            return _CACHE[0][2]
    adjacency: dict[str, dict[str, float]] = defaultdict(dict)
    for (a, b), w in edges.items():
        adjacency[a][b] = w
        adjacency[b][a] = w
    relations_of: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(graph.relations):
        relations_of[r.subject].append(i)
        if r.object != r.subject:
            relations_of[r.object].append(i)
    out = _Indexes(dict(adjacency), dict(relations_of))
    with _CACHE_LOCK:
        _CACHE[:] = [(graph, edges, out)]
    return out


@dataclass
class _Plan:
    """A community's members by centrality, its ranked relations and candidate chunks."""

    order: list[str]                  # members, most central first
    weight: dict[str, float]          # rank weight of the TOP_MEMBERS most central
    relations: list[int]              # relations among members, best first (capped)
    relation_count: int               # all relations among members
    chunks: list[str]                 # candidate evidence chunks, best first
    context: dict[str, float]         # of each: its score relative to the best (0..1]
    documents: int                    # distinct documents behind the members
    kinds: list[tuple[str, int]]      # member kinds, most frequent first


def _plan(inp: ReportInput) -> _Plan:
    graph, members = inp.graph, inp.community.members
    ents = graph.entities
    idx = _indexes(graph, inp.edges)
    inside = set(members)
    # Centrality: the weight of a member's edges inside the community times the share of its
    # edges that lie inside. A corpus-wide hub ("CI", "OBJECTIVE") has much weight inside
    # many communities but a small share in each: it should not name them.
    centrality: dict[str, float] = {}
    for m in members:
        nbrs = idx.adjacency.get(m, {})
        if len(nbrs) <= len(inside):
            own = sum(w for b, w in nbrs.items() if b in inside)
        else:
            own = sum(nbrs.get(b, 0.0) for b in members)
        total = sum(nbrs.values())
        centrality[m] = own * own / total if total > 0 else 0.0

    def mentions(k: str) -> int:
        e = ents.get(k)
        return len(e.mentions) if e is not None else 0

    order = sorted(members, key=lambda k: (-centrality[k], -mentions(k), k))
    weight = {k: 1.0 / math.sqrt(1 + i) for i, k in enumerate(order[:TOP_MEMBERS])}

    among = sorted({i for m in members for i in idx.relations_of.get(m, ())
                    if graph.relations[i].subject in inside
                    and graph.relations[i].object in inside})

    def rel_score(i: int) -> float:
        r = graph.relations[i]
        return max(r.weight, 0.0) * math.sqrt(centrality[r.subject] * centrality[r.object])

    ranked = sorted(among, key=lambda i: (-rel_score(i), i))[:RANKED_RELATIONS]

    score: dict[str, float] = defaultdict(float)
    for k in order[:TOP_MEMBERS]:
        e = ents.get(k)
        if e is None:
            continue
        for ck in e.mentions:
            score[ck] += weight[k]
        for ck in e.about:
            score[ck] += weight[k]      # its own document counts twice
    chunks = sorted((ck for ck in score if ck in inp.chunks),
                    key=lambda ck: (-score[ck], _row(ck)))[:MAX_CHUNKS]
    top = score[chunks[0]] if chunks else 1.0
    context = {ck: math.sqrt(score[ck] / top) for ck in chunks}

    docs: set[str] = set()
    kinds: dict[str, int] = defaultdict(int)
    for k in members:
        e = ents.get(k)
        if e is None:
            continue
        kinds[e.kind] += 1
        for ck in (*e.mentions, *e.about):
            d = graph.chunk_docs.get(ck)
            if d is not None:
                docs.add(d)
    return _Plan(order, weight, ranked, len(among), chunks, context, len(docs),
                 sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))


def _check_budget(budget_tokens: int) -> None:
    if not isinstance(budget_tokens, int) or isinstance(budget_tokens, bool) or budget_tokens < 1:
        raise InvalidParams("budget_tokens must be a positive integer", field="budget_tokens")


def _row(key: str) -> tuple[int, str]:
    digits = key[1:] if key[:1] == "r" else ""
    return (int(digits), key) if digits.isdigit() else (1 << 62, key)


def report_key(inp: ReportInput, budget_tokens: int) -> str:
    """A hash of everything ``inp``'s report depends on (members, their names and
    descriptions, their order, the ranked relations with evidence, the candidate chunks'
    texts, the children's reports, the budget): same key, same report. Relation indexes and
    chunk row keys are left out: they shift when other documents change, and the stored report
    names its relations and spans by content (triplet uids, document offsets)."""
    plan = _plan(inp)
    h = hashlib.sha1()

    def put(*parts: Any) -> None:
        h.update(json.dumps(parts, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        h.update(b"\n")

    put("reports/key/1", budget_tokens, len(inp.community.members), plan.documents, plan.kinds,
        plan.relation_count)
    ents = inp.graph.entities
    for k in plan.order:
        e = ents.get(k)
        put(k, None if e is None else [e.name, e.kind, list(e.aliases), e.description])
    for i in plan.relations:
        r = inp.graph.relations[i]
        put(r.subject, r.object, r.relation, r.evidence, r.typed,
            None if r.span is None else [r.span.doc_id, r.span.start, r.span.end])
    for ck in plan.chunks:
        c = inp.chunks[ck]
        put(c.doc_id, c.start, c.text)
    for child in inp.children:
        put(child.title, child.summary, child.text)
    return h.hexdigest()


# --- shared rendering helpers --------------------------------------------------------------

def _short(name: str) -> str:
    words = name.split()
    return name if len(words) <= NAME_WORDS else " ".join(words[:NAME_WORDS]) + " …"


def _names(names: Sequence[str]) -> str:
    """``A``, ``A and B``, ``A, B and C``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _header(graph: GraphData, r: Relation) -> str:
    """The triplet header of ``r``, as the ``triplet`` unit shows it (reading order)."""
    s, o = graph.entities[r.subject], graph.entities[r.object]
    swap = object_first(s, o, r)
    return triplet_header(*((o.name, r.relation, s.name) if swap else (s.name, r.relation, o.name)))


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _summary(inp: ReportInput, plan: _Plan) -> str:
    n = len(plan.order)
    kinds = ", ".join(f"{k} {c}" for k, c in plan.kinds[:3])
    head = (f"{_plural(n, 'entity', 'entities')} ({kinds}), "
            f"{_plural(plan.relation_count, 'relation', 'relations')} across "
            f"{_plural(plan.documents, 'document', 'documents')}")
    if n == 1:
        return head + "."
    top = _distinct_names(inp.graph, plan.order, SUMMARY_NAMES)
    listed = ", ".join(top)
    return f"{head}; most central: {listed}" + ("" if listed.endswith(".") else ".")


def _title(inp: ReportInput, plan: _Plan) -> str:
    names = _distinct_names(inp.graph, plan.order, TITLE_NAMES)
    return _names(names) if names else inp.community.id


def _distinct_names(graph: GraphData, order: Sequence[str], n: int) -> list[str]:
    """The first ``n`` distinct display names of ``order`` (two entities may share a name)."""
    out: list[str] = []
    for k in order:
        e = graph.entities.get(k)
        name = _short(e.name) if e is not None else k
        if name not in out:
            out.append(name)
            if len(out) == n:
                break
    return out


def _flat(text: str) -> str:
    return " ".join(text.split())


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in re.findall(r"\w+", text.lower()) if len(w) > 2)


# --- extractive -----------------------------------------------------------------------------

@dataclass
class _Candidate:
    sentence: Sentence
    text: str                          # whitespace-normalised
    members: frozenset[str]
    context: float                     # how much its chunk belongs to the community
    _words: frozenset[str] | None = None

    @property
    def words(self) -> frozenset[str]:
        if self._words is None:
            self._words = _words(self.text)
        return self._words


@dataclass
class _KeyRelations:
    """The key relations a report shows: their indexes, headers and findings."""

    shown: list[int] = field(default_factory=list)          # indexes into graph.relations
    headers: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    sanitized: int = 0                                      # relations the screen flagged


def _best_candidate(cands: Sequence[_Candidate], plan: _Plan,
                    covered: set[str]) -> _Candidate | None:
    """The candidate of the highest gain (members not yet ``covered`` count fully; ties: the
    earlier candidate, i.e. the better chunk, then reading order); None when none gains."""
    best, best_gain = None, 0.0
    for c in cands:
        gain = c.context * sum(plan.weight.get(m, 0.0) * (COVERED if m in covered
                                                          else 1.0) for m in c.members)
        if gain > best_gain + 1e-12:
            best, best_gain = c, gain
    return best


def _fit_to_budget(text: str, chosen: list[_Candidate], budget: int,
                   count: CountTokens) -> str:
    """``text`` and the evidence line of ``chosen`` within ``budget`` tokens.

    Joining may merge tokens differently: the last sentences are dropped from ``chosen``
    while over budget; title and summary alone over a tiny budget are cut.
    """
    while True:
        body = " ".join(c.text for c in chosen)
        full = text + ("\n" + body if body else "")
        if count(full) <= budget or not chosen:
            break
        chosen.pop()
    if count(full) > budget:
        full = cut_to_tokens(full, budget, count)
    return full


def _evidence_spans(text: str, full: str, chosen: Sequence[_Candidate]) -> list[dict[str, Any]]:
    """The document span and report place (``at``) of each evidence sentence still in ``full``
    (the evidence line follows ``text`` and a newline)."""
    spans: list[dict[str, Any]] = []
    at = len(text) + 1
    for c in chosen:
        span = c.sentence.span
        if span is not None and at + len(c.text) <= len(full):
            spans.append({"doc_id": span.doc_id, "start": span.start, "end": span.end,
                          "at": [at, at + len(c.text)]})
        at += len(c.text) + 1
    return spans


def _still_whole(key: _KeyRelations, full: str) -> _KeyRelations:
    """The key relations whose headers a cut report text still holds whole."""
    return _KeyRelations(shown=[i for i, hd in zip(key.shown, key.headers) if hd in full],
                         headers=key.headers,
                         findings=[f for f in key.findings if f.summary in full],
                         sanitized=key.sanitized)


class ExtractiveReporter:
    """Offline community reports: title, summary, key relations and evidence sentences with
    their source spans, within a token budget (module doc). Deterministic."""

    def __init__(self, count_tokens: CountTokens, *, screen: Screen | None = None) -> None:
        self.count_tokens = count_tokens
        self.screen = screen
        self._chunks: OrderedDict[ChunkText, _ChunkInfo] = OrderedDict()
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()      # the caches, if reports are made from threads
        self.identity = (f"reports/extractive/1;top={TOP_MEMBERS};chunks={MAX_CHUNKS};"
                         f"rel={MAX_RELATIONS};screen={'on' if screen is not None else 'off'}")

    def report_many(self, inputs: Sequence[ReportInput],
                    budget_tokens: int) -> list[CommunityReport]:
        """One report per input, in order."""
        _check_budget(budget_tokens)
        return [self.report(inp, budget_tokens) for inp in inputs]

    def clear(self) -> None:
        """Forget the chunks and token counts kept between communities (bounded LRUs of
        :data:`CHUNK_CACHE` chunks, a few MB, and :data:`COUNT_CACHE` counts)."""
        with self._lock:
            self._chunks.clear()
            self._counts.clear()

    def report(self, inp: ReportInput, budget_tokens: int) -> CommunityReport:
        """The report of one community within ``budget_tokens``."""
        return self._report(inp, _plan(inp), budget_tokens)

    def _flagged(self, text: str) -> bool:
        return self.screen is not None and bool(self.screen(text))

    def _report(self, inp: ReportInput, plan: _Plan, budget: int) -> CommunityReport:
        """The report of one community from its ``plan``, within ``budget`` tokens."""
        count = self.count_tokens
        title, summary = _title(inp, plan), _summary(inp, plan)
        head = f"{title}\n{summary}"
        key = self._key_relations(inp.graph, plan, max(0, budget - count(head)) * RELATION_SHARE)
        text = head + (f"\n{KEY_RELATIONS}{'; '.join(key.headers)}" if key.headers else "")
        left = budget - count(text) - 1          # the newline before the evidence line
        chosen, flagged = self._evidence(inp, plan, left)
        full = _fit_to_budget(text, chosen, budget, count)
        spans = _evidence_spans(text, full, chosen)
        if len(full) < len(text):       # cut into the relations: keep the ones still whole
            key = _still_whole(key, full)
        return CommunityReport(title=title, summary=summary, findings=key.findings, rating=None,
                               entities=list(plan.order), relations=key.shown, spans=spans,
                               text=full, sanitized=key.sanitized + flagged,
                               identity=self.identity)

    def _key_relations(self, graph: GraphData, plan: _Plan, budget: float) -> _KeyRelations:
        """The plan's relations as headers within ``budget`` tokens, dropping flagged ones."""
        key = _KeyRelations()
        used = self.count_tokens("\n" + KEY_RELATIONS)
        seen_headers: set[str] = set()
        for i in plan.relations:
            if len(key.shown) >= MAX_RELATIONS:
                break
            r = graph.relations[i]
            header = _flat(_header(graph, r))
            if header in seen_headers:
                continue
            evidence = _flat(r.evidence)
            if self._flagged(header) or (evidence and self._flagged(evidence)):
                key.sanitized += 1
                continue
            n = self._count(header) + 1
            if used + n > budget:
                break
            seen_headers.add(header)
            used += n
            key.shown.append(i)
            key.headers.append(header)
            key.findings.append(Finding(header, evidence))
        return key

    def _evidence(self, inp: ReportInput, plan: _Plan, left: int
                  ) -> tuple[list[_Candidate], int]:
        """Evidence sentences within ``left`` tokens, greedy for central members not yet
        covered, near-duplicates skipped; and how many the screen flagged."""
        chosen: list[_Candidate] = []
        covered: set[str] = set()
        flagged = 0
        cands = self._candidates(inp, plan)
        while cands and left > 0:
            best = _best_candidate(cands, plan, covered)
            if best is None:
                break
            cands.remove(best)
            n = self._count(best.text) + (1 if chosen else 0)
            if n > left or any(_jaccard(best.words, c.words) >= DUPLICATE for c in chosen):
                continue
            if self._flagged(best.text):
                flagged += 1
                continue
            chosen.append(best)
            covered |= best.members
            left -= n
        return chosen, flagged

    def _candidates(self, inp: ReportInput, plan: _Plan) -> list[_Candidate]:
        """Sentences of the candidate chunks naming at least one central member (a name or
        alias, any case, between word boundaries)."""
        ents = inp.graph.entities
        names: dict[str, str] = {}            # lowercased surface -> member key
        for k in plan.order[:TOP_MEMBERS]:
            e = ents.get(k)
            if e is None:
                continue
            for name in (e.name, *e.aliases):
                low = " ".join(name.lower().split())
                if len(low) >= 2:
                    names.setdefault(low, k)
        out: list[_Candidate] = []
        seen: set[str] = set()
        for ck in plan.chunks:
            info = self._chunk(inp.chunks[ck])
            if not info.sentences:  # a chunk that is only its document's heading
                continue
            found: dict[int, set[str]] = defaultdict(set)
            low = info.low
            for name, k in names.items():
                pos = low.find(name)
                while pos >= 0:
                    end = pos + len(name)
                    if not (pos > 0 and low[pos - 1].isalnum()) and not (
                            end < len(low) and low[end].isalnum()):
                        found[_index(info.starts, pos)].add(k)
                    pos = low.find(name, pos + 1)
            for si, keys in sorted(found.items()):
                sent = info.sentences[si]
                text = _flat(sent.text)
                if len(text.split()) < MIN_WORDS or text in seen:
                    continue
                seen.add(text)
                out.append(_Candidate(sent, text, frozenset(keys), plan.context[ck]))
        return out

    def _chunk(self, chunk: ChunkText) -> _ChunkInfo:
        """A chunk's sentences and lowercased text (kept: see :data:`CHUNK_CACHE`)."""
        with self._lock:
            info = self._chunks.get(chunk)
            if info is not None:
                self._chunks.move_to_end(chunk)
                return info
        sentences = tuple(x for x in (_without_heading(y, chunk.title) for y in
                                      split_sentences(chunk.text, chunk.doc_id, chunk.start))
                          if x is not None)
        low = chunk.text.lower()
        if len(low) != len(chunk.text):   # lowercasing changed the length: keep offsets right
            low = "".join(c if len(c.lower()) != 1 else c.lower() for c in chunk.text)
        info = _ChunkInfo(sentences,
                          [x.span.start - chunk.start if x.span else 0 for x in sentences], low)
        with self._lock:
            self._chunks[chunk] = info
            while len(self._chunks) > CHUNK_CACHE:
                self._chunks.popitem(last=False)
        return info

    def _count(self, text: str) -> int:
        n = self._counts.get(text)
        if n is None:
            if len(self._counts) >= COUNT_CACHE:
                self._counts.clear()
            n = self._counts[text] = self.count_tokens(text)
        return n


_HEADING = re.compile(r"#{1,6}\s+")


def _without_heading(sentence: Sentence, title: str | None) -> Sentence | None:
    """``sentence`` without a Markdown heading glued to its front (a chunk whose whitespace
    was folded reads "# Title First sentence."): the marker and the document's title go,
    the span moves with them; None when nothing is left."""
    m = _HEADING.match(sentence.text)
    if m is None:
        return sentence
    cut = m.end()
    rest = sentence.text[cut:]
    if title and rest.startswith(title):
        cut += len(title)
    else:  # a heading without the title: up to the line's end, if it ends
        newline = sentence.text.find("\n", cut)
        cut = newline if newline >= 0 else len(sentence.text)
    rest = sentence.text[cut:]
    text = rest.lstrip()
    if not text:
        return None
    moved = len(sentence.text) - len(text)
    span = sentence.span
    if span is not None:
        span = Span(span.doc_id, span.start + moved, span.end)
    return Sentence(text, span)


@dataclass
class _ChunkInfo:
    sentences: tuple[Sentence, ...]
    starts: list[int]                  # sentence starts within the chunk text
    low: str                           # the text lowercased, offsets kept


def _index(starts: Sequence[int], pos: int) -> int:
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= pos:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


# --- LLM ------------------------------------------------------------------------------------

SYSTEM_PROMPT = (
    "You write reports on communities of a knowledge graph, for a retrieval index. Use only "
    "facts stated in the data. " + DATA_RULE + " Reply with one JSON object only.")

USER_PROMPT = (
    "Write a report on the community of entities below: its title (its key entities), a "
    "summary of its overall structure and significance, 3-6 findings (each a short summary "
    "and an explanation grounded in the data), and an impact severity rating from 0 to 10 "
    "with a one-sentence explanation.\n"
    'Reply with JSON: {{"title": str, "summary": str, "findings": [{{"summary": str, '
    '"explanation": str}}], "rating": number, "rating_explanation": str}}. The report must '
    "fit in about {words} words.\n\n{data}")


def _field(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name)
    return _flat(value) if isinstance(value, str) else ""


def _findings(data: Mapping[str, Any]) -> list[Finding]:
    out = []
    raw = data.get("findings")
    for f in raw if isinstance(raw, list) else []:
        if isinstance(f, str) and _flat(f):
            out.append(Finding(_flat(f), ""))
        elif isinstance(f, Mapping):
            s, e = _field(f, "summary"), _field(f, "explanation")
            if s or e:
                out.append(Finding(s, e))
    return out


def _rating(data: Mapping[str, Any]) -> float | None:
    value = data.get("rating")
    try:
        r = float(value) if value is not None and not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        return None
    return None if math.isnan(r) else max(0.0, min(r, 10.0))


class LLMReporter:
    """GraphRAG-style community reports from a LangChain chat model or LlamaIndex LLM.

    ``fallbacks`` counts the reports (over this reporter's life) that fell back to the
    extractive report: an unparseable reply, one without title or summary, or a rendered
    text the screen flags. An LLM failure (:class:`~rcp_agentic.errors.BackendUnavailable`)
    propagates.
    """

    def __init__(self, llm: Any, count_tokens: CountTokens, *, screen: Screen | None = None,
                 context_tokens: int = 6000) -> None:
        self.chat = as_chat(llm)
        self.count_tokens = count_tokens
        self.screen = screen
        self.context_tokens = context_tokens
        self.fallback = ExtractiveReporter(count_tokens, screen=screen)
        self.fallbacks = 0
        self.identity = f"reports/llm/2;ctx={context_tokens};{self.chat.identity}"

    def prompt(self, inp: ReportInput, budget_tokens: int) -> str:
        """The user turn for one community (its context within ``context_tokens``)."""
        return self._prompt(inp, _plan(inp), budget_tokens)

    def _prompt(self, inp: ReportInput, plan: _Plan, budget_tokens: int) -> str:
        words = max(20, int(budget_tokens * 0.7))
        return USER_PROMPT.format(words=words, data=data_block(self._context(inp, plan)))

    def _context(self, inp: ReportInput, plan: _Plan) -> str:
        graph, count = inp.graph, self.count_tokens
        entities = []
        for k in plan.order:
            e = graph.entities.get(k)
            if e is not None:
                desc = f": {_flat(e.description)}" if e.description else ""
                entities.append(f"- {_flat(e.name)} ({e.kind}){desc}")
        relations = []
        for i in plan.relations:
            r = graph.relations[i]
            ev = f": {_flat(r.evidence)}" if r.evidence else ""
            relations.append(f"- {_flat(_header(graph, r))}{ev}")
        raw_sections = [("Entities", entities), ("Relations", relations)]
        # GraphRAG: a community too large for the context is described by its children.
        children = [f"- {_flat(c.title)}: {_flat(c.summary)}" for c in inp.children]
        sections = raw_sections
        if children and count("\n".join(entities + relations)) > self.context_tokens:
            sections = [("Sub-community reports", children), *raw_sections]
        out: list[str] = []
        used = 0
        for name, lines in sections:
            block: list[str] = []
            for line in lines:
                n = count(line) + 1
                if used + n > self.context_tokens:
                    break
                block.append(line)
                used += n
            if block:
                out.append(f"{name}:\n" + "\n".join(block))
        return "\n\n".join(out)

    def report_many(self, inputs: Sequence[ReportInput],
                    budget_tokens: int) -> list[CommunityReport]:
        """One report per input, in order; the LLM is asked for all of them concurrently."""
        _check_budget(budget_tokens)
        plans = [_plan(inp) for inp in inputs]
        replies = self.chat.ask_many(SYSTEM_PROMPT, [self._prompt(inp, plan, budget_tokens)
                                                     for inp, plan in zip(inputs, plans)],
                                     stage="communities")
        out = []
        for inp, plan, reply in zip(inputs, plans, replies):
            report = self._parse(inp, plan, reply, budget_tokens)
            if report is None:
                self.fallbacks += 1
                if reply:  # an empty (or unfit) reply was counted by the door already
                    self.chat.fallback("communities", "unparsed")
                report = self.fallback._report(inp, plan, budget_tokens)
                report.identity = self.identity
            out.append(report)
        return out

    def _parse(self, inp: ReportInput, plan: _Plan, reply: str,
               budget: int) -> CommunityReport | None:
        data = json_object(reply)
        if data is None:
            return None
        title, summary = _field(data, "title"), _field(data, "summary")
        if not title or not summary:
            return None
        findings = _findings(data)
        count = self.count_tokens
        text = f"{title}\n{summary}"
        if count(text) > budget:
            text = cut_to_tokens(text, budget, count)
        for f in findings:
            line = f"\n- {f.summary}: {f.explanation}" if f.explanation else f"\n- {f.summary}"
            if count(text + line) > budget:
                break
            text += line
        if self.screen is not None and self.screen(text):
            fallback = self.fallback._report(inp, plan, budget)
            fallback.sanitized += 1
            fallback.identity = self.identity
            self.fallbacks += 1
            self.chat.fallback("communities", "screened")
            return fallback
        return CommunityReport(title=title, summary=summary, findings=findings,
                               rating=_rating(data), entities=list(plan.order),
                               relations=plan.relations[:MAX_RELATIONS], spans=[], text=text,
                               sanitized=0, identity=self.identity)
