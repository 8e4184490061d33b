"""Draw a small graph (knowledge-graph entities, passages and relations) as an inline SVG string.

The drawing needs no JavaScript, no CSS from the page and no external reference, so it shows
the same in Jupyter, on GitHub's notebook viewer and in nbconvert's HTML. It is built for the
``_repr_html_`` of graph results: an entity's neighbourhood, a multi-hop path, a subgraph, an
entity-anchored local search.

The output depends on the inputs' content only, never on their order: nodes and edges are
put in canonical order before the layout (networkx's seeded spring layout, or a
left-to-right chain for a path), and coordinates are rounded to one decimal. Every text is
cleaned of characters XML 1.0 forbids and escaped, so hostile labels show as text.
"""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from .html import esc, legal, shorten

__all__ = [
    "EDGE_LABEL_MAX_CHARS", "LABEL_MAX_CHARS", "MAX_EDGE_LABELS", "MAX_NODE_LABELS",
    "SvgEdge", "SvgNode", "graph_svg",
]

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

_LAYOUTS = ("spring", "path")
_SEED = 7

# Colours readable on white (the drawing has its own white background, so it reads the
# same under a dark notebook theme).
_TEXT = "#222222"
_MUTED = "#555555"
_EDGE = "#9a9a9a"
_EDGE_DIRECTED = "#666666"
_STYLE = {
    # role: (fill, stroke, stroke-width)
    "seed": ("#e15759", "#8e1b1d", 3.0),
    "entity": ("#4e79a7", "#ffffff", 1.5),
    "chunk": ("#eef4ea", "#59a14f", 1.5),
}
_LEGEND = (("seed", "seed"), ("entity", "entity"), ("chunk", "passage"))
_ROLE_RANK = {"seed": 0, "entity": 1, "chunk": 2}
_FONT = "system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"

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


def graph_svg(
    nodes: Sequence[SvgNode],
    edges: Sequence[SvgEdge],
    *,
    width: int = 640,
    height: int = 420,
    layout: str = "spring",
    max_nodes: int = 60,
    caption: str | None = None,
) -> str:
    """Return an ``<svg>`` element drawing ``nodes`` and ``edges``.

    ``layout="spring"`` places nodes with networkx's seeded spring layout;
    ``layout="path"`` places them left to right in the order given (wrapping to a new row
    when they do not fit). Nodes sharing an id are merged (a seed wins), edges between the
    same nodes are merged (the largest weight, their distinct labels joined), edges naming
    a node not drawn are dropped; a self-loop is drawn as a small loop. Beyond
    ``max_nodes`` nodes the seeds are kept, then the highest scores (ties by id), and the
    caption says how many were not drawn. With no node the result is a small "no
    entities" drawing.

    Raises ValueError for an unknown ``layout`` or a ``max_nodes`` below 1.
    """
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(_LAYOUTS)}, not {layout!r}")
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1, not {max_nodes}")
    width = min(max(int(width), 200), 4000)
    height = min(max(int(height), 120), 4000)

    merged, order = _merge_nodes(nodes)
    kept = _keep(merged, max_nodes)
    hidden = len(merged) - len(kept)
    if layout == "path":
        ids = [i for i in order if i in kept]
    else:
        ids = sorted(kept)
    lines = _merge_edges(edges, kept)

    notes = [_clean(caption)] if caption is not None and _clean(caption) else []
    if hidden:
        notes.append(f"+{hidden} more not drawn")
    caption_text = " \u00b7 ".join(notes)

    if not ids:
        return _empty(width, caption_text)

    roles = {_style_role(merged[i].role) for i in ids}
    top = 30.0 if roles else 10.0
    bottom = height - (26.0 if caption_text else 8.0)
    pos = _positions(ids, lines, layout, width, top, bottom)

    scores = [s for s in (_valid(merged[i].score) for i in ids) if s is not None]
    max_score = max(scores, default=0.0)
    shrink = min(1.0, max(0.55, math.sqrt(20 / len(ids))))  # smaller nodes when crowded
    radius = {i: _radius(merged[i], max_score) * shrink for i in ids}

    summary = f"Graph of {len(ids)} node{'s' if len(ids) != 1 else ''}"
    summary += f" and {len(lines)} edge{'s' if len(lines) != 1 else ''}"
    if caption_text:
        summary += f": {caption_text}"
    drawn = _Drawn(ids, merged, pos, radius)
    out = [_open(width, height, summary)]
    out.append(_edges_svg(lines, drawn))
    out.append(_nodes_svg(drawn))
    out.append(_labels_svg(drawn, layout, width))
    out.append(_legend_svg(roles))
    if caption_text:
        out.append(_caption_svg(caption_text, width, height))
    out.append("</svg>")
    return "".join(out)


