"""Hit assembly: a stored unit row becomes an RCP ``Hit`` with citation, chunk ref, static fields.

A hit's text is cut at ``max_chars`` (EngineConfig.max_hit_chars): the hit then
carries ``meta.truncated: true`` and ``meta.text_chars`` (the full length), and the
caller's usage notes say so; the full text stays in the store.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import units
from ..wire import Hit

if TYPE_CHECKING:
    from ..store.docstore import Docstore
    from .candidates import Candidates, Query


def static_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The hosted retrieval API's built-in fields of a unit (absent values omitted)."""
    fields = {
        "doc_id": row["doc_id"],
        "chunk_index": row["idx"] if row["unit"] == "chunk" else None,
        "chunk_start_char": row["start"],
        "chunk_end_char": row["end"],
        "chunk_token_count": row["tokens"],
        "page_range_start": row["page_start"],
        "page_range_end": row["page_end"],
        "file_type": row["file_type"],
    }
    return {k: v for k, v in fields.items() if v is not None}


def build_hit(row: dict[str, Any], *, unit: str, score: float, scores: dict[str, float],
              include_text: bool = True, vector: np.ndarray | None = None,
              confidence: float | None = None, max_chars: int | None = None,
              notes: list[str] | None = None, parents: list[str] | None = None) -> Hit:
    """One hit from a ``Docstore.hydrate`` row; ``unit`` is the unit name to show.

    A text longer than ``max_chars`` is cut, flagged in ``meta`` and noted in ``notes``.
    A derived unit (a summary of many documents) has no ``chunk`` ref: it carries
    ``provenance.leaves`` (the chunks it covers), ``meta.doc_ids`` (the documents they
    lie in, most-covered first), ``meta.child_ids`` and the sentence ``meta.spans`` of
    its summary; its citation is the document most of its leaves come from.
    ``parents`` (the units one level up that hold it) become ``meta.parent_ids``.
    """
    meta = json.loads(row["meta"]) if row["meta"] not in (None, "{}") else {}
    meta.update(static_fields(row))
    derived = row["doc_id"] is None
    if derived:
        umeta = row.get("umeta") or {}
        meta["doc_ids"] = row.get("doc_ids") or []
        if umeta.get("children"):
            meta["child_ids"] = umeta["children"]
        if umeta.get("spans"):
            meta["spans"] = umeta["spans"]
        if row["unit"] == "node":
            meta.update({k: umeta[k] for k in ("name", "kind", "aliases") if k in umeta})
        elif row["unit"] == "community":
            meta.update({k: umeta[k] for k in ("title", "size", "rating", "levels")
                         if umeta.get(k) is not None})
        elif row["unit"] == "triplet":
            meta.update({"subject": umeta.get("subject_name"), "object": umeta.get("object_name"),
                         "relation": umeta.get("relation"), "typed": umeta.get("typed", False)})
    if parents:
        meta["parent_ids"] = parents
    text = row["text"] if include_text else None
    if text is not None and max_chars is not None and len(text) > max_chars:
        meta["truncated"], meta["text_chars"] = True, len(text)
        note = (f"hit {row['uid']}: text cut to its first {max_chars} of {len(text)} "
                "characters (maxHitChars)")
        if notes is not None and note not in notes:  # progress may build the same hit twice
            notes.append(note)
        text = text[:max_chars]
    citation = {"source": row["source"] or row["doc_id"] or row["uid"], "uri": row["uri"],
                "title": row["title"], "start": row["start"], "end": row["end"],
                "page": row["page_start"]}
    # Validating one nested dict is ~4x faster in pydantic-core than model_construct per model.
    return Hit.model_validate({
        "id": row["uid"], "score": score, "confidence": confidence,
        "text": text,
        "unit": unit,
        "level": row["level"], "meta": meta, "scores": scores, "citation": citation,
        "vector": vector.tolist() if vector is not None else None,
        "chunk": None if derived else {"doc_id": row["doc_id"], "index": row["idx"]},
        "provenance": _provenance(row) if derived else None,
        "trust": {"level": row["trust"],
                  "injection_suspected": None if row["injection_suspected"] is None
                  else bool(row["injection_suspected"])}})


def _provenance(row: dict[str, Any]) -> dict[str, Any]:
    """A derived unit's provenance: its leaves; a triplet also its two nodes and their edge."""
    out: dict[str, Any] = {"leaves": row.get("leaves") or []}
    umeta = row.get("umeta") or {}
    if row["unit"] == "node":
        out["nodes"] = [row["uid"]]
    elif row["unit"] == "community":  # its most central entities (at most 64)
        out["nodes"] = list(umeta.get("entities") or [])
    elif row["unit"] == "triplet" and umeta.get("subject") and umeta.get("object"):
        out["nodes"] = [umeta["subject"], umeta["object"]]
        out["edges"] = [{"src": umeta["subject"], "dst": umeta["object"],
                         "weight": float(umeta.get("weight") or 0.0)}]
    return out


