"""Graph build: extraction rules, the title lexicon, resolution, relations, synonyms,
determinism, incremental == rebuild, and the LLM / spaCy extractors."""

from __future__ import annotations

import random

import numpy as np
import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from rcp_agentic.models.llm import ChatLLM
from rcp_agentic.graph import (BuiltinExtractor, ChunkExtraction, ChunkText, GraphCache,
                               GraphConfig, Lexicon, LLMExtractor, build_graph, entity_key,
                               parse_llm_reply, synonym_edges, update_graph)

# These tests read the graph each write builds as the write returns.
pytestmark = pytest.mark.inline_derived

PASSAGES = {
    "Jeff Porcaro": "Jeffrey Thomas Porcaro (April 1, 1954 – August 5, 1992) was an American "
                    "drummer. Porcaro was best known for his work with the rock band Toto. He "
                    "came to prominence as the drummer on the Steely Dan album \"Katy Lied\".",
    "Toto (band)": "Toto is an American rock band formed in 1977 in Los Angeles. The band "
                   "included Jeff Porcaro and David Paich.",
    "Steely Dan": "Steely Dan is an American rock band founded in 1972 by Walter Becker and "
                  "Donald Fagen. Their album \"Katy Lied\" was released in 1975.",
    "Katy Lied": "Katy Lied is the fourth studio album by Steely Dan, released in March 1975 "
                 "by ABC Records.",
    "Walter Becker": "Walter Becker (February 20, 1950 – September 3, 2017) was an American "
                     "musician, co-founder of Steely Dan with Donald Fagen.",
    "Los Angeles": "Los Angeles is the most populous city in California. In 1977 the city "
                   "hosted many bands.",
}


def chunks_of(passages: dict[str, str], first_row: int = 1) -> list[ChunkText]:
    out = []
    for i, (title, text) in enumerate(passages.items()):
        doc = f"d{i}"
        out.append(ChunkText(f"r{first_row + i}", f"{doc}#0", doc, title, f"{title}\n\n{text}", 0))
    return out


@pytest.mark.parametrize(("surface", "key"), [
    ("The Beatles", "beatle"),
    ("Beatles", "beatle"),
    ("the beatles", "beatle"),
    ("Pál Gábor", "pal gabor"),
    ("PAL GABOR", "pal gabor"),
    ("Beck, Bogert & Appice", "beck bogert and appice"),
    ("Beck, Bogert and Appice", "beck bogert and appice"),
    ("U.S.", "us"),
    ("J. R. R. Tolkien", "j r r tolkien"),
    ("Universities", "university"),
    ("Boxes", "box"),
    ("Paris", "paris"),          # -is, -us, -ss, -os endings keep their s
    ("Virus", "virus"),
    ("Glass", "glass"),
    ("1970s", "1970s"),
    ("The", "the"),              # a lone "the" is not stripped to nothing
    ("  ", ""),
    ("What Will You Do When You Catch Me?", "what will you do when you catch me"),
])
def test_entity_key_rules(surface: str, key: str) -> None:
    assert entity_key(surface) == key


def test_builtin_extractor_clean_spans() -> None:
    text = ("The Beatles were formed in Liverpool in 1960. In 1964 they toured the United "
            "States with NASA engineers. Tony Franklin of The Firm played \"Radioactive\". "
            "After that, John Lennon left on 8 December 1980.")
    found = {(m.surface, m.kind) for m in BuiltinExtractor().extract_text(text).mentions}
    assert ("Beatles", "name") in found               # leading "The" dropped
    assert ("Liverpool", "name") in found
    assert ("United States", "name") in found
    assert ("NASA", "acronym") in found
    assert ("Tony Franklin", "name") in found and ("Firm", "name") in found
    assert ("Radioactive", "quoted") in found
    assert ("John Lennon", "name") in found
    assert ("8 December 1980", "date") in found
    assert ("1960", "date") in found
    surfaces = {s for s, _k in found}
    assert not surfaces & {"The", "In", "After", "The Beatles", "In 1964"}


def test_lexicon_finds_every_title_case_and_punctuation_tolerant() -> None:
    lex = Lexicon(["New York", "New York City", "My Cousin from Warsaw", "It", "the"])
    text = "He moved to New York City. Then: My Cousin From Warsaw, a film; new york is big."
    hits = [(m.surface, m.sentence) for m in lex.scan(text)]
    assert ("New York", 0) in hits and ("New York City", 0) in hits   # overlaps kept
    assert ("My Cousin From Warsaw", 1) in hits
    assert not any(s == "new york" for s, _ in hits)                  # lowercase: not the title
    assert len(lex) == 3                                              # "It", "the": stop words