# ---------------------------------------------------------------- text


def _clean(text: object) -> str:
    """``text`` without characters XML cannot carry (or controls), on one line, stripped."""
    return _SPACES.sub(" ", legal(text)).strip()


def _text_width(text: str, size: float) -> float:
    """A rough rendered width: East Asian wide characters count double."""
    units = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
    return units * size * 0.56


def _fit(text: str, room: float, size: float) -> str:
    """``text`` cut (with an ellipsis) to about ``room`` pixels, keeping at least 6 characters."""
    limit = len(text)
    while limit > 6 and _text_width(shorten(text, limit), size) > room:
        limit -= 1
    return shorten(text, limit)


def _num(x: float) -> str:
    """``x`` rounded to one decimal, compactly ("12", "3.5"), never "-0"."""
    r = round(x, 1)
    if r == 0:
        return "0"
    s = f"{r:.1f}"
    return s.removesuffix(".0")


def _valid(x: float | None) -> float | None:
    """A finite, non-negative number, else None (NaN, inf, negatives and non-numbers)."""
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v + 0.0 if math.isfinite(v) and v >= 0 else None  # + 0.0: no -0.0


# ---------------------------------------------------------------- canonical inputs


def _style_role(role: str) -> str:
    return role if role in _STYLE else "entity"


def _node_key(node: SvgNode) -> tuple[object, ...]:
    score = _valid(node.score)
    return (
        _ROLE_RANK.get(node.role, 3), str(node.role),
        score is None, -(score or 0.0),
        str(node.label), node.title is None, str(node.title or ""),
    )


def _merge_nodes(nodes: Sequence[SvgNode]) -> tuple[dict[str, SvgNode], list[str]]:
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


def _keep(merged: dict[str, SvgNode], max_nodes: int) -> set[str]:
    if len(merged) <= max_nodes:
        return set(merged)

    return set(sorted(merged, key=lambda nid: _keep_rank(merged, nid))[:max_nodes])


def _keep_rank(merged: dict[str, SvgNode], nid: str) -> tuple[int, float, str]:
    """Seeds first, then the highest scores (no score last), ties by id."""
    node = merged[nid]
    score = _valid(node.score)
    return (0 if node.role == "seed" else 1, -(score if score is not None else -1.0), nid)


@dataclass(frozen=True)
class _Line:
    a: str
    b: str
    directed: bool
    weight: float | None
    label: str
    bend: float = 0.0


@dataclass(frozen=True)
class _Drawn:
    """The nodes drawn, in drawing order, with where each stands and its radius."""

    ids: list[str]
    merged: dict[str, SvgNode]
    pos: dict[str, tuple[float, float]]
    radius: dict[str, float]

    def at(self, nid: str) -> tuple[SvgNode, float, float, float]:
        """Node ``nid``, its centre and its radius."""
        x, y = self.pos[nid]
        return self.merged[nid], x, y, self.radius[nid]


def _merge_edges(edges: Sequence[SvgEdge], kept: set[str]) -> list[_Line]:
    """Edges between drawn nodes, merged by (ends, direction), in canonical order."""
    acc: dict[tuple[str, str, bool], tuple[float | None, set[str]]] = {}
    for edge in edges:
        a, b, directed = str(edge.src), str(edge.dst), bool(edge.directed)
        if a not in kept or b not in kept:
            continue
        if not directed and b < a:
            a, b = b, a
        weight, labels = acc.get((a, b, directed), (None, set()))
        w = _valid(edge.weight)
        if w is not None:
            weight = w if weight is None else max(weight, w)
        if edge.label is not None and _clean(edge.label):
            labels = labels | {_clean(edge.label)}
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
        lines.append(_Line(a, b, directed, weight, " / ".join(sorted(labels)), bend))
    return lines


