"""New queries for a corrective step: an LLM's rewrite/decomposition, or expansion from evidence.

Without an LLM, the query is expanded with the named entities (capitalised
phrases) of the two most confident hits that the question does not mention yet,
which is how a multi-hop question reaches its bridge entity; text without any falls
back to its most frequent new words. On HotpotQA and 2Wiki this beat expanding with
frequent words alone (bench/RESULTS.md). With one, the LLM sees the question and the evidence found (as
untrusted, delimited data) and proposes follow-up queries, one per line.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..analyzer import STOPWORDS
from ..models.llm import ChatLLM
from ..models.llm_guard import DATA_RULE, data_block

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]{2,}")
# A run of capitalised words, allowing the small particles of names ("Duke of York").
_ENTITY = re.compile(r"[A-Z][\w'.-]+(?:\s+(?:of|the|de|von|van|and)?\s*[A-Z][\w'.-]+)*")
REWRITE_INSTRUCTIONS = (
    "You help a search system find evidence for a question. The evidence found so far is "
    "given as data. " + DATA_RULE + " "
    "Write up to {n} short search queries that would find the missing evidence (for a "
    "multi-part question: one query per part not yet covered). One query per line, no "
    "numbering, nothing else.")


def expand_query(query: str, evidence: Sequence[Mapping[str, Any]], *, entities: int = 4,
                 hits: int = 2, terms: int = 6) -> str:
    """``query`` plus new named entities of the first ``hits`` of ``evidence`` (best first)."""
    known = query.lower()
    found: list[str] = []
    for hit in evidence[:hits]:
        for name in _ENTITY.findall(hit.get("text") or ""):
            name = name.strip().rstrip(".")
            if (len(name) < 3 or name.lower() in known or name.lower() in STOPWORDS
                    or name in found):
                continue
            found.append(name)
            if len(found) >= entities:
                break
    if found:
        return f"{query} {' '.join(found)}"
    return frequent_words(query, evidence, terms)


def frequent_words(query: str, evidence: Sequence[Mapping[str, Any]], terms: int = 6) -> str:
    """``query`` plus the most frequent new words of ``evidence`` (capitalised words weigh double)."""
    seen = {w.lower() for w in _WORD.findall(query)}
    counts: Counter[str] = Counter()
    surface: dict[str, str] = {}
    for hit in evidence:
        title = ((hit.get("citation") or {}).get("title") or "")
        for word in _WORD.findall(f"{title} {title} {hit.get('text') or ''}"):
            key = word.lower()
            if key in seen or key in STOPWORDS:
                continue
            counts[key] += 2 if word[0].isupper() else 1
            surface.setdefault(key, word)
    extra = [surface[w] for w, _n in counts.most_common(terms)]
    return f"{query} {' '.join(extra)}".strip() if extra else query


def llm_queries(llm: ChatLLM, query: str, evidence: Sequence[Mapping[str, Any]], *, n: int = 2,
                max_chars: int = 600) -> list[str]:
    """Follow-up queries proposed by ``llm`` (at most ``n``; empty when it proposes none)."""
    blocks = "\n".join(f"- {(h.get('text') or '')[:max_chars]}" for h in evidence[:5])
    user = f"Question: {query}\nEvidence so far:\n{data_block(blocks or '(none yet)')}\nQueries:"
    reply = llm.ask(REWRITE_INSTRUCTIONS.format(n=n), user, stage="rewrite")
    lines = [re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip() for line in reply.splitlines()]
    out = []
    for line in lines:
        if line and line.lower() != query.lower() and line not in out:
            out.append(line[:500])
    return out[:n]
