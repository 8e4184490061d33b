"""Derived units are built off the write path (``derived_updates="background"``): a write
returns once its documents are committed, the engine's worker (``rcp_agentic/catchup.py``)
folds them into the tree, reads note the lag until it has, and ``wait_for_derived`` waits
for it.

A builder is made slow for a reason the test controls: the engine's real tree builder,
wrapped so each run first waits for a ``threading.Event`` (:class:`Gated`), swapped into
``engine.builders``; over stdio, the server's worker waits for the directory's catch-up
lock, held by this process.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import DERIVED_UPDATES_ENV, REPO

from rcp_agentic import Engine
from rcp_agentic.catchup import LOCK_FILE
from rcp_agentic.client import RCPClient
from rcp_agentic.derived import DerivedReport, builder_kinds
from rcp_agentic.errors import InvalidParams

NOTES = [
    "Apple trees need a cold winter to set fruit in spring.",
    "Pruning apple trees in late winter opens the canopy to light.",
    "Cider apples are pressed in autumn and fermented for months.",
    "Pear trees blossom earlier than apples and fear late frost.",
    "Honey bees pollinate apple blossoms during a few warm days.",
    "Orchard grass between the rows feeds sheep in summer.",
]
LATE = [{"id": f"late-{i}", "text": text} for i, text in enumerate([
    "Sourdough is leavened by wild yeast and lactic bacteria.",
    "Rye bread keeps for a week in a cool larder.",
    "Baguettes are baked hot and eaten the same day.",
])]
BAND = {"id": "band", "text": "Harbor Lights Band toured Oslo with Lena Varg in 1981. Oslo "
        "welcomed Harbor Lights Band. Lena Varg later joined Velvet Lanterns in Bergen."}
QUESTION = "apple trees in winter"
TREE_LAG = "tree-node units reflect"
SCHEMA = json.loads((REPO / "tests" / "schema" / "rcp-1.0.json").read_text("utf-8"))


class Gated:
    """A real builder whose every run first waits for ``gate``; ``entered`` is set when a run
    starts waiting. With ``fail`` set, a run raises instead of building."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.unit = inner.unit
        self.kinds = builder_kinds(inner)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail: str | None = None
        self.runs = 0

    def update(self, *, full: bool = False) -> DerivedReport:
        self.entered.set()
        self.gate.wait()
        self.runs += 1
        if self.fail:
            raise RuntimeError(self.fail)
        return self.inner.update(full=full)


def notes(eng: Engine) -> list[str]:
    return eng.retrieve(QUESTION, k=3, unit="tree-node", level=1).usage.notes or []


@pytest.fixture()
def tree(tmp_path: Path, embedder: Any) -> Iterator[tuple[Engine, Gated]]:
    """A background engine with its tree built over NOTES, its builder then gated (open)."""
    eng = Engine(tmp_path / "e", embedder=embedder, build_tree=True,
                 derived_updates="background")
    gated = Gated(eng.builders["tree-node"])
    try:
        eng.add_documents([{"id": f"n{i}", "text": t} for i, t in enumerate(NOTES)])
        assert eng.wait_for_derived()
        eng.builders["tree-node"] = gated
        yield eng, gated
    finally:
        gated.gate.set()
        eng.close()


def test_a_write_returns_while_its_builder_waits_and_reads_note_the_lag(
        tree: tuple[Engine, Gated]) -> None:
    eng, gated = tree
    result = eng.add_documents(LATE[:1])
    assert [(r.unit, r.mode) for r in result.derived] == [("tree-node", "scheduled")]
    assert gated.entered.wait(60)  # the worker runs the builder, held at its gate
    assert gated.runs == 0
    assert eng.derived_status()["tree-node"]["current"] is False
    assert any(TREE_LAG in n for n in notes(eng))
    # The builder runs under the build lock alone: another write commits meanwhile.
    assert not eng._write_lock.locked()
    assert eng.add_documents(LATE[1:2]).ids == ["late-1"]
    assert not eng.wait_for_derived(timeout=0)
    gated.gate.set()
    assert eng.wait_for_derived()
    assert not any(TREE_LAG in n for n in notes(eng))
    status = eng.derived_status()["tree-node"]
    assert status["current"] is True and "error" not in status
    covered = {leaf for n in eng.store.live_derived("tree-node") if n["level"] == 1
               for leaf in n["covers"]}
    assert len(covered) == len(NOTES) + 2  # both late documents folded in