def build_composed_hit(unit: Any, *, score: float, scores: dict[str, float],
                       include_text: bool = True, max_chars: int | None = None,
                       notes: list[str] | None = None,
                       confidence: float | None = None) -> Hit:
    """One hit from a unit composed at query time (``rcp_agentic.graph.compose.Composed``: a
    path or a subgraph). ``provenance`` carries the entity ``path`` (a path), the ``nodes``
    and weighted ``edges`` shown and the ``leaves`` (chunk ids) whose sentences it shows;
    ``meta.citations`` cites each of those chunks, ``citation`` the first; ``meta.doc_ids``
    their documents, most-shown first; with the text, ``meta.names`` maps each node id to
    its entity name and ``meta.relations`` says what joins each edge. ``confidence`` is the caller's P(the unit covers a
    supporting passage), read off its leaf chunks (None without a calibration).
    """
    meta: dict[str, Any] = {"doc_ids": list(unit.doc_ids), "citations": list(unit.citations),
                            "chunk_token_count": unit.tokens}
    text = unit.text if include_text else None
    if text is not None:
        meta["names"], meta["relations"] = dict(unit.names), list(unit.relations)
    if text is not None and max_chars is not None and len(text) > max_chars:
        meta["truncated"], meta["text_chars"] = True, len(text)
        note = (f"hit {unit.uid}: text cut to its first {max_chars} of {len(text)} "
                "characters (maxHitChars)")
        if notes is not None and note not in notes:
            notes.append(note)
        text = text[:max_chars]
    return Hit.model_validate({
        "id": unit.uid, "score": score, "confidence": confidence, "text": text,
        "unit": unit.unit, "level": 0,
        "meta": meta, "scores": scores, "citation": unit.citation or None,
        "provenance": {"path": list(unit.path) or None, "nodes": list(unit.nodes),
                       "edges": [{"src": a, "dst": b, "weight": w} for a, b, w in unit.edges],
                       "leaves": list(unit.leaf_uids)},
        "trust": unit.trust or None})


def stored_hits(store: Docstore, query: Query, cands: Candidates, top: list[tuple[int, float]],
                confidence: list[float | None] | None) -> list[Hit]:
    """Hits for ``top`` (positions and scores of the query's index, best first), hydrated
    from the store; ``scores`` keeps every recall source's score, the ``fused`` score
    before any rerank and the ``rerank`` score; ``confidence[i]`` is the i-th hit's. A unit
    deleted after the query's snapshot was taken is left out."""
    plan, index = query.plan, query.index
    positions = [p for p, _s in top]
    per_stage = cands.per_stage(positions)
    rowids = [int(index.rowids[p]) for p in positions]
    rows = store.hydrate(rowids)
    vectors = store.vectors(rowids) if plan.include_vectors else {}
    kind = units.get(plan.unit)
    spans_level = plan.level if kind.spans_levels else None
    if kind.spans_levels:  # a community names its parent itself
        parents = {row["uid"]: [row["umeta"]["parent"]] for row in rows.values()
                   if (row.get("umeta") or {}).get("parent")}
    elif kind.levelled:
        parents = store.parents(plan.stored_unit, [index.uids[p] for p in positions],
                                query.snapshot.version)
    else:
        parents = {}
    hits = []
    for i, ((pos, score), rowid) in enumerate(zip(top, rowids)):
        row = rows.get(rowid)
        if row is None:  # deleted after this query's snapshot was taken
            continue
        scores = {name: per_stage[name][pos] for name in cands.lists}
        if pos in cands.fused:
            scores["fused"] = float(cands.fused[pos])
        if pos in cands.rerank:
            scores["rerank"] = float(cands.rerank[pos])
        if pos in cands.bridged:
            scores["bridge"] = float(cands.bridged[pos])
        if spans_level is not None:  # a community stands for every level of its range
            row = {**row, "level": spans_level}
        hits.append(build_hit(row, unit=plan.unit if kind.alias_of == row["unit"] else row["unit"],
                              score=float(score), scores=scores,
                              include_text=plan.include_text, vector=vectors.get(rowid),
                              max_chars=plan.max_hit_chars, notes=plan.notes,
                              confidence=None if confidence is None else confidence[i],
                              parents=parents.get(row["uid"])))
    return hits
