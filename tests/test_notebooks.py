"""Every notebook in notebooks/ runs top to bottom on a real kernel, and shows what it should."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO
from html_check import page_text, parsed, visible
from rcp_agentic.display.html import FONT

_spec = importlib.util.spec_from_file_location("notebook_pictures",
                                               REPO / "bench" / "notebook_pictures.py")
pictures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pictures)

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
# Text each notebook must print (its cells also assert on their own results).
EXPECTED = {
    "01_quickstart.ipynb": ["5 documents, 6 chunks, 2 pages indexed", "tokens used:", "step 2:",
                            "rcp-agentic engine", "hits</b> for <i>what does packing do",
                            "score_dense", "hit</b> for <i>hybrid search"],
    "02_langchain.ipynb": ["RRF adds 1/(60 + rank)", "doc:docs/hybrid-search.md"],
    "03_llamaindex.ipynb": ["source: doc:docs/chunking.txt"],
    "04_corrective_loop.ipynb": ["best confidence", "escalate", "evidence tokens"],
    "05_raptor.ipynb": ["RAPTOR tree over 24 chunks", "chunks covered", "collapsed tree:",
                        "covers:"],
    "06_graph.ipynb": ["knowledge graph:", "Neighbours (", "drawn:", "the bridge passage:",
                       "path: Midnight Harbor -> Velvet Lanterns", "seeds:", "level 1:",
                       "entities: Velvet Lanterns", "global summary:", "follow-ups left:",
                       "1 seed", "passages"],
}
# Notebooks whose results show as HTML displays (checked to parse, with no script).
DISPLAYS = {"01_quickstart.ipynb", "04_corrective_loop.ipynb", "05_raptor.ipynb",
            "06_graph.ipynb"}


def outputs(book: Any) -> tuple[str, set[str]]:
    text, kinds = [], set()
    for cell in book.cells:
        for out in cell.get("outputs", []):
            text.append(out.get("text", ""))
            for kind, value in out.get("data", {}).items():
                kinds.add(kind)
                if kind.startswith("text/"):
                    text.append(value)
    return "\n".join(text), kinds


def test_every_notebook_is_checked() -> None:
    assert sorted(EXPECTED) == [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path) -> None:
    book = nbformat.read(path, as_version=4)
    NotebookClient(book, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [out for cell in book.cells for out in cell.get("outputs", [])
              if out.get("output_type") == "error"]
    assert not errors
    text, kinds = outputs(book)
    for expected in EXPECTED[path.name]:
        assert expected in text, expected
    if path.name in ("04_corrective_loop.ipynb", "05_raptor.ipynb"):
        assert "image/png" in kinds  # the plot
    if path.name in DISPLAYS:
        html = [out["data"]["text/html"] for cell in book.cells
                for out in cell.get("outputs", []) if "text/html" in out.get("data", {})]
        shown = [m for m in html if m.startswith(f'<div style="{FONT}')]  # ours, not pandas
        assert shown, "the results show as HTML"
        for markup in shown:
            parsed(markup)
        # Exported to HTML (what bench/notebook_pictures.py screenshots), each display is
        # there as it was shown (nbconvert re-serialises the markup, so compare its text).
        exported = pictures.notebook_html(book)
        text_of_page = page_text(exported)
        for markup in shown:
            assert visible(markup) in text_of_page
        assert exported.count("<svg") >= sum(markup.count("<svg") for markup in shown)
    if path.name == "06_graph.ipynb":
        assert sum(markup.count("<svg") for markup in shown) >= 3  # neighbours, local, path
