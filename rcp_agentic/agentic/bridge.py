"""Bridge entities and hop coverage, read from evidence text with no LLM (IRCoT's move).

A multi-hop question names its first entity; the passage about it names the next one
("published by the American Psychological Association"), which the question never names.
:func:`bridge_entities` reads the names a step's evidence gives (the graph's offline
extractor, :class:`rcp_agentic.graph.BuiltinExtractor`) that the question does not name,
scored by the confidence of the best hit naming each and by how much of the question the
naming sentence shares (the sentence that answers a hop, "… is published by X", shares the
hop's words). A name that shares a word with the title of the hit naming it is that hit's
own subject under another name ("Harris W. Fawell Congressional Papers" in the passage
titled "Harris W. Fawell"), not a bridge. :func:`attests` says whether a passage names an
entity and :func:`about` whether it is about one (its title names it); :func:`question_terms`
and :func:`coverage` say how much of the question the evidence holds, which is how the loop
knows the hops are covered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..analyzer import analyze

# Question words and fillers that no passage needs to contain for the question to be covered.
_ASKING = frozenset(analyze("who whom whose what which when where why how many much name "
                            "called known one did does do is was were are"))
# The extractor's kinds that name an entity to follow (not dates, numbers, or a lone
# capitalised word at a sentence start, which is mostly an ordinary word).
_FOLLOWED_KINDS = frozenset({"name", "acronym", "quoted", "title"})
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


# The graph package (its extractor, name folding and title rules) loads on first use: a loop
# over a remote engine imports it only when it reads names.
@lru_cache(maxsize=1)
def _extractor() -> Any:
    from ..graph import BuiltinExtractor

    return BuiltinExtractor(dates=False)


def words(text: str) -> list[str]:
    """The folded word tokens of ``text`` (lowercase, no diacritics, no punctuation), as the
    graph's title lexicon matches names."""
    from ..graph.extract import fold

    return [fold(w) for w in _WORD.findall(text)]


def _content(text: str) -> set[str]:
    from ..graph.extract import STOPWORDS

    return {w for w in words(text) if w not in STOPWORDS}


def _title_name(hit: Mapping[str, Any]) -> str:
    """The title a hit cites, without its disambiguation ("Toto (band)" is "Toto")."""
    from ..graph.extract import title_name

    return title_name(str((hit.get("citation") or {}).get("title") or ""))


def question_terms(question: str) -> frozenset[str]:
    """The question's content terms (stemmed, as BM25 analyses them), question words left out."""
    return frozenset(analyze(question)) - _ASKING


def coverage(terms: frozenset[str], texts: Iterable[str]) -> float:
    """The share of ``terms`` found in ``texts`` (1.0 for a question with no content term)."""
    if not terms:
        return 1.0
    found: set[str] = set()
    for text in texts:
        found |= terms.intersection(analyze(text))
        if len(found) == len(terms):
            break
    return len(found) / len(terms)


def attests(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` (its folded words, in order, on word boundaries)."""
    key = " ".join(words(name))
    return bool(key) and f" {key} " in f" {' '.join(words(text))} "


def about(hit: Mapping[str, Any], names: Iterable[str]) -> bool:
    """Whether ``hit`` is about one of ``names``: the title it cites (without its
    disambiguation) holds the name's words in order, or the name holds the title's."""
    title = " ".join(words(_title_name(hit)))
    if not title:
        return False
    for name in names:
        key = " ".join(words(name))
        if key and (f" {key} " in f" {title} " or f" {title} " in f" {key} "):
            return True
    return False


@dataclass(frozen=True)
class Bridge:
    """An entity the evidence names and the question does not, with its score."""

    name: str
    score: float


def bridge_entities(question: str, hits: Sequence[Mapping[str, Any]], *,
                    skip: Iterable[str] = (), limit: int = 2,
                    terms: frozenset[str] | None = None) -> list[Bridge]:
    """At most ``limit`` entities named in ``hits`` (best first) that ``question`` does not
    name, that are not the subject of the hit naming them (a word of its title) and that
    neither hold nor are held by a name in ``skip`` (by words). Each mention scores the
    naming hit's confidence times one plus the share of the question's terms in its
    sentence; an entity scores its best mention; ties go to the first named."""
    asked = set(words(question))
    terms = question_terms(question) if terms is None else terms
    skipped = [set(words(s)) for s in skip]
    scores: dict[str, float] = {}
    surface: dict[str, str] = {}
    order: dict[str, int] = {}
    for hit in hits:
        text = hit.get("text") or ""
        if not text:
            continue
        confidence = hit.get("confidence")
        weight = 1.0 if confidence is None else float(confidence)
        own = _content(_title_name(hit))
        extraction = _extractor().extract_text(text)
        shares = [len(terms.intersection(analyze(text[a:b]))) / max(1, len(terms))
                  for a, b in extraction.sentences]
        for mention in extraction.mentions:
            if mention.kind not in _FOLLOWED_KINDS:
                continue
            name = mention.surface.strip()
            tokens = words(name)
            key = " ".join(tokens)
            if len(key) < 3 or all(w in asked for w in tokens) or own & set(tokens):
                continue
            if any(set(tokens) <= held or held <= set(tokens) for held in skipped):
                continue
            share = shares[mention.sentence] if mention.sentence < len(shares) else 0.0
            scores[key] = max(scores.get(key, 0.0), weight * (1.0 + share))
            surface.setdefault(key, name)
            order.setdefault(key, len(order))
    ranked = sorted(scores, key=lambda k: (-scores[k], order[k]))
    return [Bridge(surface[k], scores[k]) for k in ranked[:limit]]
