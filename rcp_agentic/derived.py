"""The contract between the engine and a builder of derived units (the RAPTOR tree, the graph,
its communities), and the base every builder shares.

A builder reads the committed chunks, decides what changed since its units were last
written, and writes its units (each with the leaf chunks it covers) in one commit through
``Docstore.write_derived``, recording ``derived.<kind>.version`` for each kind it writes.
Builders run off the write path (:mod:`.catchup`) under the engine's build lock, so writes
commit while one computes: a builder that made every read at the version it started from
commits unless its own kinds (or the derived kinds it read) were written since, and the
documents written meanwhile are folded in by its next run; any other build is recomputed
when the version moved. :class:`DerivedBuilder` holds that skeleton — refresh, read the base
version, build, commit on it, retry — and the steps every builder shares (unit records with
terms and injection screening, diffing against the live units, timed embedding); a builder
supplies :meth:`DerivedBuilder.build`. It receives a :class:`BuildContext` and its own
configuration section, never the engine. What a lagging kind serves meanwhile:
``docs/units.md``, "Derived units are built off the write path".
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from .analyzer import term_counts
from .models.embedder import TimedEmbedder
from .models.llm import ChatLLM
from .models.llm_usage import BUILD_STAGES, LLMUsage, StageUsage
from .models.tokenizer import count_tokens
from .read_first import checkpoint
from .store.docstore import Docstore
from .store.info import capped_reflects
from .store.writes import UnitRecord
from .trust import InjectionScreen, screen_derived

# A builder's run that lost the race with another write (base version moved) is recomputed
# this often before it gives up until the next write.
ATTEMPTS = 3

U = TypeVar("U")


@dataclass
class DerivedReport:
    """What one builder run did."""

    unit: str
    mode: str                  # "full", "incremental", "none" (already up to date) or
    #                            "scheduled" (left to the background worker; nothing run yet)
    added: int = 0             # units written
    retired: int = 0           # units that left
    kept: int = 0              # live units left as they were
    levels: int = 0            # levels above the leaves after the run
    seconds: float = 0.0
    seconds_clustering: float = 0.0
    seconds_summarising: float = 0.0
    seconds_embedding: float = 0.0
    seconds_extracting: float = 0.0  # the graph: entity extraction of chunks not seen before
    version: int | None = None  # the index version committed (None: nothing written)
    reason: str = ""
    # Other writes kept committing through every attempt; the engine then runs the builder
    # once more under its write lock, and that report says so too.
    contended: bool = False
    # What the build holds, by name (the graph: nodes, triplets, synonyms, chunks read,
    # chunks extracted this run, unit texts embedded this run).
    counts: dict[str, int] = field(default_factory=dict)
    # What its LLM calls cost (StageUsage.wire(); empty: no LLM asked or answered).
    llm: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """One line saying what the run did and what its LLM calls cost (``rcp-agentic
        index`` and ``tree|graph rebuild`` print it): the graph's builder (``node``) and the
        community builder say it in their own terms, any other (the tree) in the tree's."""
        line = {"node": self._graph_line, "community": self._community_line}.get(
            self.unit, self._tree_line)
        return line() + self._llm_clause()

    def _done(self) -> str:
        return "full build" if self.mode == "full" else f"{self.mode} update"

    def _why(self) -> str:
        """The run's reason as a closing clause (``; <reason>``), empty without one."""
        return f"; {self.reason}" if self.reason else ""

    def _tree_line(self) -> str:
        if self.mode == "none":
            return f"Tree ({self.unit}): up to date, {self.kept} nodes on {self.levels} " \
                   f"level(s){f' ({self.reason})' if self.reason != 'up to date' else ''}"
        return (f"Tree ({self.unit}): {self._done()}, {self.added} nodes added, "
                f"{self.retired} retired, {self.kept} kept; {self.levels} level(s) in "
                f"{self.seconds:.1f}s ({self.seconds_summarising:.1f}s summarising, "
                f"{self.seconds_embedding:.1f}s embedding{self._why()})")

    def _graph_line(self) -> str:
        if self.mode == "none":
            return f"Graph (node, triplet): {self.reason or 'up to date'}, {self.kept} units"
        c = self.counts
        return (f"Graph (node, triplet): {self._done()}, {c.get('nodes', 0)} nodes, "
                f"{c.get('triplets', 0)} triplets, {c.get('synonyms', 0)} synonym edges over "
                f"{c.get('chunks', 0)} chunks; {self.added} units written, {self.retired} "
                f"retired, {self.kept} kept in {self.seconds:.1f}s ({c.get('extracted', 0)} "
                f"chunks extracted in {self.seconds_extracting:.1f}s, {c.get('embedded', 0)} "
                f"texts embedded in {self.seconds_embedding:.1f}s{self._why()})")

    def _community_line(self) -> str:
        if self.mode == "none":
            return (f"Communities: {self.reason or 'up to date'}, {self.kept} communities"
                    + (f" on {self.levels + 1} level(s)" if self.kept else ""))
        c = self.counts
        return (f"Communities: {self._done()}, {c.get('communities', 0)} communities on "
                f"{self.levels + 1} level(s) over {c.get('entities', 0)} entities; "
                f"{self.added} written, {self.retired} retired, {self.kept} kept, "
                f"{c.get('reports_written', 0)} reports written in {self.seconds:.1f}s "
                f"({self.seconds_clustering:.1f}s clustering, {self.seconds_summarising:.1f}s "
                f"reports, {self.seconds_embedding:.1f}s embedding{self._why()})")

    def _llm_clause(self) -> str:
        """What the run's LLM calls cost, as a clause (empty without any)."""
        u = self.llm
        if not u:
            return ""
        fallbacks = sum(u.get("fallbacks", {}).values())
        extra = [f"{u['cached']} cached"] if u.get("cached") else []
        if u.get("retries"):
            extra.append(f"{u['retries']} retried")
        if fallbacks:
            extra.append(f"{fallbacks} replies unused")
        return (f"; LLM: {u['calls']} calls" + (f" ({', '.join(extra)})" if extra else "")
                + f", {u['promptTokens']:,} prompt + {u['completionTokens']:,} completion tokens")


