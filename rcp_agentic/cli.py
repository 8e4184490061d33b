"""The ``rcp-agentic`` command: ``index`` files and folders, ``query`` an engine, show its ``tree``
and its knowledge ``graph``.

``--engine`` defaults to ``$RCP_AGENTIC_ENGINE`` or ``./.rcp-agentic``. Errors are
printed as ``error: <message> [RCP <code>]`` on stderr with exit status 2; Ctrl-C prints
``interrupted`` and exits with status 130. Text that came from a document or a server is
printed with its control characters and bidi marks escaped (:func:`inert`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import signal
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import units
from .errors import CapabilityMissing, InvalidParams, RCPError
from .protocol.listener import ServerLimits
from .vocabulary import MODES

if TYPE_CHECKING:
    from .engine import Engine
    from .warm import WarmReport

# C0 and C1 controls, DEL, and the marks that reorder or hide text (bidi embeddings,
# overrides, isolates): printed raw, a document's or a server's text could clear the screen,
# retitle the window, write the clipboard (OSC 52) or show a line other than it is.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# The unsafe characters that are whitespace: a snippet folds them into single spaces.
_WHITESPACE_CONTROLS = "".join(c for c in map(chr, range(0xa0)) if c.isspace() and c != " ")


def inert(text: str, keep: str = "", *, json_text: bool = False) -> str:
    """``text`` safe to print on a terminal: each unsafe character (but those in ``keep``) as
    a visible escape, ``\\x1b`` or ``\\u202e``; all ``\\uXXXX`` with ``json_text``, which
    keeps JSON valid (JSON puts these characters only inside strings)."""
    def escape(match: re.Match[str]) -> str:
        char = match.group()
        if char in keep:
            return char
        if ord(char) < 0x100 and not json_text:
            return f"\\x{ord(char):02x}"
        return f"\\u{ord(char):04x}"

    return _UNSAFE.sub(escape, text)


def _say(text: str, *, err: bool = False) -> None:
    """Print ``text`` (one line or several) on stdout, or stderr with ``err``, made inert."""
    print(inert(text, keep="\n\t"), file=sys.stderr if err else sys.stdout, flush=err)


class _InertFormatter(logging.Formatter):
    """Log lines made inert: a warning may quote a document or a server's reply."""

    def format(self, record: logging.LogRecord) -> str:
        return inert(super().format(record), keep="\n\t")


def _engine_dir(arg: str | None) -> Path:
    from .engine import default_engine_dir

    return Path(arg) if arg else default_engine_dir()


def _open(args: argparse.Namespace, *, create: bool, catch_up: bool = False,
          **overrides: Any) -> Any:
    """The engine of ``--engine``. A command builds derived units in the background only
    when it serves (``catch_up``: lagging kinds caught up at open, each write's built off
    the write path, unless configured inline); ``index`` builds them inline in its own
    write, and a read command reports the lag instead of waiting for a builder at exit."""
    from .engine import Engine

    path = _engine_dir(args.engine)
    if not create and not (path / "engine.db").exists():
        raise InvalidParams(f"no engine at {path}: run `rcp-agentic index PATH --engine {path}` "
                            "first", field="engine")
    engine = Engine(path, catch_up=catch_up,
                    derived_updates=None if catch_up else "inline",
                    **_backend_overrides(args), **_llm_overrides(args), **overrides)
    if engine.chat is not None and not catch_up and not getattr(args, "quiet", False):
        engine.chat.progress = _llm_progress()
    return engine