def test_writes_during_a_builder_run_coalesce_into_one_more_pass(
        tree: tuple[Engine, Gated]) -> None:
    eng, gated = tree
    eng.add_documents(LATE[:1])
    assert gated.entered.wait(60)
    worker = eng.catch_up
    assert worker is not None
    passes = worker.passes
    for doc in LATE[1:]:
        eng.add_documents([doc])
    gated.gate.set()
    assert eng.wait_for_derived()
    # The held run read every commit once released; the writes it waited through asked for
    # one more pass together, which found nothing left.
    assert gated.runs == 1
    assert worker.passes == passes + 2
    built = [r for r in worker.reports[-1:] if r.unit == "tree-node"]
    assert built and built[0].version is not None


def test_a_failing_builder_is_reported_and_re_raised_until_a_run_succeeds(
        tree: tuple[Engine, Gated]) -> None:
    eng, gated = tree
    gated.gate.set()
    gated.fail = "the summariser is out of paper"
    eng.add_documents(LATE[:1])
    with pytest.raises(RuntimeError, match="out of paper"):
        eng.wait_for_derived()
    assert eng.derived_status()["tree-node"]["error"] == "the summariser is out of paper"
    lag = next(n for n in notes(eng) if TREE_LAG in n)
    assert "out of paper" in lag
    gated.fail = None
    eng.add_documents(LATE[1:2])  # the next write retries
    assert eng.wait_for_derived()
    assert "error" not in eng.derived_status()["tree-node"]
    assert not any(TREE_LAG in n for n in notes(eng))


def test_close_while_building_commits_the_running_builder_and_the_next_open_catches_up(
        tmp_path: Path, embedder: Any) -> None:
    path = tmp_path / "e"
    eng = Engine(path, embedder=embedder, build_tree=True, build_graph=True,
                 graph_communities=False, derived_updates="background")
    gated = Gated(eng.builders["tree-node"])  # the tree runs first, then the graph
    eng.builders["tree-node"] = gated
    eng.add_documents([BAND, *({"id": f"n{i}", "text": t} for i, t in enumerate(NOTES))])
    assert gated.entered.wait(60)
    closing = threading.Thread(target=eng.close)
    closing.start()
    worker = eng.catch_up
    assert worker is not None
    while not worker.stopping:  # close() has asked the worker to stop
        time.sleep(0.01)
    gated.gate.set()
    closing.join()
    assert not worker.running
    assert [(r.unit, r.version is not None) for r in worker.reports] == [("tree-node", True)]
    with Engine(path, embedder=embedder, derived_updates="background") as again:
        assert again.lagging_builders() in (["node"], [])  # the graph was left to this open
        assert again.catch_up is not None  # started by opening
        assert again.wait_for_derived()
        assert sorted(again.store.document_ids()) == ["band", *(f"n{i}" for i in range(len(NOTES)))]
        status = again.derived_status()
        assert status["tree-node"]["current"] and status["node"]["current"]
        assert [r.unit for r in again.catch_up.reports] == ["node"]


