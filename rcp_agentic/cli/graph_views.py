"""What ``rcp-agentic graph`` shows, as text: the communities of one level with their reports
(``graph communities``), and an entity's neighbourhood (``graph show ENTITY``)."""

from __future__ import annotations

import textwrap
from typing import Any

from ..errors import CapabilityMissing, InvalidParams
from .output import snippet

REPORT_LINES = 4  # lines of each community's report `graph communities` prints


def communities(engine: Any, level: int | None, *, limit: int) -> str:
    """The communities of one level (default: the coarsest), largest first, with their
    reports' titles and summaries."""
    found = engine.communities()
    if found is None:
        raise CapabilityMissing(f"the engine at {engine.path} holds no communities: build them "
                                f"with `rcp-agentic index PATH... --graph --engine "
                                f"{engine.path}`", field="graph_communities")
    top = found.top_level
    level = top if level is None else level
    if not 0 <= level <= top:
        raise InvalidParams(f"--level must be between 0 and {top}", field="level")
    comms = found.level(level)
    entities = sum(c.size for c in comms)
    lines = [f"Level {level} of 0..{top} (0 = finest): {len(comms)} communities over "
             f"{entities} entities, largest first"]
    for c in comms[:limit]:
        lines.append(f"{c.id}  {c.size} entit{'y' if c.size == 1 else 'ies'}  {c.title}")
        # The report after its title, at most REPORT_LINES lines.
        body = textwrap.wrap(" ".join(c.text.split("\n")[1:]), 96, initial_indent="    ",
                             subsequent_indent="    ")
        lines += body[:REPORT_LINES]
        if len(body) > REPORT_LINES:
            lines[-1] = lines[-1][:92] + " ..."
    if len(comms) > limit:
        lines.append(f"... {len(comms) - limit} more (--limit N)")
    return "\n".join(lines)


def neighbourhood(engine: Any, name: str, *, neighbours: int, chunks: int) -> str:
    """An entity's neighbourhood as text: what it is, its strongest relations with their
    evidence, its synonyms, and the chunks that mention it."""
    from ..graph.index import find_entity, node_uid

    graph = engine.graph_data()
    if graph is None:
        raise CapabilityMissing(f"the engine at {engine.path} holds no knowledge graph: build "
                                f"one with `rcp-agentic index PATH... --graph --engine "
                                f"{engine.path}`", field="build_graph")
    key = find_entity(graph, name)
    lines = []
    if key is None:  # no entity of that name: the node nearest to it
        key = find_entity(graph, name, lambda q: [h.id for h in engine.retrieve(
            q, k=1, unit="node").hits])
        if key is None:
            raise InvalidParams(f"no entity named {name!r} in the graph", field="entity")
        lines.append(f"(no entity is named {name!r}; the nearest node:)")
    e = graph.entities[key]
    lines.append(f"{e.name}  [{e.kind}]  {node_uid(key)}")
    if e.aliases:
        lines.append(f"also: {', '.join(e.aliases)}")
    if e.description:
        lines += textwrap.wrap(e.description, 96, initial_indent="  ", subsequent_indent="  ")
    edges = sorted((r for r in graph.relations if key in (r.subject, r.object)),
                   key=lambda r: (-r.weight, r.subject, r.object))
    lines.append(f"Neighbours ({len(edges)} relations, strongest first):")
    for r in edges[:neighbours]:
        other = graph.entities[r.object if r.subject == key else r.subject]
        lines.append(f"  {r.weight:6.3f}  {other.name:<28.28}  {snippet(r.relation, 40)}")
        lines.append(f"          {snippet(r.evidence, 88)}")
    synonyms = [(y.b if y.a == key else y.a, y.similarity) for y in graph.synonyms
                if key in (y.a, y.b)]
    if synonyms:
        lines.append("Synonyms: " + ", ".join(f"{graph.entities[k].name} ({s:.2f})"
                                              for k, s in synonyms))
    rows = sorted({int(c[1:]) for c in (*e.mentions, *e.about)})
    hydrated = engine.store.hydrate(rows[:chunks])
    lines.append(f"Mentioned in {len(rows)} chunk(s):")
    for r in rows[:chunks]:
        row = hydrated.get(r)
        if row is None:
            continue
        weight = e.mentions.get(f"r{r}")
        tag = "about" if f"r{r}" in e.about else f"weight {weight:.2f}" if weight else ""
        lines.append(f"  {row['uid']:<36}  {(row['title'] or ''):<24.24}  {tag}")
    return "\n".join(lines)