def _llm_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The LLM flags of a command (unset ones leave the engine's saved config)."""
    return {name: getattr(args, name, None) for name in (
        "llm_base_url", "llm_model", "llm_api_key_env", "llm_max_tokens", "llm_timeout_seconds",
        "llm_retries", "llm_concurrency", "llm_build_token_budget")}


def _add_llm_args(parser: argparse.ArgumentParser) -> None:
    llm = parser.add_argument_group(
        "LLM", "an OpenAI-compatible endpoint for LLM summaries, graph extraction, community "
        "reports and query transforms (the key is read from the environment, never saved)")
    llm.add_argument("--llm-base-url", metavar="URL",
                     help="e.g. http://127.0.0.1:8080/v1 (llama.cpp, vLLM, Ollama) or "
                     "https://api.openai.com/v1")
    llm.add_argument("--llm-model", metavar="NAME", help="the model to call")
    llm.add_argument("--llm-api-key-env", metavar="VAR",
                     help="environment variable holding the key (default OPENAI_API_KEY)")
    llm.add_argument("--llm-token-budget", dest="llm_build_token_budget", type=_positive(int),
                     metavar="N", help="LLM tokens one build may spend; past it the build stops "
                     "cleanly and the next run goes on from the LLM cache")


def _llm_progress() -> Any:
    """A progress callback drawing one bar per LLM stage on stderr."""
    from tqdm import tqdm

    bars: dict[str, Any] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None or bar.total != total:
            if bar is not None:
                bar.close()
            bar = bars[stage] = tqdm(total=total, desc=f"LLM {stage}", unit="call",
                                     file=sys.stderr, leave=False)
        bar.n = done
        bar.refresh()
        if done >= total:
            bar.close()
            del bars[stage]

    return progress


def _llm_part(report: Any) -> str:
    """What a build's LLM calls cost, as a clause (empty without any)."""
    u = report.llm
    if not u:
        return ""
    fallbacks = sum(u.get("fallbacks", {}).values())
    extra = [f"{u['cached']} cached"] if u.get("cached") else []
    if u.get("retries"):
        extra.append(f"{u['retries']} retried")
    if fallbacks:
        extra.append(f"{fallbacks} replies unused")
    return (f"; LLM: {u['calls']} calls" + (f" ({', '.join(extra)})" if extra else "")
            + f", {u['promptTokens']:,} prompt + {u['completionTokens']:,} completion tokens")


def _backend_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The storage flags of a command (unset ones leave the engine's saved config)."""
    return {"chroma_url": getattr(args, "chroma_url", None),
            "backend": getattr(args, "backend", None),
            "milvus_uri": getattr(args, "milvus_uri", None)}


def _add_backend_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chroma-url", metavar="URL", help="use a `chroma run` server")
    parser.add_argument("--backend", choices=("embedded", "milvus"),
                        help="where recall runs (default: the engine's saved choice, else "
                        "embedded); see docs/scaling.md")
    parser.add_argument("--milvus-uri", metavar="URI",
                        help="with --backend milvus: a path ending in .db (Milvus Lite) or "
                        "http://host:19530 (also RCP_AGENTIC_MILVUS_URI)")


def cmd_index(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .corpus.loaders import bounded_skips

    for p in args.paths:
        # lexists: a named symlink that loops or dangles is a skipped entry, not "missing".
        if not os.path.lexists(p):
            raise InvalidParams(f"no such file or folder: {p}", field="paths")
    if args.tree:
        _enable(_engine_dir(args.engine), "build_tree")
    if args.graph:
        _enable(_engine_dir(args.engine), "build_graph")
    engine = _open(args, create=True, build_tree=args.tree or None,
                   build_graph=args.graph or None, graph_extractor=args.graph_extractor)
    with tqdm(desc="indexing", unit="doc", disable=args.quiet or None, file=sys.stderr) as bar:
        result = engine.index_paths(args.paths, on_document=lambda _id: bar.update(1),
                                    follow_symlinks=args.follow_symlinks)
    if (args.tree or args.graph) and not result.derived:
        result.derived = engine.update_derived()  # nothing new was written: build over what is there
    stats = engine.stats()
    _say(f"Indexed {result.documents} documents ({result.chunks} chunks, {result.pages} pages) "
          f"in {result.seconds:.1f}s ({result.seconds_embedding:.1f}s embedding) "
          f"into {engine.path}")
    _say(f"Engine now holds {stats.get('documents', 0)} documents, {stats.get('chunk', 0)} "
          f"chunks, {stats.get('page', 0)} pages; index version {engine.index_version}")
    for report in result.derived:
        _say(_derived_line(report))
    if result.skipped:
        _say(f"Skipped {len(result.skipped)} file(s):")
        for s in bounded_skips(result.skipped):
            _say(f"  {inert(s.path)}: {inert(s.reason)}")
    return 0


def _enable(path: Path, switch: str) -> None:
    """Turn a builder's switch (``build_tree``, ``build_graph``) on in an existing engine's
    ``config.json`` (a new engine saves it when it is created), so later opens keep its
    units up to date."""
    from pydantic import ValidationError

    from .config import CONFIG_FILE, EngineConfig

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


def _derived_line(report: Any) -> str:
    """One line saying what a derived-unit builder run did (a ``DerivedReport``)."""
    return _plain_line(report) + _llm_part(report)


def _plain_line(report: Any) -> str:
    if report.unit == "node":
        return _graph_line(report)
    if report.unit == "community":
        return _community_line(report)
    if report.mode == "none":
        return f"Tree ({report.unit}): up to date, {report.kept} nodes on {report.levels} " \
               f"level(s){f' ({report.reason})' if report.reason != 'up to date' else ''}"
    why = f"; {report.reason}" if report.reason else ""
    what = "full build" if report.mode == "full" else f"{report.mode} update"
    return (f"Tree ({report.unit}): {what}, {report.added} nodes added, "
            f"{report.retired} retired, {report.kept} kept; {report.levels} level(s) in "
            f"{report.seconds:.1f}s ({report.seconds_summarising:.1f}s summarising, "
            f"{report.seconds_embedding:.1f}s embedding{why})")


def _graph_line(report: Any) -> str:
    """What a run of the graph builder did."""
    if report.mode == "none":
        return f"Graph (node, triplet): {report.reason or 'up to date'}, {report.kept} units"
    c = report.counts
    why = f"; {report.reason}" if report.reason else ""
    what = "full build" if report.mode == "full" else f"{report.mode} update"
    return (f"Graph (node, triplet): {what}, {c.get('nodes', 0)} nodes, "
            f"{c.get('triplets', 0)} triplets, {c.get('synonyms', 0)} synonym edges over "
            f"{c.get('chunks', 0)} chunks; {report.added} units written, {report.retired} "
            f"retired, {report.kept} kept in {report.seconds:.1f}s ({c.get('extracted', 0)} "
            f"chunks extracted in {report.seconds_extracting:.1f}s, {c.get('embedded', 0)} "
            f"texts embedded in {report.seconds_embedding:.1f}s{why})")


def _community_line(report: Any) -> str:
    """What a run of the community builder did."""
    if report.mode == "none":
        return (f"Communities: {report.reason or 'up to date'}, {report.kept} communities"
                + (f" on {report.levels + 1} level(s)" if report.kept else ""))
    c = report.counts
    why = f"; {report.reason}" if report.reason else ""
    what = "full build" if report.mode == "full" else f"{report.mode} update"
    return (f"Communities: {what}, {c.get('communities', 0)} communities on "
            f"{report.levels + 1} level(s) over {c.get('entities', 0)} entities; "
            f"{report.added} written, {report.retired} retired, {report.kept} kept, "
            f"{c.get('reports_written', 0)} reports written in {report.seconds:.1f}s "
            f"({report.seconds_clustering:.1f}s clustering, {report.seconds_summarising:.1f}s "
            f"reports, {report.seconds_embedding:.1f}s embedding{why})")


def _tree_engine(args: argparse.Namespace) -> Any:
    """The engine of ``tree show|rebuild``; CapabilityMissing when it builds no tree."""
    engine = _open(args, create=False)
    if "tree-node" not in engine.builders:
        engine.close()
        raise CapabilityMissing(
            f"the engine at {engine.path} builds no RAPTOR tree: turn it on with "
            f"`rcp-agentic index PATH... --tree --engine {engine.path}`", field="build_tree")
    return engine


def cmd_tree(args: argparse.Namespace) -> int:
    from .raptor.outline import outline

    engine = _tree_engine(args)
    try:
        if args.action == "rebuild":
            for report in engine.update_derived(full=True, only="tree-node"):
                _say(_derived_line(report))
            _say(f"Index version {engine.index_version}")
        else:
            _say(outline(engine, samples=args.samples).render())
    finally:
        engine.close()
    return 0


def cmd_graph(args: argparse.Namespace) -> int:
    engine = _open(args, create=False)
    try:
        if args.action == "rebuild":
            if "node" not in engine.builders:
                raise CapabilityMissing(
                    f"the engine at {engine.path} builds no knowledge graph: turn it on with "
                    f"`rcp-agentic index PATH... --graph --engine {engine.path}`",
                    field="build_graph")
            for only in ("node", "community"):
                for report in engine.update_derived(full=True, only=only):
                    _say(_derived_line(report))
            _say(f"Index version {engine.index_version}")
            return 0
        if args.action == "communities":
            _say(_communities(engine, args.level, limit=args.limit))
            return 0
        if not args.entity:
            raise InvalidParams("`graph show` needs an ENTITY", field="entity")
        _say(_neighbourhood(engine, " ".join(args.entity), neighbours=args.neighbours,
                             chunks=args.chunks))
    finally:
        engine.close()
    return 0


REPORT_LINES = 4  # lines of each community's report `graph communities` prints


def _communities(engine: Any, level: int | None, *, limit: int) -> str:
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


def _neighbourhood(engine: Any, name: str, *, neighbours: int, chunks: int) -> str:
    """An entity's neighbourhood as text: what it is, its strongest relations with their
    evidence, its synonyms, and the chunks that mention it."""
    from .graph.index import find_entity, node_uid

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
        lines.append(f"  {r.weight:6.3f}  {other.name:<28.28}  {_snippet(r.relation, 40)}")
        lines.append(f"          {_snippet(r.evidence, 88)}")
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


def _snippet(text: str | None, width: int) -> str:
    flat = " ".join((text or "").split())
    return textwrap.shorten(flat, width=width, placeholder=" …") if flat else ""


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


def cmd_query(args: argparse.Namespace) -> int:
    engine = _open(args, create=False)
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
        _say(inert(json.dumps(result.to_wire(), ensure_ascii=False, indent=2), "\n",
                   json_text=True))
        return 0
    if not result.hits:
        _say("No hits.")
        return 0
    # A levelled unit (tree-node) pools several kinds and levels: say which each hit is.
    levelled = bool(args.unit) and units.get(args.unit).levelled
    rows = [(hit, inert(hit.id), inert(_where(hit))) for hit in result.hits]
    id_w = min(48, max(2, *(len(i) for _h, i, _w in rows)))
    src_w = min(32, max(6, *(len(w) for _h, _i, w in rows)))
    unit_w = max(4, *(len(_unit_label(h)) for h in result.hits)) if levelled else 0
    unit_head = f"{'unit':<{unit_w}}  " if levelled else ""
    _say(f"{'#':>2}  {'score':>8}  {'conf':>5}  {unit_head}{'id':<{id_w}}  "
          f"{'source':<{src_w}}  text")
    for rank, (hit, ident, where) in enumerate(rows, start=1):
        conf = f"{hit.confidence:.2f}" if hit.confidence is not None else "-"
        unit_cell = f"{_unit_label(hit):<{unit_w}}  " if levelled else ""
        text = _snippet(inert(hit.text or "", _WHITESPACE_CONTROLS), 56)
        _say(f"{rank:>2}  {hit.score:>8.4f}  {conf:>5}  {unit_cell}{ident[:id_w]:<{id_w}}  "
             f"{where[:src_w]:<{src_w}}  {text}")
    usage = result.usage
    if usage:
        _say(f"({len(result.hits)} hits from {usage.candidates} candidates in "
              f"{usage.latency_ms:.1f} ms; index version {result.index_version})")
        for note in usage.notes or []:
            _say(f"note: {note}")
    return 0


def _read_beir(queries_path: str, qrels_path: str) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """BEIR files: queries.jsonl (``{"_id", "text"}``) and a qrels TSV (query, doc, grade)."""
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    try:
        with open(queries_path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if line.strip():
                    rec = json.loads(line)
                    queries[str(rec["_id"])] = str(rec["text"])
        with open(qrels_path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                cols = line.rstrip("\n").split("\t")
                if len(cols) < 3 or (n == 1 and not cols[2].strip().lstrip("-").isdigit()):
                    continue  # header or blank line
                qrels.setdefault(cols[0], {})[cols[1]] = int(cols[2])
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidParams(f"cannot read BEIR files: {exc}", field="queries") from None
    judged = {q: t for q, t in queries.items() if q in qrels}
    if not judged:
        raise InvalidParams("no query in QUERIES has judgements in QRELS", field="qrels")
    return judged, {q: qrels[q] for q in judged}


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .engine import CALIBRATION_FILE
    from .pipeline.calibration_fit import calibrate_engine

    engine = _open(args, create=False)
    queries, qrels = _read_beir(args.queries, args.qrels)
    calibrator, metrics = calibrate_engine(engine, queries, qrels, k=args.k)
    target = engine.path / CALIBRATION_FILE
    calibrator.save(target)
    _say(f"Fitted confidence on {len(queries)} judged queries; saved to {target}")
    held_out = metrics.get("cv") or metrics.get("train") or {}
    for key, m in sorted(held_out.items()):
        if isinstance(m, dict) and "ece" in m:
            _say(f"  {key:<18} ECE {m['ece']:.4f}  AUROC {m['auroc']:.4f}  (n={m['n']})")
    kept = calibrator.fitted_on.get("kept") or []
    if kept:
        _say(f"  kept {len(kept)} models your labels did not cover "
             f"({', '.join(sorted({k.split('/')[1].split(':')[0] for k in kept}))})")
    return 0


def _hosted_indexes(specs: list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise InvalidParams(f"--index takes NAME=DIR, not {spec!r}", field="index")
        if name in out:
            raise InvalidParams(f"--index {name!r} given twice", field="index")
        if not (Path(path) / "engine.db").exists():
            raise InvalidParams(f"--index {name}: no engine at {path}", field="index")
        out[name] = Path(path)
    return out


def _warn_if_exposed(host: str, token: str | None, anonymous_writes: bool) -> None:
    """Say loudly on stderr when a non-loopback server answers callers without a token."""
    from .protocol.guard import is_loopback

    if token is not None or is_loopback(host):
        return
    what = "reads AND WRITES" if anonymous_writes else "reads"
    print(f"rcp-agentic: WARNING: listening on {host}, which is not loopback, without a "
          f"bearer token: anyone who can reach this address can make {what}. Set "
          "$RCP_AGENTIC_TOKEN, or bind to 127.0.0.1.", file=sys.stderr, flush=True)


def _at_least_zero(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text}")
    return value


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, not {text}")
        return value

    return parse


def _warm(engine: Engine, args: argparse.Namespace) -> WarmReport | None:
    """``engine.warm()`` unless ``--no-warm`` (then None); anything loading prints goes to
    stderr (over stdio, stdout carries only protocol frames)."""
    if args.no_warm:
        return None
    with contextlib.redirect_stdout(sys.stderr):
        return engine.warm()


def _say_ready(transport: str, engine: Engine, report: WarmReport | None,
               url: str | None = None) -> None:
    from .warm import ready_line

    _say(ready_line(transport, report, engine.index_version, url), err=True)


def cmd_serve(args: argparse.Namespace) -> int:
    engine = _open(args, create=True, catch_up=True)
    if args.http:
        _serve_http(engine, args)
    else:
        from .protocol.stdio import serve_stdio

        try:
            report = _warm(engine, args)
            _say_ready("stdio", engine, report)
            serve_stdio(engine)
        finally:
            engine.close()
    return 0


def _serve_http(engine: Engine, args: argparse.Namespace) -> None:
    """``serve --http``: the hosted-API route serves the main engine as "default" and each
    --index NAME=DIR beside it (sharing the main engine's embedding model); every engine is
    warmed before the socket listens."""
    from .engine import Engine
    from .protocol.http import serve_http

    hosted = {"default": engine}
    try:
        for name, path in _hosted_indexes(args.index).items():
            hosted[name] = Engine(path, embedder=engine.embedder.inner,
                                  **_backend_overrides(args))
        token = os.environ.get("RCP_AGENTIC_TOKEN") or None
        _warn_if_exposed(args.host, token, args.allow_anonymous_writes)
        reports = [_warm(e, args) for e in hosted.values()]

        def listening(url: str) -> None:
            print(f"rcp-agentic: serving RCP/1 on {url}/rcp", file=sys.stderr, flush=True)
            _say_ready("http", engine, reports[0], url)

        limits = ServerLimits(header_timeout=args.header_timeout,
                              body_timeout=args.body_timeout,
                              keep_alive_timeout=args.timeout_keep_alive,
                              max_connections=args.limit_concurrency)
        serve_http(engine, host=args.host, port=args.port, token=token,
                   cors_origins=args.cors_origin, hosted_engines=hosted,
                   stateful=args.stateful, allowed_hosts=args.allowed_host,
                   allow_anonymous_writes=args.allow_anonymous_writes, limits=limits,
                   on_listening=listening)
    finally:
        for other in hosted.values():
            other.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rcp-agentic",
                                     description="Retrieval engine for agentic RAG (RCP/1).")
    sub = parser.add_subparsers(dest="command", required=True)
    _index_command(sub)
    _query_command(sub)
    _tree_command(sub)
    _graph_command(sub)
    _calibrate_command(sub)
    _serve_command(sub)
    return parser


def _index_command(sub: Any) -> None:
    """``index PATH...``: index files and folders."""
    idx = sub.add_parser("index", help="index files and folders (txt, md, html, pdf, jsonl)")
    idx.add_argument("paths", nargs="+", metavar="PATH")
    idx.add_argument("--engine", metavar="DIR", help="engine directory (default: "
                     "$RCP_AGENTIC_ENGINE or ./.rcp-agentic)")
    _add_backend_args(idx)
    _add_llm_args(idx)
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
    idx.set_defaults(func=cmd_index)


def _query_command(sub: Any) -> None:
    """``query TEXT``: retrieve hits."""
    from .options import TREE_SEARCHES

    q = sub.add_parser("query", help="retrieve hits for a query")
    q.add_argument("text", metavar="TEXT")
    q.add_argument("--engine", metavar="DIR")
    _add_backend_args(q)
    _add_llm_args(q)
    q.add_argument("--k", type=int, default=5)
    q.add_argument("--mode", choices=list(MODES))
    q.add_argument("--unit", choices=units.known())
    q.add_argument("--level", type=_at_least_zero, metavar="N",
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
    q.set_defaults(func=cmd_query)


def _tree_command(sub: Any) -> None:
    """``tree show|rebuild``: the RAPTOR tree."""
    tree = sub.add_parser("tree", help="the RAPTOR tree of an engine built with --tree")
    tree.add_argument("action", choices=["show", "rebuild"],
                      help="show: levels, node counts, leaf coverage, sample summaries; "
                      "rebuild: build the whole tree again now")
    tree.add_argument("--engine", metavar="DIR")
    _add_backend_args(tree)
    _add_llm_args(tree)
    tree.add_argument("--samples", type=_at_least_zero, default=2, metavar="N",
                      help="summaries shown per level (%(default)s)")
    tree.set_defaults(func=cmd_tree)


def _graph_command(sub: Any) -> None:
    """``graph show|communities|rebuild``: the knowledge graph."""
    graph = sub.add_parser("graph", help="the knowledge graph of an engine built with --graph")
    graph.add_argument("action", choices=["show", "communities", "rebuild"],
                       help="show ENTITY: its description, strongest relations with evidence, "
                       "synonyms and the chunks that mention it; communities: the Leiden "
                       "communities of one level with their reports; rebuild: build the whole "
                       "graph and its communities again now")
    graph.add_argument("entity", nargs="*", metavar="ENTITY", help="(show) an entity's name")
    graph.add_argument("--engine", metavar="DIR")
    _add_backend_args(graph)
    _add_llm_args(graph)
    graph.add_argument("--neighbours", type=_at_least_zero, default=10, metavar="N",
                       help="relations shown (%(default)s)")
    graph.add_argument("--chunks", type=_at_least_zero, default=10, metavar="N",
                       help="mentioning chunks shown (%(default)s)")
    graph.add_argument("--level", type=_at_least_zero, default=None, metavar="N",
                       help="(communities) the level shown: 0 the finest (default: the coarsest)")
    graph.add_argument("--limit", type=_at_least_zero, default=20, metavar="N",
                       help="(communities) communities shown (%(default)s)")
    graph.set_defaults(func=cmd_graph)


def _calibrate_command(sub: Any) -> None:
    """``calibrate QUERIES QRELS``: refit hit confidence."""
    cal = sub.add_parser("calibrate", help="refit hit confidence on your own relevance labels")
    cal.add_argument("queries", metavar="QUERIES", help="BEIR queries.jsonl")
    cal.add_argument("qrels", metavar="QRELS", help="BEIR qrels TSV (query-id, doc-id, grade)")
    cal.add_argument("--engine", metavar="DIR")
    cal.add_argument("--k", type=int, default=20, help="hits per query used for fitting")
    cal.set_defaults(func=cmd_calibrate)


def _serve_command(sub: Any) -> None:
    """``serve --stdio|--http``: serve the engine over RCP/1."""
    srv = sub.add_parser("serve", help="serve the engine over RCP/1")
    how = srv.add_mutually_exclusive_group(required=True)
    how.add_argument("--stdio", action="store_true",
                     help="newline-delimited JSON-RPC on stdin/stdout (logs go to stderr)")
    how.add_argument("--http", action="store_true",
                     help="POST /rcp/<method>; bearer token from $RCP_AGENTIC_TOKEN if set "
                     "(writes need one unless --allow-anonymous-writes)")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8750)
    srv.add_argument("--engine", metavar="DIR")
    _add_backend_args(srv)
    _add_llm_args(srv)
    srv.add_argument("--no-warm", action="store_true",
                     help="serve at once, loading the model and the index's structures on "
                     "first use (the first requests are slower); by default they are loaded "
                     "before the ready line")
    srv.add_argument("--index", action="append", default=[], metavar="NAME=DIR",
                     help="(HTTP) also serve the engine in DIR as index_id NAME on "
                     "/api/v1/retrieval/retrieve; the main engine is index_id 'default'")
    srv.add_argument("--stateful", action="store_true",
                     help="(HTTP) keep the initialize lifecycle per RCP-Session header (one "
                     "shared session without it) instead of answering statelessly")
    srv.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                     help="(HTTP) allow browser calls from ORIGIN; no CORS headers otherwise "
                     "(other origins are refused with 403)")
    srv.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                     help="(HTTP) also answer requests whose Host header is NAME (besides the "
                     "--host address and loopback names; '*' for any); others get 421")
    srv.add_argument("--allow-anonymous-writes", action="store_true",
                     help="(HTTP) without $RCP_AGENTIC_TOKEN, let callers without a token "
                     "use index/add, index/delete, feedback (refused with 401 otherwise)")
    srv.add_argument("--header-timeout", type=_positive(float),
                     default=ServerLimits.header_timeout, metavar="S",
                     help="(HTTP) close a connection whose request head takes longer "
                     "(%(default)g)")
    srv.add_argument("--body-timeout", type=_positive(float), default=ServerLimits.body_timeout,
                     metavar="S", help="(HTTP) answer 408 to a request body that takes longer "
                     "(%(default)g)")
    srv.add_argument("--timeout-keep-alive", type=_positive(float),
                     default=ServerLimits.keep_alive_timeout, metavar="S",
                     help="(HTTP) close an idle keep-alive connection after S seconds "
                     "(%(default)g)")
    srv.add_argument("--limit-concurrency", type=_positive(int), metavar="N",
                     help="(HTTP) answer 503 past N open connections (default: what the "
                     "open-file limit allows, at most 4096)")
    srv.set_defaults(func=cmd_serve)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    _log_to_stderr()
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except RCPError as exc:
        _say(f"error: {exc.message} [RCP {exc.code}]", err=True)
        return 2
    except KeyboardInterrupt:
        # A second Ctrl-C while the engine closes on the way out ends the process at once.
        with contextlib.suppress(ValueError):  # main() called off the main thread
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        _say("interrupted", err=True)
        return 130


def _log_to_stderr() -> None:
    """Warnings and errors of every logger on stderr, made inert."""
    handler = logging.StreamHandler()
    handler.setFormatter(_InertFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])  # unless set up already
    logging.getLogger("pypdf").setLevel(logging.ERROR)


if __name__ == "__main__":
    sys.exit(main())