def test_a_builder_contended_out_of_every_attempt_runs_under_the_write_lock(
        tree: tuple[Engine, Gated]) -> None:
    eng, gated = tree
    gated.gate.set()
    store_write = eng.store.write_derived
    commits: list[bool] = []  # per builder commit attempt: whether the write lock was held

    def write_derived_after_a_write(*args: Any, **kwargs: Any) -> Any:
        held = eng._write_lock.locked()
        commits.append(held)
        if not held:  # a real write lands between the builder's read and its commit
            eng.add_documents([{"id": f"race-{len(commits)}",
                                "text": f"Plum trees number {len(commits)} flower in March."}])
        return store_write(*args, **kwargs)

    eng.store.write_derived = write_derived_after_a_write  # type: ignore[method-assign]
    eng.add_documents(LATE[:1])
    # A full build reads the live rows, so it commits only on the version it read (a run
    # that follows its kept tree commits through document writes: test_graph_living.py).
    # The worker may be running too: serialised.
    reports = eng.update_derived(only="tree-node", full=True)
    eng.store.write_derived = store_write  # type: ignore[method-assign]
    assert eng.wait_for_derived()
    contended = [r for r in [*reports, *(eng.catch_up.reports if eng.catch_up else [])]
                 if r.contended]
    assert contended and all(r.version is not None for r in contended)
    assert commits.count(False) >= 3 and commits[-1] is True
    assert eng.derived_status()["tree-node"]["current"] is True


def test_the_mode_comes_from_the_environment_and_is_never_saved(
        tmp_path: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DERIVED_UPDATES_ENV, "inline")
    with Engine(tmp_path / "e", embedder=embedder, build_tree=True) as eng:
        assert eng.config.derived_updates == "inline"
        report = eng.add_documents([{"id": "a", "text": NOTES[0]}]).derived[0]
        assert report.mode == "full" and report.version is not None
    assert "derived_updates" not in json.loads((tmp_path / "e" / "config.json").read_text())
    monkeypatch.delenv(DERIVED_UPDATES_ENV)
    with Engine(tmp_path / "e", embedder=embedder) as eng:
        assert eng.config.derived_updates == "background"
    monkeypatch.setenv(DERIVED_UPDATES_ENV, "later")
    with pytest.raises(InvalidParams) as err:
        Engine(tmp_path / "e", embedder=embedder)
    assert err.value.data["field"] == "derived_updates"
    monkeypatch.delenv(DERIVED_UPDATES_ENV)
    with pytest.raises(InvalidParams, match="'background' or 'inline'"):
        Engine(tmp_path / "e", embedder=embedder, derived_updates="sometimes")


def test_stdio_index_add_returns_before_the_servers_builders_catch_up(
        tmp_path: Path, embedder: Any) -> None:
    path = tmp_path / "e"
    with Engine(path, embedder=embedder, build_tree=True, derived_updates="inline") as eng:
        eng.add_documents([{"id": f"n{i}", "text": t} for i, t in enumerate(NOTES)])
    env = {**os.environ, DERIVED_UPDATES_ENV: "background"}
    validator = jsonschema.Draft202012Validator({"$schema": SCHEMA["$schema"],
                                                 "$defs": SCHEMA["$defs"],
                                                 "$ref": "#/$defs/IndexAddResult"})
    with open(path / LOCK_FILE, "a+b") as held, \
            RCPClient.stdio(engine=path, env=env, cwd=str(REPO)) as client:
        # The server's worker cannot start a pass while this process holds the lock.
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        added = client.call("index/add", {"documents": LATE})
        validator.validate(added)
        assert added["ids"] == [d["id"] for d in LATE]
        ranked = client.call("retrieve", {"query": QUESTION, "k": 3, "unit": "tree-node",
                                          "level": 1})
        assert any(TREE_LAG in n for n in ranked["usage"].get("notes", []))
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
        give_up = time.monotonic() + 600  # a guard against a hang, not a measurement
        while time.monotonic() < give_up:  # the worker now takes the lock and builds
            ranked = client.call("retrieve", {"query": QUESTION, "k": 3, "unit": "tree-node",
                                              "level": 1})
            if not any(TREE_LAG in n for n in ranked["usage"].get("notes", [])):
                break
            time.sleep(0.2)
    with Engine(path, embedder=embedder, catch_up=False) as eng:
        assert eng.lagging_builders() == []
