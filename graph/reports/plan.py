"""A report's plan (:func:`make_plan`): what it depends on, computed once for both writers.

* **Centrality** of a member is its weighted degree inside the community (edges among
  members, :func:`~rcp_agentic.graph.communities.entity_graph.entity_edges`), ties by
  mention count then key; the members are ordered by it.
* **Key relations** are the relations among members ranked by weight x the geometric mean
  of their endpoints' centralities.
* **Candidate chunks** are those of the :data:`TOP_MEMBERS` most central members, at most
  :data:`MAX_CHUNKS`, so a report costs about the same for a community of 10 entities or
  of 3,000.

:func:`report_key` hashes what a report depends on, so the builder rewrites only the
reports whose key (or reporter identity) changed. Weights enter only through the plan's
orders, so weight drift that reorders nothing rewrites nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidParams
from ..stored import object_first, triplet_header
from ..model import ChunkText, GraphData, Relation
from .model import PlanIndex, ReportInput

TOP_MEMBERS = 24          # members whose chunks are read for evidence
MAX_CHUNKS = 24           # chunks read per community
RANKED_RELATIONS = 200    # relations kept in the plan (what any reporter may show)

# The key's JSON, made by one encoder (json.dumps with these settings makes a new one for
# each of the ~100 parts a key hashes; the bytes are the same).
_KEY_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


_CACHE_LOCK = threading.Lock()
_CACHE: list[tuple[Any, Any, PlanIndex]] = []   # (graph, edges, index); one slot


def plan_index(graph: GraphData, edges: Mapping[tuple[str, str], float]) -> PlanIndex:
    """The lookups of ``graph`` and ``edges`` (sorted by key, as :func:`entity_edges`
    gives them), built once for a run over many communities."""
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
    out = PlanIndex(dict(adjacency), dict(relations_of))
    with _CACHE_LOCK:
        _CACHE[:] = [(graph, edges, out)]
    return out


def _lookups(inp: ReportInput) -> PlanIndex:
    """The plan's lookups of ``inp``: its own, else those of its graph and edges."""
    return inp.index if inp.index is not None else plan_index(inp.graph, inp.edges)


@dataclass
class Plan:
    """A community's members by centrality, its ranked relations and candidate chunks."""

    order: list[str]                  # members, most central first
    weight: dict[str, float]          # rank weight of the TOP_MEMBERS most central
    relations: list[int]              # relations among members, best first (capped)
    relation_count: int               # all relations among members
    chunks: list[str]                 # candidate evidence chunks, best first
    context: dict[str, float]         # of each: its score relative to the best (0..1]
    documents: int                    # distinct documents behind the members
    kinds: list[tuple[str, int]]      # member kinds, most frequent first


def make_plan(inp: ReportInput) -> Plan:
    """The plan of ``inp``'s report (module doc)."""
    graph, members = inp.graph, inp.community.members
    ents = graph.entities
    idx = _lookups(inp)
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
        total = idx.totals.get(m)
        if total is None:
            total = idx.totals[m] = sum(nbrs.values())
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
        behind = idx.documents.get(k)
        if behind is None:
            behind = idx.documents[k] = frozenset(
                d for ck in (*e.mentions, *e.about)
                if (d := graph.chunk_docs.get(ck)) is not None)
        docs |= behind
    return Plan(order, weight, ranked, len(among), chunks, context, len(docs),
                sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))


def check_budget(budget_tokens: int) -> None:
    """Refuse a report budget that is not a positive integer."""
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
    plan = make_plan(inp)
    h = hashlib.sha1()

    def put(*parts: Any) -> None:
        h.update(_KEY_JSON.encode(parts).encode("utf-8"))
        h.update(b"\n")

    put("reports/key/1", budget_tokens, len(inp.community.members), plan.documents, plan.kinds,
        plan.relation_count)
    ents = inp.graph.entities
    parts = _lookups(inp).key_parts
    for k in plan.order:
        part = parts.get(k)
        if part is None:
            e = ents.get(k)
            part = parts[k] = _KEY_JSON.encode(
                (k, None if e is None else [e.name, e.kind, list(e.aliases), e.description])
            ).encode("utf-8") + b"\n"
        h.update(part)
    for i in plan.relations:
        r = inp.graph.relations[i]
        put(r.subject, r.object, r.relation, r.evidence, r.typed,
            None if r.span is None else [r.span.doc_id, r.span.start, r.span.end])
    for c in read_chunks(inp.chunks, plan.chunks):
        put(c.doc_id, c.start, c.text)
    for child in inp.children:
        put(child.title, child.summary, child.text)
    return h.hexdigest()


def read_chunks(chunks: Mapping[str, ChunkText], keys: list[str]) -> list[ChunkText]:
    """The chunks ``keys`` of a report's input; a mapping that reads from the store on
    demand (one with ``fetch``, as the community builder's) reads them in one query."""
    fetch = getattr(chunks, "fetch", None)
    if fetch is not None:
        fetch(keys)
    return [chunks[k] for k in keys]


def relation_header(graph: GraphData, r: Relation) -> str:
    """The triplet header of ``r``, as the ``triplet`` unit shows it (reading order)."""
    s, o = graph.entities[r.subject], graph.entities[r.object]
    swap = object_first(s, o, r)
    return triplet_header(*((o.name, r.relation, s.name) if swap else (s.name, r.relation, o.name)))


def flat(text: str) -> str:
    """``text`` with its whitespace runs made single spaces, stripped."""
    return " ".join(text.split())
