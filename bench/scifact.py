"""SciFact (BEIR layout) loading for the benchmarks.

The data lives outside the repository, in ``scifact/`` of the benchmark data root
(``$RCP_AGENTIC_DATA``, else ``../shared/data`` beside the checkout; see ``data.py``):
``corpus.jsonl`` (``{"_id","title","text"}``),
``train_queries.jsonl`` (``{"_id","text"}``) and ``train_qrels.tsv`` (a header
line, then ``query-id<TAB>corpus-id<TAB>score``). Nothing is copied.

Everything returned is a plain dict, in file order:

* ``load_corpus()``  -> ``{doc_id: title + "\\n\\n" + text}``
* ``load_queries()`` -> ``{query_id: text}`` (only queries that have qrels)
* ``load_qrels()``   -> ``{query_id: {doc_id: grade}}``
* ``load_dataset(limit, queries)`` -> the three above, mutually consistent,
  for quick runs on a subset.

``limit`` keeps a corpus subset that always contains every relevant document
of the kept queries (so subset metrics are not deflated by missing answers);
the rest of the subset is filled with the first other documents in file order.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path

if __package__:  # imported as bench.scifact
    from .data import data_path
else:  # bench/ itself is on sys.path (bench/transport.py, bench/retrievers.py)
    from data import data_path

DATA_DIR = data_path("scifact")


def doc_text(title: str, text: str) -> str:
    """The one document text used by every system: ``title + "\\n\\n" + text``."""
    return f"{title}\n\n{text}"


def load_qrels(data_dir: Path | str = DATA_DIR, split: str = "train") -> dict[str, dict[str, int]]:
    """``{query_id: {doc_id: grade}}`` from ``<split>_qrels.tsv`` (header skipped)."""
    qrels: dict[str, dict[str, int]] = {}
    with open(Path(data_dir) / f"{split}_qrels.tsv", newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter="\t")
        next(reader, None)  # header: query-id corpus-id score
        for row in reader:
            if not row:
                continue
            qid, did, grade = row[0], row[1], int(row[2])
            qrels.setdefault(qid, {})[did] = grade
    return qrels


def load_queries(
    data_dir: Path | str = DATA_DIR, split: str = "train", with_qrels_only: bool = True
) -> dict[str, str]:
    """``{query_id: text}``; by default only the queries that have qrels."""
    keep = set(load_qrels(data_dir, split)) if with_qrels_only else None
    queries: dict[str, str] = {}
    with open(Path(data_dir) / f"{split}_queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                if keep is None or rec["_id"] in keep:
                    queries[rec["_id"]] = rec["text"]
    return queries


def load_corpus(
    limit: int | None = None,
    data_dir: Path | str = DATA_DIR,
    required_ids: Iterable[str] | None = None,
    split: str = "train",
) -> dict[str, str]:
    """``{doc_id: title + "\\n\\n" + text}`` in file order.

    With ``limit``, keep every doc in ``required_ids`` (default: every doc that
    is relevant for some ``split`` query) plus the first other docs in file
    order until ``limit`` docs are kept. The result can exceed ``limit`` when
    the required docs alone do.
    """
    corpus: dict[str, str] = {}
    with open(Path(data_dir) / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                corpus[rec["_id"]] = doc_text(rec.get("title", ""), rec.get("text", ""))
    if limit is None or limit >= len(corpus):
        return corpus
    if required_ids is None:
        required = {d for rels in load_qrels(data_dir, split).values() for d in rels}
    else:
        required = set(required_ids)
    room = max(0, limit - len(required & corpus.keys()))
    keep = set(required)
    for did in corpus:
        if room <= 0:
            break
        if did not in keep:
            keep.add(did)
            room -= 1
    return {did: txt for did, txt in corpus.items() if did in keep}


def load_dataset(
    limit: int | None = None,
    queries: int | None = None,
    data_dir: Path | str = DATA_DIR,
    split: str = "train",
) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """``(corpus, queries, qrels)``, consistent with each other.

    ``queries`` keeps the first N queries with qrels (file order); ``limit``
    then keeps a corpus subset holding all of their relevant docs.
    """
    qrels = load_qrels(data_dir, split)
    qs = load_queries(data_dir, split)
    if queries is not None:
        qs = dict(list(qs.items())[:queries])
    qrels = {qid: qrels[qid] for qid in qs}
    required = {d for rels in qrels.values() for d in rels}
    corpus = load_corpus(limit, data_dir, required_ids=required, split=split)
    return corpus, qs, qrels
