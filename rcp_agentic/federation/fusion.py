"""Federated fusion (RCP §16.3): many engines' ranked hit lists into one, deterministically.

RRF (default, weighted per engine), weighted min-max, or convex combination anchored
at each engine's advertised ``scoreFloor``; ties broken by fused score, then summed
weight, then the smaller stringified id; duplicates (by id or ``citation.uri``)
merged into the richest body, tagged with their origin engine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from ..pipeline import fusion as fusion_fns
from ..ranking import settle_sum


def fuse(lists: Mapping[str, list[dict[str, Any]]], *, weights: Mapping[str, float],
         floors: Mapping[str, Any], method: str, rrf_k: int, dedup: str, k: int,
         notes: list[str]) -> tuple[list[dict[str, Any]], int, str]:
    """Fused hits (top ``k``), the number of distinct candidates, and the method used.

    ``lists`` maps each engine that answered (in registry order) to its hits.
    """
    ranked_lists: dict[str, list[tuple[tuple[str, str], float]]] = {}
    entries: dict[tuple[str, str], list[_Entry]] = {}
    for id_, hits in lists.items():  # registry order: a merge independent of arrival order
        ranked_lists[id_] = []
        for hit in hits:
            key = _key(hit, dedup)
            if any(e.engine == id_ for e in entries.get(key, ())):
                entries[key].append(_Entry(id_, 0, hit))  # same engine again: a body only
                continue
            score = hit.get("score")
            ranked_lists[id_].append((key, float(score) if number(score) else math.nan))
            entries.setdefault(key, []).append(_Entry(id_, len(ranked_lists[id_]), hit))
    if method != "rrf" and any(math.isnan(s) for ranked in ranked_lists.values()
                               for _k, s in ranked):
        notes.append(f"fusion {method} needs numeric scores from every engine: used rrf")
        method = "rrf"
    if method == "convex" and not all(number(floors.get(i)) for i in ranked_lists):
        missing = sorted(i for i in ranked_lists if not number(floors.get(i)))
        notes.append(f"fusion convex needs retrieve.scoreFloor from every engine (missing: "
                     f"{', '.join(missing)}): used rrf")
        method = "rrf"
    if method == "rrf":
        fused = fusion_fns.rrf(ranked_lists, weights, rrf_k)
    elif method == "weighted":
        fused = fusion_fns.weighted(ranked_lists, weights)
    else:
        fused = _convex(ranked_lists, weights, floors)
    order = list(lists)
    primary = {key: _primary(es, weights, rrf_k, order) for key, es in entries.items()}
    summed = {key: math.fsum(weights[e.engine] for e in es if e.rank)
              for key, es in entries.items()}
    # §16.3: fused score, then summed weight, then the smaller stringified id.
    ranking = sorted(fused, key=lambda kv: (-kv[1], -summed[kv[0]],
                                            str(primary[kv[0]].hit.get("id"))))
    hits = [_merge(entries[key], primary[key], score) for key, score in ranking[:k]]
    return hits, len(ranking), method


def _primary(entries: list[_Entry], weights: Mapping[str, float], rrf_k: int,
             order: list[str]) -> _Entry:
    """The origin of a fused hit: the engine contributing most RRF mass (ties: registry order)."""
    return min((e for e in entries if e.rank),
               key=lambda e: (-weights[e.engine] / (rrf_k + e.rank), order.index(e.engine)))


@dataclass
class _Entry:
    engine: str
    rank: int  # 1-based among the engine's distinct documents; 0: a duplicate, body only
    hit: dict[str, Any]


def _merge(entries: list[_Entry], primary: _Entry, score: float) -> dict[str, Any]:
    """One fused hit: the richest body, merged meta, origin tags, the fused score (§16.3)."""
    ranked = sorted((e for e in entries if e.rank), key=lambda e: e is not primary)
    body = max([primary, *(e for e in entries if e is not primary)],
               key=lambda e: (len(e.hit.get("text") or ""), len(e.hit.get("content") or [])))
    hit = dict(body.hit)
    meta: dict[str, Any] = {}
    for e in reversed(ranked):  # the primary's values win conflicts
        if isinstance(e.hit.get("meta"), dict):
            meta.update(e.hit["meta"])
    meta.update({"engine": primary.engine, "engineRank": primary.rank,
                 "engineScore": primary.hit.get("score"),
                 "engines": {e.engine: {"rank": e.rank, "score": e.hit.get("score")}
                             for e in ranked}})
    hit.update(score=score, meta=meta)
    confidences = [e.hit["confidence"] for e in entries if number(e.hit.get("confidence"))]
    if confidences:
        hit["confidence"] = max(confidences)
    if any((e.hit.get("trust") or {}).get("injectionSuspected") for e in entries):
        hit["trust"] = {**(hit.get("trust") or {}), "injectionSuspected": True}
    return hit


def number(value: Any) -> TypeGuard[int | float]:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _key(hit: Mapping[str, Any], dedup: str) -> tuple[str, str]:
    """Document identity: the stringified id, or ``citation.uri`` when asked and present."""
    uri = (hit.get("citation") or {}).get("uri") if dedup == "uri" else None
    return ("uri", uri) if isinstance(uri, str) and uri else ("id", str(hit.get("id")))


def _convex(lists: Mapping[str, list[tuple[Any, float]]], weights: Mapping[str, float],
            floors: Mapping[str, float]) -> list[tuple[Any, float]]:
    """Σ weight · (score − scoreFloor) / (max − scoreFloor): TM2C2 over N engines (§16.3)."""
    parts: dict[Any, list[float]] = {}
    for id_, ranked in lists.items():
        if not ranked:
            continue
        span = max(s for _k, s in ranked) - floors[id_]
        for key, s in ranked:
            norm = max(0.0, (s - floors[id_]) / span) if span > 0 else 0.0
            parts.setdefault(key, []).append(weights[id_] * norm)
    return [(key, settle_sum(math.fsum(terms))) for key, terms in parts.items()]
