"""The engine's RAPTOR builder: reads the committed chunks, keeps the tree-node units up to date.

:class:`TreeIndex` is the engine's :class:`~rcp_agentic.derived.DerivedBuilder` for
``tree-node`` units. Each run compares the live chunks with the leaves the stored
tree covers: with no tree, a changed summariser, ``full=True`` or a drift past
``tree_rebuild_drift`` it builds the whole tree (:func:`.tree.build_tree`),
otherwise it folds the added and removed chunks in (:func:`.tree.update_tree`).
It keeps the tree it committed, so a run reads only the chunks that entered and left
since and the rows of the leaves it summarises; a fresh process reads everything.
The result is one commit through ``Docstore.write_derived``: nodes whose leaves
did not change keep their rows and ids, new nodes are written with the leaf chunks
they cover, vanished ones retire. A summary is screened for injection like any
unit and carries the lowest trust of the documents it covers (the store computes
that from its leaves).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import TreeSection
from ..derived import BuildContext, DerivedBuilder, DerivedReport, EmbedTimer, Run
from ..models.tokenizer import count_tokens
from ..store.docstore import Docstore
from ..store.writes import UnitRecord
from ..text import Sentence, Span, split_sentences
from .summarize import ExtractiveSummarizer, LLMSummarizer, Passage, Summary
from .tree import Leaf, Node, TreeConfig, TreeShape, build_tree, update_tree

UNIT = "tree-node"
_KEY = f"derived.{UNIT}"


class _LeafPassages(Mapping[str, Passage]):
    """Passages of the live chunks, split into sentences only when a summary needs them."""

    def __init__(self, leaves: dict[str, tuple[str, str, int]]) -> None:
        self._leaves = leaves  # uid -> (text, doc_id, start)
        self._made: dict[str, Passage] = {}

    def __getitem__(self, uid: str) -> Passage:
        passage = self._made.get(uid)
        if passage is None:
            text, doc_id, start = self._leaves[uid]
            passage = self._made[uid] = Passage(uid, text, split_sentences(text, doc_id, start))
        return passage

    def __iter__(self) -> Iterator[str]:
        return iter(self._leaves)

    def __len__(self) -> int:
        return len(self._leaves)


class _Leaves:
    """Every live chunk as the tree knows it: by row (``r<rowid>``), not public id — a
    replaced document keeps its chunk ids but gets new rows, and its old rows must leave.
    A whole read: every chunk's row and vector."""

    def __init__(self, store: Docstore) -> None:
        rows = store.live_leaves("chunk")
        self.uid_of = {_key(r): uid for r, uid, _d, _s, _t, _x in rows}
        self.passages: Mapping[str, Passage] = _LeafPassages(
            {_key(r): (text, doc_id, int(start or 0)) for r, _u, doc_id, start, _t, text in rows})
        self.tokens = {_key(r): int(t) for r, _u, _d, _s, t, _x in rows}
        vectors = store.vectors([r for r, *_ in rows])
        self.vectors: Mapping[str, np.ndarray] = {
            k: vectors[_rowid(k)] for k in self.uid_of if _rowid(k) in vectors}

    def __contains__(self, key: object) -> bool:
        return key in self.uid_of

    def live_among(self, keys: frozenset[str]) -> set[str]:
        """Those of ``keys`` that are live leaves."""
        return set(self.uid_of.keys() & keys)

    def in_order(self) -> list[str]:
        """Every live leaf, in row order."""
        return sorted(self.uid_of, key=_rowid)

    def leaf(self, key: str) -> Leaf:
        return Leaf(key, self.vectors[key], self.passages[key], self.tokens[key])


class _Lazy(Mapping[str, Any]):
    """A mapping over the live leaves whose values are read on demand (``load`` reads a
    missing key with the keys read together with it)."""

    def __init__(self, values: dict[str, Any], load: Callable[[str], None],
                 live: _ChangedLeaves) -> None:
        self._values = values
        self._load = load
        self._live = live

    def __getitem__(self, key: str) -> Any:
        if key not in self._values:
            if key not in self._live:
                raise KeyError(key)
            self._load(key)
        return self._values[key]

    def __contains__(self, key: object) -> bool:
        return key in self._live

    def __iter__(self) -> Iterator[str]:
        return iter(self._live.in_order())

    def __len__(self) -> int:
        return len(self._live.in_order())


