"""The knowledge graph from the command line: ``index --graph``, ``graph show|rebuild`` and
``query --unit node|triplet``, run as a user runs them (subprocesses on a real engine)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from test_cli import run
from test_graph_index import WIKI


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wiki")
    for title, text in WIKI.items():
        name = "".join(c if c.isalnum() else "_" for c in title)
        (out / f"{name}.md").write_text(f"# {title}\n\n{text}\n", "utf-8")
    return out


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory: pytest.TempPathFactory, folder: Path) -> Path:
    engine_dir = tmp_path_factory.mktemp("graph-cli") / "engine"
    res = run("index", str(folder), "--graph", "--quiet", "--engine", str(engine_dir))
    assert res.returncode == 0, res.stderr
    assert "Indexed 10 documents (10 chunks, 0 pages)" in res.stdout
    assert "Graph (node, triplet): full build, " in res.stdout
    assert "10 chunks extracted" in res.stdout and "no graph yet" in res.stdout
    assert "Communities: full build, " in res.stdout and "no communities yet" in res.stdout
    assert json.loads((engine_dir / "config.json").read_text("utf-8"))["build_graph"] is True
    return engine_dir


def test_graph_show_prints_the_neighbourhood(graph_dir: Path) -> None:
    from rcp_agentic import Engine
    from rcp_agentic.graph.stored import node_uid

    res = run("graph", "show", "Jeff", "Porcaro", "--engine", str(graph_dir))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"Jeff Porcaro  [title]  {node_uid('jeff porcaro')}"
    with Engine(graph_dir) as engine:
        graph = engine.graph_data()
        assert graph is not None
        e = graph.entities["jeff porcaro"]
        edges = [r for r in graph.relations if "jeff porcaro" in (r.subject, r.object)]
        best = max(edges, key=lambda r: r.weight)
        chunks = {int(k[1:]) for k in (*e.mentions, *e.about)}
        rows = engine.store.hydrate(sorted(chunks))
    assert f"Neighbours ({len(edges)} relations, strongest first):" in lines
    at = lines.index(f"Neighbours ({len(edges)} relations, strongest first):")
    other = best.object if best.subject == "jeff porcaro" else best.subject
    assert lines[at + 1].split()[0] == f"{best.weight:.3f}"
    assert graph.entities[other].name in lines[at + 1]
    assert f"Mentioned in {len(chunks)} chunk(s):" in lines
    shown = "\n".join(lines[lines.index(f"Mentioned in {len(chunks)} chunk(s):"):])
    assert all(row["uid"] in shown for row in rows.values())
    assert "about" in shown  # the chunk of its own document

    res = run("graph", "show", "jeff porcaro", "--neighbours", "2", "--engine", str(graph_dir))
    assert res.returncode == 0 and res.stdout.splitlines()[0].startswith("Jeff Porcaro  [title]")
    res = run("graph", "show", "Jeff Porcarro", "--engine", str(graph_dir))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "(no entity is named 'Jeff Porcarro'; the nearest node:)"


def test_query_graph_units(graph_dir: Path) -> None:
    res = run("query", "the drummer Jeff Porcaro", "--unit", "node", "--k", "3", "--json",
              "--engine", str(graph_dir))
    assert res.returncode == 0, res.stderr
    hits = json.loads(res.stdout)["hits"]
    assert hits and all(h["unit"] == "node" and h["provenance"]["leaves"] for h in hits)
    res = run("query", "drummer of Toto", "--unit", "triplet", "--k", "3",
              "--engine", str(graph_dir))
    assert res.returncode == 0, res.stderr
    rows = res.stdout.splitlines()[1:4]
    assert rows and all("triplet:" in r and " — " in r for r in rows)


def test_graph_rebuild_reads_the_extraction_cache(graph_dir: Path) -> None:
    res = run("graph", "rebuild", "--engine", str(graph_dir))
    assert res.returncode == 0, res.stderr
    assert "Graph (node, triplet): full build" in res.stdout
    assert "0 chunks extracted" in res.stdout and "; requested" in res.stdout
    # The communities are rebuilt too; their reports are kept (their inputs did not change).
    assert re.search(r"Communities: full build, \d+ communities .* 0 reports written .*"
                     r"; requested\)", res.stdout), res.stdout


def test_graph_communities_prints_a_level(graph_dir: Path) -> None:
    from rcp_agentic import Engine

    with Engine(graph_dir) as engine:
        found = engine.communities()
        assert found is not None
        finest = found.level(0)
    res = run("graph", "communities", "--level", "0", "--limit", "2", "--engine", str(graph_dir))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"Level 0 of 0..{found.top_level} (0 = finest): "
                               f"{len(finest)} communities over {sum(c.size for c in finest)} "
                               "entities")
    assert lines[1].startswith(f"{finest[0].id}  {finest[0].size} entit")
    assert lines[1].endswith(finest[0].title) and f"{finest[1].id}  " in res.stdout
    assert lines[-1] == f"... {len(finest) - 2} more (--limit N)"
    res = run("graph", "communities", "--engine", str(graph_dir))  # the coarsest by default
    assert res.returncode == 0 and res.stdout.startswith(f"Level {found.top_level} of ")
    res = run("graph", "communities", "--level", "99", "--engine", str(graph_dir))
    assert res.returncode == 2 and "--level must be between 0 and" in res.stderr


def test_index_graph_turns_the_graph_on_for_an_existing_engine(
        tmp_path: Path, folder: Path) -> None:
    engine_dir = tmp_path / "engine"
    res = run("index", str(folder), "--quiet", "--engine", str(engine_dir))
    assert res.returncode == 0 and "Graph" not in res.stdout
    for args in (("graph", "show", "Toto"), ("graph", "rebuild")):
        res = run(*args, "--engine", str(engine_dir))
        assert res.returncode == 2 and "[RCP -32003]" in res.stderr and "--graph" in res.stderr
    res = run("query", "Toto", "--unit", "node", "--engine", str(engine_dir))
    assert res.returncode == 2 and "not offered" in res.stderr
    res = run("index", str(folder / "Rosanna.md"), "--graph", "--quiet", "--engine",
              str(engine_dir))
    assert res.returncode == 0, res.stderr
    held = int(re.search(r"Engine now holds \d+ documents, (\d+) chunks", res.stdout)[1])
    assert "Graph (node, triplet): full build" in res.stdout
    assert f"over {held} chunks" in res.stdout and held >= 10  # over what was there too
    res = run("graph", "show", "Toto IV", "--engine", str(engine_dir))
    assert res.returncode == 0 and res.stdout.startswith("Toto IV  [title]")
