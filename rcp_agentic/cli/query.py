"""``rcp-agentic query TEXT``: retrieve hits and print them as a table (``score`` the fused
score, ``conf`` the calibrated confidence), or with ``--json`` the RCP ``retrieve`` result."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .. import units
from ..errors import InvalidParams
from ..vocabulary import MODES
from .args import add_backend_args, add_llm_args, at_least_zero
from .engines import open_engine
from .output import WHITESPACE_CONTROLS, inert, say, snippet


def add_command(sub: Any) -> None:
    """The ``query`` sub-parser."""
    from ..options import TREE_SEARCHES

    q = sub.add_parser("query", help="retrieve hits for a query")
    q.add_argument("text", metavar="TEXT")
    q.add_argument("--engine", metavar="DIR")
    add_backend_args(q)
    add_llm_args(q)
    q.add_argument("--k", type=int, default=5)
    q.add_argument("--mode", choices=list(MODES))
    q.add_argument("--unit", choices=units.known())
    q.add_argument("--level", type=at_least_zero, metavar="N",
                   help="one level of a levelled unit (tree-node: 0 = the chunks, 1.. summaries); "
                   "without it, every level in one pool (the collapsed tree)")
    q.add_argument("--tree-search", choices=TREE_SEARCHES,
                   help="tree-node without --level: one pool of every level (collapsed, the "
                   "default) or top-down through the tree (traversal)")
    q.add_argument("--graph-recall", action="store_true",
                   help="add the knowledge graph's personalised PageRank to recall (an engine "
                   "built with --graph): finds the passages a multi-hop question needs")
    q.add_argument("--filter", metavar="JSON", help='RCP filter, e.g. \'{"field":"file_type",'
                   '"op":"eq","value":"md"}\'')
    q.add_argument("--json", action="store_true", help="print the RCP retrieve result")
    q.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Retrieve ``args.text``; print the hits."""
    engine = open_engine(args, create=False)
    options: dict[str, Any] = {"mode": args.mode, "unit": args.unit, "level": args.level,
                               "tree_search": args.tree_search,
                               "graph_recall": args.graph_recall or None}
    if args.filter:
        try:
            options["filter"] = json.loads(args.filter)
        except json.JSONDecodeError as exc:
            raise InvalidParams(f"--filter is not valid JSON: {exc}", field="filter") from None
    result = engine.retrieve(args.text, k=args.k,
                             **{k: v for k, v in options.items() if v is not None})
    if args.json:
        say(inert(json.dumps(result.to_wire(), ensure_ascii=False, indent=2), "\n",
                  json_text=True))
        return 0
    if not result.hits:
        say("No hits.")
        return 0
    _say_table(result.hits, levelled=bool(args.unit) and units.get(args.unit).levelled)
    usage = result.usage
    if usage:
        say(f"({len(result.hits)} hits from {usage.candidates} candidates in "
            f"{usage.latency_ms:.1f} ms; index version {result.index_version})")
        for note in usage.notes or []:
            say(f"note: {note}")
    return 0


def _say_table(hits: list[Any], *, levelled: bool) -> None:
    """The hits as a table; ``levelled`` (a unit such as tree-node pools several kinds and
    levels) adds a column saying which each hit is."""
    rows = [(hit, inert(hit.id), inert(_where(hit))) for hit in hits]
    id_w = min(48, max(2, *(len(i) for _h, i, _w in rows)))
    src_w = min(32, max(6, *(len(w) for _h, _i, w in rows)))
    unit_w = max(4, *(len(_unit_label(h)) for h in hits)) if levelled else 0
    unit_head = f"{'unit':<{unit_w}}  " if levelled else ""
    say(f"{'#':>2}  {'score':>8}  {'conf':>5}  {unit_head}{'id':<{id_w}}  "
        f"{'source':<{src_w}}  text")
    for rank, (hit, ident, where) in enumerate(rows, start=1):
        conf = f"{hit.confidence:.2f}" if hit.confidence is not None else "-"
        unit_cell = f"{_unit_label(hit):<{unit_w}}  " if levelled else ""
        text = snippet(inert(hit.text or "", WHITESPACE_CONTROLS), 56)
        say(f"{rank:>2}  {hit.score:>8.4f}  {conf:>5}  {unit_cell}{ident[:id_w]:<{id_w}}  "
            f"{where[:src_w]:<{src_w}}  {text}")


def _unit_label(hit: Any) -> str:
    """``chunk``, or ``tree-node L2`` for a unit above level 0."""
    return f"{hit.unit} L{hit.level}" if hit.level else str(hit.unit)


def _where(hit: Any) -> str:
    """The source column: the file (and page) of a hit, or what a derived unit covers."""
    if hit.unit in units.known() and units.get(hit.unit).derived:
        leaves = len(hit.provenance.leaves or []) if hit.provenance else 0
        docs = len((hit.meta or {}).get("doc_ids") or [])
        return f"{leaves} chunks, {docs} docs"
    cite = hit.citation
    where = Path(cite.source).name if cite and cite.source else ""
    if cite and cite.page is not None:
        where += f" p.{cite.page}"
    return where
