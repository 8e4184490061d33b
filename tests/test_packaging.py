"""Packaging: the wheel ships ``rcp_agentic.graph`` / ``rcp_agentic.raptor`` (from the
top-level ``graph/`` and ``raptor/`` folders), ``py.typed`` and the console script, and
nothing top-level besides ``rcp_agentic``; the editable install maps the same names to the
repo's folders.

The wheel is built from a copy of the repository in a temp dir, so the build's
``build/`` and ``*.egg-info`` never land in the working tree.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Subpackages that live outside rcp_agentic/ in the repo: wheel name → repo folder.
MOVED = {"rcp_agentic/graph": "graph", "rcp_agentic/raptor": "raptor"}
_IGNORE = shutil.ignore_patterns(".git", ".*cache", ".hypothesis", ".benchmarks", "__pycache__",
                                 "*.egg-info", "build", "dist", "tests", "bench", "notebooks",
                                 "examples", ".venv", "*.pyc")


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300,
                          **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, (
        f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src") / "repo"
    shutil.copytree(REPO, src, ignore=_IGNORE)
    out = tmp_path_factory.mktemp("dist")
    # setuptools >= 70.1 builds wheels itself; the legacy `wheel` requirement need not be present.
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check",
          "--outdir", str(out), str(src)], env=_clean_env())
    (whl,) = out.glob("rcp_agentic-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target",
          str(target), str(wheel)], env=_clean_env())
    return target


def test_wheel_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
        top_level = zf.read(f"{dist_info}/top_level.txt").decode().split()
    assert "rcp_agentic/graph/__init__.py" in names
    assert "rcp_agentic/raptor/__init__.py" in names
    assert "rcp_agentic/py.typed" in names
    tops = {n.split("/")[0] for n in names}
    assert tops == {"rcp_agentic", dist_info}, tops
    assert not any(n.startswith(("graph/", "raptor/")) for n in names)
    assert top_level == ["rcp_agentic"]

    # Every module of the repo is in the wheel, at its package path.
    want = {p.relative_to(REPO).as_posix() for p in (REPO / "rcp_agentic").rglob("*.py")
            if "__pycache__" not in p.parts}
    for pkg, folder in MOVED.items():
        want |= {f"{pkg}/{p.relative_to(REPO / folder).as_posix()}"
                 for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts}
    assert want - names == set(), "modules missing from the wheel"

    parser = configparser.ConfigParser()
    parser.read_string(entry_points)
    assert parser.get("console_scripts", "rcp-agentic").strip() == "rcp_agentic.cli:main"


PROBE = textwrap.dedent("""
    import json, sys
    import rcp_agentic, rcp_agentic.graph, rcp_agentic.raptor
    out = {"rcp_agentic": rcp_agentic.__file__, "graph": rcp_agentic.graph.__file__,
           "raptor": rcp_agentic.raptor.__file__}
    for name in ("graph", "raptor"):
        try:
            __import__(name)
            out["top_" + name] = sys.modules[name].__file__
        except ModuleNotFoundError:
            out["top_" + name] = None
    print(json.dumps(out))
""")


def _probe(cwd: Path, **env: str) -> dict[str, str | None]:
    proc = _run([sys.executable, "-c", PROBE], cwd=str(cwd), env=_clean_env(**env))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _under(path: str | None, root: Path) -> bool:
    return path is not None and Path(path).resolve().is_relative_to(root.resolve())


def test_installed_wheel_imports_from_target(installed: Path,
                                             tmp_path_factory: pytest.TempPathFactory) -> None:
    neutral = tmp_path_factory.mktemp("neutral")
    got = _probe(neutral, PYTHONPATH=str(installed))
    assert _under(got["rcp_agentic"], installed), got
    assert got["graph"] == str(installed / "rcp_agentic" / "graph" / "__init__.py"), got
    assert got["raptor"] == str(installed / "rcp_agentic" / "raptor" / "__init__.py"), got
    assert not _under(got["rcp_agentic"], REPO)
    assert got["top_graph"] is None and got["top_raptor"] is None, got
    assert (installed / "rcp_agentic" / "py.typed").is_file()


def test_installed_console_script_runs(installed: Path,
                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    script = installed / "bin" / "rcp-agentic"
    assert script.is_file()
    proc = _run([str(script), "--help"], cwd=str(tmp_path_factory.mktemp("neutral")),
                env=_clean_env(PYTHONPATH=str(installed)))
    assert "index" in proc.stdout and "query" in proc.stdout


def test_editable_install_maps_subpackages_to_repo_folders(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    got = _probe(tmp_path_factory.mktemp("neutral"))
    init = (REPO / "rcp_agentic" / "__init__.py").resolve()
    assert Path(got["rcp_agentic"]).resolve() == init, (
        "rcp_agentic does not resolve to this checkout: is it installed editable "
        "(pip install -e .)?")
    assert Path(got["graph"]).resolve() == (REPO / "graph" / "__init__.py").resolve(), got
    assert Path(got["raptor"]).resolve() == (REPO / "raptor" / "__init__.py").resolve(), got
    # Only the rcp_agentic.* names are mapped: no top-level graph / raptor leaks out.
    assert got["top_graph"] is None and got["top_raptor"] is None, got
