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
from typing import TYPE_CHECKING, Any

import numpy as np

from ..derived import DerivedReport, run_attempts
from ..models.analyzer import term_counts
from ..models.tokenizer import count_tokens
from ..store.writes import UnitRecord
from .summarize import (ExtractiveSummarizer, LLMSummarizer, Passage, Sentence, Span, Summary,
                        split_sentences)
from .tree import Leaf, Node, TreeConfig, build_tree, update_tree

if TYPE_CHECKING:
    from ..engine import Engine

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


class TreeIndex:
    """Builds and updates the engine's RAPTOR tree (``tree-node`` units, levels >= 1)."""

    unit = UNIT

    def __init__(self, engine: Engine, *, llm: Any = None) -> None:
        self.engine = engine
        self.summarizer: ExtractiveSummarizer | LLMSummarizer = (
            LLMSummarizer(llm, count_tokens) if llm is not None
            else ExtractiveSummarizer(count_tokens))
        c = engine.config
        self.config = TreeConfig(seed=c.tree_seed, summary_tokens=c.tree_summary_tokens,
                                 cluster_tokens=c.tree_cluster_tokens, top_size=c.tree_top_size,
                                 max_levels=c.tree_max_levels)

    @property
    def identity(self) -> str:
        """What the tree's text depends on: the summariser and the build settings."""
        c = self.config
        return (f"{self.summarizer.identity};seed={c.seed};summary={c.summary_tokens};"
                f"cluster={c.cluster_tokens};top={c.top_size};levels={c.max_levels}")

    def update(self, *, full: bool = False) -> DerivedReport:
        """One run: full or incremental, committed as one new index version (or nothing)."""
        return run_attempts(UNIT, lambda: self._attempt(full), "the tree",
                            "rcp-agentic tree rebuild")

    def _attempt(self, full: bool) -> DerivedReport | None:
        store = self.engine.store
        started = time.perf_counter()
        store.refresh()
        base = store.index_version()
        leaf_rows = store.live_leaves("chunk")
        # The tree knows a leaf by its row (``r<rowid>``), not its public id: a replaced
        # document keeps its chunk ids but gets new rows, and its old rows must leave.
        uid_of = {_key(r): uid for r, uid, _d, _s, _t, _x in leaf_rows}
        texts = {_key(r): (text, doc_id, int(start or 0))
                 for r, _u, doc_id, start, _t, text in leaf_rows}
        tokens = {_key(r): int(t) for r, _u, _d, _s, t, _x in leaf_rows}
        stored = store.live_derived(UNIT)
        covered = {_key(leaf) for n in stored if n["level"] == 1 for leaf in n["covers"]}
        added_keys = sorted(set(uid_of) - covered, key=_rowid)
        removed_keys = covered - set(uid_of)
        churn = int(store.info(f"{_KEY}.churn") or 0) + len(added_keys) + len(removed_keys)
        built_on = int(store.info(f"{_KEY}.built_leaves") or 0)
        reason = ("requested" if full else "no tree yet" if not stored else
                  "the summariser or tree settings changed"
                  if store.info(f"{_KEY}.identity") != self.identity else
                  f"drift {churn}/{built_on} leaves passed {self.engine.config.tree_rebuild_drift:g}"
                  if churn > self.engine.config.tree_rebuild_drift * max(built_on, 1) else "")
        rebuild = bool(reason)
        if not rebuild and not added_keys and not removed_keys:
            if store.info(f"{_KEY}.version") != str(base):
                store.set_info_if(f"{_KEY}.version", str(base), base_version=base)
            return DerivedReport(UNIT, "none", kept=len(stored),
                                 levels=max((n["level"] for n in stored), default=0),
                                 seconds=time.perf_counter() - started, reason="up to date")
        timer = _Timer(self.engine)
        passages = _LeafPassages(texts)
        vectors = store.vectors([_rowid(k) for k in uid_of])
        leaf_vectors = {k: vectors[_rowid(k)] for k in uid_of if _rowid(k) in vectors}

        def leaf(key: str) -> Leaf:
            return Leaf(key, leaf_vectors[key], passages[key], tokens[key])

        summarizer = timer.summarizer(self.summarizer)
        if rebuild:
            nodes = build_tree([leaf(key) for key in sorted(uid_of, key=_rowid)],
                               embed=timer.embed, summarizer=summarizer, config=self.config,
                               count_tokens=count_tokens)
            add, retire = _changes(stored, nodes, {n["uid"] for n in stored} - {n.uid for n in nodes})
            info = {f"{_KEY}.built_leaves": str(len(uid_of)), f"{_KEY}.churn": "0",
                    f"{_KEY}.identity": self.identity}
        else:
            node_vectors = store.vectors([n["rowid"] for n in stored])
            current = [self._node(n, node_vectors.get(n["rowid"])) for n in stored]
            delta = update_tree(current, leaf_vectors, [leaf(k) for k in added_keys], removed_keys,
                                embed=timer.embed, summarizer=summarizer, config=self.config,
                                count_tokens=count_tokens, passages=passages)
            add, retire = _changes(stored, delta.added, set(delta.retired))
            info = {f"{_KEY}.churn": str(churn)}
        records = [self._record(n, uid_of) for n in add]
        info[f"{_KEY}.version"] = str(base + 1)
        version = store.write_derived(UNIT, records, retire, base_version=base, info=info)
        if version is None:
            return None
        levels = {n["level"] for n in stored if n["uid"] not in set(retire)} | {
            n.level for n in add}
        return DerivedReport(
            UNIT, "full" if rebuild else "incremental", added=len(records), retired=len(retire),
            kept=len(stored) - len(retire), levels=max(levels, default=0),
            seconds=time.perf_counter() - started, seconds_clustering=max(
                0.0, time.perf_counter() - started - timer.embedding - timer.summarising),
            seconds_summarising=timer.summarising, seconds_embedding=timer.embedding,
            version=version, reason=reason)

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
        counts, n = term_counts(text)
        screening = self.engine.screen.screen(text)
        return UnitRecord(
            uid=node.uid, unit=UNIT, level=node.level, idx=0, start=None, end=None,
            page_start=None, page_end=None, tokens=count_tokens(text), text=text,
            vector=np.asarray(node.vector, dtype=np.float32), terms=dict(counts), nterms=n,
            injection_suspected=screening.suspected, injection_score=screening.score,
            meta={"children": [uid_of.get(c, c) for c in node.children], "spans": spans},
            covers=sorted(_rowid(k) for k in node.leaves if k in uid_of))


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


class _Timer:
    """Times the embedding and summarising a build spends (clustering is the rest)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.embedding = 0.0
        self.summarising = 0.0

    def embed(self, texts: list[str]) -> np.ndarray:
        started = time.perf_counter()
        try:
            if not texts:
                return np.zeros((0, self.engine.dimension), dtype=np.float32)
            return self.engine.embedder.embed_documents(texts)
        finally:
            self.embedding += time.perf_counter() - started

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
