"""Every snippet of README.md runs as written (tests/page_snippets.py runs it), and the
README stays a landing page: the reference lives in docs/ (tests/test_docs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from page_snippets import README, check_blocks, run_page

README_MAX_LINES = 300


def test_readme_blocks_are_all_understood() -> None:
    check_blocks(README)


def test_readme_snippets_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_page(README, tmp_path, monkeypatch)


def test_readme_is_a_landing_page() -> None:
    lines = README.read_text("utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines: keep it a landing page (at most {README_MAX_LINES}) "
        "and put reference material in docs/")
