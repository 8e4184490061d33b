"""Fusion of ranked lists (§16.3): RRF, weighted min-max and convex (TM2C2), by hand and by property."""

from __future__ import annotations

import itertools
import random
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcp_agentic.pipeline.fusion import SCORE_FLOORS, convex, rrf, weighted

approx = pytest.approx


def keys(fused: list[tuple[Any, float]]) -> list[Any]:
    return [k for k, _s in fused]


def as_dict(fused: list[tuple[Any, float]]) -> dict[Any, float]:
    return dict(fused)


# --- RRF ------------------------------------------------------------------------------

LISTS = {"dense": [("a", 0.9), ("b", 0.8), ("c", 0.1)], "sparse": [("c", 7.0), ("a", 3.0)]}


def test_rrf_hand_computed_with_weights() -> None:
    fused = rrf(LISTS, {"dense": 1.0, "sparse": 2.0}, rrf_k=60)
    # a: dense #1, sparse #2; b: dense #2; c: dense #3, sparse #1.
    expected = {"a": 1 / 61 + 2 / 62, "b": 1 / 62, "c": 1 / 63 + 2 / 61}
    assert keys(fused) == ["c", "a", "b"]  # c edges out a: 0.048660 > 0.048651
    assert as_dict(fused) == approx(expected, rel=1e-12)


def test_rrf_unit_weights_change_the_order() -> None:
    fused = rrf(LISTS, {"dense": 1.0, "sparse": 1.0}, rrf_k=60)
    assert keys(fused) == ["a", "c", "b"]
    assert as_dict(fused) == approx({"a": 1 / 61 + 1 / 62, "b": 1 / 62, "c": 1 / 63 + 1 / 61},
                                    rel=1e-12)


def test_rrf_defaults_missing_weight_to_one_and_rrf_k_to_60() -> None:
    assert rrf(LISTS, {}) == rrf(LISTS, {"dense": 1.0, "sparse": 1.0}, rrf_k=60)
    assert rrf(LISTS, {"sparse": 2.0}) == rrf(LISTS, {"dense": 1.0, "sparse": 2.0}, rrf_k=60)


def test_rrf_k_constant() -> None:
    fused = rrf(LISTS, {}, rrf_k=1)
    assert as_dict(fused) == approx({"a": 1 / 2 + 1 / 3, "b": 1 / 3, "c": 1 / 4 + 1 / 2},
                                    rel=1e-12)
    assert keys(fused) == ["a", "c", "b"]


def test_rrf_uses_ranks_not_scores() -> None:
    rescored = {name: [(k, -1000.0 * i) for i, (k, _s) in enumerate(ranked)]
                for name, ranked in LISTS.items()}
    assert rrf(rescored, {"sparse": 2.0}) == rrf(LISTS, {"sparse": 2.0})


def test_rrf_zero_weight_list_contributes_nothing_but_keeps_keys() -> None:
    fused = rrf(LISTS, {"dense": 0.0, "sparse": 1.0})
    assert as_dict(fused) == approx({"c": 1 / 61, "a": 1 / 62, "b": 0.0}, rel=1e-12)
    assert keys(fused) == ["c", "a", "b"]


def test_rrf_empty_inputs() -> None:
    assert rrf({}, {}) == []
    assert rrf({"dense": [], "sparse": []}, {}) == []
    assert rrf({"dense": [], "sparse": [("x", 1.0)]}, {}) == [("x", approx(1 / 61))]


# --- weighted min-max -----------------------------------------------------------------


def test_weighted_hand_computed() -> None:
    lists = {"dense": [("a", 0.75), ("b", 0.5), ("c", 0.25)],
             "sparse": [("c", 12.0), ("b", 4.0), ("d", 2.0)]}
    fused = weighted(lists, {"dense": 2.0, "sparse": 1.0})
    # dense min-max: a 1, b 0.5, c 0; sparse: c 1, b 0.2, d 0.
    assert as_dict(fused) == approx({"a": 2.0, "b": 1.2, "c": 1.0, "d": 0.0}, rel=1e-12)
    assert keys(fused) == ["a", "b", "c", "d"]