@dataclass
class BuildContext:
    """What a builder needs of its engine: the store it reads and writes, the embedder, the
    injection screen every unit text passes, the LLM (the engine's
    :class:`~rcp_agentic.models.llm.ChatLLM`; None: offline) and the LLM tokens one build
    may spend (None: no limit)."""

    store: Docstore
    embedder: TimedEmbedder
    screen: InjectionScreen
    llm: Any = None
    llm_token_budget: int | None = None

    def dimension(self) -> int:
        """The embedding dimension (the index's when it has one; else the model's)."""
        stored = self.store.info("embedding.dimension")
        return int(stored) if stored else self.embedder.dimension


@dataclass(frozen=True)
class Run:
    """One attempt of a builder: the index version it read and when it started."""

    base: int
    started: float

    def seconds(self) -> float:
        return time.perf_counter() - self.started


class EmbedTimer:
    """The context's embedder, timed: the seconds a build spends embedding and the texts."""

    def __init__(self, ctx: BuildContext) -> None:
        self._ctx = ctx
        self.embedding = 0.0
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        started = time.perf_counter()
        self.texts += len(texts)
        try:
            if not texts:
                return np.zeros((0, self._ctx.dimension()), dtype=np.float32)
            return np.asarray(self._ctx.embedder.embed_documents(texts), dtype=np.float32)
        finally:
            self.embedding += time.perf_counter() - started


@dataclass
class Diff(Generic[U]):
    """New units against the live rows of their kinds: what to write (``add``), the live rows
    whose vector a rewrite can reuse (same text: ``reuse``, by uid), and the live uids that
    leave (gone, or rewritten under the same id: ``retire``)."""

    add: list[U]
    reuse: dict[str, dict[str, Any]]
    retire: list[str]


def diff_units(stored: list[dict[str, Any]], new: Iterable[U], *, uid: Callable[[U], str],
               text: Callable[[U], str],
               same: Callable[[dict[str, Any], U], bool]) -> Diff[U]:
    """What ``new`` changes among the live ``stored`` rows; ``same(row, unit)`` says whether a
    live row already stores the unit as it is (then it is left alone)."""
    live = {row["uid"]: row for row in stored}
    add: list[U] = []
    reuse: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for u in new:
        checkpoint()
        key = uid(u)
        seen.add(key)
        row = live.get(key)
        if row is not None and same(row, u):
            continue
        add.append(u)
        if row is not None and row["text"] == text(u):
            reuse[key] = row
    rewritten = {uid(u) for u in add if uid(u) in live}
    return Diff(add, reuse, sorted((set(live) - seen) | rewritten))


S = TypeVar("S")


