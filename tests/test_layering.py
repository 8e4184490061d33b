"""The floor plan as a test: the import contracts of pyproject.toml hold over the package as
installed (``.ci/lint-imports``), and the core reaches graph/ and raptor/ only through the
plug-in registry (``rcp_agentic.plugins``), loading neither until it needs one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO

from rcp_agentic import plugins

try:
    from tomllib import loads as toml_loads
except ModuleNotFoundError:  # Python 3.10: the reader import-linter itself depends on there
    from tomli import loads as toml_loads


def test_the_import_contracts_hold() -> None:
    res = subprocess.run([str(REPO / ".ci" / "lint-imports")], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"Contracts: (\d+) kept, 0 broken", res.stdout), res.stdout
    # The scan saw graph/ and raptor/ where they install (as rcp_agentic.graph / .raptor):
    # every Python file of the three folders.
    files = sum(1 for top in ("rcp_agentic", "graph", "raptor")
                for _ in (REPO / top).rglob("*.py"))
    analyzed = int(re.search(r"Analyzed (\d+) files", res.stdout).group(1))  # type: ignore[union-attr]
    assert analyzed == files


def test_every_graph_module_has_its_floor() -> None:
    # The graph-floors contract names every module of graph/ once: in its core (the sources)
    # or among its services (the graph modules it forbids them). A new module takes a floor.
    config = toml_loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"]
                   if c["id"] == "graph-floors"]
    named = [*contract["source_modules"],
             *(m for m in contract["forbidden_modules"] if m.startswith("rcp_agentic.graph."))]
    for path in (REPO / "graph").rglob("*.py"):
        if path.name == "__init__.py":
            continue
        module = ".".join(["rcp_agentic.graph", *path.relative_to(REPO / "graph")
                           .with_suffix("").parts])
        floors = [n for n in named if module == n or module.startswith(n + ".")]
        assert len(floors) == 1, (module, floors)


def test_a_broken_contract_fails_the_check(tmp_path: Path) -> None:
    # The check can fail: a core module naming a graph module breaks a contract.
    config = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"rcp_agentic.catalog"' in config
    broken = config.replace('forbidden_modules = ["rcp_agentic.graph", "rcp_agentic.raptor"]',
                            'forbidden_modules = ["rcp_agentic.graph", "rcp_agentic.raptor", '
                            '"rcp_agentic.store"]')
    assert broken != config
    path = tmp_path / "pyproject.toml"
    path.write_text(broken, encoding="utf-8")
    res = subprocess.run([str(REPO / ".ci" / "lint-imports")], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "LINT_IMPORTS_CONFIG": str(path)})
    assert res.returncode != 0 and "BROKEN" in res.stdout


def test_the_core_loads_no_plugin_until_it_needs_one() -> None:
    code = ("import sys, rcp_agentic, rcp_agentic.engine, rcp_agentic.protocol.dispatcher; "
            "print([m for m in sys.modules if m.startswith(('rcp_agentic.graph', "
            "'rcp_agentic.raptor'))])")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_the_registry_names_plugins_that_offer_what_the_core_asks() -> None:
    graph, tree = plugins.graph(), plugins.tree()
    for name in ("builders", "ops", "graph_state", "graph_view", "communities",
                 "recall_source", "follow_bridge", "graph_scope", "chunk_prior"):
        assert callable(getattr(graph, name)), name
    assert set(graph.limits) >= {"maxGraphHops", "maxGraphNodes", "maxSummaryTokens"}
    assert all(isinstance(v, int) and v > 0 for v in graph.limits.values())
    assert callable(tree.builder)
    assert type(graph).__module__ == plugins.GRAPH_PLUGIN
    assert type(tree).__module__ == plugins.TREE_PLUGIN