def test_weighted_fill_scores_missing_keys_and_widens_the_range() -> None:
    lists = {"dense": [("a", 0.75), ("b", 0.5), ("c", 0.25)],
             "sparse": [("c", 12.0), ("b", 3.0), ("d", 2.0)]}
    fill = {"dense": {"d": 0.0, "a": -5.0},  # a has its own dense score: fill must not override it
            "sparse": {"a": 0.0}}
    fused = weighted(lists, {}, fill)
    # dense over {a .75, b .5, c .25, d 0}: 1, 2/3, 1/3, 0; sparse over {c 12, b 3, d 2, a 0}:
    # 1, 1/4, 1/6, 0.
    expected = {"a": 1.0, "b": 2 / 3 + 1 / 4, "c": 1 / 3 + 1.0, "d": 1 / 6}
    assert as_dict(fused) == approx(expected, rel=1e-12)
    assert keys(fused) == ["c", "a", "b", "d"]


def test_weighted_single_or_equal_scores_normalise_to_one() -> None:
    assert weighted({"dense": [("a", 0.3)]}, {}) == [("a", 1.0)]
    assert weighted({"sparse": [("b", 2.0), ("a", 2.0)]}, {"sparse": 0.5}) == \
        [("a", 0.5), ("b", 0.5)]


def test_weighted_is_min_max_not_floor_anchored() -> None:
    """The worst returned score maps to 0 whatever its value (the §16.3 footgun convex fixes)."""
    fused = weighted({"dense": [("a", 0.99), ("b", 0.98)]}, {})
    assert fused == [("a", 1.0), ("b", 0.0)]


# --- convex (TM2C2) -------------------------------------------------------------------


def test_score_floors_per_section_16_3() -> None:
    assert SCORE_FLOORS == {"dense": -1.0, "sparse": 0.0}


def test_convex_hand_computed() -> None:
    lists = {"dense": [("a", 0.5), ("b", 0.0)], "sparse": [("b", 8.0), ("c", 2.0)]}
    fused = convex(lists, alpha=0.25)
    # dense from floor -1: a (0.5+1)/1.5 = 1, b (0+1)/1.5 = 2/3; sparse from floor 0: b 1, c 1/4.
    expected = {"a": 0.25 * 1.0, "b": 0.25 * (2 / 3) + 0.75 * 1.0, "c": 0.75 * 0.25}
    assert as_dict(fused) == approx(expected, rel=1e-12)
    assert keys(fused) == ["b", "a", "c"]


def test_convex_floor_keeps_a_uniformly_good_set_good() -> None:
    """Unlike min-max, two near-equal high cosines both stay near 1."""
    fused = convex({"dense": [("a", 0.99), ("b", 0.98)]}, alpha=1.0)
    assert as_dict(fused) == approx({"a": 1.0, "b": 1.98 / 1.99}, rel=1e-12)


def test_convex_alpha_extremes() -> None:
    lists = {"dense": [("a", 0.5), ("b", 0.0)], "sparse": [("b", 8.0), ("c", 2.0)]}
    only_dense = convex(lists, alpha=1.0)
    assert as_dict(only_dense) == approx({"a": 1.0, "b": 2 / 3, "c": 0.0}, rel=1e-12)
    only_sparse = convex(lists, alpha=0.0)
    assert as_dict(only_sparse) == approx({"a": 0.0, "b": 1.0, "c": 0.25}, rel=1e-12)
    assert keys(only_sparse) == ["b", "c", "a"]


def test_convex_with_fill() -> None:
    lists = {"dense": [("a", 0.5), ("b", 0.0)], "sparse": [("b", 8.0), ("c", 2.0)]}
    fill = {"dense": {"c": -0.25}, "sparse": {"a": 0.0}}
    fused = convex(lists, alpha=0.5, fill=fill)
    # dense: a 1, b 2/3, c 0.75/1.5 = 0.5; sparse: b 1, c 1/4, a 0.
    expected = {"a": 0.5, "b": 0.5 * (2 / 3) + 0.5, "c": 0.5 * 0.5 + 0.5 * 0.25}
    assert as_dict(fused) == approx(expected, rel=1e-12)
    assert keys(fused) == ["b", "a", "c"]


