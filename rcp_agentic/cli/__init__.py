"""The ``rcp-agentic`` command: ``index`` files and folders, ``query`` an engine, show its ``tree``
and its knowledge ``graph``, ``calibrate`` its confidence, ``serve`` it over RCP/1.

One module per subcommand adds its sub-parser and its handler; ``output`` makes what is
printed inert, ``engines`` opens and warms an engine, ``args`` holds the shared options. A
report prints its own line (``DerivedReport.describe``, ``AddResult.describe``). ``--engine``
defaults to ``$RCP_AGENTIC_ENGINE`` or ``./.rcp-agentic``. Errors are printed as
``error: <message> [RCP <code>]`` on stderr with exit status 2; Ctrl-C prints ``interrupted``
and exits with status 130 (:mod:`.interrupt`). Text that came from a document or a server is printed with its
control characters and bidi marks escaped (:func:`~.output.inert`).
"""

from __future__ import annotations

import argparse

from ..errors import RCPError
from . import calibrate, graph, index, query, serve, tree
from .interrupt import guarded
from .output import log_to_stderr, say

# The subcommands, in the order --help lists them.
COMMANDS = (index, query, tree, graph, calibrate, serve)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand; each sets ``func``, its handler."""
    parser = argparse.ArgumentParser(prog="rcp-agentic",
                                     description="Retrieval engine for agentic RAG (RCP/1).")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    log_to_stderr()
    try:
        args = build_parser().parse_args(argv)
        with guarded():
            return int(args.func(args))
    except RCPError as exc:
        say(f"error: {exc.message} [RCP {exc.code}]", err=True)
        return 2
    except KeyboardInterrupt:
        say("interrupted", err=True)
        return 130


__all__ = ["build_parser", "main"]
