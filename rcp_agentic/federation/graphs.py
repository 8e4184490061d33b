"""Federated ``graph`` and ``memory/*`` (RCP §7.9, §7.17, §16.4): engine-qualified ids, seed and
memory routing, and the merge of many engines' answers into one.

Hits keep their engine's ids and name it in ``meta.engine`` (§16.3). What a federation
builds from graph answers that have no ``meta`` — neighbour ``nodes`` and ``edges``,
``communities``, the ``seedIds`` of recall clues — gets **engine-qualified** ids,
``"<engine>::<id>"``, and an ``engine`` field: two engines' graphs stay apart, and a
qualified seed passed back to :meth:`Federation.graph` goes to its own engine only (an
unqualified one goes to every engine offering the op). A federated ``memoryId`` is opaque:
it packs each engine's own ``memoryId``; so does a federated ``communities`` cursor, each
engine's own ``nextCursor`` (an engine whose listing is complete is left out of it).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..client.errors import InvalidParams
from ..models.tokenizer import count_tokens
from ..text import cut_to_tokens

SEP = "::"
MEMORY_PREFIX = "federation:"
CURSOR_PREFIX = "federation-cursor:"
DEFAULT_GRAPH_K = 10  # as an engine's graph op without k
DEFAULT_CLUES = 5  # §7.17's default n
DEFAULT_SUMMARY_TOKENS = 500  # as an engine's global op without tokenBudget

# Hits in, (fused hits, distinct candidates, fusion method) out: the retrieve fusion (§16.3).
FuseHits = Callable[[Mapping[str, list[dict[str, Any]]]], tuple[list[dict[str, Any]], int, str]]


def qualify(engine: str, id_: str) -> str:
    """``id_`` of engine ``engine`` as the federation names it."""
    return f"{engine}{SEP}{id_}"


def split(id_: str, engines: Iterable[str]) -> tuple[str | None, str]:
    """The engine a qualified id names (longest engine id first) and the engine's own id;
    ``(None, id_)`` when it names none of ``engines``."""
    for engine in sorted(engines, key=len, reverse=True):
        if id_.startswith(engine + SEP):
            return engine, id_[len(engine) + len(SEP):]
    return None, id_


def route_seeds(seeds: Sequence[str], engines: Sequence[str]) -> dict[str | None, list[str]]:
    """Seed ids by the engine they name (``None``: unqualified, for every engine), in order."""
    out: dict[str | None, list[str]] = {}
    for seed in seeds:
        engine, own = split(seed, engines)
        out.setdefault(engine, []).append(own)
    return out


def _pack(prefix: str, ids: Mapping[str, str]) -> str:
    raw = json.dumps(dict(ids), sort_keys=True, separators=(",", ":")).encode("utf-8")
    return prefix + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unpack(prefix: str, value: Any, bad: InvalidParams) -> dict[str, str]:
    if not isinstance(value, str) or not value.startswith(prefix) or not value.isascii():
        raise bad
    body = value[len(prefix):]
    try:
        ids = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError):
        raise bad from None
    if not isinstance(ids, dict) or not ids or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in ids.items()):
        raise bad
    return ids


def pack_memory_id(ids: Mapping[str, str]) -> str:
    """One opaque ``memoryId`` holding each engine's own."""
    return _pack(MEMORY_PREFIX, ids)


def unpack_memory_id(memory_id: Any) -> dict[str, str]:
    """Each engine's ``memoryId`` from a federated one; InvalidParams for anything else."""
    return _unpack(MEMORY_PREFIX, memory_id, InvalidParams(
        "memoryId is not one this federation's memory_build returned", field="memoryId"))


def pack_cursor(cursors: Mapping[str, str]) -> str:
    """One opaque ``communities`` cursor holding, per engine whose listing goes on, the
    cursor to send it."""
    return _pack(CURSOR_PREFIX, cursors)


def unpack_cursor(cursor: Any, engines: Iterable[str]) -> dict[str, str]:
    """Each engine's cursor from a federated one; InvalidParams (``cursor``) for anything
    else, or one naming an engine this federation does not have."""
    bad = InvalidParams("cursor is not one this federation's communities returned",
                        field="cursor")
    own = _unpack(CURSOR_PREFIX, cursor, bad)
    if not set(own) <= set(engines):
        raise bad
    return own


