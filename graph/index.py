"""The engine's graph builder: reads the committed chunks, keeps the node and triplet units up to date.

:class:`GraphIndex` is the engine's :class:`~rcp_agentic.derived.DerivedBuilder` for the
knowledge graph. Each run reads the live chunks with their documents' titles, extracts each
chunk once (kept per chunk row in the store's leaf cache under the extractor's identity),
builds the graph with :func:`.build.build_graph` and writes it as ``node`` units (an entity)
and ``triplet`` units (subject, relation, object and the evidence sentence) in one commit.
Ids are stable (hashes of the entity key; of subject + relation + object); a unit is
rewritten only when its text, sources or structure changed or a weight moved past
``graph_weight_tolerance``; vectors follow ``graph_unit_vectors``; a changed extractor or
setting rewrites every unit. The units, and reading the graph back at any retained version:
``stored``. The units' text and metadata and the vector rules: ``docs/internals.md``, "The
graph builder".
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..config import GraphSection
from ..derived import BuildContext, DerivedBuilder, DerivedReport, Diff, EmbedTimer, Run, diff_units
from ..errors import InvalidParams
from ..store.docstore import Docstore
from ..store.writes import UnitRecord
from .build import apply_chunks, build_graph
from .build_state import GraphCache, GraphConfig
from .delta_units import CommittedTriplets, delta_units
from .extract import ChunkExtraction, Extractor
from .extract_rules import BuiltinExtractor
from .model import ChunkText, GraphData
from .live import GraphDelta
from .stored import (KINDS, NODE, TRIPLET, StoredUnit, canonical, chunk_row, embedded_text,
                     find_entity, graph_units, live_chunks, loads_json, node_uid)

# node_uid and find_entity are imported from here by graph/ops.py and cli/graph_views.py.
__all__ = ["GraphIndex", "find_entity", "make_extractor", "node_uid"]

_KEY = f"derived.{NODE}"
_CACHE = "graph"


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
        self._cache: GraphCache | None = None  # the live graph of this process's last build
        # The index version the live graph reflects once its units were committed (None: the
        # next run reads every chunk), the version that committed them (another process
        # writing the graph since makes the next run read every chunk), the triplet ids
        # committed, what awaits a commit.
        self._version: int | None = None
        self._written: str | None = None
        self._committed = CommittedTriplets()
        self._pending = GraphDelta()
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
        timer = EmbedTimer(self.ctx)
        assert self.extractor is not None
        # An extraction is a function of the chunk's text and the extractor alone: even a full
        # build reads it from the leaf cache (entries of another extractor are never read).
        extractor = _StoredExtractions(self.extractor, store)
        info = {f"{_KEY}.identity": identity}
        if reason or not self._follows(run):
            return self._whole(run, reason, extractor, timer, info,
                               comparable=same or not has_graph)
        return self._delta(run, extractor, timer, info)

    def _follows(self, run: Run) -> bool:
        """Whether the live graph can be brought to ``run.base`` by the chunks in between."""
        cache = self._cache
        return (cache is not None and cache.live is not None and self._version is not None
                and self.store.readable_since(self._version)
                and self.store.info(f"{_KEY}.written") == self._written
                and cache.identity == self.extractor.identity  # type: ignore[union-attr]
                and cache.live.config == self.graph_config)

    def _whole(self, run: Run, reason: str, extractor: _StoredExtractions, timer: EmbedTimer,
               info: dict[str, str], *, comparable: bool) -> DerivedReport | None:
        """Every chunk read, the graph brought to them, every unit diffed with the store."""
        store = self.store
        self._version = None
        chunks = live_chunks(store)
        graph = canonical(self._build(chunks, extractor, timer, fresh=bool(reason)))
        stored = store.live_derived(NODE) + store.live_derived(TRIPLET)
        units = graph_units(graph, chunks)
        diff = self._diff(stored, units, comparable,
                          tolerance=0.0 if reason else self.settings.weight_tolerance)
        records = self._records(diff, timer)
        info[f"{_KEY}.chunks"] = str(len(chunks))
        version = store.write_derived(KINDS, records, diff.retire, base_version=run.base,
                                      info=info)
        if version is None:
            return None
        self._version, self._written, self._pending = run.base, str(version), GraphDelta()
        self._committed = CommittedTriplets.of(units)
        return self._report(run, "full" if reason else "incremental", reason, records,
                            diff.retire, len(stored), extractor, timer, version)

    def _delta(self, run: Run, extractor: _StoredExtractions, timer: EmbedTimer,
               info: dict[str, str]) -> DerivedReport | None:
        """The chunks that entered and left since the live graph's version, applied to it;
        only the units they changed diffed with their stored rows."""
        store, cache = self.store, self._cache
        assert cache is not None and self._version is not None
        entered, left = store.leaf_delta(self._version, run.base)
        new = [ChunkText(f"r{r}", uid, doc_id, title, text, int(start or 0))
               for r, uid, doc_id, start, text, title in store.leaves_of(r for r, _d in entered)]
        self._pending.merge(apply_chunks(cache, extractor, added=new,
                                         removed=[f"r{r}" for r in left], embed=timer.embed,
                                         config=self.graph_config))
        self._version = run.base
        made = delta_units(cache.live, self._pending)
        units = [u for group in made.values() for u in group]
        wanted = ({u.uid for u in units} | {k for k in made if k.startswith("node:")}
                  | self._committed.held(made))
        stored = store.live_derived(NODE, wanted) + store.live_derived(TRIPLET, wanted)
        diff = self._diff(stored, units, True, tolerance=self.settings.weight_tolerance)
        records = self._records(diff, timer)
        info[f"{_KEY}.chunks"] = str(len(cache.live.chunks))
        # Every read above was made at run.base, so writes since need not refuse the commit.
        version = store.write_derived(KINDS, records, diff.retire, base_version=run.base,
                                      info=info, reads=())
        if version is None:
            return None
        self._committed.commit(made)
        self._written, self._pending = str(version), GraphDelta()
        return self._report(run, "incremental", "", records, diff.retire, None, extractor,
                            timer, version)

    def _report(self, run: Run, mode: str, reason: str, records: list[UnitRecord],
                retired: list[str], stored: int | None, extractor: _StoredExtractions,
                timer: EmbedTimer, version: int) -> DerivedReport:
        live = self._cache.live if self._cache is not None else None
        assert live is not None
        counts = {"nodes": len(live.entities), "triplets": live.relation_count,
                  "synonyms": live.synonym_count(), "chunks": len(live.chunks),
                  "extracted": extractor.extracted, "embedded": timer.texts}
        # Kept: the live units left as they were (the units now live less the ones written).
        kept = (stored - len(retired) if stored is not None
                else len(live.entities) + live.relation_count - len(records))
        return DerivedReport(
            NODE, mode, added=len(records), retired=len(retired), kept=kept,
            seconds=run.seconds(), seconds_embedding=timer.embedding,
            seconds_extracting=extractor.seconds, version=version, reason=reason,
            counts=counts)

    @staticmethod
    def _diff(stored: list[dict[str, Any]], new: list[StoredUnit], comparable: bool, *,
              tolerance: float) -> Diff[StoredUnit]:
        """The units to write, reuse and retire; when the stored graph was made under another
        identity, every unit again (its vector may have been made another way)."""
        if not comparable:
            return Diff(new, {}, sorted(row["uid"] for row in stored))
        return diff_units(stored, new, uid=lambda u: u.uid, text=lambda u: u.text,
                          same=lambda row, u: (row["text"] == u.text
                                               and row["covers"] == u.covers
                                               and _close(row["umeta"], u.meta, tolerance)))

    def _records(self, diff: Diff[StoredUnit], timer: EmbedTimer) -> list[UnitRecord]:
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

    def _vectors(self, todo: list[StoredUnit], timer: EmbedTimer) -> dict[str, np.ndarray]:
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
        key = {u.uid: embedded_text(u) for u in todo}
        texts = list(dict.fromkeys(key.values()))
        by_text = dict(zip(texts, timer.embed(texts)))
        return {uid: by_text[text] for uid, text in key.items()}

    def _source_means(self, todo: list[StoredUnit], timer: EmbedTimer) -> dict[str, np.ndarray]:
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

    def _node_vectors(self, nodes: list[StoredUnit], means: Mapping[str, np.ndarray],
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


def _unit(v: np.ndarray) -> np.ndarray:
    """``v`` scaled to unit length (a zero vector stays zero)."""
    return np.asarray(v / max(float(np.linalg.norm(v)), 1e-12), dtype=np.float32)


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
        rows = [chunk_row(c.key) for c in chunks]
        cached = self.store.leaf_cache(_CACHE, self.identity, rows)
        todo = [c for c, r in zip(chunks, rows) if r not in cached]
        made: dict[int, ChunkExtraction] = {}
        if todo:
            made = dict(zip((chunk_row(c.key) for c in todo), self.inner.extract(todo)))
            self.store.put_leaf_cache(_CACHE, self.identity, {
                r: json.dumps(x.to_json(), ensure_ascii=False) for r, x in made.items()})
            self.extracted += len(todo)
        self.seconds += time.perf_counter() - started
        return [made[r] if r in made else ChunkExtraction.from_json(loads_json(cached[r]))
                for r in rows]
