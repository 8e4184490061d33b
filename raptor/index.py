"""The engine's RAPTOR builder: reads the committed chunks, keeps the tree-node units up to date.

:class:`TreeIndex` is the engine's :class:`~rcp_agentic.derived.DerivedBuilder` for
``tree-node`` units. Each run compares the live chunks with the leaves the stored
tree covers: with no tree, a changed summariser, ``full=True`` or a drift past
``tree_rebuild_drift`` it builds the whole tree (:func:`.tree.build_tree`),
otherwise it folds the added and removed chunks in (:func:`.tree.update_tree`).
The result is one commit through ``Docstore.write_derived``: nodes whose leaves
did not change keep their rows and ids, new nodes are written with the leaf chunks
they cover, vanished ones retire. A summary is screened for injection like any
unit and carries the lowest trust of the documents it covers (the store computes
that from its leaves).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..config import TreeSection
from ..derived import BuildContext, DerivedBuilder, DerivedReport, EmbedTimer, Run
from ..models.tokenizer import count_tokens
from ..store.writes import UnitRecord
from ..text import Sentence, Span, split_sentences
from .summarize import ExtractiveSummarizer, LLMSummarizer, Passage, Summary
from .tree import Leaf, Node, TreeConfig, build_tree, update_tree

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
    """The live chunks as the tree knows them: by row (``r<rowid>``), not public id — a
    replaced document keeps its chunk ids but gets new rows, and its old rows must leave."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.uid_of = {_key(r): uid for r, uid, _d, _s, _t, _x in rows}
        self.passages = _LeafPassages({_key(r): (text, doc_id, int(start or 0))
                                       for r, _u, doc_id, start, _t, text in rows})
        self.tokens = {_key(r): int(t) for r, _u, _d, _s, t, _x in rows}

    def leaf(self, key: str, vectors: Mapping[str, np.ndarray]) -> Leaf:
        return Leaf(key, vectors[key], self.passages[key], self.tokens[key])


