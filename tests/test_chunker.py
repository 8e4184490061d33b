"""The token-aware, sentence-aware chunker: exact offsets, size bound, overlap, long sentences."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcp_agentic.corpus.chunker import chunk_text, sentence_spans
from rcp_agentic.models.tokenizer import count_tokens

TEXT = " ".join(f"Sentence number {i} talks about topic {i % 7} in some detail." for i in range(60))


def test_chunks_are_exact_slices_within_size() -> None:
    chunks = chunk_text(TEXT, size=50, overlap=10)
    assert len(chunks) > 5
    for i, c in enumerate(chunks):
        assert c.index == i
        assert TEXT[c.start:c.end] == c.text
        assert c.tokens == count_tokens(c.text)
        assert c.tokens <= 51  # joined sentences may merge one token boundary


def test_chunks_end_at_sentence_boundaries_and_overlap() -> None:
    chunks = chunk_text(TEXT, size=50, overlap=15)
    for c in chunks[:-1]:
        assert c.text.endswith(".")
    overlapping = sum(1 for a, b in zip(chunks, chunks[1:]) if b.start < a.end)
    assert overlapping == len(chunks) - 1
    covered = set()
    for c in chunks:
        covered.update(range(c.start, c.end))
    assert all(i in covered for i, ch in enumerate(TEXT) if not ch.isspace())


def test_no_overlap_means_disjoint_chunks() -> None:
    chunks = chunk_text(TEXT, size=50, overlap=0)
    for a, b in zip(chunks, chunks[1:]):
        assert b.start >= a.end


def test_long_sentence_is_cut_at_token_boundaries() -> None:
    text = "word " * 500
    chunks = chunk_text(text, size=64, overlap=0)
    assert len(chunks) >= 7
    assert all(c.tokens <= 64 for c in chunks)
    assert "".join(text[c.start:c.end] for c in chunks).split() == text.split()


def test_blank_lines_split_sentences_and_unicode_offsets() -> None:
    text = "Überschrift ohne Punkt\n\nZweiter Absatz — mit Umlauten: äöü. Und 漢字も。 Ende!"
    spans = sentence_spans(text)
    assert spans[0] == (0, len("Überschrift ohne Punkt\n\n"))
    assert "".join(text[s:e] for s, e in spans) == text
    for c in chunk_text(text, size=8, overlap=2):
        assert text[c.start:c.end] == c.text


@pytest.mark.parametrize("size,overlap", [(0, 0), (10, 10), (10, -1)])
def test_bad_sizes_raise(size: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_text("Some text.", size=size, overlap=overlap)


@settings(max_examples=80, deadline=None)
@given(st.text(min_size=0, max_size=600), st.integers(8, 80), st.integers(0, 7))
def test_offsets_exact_for_any_text(text: str, size: int, overlap: int) -> None:
    chunks = chunk_text(text, size=size, overlap=overlap)
    for c in chunks:
        assert text[c.start:c.end] == c.text
        assert c.text.strip()
    if text.strip():
        assert chunks
