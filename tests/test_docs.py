"""Every snippet of each page of docs/ runs as written (tests/page_snippets.py runs it,
each page on its own), the CLI synopsis matches the parser, and the docs are a site
(``mkdocs build --strict`` in .ci/run): every page is in mkdocs.yml's ``nav`` and every
``nav`` entry is a page."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import REPO
from page_snippets import (DOCS, PAGES, check_blocks, check_synopsis, has_runnable, nav_pages,
                           page_name, readme_blocks, run_page)

DOC_PAGES = sorted(DOCS.glob("*.md"))


@pytest.mark.parametrize("page", DOC_PAGES, ids=page_name)
def test_docs_blocks_are_all_understood(page: Path) -> None:
    check_blocks(page)


def test_the_synopsis_matches_the_cli() -> None:
    synopses = [(page_name(page), b) for page in PAGES
                for b in readme_blocks(page.read_text("utf-8")) if b.marker == "synopsis"]
    assert len(synopses) == 1, f"one synopsis block in README.md and docs/: {synopses}"
    check_synopsis(synopses[0][1].body)


@pytest.mark.parametrize("page", [p for p in DOC_PAGES if has_runnable(p)], ids=page_name)
def test_docs_snippets_run_as_written(page: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    run_page(page, tmp_path, monkeypatch)


def test_every_docs_page_is_in_the_nav() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text("utf-8"))
    listed = [p for p in nav_pages(config["nav"]) if "://" not in p]
    assert len(listed) == len(set(listed)), f"mkdocs.yml: a page is listed twice: {listed}"
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert not set(listed) - pages, f"nav entries with no page: {sorted(set(listed) - pages)}"
    assert not pages - set(listed), f"pages missing from the nav: {sorted(pages - set(listed))}"
