"""The SVG text of a laid-out graph drawing: the frame, edges (with arrows, loops and
mid-edge labels), nodes, labels, legend and caption, every text escaped."""

from __future__ import annotations

import itertools
import math

from .html import esc, shorten
from .svg_parts import (EDGE_COLOUR, EDGE_DIRECTED_COLOUR, EDGE_LABEL_MAX_CHARS, FONT,
                        LABEL_MAX_CHARS, LEGEND, MAX_EDGE_LABELS, MAX_NODE_LABELS, MUTED_COLOUR,
                        STYLE, TEXT_COLOUR, TITLE_MAX_CHARS, Drawn, EdgeLine, SvgNode, clean_text,
                        fit_text, keep_rank, num, style_role, text_width, valid_number)


def open_svg(width: int, height: int, summary: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(summary)}" '
        f'font-family="{FONT}" style="max-width:100%;height:auto">'
        f"<title>{esc(summary)}</title>"
        f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" rx="6" '
        f'fill="#ffffff" stroke="#dddddd"/>'
    )


def empty_svg(width: int, caption_text: str) -> str:
    height = 64 if caption_text else 48
    out = [open_svg(width, height, "No entities" + (f": {caption_text}" if caption_text else ""))]
    out.append(
        f'<text x="{num(width / 2)}" y="28" text-anchor="middle" font-size="13" '
        f'font-style="italic" fill="{MUTED_COLOUR}">no entities</text>'
    )
    if caption_text:
        out.append(caption_svg(caption_text, width, height))
    out.append("</svg>")
    return "".join(out)


def _halo(size: float, fill: str, weight: str = "normal") -> str:
    """Text attributes: a white outline drawn under the glyphs keeps a label readable."""
    bold = ' font-weight="bold"' if weight == "bold" else ""
    return (
        f'font-size="{num(size)}" fill="{fill}"{bold} stroke="#ffffff" stroke-width="3" '
        f'stroke-linejoin="round" paint-order="stroke"'
    )


def edges_svg(lines: list[EdgeLine], drawn: Drawn) -> str:
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
        colour = EDGE_DIRECTED_COLOUR if ln.directed else EDGE_COLOUR
        tip = _edge_title(ln, drawn.merged)
        (ax, ay), (bx, by) = drawn.pos[ln.a], drawn.pos[ln.b]
        if ln.a == ln.b:  # a self-loop: a small loop above the node
            r = drawn.radius[ln.a]
            d = (
                f"M{num(ax - 4)} {num(ay - r + 1)} "
                f"C{num(ax - 20)} {num(ay - r - 26)} {num(ax + 20)} {num(ay - r - 26)} "
                f"{num(ax + 4)} {num(ay - r + 1)}"
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
            d = f"M{num(sx)} {num(sy)} Q{num(cx)} {num(cy)} {num(ex)} {num(ey)}"
            if ln.bend == 0:
                d = f"M{num(sx)} {num(sy)} L{num(ex)} {num(ey)}"
            mid = ((sx + 2 * cx + ex) / 4, (sy + 2 * cy + ey) / 4)
            head = ""
            if ln.directed:
                head = _arrow(cx, cy, bx, by, drawn.radius[ln.b] + 1, colour)
        body.append(
            f'<g><title>{esc(tip)}</title><path d="{d}" fill="none" stroke="{colour}" '
            f'stroke-width="{num(stroke_w)}" stroke-opacity="0.85" '
            f'stroke-linecap="round"/>{head}</g>'
        )
        if ln.label and write_labels:
            text = shorten(ln.label, EDGE_LABEL_MAX_CHARS)
            labels.append(
                f'<text x="{num(mid[0])}" y="{num(mid[1] - 4)}" text-anchor="middle" '
                f'{_halo(9.5, MUTED_COLOUR)} data-edge-label="1">{esc(text)}'
                f"<title>{esc(tip)}</title></text>"
            )
    return f'<g data-layer="edges">{"".join(body)}{"".join(labels)}</g>'


def _edge_title(ln: EdgeLine, merged: dict[str, SvgNode]) -> str:
    a = shorten(clean_text(merged[ln.a].label) or clean_text(ln.a), 200)
    b = shorten(clean_text(merged[ln.b].label) or clean_text(ln.b), 200)
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
        f'<polygon points="{" ".join(f"{num(x)},{num(y)}" for x, y in pts)}" '
        f'fill="{colour}"/>'
    )


def _node_title(node: SvgNode) -> str:
    if node.title is not None and clean_text(node.title):
        return shorten(clean_text(node.title), TITLE_MAX_CHARS)
    text = clean_text(node.label) or clean_text(node.id)
    score = valid_number(node.score)
    if score is not None:
        text = shorten(text, TITLE_MAX_CHARS - 24) + f" (score {score:.3g})"
    return shorten(text, TITLE_MAX_CHARS)


