"""``rcp-agentic graph show ENTITY|communities|rebuild``: the knowledge graph of an engine built
with ``--graph`` — an entity's neighbourhood, the communities of one level with their reports
(both drawn by :mod:`.graph_views`), or the graph and its communities built again now."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import CapabilityMissing, InvalidParams
from .args import add_backend_args, add_llm_args, at_least_zero
from .engines import open_engine
from .graph_views import communities, neighbourhood
from .output import say


def add_command(sub: Any) -> None:
    """The ``graph`` sub-parser."""
    graph = sub.add_parser("graph", help="the knowledge graph of an engine built with --graph")
    graph.add_argument("action", choices=["show", "communities", "rebuild"],
                       help="show ENTITY: its description, strongest relations with evidence, "
                       "synonyms and the chunks that mention it; communities: the Leiden "
                       "communities of one level with their reports; rebuild: build the whole "
                       "graph and its communities again now")
    graph.add_argument("entity", nargs="*", metavar="ENTITY", help="(show) an entity's name")
    graph.add_argument("--engine", metavar="DIR")
    add_backend_args(graph)
    add_llm_args(graph)
    graph.add_argument("--neighbours", type=at_least_zero, default=10, metavar="N",
                       help="relations shown (%(default)s)")
    graph.add_argument("--chunks", type=at_least_zero, default=10, metavar="N",
                       help="mentioning chunks shown (%(default)s)")
    graph.add_argument("--level", type=at_least_zero, default=None, metavar="N",
                       help="(communities) the level shown: 0 the finest (default: the coarsest)")
    graph.add_argument("--limit", type=at_least_zero, default=20, metavar="N",
                       help="(communities) communities shown (%(default)s)")
    graph.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Show an entity or the communities, or rebuild the graph."""
    engine = open_engine(args, create=False)
    try:
        if args.action == "rebuild":
            _rebuild(engine)
        elif args.action == "communities":
            say(communities(engine, args.level, limit=args.limit))
        elif not args.entity:
            raise InvalidParams("`graph show` needs an ENTITY", field="entity")
        else:
            say(neighbourhood(engine, " ".join(args.entity), neighbours=args.neighbours,
                              chunks=args.chunks))
    finally:
        engine.close()
    return 0


def _rebuild(engine: Any) -> None:
    """Build the graph, then its communities, again; print what each builder did."""
    if "node" not in engine.builders:
        raise CapabilityMissing(
            f"the engine at {engine.path} builds no knowledge graph: turn it on with "
            f"`rcp-agentic index PATH... --graph --engine {engine.path}`",
            field="build_graph")
    for only in ("node", "community"):
        for report in engine.update_derived(full=True, only=only):
            say(report.describe())
    say(f"Index version {engine.index_version}")