class _ChangedLeaves:
    """The live chunks of a run that follows the tree this process committed: the chunks
    that entered and left since, the rest known by key only. A chunk's row and vector are
    read on demand, with those of the other live leaves of its level-1 node(s) (a summary
    reads them together); the entered ones at once."""

    def __init__(self, store: Docstore, followed: _Followed, base: int) -> None:
        self._store = store
        self._shape = followed.shape
        entered, left = store.leaf_delta(followed.version, base)
        self.entered = {_key(r) for r, _d in entered}
        self.left = {_key(r) for r in left}
        self.uncovered = {k for k in followed.uncovered if k not in self.left}
        self._followed_uncovered = followed.uncovered
        self._uids: dict[str, str] = {}
        self._passages: dict[str, Passage] = {}
        self._vectors: dict[str, np.ndarray] = {}
        self.uid_of: Mapping[str, str] = _Lazy(self._uids, self._read_rows, self)
        self.passages: Mapping[str, Passage] = _Lazy(self._passages, self._read_rows, self)
        self.vectors: Mapping[str, np.ndarray] = _Lazy(self._vectors, self._read_vectors, self)
        self.tokens: dict[str, int] = {}
        new = sorted(self.uncovered | self.entered, key=_rowid)
        rows = store.hydrate([_rowid(k) for k in new])
        for key in new:
            row = rows[_rowid(key)]
            self._put(key, row["uid"], row["doc_id"], row["start"], row["text"])
            self.tokens[key] = int(row["tokens"])
        self._put_vectors(new)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is a live leaf."""
        return key in self.entered or (
            (key in self._shape.parents or key in self._followed_uncovered)
            and key not in self.left)

    def live_among(self, keys: frozenset[str]) -> set[str]:
        """Those of ``keys`` that are live leaves (set operations: a node may cover every
        leaf)."""
        found = ((self._shape.parents.keys() & keys) | (self._followed_uncovered & keys))
        return (found - self.left) | (self.entered & keys)

    def in_order(self) -> list[str]:
        """Every live leaf, in row order (reads no row)."""
        known = {k for k in self._shape.parents if k.startswith("r")} | self._followed_uncovered
        return sorted((known - self.left) | self.entered, key=_rowid)

    def leaf(self, key: str) -> Leaf:
        return Leaf(key, self.vectors[key], self.passages[key], self.tokens[key])

    def _put(self, key: str, uid: str, doc_id: str, start: int | None, text: str) -> None:
        self._uids[key] = uid
        self._passages[key] = Passage(key, text, split_sentences(text, doc_id, int(start or 0)))

    def _together(self, key: str) -> list[str]:
        """``key`` and the other live leaves of its level-1 node(s)."""
        shape = self._shape
        out = dict.fromkeys([key])
        for parent in sorted(shape.parents.get(key, ())):
            node = shape.nodes.get(parent)
            if node is not None and node.level == 1:
                out.update(dict.fromkeys(c for c in node.children if c in self))
        return list(out)

    def _read_rows(self, key: str) -> None:
        todo = [k for k in self._together(key) if k not in self._passages]
        for r, uid, doc_id, start, text, _title in self._store.leaves_of(map(_rowid, todo)):
            self._put(_key(r), uid, doc_id, start, text)

    def _read_vectors(self, key: str) -> None:
        self._put_vectors([k for k in self._together(key) if k not in self._vectors])

    def _put_vectors(self, keys: list[str]) -> None:
        read = self._store.vectors([_rowid(k) for k in keys])
        self._vectors.update({k: read[_rowid(k)] for k in keys if _rowid(k) in read})


@dataclass
class _Followed:
    """The tree as this process last committed (or found) it, which the next run starts
    from instead of reading every chunk and node: its nodes as the store holds them, the
    index version whose chunks it reflects, ``derived.tree-node.written`` as it was left
    (another writer of the tree changes it), the live chunks no node covers (only while
    there is no tree) and the live chunk rows suspected of injection."""

    shape: TreeShape
    version: int
    marker: str | None
    identity: str
    uncovered: set[str]
    suspected: set[int]


class TreeIndex(DerivedBuilder[TreeSection]):
    """Builds and updates the engine's RAPTOR tree (``tree-node`` units, levels >= 1).

    It keeps the tree it committed (:class:`_Followed`), so a run reads only the chunks
    that entered and left since, and the rows and vectors of the leaves the update
    touches; a fresh process, a changed setting, a version no longer retained, another
    writer of the tree or a full build read everything (``_Leaves``)."""

    unit = UNIT
    kinds = (UNIT,)
    what = "the tree"
    rebuild_command = "rcp-agentic tree rebuild"

    def __init__(self, ctx: BuildContext, settings: TreeSection) -> None:
        super().__init__(ctx, settings)
        self.summarizer: ExtractiveSummarizer | LLMSummarizer = (
            LLMSummarizer(ctx.llm, count_tokens) if ctx.llm is not None
            else ExtractiveSummarizer(count_tokens))
        self.config = TreeConfig(seed=settings.seed, summary_tokens=settings.summary_tokens,
                                 cluster_tokens=settings.cluster_tokens,
                                 top_size=settings.top_size, max_levels=settings.max_levels)
        self._followed: _Followed | None = None
        self._suspected: set[int] | None = None   # the current run's suspected live leaves

    @property
    def identity(self) -> str:
        """What the tree's text depends on: the summariser and the build settings."""
        c = self.config
        return (f"{self.summarizer.identity};seed={c.seed};summary={c.summary_tokens};"
                f"cluster={c.cluster_tokens};top={c.top_size};levels={c.max_levels}")

    def build(self, run: Run, full: bool) -> DerivedReport | None:
        """One attempt: full or incremental (see the module doc)."""
        try:
            return self._build(run, full)
        finally:
            self._suspected = None

    def _build(self, run: Run, full: bool) -> DerivedReport | None:
        store = self.store
        followed = self._followed if self._follows() else None
        shape, leaves, added_keys, removed_keys = (
            self._changed(followed, run) if followed is not None and not full
            else self._whole())
        churn = int(store.info(f"{_KEY}.churn") or 0) + len(added_keys) + len(removed_keys)
        reason = self._rebuild_reason(full, bool(shape.nodes), churn)
        if reason and isinstance(leaves, _ChangedLeaves):  # a full build reads every leaf
            shape, leaves, added_keys, removed_keys = self._whole()
        if not reason and not added_keys and not removed_keys:
            self.mark_current(run, UNIT)
            self._follow(shape, leaves, run.base, store.info(f"{_KEY}.written"))
            return DerivedReport(UNIT, "none", kept=len(shape.nodes), levels=shape.top,
                                 seconds=run.seconds(), reason="up to date")
        timer = _Timer(self.ctx)
        summarizer = timer.summarizer(self.summarizer)
        if reason:
            nodes = build_tree([leaves.leaf(key) for key in leaves.in_order()],
                               embed=timer.embed, summarizer=summarizer, config=self.config,
                               count_tokens=count_tokens)
            add, retire = _changes(shape.nodes, nodes,
                                   set(shape.nodes) - {n.uid for n in nodes})
            info = {f"{_KEY}.built_leaves": str(len(leaves.in_order())), f"{_KEY}.churn": "0",
                    f"{_KEY}.identity": self.identity}
        else:
            delta = update_tree(shape, leaves.vectors, [leaves.leaf(k) for k in added_keys],
                                removed_keys, embed=timer.embed, summarizer=summarizer,
                                config=self.config, count_tokens=count_tokens,
                                passages=leaves.passages)
            add, retire = _changes(shape.nodes, delta.added, set(delta.retired))
            info = {f"{_KEY}.churn": str(churn)}
        records = [self._record(n, leaves) for n in add]
        # A run that follows the kept tree read every chunk at run.base (rows by rowid), so
        # document writes since need not refuse its commit; a whole read is of the live rows.
        version = store.write_derived(UNIT, records, retire, base_version=run.base, info=info,
                                      reads=() if isinstance(leaves, _ChangedLeaves) else None)
        if version is None:
            return None
        kept = len(shape.nodes) - len(retire)
        # Live leaves the commit took out of a node (judged on the tree before it).
        uncovered = {k for u in retire if u in shape.nodes and shape.nodes[u].level == 1
                     for k in shape.nodes[u].children if k in leaves}
        shape.apply(retire, [self._node(_row(r), r.vector, n.leaves
                                        if len(r.covers) == len(n.leaves) else None)
                             for r, n in zip(records, add)])
        self._follow(shape, leaves, run.base, str(version), uncovered)
        return DerivedReport(
            UNIT, "full" if reason else "incremental", added=len(records), retired=len(retire),
            kept=kept, levels=shape.top, seconds=run.seconds(), seconds_clustering=max(
                0.0, run.seconds() - timer.embedding - timer.summarising),
            seconds_summarising=timer.summarising, seconds_embedding=timer.embedding,
            version=version, reason=reason)

    def _follows(self) -> bool:
        """Whether the tree this process keeps is the stored one and the chunks since its
        version can still be read."""
        followed = self._followed
        return (followed is not None and followed.identity == self.identity
                and self.store.readable_since(followed.version)
                and self.store.info(f"{_KEY}.written") == followed.marker)

    def _whole(self) -> tuple[TreeShape, _Leaves, list[str], set[str]]:
        """Every live chunk and tree node read; the leaves to add and remove."""
        store = self.store
        self._followed = None
        leaves = _Leaves(store)
        stored = store.live_derived(UNIT)
        vectors = store.vectors([n["rowid"] for n in stored])
        shape = TreeShape(self._node(n, vectors.get(n["rowid"])) for n in stored)
        for uid in shape.by_level.get(1, ()):   # while every leaf vector is at hand
            if all(c in leaves.vectors for c in shape.nodes[uid].children):
                shape.centroid(uid, leaves.vectors)
        covered = {_key(leaf) for n in stored if n["level"] == 1 for leaf in n["covers"]}
        found = store.reader.unit_trust(_rowid(k) for k in leaves.uid_of)
        self._suspected = {r for r, (_t, suspected) in found.items() if suspected}
        return (shape, leaves, sorted(set(leaves.uid_of) - covered, key=_rowid),
                covered - set(leaves.uid_of))

    def _changed(self, followed: _Followed, run: Run
                 ) -> tuple[TreeShape, _ChangedLeaves | _Leaves, list[str], set[str]]:
        """The kept tree and the chunks that entered and left since its version; the leaves
        to add and remove (the live chunks no node covers, the covered ones that left).
        Everything is read instead when a write collected the rows of that version
        meanwhile (some that left may be gone)."""
        leaves = _ChangedLeaves(self.store, followed, run.base)
        if not self.store.readable_since(followed.version):
            return self._whole()
        added = sorted(leaves.uncovered | leaves.entered, key=_rowid)
        found = self.store.reader.unit_trust(_rowid(k) for k in leaves.entered)
        self._suspected = ({r for r in followed.suspected if _key(r) not in leaves.left}
                           | {r for r, (_t, suspected) in found.items() if suspected})
        return (followed.shape, leaves, added,
                {k for k in leaves.left if k in followed.shape.parents})

    def _follow(self, shape: TreeShape, leaves: _Leaves | _ChangedLeaves, version: int,
                marker: str | None, uncovered: Iterable[str] = ()) -> None:
        """Keep ``shape`` (the stored tree at ``version``) for the next run; ``uncovered``:
        live leaves the last commit took out of a node."""
        assert self._suspected is not None
        if isinstance(leaves, _Leaves):
            left_out = {k for k in leaves.uid_of if k not in shape.parents}
        else:
            candidates = set(uncovered) | leaves.uncovered | leaves.entered
            left_out = {k for k in candidates if k not in shape.parents}
        self._followed = _Followed(shape, version, marker, self.identity, left_out,
                                   self._suspected)

    def covers_suspected(self, covers: Iterable[int]) -> bool:
        """Whether any of these leaf chunks is suspected: the covers of a node this builder
        writes are live leaves, whose flags the run holds (kept between runs)."""
        if self._suspected is None:
            return super().covers_suspected(covers)
        return not self._suspected.isdisjoint(covers)

    def _rebuild_reason(self, full: bool, has_tree: bool, churn: int) -> str:
        """Why the whole tree is built again ("" when an incremental update does)."""
        store = self.store
        built_on = int(store.info(f"{_KEY}.built_leaves") or 0)
        drift = self.settings.rebuild_drift
        return ("requested" if full else "no tree yet" if not has_tree else
                "the summariser or tree settings changed"
                if store.info(f"{_KEY}.identity") != self.identity else
                f"drift {churn}/{built_on} leaves passed {drift:g}"
                if churn > drift * max(built_on, 1) else "")

    @staticmethod
    def _node(row: dict[str, Any], vector: np.ndarray | None,
              leaves: frozenset[str] | None = None) -> Node:
        """A stored tree-node row as a :class:`Node` keyed by leaf rows: a level-1 node's
        children are the chunk rows it covers, a higher node's the node ids in its umeta
        (``leaves``: the keys of its covers, when known)."""
        text = row["text"]
        sentences = tuple(
            Sentence(text[s["at"][0]:s["at"][1]],
                     Span(s["doc_id"], s["start"], s["end"]) if "doc_id" in s else None)
            for s in row["umeta"].get("spans", []))
        children = (tuple(map(_key, row["covers"])) if row["level"] == 1
                    else tuple(row["umeta"].get("children", [])))
        if leaves is None:
            leaves = frozenset(children if row["level"] == 1 else map(_key, row["covers"]))
        return Node(row["uid"], row["level"], children, leaves,
                    Summary(text, sentences or (Sentence(text, None),)), int(row["tokens"]),
                    vector)

    def _record(self, node: Node, leaves: _Leaves | _ChangedLeaves) -> UnitRecord:
        """The unit row of a new node: its summary, vector, terms, spans, children and covers."""
        assert node.vector is not None, f"node {node.uid} has no vector"
        text = node.summary.text
        spans, at = [], 0
        for sentence in node.summary.sentences:
            start = text.find(sentence.text, at)
            if start < 0:
                continue
            end = start + len(sentence.text)
            entry: dict[str, Any] = {"at": [start, end]}
            if sentence.span is not None:
                entry.update(doc_id=sentence.span.doc_id, start=sentence.span.start,
                             end=sentence.span.end)
            spans.append(entry)
            at = end
        # A level-1 node's children are live leaves (named by chunk id), a higher one's nodes.
        children = ([leaves.uid_of.get(c, c) for c in node.children] if node.level == 1
                    else list(node.children))
        return self.record(
            uid=node.uid, unit=UNIT, level=node.level, text=text, vector=node.vector,
            meta={"children": children, "spans": spans},
            covers=sorted(map(_rowid, leaves.live_among(node.leaves))),
            sanitized=node.summary.sanitized)


