"""RAPTOR tree: clustering, summaries and tree building/updating on real numbers and the real embedder."""

from __future__ import annotations

import numpy as np
import pytest

from rcp_agentic.models.llm import ChatLLM
from rcp_agentic.models.tokenizer import count_tokens
from rcp_agentic.raptor import (ExtractiveSummarizer, Leaf, LLMSummarizer, Node, Passage,
                                TreeConfig, build_tree, cluster, node_id, reduce,
                                soft_gmm, split_sentences, update_tree)
from rcp_agentic.raptor.tree import _split

TOPICS = {
    "health": [
        "Vitamin D deficiency is linked to a higher risk of multiple sclerosis. Sunlight "
        "exposure raises serum vitamin D levels.",
        "Low vitamin D levels were measured in patients with multiple sclerosis. "
        "Supplementation reduced relapse rates in a small trial.",
        "Dietary calcium and vitamin D support bone density in older adults. Fractures were "
        "less frequent with supplements.",
        "Serum vitamin D concentration depends on latitude and season. Winter levels were "
        "lowest in northern cohorts.",
        "Vitamin D receptors are expressed in immune cells. Deficiency alters T cell "
        "responses in autoimmune disease.",
        "A cohort study followed vitamin D intake and multiple sclerosis onset for ten years. "
        "Higher intake predicted lower risk.",
        "Vitamin D supplementation in pregnancy was studied for effects on infant bone "
        "health. Doses of 1000 IU were compared.",
        "Rickets in children results from severe vitamin D deficiency. Fortified milk "
        "nearly eliminated it.",
    ],
    "retrieval": [
        "BM25 ranks documents by term frequency and inverse document frequency. Document "
        "length normalisation tempers long texts.",
        "Dense retrievers embed queries and passages with a bi-encoder. Passages are ranked "
        "by cosine similarity to the query.",
        "Reciprocal rank fusion combines several rankings using only rank positions. It "
        "needs no score calibration.",
        "Cross-encoders rerank the top retrieved passages by reading query and passage "
        "together. They are slower than bi-encoders.",
        "An inverted index maps each term to the documents that contain it. Query "
        "processing walks these posting lists.",
        "Retrieval-augmented generation feeds retrieved passages to a language model. The "
        "retriever's recall bounds answer quality.",
        "Hybrid search fuses sparse BM25 scores with dense embedding similarity. Fusion "
        "improves recall on benchmark queries.",
        "Approximate nearest neighbour indexes such as HNSW search embedding vectors "
        "quickly. Recall trades off against latency.",
    ],
    "astronomy": [
        "The Andromeda galaxy is the nearest large spiral galaxy to the Milky Way. It will "
        "collide with our galaxy in billions of years.",
        "Black holes form when massive stars collapse at the end of their lives. Their "
        "gravity traps even light.",
        "Exoplanets are detected by the dimming of their host star during a transit. The "
        "Kepler telescope found thousands.",
        "Neutron stars are dense remnants of supernova explosions. A teaspoon of their "
        "matter weighs billions of tonnes.",
        "The cosmic microwave background is radiation left over from the early universe. "
        "Its tiny fluctuations seeded galaxies.",
        "Jupiter is the largest planet in the solar system. Its Great Red Spot is a storm "
        "larger than Earth.",
        "Telescopes on mountain tops avoid much of the atmosphere's turbulence. Adaptive "
        "optics corrects the rest.",
        "Dark matter does not emit light but its gravity shapes galaxy rotation curves. "
        "Its nature remains unknown.",
    ],
}


def passage(uid: str, text: str) -> Passage:
    return Passage(uid, text, split_sentences(text, uid, 0))


def make_leaves(embedder, items: list[tuple[str, str]]) -> list[Leaf]:
    vectors = embedder.embed_documents([text for _, text in items])
    return [Leaf(uid, vec, passage(uid, text), count_tokens(text))
            for (uid, text), vec in zip(items, vectors)]


def corpus() -> list[tuple[str, str]]:
    return [(f"{topic}-{i}", text) for topic, texts in TOPICS.items()
            for i, text in enumerate(texts)]


def blobs(k: int, per: int, dim: int, spread: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, dim))
    x = np.concatenate([c + spread * rng.normal(size=(per, dim)) for c in centers])
    return x, np.repeat(np.arange(k), per)


