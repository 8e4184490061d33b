"""One index and one query give one order: ties fall by unit id, never by insertion or noise.

Hypothesis draws small corpora in which several documents share a text (so their chunks
tie exactly in BM25 and, up to float noise, in cosine), indexes them twice in two
insertion orders through an embedder that adds independent noise of at most 1e-7 to
every vector component, and checks that dense, sparse, fused (rrf, weighted, convex),
MMR-diversified and packed results rank the same ids, on both recall backends. The
ranking primitives are checked directly too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import backend_overrides
from rcp_agentic import Engine
from rcp_agentic.pipeline.fusion import convex, rrf, weighted
from rcp_agentic.ranking import ranked, top

WORDS = ("harbor", "lantern", "velvet", "copper", "orchard", "choir", "skyline", "glass",
         "midnight", "seaside", "river", "signal")


class NoisyEmbedder:
    """The real embedder, each document vector component moved by up to ±1e-7 (seeded)."""

    def __init__(self, inner: Any, seed: int) -> None:
        self.inner = inner
        self.identity = inner.identity  # the same model: noise stands in for another BLAS
        self.rng = np.random.default_rng(seed)

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        vectors = np.asarray(self.inner.embed_documents(texts), dtype=np.float32)
        return vectors + self.rng.uniform(-1e-7, 1e-7, vectors.shape).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self.inner.embed_query(text), dtype=np.float32)


@st.composite
def corpora(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[int], str]:
    """Documents (3–4 texts, each shared by 1–3 documents), a permutation of them, a query."""
    texts = draw(st.lists(st.lists(st.sampled_from(WORDS), min_size=3, max_size=6)
                          .map(" ".join), min_size=3, max_size=4, unique=True))
    copies = draw(st.lists(st.integers(1, 3), min_size=len(texts), max_size=len(texts)))
    docs = [{"id": f"d{i}-{c}", "text": f"The {t}."} for i, (t, n) in
            enumerate(zip(texts, copies)) for c in range(n)]
    order = draw(st.permutations(range(len(docs))))
    query = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)))
    return docs, list(order), query


REQUESTS: dict[str, dict[str, Any]] = {
    "dense": {"mode": "dense"},
    "sparse": {"mode": "sparse"},
    "rrf": {"mode": "hybrid"},
    "weighted": {"mode": "hybrid", "fusion": {"method": "weighted"}},
    "convex": {"mode": "hybrid", "fusion": {"method": "convex"}},
    "mmr": {"mode": "hybrid", "mmr": {"lambda": 0.7}},
    "packed": {"mode": "hybrid", "token_budget": 12},
}


def _orders(path: Path, embedder: Any, backend: str, docs: list[dict[str, Any]]
            ) -> Engine:
    eng = Engine(path, embedder=embedder, **backend_overrides(backend, path))
    for doc in docs:  # one write each: rowids follow this order
        eng.add_documents([doc])
    return eng


@settings(max_examples=5, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=corpora())
def test_insertion_order_and_float_noise_do_not_move_a_rank(
        tmp_path_factory: pytest.TempPathFactory, embedder: Any, backend: str,
        case: tuple[list[dict[str, Any]], list[int], str]) -> None:
    docs, order, query = case
    root = tmp_path_factory.mktemp("ties")
    first = _orders(root / "a", NoisyEmbedder(embedder, 1), backend, docs)
    second = _orders(root / "b", NoisyEmbedder(embedder, 2), backend, [docs[i] for i in order])
    try:
        for name, options in REQUESTS.items():
            got = [[(h.id, h.score) for h in eng.retrieve(query, k=len(docs), **options).hits]
                   for eng in (first, second)]
            assert [i for i, _s in got[0]] == [i for i, _s in got[1]], (name, query, got)
            if name in ("dense", "sparse"):  # equal scores: reported equal, in id order
                assert [s for _i, s in got[0]] == pytest.approx([s for _i, s in got[1]], abs=2e-6)
                tied = [(a, b) for (a, sa), (b, sb) in zip(got[0], got[0][1:]) if sa == sb]
                assert all(a < b for a, b in tied), (name, got[0])
    finally:
        first.close()
        second.close()


def test_ranked_groups_noise_and_orders_ties_by_key() -> None:
    noisy = [("c", 0.5891186), ("a", 0.5891185), ("b", 0.58911858), ("d", 0.3)]
    assert ranked(noisy) == [("a", 0.5891186), ("b", 0.5891186), ("c", 0.5891186), ("d", 0.3)]
    assert ranked(reversed(noisy)) == ranked(noisy)
    assert ranked([("b", 2.0), ("a", 1.0)]) == [("b", 2.0), ("a", 1.0)]  # no tie: by score


def test_top_keeps_the_smaller_keys_of_a_tie_across_the_cut() -> None:
    scores = np.array([0.2, 0.9, 0.5, 0.5 + 3e-8, 0.5 - 2e-8, 0.1])
    keys = np.array([5, 4, 3, 2, 1, 0])
    for perm in ([0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [2, 0, 4, 1, 5, 3]):
        idx, got = top(scores[perm], keys[perm], 3)
        assert keys[perm][idx].tolist() == [4, 1, 2] and got[1] == got[2]


def test_fused_ties_fall_by_key_whatever_the_list_order() -> None:
    lists = {"dense": [("x", 0.9), ("y", 0.5)], "sparse": [("y", 2.0), ("x", 1.0)]}
    swapped = {"sparse": lists["sparse"], "dense": lists["dense"]}
    for fuse in (lambda ls: rrf(ls, {}), lambda ls: weighted(ls, {}),
                 lambda ls: convex(ls, 0.5)):
        assert [k for k, _s in fuse(lists)] == [k for k, _s in fuse(swapped)]
    assert rrf(lists, {})[0][0] == "x"  # 1/61 + 1/62 both: the smaller key