class TreeIndex(DerivedBuilder[TreeSection]):
    """Builds and updates the engine's RAPTOR tree (``tree-node`` units, levels >= 1)."""

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

    @property
    def identity(self) -> str:
        """What the tree's text depends on: the summariser and the build settings."""
        c = self.config
        return (f"{self.summarizer.identity};seed={c.seed};summary={c.summary_tokens};"
                f"cluster={c.cluster_tokens};top={c.top_size};levels={c.max_levels}")

    def build(self, run: Run, full: bool) -> DerivedReport | None:
        """One attempt: full or incremental (see the module doc)."""
        store = self.store
        leaves = _Leaves(store.live_leaves("chunk"))
        stored = store.live_derived(UNIT)
        covered = {_key(leaf) for n in stored if n["level"] == 1 for leaf in n["covers"]}
        added_keys = sorted(set(leaves.uid_of) - covered, key=_rowid)
        removed_keys = covered - set(leaves.uid_of)
        churn = int(store.info(f"{_KEY}.churn") or 0) + len(added_keys) + len(removed_keys)
        reason = self._rebuild_reason(full, stored, churn)
        if not reason and not added_keys and not removed_keys:
            self.mark_current(run, UNIT)
            return DerivedReport(UNIT, "none", kept=len(stored),
                                 levels=max((n["level"] for n in stored), default=0),
                                 seconds=run.seconds(), reason="up to date")
        timer = _Timer(self.ctx)
        vectors = store.vectors([_rowid(k) for k in leaves.uid_of])
        leaf_vectors = {k: vectors[_rowid(k)] for k in leaves.uid_of if _rowid(k) in vectors}
        summarizer = timer.summarizer(self.summarizer)
        if reason:
            nodes = build_tree([leaves.leaf(key, leaf_vectors) for key in sorted(leaves.uid_of,
                                                                                 key=_rowid)],
                               embed=timer.embed, summarizer=summarizer, config=self.config,
                               count_tokens=count_tokens)
            add, retire = _changes(stored, nodes,
                                   {n["uid"] for n in stored} - {n.uid for n in nodes})
            info = {f"{_KEY}.built_leaves": str(len(leaves.uid_of)), f"{_KEY}.churn": "0",
                    f"{_KEY}.identity": self.identity}
        else:
            node_vectors = store.vectors([n["rowid"] for n in stored])
            current = [self._node(n, node_vectors.get(n["rowid"])) for n in stored]
            delta = update_tree(current, leaf_vectors,
                                [leaves.leaf(k, leaf_vectors) for k in added_keys],
                                removed_keys, embed=timer.embed, summarizer=summarizer,
                                config=self.config, count_tokens=count_tokens,
                                passages=leaves.passages)
            add, retire = _changes(stored, delta.added, set(delta.retired))
            info = {f"{_KEY}.churn": str(churn)}
        records = [self._record(n, leaves.uid_of) for n in add]
        info[f"{_KEY}.version"] = str(run.base + 1)
        version = store.write_derived(UNIT, records, retire, base_version=run.base, info=info)
        if version is None:
            return None
        levels = {n["level"] for n in stored if n["uid"] not in set(retire)} | {
            n.level for n in add}
        return DerivedReport(
            UNIT, "full" if reason else "incremental", added=len(records), retired=len(retire),
            kept=len(stored) - len(retire), levels=max(levels, default=0),
            seconds=run.seconds(), seconds_clustering=max(
                0.0, run.seconds() - timer.embedding - timer.summarising),
            seconds_summarising=timer.summarising, seconds_embedding=timer.embedding,
            version=version, reason=reason)

    def _rebuild_reason(self, full: bool, stored: list[dict[str, Any]], churn: int) -> str:
        """Why the whole tree is built again ("" when an incremental update does)."""
        store = self.store
        built_on = int(store.info(f"{_KEY}.built_leaves") or 0)
        drift = self.settings.rebuild_drift
        return ("requested" if full else "no tree yet" if not stored else
                "the summariser or tree settings changed"
                if store.info(f"{_KEY}.identity") != self.identity else
                f"drift {churn}/{built_on} leaves passed {drift:g}"
                if churn > drift * max(built_on, 1) else "")

    @staticmethod
    def _node(row: dict[str, Any], vector: np.ndarray | None) -> Node:
        """A stored tree-node row as a :class:`Node` keyed by leaf rows: a level-1 node's
        children are the chunk rows it covers, a higher node's the node ids in its umeta."""
        text = row["text"]
        sentences = tuple(
            Sentence(text[s["at"][0]:s["at"][1]],
                     Span(s["doc_id"], s["start"], s["end"]) if "doc_id" in s else None)
            for s in row["umeta"].get("spans", []))
        leaves = tuple(_key(r) for r in row["covers"])
        children = leaves if row["level"] == 1 else tuple(row["umeta"].get("children", []))
        return Node(row["uid"], row["level"], children, frozenset(leaves),
                    Summary(text, sentences or (Sentence(text, None),)), int(row["tokens"]),
                    vector)

    def _record(self, node: Node, uid_of: Mapping[str, str]) -> UnitRecord:
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
        return self.record(
            uid=node.uid, unit=UNIT, level=node.level, text=text, vector=node.vector,
            meta={"children": [uid_of.get(c, c) for c in node.children], "spans": spans},
            covers=sorted(_rowid(k) for k in node.leaves if k in uid_of),
            sanitized=node.summary.sanitized)


def _changes(stored: list[dict[str, Any]], written: list[Node], gone: set[str]
             ) -> tuple[list[Node], list[str]]:
    """The nodes to write and the live uids to retire: a node whose id is live but whose
    text or children changed is rewritten under the same id (retired, then added)."""
    live = {n["uid"]: n for n in stored}
    add = []
    for node in written:
        row = live.get(node.uid)
        if row is None or row["text"] != node.summary.text or (
                row["level"] > 1 and tuple(row["umeta"].get("children", [])) != node.children):
            add.append(node)
    rewritten = {n.uid for n in add if n.uid in live}
    return add, sorted((gone & set(live)) | rewritten)


def _key(rowid: int) -> str:
    """How the tree names a leaf chunk: by its row."""
    return f"r{rowid}"


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
