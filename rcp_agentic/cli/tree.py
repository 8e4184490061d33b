"""``rcp-agentic tree show|rebuild``: the RAPTOR tree of an engine built with ``--tree`` — its
outline (levels, node counts, leaf coverage, sample summaries), or built again now."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import CapabilityMissing
from .args import add_backend_args, add_llm_args, at_least_zero
from .engines import open_engine
from .output import say


def add_command(sub: Any) -> None:
    """The ``tree`` sub-parser."""
    tree = sub.add_parser("tree", help="the RAPTOR tree of an engine built with --tree")
    tree.add_argument("action", choices=["show", "rebuild"],
                      help="show: levels, node counts, leaf coverage, sample summaries; "
                      "rebuild: build the whole tree again now")
    tree.add_argument("--engine", metavar="DIR")
    add_backend_args(tree)
    add_llm_args(tree)
    tree.add_argument("--samples", type=at_least_zero, default=2, metavar="N",
                      help="summaries shown per level (%(default)s)")
    tree.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Show or rebuild the tree."""
    from ..raptor.outline import outline

    engine = _tree_engine(args)
    try:
        if args.action == "rebuild":
            for report in engine.update_derived(full=True, only="tree-node"):
                say(report.describe())
            say(f"Index version {engine.index_version}")
        else:
            say(outline(engine, samples=args.samples).render())
    finally:
        engine.close()
    return 0


def _tree_engine(args: argparse.Namespace) -> Any:
    """The engine of ``tree show|rebuild``; CapabilityMissing when it builds no tree."""
    engine = open_engine(args, create=False)
    if "tree-node" not in engine.builders:
        engine.close()
        raise CapabilityMissing(
            f"the engine at {engine.path} builds no RAPTOR tree: turn it on with "
            f"`rcp-agentic index PATH... --tree --engine {engine.path}`", field="build_tree")
    return engine