def merge_summaries(summaries: Sequence[tuple[str, str]], budget: int) -> str:
    """The engines' ``global`` summaries, best engine first, as one within ``budget`` tokens:
    their lines (an offline summary is one point a line, best first) taken round-robin, each
    under its engine's id, while they fit."""
    lines = [[line for line in s.splitlines() if line.strip()] for _e, s in summaries]
    out: list[str] = []
    used = 0
    for i in range(max((len(x) for x in lines), default=0)):
        for (engine, _s), own in zip(summaries, lines):
            if i >= len(own):
                continue
            line = f"[{engine}] {own[i]}"
            cost = count_tokens(line) + (1 if out else 0)
            if used + cost > budget and i == 0:  # an engine's best line: at least its head
                line = cut_to_tokens(line, budget - used - (1 if out else 0), count_tokens)
                cost = count_tokens(line) + (1 if out else 0) if line else budget + 1
            if used + cost <= budget:
                out.append(line)
                used += cost
    text = "\n".join(out)
    while out and count_tokens(text) > budget:
        out.pop()
        text = "\n".join(out)
    return text


def interleave(lists: Mapping[str, Sequence[Any]], weights: Mapping[str, float],
               rrf_k: int) -> list[tuple[str, int, Any]]:
    """Every item of every engine as ``(engine, rank, item)``, ordered by its weighted RRF
    mass ``weight / (rrf_k + rank)``, then registry order: items of different engines are
    distinct, so this is RRF without deduplication (scores are not comparable, §16.3)."""
    order = list(lists)
    items = [(engine, rank, item) for engine, seq in lists.items()
             for rank, item in enumerate(seq, 1)]
    return sorted(items, key=lambda e: (-weights[e[0]] / (rrf_k + e[1]), order.index(e[0]),
                                        e[1]))


