"""The knowledge graph as the store keeps it: ``node`` units (an entity) and ``triplet``
units (subject, relation, object and the evidence sentence).

Ids are stable (:func:`node_uid`, :func:`triplet_uid`); :func:`canonical` is the graph as
written, :func:`graph_units` its units (text, umeta, covered chunks), and
:func:`load_graph` / :func:`graph_from_rows` read it back at any retained version, equal to
the canonical graph written there. :func:`find_entity` looks an entity up by name.
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..read_first import checkpoint
from ..store.docstore import Docstore
from .model import ChunkText, Entity, GraphData, Relation, Span, Synonym

loads_json: Callable[[str], Any] = json.loads
try:  # chromadb, a dependency, brings orjson: ~3x faster on the many small umeta documents
    from orjson import loads as loads_json
except ImportError:  # pragma: no cover
    pass

NODE, TRIPLET = "node", "triplet"
KINDS = (NODE, TRIPLET)
_DASH = " — "


def node_uid(key: str) -> str:
    """The stable id of the node of entity ``key``."""
    return "node:" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]


def triplet_uid(subject: str, relation: str, obj: str) -> str:
    """The stable id of a triplet (subject and object are entity keys)."""
    raw = "\x1f".join((subject, relation, obj)).encode("utf-8")
    return "triplet:" + hashlib.sha1(raw).hexdigest()[:16]


def node_header(name: str, aliases: Sequence[str]) -> str:
    """The first line of a node's text: its name and aliases."""
    return name + (f" (also: {', '.join(aliases)})" if aliases else "")


def triplet_header(subject: str, relation: str, obj: str) -> str:
    """The first line of a triplet's text."""
    return f"{subject}{_DASH}{relation}{_DASH}{obj}"


def _flat(text: str) -> str:
    return " ".join(text.split())


def canonical(graph: GraphData) -> GraphData:
    """The graph as the store keeps it: entities without any chunk dropped, names and
    relations on one line, relations and synonyms in a fixed order, chunk lists sorted by
    row. ``load_graph`` of a version returns exactly the canonical graph written there."""
    entities: dict[str, Entity] = {}
    for key in sorted(graph.entities):
        checkpoint()
        e = graph.entities[key]
        if e.mentions or e.about:
            entities[key] = canonical_entity(e)
    relations = canonical_relations(graph.relations, entities)
    synonyms = sorted((Synonym(min(y.a, y.b), max(y.a, y.b), float(y.similarity))
                       for y in graph.synonyms
                       if y.a in entities and y.b in entities and y.a != y.b),
                      key=lambda y: (y.a, y.b))
    return GraphData(entities, relations, synonyms,
                     dict(sorted(graph.chunk_docs.items(), key=lambda x: chunk_row(x[0]))))


def canonical_entity(e: Entity) -> Entity:
    """One entity as the store keeps it (see :func:`canonical`)."""
    return Entity(
        key=e.key, name=_flat(e.name) or e.key, kind=e.kind,
        aliases=tuple(_flat(a) for a in e.aliases if _flat(a)),
        description=e.description.strip(), spans=tuple(e.spans),
        mentions={k: float(w) for k, w in sorted(e.mentions.items(), key=lambda x: chunk_row(x[0]))},
        about=tuple(sorted(set(e.about), key=chunk_row)))


def canonical_relations(relations: Sequence[Relation], entities: Mapping[str, Entity]
                        ) -> list[Relation]:
    """Relations as the store keeps them, between ``entities`` only, in their fixed order."""
    return sorted(
        (Relation(r.subject, r.object, _flat(r.relation), r.evidence.strip(), r.span,
                  tuple(sorted(set(r.chunks), key=chunk_row)), float(r.weight), bool(r.typed))
         for r in relations
         if r.subject in entities and r.object in entities and r.chunks and checkpoint_true()),
        key=lambda r: (r.subject, r.object, r.relation, r.evidence))


