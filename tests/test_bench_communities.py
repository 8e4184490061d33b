"""The usefulness rules of ``bench/communities.py``: evidence sentences, packing, judging."""

from __future__ import annotations

import sys

from conftest import REPO

sys.path.insert(0, str(REPO))

from bench.communities import hit_evidence, judge_context, pack_texts, supporting_sentences  # noqa: E402
from rcp_agentic.models.tokenizer import count_tokens  # noqa: E402

PASSAGE = ("Neil Peart was a Canadian drummer. He joined Rush in 1974. "
           "Dr. Smith said so. Yes.")


def test_supporting_sentences_are_normalised_and_skip_short_ones() -> None:
    sents = supporting_sentences(PASSAGE)
    # "Dr." does not end a sentence; "Yes." is too short to count as evidence.
    assert sents == ["neil peart was canadian drummer", "he joined rush in 1974",
                     "dr smith said so"]
    assert supporting_sentences("Short one.") == ["short one"]


def test_judge_context_needs_a_whole_sentence_and_the_answer_on_word_boundaries() -> None:
    evidence = {"p1": supporting_sentences(PASSAGE), "p2": ["the band released counterparts"]}
    got = judge_context(["Intro. He joined Rush in 1974, as drummer."], "Rush", evidence)
    assert got["answer"] is True and got["found"] == ["p1"] and got["recall"] == 0.5
    partial = judge_context(["He joined Rushmore in"], "Rush", evidence)
    assert partial["answer"] is False and partial["recall"] == 0.0
    assert judge_context(["anything"], None, evidence)["answer"] is None
    assert got["tokens"] == count_tokens("Intro. He joined Rush in 1974, as drummer.")


def test_pack_texts_passes_over_what_would_overflow() -> None:
    small, big = "one two three", " ".join(["word"] * 80)
    budget = count_tokens(small) * 2 + 1
    assert pack_texts([small, big, small], budget) == [small, small]
    assert pack_texts([big], 5) == []


def test_hit_evidence() -> None:
    evidence = {"p1": supporting_sentences(PASSAGE)}
    assert hit_evidence("Title\n\nNeil Peart was a Canadian drummer!", evidence)
    assert not hit_evidence("Neil Peart was a drummer.", evidence)
    assert not hit_evidence("Neil Peart was a Canadian drummer.", {})