def _objects(result: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    value = result.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def merge_graph(results: Mapping[str, Mapping[str, Any]], *, weights: Mapping[str, float],
                rrf_k: int, k: int, seeds: Iterable[str], fuse_hits: FuseHits,
                notes: list[str], op: str | None = None,
                token_budget: int | None = None) -> dict[str, Any]:
    """One ``graph`` result from each answering engine's (registry order), per §7.9's shapes.

    ``hits`` (local, drift) are fused as retrieve's are; ``nodes`` (qualified; the qualified
    ``seeds`` first) are kept up to ``max(k, seeds)`` and ``edges`` among the kept nodes;
    ``communities`` are qualified and interleaved by weighted RRF of each engine's order
    (their scores are not comparable, §16.3), the first ``k`` for ``global`` (a
    ``communities`` page keeps every engine's page); ``followups`` are deduplicated;
    ``summary`` (``global``) interleaves the engines' summary lines, the engine of the
    best-placed community first, each under its engine's id, within ``token_budget``.
    """
    out: dict[str, Any] = {}
    if any("hits" in r for r in results.values()):
        hits, candidates, method = fuse_hits({e: _objects(r, "hits") for e, r in results.items()})
        out["hits"] = hits
        notes.append(f"{candidates} distinct graph hits fused by {method}")
    if any("nodes" in r for r in results.values()):
        seed_set = set(seeds)
        ranked = interleave({e: _objects(r, "nodes") for e, r in results.items()}, weights, rrf_k)
        nodes = [{**n, "id": qualify(e, str(n.get("id"))), "engine": e} for e, _r, n in ranked]
        nodes.sort(key=lambda n: n["id"] not in seed_set)  # stable: RRF order within each part
        nodes = nodes[:max(k, sum(n["id"] in seed_set for n in nodes))]
        kept = {n["id"] for n in nodes}
        edges = []
        for e, _r, edge in interleave({e: _objects(r, "edges") for e, r in results.items()},
                                      weights, rrf_k):
            src, dst = qualify(e, str(edge.get("src"))), qualify(e, str(edge.get("dst")))
            if src in kept and dst in kept:
                edges.append({**edge, "src": src, "dst": dst})
        out["nodes"], out["edges"] = nodes, edges
    if any("communities" in r for r in results.values()):
        ranked = interleave({e: _objects(r, "communities") for e, r in results.items()},
                            weights, rrf_k)
        out["communities"] = [{**c, "id": qualify(e, str(c.get("id"))), "engine": e}
                              for e, _r, c in ranked]
        if op == "global":
            out["communities"] = out["communities"][:k]
    if any("followups" in r for r in results.values()):
        lists = {e: [f for f in r.get("followups") or [] if isinstance(f, str)]
                 for e, r in results.items()}
        out["followups"] = list(dict.fromkeys(f for _e, _r, f in interleave(lists, weights,
                                                                             rrf_k)))
    summaries = [(e, r["summary"]) for e, r in results.items()
                 if isinstance(r.get("summary"), str) and r["summary"]]
    if summaries or any("summary" in r for r in results.values()):
        first = [c["engine"] for c in out.get("communities", [])]
        summaries.sort(key=lambda es: first.index(es[0]) if es[0] in first else len(first))
        out["summary"] = merge_summaries(summaries, token_budget or DEFAULT_SUMMARY_TOKENS)
    return out


def merge_recall(results: Mapping[str, Mapping[str, Any]], *, weights: Mapping[str, float],
                 rrf_k: int, n: int, fuse_hits: FuseHits, notes: list[str]) -> dict[str, Any]:
    """One ``memory/recall`` result: the engines' clues, their ``seedIds`` qualified, ordered
    by weighted RRF of each engine's own order (clue weights are relative to each engine's
    best, not comparable), the same surrogate query from several engines merged into one
    clue; the first ``n``; draft hits fused as retrieve's are."""
    entries = interleave({e: _objects(r, "clues") for e, r in results.items()}, weights, rrf_k)
    clues: list[dict[str, Any]] = []
    by_query: dict[str, dict[str, Any]] = {}
    for engine, _rank, clue in entries:
        seeds = [qualify(engine, s) for s in clue.get("seedIds") or [] if isinstance(s, str)]
        query = clue.get("query")
        same = by_query.get(query) if isinstance(query, str) else None
        if same is not None:  # another engine's view of the same clue: its seeds join
            same["seedIds"] = list(dict.fromkeys([*same.get("seedIds", []), *seeds]))
            same["engines"].append(engine)
            continue
        merged = {**clue, "engine": engine, "engines": [engine]}
        if "seedIds" in clue:
            merged["seedIds"] = seeds
        clues.append(merged)
        if isinstance(query, str):
            by_query[query] = merged
    out: dict[str, Any] = {"clues": clues[:n]}
    if any("hits" in r for r in results.values()):
        hits, candidates, method = fuse_hits({e: _objects(r, "hits") for e, r in results.items()})
        out["hits"] = hits
        notes.append(f"{candidates} distinct draft hits fused by {method}")
    return out


def merge_build(results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One ``memory/build`` result: a federated ``memoryId`` and the engines' summed tokens."""
    ids = {e: str(r["memoryId"]) for e, r in results.items()}
    out: dict[str, Any] = {"memoryId": pack_memory_id(ids)}
    tokens = [r["tokens"] for r in results.values() if isinstance(r.get("tokens"), int)
              and not isinstance(r["tokens"], bool)]
    if tokens:
        out["tokens"] = sum(tokens)
    return out


def malformed(method: str, result: Mapping[str, Any]) -> str | None:
    """What is wrong with one engine's answer to ``method`` (None: nothing we rely on)."""
    if method == "memory/build" and not isinstance(result.get("memoryId"), str):
        return "no memoryId"
    if method == "memory/recall" and not isinstance(result.get("clues"), list):
        return "no clues"
    for key in ("hits", "nodes", "edges", "communities", "clues"):
        if key in result and not (isinstance(result[key], list)
                                  and all(isinstance(v, dict) for v in result[key])):
            return f"{key} is not a list of objects"
    if "followups" in result and not (isinstance(result["followups"], list) and all(
            isinstance(f, str) for f in result["followups"])):
        return "followups is not a list of strings"
    for key in ("summary", "nextCursor"):
        if key in result and not isinstance(result[key], str):
            return f"{key} is not a string"
    return None
