"""The catalog: which index version a read serves, and what that version holds.

Every read starts here. :meth:`Catalog.snapshot` catches up with other processes' commits,
resolves the version a request reads (the current one, or a pinned ``indexVersion`` still
retained) and returns a :class:`Snapshot` of it: the unit kinds it offers with their levels,
its filterable fields, its scoring indexes (:class:`~.store.memindex.UnitIndex`, cached per
version), its knowledge graph and PageRank view, its communities, and whether a derived kind
lags. A committed version never changes, so what is cached per version stays valid. A
commit made in this process is followed (:meth:`Catalog.follow`): before the write returns,
the committer prepares the new version's hot scoring indexes and graph view from the last
ones, so the reads after it find them ready. A version another process committed is handed
once to ``on_foreign_version``: the engine's derived updates check there whether a kind now
lags.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from . import plugins, units
from .analyzer import analyze
from .build_failures import BuildFailures
from .config import EngineConfig
from .errors import BackendUnavailable
from .options import TREE_SEARCHES
from .snapshot import Kinds, Snapshot
from .store.docstore import Docstore
from .store.filters import check_filter_size, compile_filter
from .store.kind_counts import KindCounts
from .store.memindex import UnitIndex
from .store.reads import UnitArrays
from .store.unit_merge import merged_arrays

if TYPE_CHECKING:
    from .plugins import CommunityStore, GraphData, GraphState, GraphView

log = logging.getLogger(__name__)

# Scoring indexes kept in memory: the current version of a few unit kinds, plus pinned ones.
INDEX_CACHE = 6
# A pool's index is merged from the previous version's while fewer than this share of its
# rows changed (a merge moves every row once; past that, reading the rows whole is as cheap).
MERGE_SHARE = 0.25
# Pools a commit prepares (:meth:`Catalog.follow`): the ones read most recently, at most this many.
HOT_POOLS = 4
# Graphs (and their PageRank views, and communities) kept in memory: the current version plus
# a pinned one.
GRAPH_CACHE = 2
# An index version token as this engine hands it out: "v" and the version, no leading zero.
_VERSION_TOKEN = re.compile(r"v(0|[1-9][0-9]{0,17})")


# The configuration switches of the knowledge graph's kinds (units.UnitKind.enabled_by).
_GRAPH_SWITCHES = ("build_graph", "graph_communities")


class Catalog:
    """The served versions of one engine's docstore and what each holds (module doc).

    ``scores_in_memory``: whether the recall backend scores in this process (indexes then
    keep BM25 postings and, up to ``dense_exact_max``, vectors). ``composers``: the
    engine's composers of the composed kinds, by name (a composed kind is offered while its
    composer is set and the version holds a graph). ``failures``: the derived builders'.
    ``on_foreign_version``: called once with each newer version a read meets that
    :meth:`follow` did not announce (a commit of another process; None: nobody asks).
    """

    def __init__(self, store: Docstore, config: EngineConfig, *, scores_in_memory: bool,
                 composers: Mapping[str, Callable[..., Any]],
                 failures: BuildFailures) -> None:
        self.store = store
        self.config = config
        self.failures = failures
        self._in_memory = scores_in_memory
        self._composers = composers
        self._index_lock = threading.Lock()
        self._indexes: dict[tuple[tuple[tuple[str, int], ...], int], UnitIndex] = {}
        # The newest index of each pool, kept past ``invalidate``: the next version's index
        # is merged from it.
        self._bases: dict[tuple[tuple[str, int], ...], UnitIndex] = {}
        # The pools read most recently, last at the end: what a commit prepares.
        self._hot: OrderedDict[tuple[tuple[str, int], ...], None] = OrderedDict()
        self._hot_lock = threading.Lock()  # never held while an index builds
        self._offered: tuple[tuple[int, tuple[str, ...]], dict[str, tuple[int, ...]]] | None = None
        self.kinds = KindCounts(store)
        self._graph_lock = threading.Lock()
        self._follow_lock = threading.Lock()
        # A write's graph is patched from the last one cached (False: read whole each
        # version, the behaviour before; bench/graph_write.py measures both).
        self.follow_writes = True
        self._per_version: dict[str, OrderedDict[int, Any]] = {
            "graph": OrderedDict(), "view": OrderedDict(), "communities": OrderedDict()}
        # One load per name at a time: a read that comes while a commit prepares the same
        # version waits for it instead of doing the work twice.
        self._load_locks = {name: threading.Lock() for name in self._per_version}
        # The newest version met or followed: a read meeting a newer one tells the hook.
        self._seen = store.index_version()
        self.on_foreign_version: Callable[[int], None] | None = None

    # --- versions ---------------------------------------------------------------------

    def current_version(self) -> int:
        """The last committed version, after catching up with other processes' commits."""
        current = self.store.index_version()
        # After reading the version, so the vocabulary covers every term it uses.
        if self.store.refresh():
            self.invalidate()
        if current > self._seen:  # no query: compared with the version just read
            self._met(current)
        return current

    def _met(self, version: int) -> None:
        """A read met ``version``, newer than any seen: tell the hook (two threads meeting it
        at once may both tell it; the hook is idempotent)."""
        self._seen = max(self._seen, version)
        hook = self.on_foreign_version
        if hook is not None:
            try:
                hook(version)
            except Exception as exc:  # noqa: BLE001 - the read goes on; the next version retries
                log.warning("could not check the derived units after v%d: %s", version, exc)

    def served_version(self, pinned: str | None) -> int:
        """The version a read serves: the current one, or a pinned one still retained.

        A pinned token that cannot be served is BackendUnavailable (-32010, §7.7.1),
        whatever its form: the token is opaque to the client. It is not retryable: a
        collected version never returns, and one this engine never handed out (a bad
        form, or beyond the last commit) is not a snapshot of it.
        """
        current = self.current_version()
        if pinned is None:
            return current
        match = _VERSION_TOKEN.fullmatch(pinned)
        wanted = int(match[1]) if match else None
        oldest = self.store.oldest_retained(current)
        if wanted is not None and oldest <= wanted <= current:
            return wanted
        why = ("is no longer retained" if wanted is not None and wanted < oldest
               else "is not a version this engine has served")
        shown = pinned if len(pinned) <= 40 else pinned[:40] + "…"
        raise BackendUnavailable(f"indexVersion {shown!r} {why} (this engine keeps "
                                 f"v{oldest}..v{current})", field="indexVersion",
                                 retryable=False)

    def snapshot(self, pinned: str | None = None) -> Snapshot:
        """The snapshot a read serves (:meth:`served_version`)."""
        return Snapshot(self.served_version(pinned), self)

    def at(self, version: int) -> Snapshot:
        """The snapshot of a version already resolved."""
        return Snapshot(version, self)

    # --- unit indexes -----------------------------------------------------------------

    def invalidate(self) -> None:
        """Drop the cached scoring indexes (they only bound memory)."""
        with self._index_lock:
            self._indexes.clear()

    def follow(self, version: int) -> None:
        """Prepare ``version``, just committed by this process, from the versions held.

        The scoring indexes of the :data:`HOT_POOLS` pools read most recently are merged
        from their last index (or taken as they are when none of their rows changed), and
        the graph, its PageRank view and the communities are patched or loaded when an
        older version of them is held. Indexes of older versions are dropped (a pinned read
        rebuilds its own). The committer calls this before its write returns, so the reads
        after a write find the version ready; a read that comes meanwhile waits for the
        same work instead of repeating it. With ``follow_writes`` off it only drops.
        """
        self._seen = max(self._seen, version)  # this process's commit: not a foreign one
        with self._index_lock:
            for key in [key for key in self._indexes if key[1] < version]:
                del self._indexes[key]
        with self._hot_lock:
            pools = list(self._hot)
        if not self.follow_writes:
            return
        try:
            for kinds in pools:
                self._index_at(list(kinds), version)
            for name, load in (("view", self.graph_view), ("communities", self.communities)):
                with self._graph_lock:
                    held = any(v < version for v in self._per_version[name])
                if held:
                    load(version)
        except Exception as exc:  # noqa: BLE001 - the write committed; a read redoes this work
            log.warning("could not prepare index version v%d after a commit (the next read "
                        "builds it): %s", version, exc)

    def index(self, kinds: Kinds, version: int | None = None) -> UnitIndex:
        """The scoring index of a pool of (unit, level) kinds as of ``version`` (default:
        the current one), cached."""
        v = self.current_version() if version is None else version
        pool = tuple(kinds)
        with self._hot_lock:
            self._hot[pool] = None
            self._hot.move_to_end(pool)
            while len(self._hot) > HOT_POOLS:
                self._hot.popitem(last=False)
        return self._index_at(kinds, v)

    def _index_at(self, kinds: Kinds, v: int) -> UnitIndex:
        key = (tuple(kinds), v)
        index = self._indexes.get(key)
        if index is not None:
            return index
        with self._index_lock:
            index = self._indexes.get(key)
            if index is None:
                index = self._build_index(kinds, v)
                while len(self._indexes) >= INDEX_CACHE:
                    self._indexes.pop(next(iter(self._indexes)))
                self._indexes[key] = index
        return index

    def _build_index(self, kinds: Kinds, version: int) -> UnitIndex:
        count = sum(n for u, lv, n in self.unit_kinds(version) if (u, lv) in kinds)
        with_vectors = self._in_memory and count <= self.config.dense_exact_max
        base = self._bases.get(tuple(kinds))
        followed = self._followed_arrays(base, kinds, version, with_vectors)
        if base is not None and followed is base:  # none of the pool's rows changed
            index = base.at_version(version)
        else:
            arrays = (followed if isinstance(followed, UnitArrays) else
                      self.store.unit_arrays(kinds, version, with_vectors=with_vectors))
            index = UnitIndex("+".join(f"{u}/{lv}" for u, lv in kinds), arrays,
                              self.store.vocab_size(), k1=self.config.bm25_k1,
                              b=self.config.bm25_b, postings=self._in_memory,
                              kinds=tuple(kinds), version=version)
        if base is None or base.version < version:
            self._bases[tuple(kinds)] = index
        return index

    def _followed_arrays(self, base: UnitIndex | None, kinds: Kinds, version: int,
                         with_vectors: bool) -> UnitArrays | UnitIndex | None:
        """The pool's arrays at ``version`` merged from ``base``, the newest older index of
        the same pool, and the rows changed since (``store/unit_merge.py``); ``base`` itself
        when no row changed; None without such an index or when more than
        :data:`MERGE_SHARE` of its rows changed."""
        if (not self.follow_writes or base is None or base.version >= version
                or (base.vectors is not None) != with_vectors):
            return None
        delta = self.store.unit_delta(kinds, base.version, version, with_vectors)
        if delta is None:
            return None
        new, gone = delta
        if not len(new.rowids) and not len(gone):
            return base
        if len(new.rowids) + len(gone) > MERGE_SHARE * max(1, base.size):
            return None
        return merged_arrays(base.arrays, gone, new)

    def query_terms(self, query: str) -> list[int]:
        """Vocabulary ids of the analysed query terms (unknown terms dropped)."""
        return sorted({t for t in (self.store.term_id(w) for w in analyze(query))
                       if t is not None})

    # --- what a version offers --------------------------------------------------------

    def unit_kinds(self, version: int) -> list[tuple[str, int, int]]:
        """(unit, level, count) of every kind of unit visible at ``version`` (followed from
        the last version counted, see ``store/kind_counts.py``)."""
        return self.kinds.at(version, self.follow_writes)

    def filter_fields(self) -> dict[str, str]:
        """Every filterable field and its type: built-ins, declared and inferred fields."""
        return self.store.filter_fields.filterable()

    def offered(self, version: int | None = None) -> dict[str, tuple[int, ...]]:
        """Stored kinds offered at ``version`` (default: the current one) → their levels: the
        per-document kinds always (flat), each built derived kind with the levels it holds,
        and while a graph is there the composed kinds whose composer is set.

        A derived kind is built once its builder has recorded it (``reflects``), even when
        that build made no unit of it: a graph whose corpus names no relation holds no
        triplet. Such a kind is offered with no level: asking for it finds nothing (said in
        ``usage.notes``), which is not an unsupported unit. (A graph of no entity is no
        graph: none of its kinds is offered.)"""
        v = self.current_version() if version is None else version
        composers = tuple(sorted(self._composers))
        cached = self._offered
        if cached is not None and cached[0] == (v, composers):
            return cached[1]
        offered: dict[str, tuple[int, ...]] = {
            units.get(n).stored: (0,) for n in units.per_document_kinds()}
        levels: dict[str, set[int]] = {}
        for unit, level, _n in self.unit_kinds(v):
            if unit in units.known() and units.get(unit).derived:
                levels.setdefault(unit, set()).add(level)
        offered.update({u: tuple(sorted(lv)) for u, lv in levels.items()})
        for name in units.derived_kinds():
            if name not in offered and 0 < self.reflects(name) <= v:
                offered[name] = ()  # built by this version, and none made
        if offered.get("node") == ():
            # A graph build that found no entity made no graph: like its ops, memory and
            # communities, no kind of the graph is offered until there is one.
            offered = {n: lv for n, lv in offered.items()
                       if units.get(n).enabled_by not in _GRAPH_SWITCHES}
        if "node" in offered:
            offered.update({n: (0,) for n in units.composed_kinds() if n in composers})
        self._offered = ((v, composers), offered)
        return offered

    def derived_status(self) -> dict[str, dict[str, Any]]:
        """Per built derived kind: its levels, unit counts, the index version it reflects and
        whether writes since then are still to be folded in (``current``)."""
        out: dict[str, dict[str, Any]] = {}
        counts = self.unit_kinds(self.current_version())
        data_version = self._data_version()
        for name in units.known():
            levels = {lv: n for u, lv, n in counts if u == name and units.get(name).derived}
            if not levels:
                continue
            reflects = self.reflects(name)
            entry: dict[str, Any] = {"levels": sorted(levels), "counts": {
                str(lv): n for lv, n in sorted(levels.items())},
                "reflects": f"v{reflects}", "current": reflects >= data_version}
            if name == "tree-node":
                entry["treeSearch"] = list(TREE_SEARCHES)
            error = self.failures.of_kind(name)
            if error:
                entry["error"] = error
            llm = self.store.info(f"llm.{name}")
            if llm:  # what the last build's LLM calls cost
                entry["llm"] = json.loads(llm)
            out[name] = entry
        if "node" in out:  # composed from the graph: they reflect what the nodes reflect
            for name in units.composed_kinds():
                if name in self._composers:
                    out[name] = {"composed": True, "reflects": out["node"]["reflects"],
                                 "current": out["node"]["current"]}
        return out

    def reflects(self, kind: str) -> int:
        """The index version the units of a derived ``kind`` reflect (0: never built)."""
        return int(self.store.info(f"derived.{kind}.version") or 0)

    def _data_version(self) -> int:
        """The version of the last document write."""
        return int(self.store.info("data_version") or 0)

    def lagging(self, kinds: tuple[str, ...]) -> bool:
        """Whether any of the derived ``kinds`` does not reflect the last document write."""
        data_version = self._data_version()
        return any(self.reflects(kind) < data_version for kind in kinds)

    def derived_lag(self, kinds: Kinds, served: int) -> str | None:
        """A usage note when a derived kind in ``kinds`` does not yet reflect the served
        version, or when it was built and holds no unit there (:meth:`offered`)."""
        derived = sorted({u for u, _lv in kinds if units.get(u).derived})
        data_version = self._data_version() if derived else 0
        for unit in derived:
            reflects = self.reflects(unit)
            if served >= data_version > reflects:
                error = self.failures.of_kind(unit)
                return (f"{unit} units reflect index version v{reflects}; documents written "
                        f"since (up to v{data_version}) are not folded in yet, and units "
                        "covering changed chunks are left out until the update"
                        + (f" (its last update failed: {error}; the next write "
                           "retries)" if error else ""))
        offered = self.offered(served) if derived else {}
        for unit in derived:
            if offered.get(unit) == ():
                return (f"this engine builds {unit} units, and index version v{served} holds "
                        f"none: its corpus gave its builder nothing to make one of")
        return None

    # --- filters ------------------------------------------------------------------------

    def passing_rowids(self, filter_: Mapping[str, Any], kinds: Kinds, version: int,
                       fields: Mapping[str, str] | None = None) -> np.ndarray:
        """Rowids of the units of ``kinds`` visible at ``version`` that pass ``filter_`` (a
        derived unit only when every chunk it covers passes); the filter is bounded and
        validated first (InvalidParams / OptionUnsupported naming it)."""
        check_filter_size(filter_, max_depth=self.config.max_filter_depth,
                          max_nodes=self.config.max_filter_nodes)
        compiled = compile_filter(dict(filter_), dict(fields or self.filter_fields()))
        return self.store.filtered_rowids(kinds, version, compiled.sql, compiled.params)

    def chunk_scope(self, filter_: Mapping[str, Any] | None, version: int,
                    fields: Mapping[str, str] | None = None) -> frozenset[str] | None:
        """The chunk keys (``r<rowid>``) visible at ``version`` that pass ``filter_`` (None
        without a filter: every chunk). Every graph surface — graph recall, the composed
        units, each ``graph`` op and ``memory/recall`` — derives only from these chunks.
        A malformed or oversized filter is InvalidParams (``data.field``), as for retrieve."""
        if filter_ is None:
            return None
        return frozenset(f"r{int(r)}" for r in self.passing_rowids(
            filter_, [("chunk", 0)], version, fields))

    # --- the knowledge graph, per version ---------------------------------------------

    def _cached(self, name: str, version: int | None, load: Callable[[int], Any]) -> Any:
        """``load(v)`` for ``version`` (default: the current one), kept for the last few
        versions (a committed version never changes)."""
        v = self.current_version() if version is None else version
        cache = self._per_version[name]
        with self._graph_lock:
            if v in cache:
                cache.move_to_end(v)
                return cache[v]
        with self._load_locks[name]:
            with self._graph_lock:
                if v in cache:
                    return cache[v]
            value = load(v)
            with self._graph_lock:
                cache[v] = value
                while len(cache) > GRAPH_CACHE:
                    cache.popitem(last=False)
        return value

    def graph_data(self, version: int | None = None) -> GraphData | None:
        """The knowledge graph as stored and visible at ``version`` (default: the current
        one), or None when that version holds no graph."""
        return self.graph_state(version).graph

    def graph_state(self, version: int | None = None) -> GraphState:
        """The graph at ``version`` (default: the current one) with what patching it to a
        later version needs: patched from the newest older version cached (see
        :mod:`graph.follow`) unless ``follow_writes`` is off, else read whole."""
        return self._cached("graph", version, self._follow_graph)  # type: ignore[no-any-return]

    def _follow_graph(self, v: int) -> GraphState:
        with self._follow_lock:
            with self._graph_lock:
                cached = self._per_version["graph"]
                if v in cached:
                    return cached[v]  # type: ignore[no-any-return]
                older = [s for u, s in cached.items() if u < v and s.rows is not None]
            base = max(older, key=lambda s: s.version) if older and self.follow_writes else None
            return plugins.graph().graph_state(base, self.store, v)

    def graph_view(self, version: int | None = None) -> GraphView | None:
        """The PageRank view of the graph at ``version`` (default: the current one), or None
        without a graph."""
        return self._cached("view", version, self._make_graph_view)  # type: ignore[no-any-return]

    def _make_graph_view(self, v: int) -> GraphView | None:
        state = self.graph_state(v)
        if state.graph is None:
            return None

        def word_df(name: str) -> int:
            # Passages holding the name's rarest word (an upper bound of the name's own count).
            chunks = self.index([("chunk", 0)], v)
            return min((chunks.doc_freq(self.store.term_id(w)) for w in analyze(name)),
                       default=0)

        older = None
        if state.change is not None and self.follow_writes:
            with self._graph_lock:
                older = self._per_version["view"].get(state.base)
        return plugins.graph().graph_view(state, older, word_df)  # type: ignore[no-any-return]

    def communities(self, version: int | None = None) -> CommunityStore | None:
        """The Leiden communities stored and visible at ``version`` (default: the current
        one), or None when there are none."""
        return self._cached("communities", version,  # type: ignore[no-any-return]
                            lambda v: plugins.graph().communities(self.store, v))
