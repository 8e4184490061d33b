"""The engine's graph builder: reads the committed chunks, keeps the node and triplet units up to date.

:class:`GraphIndex` is the engine's :class:`~rcp_agentic.derived.DerivedBuilder` for the
knowledge graph. Each run reads the live chunks with their documents' titles, extracts each
chunk once (kept per chunk row in the store's leaf cache under the extractor's identity),
builds the graph with :func:`.build.build_graph` and writes it as ``node`` units (an entity)
and ``triplet`` units (subject, relation, object and the evidence sentence) in one commit.
Ids are stable (hashes of the entity key; of subject + relation + object); a unit is
rewritten only when its text, sources or structure changed or a weight moved past
``graph_weight_tolerance``; vectors follow ``graph_unit_vectors``; a changed extractor or
setting rewrites every unit. :func:`load_graph` reads the graph back at any retained
version. The units' text and metadata and the vector rules: ``docs/internals.md``, "The
graph builder".
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import GraphSection
from ..derived import (BuildContext, DerivedBuilder, DerivedReport, Diff, EmbedTimer, Run,
                       diff_units)
from ..errors import InvalidParams
from ..read_first import checkpoint
from ..store.docstore import Docstore
from ..store.writes import UnitRecord
from .build import GraphCache, GraphConfig, build_graph
from .extract import ChunkExtraction, Extractor
from .extract_rules import BuiltinExtractor
from .model import ChunkText, Entity, GraphData, Relation, Span, Synonym

_loads: Callable[[str], Any] = json.loads
try:  # chromadb, a dependency, brings orjson: ~3x faster on the many small umeta documents
    from orjson import loads as _loads
except ImportError:  # pragma: no cover
    pass

NODE, TRIPLET = "node", "triplet"
KINDS = (NODE, TRIPLET)
_KEY = f"derived.{NODE}"
_CACHE = "graph"
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
        if not e.mentions and not e.about:
            continue
        entities[key] = Entity(
            key=key, name=_flat(e.name) or key, kind=e.kind,
            aliases=tuple(_flat(a) for a in e.aliases if _flat(a)),
            description=e.description.strip(), spans=tuple(e.spans),
            mentions={k: float(w) for k, w in sorted(e.mentions.items(), key=lambda x: _row(x[0]))},
            about=tuple(sorted(set(e.about), key=_row)))
    relations = sorted(
        (Relation(r.subject, r.object, _flat(r.relation), r.evidence.strip(), r.span,
                  tuple(sorted(set(r.chunks), key=_row)), float(r.weight), bool(r.typed))
         for r in graph.relations
         if r.subject in entities and r.object in entities and r.chunks and _yield()),
        key=lambda r: (r.subject, r.object, r.relation, r.evidence))
    synonyms = sorted((Synonym(min(y.a, y.b), max(y.a, y.b), float(y.similarity))
                       for y in graph.synonyms
                       if y.a in entities and y.b in entities and y.a != y.b),
                      key=lambda y: (y.a, y.b))
    return GraphData(entities, relations, synonyms,
                     dict(sorted(graph.chunk_docs.items(), key=lambda x: _row(x[0]))))


@dataclass
class _Unit:
    """One unit to store: its id, kind, text, umeta and covers (chunk rowids)."""

    uid: str
    unit: str
    text: str
    meta: dict[str, Any]
    covers: list[int]


def graph_units(graph: GraphData, chunks: Sequence[ChunkText] = ()) -> list[_Unit]:
    """The node and triplet units of a canonical graph (``chunks``: the chunks read, to
    place each description sentence in the unit's text as ``spans[i].at``)."""
    units: list[_Unit] = []
    texts: dict[str, list[ChunkText]] = {}
    for chunk in chunks:
        texts.setdefault(chunk.doc_id, []).append(chunk)
    synonyms: dict[str, list[list[Any]]] = {}
    for y in graph.synonyms:
        synonyms.setdefault(y.a, []).append([node_uid(y.b), y.similarity])
        synonyms.setdefault(y.b, []).append([node_uid(y.a), y.similarity])
    for key, e in graph.entities.items():
        checkpoint()
        header = node_header(e.name, e.aliases)
        text = header + ("\n" + e.description if e.description else "")
        covers = sorted({_row(k) for k in e.mentions} | {_row(k) for k in e.about})
        meta: dict[str, Any] = {"key": key, "name": e.name, "kind": e.kind, "aliases": list(e.aliases),
                "mentions": {str(_row(k)): w for k, w in e.mentions.items()},
                "about": [_row(k) for k in e.about],
                "synonyms": sorted(synonyms.get(key, [])),
                "spans": _spans(e.spans, text, len(header) + 1, texts)}
        units.append(_Unit(node_uid(key), NODE, text, meta, covers))
    for uid, r in zip(triplet_uids(graph), graph.relations):
        checkpoint()
        subject, obj = graph.entities[r.subject], graph.entities[r.object]
        # An offline relation is the words between two mentions: shown in reading order.
        swap = object_first(subject, obj, r)
        header = triplet_header(*((obj.name, r.relation, subject.name) if swap
                                  else (subject.name, r.relation, obj.name)))
        text = header + ("\n" + r.evidence if r.evidence else "")
        units.append(_Unit(uid, TRIPLET, text, {
            "subject": node_uid(r.subject), "object": node_uid(r.object),
            "subject_key": r.subject, "object_key": r.object,
            "subject_name": subject.name, "object_name": obj.name, "relation": r.relation,
            "reading": "object-first" if swap else "subject-first",
            "weight": r.weight, "typed": r.typed,
            "span": _spans((r.span,), text, len(header) + 1, texts)[0] if r.span else None,
            "chunks": [_row(k) for k in r.chunks]}, [_row(k) for k in r.chunks]))
    return units


def triplet_uids(graph: GraphData) -> list[str]:
    """The stored ``triplet`` unit id of each relation of ``graph``, in order: a hash of
    (subject, relation, object); the same words joining the same pair twice are told apart
    by their evidence and sources."""
    taken: set[str] = set()
    out = []
    for r in graph.relations:
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


def _embedded_text(u: _Unit) -> str:
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
           by_doc: Mapping[str, list[ChunkText]]) -> list[dict[str, Any]]:
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
        metas.append((uid, unit, text, _loads(m)))
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


