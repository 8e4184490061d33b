"""How well the offline extractor finds the entities that link hops, and how clean it is off Wikipedia.

    python bench/bridge_entities.py bridge [--sets musique-train hotpotqa 2wikimultihopqa]
    python bench/bridge_entities.py debian [--docs /usr/share/doc/git ...]

Results merge under each subcommand's key (or ``--key``) into
``bench/results/bridge_entities.json``.

* ``bridge`` — the graph is built with :class:`~rcp_agentic.graph.BuiltinExtractor` (plus
  the title lexicon, as ``build_graph`` aggregates mentions) over one chunk per passage
  (``title\\n\\ntext``, the title as document title, as ``bench/graph.py`` indexes them).
  On musique-train, every hop ``j`` whose question names ``#i`` gives a bridge: hop
  ``i``'s answer (as a name: leading lowercase words such as "in London" dropped), which should be an entity of hop ``i``'s passage and resolve to the same
  node in hop ``j``'s passage. A passage *holds* the answer when one of its mentions has
  the answer's key (:func:`~rcp_agentic.graph.entity_key`) as its own key or as the node it
  resolves to, or when the passage is about it (its title). Reported: found in the hop-i
  passage %, in the hop-j passage %, same node in both %, and each miss by category
  (the first that applies): ``date/number``; ``not in text`` (the answer's words are not
  in the passage); ``lowercase`` (written lowercase there: a common noun);
  ``punctuation`` (the answer has inner punctuation: "G. Stanley Hall", "Washington,
  D.C."); ``partial/alias`` (a mention shares a word with it but has another key);
  ``other``. On every set, *title links*: for two gold passages A, B of a question where
  B's title is written in A, does a mention of A resolve to B's about-node?
* ``debian`` — the Debian documentation of git, valgrind, libxslt and pip, loaded and
  chunked as ``rcp-agentic index`` does (the engine's loaders and chunker, 200/30), the
  graph built in memory: nodes named "Valgrind" (any case or possessive), Valgrind
  mentions resolved to another node, date entities written as a bare number, entities
  other than dates without a letter, junk relations (an end other than a date without a
  letter, or relation words that are a rule line or hold no letter), and the junk among
  the key relations of the offline community reports.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.graph import load_set, save  # noqa: E402
from rcp_agentic.graph import (BuiltinExtractor, ChunkText, GraphCache,  # noqa: E402
                               GraphData, build_graph, entity_key)
from rcp_agentic.graph.build import resolved_mentions  # noqa: E402
from rcp_agentic.graph.extract import STOPWORDS, fold, title_entries, tokens  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "bridge_entities.json"
SETS = ("musique-train", "hotpotqa", "2wikimultihopqa")
DEBIAN = ("/usr/share/doc/git", "/usr/share/doc/valgrind", "/usr/share/doc/libxslt1.1",
          "/usr/share/doc/python3-pip")
CATEGORIES = ("date/number", "not in text", "lowercase", "punctuation", "partial/alias", "other")

_NUMBERISH = re.compile(
    r"^(?:c\.\s*)?[\d\s,.\-–/]+(?:s|st|nd|rd|th|bc|bce|ad|ce|%)?$"
    r"|\b(?:january|february|march|april|may|june|july|august|september|october|november|"
    r"december)\b.*\d|\d.*\b(?:january|february|march|april|may|june|july|august|september|"
    r"october|november|december)\b", re.IGNORECASE)
_INNER_PUNCT = re.compile(r"\w[.,'’\-&:()/]+\s*\w")


def passage_chunks(docs: Sequence[dict[str, Any]]) -> list[ChunkText]:
    """One chunk per passage, keyed ``r1, r2, ...`` in corpus order, its title as document title."""
    return [ChunkText(f"r{i + 1}", d["id"], d["id"], d["title"], d["text"], 0)
            for i, d in enumerate(docs)]


class PassageIndex:
    """Per chunk: its mentions' (own key, resolved node) pairs and the nodes it is about."""

    def __init__(self, chunks: Sequence[ChunkText], graph: GraphData, cache: GraphCache) -> None:
        self.chunks = {c.key: c for c in chunks}
        self.key_of = {c.doc_id: c.key for c in chunks}
        self.mentions: dict[str, list[tuple[str, str, str]]] = {}
        for ck, keyed in resolved_mentions(cache).items():
            self.mentions[ck] = [(entity_key(m.surface), node, m.surface) for node, m in keyed]
        self.about: dict[str, set[str]] = defaultdict(set)
        for k, e in graph.entities.items():
            for ck in e.about:
                self.about[ck].add(k)

    def nodes(self, chunk: str, answer: str) -> set[str]:
        """The nodes of ``chunk`` that stand for ``answer``."""
        key = entity_key(answer)
        if not key:
            return set()
        out = {node for own, node, _s in self.mentions.get(chunk, ()) if key in (own, node)}
        if key in self.about.get(chunk, ()):
            out.add(key)
        return out

    def miss(self, chunk: str, answer: str) -> str:
        """Why ``answer`` is not a node of ``chunk``: the first category that applies."""
        if _NUMBERISH.search(answer.strip()):
            return "date/number"
        text = self.chunks[chunk].text
        want = [t for t, _a, _b in tokens(answer)]
        toks = tokens(text)
        words = [t for t, _a, _b in toks]
        at = next((i for i in range(len(words) - len(want) + 1)
                   if want and words[i:i + len(want)] == want), None)
        if at is None:
            return "not in text"
        if not text[toks[at][1]].isupper() and not text[toks[at][1]].isdigit():
            return "lowercase"
        if _INNER_PUNCT.search(answer):
            return "punctuation"
        parts = {w for w in entity_key(answer).split() if w not in STOPWORDS}
        for own, node, _s in self.mentions.get(chunk, ()):
            if parts & set(own.split()) or parts & set(node.split()):
                return "partial/alias"
        return "other"