# ---------------------------------------------------------------- layout


def _positions(
    ids: list[str], lines: list[_Line], layout: str, width: int, top: float, bottom: float
) -> dict[str, tuple[float, float]]:
    margin = min(80.0, width / 6)
    left, right = margin, width - margin
    loops = any(ln.a == ln.b for ln in lines)
    top, bottom = top + (34.0 if loops else 18.0), bottom - 22.0
    if bottom <= top:
        top = bottom = (top + bottom) / 2
    if layout == "path":
        return _path_positions(ids, left, right, top, bottom)
    return _spring_positions(ids, lines, left, right, top, bottom)


def _path_positions(
    ids: list[str], left: float, right: float, top: float, bottom: float
) -> dict[str, tuple[float, float]]:
    n = len(ids)
    per_row = max(2, int((right - left) // 45) + 1)
    per_row = min(per_row, n)
    rows = math.ceil(n / per_row)
    pos = {}
    for k, nid in enumerate(ids):
        row, col = divmod(k, per_row)
        x = (left + right) / 2 if per_row == 1 else left + (right - left) * col / (per_row - 1)
        y = (top + bottom) / 2 if rows == 1 else top + (bottom - top) * row / (rows - 1)
        pos[nid] = (x, y)
    return pos


def _spring_positions(
    ids: list[str], lines: list[_Line], left: float, right: float, top: float, bottom: float
) -> dict[str, tuple[float, float]]:
    """Each connected component laid out alone (seeded spring layout), then the components
    packed in rows, largest first, so that an isolated node does not squeeze the rest."""
    import networkx as nx

    index = {nid: k for k, nid in enumerate(ids)}
    pairs = sorted({(index[ln.a], index[ln.b]) for ln in lines if ln.a != ln.b})
    whole = nx.Graph()
    whole.add_nodes_from(range(len(ids)))
    whole.add_edges_from(pairs)
    comps = sorted(
        (sorted(c) for c in nx.connected_components(whole)), key=lambda c: (-len(c), c[0])
    )
    placed: list[tuple[dict[int, tuple[float, float]], float]] = []
    for comp in comps:
        if len(comp) == 1:
            placed.append(({comp[0]: (0.0, 0.0)}, 0.35))
            continue
        members = set(comp)
        graph = nx.Graph()
        graph.add_nodes_from(comp)
        graph.add_edges_from(p for p in pairs if p[0] in members)
        raw = nx.spring_layout(graph, seed=_SEED, iterations=100, weight=None)
        half = math.sqrt(len(comp))
        # Rounded first, so float noise below 1e-6 cannot move a node by a rounding step.
        local = {
            k: (round(float(raw[k][0]), 6) * half, round(float(raw[k][1]), 6) * half)
            for k in comp
        }
        placed.append((local, half))

    # Shelf packing: rows about as wide as the drawing's aspect asks.
    gap = 1.2
    sides = [2 * half + gap for _, half in placed]
    aspect = (right - left) / max(bottom - top, 1.0)
    row_width = max(math.sqrt(sum(s * s for s in sides) * aspect), max(sides))
    rows: list[list[int]] = [[]]
    used = 0.0
    for k, side in enumerate(sides):
        # Isolated nodes start their own rows, under the components.
        first_single = len(placed[k][0]) == 1 and k > 0 and len(placed[k - 1][0]) > 1
        if rows[-1] and (used + side > row_width + 1e-9 or first_single):
            rows.append([])
            used = 0.0
        rows[-1].append(k)
        used += side
    flat: dict[int, tuple[float, float]] = {}
    y = 0.0
    for row in rows:
        height = max(sides[k] for k in row)
        x = 0.0
        for k in row:
            local, _ = placed[k]
            cx, cy = x + sides[k] / 2, y + height / 2
            for node, (px, py) in local.items():
                flat[node] = (cx + px, cy + py)
            x += sides[k]
        y += height

    xs = [flat[k][0] for k in range(len(ids))]
    ys = [flat[k][1] for k in range(len(ids))]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)

    def fit(v: float, lo: float, hi: float, a: float, b: float) -> float:
        if hi - lo < 1e-9 or not math.isfinite(v):
            return (a + b) / 2
        return a + (b - a) * (v - lo) / (hi - lo)

    return {
        nid: (fit(xs[k], x0, x1, left, right), fit(ys[k], y0, y1, top, bottom))
        for k, nid in enumerate(ids)
    }


def _radius(node: SvgNode, max_score: float) -> float:
    score = _valid(node.score)
    r = 7.0 if score is None or max_score <= 0 else 5.0 + 6.0 * score / max_score
    return r + 2.0 if node.role == "seed" else r


# ---------------------------------------------------------------- drawing


def _open(width: int, height: int, summary: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(summary)}" '
        f'font-family="{_FONT}" style="max-width:100%;height:auto">'
        f"<title>{esc(summary)}</title>"
        f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" rx="6" '
        f'fill="#ffffff" stroke="#dddddd"/>'
    )


