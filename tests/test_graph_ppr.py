"""Graph recall: the sparse matrix, personalised PageRank on a hand-made graph, query
linking, passage ranking with a prior, the no-entity fallback, neighbours and paths."""

from __future__ import annotations

import numpy as np
import pytest

from rcp_agentic.graph import (BuiltinExtractor, ChunkText, Entity, GraphData, GraphView,
                               PPRWeights, Relation, Synonym, build_graph)


def hand_graph() -> GraphData:
    """Passages r1..r4; r1 is about A and mentions B; r2 is about B and mentions C;
    r3 is about C; r4 is about D (unconnected)."""
    ents = {
        "alpha": Entity("alpha", "Alpha", "title", mentions={"r1": 1.0}, about=("r1",)),
        "beta": Entity("beta", "Beta", "title", mentions={"r1": 1.0, "r2": 1.0}, about=("r2",)),
        "gamma": Entity("gamma", "Gamma", "title", mentions={"r2": 1.0, "r3": 1.0},
                        about=("r3",)),
        "delta": Entity("delta", "Delta", "title", mentions={"r4": 1.0}, about=("r4",)),
        "gamma ray": Entity("gamma ray", "Gamma Ray", "name", mentions={"r3": 1.0}),
    }
    rels = [Relation("alpha", "beta", "and", "Alpha and Beta.", None, ("r1",), 0.8),
            Relation("beta", "gamma", "and", "Beta and Gamma.", None, ("r2",), 0.5)]
    return GraphData(entities=ents, relations=rels,
                     synonyms=[Synonym("gamma", "gamma ray", 0.92)],
                     chunk_docs={"r1": "d1", "r2": "d2", "r3": "d3", "r4": "d4"})


def test_matrix_is_symmetric_and_column_stochastic() -> None:
    view = GraphView(hand_graph())
    adj = view.adjacency
    assert adj.shape == (9, 9)
    assert abs(adj - adj.T).max() < 1e-12
    col = np.asarray(view.transition.sum(axis=0)).ravel()
    assert np.allclose(col[~view.dangling], 1.0)
    # passage-passage edge: r1 mentions beta, which r2 is about
    i, j = view.n_entities + view.c_index["r1"], view.n_entities + view.c_index["r2"]
    assert adj[i, j] > 0
    assert GraphView(hand_graph(), weights=PPRWeights(p2p=0.0)).adjacency[i, j] == 0


def test_personalized_pagerank_ranking_on_a_known_graph() -> None:
    view = GraphView(hand_graph())
    scores = view.personalized_pagerank({"alpha": 1.0})
    assert scores.sum() == pytest.approx(1.0, abs=1e-6)
    p = {c: scores[view.n_entities + view.c_index[c]] for c in view.chunk_keys}
    # Mass flows alpha -> r1 -> beta -> r2 -> gamma -> r3; delta's r4 gets nothing.
    assert p["r1"] > p["r2"] > p["r3"] > 0
    assert p["r4"] == 0
    # Damping 0 is the reset vector itself; a higher damping spreads further.
    assert view.personalized_pagerank({"alpha": 1.0}, damping=0.0)[view.e_index["alpha"]] == 1
    far = view.personalized_pagerank({"alpha": 1.0}, damping=0.85)
    assert far[view.n_entities + 2] > scores[view.n_entities + 2]
    assert not view.personalized_pagerank({"nothing": 1.0}).any()


def test_link_exact_partial_specificity_and_no_entity() -> None:
    view = GraphView(hand_graph())
    links = view.link("Who wrote about Beta and Delta?")
    assert set(links) == {"beta", "delta"}
    # Specificity: beta is in 2 passages, delta in 1.
    assert links["delta"] == pytest.approx(1.0) and links["beta"] == pytest.approx(0.5)
    assert view.link("what about Ray?") == {"gamma ray": pytest.approx(0.5)}  # partial name
    assert view.link("what is the weather like") == {}
    assert view.recall("what is the weather like") == []           # fall back to hybrid


def test_partial_links_must_cover_half_the_name() -> None:
    graph = hand_graph()
    graph.entities["delta force command"] = Entity("delta force command", "Delta Force Command",
                                                   "name", mentions={"r4": 1.0})
    # One word of a three-word name is no link ("asymptomatic" is not a paper's long title).
    assert GraphView(graph).link("what about Command?") == {}
    assert set(GraphView(graph, weights=PPRWeights(partial_cover=0.3)).link(
        "what about Command?")) == {"delta force command"}