def test_convex_score_at_the_floor_normalises_to_zero() -> None:
    """A retriever whose every score sits at its floor (BM25 0: no query term matched) adds nothing.

    norm = (s - floor) / (max - floor): a unit with BM25 0 is at the theoretical minimum, so
    it must not be credited as a perfect lexical match. Anchoring to the floor is what makes
    convex scores comparable across queries (§16.3); a query matching no term at all must not
    fuse to the same 1.0 as one whose top hit matches every term.
    """
    lists = {"dense": [("a", 0.5), ("b", 0.25)], "sparse": []}
    fill = {"dense": {}, "sparse": {"a": 0.0, "b": 0.0}}
    fused = convex(lists, alpha=0.5, fill=fill)
    # dense from floor -1: a 1.0, b 1.25/1.5; sparse: 0 for both.
    assert as_dict(fused) == approx({"a": 0.5, "b": 0.5 * 1.25 / 1.5}, rel=1e-12)
    assert convex({"sparse": [("a", 0.0)]}, alpha=0.0) == [("a", 0.0)]


# --- deterministic tie-breaking -------------------------------------------------------


def test_rrf_ties_go_to_the_smaller_key() -> None:
    fused = rrf({"dense": [("b", 0.9)], "sparse": [("a", 5.0)]}, {})
    assert fused == [("a", approx(1 / 61)), ("b", approx(1 / 61))]
    # Engine keys are integer positions: smaller means numerically smaller, not "10" < "9".
    fused = rrf({"dense": [(10, 0.9), (3, 0.1)], "sparse": [(9, 5.0), (2, 1.0)]}, {})
    assert keys(fused) == [9, 10, 2, 3]


def test_weighted_and_convex_ties_go_to_the_smaller_key() -> None:
    lists = {"dense": [("z", 0.5), ("y", 0.5), ("x", 0.2)], "sparse": [("x", 3.0), ("w", 3.0)]}
    assert keys(weighted(lists, {"sparse": 0.0})) == ["y", "z", "w", "x"]
    assert keys(convex(lists, alpha=1.0)) == ["y", "z", "x", "w"]
    assert keys(convex(lists, alpha=0.0)) == ["w", "x", "y", "z"]


def test_rrf_exact_tie_over_three_lists_goes_to_the_smaller_key_in_any_list_order() -> None:
    """x has ranks (1, 7, 2) and y (2, 1, 7): the same three terms, so RRF(x) == RRF(y) exactly.

    Summing the terms in list order rounds them differently for x and y, so the tie is
    broken by floating-point noise (and flips with the order of the lists) instead of by
    the smaller key, as the module promises and §16.3 requires.
    """
    def filler(name: str, n: int) -> list[tuple[str, float]]:
        return [(f"f{name}{i}", 0.0) for i in range(n)]

    a = [("x", 0.0), ("y", 0.0)]
    b = [("y", 0.0)] + filler("b", 5) + [("x", 0.0)]
    c = [("fc_first", 0.0), ("x", 0.0)] + filler("c", 4) + [("y", 0.0)]
    for lists in ({"A": a, "B": b, "C": c}, {"C": c, "B": b, "A": a}):
        fused = rrf(lists, {})
        pair = [k for k in keys(fused) if k in ("x", "y")]
        assert pair == ["x", "y"], list(lists)
        assert as_dict(fused)["x"] == as_dict(fused)["y"]


def test_fusion_does_not_depend_on_input_order() -> None:
    a = {"dense": [("a", 0.5), ("b", 0.25)], "sparse": [("b", 2.0), ("a", 1.0), ("c", 0.5)]}
    b = {"sparse": a["sparse"], "dense": a["dense"]}
    for fuse in (lambda ls: rrf(ls, {"dense": 0.5}), lambda ls: weighted(ls, {"sparse": 3.0}),
                 lambda ls: convex(ls, 0.3)):
        assert fuse(a) == fuse(b)


