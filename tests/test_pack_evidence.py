"""A summary may displace a finer hit only when it keeps that hit's evidence for the query."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from rcp_agentic import Engine
from rcp_agentic.pipeline.evidence import packing_containment
from rcp_agentic.analyzer import analyze
from rcp_agentic.pipeline.packing import pack

# Rank 0 is a summary of chunks a and b; ranks 1 and 2 are those chunks; rank 3 is chunk c.
SETS = [frozenset({"a", "b"}), frozenset({"a"}), frozenset({"b"}), frozenset({"c"})]


def test_summary_that_drops_a_displaced_chunks_evidence_is_withheld() -> None:
    asked: list[tuple[int, int]] = []

    def keeps(i: int, j: int) -> bool:
        asked.append((i, j))
        return j != 2  # the summary keeps a's best sentence, not b's

    packed = pack([10, 10, 10, 10], 10, None, leaves=lambda i: SETS[i], keeps=keeps)
    assert packed.taken == [1, 2, 3]
    assert packed.withheld == 1 and packed.contained == 0
    assert asked == [(0, 1), (0, 2)]  # only the summary is judged, against what it contains


def test_summary_that_keeps_every_displaced_chunks_evidence_is_taken() -> None:
    packed = pack([10, 10, 10, 10], 10, None, leaves=lambda i: SETS[i], keeps=lambda i, j: True)
    assert packed.taken == [0, 3] and packed.contained == 2 and packed.withheld == 0


def test_only_chunks_packing_would_take_count_as_displaced() -> None:
    # Budget 25: after the summary (10) only chunk a (10) would fit; b never would.
    asked: list[int] = []

    def keeps(i: int, j: int) -> bool:
        asked.append(j)
        return True

    packed = pack([10, 10, 20, 5], 10, 25, leaves=lambda i: SETS[i], keeps=keeps)
    assert asked == [1]
    assert packed.taken == [0, 3] and packed.tokens == 15
    # Chunk a alone would fill k=1 in the summary's place, so it is still displaced.
    asked.clear()
    assert pack([10, 10, 10, 10], 1, None, leaves=lambda i: SETS[i], keeps=keeps).taken == [0]
    assert asked == [1]


def test_no_unit_and_a_unit_it_contains_share_a_result() -> None:
    rng = random.Random(7)
    leaves = "abcdef"
    for _ in range(300):
        n = rng.randint(1, 12)
        sets = [frozenset(rng.sample(leaves, rng.randint(1, 4))) for _ in range(n)]
        tokens = [rng.randint(1, 30) for _ in range(n)]
        verdict = {(i, j): rng.random() < 0.5 for i in range(n) for j in range(n)}
        packed = pack(tokens, rng.randint(1, n), rng.choice([None, 40, 80]),
                      leaves=lambda i: sets[i], keeps=lambda i, j: verdict[i, j])
        got = [sets[i] for i in packed.taken]
        assert not any(x <= y for a, x in enumerate(got) for b, y in enumerate(got) if a != b)
        assert len(packed.taken) + packed.contained + packed.withheld + packed.skipped \
            + packed.oversized <= n


# --- the engine's judgement: best query-matching sentence of the chunk --------------------

TEXTS = {
    "owls": ["Barn owls hunt voles across open farmland at night.",
             "Their facial disc funnels faint rustling sounds toward asymmetric ears.",
             "Farmers in Somerset install nest boxes in old hay barns for them.",
             "A breeding pair may eat several thousand rodents in one year."],
    "kestrels": ["Kestrels hover above roadside verges while scanning the grass.",
                 "They can see ultraviolet light reflected by vole urine trails.",
                 "Motorway embankments have become rich hunting grounds for them.",
                 "Clutches of four or five eggs hatch after about a month."],
}


@pytest.fixture(scope="module")
def tree_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Any:
    path: Path = tmp_path_factory.mktemp("evidence") / "e"
    eng = Engine(path, embedder=embedder, build_tree=True, tree_summary_tokens=24,
                 tree_top_size=1)
    eng.add_documents([{"id": f"{name}-{i}", "text": " ".join(lines[i:] + lines[:i])}
                       for name, lines in TEXTS.items() for i in range(3)])
    eng.wait_for_derived()
    yield eng
    eng.close()


def _pool(eng: Engine) -> Any:
    kinds = [("chunk", 0)] + [("tree-node", lv) for lv in sorted(
        {int(r["level"]) for r in eng.store.live_derived("tree-node")})]
    return eng.catalog.index(kinds)


def test_keeps_asks_for_the_chunks_best_matching_sentence(tree_engine: Engine) -> None:
    eng = tree_engine
    index = _pool(eng)
    node = next(r for r in eng.store.live_derived("tree-node") if r["level"] == 1)
    row = eng.store.hydrate([int(node["rowid"])])[int(node["rowid"])]
    kept = {row["text"][s["at"][0]:s["at"][1]] for s in row["umeta"]["spans"]}
    chunk_uid = row["leaves"][0]
    chunk_pos = int(index.positions_of_uids([chunk_uid])[0])
    chunk = eng.store.hydrate([int(index.rowids[chunk_pos])])[int(index.rowids[chunk_pos])]
    sentences = [s for lines in TEXTS.values() for s in lines if s in chunk["text"]]
    left_out = [s for s in sentences if s not in kept]
    held = [s for s in sentences if s in kept]
    assert left_out and held, "the summary budget keeps some of the chunk's sentences, not all"
    ranked = [(index.position[int(row["rowid"])], 1.0), (chunk_pos, 0.5)]
    for query, expected in ((left_out[0], False), (held[0], True)):
        assert analyze(query)
        _leaves, keeps = packing_containment(eng.store, index, ranked, query)
        assert keeps(0, 1) is expected, query


def test_collapsed_tree_result_holds_no_unit_with_a_unit_it_contains(tree_engine: Engine) -> None:
    for lines in TEXTS.values():
        for query in lines:
            res = tree_engine.retrieve(query, unit="tree-node", k=20, token_budget=120)
            chunks = {h.id for h in res.hits if h.unit == "chunk"}
            for h in res.hits:
                if h.unit == "tree-node":
                    assert h.provenance and h.provenance.leaves
                    assert chunks.isdisjoint(h.provenance.leaves)
