"""Pictures of graph hits and results: entities and relations drawn as inline SVG.

A ``path`` hit is drawn as a chain of hops, a ``subgraph`` or ``triplet`` hit as its
entities and relations; a ``graph`` result (``neighbors``, ``local``) as its nodes
and edges with the seeds marked and, for ``local``, the passages found joined to the
entities they mention. Names come from the result itself (``meta.names``, the nodes'
``name``), so a picture shows only what the result already shows. The hit tables
(:mod:`.hits`) and the graph results (:mod:`.graphs`) draw with these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .graph_svg import SvgEdge, SvgNode, graph_svg
from .html import number, shorten

if TYPE_CHECKING:
    from ..wire import GraphResult, Hit

PASSAGE_LABEL = 24  # characters of a passage's label in a local picture
PICTURED_UNITS = ("path", "subgraph", "triplet")  # the hit units hit_picture draws


def hit_picture(hit: Hit) -> str:
    """The SVG of a ``path``, ``subgraph`` or ``triplet`` hit ('' for other units, or when
    the hit carries no entity names: its text was not included)."""
    meta = hit.meta or {}
    prov = hit.provenance
    if prov is None or not prov.edges:
        return ""
    if hit.unit == "triplet":
        subject, obj = meta.get("subject"), meta.get("object")
        if not (subject and obj) or len(prov.nodes or []) != 2:
            return ""
        names = {prov.nodes[0]: str(subject), prov.nodes[1]: str(obj)}  # type: ignore[index]
        relations = [str(meta.get("relation") or "")]
    elif hit.unit in ("path", "subgraph"):
        names = {str(k): str(v) for k, v in (meta.get("names") or {}).items()}
        relations = [str(r) for r in meta.get("relations") or []]
    else:
        return ""
    if not names:
        return ""
    order = list(prov.path or prov.nodes or names)
    nodes = [SvgNode(id=n, label=names.get(n, n), title=names.get(n, n)) for n in order]
    edges = [SvgEdge(src=e.src, dst=e.dst, weight=e.weight,
                     label=relations[i] if i < len(relations) else None,
                     directed=hit.unit == "path")
             for i, e in enumerate(prov.edges)]
    if hit.unit == "path" or hit.unit == "triplet":
        return graph_svg(nodes, edges, layout="path", height=150)
    return graph_svg(nodes, edges)


def result_picture(result: GraphResult) -> str:
    """The SVG of a ``graph`` result's nodes and edges (seeds marked) and, when it has hits
    (``local``), of the passages joined to the entities they mention ('' without nodes)."""
    if not result.nodes:
        return ""
    nodes = [SvgNode(id=n.id, label=n.name or n.id, role="seed" if n.seed else "entity",
                     score=n.score, title=f"{n.name or n.id} (score {number(n.score)})")
             for n in result.nodes]
    edges = [SvgEdge(src=e.src, dst=e.dst, weight=e.weight) for e in result.edges or []]
    known = {n.id for n in result.nodes}
    for rank, hit in enumerate(result.hits or [], 1):
        mentions = [n for n in (hit.provenance.nodes if hit.provenance else None) or []
                    if n in known]
        if not mentions:
            continue
        title = hit.citation.title if hit.citation and hit.citation.title else hit.id
        nodes.append(SvgNode(id=hit.id, label=f"#{rank} {shorten(title, PASSAGE_LABEL)}",
                             role="chunk", score=hit.score,
                             title=shorten(hit.text or hit.id, 300)))
        edges += [SvgEdge(src=hit.id, dst=n) for n in mentions]
    return graph_svg(nodes, edges, caption=_caption(result))


def _caption(result: GraphResult) -> str:
    entities = len(result.nodes or [])
    seeds = sum(1 for n in result.nodes or [] if n.seed)
    text = f"{entities} entities ({seeds} seed{'s' * (seeds != 1)}), {len(result.edges or [])} edges"
    if result.hits:
        text += f", {len(result.hits)} passages"
    return text