# --- properties -----------------------------------------------------------------------

_KEYS = st.integers(0, 12)


def ranked_list(score: st.SearchStrategy[float]) -> st.SearchStrategy[list[tuple[int, float]]]:
    """A retriever's list: unique keys, scores non-increasing."""
    return st.lists(st.tuples(_KEYS, score), unique_by=lambda ks: ks[0], max_size=10).map(
        lambda items: sorted(items, key=lambda ks: -ks[1]))


# Scores on coarse grids, so normalised values are well separated and a strict top stays strict.
DENSE_SCORES = st.integers(-16, 16).map(lambda i: i / 16)
SPARSE_SCORES = st.integers(0, 120).map(lambda i: i / 4)
WEIGHTS = st.integers(1, 20).map(lambda i: i / 4)
ALPHAS = st.integers(1, 19).map(lambda i: i / 20)

two_lists = st.fixed_dictionaries({"dense": ranked_list(DENSE_SCORES),
                                   "sparse": ranked_list(SPARSE_SCORES)})
weights_st = st.fixed_dictionaries({"dense": WEIGHTS, "sparse": WEIGHTS})


def _fill_for(lists: dict[str, list[tuple[int, float]]], data: st.DataObject
              ) -> dict[str, dict[int, float]]:
    """Exact scores for the keys a retriever did not return: never above its lowest returned
    score nor equal to its top one (as in the engine, where a returned list is a top-k)."""
    union = sorted({k for ranked in lists.values() for k, _s in ranked})
    fill: dict[str, dict[int, float]] = {}
    for name, ranked in lists.items():
        scale = 16 if name == "dense" else 4
        lo = round(SCORE_FLOORS[name] * scale)
        hi = 16 * scale if not ranked else round(ranked[-1][1] * scale)
        if ranked and ranked[-1][1] == ranked[0][1]:
            hi -= 1
        fill[name] = {}
        if hi < lo:
            continue
        for k in union:
            if k not in {key for key, _s in ranked}:
                fill[name][k] = data.draw(st.integers(lo, hi)) / scale
    return fill


def fusers(data: st.DataObject, lists: dict[str, list[tuple[int, float]]]) -> list[Any]:
    """Every fusion method, with random weights, rrf_k, alpha and fill scores."""
    w = data.draw(weights_st)
    rrf_k = data.draw(st.integers(1, 100))
    alpha = data.draw(ALPHAS)
    fill = _fill_for(lists, data)
    return [
        ("rrf", lambda ls: rrf(ls, w, rrf_k)),
        ("weighted", lambda ls: weighted(ls, w)),
        ("weighted+fill", lambda ls: weighted(ls, w, fill)),
        ("convex", lambda ls: convex(ls, alpha)),
        ("convex+fill", lambda ls: convex(ls, alpha, fill)),
    ]


@settings(max_examples=200, deadline=None)
@given(lists=two_lists, data=st.data())
def test_property_input_order_does_not_matter(lists: dict[str, list[tuple[int, float]]],
                                              data: st.DataObject) -> None:
    reordered = {name: lists[name] for name in reversed(list(lists))}
    for name, fuse in fusers(data, lists):
        assert fuse(lists) == fuse(reordered), name


# derandomize: this property can hit the float-summation tie bug above by chance; keep the
# outcome reproducible (the explicit test above exposes the bug deterministically).
@settings(max_examples=200, deadline=None, derandomize=True)
@given(lists=st.dictionaries(st.sampled_from(["dense", "sparse", "e1", "e2", "e3"]),
                             ranked_list(SPARSE_SCORES), max_size=5),
       weights=st.dictionaries(st.sampled_from(["dense", "sparse", "e1", "e2", "e3"]), WEIGHTS),
       rrf_k=st.integers(1, 100), order=st.randoms(use_true_random=False))