def _empty(width: int, caption_text: str) -> str:
    height = 64 if caption_text else 48
    out = [_open(width, height, "No entities" + (f": {caption_text}" if caption_text else ""))]
    out.append(
        f'<text x="{_num(width / 2)}" y="28" text-anchor="middle" font-size="13" '
        f'font-style="italic" fill="{_MUTED}">no entities</text>'
    )
    if caption_text:
        out.append(_caption_svg(caption_text, width, height))
    out.append("</svg>")
    return "".join(out)


def _halo(size: float, fill: str, weight: str = "normal") -> str:
    """Text attributes: a white outline drawn under the glyphs keeps a label readable."""
    bold = ' font-weight="bold"' if weight == "bold" else ""
    return (
        f'font-size="{_num(size)}" fill="{fill}"{bold} stroke="#ffffff" stroke-width="3" '
        f'stroke-linejoin="round" paint-order="stroke"'
    )


def _edges_svg(lines: list[_Line], drawn: _Drawn) -> str:
    weights = [ln.weight for ln in lines if ln.weight is not None]
    top = max(weights, default=0.0)
    body, labels = [], []
    write_labels = sum(1 for ln in lines if ln.label) <= MAX_EDGE_LABELS
    for ln in lines:
        if ln.weight is None:
            stroke_w = 1.2
        elif top <= 0:
            stroke_w = 1.5
        else:
            stroke_w = 1.0 + 3.5 * ln.weight / top
        colour = _EDGE_DIRECTED if ln.directed else _EDGE
        tip = _edge_title(ln, drawn.merged)
        (ax, ay), (bx, by) = drawn.pos[ln.a], drawn.pos[ln.b]
        if ln.a == ln.b:  # a self-loop: a small loop above the node
            r = drawn.radius[ln.a]
            d = (
                f"M{_num(ax - 4)} {_num(ay - r + 1)} "
                f"C{_num(ax - 20)} {_num(ay - r - 26)} {_num(ax + 20)} {_num(ay - r - 26)} "
                f"{_num(ax + 4)} {_num(ay - r + 1)}"
            )
            mid = (ax, ay - r - 21)
            head = ""
        else:
            dx, dy = bx - ax, by - ay
            dist = math.hypot(dx, dy) or 1.0
            nx_, ny_ = -dy / dist, dx / dist  # unit normal
            cx = (ax + bx) / 2 + nx_ * ln.bend * 2
            cy = (ay + by) / 2 + ny_ * ln.bend * 2
            # Start and end on the nodes' rims, aiming at the control point.
            sx, sy = _toward(ax, ay, cx, cy, drawn.radius[ln.a] + 1)
            ex, ey = _toward(bx, by, cx, cy, drawn.radius[ln.b] + (1 if not ln.directed else 8))
            d = f"M{_num(sx)} {_num(sy)} Q{_num(cx)} {_num(cy)} {_num(ex)} {_num(ey)}"
            if ln.bend == 0:
                d = f"M{_num(sx)} {_num(sy)} L{_num(ex)} {_num(ey)}"
            mid = ((sx + 2 * cx + ex) / 4, (sy + 2 * cy + ey) / 4)
            head = ""
            if ln.directed:
                head = _arrow(cx, cy, bx, by, drawn.radius[ln.b] + 1, colour)
        body.append(
            f'<g><title>{esc(tip)}</title><path d="{d}" fill="none" stroke="{colour}" '
            f'stroke-width="{_num(stroke_w)}" stroke-opacity="0.85" '
            f'stroke-linecap="round"/>{head}</g>'
        )
        if ln.label and write_labels:
            text = shorten(ln.label, EDGE_LABEL_MAX_CHARS)
            labels.append(
                f'<text x="{_num(mid[0])}" y="{_num(mid[1] - 4)}" text-anchor="middle" '
                f'{_halo(9.5, _MUTED)} data-edge-label="1">{esc(text)}'
                f"<title>{esc(tip)}</title></text>"
            )
    return f'<g data-layer="edges">{"".join(body)}{"".join(labels)}</g>'