@pytest.fixture(scope="module")
def leaves(embedder) -> list[Leaf]:
    return make_leaves(embedder, corpus())


@pytest.fixture(scope="module")
def summarizer() -> ExtractiveSummarizer:
    return ExtractiveSummarizer(count_tokens)


CONFIG = TreeConfig(seed=0, summary_tokens=60, top_size=2)


@pytest.fixture(scope="module")
def tree(leaves, embedder, summarizer) -> list[Node]:
    return build_tree(leaves, embed=embedder.embed_documents, summarizer=summarizer,
                      config=CONFIG, count_tokens=count_tokens)


# --- clustering -------------------------------------------------------------------------------

def test_reduce_guards() -> None:
    x, _ = blobs(2, 3, 50, 0.1)
    assert reduce(x[:2], 10, n_neighbors=5, seed=0).shape == (2, 50)  # too few: unchanged
    assert reduce(x[:5], 10, n_neighbors=5, seed=0).shape == (5, 4)  # PCA to n - 1
    assert reduce(x, 3, n_neighbors=2, seed=0).shape == (6, 3)


def test_bic_picks_the_true_number_of_blobs() -> None:
    for k in (1, 3, 5):
        points, labels = blobs(k, 80, 2, 0.05, seed=k)
        clusters = soft_gmm(points, max_clusters=20, threshold=0.1, seed=0)
        assert len(clusters) == k
        assert sorted(len(c) for c in clusters) == [80] * k
    x, labels = blobs(6, 60, 384, 0.15)
    found = cluster(x, seed=0)
    assert sorted(tuple(labels[c]) for c in found) == [(i,) * 60 for i in range(6)]


def test_large_inputs_select_on_a_subsample() -> None:
    points, labels = blobs(4, 1000, 3, 0.05, seed=1)
    clusters = soft_gmm(points, max_clusters=50, threshold=0.1, seed=0)
    assert len(clusters) == 4
    assert all(len(set(labels[c])) == 1 for c in clusters)


def test_soft_membership_puts_a_midpoint_in_both_clusters() -> None:
    rng = np.random.default_rng(3)
    left = rng.normal([-2.0, 0.0], 0.5, size=(100, 2))
    right = rng.normal([2.0, 0.0], 0.5, size=(100, 2))
    middle = np.array([[0.0, 0.0], [0.05, 0.1], [-0.05, -0.1]])
    points = np.concatenate([left, right, middle])
    clusters = soft_gmm(points, max_clusters=10, threshold=0.1, seed=0)
    assert len(clusters) == 2
    both = set(clusters[0]) & set(clusters[1])
    assert {200, 201, 202} <= both
    assert set(clusters[0]) | set(clusters[1]) == set(range(len(points)))
    hard = soft_gmm(points, max_clusters=10, threshold=0.99, seed=0)
    assert not set(hard[0]) & set(hard[1])  # a high threshold keeps only the argmax


def test_cluster_is_deterministic_for_a_seed() -> None:
    x, _ = blobs(5, 40, 64, 0.6, seed=7)
    assert cluster(x, seed=4) == cluster(x, seed=4)
    assert soft_gmm(x[:, :3], max_clusters=10, threshold=0.1, seed=2) == soft_gmm(
        x[:, :3], max_clusters=10, threshold=0.1, seed=2)


def test_cluster_small_inputs() -> None:
    x, _ = blobs(1, 4, 16, 1.0)
    assert cluster(x[:0], seed=0) == []
    assert cluster(x[:1], seed=0) == [[0]]
    assert cluster(x[:2], seed=0) == [[0, 1]]
    for n in (3, 4):
        found = cluster(x[:n], seed=0)
        assert set().union(*found) == set(range(n))


def test_split_respects_the_token_cap() -> None:
    x, _ = blobs(1, 40, 32, 0.01)  # one tight blob: clustering alone does not divide it
    tokens = np.full(40, 100)
    parts = _split(list(range(40)), x, tokens, TreeConfig(cluster_tokens=500))
    assert all(tokens[p].sum() <= 500 for p in parts)
    assert set().union(*parts) == set(range(40))
    huge = np.array([10_000, 10, 10, 10])
    parts = _split([0, 1, 2, 3], x[:4], huge, TreeConfig(cluster_tokens=500))
    assert [0] in parts and len(parts) < 4  # an item over the cap stands alone
    assert set().union(*parts) == {0, 1, 2, 3}