def make_extractor(spec: str, llm: Any = None) -> Extractor | None:
    """The extractor ``graph_extractor`` names (None: ``llm`` without an LLM given)."""
    if spec == "builtin":
        return BuiltinExtractor()
    if spec.startswith("spacy:"):
        from .extract_spacy import SpacyExtractor

        return SpacyExtractor(spec[len("spacy:"):])
    if spec == "llm":
        if llm is None:
            return None
        from .extract_llm import LLMExtractor

        return LLMExtractor(llm)
    raise InvalidParams(f"unknown graph_extractor {spec!r}", field="graph_extractor")


class GraphIndex(DerivedBuilder[GraphSection]):
    """Builds and updates the engine's knowledge graph (``node`` and ``triplet`` units)."""

    unit = NODE
    kinds = KINDS
    what = "the graph"
    rebuild_command = "rcp-agentic graph rebuild"

    def __init__(self, ctx: BuildContext, settings: GraphSection) -> None:
        super().__init__(ctx, settings)
        self._extractor: Extractor | None = None
        self._made = False
        self._cache: GraphCache | None = None  # per-chunk results of this process's last build
        self._names: dict[str, np.ndarray] = {}  # names embedded for node vectors, not by the resolver

    @property
    def extractor(self) -> Extractor | None:
        """The configured extractor, made on first use (a spaCy pipeline loads slowly)."""
        if not self._made:
            self._extractor = make_extractor(self.settings.extractor, self.ctx.llm)
            self._made = True
        return self._extractor

    @property
    def graph_config(self) -> GraphConfig:
        """The build settings, from the engine's ``graph_*`` configuration."""
        c = self.settings
        return GraphConfig(description_tokens=c.description_tokens,
                           max_relations_per_entity=c.relations_per_entity,
                           synonym_threshold=c.synonym_threshold)

    @property
    def identity(self) -> str:
        """What the graph depends on: the extractor and the build settings."""
        extractor = self.extractor
        return (f"{extractor.identity if extractor else 'llm/none'};{self.graph_config.identity};"
                f"vectors={self.vector_rule}")

    @property
    def vector_rule(self) -> str:
        """How node and triplet vectors are made, as the graph's identity records it: a
        graph stored under another rule (such as plain ``sources``, before node vectors
        carried their names) is rewritten whole by the next update."""
        c = self.settings
        if c.unit_vectors == "sources":
            return f"sources+name{c.node_name_weight:g}"
        return c.unit_vectors

    def blocked(self) -> DerivedReport | None:
        if self.extractor is None:
            return DerivedReport(NODE, "none", reason="graph_extractor is 'llm' but the engine "
                                 "was opened without an LLM: the graph is served as it is and "
                                 "updated once an LLM is given")
        return None

    def build(self, run: Run, full: bool) -> DerivedReport | None:
        """One attempt, committed as one new index version (or nothing)."""
        store = self.store
        data_version = int(store.info("data_version") or 0)
        identity = self.identity
        same = store.info(f"{_KEY}.identity") == identity
        reflects = int(store.info(f"{_KEY}.version") or 0)
        has_graph = store.info(f"{_KEY}.identity") is not None
        if not full and same and has_graph and reflects >= data_version:
            return DerivedReport(NODE, "none", kept=sum(
                n for u, _lv, n in store.unit_kinds(run.base) if u in KINDS),
                seconds=run.seconds(), reason="up to date")
        reason = ("requested" if full else "no graph yet" if not has_graph else
                  "the extractor or graph settings changed" if not same else "")
        chunks = live_chunks(store)
        timer = EmbedTimer(self.ctx)
        assert self.extractor is not None
        # An extraction is a function of the chunk's text and the extractor alone: even a full
        # build reads it from the leaf cache (entries of another extractor are never read).
        extractor = _StoredExtractions(self.extractor, store)
        graph = canonical(self._build(chunks, extractor, timer, fresh=bool(reason)))
        stored = store.live_derived(NODE) + store.live_derived(TRIPLET)
        diff = self._diff(stored, graph_units(graph, chunks), same or not has_graph,
                          tolerance=0.0 if reason else self.settings.weight_tolerance)
        records = self._records(diff, timer)
        info = {f"{_KEY}.identity": identity, f"{_KEY}.version": str(run.base + 1),
                f"derived.{TRIPLET}.version": str(run.base + 1),
                f"{_KEY}.chunks": str(len(chunks))}
        version = store.write_derived(KINDS, records, diff.retire, base_version=run.base,
                                      info=info)
        if version is None:
            return None
        counts = {"nodes": len(graph.entities), "triplets": len(graph.relations),
                  "synonyms": len(graph.synonyms), "chunks": len(chunks),
                  "extracted": extractor.extracted, "embedded": timer.texts}
        return DerivedReport(
            NODE, "full" if reason else "incremental", added=len(records),
            retired=len(diff.retire), kept=len(stored) - len(diff.retire),
            seconds=run.seconds(), seconds_embedding=timer.embedding,
            seconds_extracting=extractor.seconds, version=version, reason=reason,
            counts=counts)

    @staticmethod
    def _diff(stored: list[dict[str, Any]], new: list[_Unit], comparable: bool, *,
              tolerance: float) -> Diff[_Unit]:
        """The units to write, reuse and retire; when the stored graph was made under another
        identity, every unit again (its vector may have been made another way)."""
        if not comparable:
            return Diff(new, {}, sorted(row["uid"] for row in stored))
        return diff_units(stored, new, uid=lambda u: u.uid, text=lambda u: u.text,
                          same=lambda row, u: (row["text"] == u.text
                                               and row["covers"] == u.covers
                                               and _close(row["umeta"], u.meta, tolerance)))

    def _records(self, diff: Diff[_Unit], timer: EmbedTimer) -> list[UnitRecord]:
        """The rows of the units to write: a reused row's vector, else a new one."""
        vectors = self.store.vectors([row["rowid"] for row in diff.reuse.values()])
        fresh = self._vectors([u for u in diff.add if u.uid not in diff.reuse], timer)
        records = []
        for u in diff.add:
            old = diff.reuse.get(u.uid)
            vector = vectors.get(old["rowid"]) if old is not None else None
            records.append(self.record(uid=u.uid, unit=u.unit, level=0, text=u.text,
                                       vector=fresh[u.uid] if vector is None else vector,
                                       meta=u.meta, covers=u.covers))
        return records

    def _build(self, chunks: list[ChunkText], extractor: _StoredExtractions, timer: EmbedTimer,
               fresh: bool) -> GraphData:
        """The graph of ``chunks``; this process's :class:`GraphCache` keeps every chunk's
        extraction, title hits and name vectors between runs, so only what changed is redone
        (``fresh``: start from an empty cache)."""
        if fresh or self._cache is None or self._cache.identity != extractor.identity:
            self._cache = GraphCache()
        return build_graph(chunks, extractor, embed=timer.embed, config=self.graph_config,
                           cache=self._cache)

    def _vectors(self, todo: list[_Unit], timer: EmbedTimer) -> dict[str, np.ndarray]:
        """The vectors of new unit texts, by ``graph_unit_vectors``:

        * ``text`` — a node embeds its text; a triplet its evidence sentence (one vector
          per sentence, shared by every pair it joins: sentences are far fewer than
          triplets, and the header's words are indexed for BM25 all the same);
        * ``sources`` — a triplet takes the mean of its attesting chunks' vectors; a node
          blends its name with its sources (:meth:`_node_vectors`). Only names the
          resolver did not embed are embedded.
        """
        if not todo:
            return {}
        if self.settings.unit_vectors == "sources":
            out = self._source_means(todo, timer)
            out.update(self._node_vectors([u for u in todo if u.unit == NODE], out, timer))
            return out
        key = {u.uid: _embedded_text(u) for u in todo}
        texts = list(dict.fromkeys(key.values()))
        by_text = dict(zip(texts, timer.embed(texts)))
        return {uid: by_text[text] for uid, text in key.items()}

    def _source_means(self, todo: list[_Unit], timer: EmbedTimer) -> dict[str, np.ndarray]:
        """Each unit's mean of its chunks' vectors, normalised (a node's weighted by its
        mentions); a unit none of whose chunks has a vector embeds its text."""
        chunk_vectors = self.store.vectors(sorted({r for u in todo for r in u.covers}))
        out = {}
        for u in todo:
            weights = ({int(r): float(w) for r, w in u.meta["mentions"].items()}
                       if u.unit == NODE else {})
            present = [r for r in u.covers if r in chunk_vectors]
            if not present:
                out[u.uid] = timer.embed([u.text])[0]
                continue
            out[u.uid] = _unit(np.sum([chunk_vectors[r] * weights.get(r, 1.0) for r in present],
                                      axis=0))
        return out

    def _node_vectors(self, nodes: list[_Unit], means: Mapping[str, np.ndarray],
                      timer: EmbedTimer) -> dict[str, np.ndarray]:
        """Each node's vector: ``graph_node_name_weight`` of its entity vector (the mean of
        its name's and aliases' embeddings) plus the rest of its sources' mean, normalised.

        Nodes that share their sources (a date, a place and the band they are all written
        about) would otherwise share one vector, and a query naming one of them could rank
        another first; the name part ranks the entity the query names above the rest."""
        w = self.settings.node_name_weight
        if not nodes or w == 0:
            return {}
        names = self._name_vectors([n for u in nodes for n in (u.meta["name"], *u.meta["aliases"])],
                                   timer)
        out = {}
        for u in nodes:
            entity = _unit(np.mean([names[n] for n in (u.meta["name"], *u.meta["aliases"])],
                                   axis=0))
            out[u.uid] = _unit(w * entity + (1.0 - w) * means[u.uid])
        return out

    def _name_vectors(self, names: list[str], timer: EmbedTimer) -> dict[str, np.ndarray]:
        """Normalised embeddings of ``names``: the resolver's (``GraphCache.name_vectors``)
        or this process's earlier ones where they exist, the rest embedded in one batch."""
        resolved = self._cache.name_vectors if self._cache is not None else {}
        wanted = list(dict.fromkeys(names))
        missing = [n for n in wanted if n not in resolved and n not in self._names]
        if missing:
            self._names.update(zip(missing, timer.embed(missing)))
        out = {n: _unit(np.asarray(resolved[n] if n in resolved else self._names[n], np.float32))
               for n in wanted}
        # Kept for the next update of this process (a node rewritten with the same name),
        # never beyond the names of the last run.
        self._names = {n: self._names[n] for n in wanted if n in self._names}
        return out