def _edge_title(ln: _Line, merged: dict[str, SvgNode]) -> str:
    a = shorten(_clean(merged[ln.a].label) or _clean(ln.a), 200)
    b = shorten(_clean(merged[ln.b].label) or _clean(ln.b), 200)
    arrow = " \u2192 " if ln.directed else " \u2014 "
    tip = f"{a}{arrow}{b}"
    if ln.label:
        tip += f": {ln.label}"
    if ln.weight is not None:
        tip += f" (weight {ln.weight:.3g})"
    return shorten(tip, TITLE_MAX_CHARS)


def _toward(x: float, y: float, tx: float, ty: float, dist: float) -> tuple[float, float]:
    """The point ``dist`` from (x, y) toward (tx, ty)."""
    dx, dy = tx - x, ty - y
    n = math.hypot(dx, dy)
    if n < 1e-9:
        return x, y
    return x + dx / n * dist, y + dy / n * dist


def _arrow(cx: float, cy: float, bx: float, by: float, r: float, colour: str) -> str:
    """A filled arrowhead touching the rim of the node at (bx, by), coming from (cx, cy)."""
    tx, ty = _toward(bx, by, cx, cy, r)
    dx, dy = tx - cx, ty - cy
    n = math.hypot(dx, dy) or 1.0
    ux, uy = dx / n, dy / n
    length, half = 9.0, 4.0
    px, py = tx - ux * length, ty - uy * length
    pts = [(tx, ty), (px - uy * half, py + ux * half), (px + uy * half, py - ux * half)]
    return (
        f'<polygon points="{" ".join(f"{_num(x)},{_num(y)}" for x, y in pts)}" '
        f'fill="{colour}"/>'
    )


def _node_title(node: SvgNode) -> str:
    if node.title is not None and _clean(node.title):
        return shorten(_clean(node.title), TITLE_MAX_CHARS)
    text = _clean(node.label) or _clean(node.id)
    score = _valid(node.score)
    if score is not None:
        text = shorten(text, TITLE_MAX_CHARS - 24) + f" (score {score:.3g})"
    return shorten(text, TITLE_MAX_CHARS)


