"""Cluster summaries for the RAPTOR tree: extractive (offline default) or abstractive (any LLM).

:class:`ExtractiveSummarizer` picks sentences of the cluster for coverage: TF-IDF
relevance to the cluster's centroid with MMR redundancy control, inside a token
budget; every chosen sentence keeps its span in its source document.
:class:`LLMSummarizer` asks a LangChain chat model or LlamaIndex LLM (through
:class:`~rcp_agentic.models.llm.ChatLLM`) for a faithful summary; its sentences
have no span and lose any active markup the model wrote (``<img …>``, ``<script>``,
``javascript:`` links; the node is then flagged). Both expose ``summarize``,
``summarize_many`` and an ``identity`` that is stored with the tree so a change of
summariser is noticed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from ..models.llm import as_chat
from ..models.llm_guard import DATA_RULE, data_block
from ..text import CountTokens, Sentence, Span, cut_to_tokens, join, split_sentences
from ..trust import strip_markup

__all__ = ["ExtractiveSummarizer", "LLMSummarizer", "Passage", "Summary"]


@dataclass(frozen=True)
class Passage:
    """Input to a summary: a leaf chunk, or a lower tree node (its summary sentences)."""

    uid: str
    text: str
    sentences: tuple[Sentence, ...]


@dataclass(frozen=True)
class Summary:
    """A summary's text and its sentences (spans kept for extracted sentences);
    ``sanitized`` when active markup was taken out of a generated one (its node is then
    suspected of injection, :mod:`rcp_agentic.trust.derived`)."""

    text: str
    sentences: tuple[Sentence, ...]
    sanitized: bool = False


class ExtractiveSummarizer:
    """Coverage-driven sentence extraction in a token budget: first the lead sentence of each
    passage (most central passages first), then TF-IDF centroid relevance with MMR.

    A passage's lead sentence is where encyclopaedic and news text states its subject
    (the strongest simple extractive baseline), so every covered passage is represented
    before any passage gets a second sentence. Deterministic: ties go to the earlier
    sentence. The chosen sentences are returned in reading order (by passage, then
    position).
    """

    identity = "extractive/2"

    def __init__(self, count_tokens: CountTokens, *, diversity: float = 0.3,
                 min_words: int = 4) -> None:
        self.count_tokens = count_tokens
        self.diversity = diversity  # MMR weight of redundancy against relevance
        self.min_words = min_words  # shorter fragments are chosen only when nothing else fits

    def summarize(self, passages: list[Passage], budget_tokens: int) -> Summary:
        """A summary of ``passages`` within ``budget_tokens``; at least one sentence if any exist."""
        candidates: list[Sentence] = []
        leads: list[int] = []  # per passage, the candidate index of its first full sentence
        seen: set[str] = set()
        for passage in passages:
            lead = None
            for sentence in passage.sentences:
                if sentence.text not in seen:  # nodes of one cluster may share sentences
                    seen.add(sentence.text)
                    candidates.append(sentence)
                    if lead is None and len(sentence.text.split()) >= self.min_words:
                        lead = len(candidates) - 1
            if lead is not None:
                leads.append(lead)
        if not candidates:
            return Summary("", ())
        tokens = np.array([self.count_tokens(s.text) for s in candidates])
        sim, relevance = self._similarities([s.text for s in candidates])
        short = np.array([len(s.text.split()) < self.min_words for s in candidates])
        chosen: list[int] = []
        used = 0
        open_ = np.ones(len(candidates), dtype=bool)
        redundancy = np.zeros(len(candidates))
        for i in sorted(leads, key=lambda j: (-relevance[j], j)):
            if tokens[i] <= budget_tokens - used:
                chosen.append(i)
                used += int(tokens[i])
                open_[i] = False
                redundancy = np.maximum(redundancy, sim[i])
        while True:
            fits = open_ & (tokens <= budget_tokens - used)
            if not fits.any():
                break
            if (fits & ~short).any():
                fits &= ~short
            elif chosen:  # fragments only fill an otherwise empty summary
                break
            score = (1 - self.diversity) * relevance - self.diversity * redundancy
            i = int(np.argmax(np.where(fits, score, -np.inf)))
            chosen.append(i)
            used += int(tokens[i])
            open_[i] = False
            redundancy = np.maximum(redundancy, sim[i])
        if not chosen:  # every sentence is over budget: cut the most relevant one
            i = int(np.argmax(relevance))
            best = candidates[i]
            text = cut_to_tokens(best.text, budget_tokens, self.count_tokens)
            span = best.span
            if span is not None:
                span = Span(span.doc_id, span.start, span.start + len(text))
            return Summary(text, (Sentence(text, span),))
        picked = [candidates[i] for i in sorted(chosen)]  # candidates are in reading order
        while len(picked) > 1 and self.count_tokens(join(picked)) > budget_tokens:
            picked.remove(candidates[chosen.pop()])  # joining may merge tokens differently
        return Summary(join(picked), tuple(picked))

    def summarize_many(self, jobs: list[tuple[list[Passage], int]]) -> list[Summary]:
        """One summary per ``(passages, budget_tokens)`` job, in order."""
        return [self.summarize(passages, budget) for passages, budget in jobs]

    @staticmethod
    def _similarities(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Pairwise cosine of TF-IDF rows, and each row's cosine to the centroid."""
        n = len(texts)
        try:
            matrix = TfidfVectorizer(sublinear_tf=True, stop_words="english").fit_transform(texts)
        except ValueError:  # no usable term (stop words, symbols only): all equally relevant
            return np.eye(n), np.ones(n)
        rows = matrix.toarray()
        centroid = rows.mean(axis=0)
        norm = np.linalg.norm(centroid)
        relevance = rows @ centroid / norm if norm > 0 else np.ones(n)
        return rows @ rows.T, relevance