# --- summaries --------------------------------------------------------------------------------

def test_split_sentences_keeps_document_spans() -> None:
    doc = ("Preface. Vitamin D (e.g. from sunlight) matters, see Fig. 2 and J. Smith et al. "
           "in 2019! Does it work? Yes, 3.5 mg daily.\n\nA new paragraph")
    sentences = split_sentences(doc[9:], "d", 9)
    assert [s.text for s in sentences] == [
        "Vitamin D (e.g. from sunlight) matters, see Fig. 2 and J. Smith et al. in 2019!",
        "Does it work?", "Yes, 3.5 mg daily.", "A new paragraph"]
    assert all(doc[s.span.start:s.span.end] == s.text for s in sentences)
    assert all(s.span is None for s in split_sentences(doc, None, 0))


def test_extractive_summary_respects_budget_and_spans(summarizer) -> None:
    docs = dict(corpus())
    passages = [passage(uid, text) for uid, text in corpus() if uid.startswith("health")]
    for budget in (15, 40, 80):
        summary = summarizer.summarize(passages, budget)
        assert summary.sentences, f"an empty summary at budget {budget}"
        assert count_tokens(summary.text) <= budget
        for s in summary.sentences:
            assert docs[s.span.doc_id][s.span.start:s.span.end] == s.text
    wide = summarizer.summarize(passages, 80)
    assert "vitamin d" in wide.text.lower()
    assert len(wide.sentences) >= 3
    assert len({s.text for s in wide.sentences}) == len(wide.sentences)
    order = [(s.span.doc_id, s.span.start) for s in wide.sentences]
    uids = [p.uid for p in passages]
    assert order == sorted(order, key=lambda o: (uids.index(o[0]), o[1]))  # reading order
    tiny = summarizer.summarize(passages, 3)  # every sentence is longer: the best one is cut
    assert len(tiny.sentences) == 1 and 0 < count_tokens(tiny.text) <= 3
    span = tiny.sentences[0].span
    assert docs[span.doc_id][span.start:span.end] == tiny.text
    assert summarizer.summarize(passages, 40) == summarizer.summarize(passages, 40)


def test_llm_summarizer_with_langchain_fake() -> None:
    from langchain_core.language_models import FakeListChatModel

    varied = " ".join(f"Finding {i * 7919 % 1000:03d} holds." for i in range(120))
    replies = ["Vitamin D protects bones. It also matters in multiple sclerosis.",
               varied, "", "word " * 500]
    chat = ChatLLM(FakeListChatModel(responses=replies), concurrency=1)
    llm = LLMSummarizer(chat, count_tokens)
    assert llm.identity.startswith("abstractive/2:llm:langchain:")
    jobs = [([passage("a", "Vitamin D is needed. Bones need it.")], 50),
            ([passage("b", "Long text here. More of it.")], 20),
            ([passage("c", "An empty reply falls back to extraction. It keeps spans.")], 50),
            ([passage("d", "A looping reply falls back too. It is counted.")], 50)]
    first, long, empty, looped = llm.summarize_many(jobs)
    assert first.text == replies[0]
    assert [s.text for s in first.sentences] == ["Vitamin D protects bones.",
                                                 "It also matters in multiple sclerosis."]
    assert all(s.span is None for s in first.sentences + long.sentences)
    assert 0 < count_tokens(long.text) <= 20
    for fell_back in (empty, looped):
        assert fell_back.sentences and all(s.span is not None for s in fell_back.sentences)
    assert dict(chat.usage.of("tree").fallbacks) == {"empty": 1, "repetitive": 1}
    assert "Vitamin D is needed." in LLMSummarizer.prompt(jobs[0][0], 50)


def test_llm_summarizer_with_llamaindex_mock() -> None:
    from llama_index.core.llms import MockLLM

    llm = LLMSummarizer(MockLLM(max_tokens=30), count_tokens)
    assert llm.identity.startswith("abstractive/2:llm:llamaindex:")
    summaries = llm.summarize_many([([passage("a", "Stars shine. Planets orbit.")], 12),
                                    ([passage("b", "Rivers flow to the sea.")], 12)])
    assert len(summaries) == 2
    assert all(0 < count_tokens(s.text) <= 12 and s.sentences for s in summaries)


