"""Entity resolution: one key per thing, and synonym edges between near-duplicate names.

:func:`entity_key` folds the surface variations that never change what is named
(case, diacritics, punctuation, a possessive, a leading "the", an English plural, "&"
for "and").
Names that are similar but may name different things ("Jeff Porcaro" / "Porcaro",
"MIT" / "Massachusetts Institute of Technology") are *joined by synonym edges*
(:func:`synonym_edges`, cosine of name embeddings) and never merged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np

from .extract import fold
from .model import Synonym

Embed = Callable[[list[str]], np.ndarray]

_DIGIT = re.compile(r"\d")
_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)
_DOTTED = re.compile(r"(?<!\w)(?:[^\W\d_]\.){2,}")     # U.S., e.g. initialisms
_KEEP_S = ("ss", "us", "is", "os", "as", "ys", "'s")
_POSSESSIVE = re.compile(r"(?<=\w)'s?(?!\w)")     # "Delhi's", "Jones'": the owner's name


def _singular(word: str) -> str:
    if len(word) < 4 or word.isdigit() or word.endswith(_KEEP_S):
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "xes")):
        return word[:-2]
    if word.endswith("s"):
        return word[:-1]
    return word


@lru_cache(maxsize=1 << 18)
def entity_key(surface: str) -> str:
    """The resolution key of a surface form ("" if nothing is left).

    >>> entity_key("The Beatles"), entity_key("beatles"), entity_key("Pál Gábor")
    ('beatle', 'beatle', 'pal gabor')
    """
    text = _DOTTED.sub(lambda m: m.group().replace(".", ""), surface)
    text = _POSSESSIVE.sub("", fold(text).replace("’", "'").replace("&", " and "))
    words = [w for w in _NON_WORD.sub(" ", text.replace("'", "")).split() if w]
    if len(words) > 1 and words[0] == "the":
        words = words[1:]
    if words and not _DIGIT.search(words[-1]):
        words[-1] = _singular(words[-1])
    return " ".join(words)


def synonym_edges(keys: Sequence[str], names: Sequence[str], vectors: np.ndarray, *,
                  threshold: float = 0.9, top_k: int = 5, block: int = 2048) -> list[Synonym]:
    """Pairs of distinct entities whose name vectors have cosine >= ``threshold``.

    Each entity keeps at most ``top_k`` most similar partners (HippoRAG's kNN synonym
    edges); pairs are returned once (``a < b``), sorted. Blocked so memory stays at
    ``block x n`` floats.
    """
    n = len(keys)
    if n < 2:
        return []
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    v = (v / np.where(norms > 0, norms, 1)).astype(np.float32)
    found: dict[tuple[str, str], float] = {}
    k = min(top_k + 1, n)
    for lo in range(0, n, block):
        sims = v[lo:lo + block] @ v.T
        for r in range(sims.shape[0]):
            sims[r, lo + r] = -1.0
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        for r in range(sims.shape[0]):
            for c in part[r]:
                s = float(sims[r, c])
                if s < threshold:
                    continue
                a, b = keys[lo + r], keys[int(c)]
                if a == b or names[lo + r] == names[int(c)]:
                    continue
                pair = (a, b) if a < b else (b, a)
                found[pair] = max(found.get(pair, 0.0), round(s, 6))
    return [Synonym(a, b, s) for (a, b), s in sorted(found.items())]

