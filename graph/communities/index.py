"""The engine's community builder: keeps the ``community`` units in step with the knowledge graph.

:class:`CommunityIndex` is the engine's :class:`~rcp_agentic.derived.DerivedBuilder` for
``community`` units; it runs after the graph builder and reads the graph visible at the
current version. It builds the hierarchy afresh (:func:`.build.build_communities`) when none
is stored, a setting, the reporter or the clustering identity changed, or ``full=True``;
otherwise it re-clusters the part that changed: from its last run kept in memory
(:mod:`.tracking`), reading only the rows a write changed and reporting and diffing only the
communities it reached, else from the graph and communities read whole. A report
(:mod:`..reports`) is remade only when its ``report_key`` changed, children before parents;
the clustering runs under ``community_build_seconds``. A community is stored once, at its
lowest level, with ``umeta.levels = [lo, hi]``. :func:`load_communities` reads the hierarchy
back at any retained version. The rules: ``docs/internals.md``, "The community builder".
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import display_hooks
from ...config import CommunitySection
from ...derived import BuildContext, DerivedBuilder, DerivedReport, Diff, Run, diff_units
from ...models.tokenizer import count_tokens
from ...store.docstore import Docstore
from ...store.writes import UnitRecord
from ...trust import screen_derived
from ..follow import GraphState, advance
from ..model import GraphData
from ..reports.extractive import ExtractiveReporter
from ..reports.llm import LLMReporter
from ..stored import KINDS, load_graph
from .build import (Budget, Community, CommunityBudgetExceeded, CommunityHierarchy,
                    CommunityUpdate, Edges, build_communities, entity_edges, recluster,
                    update_communities)
from .config import CommunityConfig
from .entity_graph import edge_arrays
from .community_rows import community_units, make_reports, unchanged
from .tracking import (ChunkTexts, EntityEdges, Tracked, dirty, quiet_gc,
                       report_lookups)

UNIT = "community"
_KEY = f"derived.{UNIT}"


@dataclass(frozen=True)
class StoredCommunity:
    """One stored community as read back: its place in the hierarchy and its report."""

    id: str
    levels: range
    members: tuple[str, ...]
    parent: str | None
    children: tuple[str, ...]
    title: str
    summary: str
    text: str
    findings: tuple[dict[str, str], ...]
    rating: float | None
    entities: tuple[str, ...]          # node uids, most central first (capped)

    @property
    def uid(self) -> str:
        return self.id

    @property
    def size(self) -> int:
        return len(self.members)


@dataclass
class CommunityStore:
    """The communities visible at one index version."""

    by_id: dict[str, StoredCommunity]
    hierarchy: CommunityHierarchy
    version: int
    # Partitions already sorted: a store is one committed version and never changes.
    _levels: dict[int, tuple[StoredCommunity, ...]] = field(default_factory=dict, repr=False)

    @property
    def top_level(self) -> int:
        return max((c.levels.stop - 1 for c in self.by_id.values()), default=0)

    def _repr_html_(self) -> str:
        """In Jupyter: sizes per level, and the hierarchy as a collapsible outline."""
        return display_hooks.render("communities_html", self)

    def level(self, level: int) -> list[StoredCommunity]:
        """The partition at ``level`` (0 = finest), largest first (ties by id)."""
        got = self._levels.get(level)
        if got is None:
            got = self._levels[level] = tuple(sorted(
                (c for c in self.by_id.values() if level in c.levels),
                key=lambda c: (-c.size, c.id)))
        return list(got)


def load_communities(store: Docstore, version: int) -> CommunityStore | None:
    """The communities stored and visible at ``version`` (None: none there). A community
    covering a chunk changed since the last update is not visible until the update: links
    to it are dropped, so every level is the partition of what is visible."""
    rows = store.derived_rows((UNIT,), version)
    if not rows:
        return None
    by_id: dict[str, StoredCommunity] = {}
    for uid, _unit, text, raw in rows:
        m = json.loads(raw)
        lo, hi = m["levels"]
        by_id[uid] = StoredCommunity(
            id=uid, levels=range(int(lo), int(hi) + 1), members=tuple(m["members"]),
            parent=m.get("parent"), children=tuple(m.get("children") or ()),
            title=m.get("title", ""), summary=m.get("summary", ""), text=text,
            findings=tuple(m.get("findings") or ()), rating=m.get("rating"),
            entities=tuple(m.get("entities") or ()))
    comms = {c.id: Community(
        id=c.id, members=c.members, parent=c.parent if c.parent in by_id else None,
        children=tuple(x for x in c.children if x in by_id), height=c.levels.start)
        for c in by_id.values()}
    identity = store.info(f"{_KEY}.clusters") or CommunityConfig().identity
    return CommunityStore(by_id, CommunityHierarchy(comms, identity=identity), version)


def hierarchy_of(rows: Sequence[Mapping[str, Any]], identity: str) -> CommunityHierarchy:
    """The hierarchy held by live community rows (``Docstore.live_derived``)."""
    comms = {}
    for row in rows:
        m = row["umeta"]
        comms[row["uid"]] = Community(id=row["uid"], members=tuple(m["members"]),
                                      parent=m.get("parent"),
                                      children=tuple(m.get("children") or ()),
                                      height=int(row["level"]))
    return CommunityHierarchy(comms, identity=identity)


@dataclass
class _Clustering:
    """The hierarchy one run clustered: how (``mode``), why, and what it counted; with the
    communities whose rows may change (``dirty``; None: every one) and the old ones that may
    leave (``gone``; every old one not in the hierarchy when ``dirty`` is None)."""

    hierarchy: CommunityHierarchy
    edges: EntityEdges
    mode: str
    reason: str
    counts: dict[str, int]
    seconds: float
    dirty: set[str] | None = None
    reported: set[str] | None = None   # those of ``dirty`` whose report may change
    gone: set[str] = field(default_factory=set)


class CommunityIndex(DerivedBuilder[CommunitySection]):
    """Builds and updates the engine's Leiden communities (``community`` units)."""

    unit = UNIT
    kinds = (UNIT,)
    what = "the communities"
    rebuild_command = "rcp-agentic graph rebuild"

    def __init__(self, ctx: BuildContext, settings: CommunitySection) -> None:
        super().__init__(ctx, settings)
        self.config = CommunityConfig(max_community_size=settings.max_size)
        screen = self._suspected
        self.reporter: ExtractiveReporter | LLMReporter = (
            LLMReporter(ctx.llm, count_tokens, screen=screen,
                        context_tokens=settings.report_context_tokens) if ctx.llm is not None
            else ExtractiveReporter(count_tokens, screen=screen))
        # This process's last committed run: the next one follows the graph from it.
        self._tracked: Tracked | None = None

    def _suspected(self, text: str) -> bool:
        """Whether a report piece screens positive (injection or active markup): a flagged
        LLM report falls back to the extractive one, a flagged sentence is left out."""
        return bool(screen_derived(self.ctx.screen, text).suspected)

    @property
    def identity(self) -> str:
        """What the reports and their vectors depend on (the clustering has its own)."""
        c = self.settings
        return f"{self.reporter.identity};tokens={c.report_tokens};vectors={c.vectors}"

    def build(self, run: Run, full: bool) -> DerivedReport | None:
        """One attempt: the hierarchy (built, or updated where the graph changed), the reports
        that changed, their units, one commit. With this process's last run still what is
        stored, only the rows a write changed are read, and only the communities it reached
        are reported and diffed; otherwise the graph and the communities are read whole."""
        with quiet_gc():
            return self._build(run, full)

    def _build(self, run: Run, full: bool) -> DerivedReport | None:
        store = self.store
        graph_version = store.info("derived.node.version") or "0"
        same_reports = store.info(f"{_KEY}.identity") == self.identity
        same = same_reports and store.info(f"{_KEY}.clusters") == self.config.identity
        built_on = store.info(f"{_KEY}.graph")
        tracked = self._tracked
        if tracked is not None and (tracked.graph_version != built_on
                                    or store.info(f"{_KEY}.written") != tracked.written):
            tracked = None  # another process wrote the communities since
        if not full and same and built_on == graph_version:
            current = self._up_to_date(run, tracked, int(graph_version))
            if current is not None:
                return current
        self._tracked = None  # advancing hands the tracked graph's rows on to the new state
        state = advance(tracked.graph if tracked is not None else None, store, run.base)
        if state.graph is None:
            return self._no_graph(run, store.live_derived(UNIT), graph_version)
        if (tracked is not None and tracked.hierarchy.communities and not full and same
                and state.change is not None and state.base == tracked.graph.version
                and store.info(f"{_KEY}.complete") != "0"):
            clustering = self._follow(run, tracked, state)
            total = len(tracked.hierarchy.communities)
            if isinstance(clustering, DerivedReport):
                return clustering
            assert clustering.dirty is not None
            wanted = clustering.dirty | clustering.gone | {
                x for cid in clustering.dirty for x in clustering.hierarchy.communities[cid].children}
            stored = store.live_derived(UNIT, sorted(wanted))
        else:
            stored = store.live_derived(UNIT)
            total = len(stored)
            clustering = self._cluster(run, state.data, stored, built_on, tracked, full=full,
                                       same=same, same_reports=same_reports)
            if isinstance(clustering, DerivedReport):
                return clustering
        return self._write(run, state, stored, total, clustering, graph_version,
                           rewrite=not same_reports)

    def _up_to_date(self, run: Run, tracked: Tracked | None, graph_version: int
                    ) -> DerivedReport | None:
        """The report of a run with nothing to do (None: no communities are stored)."""
        if tracked is not None:
            count, levels = len(tracked.hierarchy.communities), tracked.hierarchy.top_level
        else:
            stored = self.store.live_derived(UNIT)
            count = len(stored)
            levels = max((r["umeta"]["levels"][1] for r in stored), default=0)
        if not count:
            return None
        self.mark_current(run, UNIT, at_most=graph_version)
        return DerivedReport(UNIT, "none", kept=count, levels=levels, seconds=run.seconds(),
                             reason="up to date")

    def _no_graph(self, run: Run, stored: list[dict[str, Any]], graph_version: str
                  ) -> DerivedReport | None:
        """Without a graph: nothing to build, or every stored community retires."""
        if not stored:
            return DerivedReport(UNIT, "none", reason="no knowledge graph yet")
        version = self.store.write_derived(UNIT, [], [r["uid"] for r in stored],
                                           base_version=run.base, reads=KINDS,
                                           reflects_at_most=int(graph_version))
        if version is None:
            return None
        return DerivedReport(UNIT, "full", retired=len(stored), version=version,
                             seconds=run.seconds(), reason="the graph is empty")

    def _stopped(self, run: Run, exc: CommunityBudgetExceeded, kept: int,
                 started: float) -> DerivedReport:
        """The report of a run the time budget stopped before its top level."""
        return DerivedReport(
            UNIT, "none", kept=kept, seconds=run.seconds(),
            seconds_clustering=time.perf_counter() - started,
            reason=f"{exc} (community_build_seconds={self.settings.build_seconds:g}): nothing "
            "was committed and the communities still lag; raise it (None: no limit) and run "
            "`rcp-agentic graph rebuild`")

    def _follow(self, run: Run, tracked: Tracked, state: GraphState
                ) -> _Clustering | DerivedReport:
        """The tracked hierarchy updated by what changed from the tracked graph to
        ``state``'s: its edges patched, the roots the change touched clustered again."""
        started = time.perf_counter()
        edges, moved = tracked.edges.patched(state, self.config)
        change = state.change
        assert change is not None
        ents, old = state.data.entities, tracked.hierarchy
        upd = CommunityUpdate(
            mode="incremental", entities_touched=len(moved.touched),
            entities_added=sum(1 for k in change.entities_added if k not in tracked.edges.adjacency),
            entities_removed=sum(1 for k in change.entities_removed if k not in ents))
        try:
            hier = recluster(old, moved.touched, ents, edges.among, self.config,
                             budget=Budget(self.settings.build_seconds), report=upd)
        except CommunityBudgetExceeded as exc:
            return self._stopped(run, exc, len(old.communities), started)
        counts = {"ids_kept": upd.kept, "entities_reclustered": upd.entities_reclustered,
                  "entities_touched": upd.entities_touched}
        return _Clustering(hier, edges, "incremental", *_stats(hier, "", counts),
                           time.perf_counter() - started,
                           *dirty(old, hier, upd, moved.moved),
                           gone=upd.replaced - hier.communities.keys())

    def _cluster(self, run: Run, graph: GraphData, stored: list[dict[str, Any]],
                 built_on: str | None, tracked: Tracked | None, *, full: bool, same: bool,
                 same_reports: bool) -> _Clustering | DerivedReport:
        """The hierarchy of ``graph``, built afresh or updated from the stored one, under the
        time budget; a report of nothing committed when the budget stopped it before its
        top level."""
        store = self.store
        started = time.perf_counter()
        budget = Budget(self.settings.build_seconds)
        arrays = edge_arrays(graph, self.config)
        edges = arrays.as_dict()
        old = self._old_graph(store, built_on, tracked)
        reason = ("requested" if full else "no communities yet" if not stored else
                  "the community reporter changed" if not same_reports else
                  "the community settings or algorithm changed" if not same else
                  "the last build was stopped by its time budget"
                  if store.info(f"{_KEY}.complete") == "0" else
                  "the graph they were built on is no longer retained" if old is None else "")
        counts: dict[str, int] = {}
        try:
            if reason:
                hier = build_communities(graph, self.config, edges, budget=budget)
                mode = "full"
            else:
                assert old is not None
                hier, upd = update_communities(hierarchy_of(stored, self.config.identity),
                                               old[0], graph, self.config, old_edges=old[1],
                                               new_edges=edges, budget=budget)
                mode, reason = upd.mode, upd.reason
                counts.update(ids_kept=upd.kept, entities_reclustered=upd.entities_reclustered,
                              entities_touched=upd.entities_touched)
        except CommunityBudgetExceeded as exc:
            return self._stopped(run, exc, len(stored), started)
        return _Clustering(hier, EntityEdges.of(graph, arrays), mode,
                           *_stats(hier, reason, counts), time.perf_counter() - started)

    def _write(self, run: Run, state: GraphState, stored: list[dict[str, Any]], total: int,
               clustering: _Clustering, graph_version: str, *,
               rewrite: bool) -> DerivedReport | None:
        """The reports, units and vectors of ``clustering``, committed on ``run.base``:
        ``stored`` holds the live rows of the communities it may change and of their
        children (all of them when ``clustering.dirty`` is None); ``total`` live rows."""
        store, hier = self.store, clustering.hierarchy
        graph = state.data
        rows = {r["uid"]: r for r in stored}
        ids = set(hier.communities) if clustering.dirty is None else clustering.dirty
        t_report = time.perf_counter()
        chunks = ChunkTexts(store, graph.chunk_docs)
        if clustering.dirty is None:
            chunks.fetch(graph.chunk_docs)
        reports, remade = make_reports(
            self.reporter, self.settings.report_tokens, hier, graph, chunks,
            report_lookups(state, clustering.edges), ids, rows, rewrite=rewrite,
            reported=clustering.reported)
        seconds_summarising = time.perf_counter() - t_report
        live = stored if clustering.dirty is None else [
            rows[u] for u in sorted(ids | clustering.gone) if u in rows]
        diff = diff_units(live, community_units(hier, graph, reports, ids),
                          uid=lambda u: u["uid"], text=lambda u: u["text"], same=unchanged)
        t_embed = time.perf_counter()
        records = self._records(diff, graph)
        seconds_embedding = time.perf_counter() - t_embed
        info = {f"{_KEY}.identity": self.identity, f"{_KEY}.clusters": self.config.identity,
                f"{_KEY}.graph": graph_version,
                f"{_KEY}.complete": "1" if hier.stats.complete else "0"}
        # The graph and the chunks were read at run.base, so document writes since need not
        # refuse the commit; the communities reflect no more than that graph does.
        version = store.write_derived(UNIT, records, diff.retire, base_version=run.base,
                                      info=info, reads=KINDS,
                                      reflects_at_most=int(graph_version))
        if version is None:
            return None
        self._tracked = Tracked(state, clustering.edges, hier, graph_version, str(version))
        counts = {**clustering.counts, "communities": len(hier.communities),
                  "entities": len(graph.entities), "reports_written": remade,
                  "fallbacks": int(getattr(self.reporter, "fallbacks", 0))}
        return DerivedReport(
            UNIT, clustering.mode, added=len(records), retired=len(diff.retire),
            kept=total - len(diff.retire), levels=hier.top_level,
            seconds=run.seconds(), seconds_clustering=clustering.seconds,
            seconds_summarising=seconds_summarising, seconds_embedding=seconds_embedding,
            version=version, reason=clustering.reason, counts=counts)

    def _records(self, diff: Diff[dict[str, Any]], graph: GraphData) -> list[UnitRecord]:
        """The rows of the units to write: a reused row's vector, else a new one."""
        vectors = self.store.vectors([row["rowid"] for row in diff.reuse.values()])
        fresh = self._vectors([u for u in diff.add if u["uid"] not in diff.reuse], graph)
        records = []
        for u in diff.add:
            row = diff.reuse.get(u["uid"])
            vector = vectors.get(row["rowid"]) if row is not None else None
            records.append(self.record(uid=u["uid"], unit=UNIT, level=u["level"],
                                       text=u["text"],
                                       vector=fresh[u["uid"]] if vector is None else vector,
                                       meta=u["meta"], covers=u["covers"]))
        return records

    def _old_graph(self, store: Docstore, built_on: str | None, tracked: Tracked | None
                   ) -> tuple[GraphData, Edges] | None:
        """The graph the stored communities were built on, with its edges: this process's
        last run, else the retained snapshot of the graph version they record."""
        if built_on is None:
            return None
        if tracked is not None:
            return tracked.graph.data, tracked.edges.as_dict()
        version = int(built_on)
        if not store.readable_since(version):
            return None
        graph = load_graph(store, version)
        return None if graph is None else (graph, entity_edges(graph, self.config))

    def _vectors(self, todo: list[dict[str, Any]], graph: GraphData) -> dict[str, np.ndarray]:
        """Vectors of new unit texts, by ``community_vectors`` (see EngineConfig)."""
        if not todo:
            return {}
        if self.settings.vectors == "sources":
            rows_of = {u["uid"]: sorted({int(k[1:]) for m in u["central"]
                                         for k in graph.entities[m].mentions})
                       for u in todo}
            chunk_vectors = self.store.vectors(sorted({r for rs in rows_of.values() for r in rs}))
            out = {}
            for u in todo:
                present = [chunk_vectors[r] for r in rows_of[u["uid"]] if r in chunk_vectors]
                if present:
                    v = np.sum(present, axis=0)
                    out[u["uid"]] = v / max(float(np.linalg.norm(v)), 1e-12)
            missing = [u for u in todo if u["uid"] not in out]
            out.update(self._embed(missing))
            return out
        return self._embed(todo)

    def _embed(self, todo: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        if not todo:
            return {}
        texts = list(dict.fromkeys(u["text"] for u in todo))
        made = np.asarray(self.ctx.embedder.embed_documents(texts), dtype=np.float32)
        by_text = dict(zip(texts, made))
        return {u["uid"]: by_text[u["text"]] for u in todo}


def _stats(hier: CommunityHierarchy, reason: str, counts: dict[str, int]
           ) -> tuple[str, dict[str, int]]:
    """The run's reason and counts with what the clustering itself counted."""
    stats = hier.stats
    if not stats.complete:
        reason = f"{reason}; {stats.reason}" if reason else stats.reason
    return reason, {**counts, "depths": stats.depths, "leiden_calls": stats.leiden_calls,
                    "leiden_nodes": stats.leiden_nodes,
                    "budget_stopped": int(not stats.complete)}