# --- tree -------------------------------------------------------------------------------------

def by_level(nodes: list[Node]) -> dict[int, list[Node]]:
    out: dict[int, list[Node]] = {}
    for n in nodes:
        out.setdefault(n.level, []).append(n)
    return out


def test_tree_covers_every_leaf_and_levels_shrink(tree, leaves) -> None:
    levels = by_level(tree)
    assert sorted(levels) == list(range(1, len(levels) + 1)) and len(levels) >= 2
    leaf_ids = {lf.uid for lf in leaves}
    assert set().union(*(n.leaves for n in levels[1])) == leaf_ids
    uids = {n.uid for n in tree}
    assert len(uids) == len(tree)
    for n in tree:
        kids = [lf for lf in n.children] if n.level == 1 else n.children
        assert kids and set(kids) <= (leaf_ids if n.level == 1 else uids)
        child_leaves = ({*n.children} if n.level == 1 else
                        set().union(*(m.leaves for m in tree if m.uid in n.children)))
        assert n.leaves == child_leaves
        assert n.uid == node_id(n.level, n.leaves)
        assert n.vector is not None and n.vector.shape == (384,)
        assert 0 < n.tokens <= CONFIG.summary_tokens
    counts = [len(levels[lv]) for lv in sorted(levels)]
    assert all(b <= CONFIG.min_shrink * a for a, b in zip([len(leaves)] + counts, counts))
    assert counts[-1] <= CONFIG.top_size or len(counts) == CONFIG.max_levels
    # topics stay apart at level 1: no node mixes all three topics
    assert all(len({uid.split("-")[0] for uid in n.leaves}) < 3 for n in levels[1])


def test_tree_is_deterministic_and_ids_are_stable(tree, leaves, embedder, summarizer) -> None:
    again = build_tree(leaves, embed=embedder.embed_documents, summarizer=summarizer,
                       config=CONFIG, count_tokens=count_tokens)
    assert [(n.uid, n.children, n.summary) for n in again] == \
        [(n.uid, n.children, n.summary) for n in tree]
    assert node_id(1, ["b", "a"]) == node_id(1, ["a", "b"]) != node_id(2, ["a", "b"])
    assert node_id(1, ["a"]).startswith("tree:1:") and len(node_id(1, ["a"])) == 23


def test_tree_stops_at_max_levels_and_top_size(leaves, embedder, summarizer) -> None:
    one = build_tree(leaves, embed=embedder.embed_documents, summarizer=summarizer,
                     config=TreeConfig(max_levels=1), count_tokens=count_tokens)
    assert {n.level for n in one} == {1}
    wide = build_tree(leaves, embed=embedder.embed_documents, summarizer=summarizer,
                      config=TreeConfig(top_size=100), count_tokens=count_tokens)
    assert {n.level for n in wide} == {1}  # level 1 already has <= top_size nodes


def test_tree_respects_the_cluster_token_cap(leaves, embedder, summarizer) -> None:
    cap = 120
    nodes = build_tree(leaves, embed=embedder.embed_documents, summarizer=summarizer,
                       config=TreeConfig(cluster_tokens=cap, max_levels=1),
                       count_tokens=count_tokens)
    tokens = {lf.uid: lf.tokens for lf in leaves}
    assert all(sum(tokens[c] for c in n.children) <= cap for n in nodes)
    assert set().union(*(n.leaves for n in nodes)) == set(tokens)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_tiny_trees(n, leaves, embedder, summarizer) -> None:
    nodes = build_tree(leaves[:n], embed=embedder.embed_documents, summarizer=summarizer,
                       config=TreeConfig(), count_tokens=count_tokens)
    if n == 1:
        assert nodes == []
    else:
        assert set().union(*(m.leaves for m in nodes)) == {lf.uid for lf in leaves[:n]}
    assert build_tree([], embed=embedder.embed_documents, summarizer=summarizer,
                      config=TreeConfig(), count_tokens=count_tokens) == []


def update_args(leaves: list[Leaf], embedder, summarizer) -> dict:
    return dict(embed=embedder.embed_documents, summarizer=summarizer, config=CONFIG,
                count_tokens=count_tokens, passages={lf.uid: lf.passage for lf in leaves})