@dataclass
class StoredUnit:
    """One unit to store: its id, kind, text, umeta and covers (chunk rowids)."""

    uid: str
    unit: str
    text: str
    meta: dict[str, Any]
    covers: list[int]


def graph_units(graph: GraphData, chunks: Sequence[ChunkText] = ()) -> list[StoredUnit]:
    """The node and triplet units of a canonical graph (``chunks``: the chunks read, to
    place each description sentence in the unit's text as ``spans[i].at``)."""
    texts: dict[str, list[ChunkText]] = {}
    for chunk in chunks:
        texts.setdefault(chunk.doc_id, []).append(chunk)
    synonyms: dict[str, list[list[Any]]] = {}
    for y in graph.synonyms:
        synonyms.setdefault(y.a, []).append([node_uid(y.b), y.similarity])
        synonyms.setdefault(y.b, []).append([node_uid(y.a), y.similarity])
    units = []
    for key, e in graph.entities.items():
        checkpoint()
        units.append(node_unit(e, synonyms.get(key, []), texts))
    return units + triplet_units(graph.relations, graph.entities, texts)


def node_unit(e: Entity, synonyms: list[list[Any]],
              texts: Mapping[str, Sequence[ChunkText]]) -> StoredUnit:
    """The unit of one canonical entity (``synonyms``: [partner node uid, similarity];
    ``texts``: chunks by document, to place its description's sentences)."""
    header = node_header(e.name, e.aliases)
    text = header + ("\n" + e.description if e.description else "")
    covers = sorted({chunk_row(k) for k in e.mentions} | {chunk_row(k) for k in e.about})
    meta: dict[str, Any] = {"key": e.key, "name": e.name, "kind": e.kind,
                            "aliases": list(e.aliases),
                            "mentions": {str(chunk_row(k)): w for k, w in e.mentions.items()},
                            "about": [chunk_row(k) for k in e.about],
                            "synonyms": sorted(synonyms),
                            "spans": _spans(e.spans, text, len(header) + 1, texts)}
    return StoredUnit(node_uid(e.key), NODE, text, meta, covers)


def triplet_units(relations: Sequence[Relation], entities: Mapping[str, Entity],
                  texts: Mapping[str, Sequence[ChunkText]]) -> list[StoredUnit]:
    """The units of canonical relations (all of a (subject, object) pair, in their order:
    their ids tell apart the same words joining one pair twice)."""
    units = []
    for uid, r in zip(relation_uids(relations), relations):
        checkpoint()
        subject, obj = entities[r.subject], entities[r.object]
        # An offline relation is the words between two mentions: shown in reading order.
        swap = object_first(subject, obj, r)
        header = triplet_header(*((obj.name, r.relation, subject.name) if swap
                                  else (subject.name, r.relation, obj.name)))
        text = header + ("\n" + r.evidence if r.evidence else "")
        units.append(StoredUnit(uid, TRIPLET, text, {
            "subject": node_uid(r.subject), "object": node_uid(r.object),
            "subject_key": r.subject, "object_key": r.object,
            "subject_name": subject.name, "object_name": obj.name, "relation": r.relation,
            "reading": "object-first" if swap else "subject-first",
            "weight": r.weight, "typed": r.typed,
            "span": _spans((r.span,), text, len(header) + 1, texts)[0] if r.span else None,
            "chunks": [chunk_row(k) for k in r.chunks]}, [chunk_row(k) for k in r.chunks]))
    return units


def triplet_uids(graph: GraphData) -> list[str]:
    """The stored ``triplet`` unit id of each relation of ``graph``, in order."""
    return relation_uids(graph.relations)


