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

import math
from collections.abc import Sequence

from .svg_draw import caption_svg, edges_svg, empty_svg, labels_svg, legend_svg, nodes_svg, open_svg
from .svg_layout import node_radius, positions
from .svg_parts import (Drawn, SvgEdge, SvgNode, clean_text, kept_nodes, merge_edges, merge_nodes,
                        style_role, valid_number)

__all__ = ["SvgEdge", "SvgNode", "graph_svg"]

_LAYOUTS = ("spring", "path")


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

    merged, order = merge_nodes(nodes)
    kept = kept_nodes(merged, max_nodes)
    hidden = len(merged) - len(kept)
    if layout == "path":
        ids = [i for i in order if i in kept]
    else:
        ids = sorted(kept)
    lines = merge_edges(edges, kept)

    notes = [clean_text(caption)] if caption is not None and clean_text(caption) else []
    if hidden:
        notes.append(f"+{hidden} more not drawn")
    caption_text = " \u00b7 ".join(notes)

    if not ids:
        return empty_svg(width, caption_text)

    roles = {style_role(merged[i].role) for i in ids}
    top = 30.0 if roles else 10.0
    bottom = height - (26.0 if caption_text else 8.0)
    pos = positions(ids, lines, layout, width, top, bottom)

    scores = [s for s in (valid_number(merged[i].score) for i in ids) if s is not None]
    max_score = max(scores, default=0.0)
    shrink = min(1.0, max(0.55, math.sqrt(20 / len(ids))))  # smaller nodes when crowded
    radius = {i: node_radius(merged[i], max_score) * shrink for i in ids}

    summary = f"Graph of {len(ids)} node{'s' if len(ids) != 1 else ''}"
    summary += f" and {len(lines)} edge{'s' if len(lines) != 1 else ''}"
    if caption_text:
        summary += f": {caption_text}"
    drawn = Drawn(ids, merged, pos, radius)
    out = [open_svg(width, height, summary)]
    out.append(edges_svg(lines, drawn))
    out.append(nodes_svg(drawn))
    out.append(labels_svg(drawn, layout, width))
    out.append(legend_svg(roles))
    if caption_text:
        out.append(caption_svg(caption_text, width, height))
    out.append("</svg>")
    return "".join(out)