def _nodes_svg(drawn: _Drawn) -> str:
    out = []
    for nid in drawn.ids:
        node, x, y, r = drawn.at(nid)
        role = _style_role(node.role)
        fill, stroke, stroke_w = _STYLE[role]
        if role == "chunk":
            w, h = 2.4 * r, 1.7 * r
            shape = (
                f'<rect x="{_num(x - w / 2)}" y="{_num(y - h / 2)}" width="{_num(w)}" '
                f'height="{_num(h)}" rx="2.5" fill="{fill}" stroke="{stroke}" '
                f'stroke-width="{_num(stroke_w)}"/>'
            )
        else:
            shape = (
                f'<circle cx="{_num(x)}" cy="{_num(y)}" r="{_num(r)}" fill="{fill}" '
                f'stroke="{stroke}" stroke-width="{_num(stroke_w)}"/>'
            )
        out.append(
            f'<g data-node="{esc(shorten(_clean(nid), 200))}" data-role="{role}">'
            f"<title>{esc(_node_title(node))}</title>{shape}</g>"
        )
    return f'<g data-layer="nodes">{"".join(out)}</g>'


def _labels_svg(drawn: _Drawn, layout: str, width: int) -> str:
    ids, merged = drawn.ids, drawn.merged
    out = []
    spacing = math.inf
    if layout == "path" and len(ids) > 1:
        xs = sorted({round(p[0], 1) for p in drawn.pos.values()})
        spacing = min((b - a for a, b in itertools.pairwise(xs)), default=math.inf)
    size = 11.0
    texts = [shorten(_clean(merged[nid].label) or _clean(nid), LABEL_MAX_CHARS) for nid in ids]
    if len(ids) > MAX_NODE_LABELS:
        labelled = set(sorted(ids, key=lambda i: _keep_rank(merged, i))[:MAX_NODE_LABELS])
        texts = [t if nid in labelled else "" for t, nid in zip(texts, ids)]
    # On a crowded path the labels alternate below and above the nodes, each cut to the
    # room that leaves.
    crowded = any(_text_width(t, size) > spacing - 6 for t in texts)
    if crowded:
        room = 2 * spacing - 10
        texts = [_fit(t, room, size) for t in texts]
    for k, nid in enumerate(ids):
        text = texts[k]
        if not text:
            continue
        node, x, y, r = drawn.at(nid)
        bold = "bold" if node.role == "seed" else "normal"
        est = _text_width(text, size)
        above = crowded and k % 2 == 1
        ty = y - r - 6 if above else y + r + 12
        anchor, tx = "middle", x
        if x - est / 2 < 4:
            anchor, tx = "start", max(x - r, 4.0)
        elif x + est / 2 > width - 4:
            anchor, tx = "end", min(x + r, width - 4.0)
        out.append(
            f'<text x="{_num(tx)}" y="{_num(ty)}" text-anchor="{anchor}" '
            f'{_halo(size, _TEXT, bold)} data-label="{esc(shorten(_clean(nid), 200))}">{esc(text)}</text>'
        )
    return f'<g data-layer="labels">{"".join(out)}</g>'


def _legend_svg(roles: set[str]) -> str:
    out, x = [], 10.0
    for role, name in _LEGEND:
        if role not in roles:
            continue
        fill, stroke, stroke_w = _STYLE[role]
        if role == "chunk":
            mark = (
                f'<rect x="{_num(x)}" y="11" width="13" height="9" rx="2" fill="{fill}" '
                f'stroke="{stroke}" stroke-width="{_num(stroke_w)}"/>'
            )
        else:
            mark = (
                f'<circle cx="{_num(x + 6)}" cy="15.5" r="5" fill="{fill}" stroke="{stroke}" '
                f'stroke-width="{_num(min(stroke_w, 2.0))}"/>'
            )
        out.append(
            f"{mark}<text x=\"{_num(x + 17)}\" y=\"19.5\" font-size=\"10.5\" "
            f'fill="{_MUTED}">{name}</text>'
        )
        x += 17 + _text_width(name, 10.5) + 14
    return f'<g data-layer="legend">{"".join(out)}</g>'


def _caption_svg(text: str, width: int, height: int) -> str:
    limit = max(int((width - 20) / (10.5 * 0.56)), 8)
    shown = shorten(text, limit)
    tip = f"<title>{esc(shorten(text, TITLE_MAX_CHARS))}</title>" if shown != text else ""
    return (
        f'<text x="10" y="{height - 9}" font-size="10.5" fill="{_MUTED}" '
        f'data-caption="1">{esc(shown)}{tip}</text>'
    )