def test_property_rrf_is_invariant_to_the_order_of_any_number_of_lists(
        lists: dict[str, list[tuple[int, float]]], weights: dict[str, float], rrf_k: int,
        order: Any) -> None:
    """§16.3: "a total order independent of engine response arrival order"."""
    names = list(lists)
    order.shuffle(names)
    shuffled = rrf({n: lists[n] for n in names}, weights, rrf_k)
    fused = rrf(lists, weights, rrf_k)
    assert keys(shuffled) == keys(fused)
    assert [s for _k, s in shuffled] == approx([s for _k, s in fused], rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(lists=st.dictionaries(st.text(min_size=1, max_size=3), ranked_list(SPARSE_SCORES),
                             max_size=4),
       weights=st.dictionaries(st.text(min_size=1, max_size=3), WEIGHTS), rrf_k=st.integers(1, 100))
def test_property_rrf_returns_the_union_of_keys_once_each(
        lists: dict[str, list[tuple[int, float]]], weights: dict[str, float], rrf_k: int) -> None:
    fused = rrf(lists, weights, rrf_k)
    union = {k for ranked in lists.values() for k, _s in ranked}
    assert sorted(keys(fused)) == sorted(union)
    for key, score in fused:
        expected = sum(weights.get(name, 1.0) / (rrf_k + rank)
                       for name, ranked in lists.items()
                       for rank, (k, _s) in enumerate(ranked, start=1) if k == key)
        assert score == approx(expected, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(lists=two_lists, data=st.data())
def test_property_scores_non_increasing_and_ties_by_key(
        lists: dict[str, list[tuple[int, float]]], data: st.DataObject) -> None:
    union = {k for ranked in lists.values() for k, _s in ranked}
    for name, fuse in fusers(data, lists):
        fused = fuse(lists)
        assert sorted(keys(fused)) == sorted(union), name
        for (k1, s1), (k2, s2) in itertools.pairwise(fused):
            assert s1 >= s2, name
            if s1 == s2:
                assert k1 < k2, name
        assert all(math.isfinite(s) and s >= 0 for _k, s in fused), name


@st.composite
def lists_with_common_winner(draw: st.DrawFn) -> dict[str, list[tuple[int, float]]]:
    """Both lists non-empty, one key first in each with a strictly highest score."""
    winner = draw(_KEYS)
    out = {}
    for name, grid in (("dense", DENSE_SCORES), ("sparse", SPARSE_SCORES)):
        rest = draw(ranked_list(grid).map(lambda r: [(k, s) for k, s in r if k != winner]))
        top = draw(grid.filter(lambda s, rest=rest: all(s > r for _k, r in rest)))
        out[name] = [(winner, top)] + rest
    return out


@settings(max_examples=200, deadline=None)
@given(lists=lists_with_common_winner(), data=st.data())
def test_property_key_first_in_every_list_is_first(lists: dict[str, list[tuple[int, float]]],
                                                   data: st.DataObject) -> None:
    winner = lists["dense"][0][0]
    for name, fuse in fusers(data, lists):
        fused = fuse(lists)
        assert fused[0][0] == winner, name
        if len(fused) > 1:
            assert fused[0][1] > fused[1][1], name


def test_rrf_leaves_keep_their_leaf_only_order_in_a_pool() -> None:
    """In a pool of leaves and summaries, the leaves are fused as if the summaries were absent."""
    rng = random.Random(7)  # noqa: S311 - test data
    moved = 0
    for _ in range(200):
        keys = [f"c{i}" for i in range(12)] + [f"s{i}" for i in range(4)]
        lists = {name: [(k, 0.0) for k in rng.sample(keys, len(keys))]
                 for name in ("dense", "sparse")}
        leaf_only = {name: [(k, s) for k, s in ranked if k.startswith("c")]
                     for name, ranked in lists.items()}
        expected = [k for k, _s in rrf(leaf_only, {})]
        pooled = rrf(lists, {}, leaf=lambda k: k.startswith("c"))
        assert [k for k, _s in pooled if k.startswith("c")] == expected
        plain = rrf(lists, {})
        moved += [k for k, _s in plain if k.startswith("c")] != expected
    assert moved > 0, "the plain pooled fusion should reorder leaves in some draws"
