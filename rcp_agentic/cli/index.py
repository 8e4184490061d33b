"""``rcp-agentic index PATH...``: index files and folders into an engine, and turn its RAPTOR
tree (``--tree``) or knowledge graph (``--graph``) on. Prints what was written, what the
engine now holds, what each derived builder did and the files skipped with their reasons."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import InvalidParams
from .args import add_backend_args, add_llm_args
from .engines import engine_dir, open_engine
from .interrupt import checkpoint
from .output import inert, say


def add_command(sub: Any) -> None:
    """The ``index`` sub-parser."""
    idx = sub.add_parser("index", help="index files and folders (txt, md, html, pdf, jsonl)")
    idx.add_argument("paths", nargs="+", metavar="PATH")
    idx.add_argument("--engine", metavar="DIR", help="engine directory (default: "
                     "$RCP_AGENTIC_ENGINE or ./.rcp-agentic)")
    add_backend_args(idx)
    add_llm_args(idx)
    idx.add_argument("--follow-symlinks", action="store_true",
                     help="follow symlinks that lead outside the folders given (skipped otherwise)")
    idx.add_argument("--quiet", action="store_true", help="no progress bar")
    idx.add_argument("--tree", action="store_true",
                     help="build a RAPTOR tree (tree-node units) over the chunks, and keep it up "
                     "to date on every later write (saved in the engine's config)")
    idx.add_argument("--graph-extractor", metavar="NAME",
                     help="with --graph: 'builtin' (default), 'llm' (the --llm-* endpoint) or "
                     "'spacy:<pipeline>'")
    idx.add_argument("--graph", action="store_true",
                     help="build a knowledge graph (node and triplet units) over the chunks, and "
                     "keep it up to date on every later write (saved in the engine's config)")
    idx.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Index ``args.paths``; print the result."""
    from tqdm import tqdm

    from ..corpus.loaders import bounded_skips

    for p in args.paths:
        # lexists: a named symlink that loops or dangles is a skipped entry, not "missing".
        if not os.path.lexists(p):
            raise InvalidParams(f"no such file or folder: {p}", field="paths")
    if args.tree:
        _enable(engine_dir(args.engine), "build_tree")
    if args.graph:
        _enable(engine_dir(args.engine), "build_graph")
    engine = open_engine(args, create=True, build_tree=args.tree or None,
                         build_graph=args.graph or None, graph_extractor=args.graph_extractor)
    def indexed(_id: str) -> None:
        bar.update(1)
        checkpoint()

    with tqdm(desc="indexing", unit="doc", disable=args.quiet or None, file=sys.stderr) as bar:
        result = engine.index_paths(args.paths, on_document=indexed,
                                    follow_symlinks=args.follow_symlinks)
    if (args.tree or args.graph) and not result.derived:
        # Nothing new was written: build over what is there.
        result.derived = engine.update_derived()
    stats = engine.stats()
    say(result.describe(engine.path))
    say(f"Engine now holds {stats.get('documents', 0)} documents, {stats.get('chunk', 0)} "
        f"chunks, {stats.get('page', 0)} pages; index version {engine.index_version}")
    for report in result.derived:
        say(report.describe())
    if result.skipped:
        say(f"Skipped {len(result.skipped)} file(s):")
        for s in bounded_skips(result.skipped):
            say(f"  {inert(s.path)}: {inert(s.reason)}")
    return 0


def _enable(path: Path, switch: str) -> None:
    """Turn a builder's switch (``build_tree``, ``build_graph``) on in an existing engine's
    ``config.json`` (a new engine saves it when it is created), so later opens keep its
    units up to date."""
    from pydantic import ValidationError

    from ..config import CONFIG_FILE, EngineConfig

    file = path / CONFIG_FILE
    if not file.is_file():
        return
    try:
        stored = json.loads(file.read_text("utf-8"))
        if stored.get(switch) is True:
            return
        EngineConfig.model_validate({**stored, switch: True}).save(path)
    except (OSError, ValueError, ValidationError) as exc:
        raise InvalidParams(f"cannot turn {switch} on in {file}: {exc}", field="engine") from None