def test_subject_share_and_word_frequency_specificity() -> None:
    view = GraphView(hand_graph())
    # beta is the subject of r2; "gamma ray" is only mentioned.
    assert view.subject_share({"beta": 0.5, "gamma ray": 0.5}) == pytest.approx(0.5)
    assert view.subject_share({"gamma ray": 1.0}) == 0.0
    assert view.subject_share({}) == 0.0
    # An entity no passage is about also counts the passages holding its words; a title
    # (gamma: mentioned in r2, about r3) keeps its own count.
    counted = GraphView(hand_graph(), word_df=lambda name: 4)
    assert view.specificity("gamma ray") == pytest.approx(1.0)
    assert counted.specificity("gamma ray") == pytest.approx(0.25)
    assert counted.specificity("gamma") == pytest.approx(0.5)
    assert counted.link("what about Gamma Ray?") == {"gamma ray": pytest.approx(0.25)}


def test_recall_ranks_passages_and_uses_the_prior() -> None:
    view = GraphView(hand_graph())
    ranked = view.recall("Tell me about Alpha")
    assert [k for k, _ in ranked][:3] == ["r1", "r2", "r3"]
    # A prior on r4 (dense/sparse score) brings the unconnected passage in.
    with_prior = dict(view.recall("Tell me about Alpha", prior={"r4": 1.0}))
    assert "r4" in with_prior and "r4" not in dict(ranked)
    explicit = view.recall(links={"gamma": 1.0}, k=2)
    assert [k for k, _ in explicit] == ["r3", "r2"]


def test_neighbors_and_paths() -> None:
    view = GraphView(hand_graph())
    one = view.neighbors(["alpha"], hops=1)
    assert one.nodes == ["alpha", "beta"]
    assert [(a, b) for a, b, _w, _r in one.edges] == [("alpha", "beta")]
    two = view.neighbors(["alpha"], hops=2)
    assert set(two.nodes) == {"alpha", "beta", "gamma"}
    paths = view.paths(["alpha", "gamma ray"])
    assert len(paths) == 1
    assert paths[0].nodes == ["alpha", "beta", "gamma", "gamma ray"]
    rels = [r for _a, _b, _w, r in paths[0].edges]
    assert rels[0] is not None and rels[0].evidence == "Alpha and Beta."
    assert rels[2] is None   # the synonym hop
    assert view.paths(["alpha", "delta"]) == []
    g = view.to_networkx()
    assert g.number_of_nodes() == 5 and g.has_edge("gamma", "gamma ray")


CORPUS = {
    "Counterparts (album)": "Counterparts is the fifteenth studio album by the Canadian rock "
                            "band Rush, released in 1993. It was produced by Peter Collins.",
    "Rush (band)": "Rush was a Canadian rock band formed in Toronto in 1968. The band's "
                   "drummer and lyricist was Neil Peart.",
    "Neil Peart": "Neil Ellwood Peart (September 12, 1952 – January 7, 2020) was a Canadian "
                  "musician and writer. Peart was born in Hamilton, Ontario.",
    "Peter Collins": "Peter Collins is an English record producer who worked with many bands.",
    "Hamilton, Ontario": "Hamilton is a port city in the Canadian province of Ontario.",
    "Toronto": "Toronto is the capital city of the Canadian province of Ontario.",
    "Steely Dan": "Steely Dan is an American rock band founded in 1972 by Walter Becker.",
}


def corpus_chunks() -> list[ChunkText]:
    return [ChunkText(f"r{i + 1}", f"d{i}#0", f"d{i}", t, f"{t}\n\n{x}", 0)
            for i, (t, x) in enumerate(CORPUS.items())]


def test_multi_hop_question_through_the_builtin_extractor() -> None:
    chunks = corpus_chunks()
    view = GraphView(build_graph(chunks, BuiltinExtractor()))
    links = view.link("Where was the drummer of the band that released Counterparts born?")
    assert "counterpart" in links
    top = [k for k, _ in view.recall(links=links, k=4)]
    # The album's passage, then the band it names; the drummer the band names (two hops,
    # no word shared with the question) is reached too; the unrelated band is not.
    assert top[:2] == ["r1", "r2"]
    assert "r3" in top and "r7" not in top


def test_embedding_link_with_name_vectors(embedder) -> None:  # noqa: ANN001
    ents = {"jeff porcaro": Entity("jeff porcaro", "Jeff Porcaro", "title",
                                   mentions={"r1": 1.0}, about=("r1",)),
            "toto": Entity("toto", "Toto", "name", mentions={"r1": 1.0})}
    graph = GraphData(entities=ents, chunk_docs={"r1": "d1"})
    names = [e.name for e in ents.values()]
    vectors = dict(zip(names, embedder.embed_documents(names)))
    plain = GraphView(graph)
    assert plain.link("Who was Jeffrey Porcaro?") == {}
    view = GraphView(graph, embed=embedder.embed_documents, name_vectors=vectors)
    assert set(view.link("Who was Jeffrey Porcaro?")) == {"jeff porcaro"}
