"""bench/notebook_pictures.py: which cells it pictures, and the HTML it pictures them from
(asserted on the HTML, no browser)."""

from __future__ import annotations

import base64
import importlib.util
from html.parser import HTMLParser

from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from conftest import REPO

_spec = importlib.util.spec_from_file_location("notebook_pictures",
                                               REPO / "bench" / "notebook_pictures.py")
pictures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pictures)

SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="10">'
       '<rect id="the-rect" width="20" height="10"/></svg>')
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5"
       "ErkJggg==")
HOSTILE = "<script>alert(1)</script>"


def shown(kind: str, value: str, output_type: str = "display_data") -> dict:
    if output_type == "execute_result":
        return new_output(output_type, data={kind: value}, execution_count=1)
    return new_output(output_type, data={kind: value})


def printed(text: str) -> dict:
    return new_output("stream", name="stdout", text=text)


def test_screenshot_cells_prefers_tagged_cells() -> None:
    book = new_notebook(cells=[
        new_markdown_cell("# title", metadata={"tags": ["screenshot"]}),
        new_code_cell("x", outputs=[shown("text/html", "<b>x</b>")]),
        new_code_cell("y", outputs=[printed("y\n")], metadata={"tags": ["other", "screenshot"]}),
        new_code_cell("z", outputs=[shown("image/png", PNG)]),
    ])
    assert pictures.screenshot_cells(book) == [0, 2]


def test_screenshot_cells_falls_back_to_first_three_rich_code_cells() -> None:
    book = new_notebook(cells=[
        new_markdown_cell("<b>html in markdown does not count</b>"),
        new_code_cell("print(1)", outputs=[printed("1\n")]),
        new_code_cell("1", outputs=[shown("text/plain", "1", "execute_result")]),
        new_code_cell("h", outputs=[shown("text/html", "<b>x</b>", "execute_result")]),
        new_raw_cell("<svg/>"),
        new_code_cell("s", outputs=[printed("s\n"), shown("image/svg+xml", SVG)]),
        new_code_cell("no output", metadata={"tags": ["other"]}),
        new_code_cell("p", outputs=[shown("image/png", PNG)]),
        new_code_cell("p2", outputs=[shown("image/png", PNG)]),
    ])
    assert pictures.screenshot_cells(book) == [3, 5, 7]
    assert pictures.screenshot_cells(new_notebook(cells=book.cells[:3])) == []


class Page(HTMLParser):
    """What a browser would build: elements seen, text, script bodies, top-level cell ids."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.open: list[str] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self.cell_ids: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "div" and "jp-Cell" in (attributes.get("class") or "").split():
            self.cell_ids.append(attributes.get("id"))
        self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.open:
            while self.open.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        (self.scripts if self.open and self.open[-1] == "script" else self.text).append(data)


def test_notebook_html_shows_outputs_and_escapes_text() -> None:
    book = new_notebook(cells=[
        new_markdown_cell("# Results"),
        new_code_cell("show()", execution_count=1, outputs=[
            shown("text/html", "<b>x</b>"), shown("image/svg+xml", SVG)]),
        new_raw_cell("raw"),
        new_code_cell("hostile()", execution_count=2, outputs=[
            shown("text/plain", HOSTILE, "execute_result"), printed(HOSTILE + "\n")]),
    ])
    page = Page()
    page.feed(pictures.notebook_html(book))
    page.close()
    bold = [i for i, (tag, _) in enumerate(page.tags) if tag == "b"]
    assert bold  # the HTML output is rendered as HTML
    # The SVG output: inline, or (nbconvert's default) an image of the SVG as a data URI.
    images = [base64.b64decode(attrs["src"].split(",", 1)[1]).decode()
              for tag, attrs in page.tags
              if tag == "img" and attrs.get("src", "").startswith("data:image/svg+xml;base64,")]
    assert SVG in images or ("rect", {"id": "the-rect", "width": "20", "height": "10"}) in page.tags
    text = "".join(page.text)
    assert "x" in text
    # The text/plain output and the printed text are shown as text, never run as a script.
    assert text.count(HOSTILE) == 2
    assert not any("alert(1)" in script for script in page.scripts)
    # One top-level cell element per markdown and code cell, in order: the screenshot mapping.
    positions = pictures.dom_positions(book)
    assert positions == {0: 0, 1: 1, 3: 2}
    assert page.cell_ids == [f"cell-id={book.cells[i].id}" for i in positions]