def _close(old: Any, new: Any, tolerance: float) -> bool:
    """Whether two umeta values are equal, numbers within ``tolerance`` (relative)."""
    if isinstance(new, float) and isinstance(old, (int, float)) and not isinstance(old, bool):
        return math.isclose(old, new, rel_tol=tolerance, abs_tol=1e-12)
    if isinstance(new, dict):
        return isinstance(old, dict) and old.keys() == new.keys() and all(
            _close(old[k], new[k], tolerance) for k in new)
    if isinstance(new, (list, tuple)):
        return isinstance(old, list) and len(old) == len(new) and all(
            _close(a, b, tolerance) for a, b in zip(old, new))
    return bool(old == new)


def _yield() -> bool:
    """A checkpoint inside a comprehension's condition (always true)."""
    checkpoint()
    return True


def _unit(v: np.ndarray) -> np.ndarray:
    """``v`` scaled to unit length (a zero vector stays zero)."""
    return np.asarray(v / max(float(np.linalg.norm(v)), 1e-12), dtype=np.float32)


def _row(key: str) -> int:
    """The chunk rowid of a chunk key ``r<rowid>``."""
    return int(key[1:])


class _StoredExtractions:
    """An extractor behind the store's leaf cache: a chunk row extracted once (by this
    extractor identity, in any process) is read back, not extracted again; new results
    are stored at once, so a build that loses a race with another write keeps them."""

    def __init__(self, inner: Extractor, store: Docstore) -> None:
        self.inner = inner
        self.store = store
        self.identity = inner.identity
        self.extracted = 0
        self.seconds = 0.0

    def extract(self, chunks: Sequence[ChunkText]) -> list[ChunkExtraction]:
        started = time.perf_counter()
        rows = [_row(c.key) for c in chunks]
        cached = self.store.leaf_cache(_CACHE, self.identity, rows)
        todo = [c for c, r in zip(chunks, rows) if r not in cached]
        made: dict[int, ChunkExtraction] = {}
        if todo:
            made = dict(zip((_row(c.key) for c in todo), self.inner.extract(todo)))
            self.store.put_leaf_cache(_CACHE, self.identity, {
                r: json.dumps(x.to_json(), ensure_ascii=False) for r, x in made.items()})
            self.extracted += len(todo)
        self.seconds += time.perf_counter() - started
        return [made[r] if r in made else ChunkExtraction.from_json(_loads(cached[r]))
                for r in rows]
