"""Child process of tests/test_durability.py: ingest a seeded plan of small batches, report commits.

Usage: python ingest_worker.py ENGINE_DIR SEED [--die-at CALL:POINT] [--docs FILE]

Runs ``plan(SEED)``: many ``add_documents`` calls of a few documents each, some of
them re-adding an existing id with a new text (an upsert). After each call
returns it writes ``committed <id> <version>`` for each document of the call in a
single write and flushes, so the parent knows exactly what was acknowledged.

``--die-at CALL:POINT`` makes the worker SIGKILL itself during call CALL:
``in-sqlite`` inside the write transaction (before COMMIT), ``in-chroma`` after the
SQLite commit while the Chroma outbox is being applied (deletes done, the first
add done, the rest not), ``before-derived`` after the documents' commit, before the
derived builders run. Without it the parent kills the worker from outside.

``--docs FILE``: instead of the plan, one call adding the documents of FILE (a JSON
list of ``{"id", "text"}``), each acknowledged as version 1.

The parent imports this file for ``plan``, ``doc_text`` and ``ENGINE_OPTIONS``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys

# Short texts (≈ 3 chunks of ≤ 32 tokens each) keep embedding fast.
ENGINE_OPTIONS = {"chunk_size": 32, "chunk_overlap": 8, "embed_batch_size": 8}
CALLS = 40
DOCS_PER_CALL = 3
UPSERT_RATE = 0.3


def _words(block: str) -> list[str]:
    return block.split()


_WORDS = _words("""
aurora basalt cathedral dolphin ember falcon glacier harbor iguana jasmine kettle lantern meadow
nebula orchard pepper quartz raven saffron tundra umbrella violin walnut xylophone yacht zephyr
anchor bicycle canyon desert engine fjord granite hammock island jungle kayak lagoon marble
nectar oasis pyramid quiver reef satellite telescope utensil volcano waterfall yogurt zucchini
algebra ballet compass diamond eclipse fossil geyser horizon igloo javelin koala lighthouse
mosaic nomad origami parrot quasar rhubarb sapphire tornado unicorn vineyard windmill
accordion blizzard cinnamon dynamo elephant flamingo gondola harvest icicle jellyfish kiwi
lemonade magnet noodle octopus pelican quill rocket sardine tulip urchin velvet wombat
antelope broccoli cactus daffodil espresso fireworks gazelle hurricane inkwell jigsaw
kangaroo locomotive mushroom nightingale ostrich penguin quicksand raccoon scorpion tractor
""")
_VERBS = _words("""
admires builds carries discovers echoes follows guards hides inspects juggles keeps lifts
measures notices observes paints questions repairs sketches teaches uncovers visits weighs
""")


def doc_text(doc_id: str, version: int) -> str:
    """The text of version ``version`` of document ``doc_id`` (deterministic, several sentences)."""
    rng = random.Random(f"{doc_id}/{version}")
    sentences = [f"Record {doc_id} revision {version} describes a {rng.choice(_WORDS)}."]
    for _ in range(4):
        a, b, c, d = rng.sample(_WORDS, 4)
        sentences.append(f"The {a} {rng.choice(_VERBS)} a {b} beside the {c} and the {d}.")
    return " ".join(sentences)


def plan(seed: int, calls: int = CALLS) -> list[list[tuple[str, int]]]:
    """The calls: each a list of (doc id, version); an id seen before gets its next version."""
    rng = random.Random(seed)
    versions: dict[str, int] = {}
    out: list[list[tuple[str, int]]] = []
    for _ in range(calls):
        call: list[tuple[str, int]] = []
        for _ in range(DOCS_PER_CALL):
            old = [i for i in versions if i not in {d for d, _v in call}]
            if old and rng.random() < UPSERT_RATE:
                doc_id = rng.choice(sorted(old))
            else:
                doc_id = f"k{len(versions)}"
            versions[doc_id] = versions.get(doc_id, 0) + 1
            call.append((doc_id, versions[doc_id]))
        out.append(call)
    return out


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> None:
    engine_dir, seed = argv[0], int(argv[1])
    die_call, die_point = -1, ""
    flags = dict(zip(argv[2::2], argv[3::2]))
    if "--die-at" in flags:
        call, die_point = flags["--die-at"].split(":")
        die_call = int(call)
    docs_file = flags.get("--docs", "")

    from rcp_agentic import Engine

    # One torch thread: the parent runs several workers at once. Inline derived updates: the
    # ``before-derived`` die point sits between a write's commit and its builders.
    engine = Engine(engine_dir, torch_threads=1, derived_updates="inline", **ENGINE_OPTIONS)
    current = {"call": -1}
    if die_point == "in-sqlite":
        original_term_ids = engine.store.vocabulary.assign

        def term_ids_then_die(db, terms):  # runs inside BEGIN IMMEDIATE … COMMIT
            original_term_ids(db, terms)
            if current["call"] == die_call:
                _die()

        engine.store.vocabulary.assign = term_ids_then_die  # type: ignore[method-assign]
    elif die_point == "in-chroma":
        original_add = engine.chroma.add

        def add_then_die(unit, level, rowids, vectors):  # runs after the SQLite commit
            original_add(unit, level, rowids, vectors)
            if current["call"] == die_call:
                _die()

        engine.chroma.add = add_then_die
    elif die_point == "before-derived":
        def die_instead(**_kw):  # add_documents calls it after the documents' commit
            if current["call"] == die_call:
                _die()
            return original_update(**_kw)

        original_update = engine.derived.builders.update
        engine.derived.builders.update = die_instead  # type: ignore[method-assign]
    elif die_point:
        raise SystemExit(f"unknown die point {die_point!r}")

    steps = plan(seed)
    calls = [[{"id": d, "text": doc_text(d, v)} for d, v in call] for call in steps]
    if docs_file:
        with open(docs_file, encoding="utf-8") as f:
            calls = [json.load(f)]
            steps = [[(d["id"], 1) for d in calls[0]]]
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for i, docs in enumerate(calls):
        current["call"] = i
        engine.add_documents(docs)
        call = steps[i]
        # One write per call (well under PIPE_BUF): the parent never sees half a call.
        sys.stdout.write("".join(f"committed {d} {v}\n" for d, v in call))
        sys.stdout.flush()
    sys.stdout.write("done\n")
    sys.stdout.flush()
    engine.close()


if __name__ == "__main__":
    main(sys.argv[1:])
