"""The extractive writer of community reports, the offline default (:class:`ExtractiveReporter`).

Within a token budget it writes, from the report's plan (:mod:`.plan`)::

    <title: the 1-3 most central entities>
    <summary: size, kinds, relations, documents, the most central entities>
    Key relations: <subject — relation — object>; ...
    <evidence sentence> <evidence sentence> ...

Key relations show as the ``triplet`` units' headers (offline relations in reading order).
Evidence: sentences of the plan's candidate chunks naming the most (and most central)
members, picked greedily with a bonus for members not yet covered and near-duplicates
skipped; each keeps its span in its document and its place (``at``) in the report.
Sentences (and relation headers) the injection ``screen`` flags are left out (``sanitized``).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...text import Sentence, Span, cut_to_tokens, split_sentences
from ..model import ChunkText, GraphData
from .model import (KEY_RELATIONS, MAX_RELATIONS, CommunityReport, CountTokens, Finding,
                    ReportInput, Screen)
from .plan import MAX_CHUNKS, TOP_MEMBERS, Plan, check_budget, flat, make_plan, relation_header

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


def _short(name: str) -> str:
    words = name.split()
    return name if len(words) <= NAME_WORDS else " ".join(words[:NAME_WORDS]) + " …"


def _names(names: Sequence[str]) -> str:
    """``A``, ``A and B``, ``A, B and C``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _summary(inp: ReportInput, plan: Plan) -> str:
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


def _title(inp: ReportInput, plan: Plan) -> str:
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


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in re.findall(r"\w+", text.lower()) if len(w) > 2)


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


def _best_candidate(cands: Sequence[_Candidate], plan: Plan,
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
        check_budget(budget_tokens)
        return [self.report(inp, budget_tokens) for inp in inputs]

    def clear(self) -> None:
        """Forget the chunks and token counts kept between communities (bounded LRUs of
        :data:`CHUNK_CACHE` chunks, a few MB, and :data:`COUNT_CACHE` counts)."""
        with self._lock:
            self._chunks.clear()
            self._counts.clear()

    def report(self, inp: ReportInput, budget_tokens: int) -> CommunityReport:
        """The report of one community within ``budget_tokens``."""
        return self._report(inp, make_plan(inp), budget_tokens)

    def _flagged(self, text: str) -> bool:
        return self.screen is not None and bool(self.screen(text))

    def _report(self, inp: ReportInput, plan: Plan, budget: int) -> CommunityReport:
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

    def _key_relations(self, graph: GraphData, plan: Plan, budget: float) -> _KeyRelations:
        """The plan's relations as headers within ``budget`` tokens, dropping flagged ones."""
        key = _KeyRelations()
        used = self.count_tokens("\n" + KEY_RELATIONS)
        seen_headers: set[str] = set()
        for i in plan.relations:
            if len(key.shown) >= MAX_RELATIONS:
                break
            r = graph.relations[i]
            header = flat(relation_header(graph, r))
            if header in seen_headers:
                continue
            evidence = flat(r.evidence)
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

    def _evidence(self, inp: ReportInput, plan: Plan, left: int
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

    def _candidates(self, inp: ReportInput, plan: Plan) -> list[_Candidate]:
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
                text = flat(sent.text)
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