def test_build_is_deterministic_and_order_independent() -> None:
    chunks = chunks_of(PASSAGES)
    shuffled = chunks[:]
    random.Random(3).shuffle(shuffled)
    a = build_graph(chunks, BuiltinExtractor())
    b = build_graph(shuffled, BuiltinExtractor())
    assert a == b
    assert set(a.chunk_docs) == {c.key for c in chunks}


def test_entities_mentions_about_descriptions() -> None:
    chunks = chunks_of(PASSAGES)
    g = build_graph(chunks, BuiltinExtractor())
    steely = g.entities["steely dan"]
    assert steely.kind == "title" and steely.about == ("r3",)
    assert set(steely.mentions) >= {"r1", "r3", "r4", "r5"}
    # "Porcaro" in Jeff Porcaro's passage is Jeff Porcaro (a part of the longer name).
    assert "porcaro" not in g.entities
    porcaro = g.entities["jeff porcaro"]
    assert porcaro.mentions["r1"] > 1.0 and "r2" in porcaro.mentions
    assert "Porcaro" in porcaro.aliases
    # Its description starts with the lead of its own passage, and spans point at it.
    assert porcaro.description.startswith("Jeffrey Thomas Porcaro")
    text = chunks[0].text
    sp = porcaro.spans[0]
    assert text[sp.start:sp.end].startswith("Jeffrey Thomas Porcaro")
    toto = g.entities["toto"]  # the title "Toto (band)" is written "Toto" in Porcaro's passage
    assert "r1" in toto.mentions


def test_relations_pmi_evidence_and_cap() -> None:
    chunks = chunks_of(PASSAGES)
    g = build_graph(chunks, BuiltinExtractor())
    pairs = {(r.subject, r.object): r for r in g.relations}
    r = pairs[("donald fagen", "walter becker")]
    assert r.weight > 0 and not r.typed
    assert "Walter Becker" in r.evidence and "Donald Fagen" in r.evidence
    assert r.chunks == ("r3", "r5")
    assert r.span is not None
    capped = build_graph(chunks, BuiltinExtractor(),
                         config=GraphConfig(max_relations_per_entity=1))
    assert 0 < len(capped.relations) < len(g.relations)
    degree: dict[str, int] = {}
    for rel in capped.relations:
        for k in (rel.subject, rel.object):
            degree[k] = degree.get(k, 0) + 1
    # Each kept pair is some endpoint's strongest, so there are at most as many as entities.
    assert len(capped.relations) <= len(capped.entities)


def test_incremental_update_equals_rebuild() -> None:
    all_chunks = chunks_of(PASSAGES)
    first, later = all_chunks[:3], all_chunks[3:]
    cache = GraphCache()
    g1 = build_graph(first, BuiltinExtractor(), cache=cache)
    assert "katy lied" in g1.entities and g1.entities["katy lied"].about == ()
    # Add documents whose titles are new (old chunks are re-scanned for them) and remove one.
    updated = update_graph(cache, BuiltinExtractor(), added=later, removed=["r2"])
    assert cache.stats.chunks_extracted == len(later)
    assert cache.stats.chunks_rescanned == 2
    final = [c for c in all_chunks if c.key != "r2"]
    assert updated == build_graph(final, BuiltinExtractor())
    assert updated.entities["katy lied"].about == ("r4",)
    # build_graph with the cache diffs by itself: a changed chunk text is re-extracted.
    changed = [*final[:-1], ChunkText("r6", "d5#0", "d5", "Los Angeles",
                                      "Los Angeles\n\nLos Angeles hosted Toto.", 0)]
    again = build_graph(changed, BuiltinExtractor(), cache=cache)
    assert cache.stats.chunks_extracted == 1
    assert again == build_graph(changed, BuiltinExtractor())


