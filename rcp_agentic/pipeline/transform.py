"""Query transformation with the engine's LLM: RCP ``query/transform`` (§7.8) and the
``rewrite`` option of ``retrieve`` (§7.7).

Five methods, one short prompt each: ``rewrite`` (one clearer search query), ``hyde`` (a short
passage that would answer the question, HyDE), ``multi-query`` (``n`` differently worded
queries), ``decompose`` (at most ``n`` simpler sub-questions) and ``step-back`` (one more
general background question). The question travels as a delimited data block, never as
instructions (:mod:`..models.llm_guard`). Replies are parsed leniently (bullets, numbering,
quotes, labels and a preamble line go; duplicates go; each query is cut to the engine's query
length); a reply with nothing usable gives the question back (``fallback``). Every result
carries ``trust`` (:func:`screened`): the question's level, ``injectionSuspected`` when it or
a text the model wrote screens as an injection or carries active markup (taken out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from ..control import RequestControl
from ..models.llm import ChatLLM
from ..models.llm_guard import DATA_RULE, data_block
from ..trust import InjectionScreen, derived_trust, strip_markup
from ..vocabulary import MULTI_QUERY_METHODS, TRANSFORM_METHODS, TrustLevel
from ..wire import TransformResult, Trust
from .method_params import MAX_TRANSFORM_QUERIES, TransformParams
from .params import DEFAULT_CONFIG, query_text

__all__ = ["FALLBACK_NOTE", "MAX_QUERIES", "METHODS", "Transformed", "parse_lines", "screened",
           "transform", "transformed"]

METHODS: tuple[str, ...] = TRANSFORM_METHODS
# The most queries one call returns: its ``n`` is clamped to it (§15.5 asks for a bounded
# fan-out), advertised as x-rcp-agentic.limits.maxTransformQueries.
MAX_QUERIES = MAX_TRANSFORM_QUERIES
STAGE = "transform"
# What a result that gave the question back says (in ``_meta.notes`` on the wire).
FALLBACK_NOTE = "the LLM's reply was not usable: the query is returned unchanged"
# The trust level of a transformed query's one source, the caller's question: no document an
# operator vetted ("trusted"), and not known to be hostile ("untrusted").
QUESTION_LEVEL: TrustLevel = "community"
_SCREEN = InjectionScreen()

_ONE_PER_LINE = "One per line, no numbering, no other text."
PROMPTS: dict[str, str] = {
    "rewrite": (
        "You turn a user's question into one clear, specific, self-contained search query for "
        "a document search engine: keep every name and constraint, drop filler words. "
        "Reply with the query alone, on one line."),
    "hyde": (
        "Write a short passage (three to five sentences) that answers the question, as a "
        "reference document or encyclopedia would. If you are unsure of the facts, write a "
        "plausible passage anyway: it is used to find similar documents, not shown to anyone. "
        "Reply with the passage alone."),
    "multi-query": (
        "Write {n} different search queries that would each find documents answering the "
        "question, varying the wording, synonyms and angle. " + _ONE_PER_LINE),
    "decompose": (
        "Break the question into at most {n} simpler sub-questions, each answerable by one "
        "search, in the order they should be answered; a question that is already simple is "
        "its own single sub-question. " + _ONE_PER_LINE),
    "step-back": (
        "Write one more general question about the background concepts or principles the "
        "question depends on (a step-back question). Reply with that question alone, on one "
        "line."),
}
_ASK = {"rewrite": "Search query:", "hyde": "Passage:", "multi-query": "Queries:",
        "decompose": "Sub-questions:", "step-back": "Step-back question:"}

# A list marker at the start of a line: bullets, "1." / "1)" / "(1)" / "#1", "a)", "Q1:".
_MARKER = re.compile(r"^\s*(?:[-*•+>]+\s*|\(?#?\d{1,2}[.):]\s+|\(?[a-h]\)\s+|Q\d{1,2}[.):]\s*)",
                     re.IGNORECASE)
# A label the model puts before the text itself: "Query:", "**Sub-question 2:**", "Rewritten
# search query - …" (a dash only between spaces: "question-answering" is no label).
_LABEL = re.compile(r"^(?:\*\*)?(?:(?:rewritten|alternative|better|improved|search|general|"
                    r"step-back|step back|background|hypothetical|sub-?)\s*)*(?:query|queries|"
                    r"question|questions|passage|answer)(?:\s*#?\d{1,2})?(?:\*\*)?"
                    r"(?:\s*:|\s+[-–]\s)\s*(?:\*\*)?\s*", re.IGNORECASE)
_QUOTES = "\"'`“”‘’«»"


@dataclass(frozen=True)
class Transformed:
    """What a transformation made of a question: the queries to search with (never empty),
    the hypothetical answer passage (``hyde``), and whether the LLM's reply was unusable so
    the question came back unchanged (``fallback``)."""

    queries: list[str]
    hypothetical: str | None = None
    fallback: bool = False
    # What the queries and passage may claim (:func:`screened`); None before screening.
    trust: Trust | None = None

    def to_wire(self) -> dict[str, Any]:
        """The RCP ``query/transform`` result (§7.8), with its ``trust`` (an extension)."""
        return TransformResult(queries=self.queries, hypothetical=self.hypothetical,
                               trust=self.trust).to_wire()


def screened(question: str, done: Transformed, screen: InjectionScreen | None = None
             ) -> Transformed:
    """``done`` with the active markup taken out of its queries and passage, and its trust
    (:func:`~..trust.derived.derived_trust`): its one source is the caller's question
    (level :data:`QUESTION_LEVEL`, suspected when it screens positive); the texts the model
    wrote are screened too, and a query left empty by the cleaning goes."""
    screen = screen or _SCREEN
    cleaned = [strip_markup(q) for q in done.queries]
    hypothetical, passage_cleaned = strip_markup(done.hypothetical or "")
    queries = [q for q, _s in cleaned if q] or [question]
    source = derived_trust((), [question], screen, default=QUESTION_LEVEL)
    trust = derived_trust([source], [*queries, hypothetical], screen,
                          sanitized=passage_cleaned or any(s for _q, s in cleaned))
    return replace(done, queries=queries, hypothetical=hypothetical or None, trust=trust)


def _unquote(text: str) -> str:
    """``text`` without the quotes around all of it (not ``"a" and "b"``'s)."""
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES \
            and text[0] not in text[1:-1] and text[-1] not in text[1:-1]:
        return text[1:-1].strip()
    return text


def _clean(line: str) -> str:
    """One line of a reply without its list marker, label, emphasis and quotes."""
    text = line.strip()
    for _ in range(3):  # "1. Query: "…"" peels in layers
        before = text
        text = _MARKER.sub("", text, count=1)
        text = _LABEL.sub("", text, count=1)
        text = _unquote(text.strip().strip("*_").strip())
        if text == before:
            break
    return " ".join(text.split())


def _key(text: str) -> str:
    return " ".join(text.lower().split()).rstrip("?.! ")


def parse_lines(reply: str, *, max_chars: int, drop: str | None = None) -> list[str]:
    """The distinct queries of a one-per-line reply (see the module doc), in order, each cut
    to ``max_chars``; ``drop`` (the question itself) is left out."""
    out: list[str] = []
    seen = {_key(drop)} if drop else set()
    for raw in reply.splitlines():
        text = _clean(raw)
        if not text or raw.rstrip().rstrip("*").endswith(":"):
            continue  # blank, or a preamble such as "Here are three queries:"
        text = text[:max_chars].strip()
        key = _key(text)
        if key and key not in seen:
            seen.add(key)
            out.append(text)
    return out


def _passage(reply: str, max_chars: int) -> str:
    """A hyde reply as one passage: its label dropped, its lines joined, cut to ``max_chars``."""
    lines = [_LABEL.sub("", line, count=1).strip() for line in reply.strip().splitlines()]
    text = _unquote(" ".join(" ".join(line for line in lines if line).split()))
    return text[:max_chars].strip()


def transform(chat: ChatLLM, query: str, method: str, n: int = 3, *,
              max_chars: int = DEFAULT_CONFIG.max_query_chars,
              control: RequestControl | None = None) -> Transformed:
    """Transform ``query`` by ``method`` with ``chat`` (module doc): :func:`transformed` of
    their :class:`~.method_params.TransformParams` (a bad one is InvalidParams naming it)."""
    return transformed(chat, TransformParams.of(query=query, method=method, n=n),
                       max_chars=max_chars, control=control)


def transformed(chat: ChatLLM, params: TransformParams, *,
                max_chars: int = DEFAULT_CONFIG.max_query_chars,
                control: RequestControl | None = None) -> Transformed:
    """The transformation ``params`` ask for (``n`` bounds the queries of ``multi-query`` and
    ``decompose``); each query is cut to ``max_chars``, a longer question is InvalidParams.
    An LLM that cannot answer raises BackendUnavailable."""
    method, n = params.method, params.n
    query = query_text(params.query, max_chars=max_chars)
    system = PROMPTS[method].format(n=n) + " " + DATA_RULE
    reply = chat.ask(system, f"Question:\n{data_block(query)}\n{_ASK[method]}", stage=STAGE,
                     control=control)
    if method == "hyde":
        passage = _passage(reply, max_chars)
        if passage:
            return screened(query, Transformed([query], hypothetical=passage))
    else:
        # A multi-query reply repeating the question adds nothing; a rewrite or sub-question
        # equal to it is still a usable answer.
        queries = parse_lines(reply, max_chars=max_chars,
                              drop=query if method == "multi-query" else None)
        if queries:
            return screened(query, Transformed(
                queries[:n] if method in MULTI_QUERY_METHODS else queries[:1]))
    if reply.strip():  # an empty, looping or screened reply is counted by the door itself
        chat.fallback(STAGE, "unparsed")
    return screened(query, Transformed([query], fallback=True))