class DerivedBuilder(ABC, Generic[S]):
    """Builds and updates the stored units of one derived kind (``unit``; a builder of several
    kinds written in one commit names them all in ``kinds``) from a :class:`BuildContext` and
    its configuration section ``settings`` (module doc). ``what`` names the units in a
    report; ``rebuild_command`` is the command that forces a full build."""

    unit: str
    kinds: tuple[str, ...]
    what: str
    rebuild_command: str

    def __init__(self, ctx: BuildContext, settings: S) -> None:
        self.ctx = ctx
        self.settings = settings
        # Whether each leaf chunk read so far was suspected (rowids are never reused and a
        # row never changes, so this holds until the next attempt clears it).
        self._suspects: dict[int, bool] = {}

    @property
    def store(self) -> Docstore:
        return self.ctx.store

    def update(self, *, full: bool = False) -> DerivedReport:
        """Fold every committed change of the chunks into the derived units (one commit):
        :meth:`build` until it commits or finds nothing to do, at most :data:`ATTEMPTS`
        times (None: another write committed while it computed)."""
        blocked = self.blocked()
        if blocked is not None:
            return blocked
        chat = self.ctx.llm
        if not isinstance(chat, ChatLLM):
            return self._attempts(full)
        before = chat.usage.snapshot()
        spent = StageUsage()
        try:
            with chat.budget(self.ctx.llm_token_budget):
                report = self._attempts(full)
        finally:
            # The last build's cost, shown by derived_status (zero when it asked nothing).
            spent = LLMUsage.since(before, chat.usage.snapshot(), BUILD_STAGES)
            self.store.set_info(f"llm.{self.unit}", json.dumps(spent.wire()))
        report.llm = spent.wire()
        return report

    def _attempts(self, full: bool) -> DerivedReport:
        for _ in range(ATTEMPTS):
            store = self.store
            self._suspects.clear()
            started = time.perf_counter()
            store.refresh()
            report = self.build(Run(store.index_version(), started), full)
            if report is not None:
                return report
        return DerivedReport(self.unit, "none", contended=True, reason=(
            f"other writes kept committing during {ATTEMPTS} attempts; {self.what} still lags "
            f"(it is retried after the next write, or run `{self.rebuild_command}`)"))

    def blocked(self) -> DerivedReport | None:
        """A report when this builder cannot run at all now (None: it can)."""
        return None

    @abstractmethod
    def build(self, run: Run, full: bool) -> DerivedReport | None:
        """One attempt on the version ``run.base``: its report, or None when another write
        committed meanwhile (``Docstore.write_derived`` refused the commit)."""

    def mark_current(self, run: Run, kind: str, at_most: int | None = None) -> None:
        """Record that ``kind`` reflects ``run.base`` (nothing needed rebuilding), or
        ``at_most`` (what the units it is made from reflect) while that lags the documents."""
        data_version = int(self.store.info("data_version") or 0)
        reflects = str(capped_reflects(run.base, at_most, data_version))
        if self.store.info(f"derived.{kind}.version") != reflects:
            self.store.set_info_if(f"derived.{kind}.version", reflects, base_version=run.base)

    def record(self, *, uid: str, unit: str, level: int, text: str, vector: np.ndarray,
               meta: Mapping[str, Any], covers: list[int], sanitized: bool = False
               ) -> UnitRecord:
        """The unit row of a derived unit: its text with its tokens, BM25 terms and injection
        screening, its vector, ``meta`` and the leaf chunks it ``covers``. It is suspected
        when any chunk it covers is, when its text screens positive (injection or active
        markup, :func:`~.trust.derived.screen_derived`), or when markup was taken
        out of it (``sanitized``); its score is its own text's. (Its trust level is the
        lowest of the covered documents', read with the unit.)"""
        counts, n = term_counts(text)
        screening = screen_derived(self.ctx.screen, text)
        suspected = screening.suspected or sanitized or self.covers_suspected(covers)
        return UnitRecord(
            uid=uid, unit=unit, level=level, idx=0, start=None, end=None, page_start=None,
            page_end=None, tokens=count_tokens(text), text=text,
            vector=np.asarray(vector, dtype=np.float32), terms=dict(counts), nterms=n,
            injection_suspected=suspected, injection_score=screening.score,
            meta=dict(meta), covers=list(covers))

    def covers_suspected(self, covers: Iterable[int]) -> bool:
        """Whether any of these leaf chunks (rowids) was suspected of injection (one light
        read of the rows not seen yet in this attempt)."""
        rows = list(covers)
        todo = [r for r in rows if r not in self._suspects]
        if todo:
            found = self.store.reader.unit_trust(todo)
            self._suspects.update({r: found[r][1] if r in found else False for r in todo})
        return any(self._suspects[r] for r in rows)


def builder_kinds(builder: Any) -> tuple[str, ...]:
    """Every unit kind a builder writes."""
    return tuple(getattr(builder, "kinds", (builder.unit,)))
