"""A compact outline of an engine's RAPTOR tree, for people: levels, coverage, sample summaries.

:func:`outline` reads the live ``tree-node`` units and the live leaf chunks of an
engine and returns a :class:`TreeOutline`: per level the node count, the mean
summary length, how many of the live leaves the level covers, and the summaries
of its widest nodes; :meth:`TreeOutline.render` prints it as text
(``rcp-agentic tree show``, the RAPTOR notebook).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from .. import display_hooks
from ..errors import CapabilityMissing
from ..store.docstore import Docstore

UNIT = "tree-node"


@dataclass(frozen=True)
class NodeSample:
    """One node shown in the outline: its id, what it covers and its summary."""

    uid: str
    leaves: int      # leaf chunks it covers
    documents: int   # distinct documents of those leaves
    tokens: int      # tokens of its summary (cl100k)
    text: str


@dataclass(frozen=True)
class LevelOutline:
    """One summary level (>= 1) of the tree."""

    level: int
    nodes: int
    mean_tokens: float
    leaves_covered: int   # distinct live leaves under the level's nodes
    samples: tuple[NodeSample, ...]


@dataclass(frozen=True)
class TreeOutline:
    """The tree at a glance: its leaves, its levels and the index version it reflects."""

    leaves: int          # live leaf chunks
    documents: int       # live documents holding them
    leaf_tokens: float   # mean tokens of a leaf chunk
    levels: tuple[LevelOutline, ...]
    reflects: str | None  # the index version the tree reflects (None: not built, or not kept up)
    current: bool         # False while writes since ``reflects`` are not folded in yet
    # The live tree-node rows (uid, level, text, tokens, covers, umeta): the HTML display
    # nests each node's children under it.
    nodes: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    def coverage(self, level: int) -> float:
        """Share of the live leaves covered by ``level`` (1.0 = every leaf)."""
        row = next((lv for lv in self.levels if lv.level == level), None)
        if row is None or not self.leaves:
            return 0.0
        return row.leaves_covered / self.leaves

    def _repr_html_(self) -> str:
        """In Jupyter: the levels' sizes and the tree as a collapsible outline."""
        return display_hooks.render("tree_html", self, self.nodes)

    def render(self, *, width: int = 100) -> str:
        """The outline as text, one block per level, widest nodes first."""
        head = (f"RAPTOR tree over {self.leaves} chunks from {self.documents} documents "
                f"(mean {self.leaf_tokens:.0f} tokens)")
        if not self.levels:
            return head + "\nno tree built yet: it is built at the next write, or run " \
                          "`rcp-agentic tree rebuild`"
        if self.reflects is None:
            head += "; tree building is off for this engine (the stored tree is not updated)"
        else:
            state = "current" if self.current else "lagging: later writes not folded in yet"
            head += f"; reflects index version {self.reflects} ({state})"
        lines = [head]
        for lv in self.levels:
            lines.append(f"level {lv.level}: {lv.nodes} nodes, mean {lv.mean_tokens:.0f} tokens, "
                         f"cover {lv.leaves_covered}/{self.leaves} chunks "
                         f"({self.coverage(lv.level):.0%})")
            for s in lv.samples:
                lines.append(f"  {s.uid} ({s.leaves} chunks, {s.documents} docs, "
                             f"{s.tokens} tokens)")
                lines.append("    " + textwrap.shorten(" ".join(s.text.split()),
                                                       max(20, width - 4), placeholder=" …"))
        return "\n".join(lines)


class TreeHolder(Protocol):
    """What :func:`outline` reads of an engine (an :class:`~rcp_agentic.Engine` is one)."""

    @property
    def path(self) -> Path: ...

    @property
    def store(self) -> Docstore: ...

    @property
    def builders(self) -> Mapping[str, Any]: ...

    def derived_status(self) -> dict[str, dict[str, Any]]: ...


def outline(engine: TreeHolder, *, samples: int = 2) -> TreeOutline:
    """The outline of ``engine``'s tree, with up to ``samples`` widest nodes per level.

    Raises :class:`~rcp_agentic.errors.CapabilityMissing` when the engine neither
    builds a tree (``build_tree``) nor holds one.
    """
    store = engine.store
    store.refresh()
    nodes = store.live_derived(UNIT)
    if not nodes and UNIT not in engine.builders:
        raise CapabilityMissing(
            f"the engine at {engine.path} builds no RAPTOR tree: index with "
            f"`rcp-agentic index PATH --tree --engine {engine.path}` (or build_tree=True)",
            field="build_tree")
    leaf_rows = store.live_leaves("chunk")
    leaf_doc = {int(rowid): doc_id for rowid, _u, doc_id, _s, _t, _x in leaf_rows}
    leaf_tokens = [int(t) for _r, _u, _d, _s, t, _x in leaf_rows]
    by_level: dict[int, list[dict[str, Any]]] = {}
    for node in nodes:
        by_level.setdefault(int(node["level"]), []).append(node)
    levels = []
    for level, rows in sorted(by_level.items()):
        covered = {leaf for n in rows for leaf in n["covers"] if leaf in leaf_doc}
        widest = sorted(rows, key=lambda n: (-len(n["covers"]), n["uid"]))[:max(samples, 0)]
        levels.append(LevelOutline(
            level=level, nodes=len(rows),
            mean_tokens=sum(int(n["tokens"]) for n in rows) / len(rows),
            leaves_covered=len(covered),
            samples=tuple(NodeSample(
                uid=n["uid"], leaves=len(n["covers"]),
                documents=len({leaf_doc[c] for c in n["covers"] if c in leaf_doc}),
                tokens=int(n["tokens"]), text=n["text"]) for n in widest)))
    status = engine.derived_status().get(UNIT, {})
    return TreeOutline(
        leaves=len(leaf_doc), documents=len(set(leaf_doc.values())),
        leaf_tokens=sum(leaf_tokens) / len(leaf_tokens) if leaf_tokens else 0.0,
        levels=tuple(levels), reflects=status.get("reflects") if levels else None,
        current=bool(status.get("current", True)), nodes=tuple(nodes))
