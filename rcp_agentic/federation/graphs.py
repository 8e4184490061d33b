"""Federated ``graph`` and ``memory/*`` (RCP §7.9, §7.17, §16.4): engine-qualified ids, seed and
memory routing, and the merge of many engines' answers into one.

Hits keep their engine's ids and name it in ``meta.engine`` (§16.3). What a federation
builds from graph answers that have no ``meta`` — neighbour ``nodes`` and ``edges``,
``communities``, the ``seedIds`` of recall clues — gets **engine-qualified** ids,
``"<engine>::<id>"``, and an ``engine`` field: two engines' graphs stay apart, and a
qualified seed passed back to :meth:`Federation.graph` goes to its own engine only (an
unqualified one goes to every engine offering the op). A federated ``memoryId`` is opaque:
it packs each engine's own ``memoryId``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..client.errors import InvalidParams

SEP = "::"
MEMORY_PREFIX = "federation:"
DEFAULT_GRAPH_K = 10  # as an engine's graph op without k
DEFAULT_CLUES = 5  # §7.17's default n

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


def pack_memory_id(ids: Mapping[str, str]) -> str:
    """One opaque ``memoryId`` holding each engine's own."""
    raw = json.dumps(dict(ids), sort_keys=True, separators=(",", ":")).encode("utf-8")
    return MEMORY_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def unpack_memory_id(memory_id: Any) -> dict[str, str]:
    """Each engine's ``memoryId`` from a federated one; InvalidParams for anything else."""
    bad = InvalidParams("memoryId is not one this federation's memory_build returned",
                        field="memoryId")
    if not isinstance(memory_id, str) or not memory_id.startswith(MEMORY_PREFIX):
        raise bad
    body = memory_id[len(MEMORY_PREFIX):]
    try:
        ids = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError):
        raise bad from None
    if not isinstance(ids, dict) or not ids or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in ids.items()):
        raise bad
    return ids


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
                notes: list[str]) -> dict[str, Any]:
    """One ``graph`` result from each answering engine's (registry order), per §7.9's shapes.

    ``hits`` (local, drift) are fused as retrieve's are; ``nodes`` (qualified; the qualified
    ``seeds`` first) are kept up to ``max(k, seeds)`` and ``edges`` among the kept nodes;
    ``communities`` are qualified and interleaved; ``followups`` are deduplicated;
    ``summary`` texts are joined, each under its engine's id.
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
    if any("followups" in r for r in results.values()):
        lists = {e: [f for f in r.get("followups") or [] if isinstance(f, str)]
                 for e, r in results.items()}
        out["followups"] = list(dict.fromkeys(f for _e, _r, f in interleave(lists, weights,
                                                                             rrf_k)))
    summaries = [(e, r["summary"]) for e, r in results.items()
                 if isinstance(r.get("summary"), str) and r["summary"]]
    if summaries or any("summary" in r for r in results.values()):
        out["summary"] = "\n\n".join(f"[{e}] {s}" for e, s in summaries)
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
    return None