def answer_name(answer: str) -> str:
    """A hop answer as a name: quotes, trailing punctuation and leading lowercase words
    dropped (MuSiQue writes "in London", "under Trajan", 'under "North Africa."')."""
    words = answer.strip().split()
    while len(words) > 1 and words[0][:1].islower():
        words = words[1:]
    return " ".join(words).strip(" \"'“”.,;:")


def musique_bridges(questions: Iterable[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(question id, answer of hop i as a name, support of hop i, support of hop j) for each
    ``#i`` in hop j's question."""
    out = []
    for q in questions:
        dec = q.get("decomposition") or []
        for j, hop in enumerate(dec):
            for ref in sorted({int(r) for r in re.findall(r"#(\d+)", hop["question"])}):
                i = ref - 1
                if 0 <= i < j:
                    out.append((q["_id"], answer_name(dec[i]["answer"]), dec[i]["support_id"],
                                hop["support_id"]))
    return out


def pct(n: int, d: int) -> float:
    return round(100.0 * n / d, 1) if d else 0.0


def bridge_recall(index: PassageIndex, bridges: Sequence[tuple[str, str, str, str]]
                  ) -> dict[str, Any]:
    """Found in hop-i / hop-j passage and same node, with miss categories, over ``bridges``."""
    found_i = found_j = same = 0
    miss_i: Counter[str] = Counter()
    miss_j: Counter[str] = Counter()
    miss_same: Counter[str] = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    for _qid, answer, si, sj in bridges:
        ci, cj = index.key_of[si], index.key_of[sj]
        ni, nj = index.nodes(ci, answer), index.nodes(cj, answer)
        found_i += bool(ni)
        found_j += bool(nj)
        same += bool(ni & nj)
        if not ni:
            cat = index.miss(ci, answer)
            miss_i[cat] += 1
            if len(examples[f"hop i: {cat}"]) < 6:
                examples[f"hop i: {cat}"].append(answer)
        if not nj:
            cat = index.miss(cj, answer)
            miss_j[cat] += 1
            if len(examples[f"hop j: {cat}"]) < 6:
                examples[f"hop j: {cat}"].append(answer)
        if ni and nj and not ni & nj:
            miss_same["resolved apart"] += 1
            if len(examples["resolved apart"]) < 6:
                examples["resolved apart"].append(f"{answer}: {sorted(ni)} / {sorted(nj)}")
    n = len(bridges)
    return {"bridges": n, "found hop-i %": pct(found_i, n), "found hop-j %": pct(found_j, n),
            "same node %": pct(same, n),
            "missed in hop-i passage": {c: miss_i[c] for c in CATEGORIES},
            "missed in hop-j passage": {c: miss_j[c] for c in CATEGORIES},
            "found in both, resolved apart": miss_same["resolved apart"],
            "examples": dict(sorted(examples.items()))}


def title_links(index: PassageIndex, chunks: Sequence[ChunkText],
                questions: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """For gold passages A != B of a question with B's title written in A: does a mention
    of A resolve to B's about-node?"""
    by_doc = {c.doc_id: c for c in chunks}
    pairs = linked = 0
    for q in questions:
        gold = [d for d in q["supporting_ids"] if d in by_doc]
        for a in gold:
            words = [t for t, _s, _e in tokens(by_doc[a].text)]
            for b in gold:
                title = by_doc[b].title
                if a == b or not title:
                    continue
                name = title_entries(title)[0]
                want = [t for t, _s, _e in tokens(name)]
                if not want or not any(words[i:i + len(want)] == want
                                       for i in range(len(words) - len(want) + 1)):
                    continue
                pairs += 1
                linked += bool(index.nodes(index.key_of[a], name) & index.about[index.key_of[b]])
    return {"pairs": pairs, "linked %": pct(linked, pairs)}


def run_bridge(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in args.sets:
        docs, questions = load_set(name)
        chunks = passage_chunks(docs)
        cache = GraphCache()
        t0 = time.perf_counter()
        graph = build_graph(chunks, BuiltinExtractor(), cache=cache)
        build_s = time.perf_counter() - t0
        index = PassageIndex(chunks, graph, cache)
        kinds = Counter(e.kind for e in graph.entities.values())
        row: dict[str, Any] = {"passages": len(chunks), "entities": len(graph.entities),
                               "relations": len(graph.relations), "kinds": dict(sorted(kinds.items())),
                               "build_s": round(build_s, 2),
                               "title links": title_links(index, chunks, questions)}
        bridges = musique_bridges(questions)
        if bridges:
            row["bridge entities"] = bridge_recall(index, bridges)
            b = row["bridge entities"]
            print(f"{name}: {b['bridges']} bridges; found in hop-i passage {b['found hop-i %']}%, "
                  f"hop-j passage {b['found hop-j %']}%, same node {b['same node %']}%")
            print(f"  missed in hop-i: {b['missed in hop-i passage']}")
            print(f"  missed in hop-j: {b['missed in hop-j passage']}")
            print(f"  found in both, resolved apart: {b['found in both, resolved apart']}")
        t = row["title links"]
        print(f"{name}: title links {t['linked %']}% of {t['pairs']}; {len(graph.entities)} "
              f"entities {dict(sorted(kinds.items()))}, {len(graph.relations)} relations, "
              f"built in {build_s:.1f} s", flush=True)
        out[name] = row
    return out


# --- Debian documentation ----------------------------------------------------------------

def debian_chunks(folders: Sequence[str], size: int = 200, overlap: int = 30) -> list[ChunkText]:
    """The folders loaded and chunked as ``rcp-agentic index`` does, keyed ``r1, r2, ...``."""
    from rcp_agentic.corpus.documents import build_record
    from rcp_agentic.corpus.loaders import load_path
    from rcp_agentic.corpus.source import SkippedFile

    chunks: list[ChunkText] = []
    for folder in folders:
        if not Path(folder).exists():
            print(f"  {folder} is missing: skipped")
            continue
        for doc in load_path(folder):
            if isinstance(doc, SkippedFile):
                continue
            record, _texts = build_record(doc, chunk_size=size, chunk_overlap=overlap, fmeta={})
            for u in record.units:
                if u.unit == "chunk":
                    chunks.append(ChunkText(f"r{len(chunks) + 1}", u.uid, record.id, record.title,
                                            u.text, int(u.start or 0)))
    return chunks


_RULE = re.compile(r"([=\-~*_#+.^:|<>/\\])\1{3,}")
_LETTERS = re.compile(r"[^\W\d_]")


def junk_relation(graph: GraphData, i: int) -> bool:
    """An end (not a date or number) without a letter, or relation words that are a rule
    line or hold no letter (the offline default ``and`` excepted)."""
    r = graph.relations[i]
    ends = (graph.entities[r.subject], graph.entities[r.object])
    if any(e.kind not in ("date", "number") and not _LETTERS.search(e.name) for e in ends):
        return True
    return bool(_RULE.search(r.relation)) or (r.relation != "and"
                                              and not _LETTERS.search(r.relation))


def report_relations(graph: GraphData, chunks: Sequence[ChunkText]) -> dict[str, int]:
    """Community reports (offline, 300 tokens) over ``graph``: how many, the key relations
    they show, and how many of those are junk (:func:`junk_relation`)."""
    from rcp_agentic.graph.communities.build import build_communities, entity_edges
    from rcp_agentic.graph.reports.extractive import ExtractiveReporter
    from rcp_agentic.graph.reports.model import ReportInput
    from rcp_agentic.models.tokenizer import count_tokens

    edges = entity_edges(graph)
    hierarchy = build_communities(graph, edges=edges)
    by_key = {c.key: c for c in chunks}
    inputs = [ReportInput(c, graph, by_key, edges) for c in hierarchy.communities.values()]
    reports = ExtractiveReporter(count_tokens).report_many(inputs, 300)
    shown = [i for r in reports for i in r.relations]
    return {"reports": len(reports), "key relations shown": len(shown),
            "junk key relations shown": sum(junk_relation(graph, i) for i in shown)}


def run_debian(args: argparse.Namespace) -> dict[str, Any]:
    chunks = debian_chunks(args.docs)
    cache = GraphCache()
    t0 = time.perf_counter()
    graph = build_graph(chunks, BuiltinExtractor(), cache=cache)
    build_s = time.perf_counter() - t0
    ents = graph.entities
    named = sorted(k for k, e in ents.items()
                   if re.sub(r"['’]s$", "", fold(e.name)).strip() == "valgrind")
    elsewhere: Counter[str] = Counter()
    for keyed in resolved_mentions(cache).values():
        for node, m in keyed:
            if re.sub(r"['’]s$", "", fold(m.surface)) == "valgrind" and node != "valgrind":
                elsewhere[node] += 1
    bare_dates = sorted(e.name for e in ents.values()
                        if e.kind == "date" and re.fullmatch(r"\d+s?", e.name.strip()))
    no_letter = sorted(e.name for e in ents.values()
                       if e.kind not in ("date", "number") and not _LETTERS.search(e.name))
    junk = [i for i in range(len(graph.relations)) if junk_relation(graph, i)]
    show = [f"{ents[graph.relations[i].subject].name} — {graph.relations[i].relation[:50]} — "
            f"{ents[graph.relations[i].object].name}" for i in junk[:12]]
    valgrind = ents.get("valgrind")
    row = {"documents": len({c.doc_id for c in chunks}), "chunks": len(chunks),
           "entities": len(ents), "relations": len(graph.relations),
           "kinds": dict(sorted(Counter(e.kind for e in ents.values()).items())),
           "build_s": round(build_s, 2),
           "nodes named Valgrind": named,
           "valgrind node chunks": len(valgrind.mentions) if valgrind else 0,
           "Valgrind mentions resolved to another node": sum(elsewhere.values()),
           "... to these nodes": dict(elsewhere.most_common(12)),
           "date entities written as a bare number": len(bare_dates),
           "... e.g.": bare_dates[:20],
           "number entities": sum(e.kind == "number" for e in ents.values()),
           "entities without a letter (not dates)": len(no_letter), "... such as": no_letter[:20],
           "junk relations": len(junk), "... like": show,
           "community reports": report_relations(graph, chunks)}
    for k, v in row.items():
        print(f"  {k:44s} {v}")
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    br = sub.add_parser("bridge")
    br.add_argument("--sets", nargs="+", default=list(SETS))
    deb = sub.add_parser("debian")
    deb.add_argument("--docs", nargs="+", default=list(DEBIAN))
    for p in (br, deb):
        p.add_argument("--key", default=None)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    result = {"bridge": run_bridge, "debian": run_debian}[args.command](args)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    key = args.key or args.command
    save(key, result, RESULTS)
    print(f"\nwrote {RESULTS} [{key}] in {result['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
