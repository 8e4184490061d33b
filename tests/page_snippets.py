"""Runs the snippets of README.md and of the pages of docs/ as written (the helpers of
tests/test_readme.py and tests/test_docs.py).

Each page is run on its own: its fenced blocks run in document order, in a fresh temp
folder holding a copy of ``examples/`` (so the default engine ``./.rcp-agentic`` lands
there) with no ``RCP_AGENTIC_ENGINE`` / ``RCP_AGENTIC_TOKEN`` set, and port 8750 replaced
by a free port. So a page sets up whatever engine or server its snippets use itself:

* ``bash``: each command line runs in bash and must succeed; a ``pip install`` step of
  a ``&&`` chain is not run but checked (its pinned versions are the installed ones, and
  so are the requirements of the extras it names, ``-e ".[langchain]"``).
* ``console``: each ``$ command`` runs; its shown output is checked against the real
  one (every JSON key and every ``doc:`` id shown appears in it). A command ending in
  ``&`` is a server: it is started, waited for on its ``--port`` (bounded), its shown
  start-up lines must appear on its stderr, and it is stopped at the end.
* ``python``: the blocks of a page run one after another in one namespace, as in one
  session.

An HTML comment right before a block steers it: ``<!-- readme-test: skip: REASON -->``
(installs packages, runs the whole suite), ``<!-- readme-test: output -->`` (a text
block: the output of the command or python block run before it, whose JSON keys and
``doc:`` ids must appear in what it really printed), ``<!-- readme-test: synopsis -->``
(the CLI synopsis, checked against the argument parser). Any other block fails the test.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, metadata, version
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from conftest import REPO, free_port
from rcp_agentic import Engine
from rcp_agentic.cli import build_parser

README = REPO / "README.md"
DOCS = REPO / "docs"
# The README, then every page of docs/: each one's snippets run on their own.
PAGES = [README, *sorted(DOCS.glob("*.md"))]
README_PORT = "8750"
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!-- readme-test: (\w+)(?::\s*(.*?))?\s*-->$")


@dataclass
class Block:
    """One fenced block of a page and the marker comment right before it."""

    lang: str
    body: str
    line: int
    marker: str | None = None
    reason: str | None = None


def page_name(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def readme_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opener = _FENCE.match(lines[i])
        if not opener:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```")
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = _MARKER.match(prev.strip())
        blocks.append(Block(opener.group(1), "\n".join(lines[i + 1:end]) + "\n", i + 1,
                            marker.group(1) if marker else None,
                            marker.group(2) if marker else None))
        i = end + 1
    return blocks


def logical_lines(body: str) -> Iterator[str]:
    """Lines with their ``\\`` continuations joined (the shell's own reading)."""
    pending = ""
    for line in body.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield pending + line
        pending = ""


def transcript(body: str) -> list[tuple[str, str]]:
    """A console block as ``(command, shown output)`` pairs."""
    steps: list[tuple[str, list[str]]] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            command = line[2:]
            while command.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command.rstrip()[:-1] + " " + lines[i].strip()
            steps.append((command, []))
        else:
            assert steps, f"console output before any command: {line!r}"
            steps[-1][1].append(line)
        i += 1
    return [(command, "\n".join(shown)) for command, shown in steps]


def check_output(shown: str, real: str, where: str) -> None:
    """What a page shows is what really comes out: its JSON keys and hit ids appear."""
    if not shown.strip():
        return
    assert real.strip(), f"{where}: the page shows output, the command printed nothing"
    keys = set(re.findall(r'"([A-Za-z_][\w-]*)"\s*:', shown))
    missing = keys - set(re.findall(r'"([A-Za-z_][\w-]*)"\s*:', real))
    assert not missing, f"{where}: keys shown but not in the real output: {sorted(missing)}\n{real}"
    ids = set(re.findall(r"doc:[\w./-]+(?:#[cp]\d+)?", shown))
    missing = ids - set(re.findall(r"doc:[\w./-]+(?:#[cp]\d+)?", real))
    assert not missing, f"{where}: hit ids shown, not in the real output: {sorted(missing)}\n{real}"


def check_install(step: str, where: str) -> None:
    """``pip install "pkg==X" -e ".[extra]"``: not run here; the pinned versions must be
    installed, and so must every requirement of each extra (pyproject.toml's)."""
    for arg in shlex.split(step)[2:]:
        if arg.startswith("-"):
            continue
        if arg.startswith("."):  # this checkout, with its extras
            extras = Requirement(f"rcp-agentic{arg[1:]}").extras
            for req in extra_requirements(extras):
                check_installed(req, where, f"the extra {arg!r} needs")
            continue
        check_installed(Requirement(arg), where, "the page pins")
    assert version("rcp-agentic")


def extra_requirements(extras: set[str]) -> list[Requirement]:
    """The requirements of ``extras`` (pyproject.toml's optional-dependencies, as the
    installed package's metadata has them)."""
    meta = metadata("rcp-agentic")
    unknown = extras - set(meta.get_all("Provides-Extra") or [])
    assert not unknown, f"no such extra of rcp-agentic: {sorted(unknown)}"
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    return [r for r in reqs for extra in sorted(extras)
            if r.marker is not None and r.marker.evaluate({"extra": extra})]


def check_installed(req: Requirement, where: str, why: str) -> None:
    try:
        installed = version(req.name)
    except PackageNotFoundError:
        pytest.fail(f"{where}: {why} {req.name}, which is not installed")
    assert req.specifier.contains(installed, prereleases=True), (
        f"{where}: {why} {req}, this machine has {installed}")


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"server exited with {proc.returncode}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"no server on port {port} after {timeout} s")


class Session:
    """Runs one page's blocks in one folder, remembering the last output and the servers."""

    def __init__(self, cwd: Path, port: int, page: str = "README.md") -> None:
        self.cwd = cwd
        self.page = page
        self.port = str(port)
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("RCP_AGENTIC_ENGINE", "RCP_AGENTIC_TOKEN")}
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env.get('PATH', '')}"
        self.namespace: dict[str, object] = {"__name__": "__main__"}
        self.servers: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.last_output: str | None = None
        self.ran = 0

    def local(self, text: str) -> str:
        return text.replace(README_PORT, self.port)

    def shell(self, command: str, where: str) -> str:
        proc = subprocess.run(["bash", "-c", command], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (
            f"{where}: `{command}` exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def run_bash(self, block: Block) -> None:
        outputs = []
        for n, line in enumerate(logical_lines(self.local(block.body))):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            where = f"{self.page}:{block.line + 1 + n}"
            steps = [s.strip() for s in line.split(" && ")]
            for step in steps:
                if step.startswith("pip install"):
                    check_install(step, where)
            rest = " && ".join(s for s in steps if not s.startswith("pip install"))
            if rest:
                outputs.append(self.shell(rest, where))
        self.last_output = "".join(outputs)

    def run_console(self, block: Block) -> None:
        for command, shown in transcript(self.local(block.body)):
            where = f"{self.page}:{block.line} `{command[:60]}`"
            if command.rstrip().endswith("&"):
                self.start_server(command.rstrip()[:-1].strip(), shown, where)
                continue
            out = self.shell(command, where)
            check_output(shown, out, where)
            self.last_output = out

    def start_server(self, command: str, shown: str, where: str) -> None:
        match = re.search(r"--port (\d+)", command)
        assert match, f"{where}: a server on a page must name its --port"
        log = self.cwd / f"server-{len(self.servers)}.err"
        with open(log, "wb") as err:
            proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.cwd, env=self.env,
                                    stdout=subprocess.DEVNULL, stderr=err)
        self.servers.append((proc, log))
        wait_for_port(int(match.group(1)), proc, timeout=120)
        deadline = time.monotonic() + 10
        for line in filter(None, (x.strip() for x in shown.splitlines())):
            while line not in log.read_text(errors="replace"):
                assert time.monotonic() < deadline, (
                    f"{where}: the server did not print {line!r}; stderr:\n{log.read_text()}")
                time.sleep(0.2)

    def run_python(self, block: Block) -> None:
        code = compile(self.local(block.body), f"{self.page}:{block.line}", "exec")
        printed = _Tee(sys.stdout)
        with contextlib.redirect_stdout(printed):
            exec(code, self.namespace)  # noqa: S102 - the page's own snippet
        self.last_output = printed.getvalue()

    def run(self, block: Block) -> None:
        where = f"{self.page}:{block.line}"
        if block.marker == "skip":
            assert block.reason, f"{where}: a skipped block must say why"
            return
        if block.marker == "synopsis":
            check_synopsis(block.body)
            return
        if block.marker == "output":
            assert block.lang == "text", f"{where}: an output block is a text block"
            assert self.last_output is not None, f"{where}: output of what? no command ran before"
            check_output(self.local(block.body), self.last_output, where)
            return
        assert block.marker is None, f"{where}: unknown readme-test marker {block.marker!r}"
        runner = {"bash": self.run_bash, "console": self.run_console,
                  "python": self.run_python}.get(block.lang)
        assert runner, (f"{where}: a ```{block.lang} block the test cannot run; mark it "
                        "<!-- readme-test: skip: REASON --> or make it bash/console/python")
        runner(block)
        self.ran += 1

    def close(self) -> None:
        for value in self.namespace.values():
            if isinstance(value, Engine):
                value.close()
        for proc, _log in self.servers:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


class _Tee(io.StringIO):
    """Keeps what a snippet prints (its output block is checked against it) and still
    shows it."""

    def __init__(self, shown: Any) -> None:
        super().__init__()
        self.shown = shown

    def write(self, text: str) -> int:
        self.shown.write(text)
        return super().write(text)


def check_synopsis(body: str) -> None:
    """The synopsis names every sub-command and every option of the parser, and nothing else.
    A line ``GROUP: [--a X] ...`` after the commands names options shared by the commands
    that show ``[GROUP]``."""
    shown: dict[str, set[str]] = {}
    groups: dict[str, set[str]] = {}
    uses: dict[str, set[str]] = {}
    current = ""
    for line in body.splitlines():
        if not line.strip():
            continue
        group = re.match(r"([A-Z]+): ", line)
        if group:
            groups[group.group(1)] = set(re.findall(r"--[a-z][a-z-]*", line))
            continue
        if line.startswith("rcp-agentic "):
            current = line.split()[1]
        assert current, f"synopsis line before any command: {line!r}"
        shown.setdefault(current, set()).update(re.findall(r"--[a-z][a-z-]*", line))
        uses.setdefault(current, set()).update(re.findall(r"\[([A-Z]+)\]", line))
    for name, used in uses.items():
        for group in used:
            assert group in groups, f"synopsis: [{group}] is used but never defined"
            shown[name] |= groups[group]
    subparsers = next(a for a in build_parser()._actions
                      if isinstance(a.choices, dict))  # the sub-command action
    real = {name: {o for a in sub._actions for o in a.option_strings
                   if o.startswith("--") and o != "--help"}
            for name, sub in subparsers.choices.items()}
    assert set(shown) == set(real), f"sub-commands: synopsis {sorted(shown)}, CLI {sorted(real)}"
    for name in real:
        assert shown[name] == real[name], (
            f"`rcp-agentic {name}`: missing from the synopsis {sorted(real[name] - shown[name])}, "
            f"not in the CLI {sorted(shown[name] - real[name])}")


def runnable_blocks(blocks: list[Block]) -> list[Block]:
    return [b for b in blocks if b.lang in ("bash", "console", "python") and b.marker is None]


def check_blocks(page: Path) -> None:
    """Every block of ``page`` is one the runner understands; a page showing code runs
    some of it (the README: its set-up and its examples)."""
    name = page_name(page)
    blocks = readme_blocks(page.read_text("utf-8"))
    assert {b.lang for b in blocks} <= {"bash", "console", "python", "text"}, name
    for b in blocks:
        assert b.lang != "text" or b.marker in ("output", "synopsis", "skip"), (
            f"{name}:{b.line}: mark this text block (output, synopsis or skip: REASON)")
        assert b.marker != "skip" or b.reason, f"{name}:{b.line}: a skip needs a reason"
    if blocks:
        assert len(runnable_blocks(blocks)) >= (3 if page == README else 1), (
            f"{name}: no block of this page runs")


def has_runnable(page: Path) -> bool:
    return bool(runnable_blocks(readme_blocks(page.read_text("utf-8"))))


def run_page(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every block of ``page`` in order in a fresh folder holding ``examples/``."""
    blocks = readme_blocks(page.read_text("utf-8"))
    runnable = runnable_blocks(blocks)
    cwd = tmp_path / "newcomer"
    cwd.mkdir()
    shutil.copytree(REPO / "examples", cwd / "examples")
    monkeypatch.delenv("RCP_AGENTIC_ENGINE", raising=False)
    monkeypatch.delenv("RCP_AGENTIC_TOKEN", raising=False)
    monkeypatch.chdir(cwd)
    session = Session(cwd, free_port(), page_name(page))
    try:
        for block in blocks:
            session.run(block)
    finally:
        session.close()
    assert session.ran == len(runnable)


def nav_pages(nav: object) -> list[str]:
    """Every page a mkdocs ``nav`` names (nested sections included), in order."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in nav_pages(value)]
    raise AssertionError(f"mkdocs.yml: unexpected nav entry {nav!r}")
