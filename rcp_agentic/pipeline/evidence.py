"""What packing a pooled list (a collapsed tree: chunks and the summaries above them) needs to
know of its units: the leaf chunks each holds, and whether one keeps the best evidence of
another it contains (:func:`packing_containment`, read by :func:`.packing.pack`)."""

from __future__ import annotations

from collections.abc import Callable

from .. import units
from ..analyzer import analyze
from ..store.docstore import Docstore
from ..store.memindex import UnitIndex, bm25_idf
from ..text import split_sentences


def packing_containment(store: Docstore, index: UnitIndex, ranked: list[tuple[int, float]],
                        query: str
                        ) -> tuple[Callable[[int], frozenset[str] | None],
                                   Callable[[int, int], bool]]:
    """For packing a pooled list: ``leaves(i)``, the leaf chunks of the i-th ranked unit (a
    chunk is its own leaf; None for a unit judged by place, a page or document), and
    ``keeps(i, j)``: whether unit i holds the best query-matching sentence of unit j it
    contains (BM25 idf of the analysed query terms a sentence holds; ties all count).
    A summary's sentences are its stored spans; a chunk's come from the tree's splitter,
    so an extracted sentence is the same string in both. Everything is fetched lazily."""
    cache: dict[int, frozenset[str] | None] = {}
    said: dict[int, list[str]] = {}
    weights: dict[str, float] = {}
    bests: dict[int, frozenset[str]] = {}  # a unit's best query-matching sentences
    terms = set(analyze(query))

    def leaves(i: int) -> frozenset[str] | None:
        if i not in cache:
            pos = ranked[i][0]
            if index.doc_ids[pos]:
                cache[i] = (frozenset([index.uids[pos]])
                            if units.get(index.units[pos]).stored == "chunk" else None)
            else:
                rowid = int(index.rowids[pos])
                cache[i] = frozenset(store.covered_leaves([rowid]).get(rowid, []))
        return cache[i]

    def sentences(i: int) -> list[str]:
        if i not in said:
            rowid = int(index.rowids[ranked[i][0]])
            row = store.hydrate([rowid]).get(rowid) or {}
            text = row.get("text") or ""
            spans = (row.get("umeta") or {}).get("spans")
            found = ([text[s["at"][0]:s["at"][1]] for s in spans] if spans
                     else [s.text for s in split_sentences(text, None, 0)])
            said[i] = [" ".join(s.split()) for s in found]
        return said[i]

    def weight(term: str) -> float:
        if term not in weights:
            df = index.doc_freq(store.term_id(term))
            weights[term] = float(bm25_idf(index.size, df))
        return weights[term]

    def best(j: int) -> frozenset[str]:
        if j not in bests:
            fine = sentences(j)
            scores = [sum(weight(t) for t in terms.intersection(analyze(s))) for s in fine]
            top = max(scores, default=0.0)
            bests[j] = frozenset(s for s, sc in zip(fine, scores) if sc == top)
        return bests[j]

    def keeps(i: int, j: int) -> bool:
        return not best(j) or not best(j).isdisjoint(sentences(i))
    return leaves, keeps