def test_synonym_edges_with_the_engine_embedder(embedder) -> None:  # noqa: ANN001
    names = ["Jeff Porcaro", "Jeffrey Porcaro", "Steely Dan", "Los Angeles", "Los Angeles, CA"]
    keys = [entity_key(n) for n in names]
    vecs = embedder.embed_documents(names)
    syn = synonym_edges(keys, names, vecs, threshold=0.85)
    pairs = {(s.a, s.b) for s in syn}
    assert ("jeff porcaro", "jeffrey porcaro") in pairs
    assert not any("steely dan" in p for p in pairs)
    # Through the builder: joined by an edge, never merged.
    chunks = chunks_of({"Jeff Porcaro": "Jeff Porcaro played drums.",
                        "Session work": "Jeffrey Porcaro recorded with many bands."})
    g = build_graph(chunks, BuiltinExtractor(), embed=embedder.embed_documents,
                    config=GraphConfig(synonym_threshold=0.85, synonym_min_chunks=1))
    assert {"jeff porcaro", "jeffrey porcaro"} <= set(g.entities)
    assert any({s.a, s.b} == {"jeff porcaro", "jeffrey porcaro"} for s in g.synonyms)


def test_llm_extractor_parses_json_tuples_and_falls_back() -> None:
    json_reply = ('```json\n{"entities": [{"name": "Walter Becker", "type": "person", '
                  '"description": "Co-founder of Steely Dan."}, {"name": "Steely Dan", '
                  '"type": "organization"}], "relations": [{"subject": "Walter Becker", '
                  '"relation": "co-founded", "object": "Steely Dan", "strength": 9}, '
                  '{"subject": "", "object": "x"}, "junk"]}\n```')
    tuple_reply = ('("entity"<|>DONALD FAGEN<|>person<|>Singer)##\n'
                   '("relationship"<|>DONALD FAGEN<|>STEELY DAN<|>founded it<|>8)##')
    chunks = chunks_of({"Walter Becker": PASSAGES["Walter Becker"],
                        "Steely Dan": PASSAGES["Steely Dan"],
                        "Katy Lied": PASSAGES["Katy Lied"]})
    llm = FakeListChatModel(responses=[json_reply, tuple_reply, "sorry, I cannot"])
    ex = LLMExtractor(ChatLLM(llm, concurrency=1))
    assert ex.identity.startswith("llm/2:llm:langchain:")
    out = ex.extract(chunks)
    kinds = {(m.surface, m.kind) for m in out[0].mentions}
    assert ("Walter Becker", "person") in kinds
    assert out[0].relations[0].relation == "co-founded" and out[0].relations[0].weight == 0.9
    assert any(r.subject == "DONALD FAGEN" for r in out[1].relations)
    assert out[2].relations == () and out[2].mentions  # unparseable: the builtin rules
    g = build_graph(chunks, ex)
    typed = [r for r in g.relations if r.typed]
    assert any((r.subject, r.object, r.relation) == ("walter becker", "steely dan", "co-founded")
               for r in typed)
    assert g.entities["walter becker"].description == "Co-founder of Steely Dan."
    assert parse_llm_reply("not json {at all").entities == []


def test_llm_extractor_with_llamaindex_mock() -> None:
    from llama_index.core.llms import MockLLM

    chunks = chunks_of({"Katy Lied": PASSAGES["Katy Lied"]})
    out = LLMExtractor(MockLLM(max_tokens=8)).extract(chunks)   # replies filler text
    assert out[0].mentions and all(isinstance(x, ChunkExtraction) for x in out)


def test_extraction_json_round_trip() -> None:
    x = BuiltinExtractor().extract(chunks_of(PASSAGES))[0]
    assert ChunkExtraction.from_json(x.to_json()) == x


def test_spacy_extractor_with_a_pipeline_built_in_code() -> None:
    spacy = pytest.importorskip("spacy", reason="spaCy is an optional extra, not installed")
    from rcp_agentic.graph import SpacyExtractor

    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns([{"label": "PERSON", "pattern": "Walter Becker"},
                        {"label": "ORG", "pattern": "Steely Dan"}])
    ex = SpacyExtractor(nlp=nlp)
    out = ex.extract(chunks_of({"Walter Becker": PASSAGES["Walter Becker"]}))
    assert {(m.surface, m.kind) for m in out[0].mentions} >= {("Walter Becker", "person"),
                                                             ("Steely Dan", "org")}
    g = build_graph(chunks_of(PASSAGES), ex)
    assert "steely dan" in g.entities


def test_name_vectors_are_reused_between_builds(embedder) -> None:  # noqa: ANN001
    calls: list[int] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        return embedder.embed_documents(texts)

    cache = GraphCache()
    chunks = chunks_of(PASSAGES)
    build_graph(chunks[:4], BuiltinExtractor(), embed=embed, cache=cache)
    first = calls[-1]
    build_graph(chunks, BuiltinExtractor(), embed=embed, cache=cache)
    assert calls[-1] < first  # only the new names
