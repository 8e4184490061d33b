"""Entity mentions from an installed spaCy pipeline's named-entity recogniser (optional)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .extract import STOPWORDS, ChunkExtraction, RawMention, fold, sentence_of, sentence_spans
from .extract_rules import LEADING_WORDS
from .model import ChunkText

_SPACY_KINDS = {"PERSON": "person", "ORG": "org", "GPE": "place", "LOC": "place",
                "FAC": "place", "NORP": "group", "EVENT": "event", "WORK_OF_ART": "work",
                "PRODUCT": "product", "LAW": "law", "LANGUAGE": "language", "DATE": "date"}


class SpacyExtractor:
    """Named entities from an installed spaCy pipeline (``spacy.load(model_name)``), or a
    pipeline object passed as ``nlp``. Never downloads: a missing pipeline raises
    :class:`~rcp_agentic.errors.InvalidParams` naming what to install."""

    def __init__(self, model_name: str = "en_core_web_sm", *, nlp: Any = None,
                 batch_size: int = 64) -> None:
        from ..errors import InvalidParams

        if nlp is None:
            try:
                import spacy
            except ImportError as exc:
                raise InvalidParams("the spaCy extractor needs `pip install spacy` and an "
                                    "English pipeline", field="extractor") from exc
            try:
                # Only the entity recogniser (and the tok2vec it listens to) is needed.
                nlp = spacy.load(model_name, exclude=["lemmatizer", "parser", "tagger",
                                                      "attribute_ruler", "morphologizer",
                                                      "senter"])
            except OSError as exc:
                raise InvalidParams(f"spaCy pipeline {model_name!r} is not installed",
                                    field="extractor") from exc
        self.nlp = nlp
        self.batch_size = batch_size
        meta = getattr(nlp, "meta", {}) or {}
        self.identity = f"spacy/1:{meta.get('name', model_name)}:{meta.get('version', '')}"

    def extract(self, chunks: Sequence[ChunkText]) -> list[ChunkExtraction]:
        """Entities of every chunk; sentences from the rule splitter (same as the builtin)."""
        out = []
        texts = [c.text for c in chunks]
        for text, doc in zip(texts, self.nlp.pipe(texts, batch_size=self.batch_size)):
            spans = sentence_spans(text)
            mentions = []
            for ent in doc.ents:
                kind = _SPACY_KINDS.get(ent.label_)
                if kind is None:
                    continue
                surface = ent.text.strip()
                lead = LEADING_WORDS.match(surface)
                start = ent.start_char + (lead.end() if lead else 0)
                surface = surface[lead.end():] if lead else surface
                if not surface or fold(surface) in STOPWORDS:
                    continue
                mentions.append(RawMention(surface, start, start + len(surface),
                                           sentence_of(spans, start), kind))
            out.append(ChunkExtraction(spans, tuple(mentions)))
        return out