def test_update_adds_a_leaf_to_its_topic(tree, leaves, embedder, summarizer) -> None:
    new = make_leaves(embedder, [("astronomy-new", "Saturn's rings are made of ice and rock. "
                                  "The planet is a gas giant like Jupiter.")])
    vectors = {lf.uid: lf.vector for lf in leaves}
    delta = update_tree(tree, vectors, new, set(), **update_args(leaves, embedder, summarizer))
    joined = [n for n in delta.added if n.level == 1]
    assert len(joined) == 1 and "astronomy-new" in joined[0].leaves
    assert {uid.split("-")[0] for uid in joined[0].leaves} == {"astronomy"}
    old = {n.uid: n for n in tree}
    before = next(n for n in tree if n.level == 1 and n.leaves == joined[0].leaves - {"astronomy-new"})
    assert before.uid in delta.retired and joined[0].uid not in old
    # every ancestor was rewritten; the other level-1 nodes keep their ids
    changed = {before.uid}
    for level in range(2, max(old[u].level for u in old) + 1):
        changed |= {n.uid for n in tree if n.level == level and set(n.children) & changed}
    assert set(delta.retired) == changed
    assert {n.level for n in delta.added} == {old[u].level for u in changed}
    assert all(len([n for n in delta.added if n.level == lv]) == 1
               for lv in {n.level for n in delta.added})
    assert all(n.uid == node_id(n.level, n.leaves) for n in delta.added)
    assert all("astronomy-new" in n.leaves for n in delta.added)


def apply(tree: list[Node], delta) -> list[Node]:
    gone = set(delta.retired) | {n.uid for n in delta.added}
    return [n for n in tree if n.uid not in gone] + delta.added


def test_update_removes_leaves_and_retires_empty_nodes(tree, leaves, embedder, summarizer) -> None:
    vectors = {lf.uid: lf.vector for lf in leaves}
    args = update_args(leaves, embedder, summarizer)
    target = min((n for n in tree if n.level == 1 and len(n.leaves) >= 2), key=lambda n: n.uid)
    gone = sorted(target.leaves)[0]
    delta = update_tree(tree, vectors, [], {gone}, **args)
    assert target.uid in delta.retired
    rewritten = [n for n in delta.added if n.level == 1]
    assert [n.leaves for n in rewritten] == [target.leaves - {gone}]
    untouched = [n for n in tree if n.level == 1 and gone not in n.leaves]
    assert not {n.uid for n in untouched} & set(delta.retired)
    after = apply(tree, delta)
    assert gone not in set().union(*(n.leaves for n in after))
    assert all(n.uid == node_id(n.level, n.leaves) for n in after)
    parents = {c for n in after if n.level >= 2 for c in n.children}
    assert parents <= {n.uid for n in after}

    emptied = update_tree(tree, vectors, [], set(target.leaves), **args)
    assert target.uid in emptied.retired
    assert all(not (n.leaves & target.leaves) for n in emptied.added)
    after = apply(tree, emptied)
    covered = set().union(*(n.leaves for n in after))
    assert covered == {lf.uid for lf in leaves} - target.leaves
    assert all(set(n.children) <= {m.uid for m in after} for n in after if n.level >= 2)


def test_update_without_a_tree_builds_one_and_splits_grown_nodes(leaves, embedder,
                                                                 summarizer) -> None:
    args = update_args(leaves, embedder, summarizer)
    delta = update_tree([], {}, leaves[:8], set(), **args)
    assert delta.retired == [] and delta.added
    assert set().union(*(n.leaves for n in delta.added)) == {lf.uid for lf in leaves[:8]}
    nodes = delta.added
    vectors = {lf.uid: lf.vector for lf in leaves[:8]}
    args["config"] = TreeConfig(cluster_tokens=200, top_size=2)
    grown = update_tree(nodes, vectors, leaves[8:12], set(), **args)
    tokens = {lf.uid: lf.tokens for lf in leaves}
    before = [n for n in nodes if n.level == 1]
    level1 = [n for n in apply(nodes, grown) if n.level == 1]
    written = {n.uid for n in grown.added}
    assert len(level1) > len(before)  # grown nodes were split
    assert all(sum(tokens[c] for c in n.children) <= 200 for n in level1 if n.uid in written)
    assert set().union(*(n.leaves for n in level1)) == {lf.uid for lf in leaves[:12]}