def nodes_svg(drawn: Drawn) -> str:
    out = []
    for nid in drawn.ids:
        node, x, y, r = drawn.at(nid)
        role = style_role(node.role)
        fill, stroke, stroke_w = STYLE[role]
        if role == "chunk":
            w, h = 2.4 * r, 1.7 * r
            shape = (
                f'<rect x="{num(x - w / 2)}" y="{num(y - h / 2)}" width="{num(w)}" '
                f'height="{num(h)}" rx="2.5" fill="{fill}" stroke="{stroke}" '
                f'stroke-width="{num(stroke_w)}"/>'
            )
        else:
            shape = (
                f'<circle cx="{num(x)}" cy="{num(y)}" r="{num(r)}" fill="{fill}" '
                f'stroke="{stroke}" stroke-width="{num(stroke_w)}"/>'
            )
        out.append(
            f'<g data-node="{esc(shorten(clean_text(nid), 200))}" data-role="{role}">'
            f"<title>{esc(_node_title(node))}</title>{shape}</g>"
        )
    return f'<g data-layer="nodes">{"".join(out)}</g>'


def labels_svg(drawn: Drawn, layout: str, width: int) -> str:
    ids, merged = drawn.ids, drawn.merged
    out = []
    spacing = math.inf
    if layout == "path" and len(ids) > 1:
        xs = sorted({round(p[0], 1) for p in drawn.pos.values()})
        spacing = min((b - a for a, b in itertools.pairwise(xs)), default=math.inf)
    size = 11.0
    texts = [shorten(clean_text(merged[nid].label) or clean_text(nid), LABEL_MAX_CHARS)
             for nid in ids]
    if len(ids) > MAX_NODE_LABELS:
        labelled = set(sorted(ids, key=lambda i: keep_rank(merged, i))[:MAX_NODE_LABELS])
        texts = [t if nid in labelled else "" for t, nid in zip(texts, ids)]
    # On a crowded path the labels alternate below and above the nodes, each cut to the
    # room that leaves.
    crowded = any(text_width(t, size) > spacing - 6 for t in texts)
    if crowded:
        room = 2 * spacing - 10
        texts = [fit_text(t, room, size) for t in texts]
    for k, nid in enumerate(ids):
        text = texts[k]
        if not text:
            continue
        node, x, y, r = drawn.at(nid)
        bold = "bold" if node.role == "seed" else "normal"
        est = text_width(text, size)
        above = crowded and k % 2 == 1
        ty = y - r - 6 if above else y + r + 12
        anchor, tx = "middle", x
        if x - est / 2 < 4:
            anchor, tx = "start", max(x - r, 4.0)
        elif x + est / 2 > width - 4:
            anchor, tx = "end", min(x + r, width - 4.0)
        out.append(
            f'<text x="{num(tx)}" y="{num(ty)}" text-anchor="{anchor}" '
            f'{_halo(size, TEXT_COLOUR, bold)} '
            f'data-label="{esc(shorten(clean_text(nid), 200))}">{esc(text)}</text>'
        )
    return f'<g data-layer="labels">{"".join(out)}</g>'


def legend_svg(roles: set[str]) -> str:
    out, x = [], 10.0
    for role, name in LEGEND:
        if role not in roles:
            continue
        fill, stroke, stroke_w = STYLE[role]
        if role == "chunk":
            mark = (
                f'<rect x="{num(x)}" y="11" width="13" height="9" rx="2" fill="{fill}" '
                f'stroke="{stroke}" stroke-width="{num(stroke_w)}"/>'
            )
        else:
            mark = (
                f'<circle cx="{num(x + 6)}" cy="15.5" r="5" fill="{fill}" stroke="{stroke}" '
                f'stroke-width="{num(min(stroke_w, 2.0))}"/>'
            )
        out.append(
            f"{mark}<text x=\"{num(x + 17)}\" y=\"19.5\" font-size=\"10.5\" "
            f'fill="{MUTED_COLOUR}">{name}</text>'
        )
        x += 17 + text_width(name, 10.5) + 14
    return f'<g data-layer="legend">{"".join(out)}</g>'


def caption_svg(text: str, width: int, height: int) -> str:
    limit = max(int((width - 20) / (10.5 * 0.56)), 8)
    shown = shorten(text, limit)
    tip = f"<title>{esc(shorten(text, TITLE_MAX_CHARS))}</title>" if shown != text else ""
    return (
        f'<text x="10" y="{height - 9}" font-size="10.5" fill="{MUTED_COLOUR}" '
        f'data-caption="1">{esc(shown)}{tip}</text>'
    )
