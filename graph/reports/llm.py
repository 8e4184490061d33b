"""The LLM writer of community reports, GraphRAG-style.

:class:`LLMReporter` asks a LangChain chat model or LlamaIndex LLM (through
:class:`~rcp_agentic.models.llm.ChatLLM`) for GraphRAG's JSON report (title, summary,
findings, rating) from the community's entities and relations; when that context exceeds
``context_tokens`` the children's report titles and summaries stand in for it, as GraphRAG
substitutes sub-community reports. A reply that cannot be parsed, or whose rendered text
the screen flags, falls back to the extractive report (counted in ``fallbacks``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ...models.llm import as_chat
from ...models.llm_reply import json_object
from ...models.llm_guard import DATA_RULE, data_block
from ...text import cut_to_tokens
from .extractive import ExtractiveReporter
from .model import MAX_RELATIONS, CommunityReport, CountTokens, Finding, ReportInput, Screen
from .plan import Plan, check_budget, flat, make_plan, relation_header

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
    return flat(value) if isinstance(value, str) else ""


def _findings(data: Mapping[str, Any]) -> list[Finding]:
    out = []
    raw = data.get("findings")
    for f in raw if isinstance(raw, list) else []:
        if isinstance(f, str) and flat(f):
            out.append(Finding(flat(f), ""))
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
        return self._prompt(inp, make_plan(inp), budget_tokens)

    def _prompt(self, inp: ReportInput, plan: Plan, budget_tokens: int) -> str:
        words = max(20, int(budget_tokens * 0.7))
        return USER_PROMPT.format(words=words, data=data_block(self._context(inp, plan)))

    def _context(self, inp: ReportInput, plan: Plan) -> str:
        graph, count = inp.graph, self.count_tokens
        entities = []
        for k in plan.order:
            e = graph.entities.get(k)
            if e is not None:
                desc = f": {flat(e.description)}" if e.description else ""
                entities.append(f"- {flat(e.name)} ({e.kind}){desc}")
        relations = []
        for i in plan.relations:
            r = graph.relations[i]
            ev = f": {flat(r.evidence)}" if r.evidence else ""
            relations.append(f"- {flat(relation_header(graph, r))}{ev}")
        raw_sections = [("Entities", entities), ("Relations", relations)]
        # GraphRAG: a community too large for the context is described by its children.
        children = [f"- {flat(c.title)}: {flat(c.summary)}" for c in inp.children]
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
        check_budget(budget_tokens)
        plans = [make_plan(inp) for inp in inputs]
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

    def _parse(self, inp: ReportInput, plan: Plan, reply: str,
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