SYSTEM_PROMPT = ("You summarise passages for a retrieval index. Write a faithful summary that "
                 "keeps as many key details (names, numbers, findings) as possible. Use only "
                 "facts stated in the passages. " + DATA_RULE + " Reply with the summary text "
                 "only.")


class LLMSummarizer:
    """Abstractive summaries from a LangChain chat model / LlamaIndex LLM (via ``ChatLLM``).

    Replies are cut to the budget; sentences carry no span. An empty reply falls
    back to the extractive summary of the same passages, so every node has text.
    """

    def __init__(self, llm: Any, count_tokens: CountTokens) -> None:
        self.chat = as_chat(llm)
        self.count_tokens = count_tokens
        self.fallback = ExtractiveSummarizer(count_tokens)
        self.identity = f"abstractive/2:{self.chat.identity}"

    @staticmethod
    def prompt(passages: list[Passage], budget_tokens: int) -> str:
        """The user turn asking for a summary of ``passages`` in at most ``budget_tokens`` tokens."""
        words = max(1, int(budget_tokens * 0.7))
        body = "\n\n".join(f"[{i}] {p.text}" for i, p in enumerate(passages, 1))
        return f"Summarise the following passages in at most {words} words.\n\n{data_block(body)}"

    def summarize(self, passages: list[Passage], budget_tokens: int) -> Summary:
        """One abstractive summary within ``budget_tokens``."""
        return self.summarize_many([(passages, budget_tokens)])[0]

    def summarize_many(self, jobs: list[tuple[list[Passage], int]]) -> list[Summary]:
        """Summaries for many jobs, asked concurrently through ``ChatLLM.ask_many``."""
        replies = self.chat.ask_many(SYSTEM_PROMPT, [self.prompt(p, b) for p, b in jobs],
                                     stage="tree")
        return [self._summary(passages, budget, reply)
                for (passages, budget), reply in zip(jobs, replies)]

    def _summary(self, passages: list[Passage], budget: int, reply: str) -> Summary:
        """The summary of one reply: its active markup taken out (``sanitized``), cut to the
        budget; an empty one falls back to the extractive summary."""
        clean, sanitized = strip_markup(" ".join(reply.split()))
        text = cut_to_tokens(clean, budget, self.count_tokens)
        if not text:
            summary = self.fallback.summarize(passages, budget)
            return Summary(summary.text, summary.sentences, sanitized) if sanitized else summary
        sentences = split_sentences(text, None, 0) or (Sentence(text, None),)
        return Summary(text, sentences, sanitized)