def relation_uids(relations: Sequence[Relation]) -> list[str]:
    """The stored ``triplet`` unit id of each relation, in order: a hash of (subject,
    relation, object); the same words joining the same pair twice are told apart by their
    evidence and sources (so the ids of one pair's relations depend on that pair alone)."""
    taken: set[str] = set()
    out = []
    for r in relations:
        uid = triplet_uid(r.subject, r.relation, r.object)
        if uid in taken:
            uid = triplet_uid(r.subject, "\x1f".join((r.relation, r.evidence, *r.chunks)),
                              r.object)
        n = 1
        while uid in taken:
            uid, n = triplet_uid(r.subject, f"{r.relation}\x1f{n}", r.object), n + 1
        taken.add(uid)
        out.append(uid)
    return out


def embedded_text(u: StoredUnit) -> str:
    """What the ``text`` vectors embed: a node's text, a triplet's evidence sentence."""
    if u.unit == TRIPLET and "\n" in u.text:
        return u.text.split("\n", 1)[1]
    return u.text


def object_first(subject: Entity, obj: Entity, r: Relation) -> bool:
    """Whether a relation reads object first: an offline relation is the words between two
    mentions, shown in reading order."""
    return not r.typed and first_at(obj, r.evidence) < first_at(subject, r.evidence)


def first_at(entity: Entity, text: str) -> int:
    """Where ``entity`` is first named in ``text`` (by name or alias, any case; past the end
    when it is not)."""
    low = text.casefold()
    found = [low.find(n.casefold()) for n in (entity.name, *entity.aliases) if n]
    return min((f for f in found if f >= 0), default=len(text) + 1)


def _spans(spans: Sequence[Span], text: str, start: int,
           by_doc: Mapping[str, Sequence[ChunkText]]) -> list[dict[str, Any]]:
    """Source spans as stored: ``doc_id, start, end``, plus ``at`` (offsets in the unit's
    text) when the sentence is found there."""
    out, at = [], start
    for span in spans:
        entry: dict[str, Any] = {"doc_id": span.doc_id, "start": span.start, "end": span.end}
        for chunk in by_doc.get(span.doc_id, []):
            if chunk.start <= span.start and span.end <= chunk.start + len(chunk.text):
                raw = chunk.text[span.start - chunk.start:span.end - chunk.start].strip()
                for sentence in (raw, " ".join(raw.split())):
                    found = text.find(sentence, at) if sentence else -1
                    if found >= 0:
                        entry["at"] = [found, found + len(sentence)]
                        at = found + len(sentence)
                        break
                break
        out.append(entry)
    return out


def graph_from_rows(rows: Sequence[tuple[str, str, str, str]],
                    chunk_docs: Mapping[str, str]) -> GraphData | None:
    """The graph held by stored unit rows ((uid, unit, text, umeta JSON), as
    ``Docstore.derived_rows`` reads them); None when there is no node."""
    # Hundreds of thousands of small objects: the cyclic collector would walk them again and
    # again while they are made (half the load time); none of them forms a cycle.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _graph_from_rows(rows, chunk_docs)
    finally:
        if enabled:
            gc.enable()


def _graph_from_rows(rows: Sequence[tuple[str, str, str, str]],
                     chunk_docs: Mapping[str, str]) -> GraphData | None:
    metas = []
    for uid, unit, text, m in rows:
        checkpoint()
        metas.append((uid, unit, text, loads_json(m)))
    entities: dict[str, Entity] = {}
    key_of: dict[str, str] = {}
    pairs: dict[tuple[str, str], float] = {}
    for uid, unit, text, m in metas:
        checkpoint()
        if unit == NODE:
            key_of[uid] = m["key"]
            entities[m["key"]] = entity_of(text, m)
    if not entities:
        return None
    for uid, unit, _text, m in metas:
        if unit == NODE:
            for other, similarity in m["synonyms"]:
                if other in key_of:  # a partner that is not visible here takes its edge along
                    a, b = sorted((key_of[uid], key_of[other]))
                    pairs[(a, b)] = float(similarity)
    relations = []
    for _uid, unit, text, m in metas:
        if unit == TRIPLET and m["subject_key"] in entities and m["object_key"] in entities:
            checkpoint()
            relations.append(relation_of(text, m))
    relations.sort(key=relation_order)
    return GraphData(dict(sorted(entities.items())), relations,
                     [Synonym(a, b, s) for (a, b), s in sorted(pairs.items())], dict(chunk_docs))


