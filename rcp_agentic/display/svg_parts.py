"""The parts every step of a graph drawing shares: the nodes and edges it takes
(:class:`SvgNode`, :class:`SvgEdge`), its limits, colours and fonts, its text helpers
(cleaning, width estimates, number formatting) and the inputs put in canonical order
(nodes merged by id, edges merged by pair), so the drawing depends on content only."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from .html import legal, shorten

MAX_NODE_LABELS = 24
"""Beyond this many nodes only the seeds and the highest scores are labelled (all keep
their tooltip)."""
MAX_EDGE_LABELS = 30
"""Beyond this many labelled edges no relation is written mid-edge (all keep their
tooltip)."""
LABEL_MAX_CHARS = 28
"""A node's label is cut to this many characters (an ellipsis included) in the drawing."""
EDGE_LABEL_MAX_CHARS = 24
"""A relation's label is cut to this many characters (an ellipsis included) mid-edge."""
TITLE_MAX_CHARS = 1000
"""Tooltips (SVG ``<title>``) keep the full text up to this many characters."""


# Colours readable on white (the drawing has its own white background, so it reads the
# same under a dark notebook theme).
TEXT_COLOUR = "#222222"
MUTED_COLOUR = "#555555"
EDGE_COLOUR = "#9a9a9a"
EDGE_DIRECTED_COLOUR = "#666666"
STYLE = {
    # role: (fill, stroke, stroke-width)
    "seed": ("#e15759", "#8e1b1d", 3.0),
    "entity": ("#4e79a7", "#ffffff", 1.5),
    "chunk": ("#eef4ea", "#59a14f", 1.5),
}
LEGEND = (("seed", "seed"), ("entity", "entity"), ("chunk", "passage"))
_ROLE_RANK = {"seed": 0, "entity": 1, "chunk": 2}
FONT = "system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"

_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class SvgNode:
    """A node to draw.

    ``role`` picks the style: ``"seed"`` (the entities a query was anchored on: red, a
    thick ring, a bold label), ``"entity"``, or ``"chunk"`` (a passage, drawn as a small
    rounded box); any other role is drawn as an entity. ``score`` (finite, >= 0) sizes the
    node and decides which nodes are kept beyond ``max_nodes``. ``title`` is the hover
    tooltip; by default the full label (and the score).
    """

    id: str
    label: str
    role: str = "entity"
    score: float | None = None
    title: str | None = None


@dataclass(frozen=True)
class SvgEdge:
    """An edge to draw between the nodes with ids ``src`` and ``dst``.

    ``weight`` (finite, >= 0) sets the line's width, relative to the largest weight drawn.
    ``label`` (the relation) is drawn mid-edge, truncated. ``directed`` adds an arrowhead
    at ``dst`` (a path's hops).
    """

    src: str
    dst: str
    weight: float | None = None
    label: str | None = None
    directed: bool = False


def clean_text(text: object) -> str:
    """``text`` without characters XML cannot carry (or controls), on one line, stripped."""
    return _SPACES.sub(" ", legal(text)).strip()


def text_width(text: str, size: float) -> float:
    """A rough rendered width: East Asian wide characters count double."""
    units = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
    return units * size * 0.56


def fit_text(text: str, room: float, size: float) -> str:
    """``text`` cut (with an ellipsis) to about ``room`` pixels, keeping at least 6 characters."""
    limit = len(text)
    while limit > 6 and text_width(shorten(text, limit), size) > room:
        limit -= 1
    return shorten(text, limit)


def num(x: float) -> str:
    """``x`` rounded to one decimal, compactly ("12", "3.5"), never "-0"."""
    r = round(x, 1)
    if r == 0:
        return "0"
    s = f"{r:.1f}"
    return s.removesuffix(".0")


def valid_number(x: float | None) -> float | None:
    """A finite, non-negative number, else None (NaN, inf, negatives and non-numbers)."""
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v + 0.0 if math.isfinite(v) and v >= 0 else None  # + 0.0: no -0.0


def style_role(role: str) -> str:
    return role if role in STYLE else "entity"


def _node_key(node: SvgNode) -> tuple[object, ...]:
    score = valid_number(node.score)
    return (
        _ROLE_RANK.get(node.role, 3), str(node.role),
        score is None, -(score or 0.0),
        str(node.label), node.title is None, str(node.title or ""),
    )


def merge_nodes(nodes: Sequence[SvgNode]) -> tuple[dict[str, SvgNode], list[str]]:
    """Nodes by id (of several with one id, the first in a canonical order), ids in order."""
    merged: dict[str, SvgNode] = {}
    order: list[str] = []
    for node in nodes:
        nid = str(node.id)
        have = merged.get(nid)
        if have is None:
            order.append(nid)
            merged[nid] = node
        elif _node_key(node) < _node_key(have):
            merged[nid] = node
    return merged, order


def kept_nodes(merged: dict[str, SvgNode], max_nodes: int) -> set[str]:
    if len(merged) <= max_nodes:
        return set(merged)

    return set(sorted(merged, key=lambda nid: keep_rank(merged, nid))[:max_nodes])


def keep_rank(merged: dict[str, SvgNode], nid: str) -> tuple[int, float, str]:
    """Seeds first, then the highest scores (no score last), ties by id."""
    node = merged[nid]
    score = valid_number(node.score)
    return (0 if node.role == "seed" else 1, -(score if score is not None else -1.0), nid)


@dataclass(frozen=True)
class EdgeLine:
    a: str
    b: str
    directed: bool
    weight: float | None
    label: str
    bend: float = 0.0


@dataclass(frozen=True)
class Drawn:
    """The nodes drawn, in drawing order, with where each stands and its radius."""

    ids: list[str]
    merged: dict[str, SvgNode]
    pos: dict[str, tuple[float, float]]
    radius: dict[str, float]

    def at(self, nid: str) -> tuple[SvgNode, float, float, float]:
        """Node ``nid``, its centre and its radius."""
        x, y = self.pos[nid]
        return self.merged[nid], x, y, self.radius[nid]


def merge_edges(edges: Sequence[SvgEdge], kept: set[str]) -> list[EdgeLine]:
    """Edges between drawn nodes, merged by (ends, direction), in canonical order."""
    acc: dict[tuple[str, str, bool], tuple[float | None, set[str]]] = {}
    for edge in edges:
        a, b, directed = str(edge.src), str(edge.dst), bool(edge.directed)
        if a not in kept or b not in kept:
            continue
        if not directed and b < a:
            a, b = b, a
        weight, labels = acc.get((a, b, directed), (None, set()))
        w = valid_number(edge.weight)
        if w is not None:
            weight = w if weight is None else max(weight, w)
        if edge.label is not None and clean_text(edge.label):
            labels = labels | {clean_text(edge.label)}
        acc[(a, b, directed)] = (weight, labels)
    keys = sorted(acc)
    # Several lines between one pair of nodes (both directions, or directed and not) bend
    # apart, each by its rank among them.
    pairs: dict[tuple[str, str], list[tuple[str, str, bool]]] = {}
    for key in keys:
        pairs.setdefault((min(key[0], key[1]), max(key[0], key[1])), []).append(key)
    lines = []
    for key in keys:
        a, b, directed = key
        weight, labels = acc[key]
        group = pairs[(min(a, b), max(a, b))]
        bend = 0.0
        if len(group) > 1 and a != b:
            bend = (group.index(key) - (len(group) - 1) / 2) * 22.0
            if a > b:  # the bend is measured across the pair's canonical direction
                bend = -bend
        lines.append(EdgeLine(a, b, directed, weight, " / ".join(sorted(labels)), bend))
    return lines
