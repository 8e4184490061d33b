"""Where a graph drawing puts its nodes: networkx's seeded spring layout, or a left-to-right
chain (wrapping to new rows) for a path; and each node's radius from its score."""

from __future__ import annotations

import math

from .svg_parts import EdgeLine, SvgNode, valid_number

_SEED = 7


def positions(
    ids: list[str], lines: list[EdgeLine], layout: str, width: int, top: float, bottom: float
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
    ids: list[str], lines: list[EdgeLine], left: float, right: float, top: float, bottom: float
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


def node_radius(node: SvgNode, max_score: float) -> float:
    score = valid_number(node.score)
    r = 7.0 if score is None or max_score <= 0 else 5.0 + 6.0 * score / max_score
    return r + 2.0 if node.role == "seed" else r