def entity_of(text: str, m: Mapping[str, Any]) -> Entity:
    """The entity a stored ``node`` unit holds (its text and parsed umeta)."""
    header = node_header(m["name"], m["aliases"])
    return Entity(
        key=m["key"], name=m["name"], kind=m["kind"], aliases=tuple(m["aliases"]),
        description=text[len(header) + 1:] if text.startswith(header + "\n") else "",
        spans=tuple(Span(s["doc_id"], s["start"], s["end"]) for s in m["spans"]),
        mentions={f"r{r}": float(w) for r, w in m["mentions"].items()},
        about=tuple(f"r{r}" for r in m["about"]))


def relation_of(text: str, m: Mapping[str, Any]) -> Relation:
    """The relation a stored ``triplet`` unit holds (its text and parsed umeta)."""
    names = (m["subject_name"], m["object_name"])
    first, second = names[::-1] if m.get("reading") == "object-first" else names
    header = triplet_header(first, m["relation"], second)
    span = m.get("span")
    return Relation(
        m["subject_key"], m["object_key"], m["relation"],
        text[len(header) + 1:] if text.startswith(header + "\n") else "",
        Span(span["doc_id"], span["start"], span["end"]) if span else None,
        tuple(f"r{r}" for r in m["chunks"]), float(m["weight"]), bool(m["typed"]))


def relation_order(r: Relation) -> tuple[str, str, str, str]:
    """How a graph orders its relations (a stable sort: rows in rowid order break ties)."""
    return (r.subject, r.object, r.relation, r.evidence)


def live_chunks(store: Docstore) -> list[ChunkText]:
    """The live chunks with their documents' titles, in row order."""
    titles = dict(store.live_titles())
    return [ChunkText(f"r{r}", uid, doc_id, titles.get(doc_id), text, int(start or 0))
            for r, uid, doc_id, start, _t, text in store.live_leaves("chunk")]


def load_graph(store: Docstore, version: int) -> GraphData | None:
    """The graph as stored and visible at ``version`` (None: no node there).

    A unit is visible only while every chunk it covers is: a graph lagging behind a
    write leaves out the nodes and triplets of changed chunks until it is updated.
    """
    rows = store.derived_rows(KINDS, version)
    if not rows:
        return None
    return graph_from_rows(rows, {f"r{r}": d for r, d in store.leaf_docs(version)})


def find_entity(graph: GraphData, name: str,
                search: Callable[[str], list[str]] | None = None) -> str | None:
    """The key of the entity ``name`` names: by resolution key, then by display name or alias
    (case and accents ignored), then the first node id ``search`` returns (a retrieve over
    node units); None if nothing matches."""
    from .extract import fold
    from .resolve import entity_key

    key = entity_key(name)
    if key in graph.entities:
        return key
    wanted = fold(" ".join(name.split()))
    # The smallest key: a graph derived from an older one does not keep its entities in order.
    found = [k for k, e in graph.entities.items()
             if fold(e.name) == wanted or any(fold(a) == wanted for a in e.aliases)]
    if found:
        return min(found)
    if search is not None:
        by_uid = {node_uid(k): k for k in graph.entities}
        for uid in search(name):
            if uid in by_uid:
                return by_uid[uid]
    return None


def checkpoint_true() -> bool:
    """A checkpoint inside a comprehension's condition (always true)."""
    checkpoint()
    return True


def chunk_row(key: str) -> int:
    """The chunk rowid of a chunk key ``r<rowid>``."""
    return int(key[1:])
