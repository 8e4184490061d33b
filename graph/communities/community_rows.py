"""The rows a run of the community builder writes: each community's report and unit.

:func:`make_reports` reports the communities a run reached, children before parents,
keeping a stored report while its ``report_key`` and the reporter are unchanged (a parent's
report reads its children's, made in the run or kept); :func:`community_units` makes their
units (umeta: levels, members, links and the report's fields; covers: every chunk a member
is mentioned in or is about); :func:`unchanged` says whether a live row already stores a
unit as it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...read_first import checkpoint
from ..model import ChunkText, GraphData
from ..reports.extractive import ExtractiveReporter
from ..reports.llm import LLMReporter
from ..reports.model import CommunityReport, Finding, PlanIndex, ReportInput
from ..reports.plan import report_key
from ..stored import node_uid
from .build import CommunityHierarchy
from .tracking import relation_uid

MAX_ENTITIES = 64      # node uids a community row lists (most central first)
SOURCE_ENTITIES = 8    # 'sources' vectors: the chunks of this many most central members
# The report's fields kept in a community row's umeta.
REPORT_FIELDS = ("title", "summary", "findings", "rating", "entities", "relations", "spans",
                 "sanitized", "report")

Reporter = ExtractiveReporter | LLMReporter


def make_reports(reporter: Reporter, budget: int, hier: CommunityHierarchy, graph: GraphData,
                 chunks: Mapping[str, ChunkText], lookups: PlanIndex, ids: set[str],
                 rows: Mapping[str, Mapping[str, Any]], *, rewrite: bool,
                 reported: set[str] | None = None) -> tuple[dict[str, dict[str, Any]], int]:
    """The report fields of the communities ``ids`` (text, title, summary, findings,
    rating, entities, relations, spans, sanitized, report), children first. A stored
    report (``rows``, by id; they hold every child of ``ids`` not among them) is kept
    while its key and the reporter are unchanged (``rewrite``: none is kept); one outside
    ``reported`` (the ids whose report may change; None: all) is kept without computing
    its key."""
    identity = reporter.identity
    out: dict[str, dict[str, Any]] = {}
    made_reports: dict[str, CommunityReport] = {}
    remade = 0
    by_height: dict[int, list[str]] = {}
    for cid in sorted(ids):
        by_height.setdefault(hier.communities[cid].height, []).append(cid)
    for height in sorted(by_height):
        todo: list[tuple[str, ReportInput, str]] = []
        for cid in by_height[height]:
            checkpoint()
            c = hier.communities[cid]
            row = None if rewrite else rows.get(cid)
            if (reported is not None and cid not in reported and row is not None
                    and (row["umeta"].get("report") or {}).get("identity") == identity):
                out[cid] = _stored_report(row)
                continue
            inp = ReportInput(community=c, graph=graph, chunks=chunks, edges={},
                              children=tuple(_child_report(x, made_reports, out, rows,
                                                           identity)
                                             for x in c.children
                                             if x in out or x in rows),
                              index=lookups)
            key = report_key(inp, budget)
            if row is not None and row["umeta"].get("report") == {"identity": identity,
                                                                   "key": key}:
                out[c.id] = _stored_report(row)
            else:
                todo.append((c.id, inp, key))
        reports = reporter.report_many([inp for _c, inp, _k in todo], budget)
        remade += len(reports)
        for (cid, _inp, key), rep in zip(todo, reports):
            made_reports[cid] = rep
            out[cid] = {
                "text": rep.text, "title": rep.title, "summary": rep.summary,
                "findings": [{"summary": f.summary, "explanation": f.explanation}
                             for f in rep.findings],
                "rating": rep.rating,
                "entities": [node_uid(k) for k in rep.entities[:MAX_ENTITIES]],
                "central": list(rep.entities[:SOURCE_ENTITIES]),
                "relations": [relation_uid(graph, i) for i in rep.relations
                              if 0 <= i < len(graph.relations)],
                "spans": rep.spans, "sanitized": rep.sanitized,
                "report": {"identity": identity, "key": key}}
    return out, remade

def community_units(hier: CommunityHierarchy, graph: GraphData,
                    reports: Mapping[str, Mapping[str, Any]], ids: set[str]
                    ) -> list[dict[str, Any]]:
    """The unit of each community of ``ids``: uid, level, text, umeta, covers (chunk
    rowids)."""
    out = []
    top = hier.top_level
    for c in sorted((hier.communities[i] for i in ids), key=lambda c: (c.height, c.id)):
        checkpoint()
        rep = reports[c.id]
        levels = hier.levels(c.id, top)
        covers = sorted({int(k[1:]) for m in c.members for k in graph.entities[m].mentions}
                        | {int(k[1:]) for m in c.members for k in graph.entities[m].about})
        meta = {"levels": [levels.start, levels.stop - 1], "members": list(c.members),
                "parent": c.parent, "children": list(c.children), "size": c.size,
                **{f: rep[f] for f in REPORT_FIELDS}}
        out.append({"uid": c.id, "level": c.height, "text": rep["text"], "meta": meta,
                    "covers": covers, "central": rep.get("central") or _central_keys(meta)})
    return out


def _stored_report(row: Mapping[str, Any]) -> dict[str, Any]:
    """The report fields a live community row holds."""
    return {"text": row["text"], **{f: row["umeta"].get(f) for f in REPORT_FIELDS}}


def _child_report(cid: str, made: Mapping[str, CommunityReport],
                  out: Mapping[str, Mapping[str, Any]], rows: Mapping[str, Mapping[str, Any]],
                  identity: str) -> CommunityReport:
    """A child's report as its parent's report reads it: made in this run, else kept."""
    if cid in made:
        return made[cid]
    return _kept_report(out[cid] if cid in out else _stored_report(rows[cid]), identity)


def _kept_report(fields: Mapping[str, Any], identity: str) -> CommunityReport:
    """A kept report as a :class:`CommunityReport` (a parent's LLM report reads its
    children's titles and summaries)."""
    return CommunityReport(
        title=fields.get("title") or "", summary=fields.get("summary") or "",
        findings=[Finding(f["summary"], f["explanation"]) for f in fields.get("findings") or ()],
        rating=fields.get("rating"), entities=[], relations=[],
        spans=list(fields.get("spans") or ()), text=fields["text"],
        sanitized=int(fields.get("sanitized") or 0), identity=identity)


def _central_keys(meta: Mapping[str, Any]) -> list[str]:
    """The most central members' keys of a kept report (its ``entities`` are node uids)."""
    key_of = {node_uid(k): k for k in meta["members"]}
    return [key_of[u] for u in (meta.get("entities") or ())[:SOURCE_ENTITIES] if u in key_of]


def unchanged(row: Mapping[str, Any], u: Mapping[str, Any]) -> bool:
    """Whether a live community row already stores the unit as it is."""
    return (row["text"] == u["text"] and row["covers"] == u["covers"]
            and row["level"] == u["level"] and row["umeta"] == _json_round(u["meta"]))


def _json_round(meta: Mapping[str, Any]) -> Any:
    """``meta`` as it reads back from the store (tuples become lists)."""
    return json.loads(json.dumps(meta, ensure_ascii=False))