def _row(record: UnitRecord) -> dict[str, Any]:
    """A written node's record as the store gives its row back (:meth:`TreeIndex._node`)."""
    return {"uid": record.uid, "level": record.level, "text": record.text,
            "tokens": record.tokens, "umeta": json.loads(json.dumps(record.meta)),
            "covers": list(record.covers)}


def _changes(live: Mapping[str, Node], written: list[Node], gone: set[str]
             ) -> tuple[list[Node], list[str]]:
    """The nodes to write and the live uids to retire: a node whose id is live but whose
    text or children changed is rewritten under the same id (retired, then added)."""
    add = []
    for node in written:
        old = live.get(node.uid)
        if old is None or old.summary.text != node.summary.text or (
                old.level > 1 and old.children != node.children):
            add.append(node)
    rewritten = {n.uid for n in add if n.uid in live}
    return add, sorted((gone & set(live)) | rewritten)


def _key(rowid: int) -> str:
    """How the tree names a leaf chunk: by its row (one string per row however many nodes
    cover it: the kept tree holds every leaf at every level)."""
    return sys.intern(f"r{rowid}")


def _rowid(key: str) -> int:
    return int(key[1:])


class _Timer(EmbedTimer):
    """Times the embedding and summarising a build spends (clustering is the rest)."""

    def __init__(self, ctx: BuildContext) -> None:
        super().__init__(ctx)
        self.summarising = 0.0

    def summarizer(self, inner: Any) -> Any:
        timer = self

        class Timed:
            identity = inner.identity

            def summarize_many(self, jobs: list[tuple[list[Passage], int]]) -> list[Summary]:
                started = time.perf_counter()
                try:
                    return list(inner.summarize_many(jobs))
                finally:
                    timer.summarising += time.perf_counter() - started

        return Timed()
