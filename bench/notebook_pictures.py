"""Screenshots of the notebooks' key cells, to look at how results render.

    python bench/notebook_pictures.py [notebooks/05_raptor.ipynb ...]
        [--out bench/pictures] [--skip-execute] [--template lab|classic] [--output-only]

For each notebook (default: every ``notebooks/*.ipynb``):

1. execute it on a real kernel with nbclient, as ``tests/test_notebooks.py`` does (kernel
   ``python3``, cwd ``notebooks/``, timeout 600 s per cell) — ``--skip-execute`` keeps the
   outputs as the notebook is saved, for quick iteration;
2. export the executed notebook to ``<out>/<stem>.html`` with nbconvert's ``HTMLExporter``
   (``--template``, default ``lab``; images embedded);
3. open that HTML in headless Chromium (``/usr/bin/chromium`` driven by Playwright's sync API,
   viewport 1100 px wide, device scale factor 1, every http(s) request blocked — the page's
   CDN scripts, require.js and MathJax, are not needed for outputs) and screenshot, as
   ``<out>/<stem>-cell<N>.png`` (N = the cell's index in the notebook, markdown and raw
   cells counted):

   * every cell tagged ``screenshot`` (``cell.metadata.tags``), or, in a notebook without
     one, the first 3 code cells with an HTML, SVG or image output (``screenshot_cells``);
   * the whole cell (input and output), or only its output area with ``--output-only``.

   Without Playwright, Chromium's own ``--screenshot`` takes the top of each page
   (``--page-height`` px, default 3000) as ``<out>/<stem>-page.png``.

One line per picture (path, width x height px, bytes), then a summary: notebooks, pictures,
seconds spent executing, exporting and screenshotting. The exit status is 1 when a notebook
fails to execute (its partial outputs are still exported and pictured).

Tests (``tests/test_notebook_pictures.py``) use the two pure functions: ``screenshot_cells``
and ``notebook_html``.
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat
from nbconvert import HTMLExporter

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
CHROMIUM = "/usr/bin/chromium"
# The closed network refuses Chromium's own connections unless background traffic is off.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1100, "height": 900}
TAG = "screenshot"
FALLBACK_CELLS = 3
PICTURE_KINDS = ("text/html", "image/svg+xml")  # and every image/* kind
# Top-level cell elements of nbconvert's HTML, in notebook order (raw cells make none).
CELL_SELECTOR = {"lab": "main > div.jp-Cell", "classic": "#notebook-container > div.cell"}
OUTPUT_SELECTOR = {"lab": ".jp-Cell-outputWrapper", "classic": ".output_wrapper"}


def screenshot_cells(book: Any) -> list[int]:
    """Indices of the cells to picture: the cells tagged ``screenshot``, else the first 3 code
    cells with a ``text/html``, ``image/svg+xml`` or other ``image/*`` output."""
    tagged = [i for i, cell in enumerate(book.cells)
              if TAG in (cell.get("metadata", {}).get("tags") or [])]
    if tagged:
        return tagged
    chosen = []
    for i, cell in enumerate(book.cells):
        if cell.get("cell_type") != "code":
            continue
        kinds = {kind for out in cell.get("outputs", []) for kind in out.get("data", {})}
        if any(kind in PICTURE_KINDS or kind.startswith("image/") for kind in kinds):
            chosen.append(i)
            if len(chosen) == FALLBACK_CELLS:
                break
    return chosen


def dom_positions(book: Any) -> dict[int, int]:
    """Cell index -> position among the top-level cell elements of the exported HTML.
    Markdown and code cells each make one element; raw cells make none (nbconvert writes a
    raw cell's source bare, or not at all)."""
    positions, position = {}, 0
    for i, cell in enumerate(book.cells):
        if cell.get("cell_type") in ("code", "markdown"):
            positions[i] = position
            position += 1
    return positions


def notebook_html(book: Any, template: str = "lab") -> str:
    """The notebook (already executed) as one self-contained HTML page, as nbconvert writes it."""
    exporter = HTMLExporter(template_name=template, embed_images=True)
    body, _ = exporter.from_notebook_node(book)
    return body


def execute(book: Any, cwd: Path) -> str | None:
    """Run every cell in place, as tests/test_notebooks.py does; the error text, if any."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    client = NotebookClient(book, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}})
    try:
        client.execute()
    except CellExecutionError as error:
        return str(error).strip().splitlines()[-1] if str(error).strip() else repr(error)
    return None


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    with path.open("rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return 0, 0
    return struct.unpack(">II", head[16:24])


def report(path: Path) -> None:
    width, height = png_size(path)
    print(f"{path}  {width}x{height} px  {path.stat().st_size} bytes", flush=True)


def have_playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


def shoot_with_playwright(pages: list[tuple[Path, Any, str]], out: Path, template: str,
                          output_only: bool) -> list[Path]:
    """Element screenshots of the chosen cells of each (html path, book, stem)."""
    from playwright.sync_api import sync_playwright

    pictures: list[Path] = []
    with sync_playwright() as pw:
        # Playwright starts Chromium with a fresh temporary profile (--user-data-dir) itself.
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=CHROMIUM_FLAGS)
        try:
            context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
            context.route(lambda url: url.startswith(("http:", "https:")),
                          lambda route: route.abort())
            page = context.new_page()
            for html_path, book, stem in pages:
                chosen = screenshot_cells(book)
                if not chosen:
                    print(f"{stem}: no tagged cell and no code cell with an HTML, SVG or "
                          f"image output: no picture", flush=True)
                    continue
                page.goto(html_path.resolve().as_uri(), wait_until="load")
                cells = page.locator(CELL_SELECTOR[template])
                positions = dom_positions(book)
                if cells.count() != len(positions):
                    print(f"{stem}: {cells.count()} cell elements in the HTML for "
                          f"{len(positions)} markdown and code cells: pictures may be off",
                          file=sys.stderr, flush=True)
                for index in chosen:
                    if index not in positions:
                        print(f"{stem}: cell {index} is a raw cell: no element to picture",
                              file=sys.stderr, flush=True)
                        continue
                    cell_id = book.cells[index].get("id")
                    # The anchor nbconvert writes, when the cell has an id; else the position.
                    element = (page.locator(f'[id="cell-id={cell_id}"]') if cell_id
                               else cells.nth(positions[index]))
                    if cell_id and element.count() != 1:
                        element = cells.nth(positions[index])
                    if output_only and element.locator(OUTPUT_SELECTOR[template]).count():
                        element = element.locator(OUTPUT_SELECTOR[template]).first
                    path = out / f"{stem}-cell{index}.png"
                    element.screenshot(path=str(path), animations="disabled")
                    pictures.append(path)
                    report(path)
        finally:
            browser.close()
    return pictures


def shoot_with_cli(pages: list[tuple[Path, Any, str]], out: Path, height: int) -> list[Path]:
    """Without Playwright: the top ``height`` px of each whole page, one picture a notebook."""
    pictures: list[Path] = []
    for html_path, _, stem in pages:
        path = out / f"{stem}-page.png"
        with tempfile.TemporaryDirectory(prefix="notebook-pictures-") as profile:
            subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                            "--hide-scrollbars", "--force-device-scale-factor=1",
                            f"--window-size={VIEWPORT['width']},{height}",
                            f"--screenshot={path}", html_path.resolve().as_uri()],
                           check=True, capture_output=True, timeout=120)
        pictures.append(path)
        report(path)
    return pictures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to picture (default: notebooks/*.ipynb)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "pictures",
                        help="folder for the HTML and PNG files (default: bench/pictures)")
    parser.add_argument("--skip-execute", action="store_true",
                        help="export the notebooks with their saved outputs")
    parser.add_argument("--template", choices=sorted(CELL_SELECTOR), default="lab")
    parser.add_argument("--output-only", action="store_true",
                        help="picture the output area only, not the whole cell")
    parser.add_argument("--page-height", type=int, default=3000,
                        help="window height of the whole-page pictures without Playwright")
    args = parser.parse_args(argv)

    paths = [p.resolve() for p in args.notebooks] or sorted(NOTEBOOKS.glob("*.ipynb"))
    args.out.mkdir(parents=True, exist_ok=True)
    seconds = {"execute": 0.0, "export": 0.0, "screenshots": 0.0}
    failed: list[str] = []
    pages: list[tuple[Path, Any, str]] = []
    for path in paths:
        book = nbformat.read(path, as_version=4)
        if not args.skip_execute:
            start = time.perf_counter()
            error = execute(book, path.parent)
            took = time.perf_counter() - start
            seconds["execute"] += took
            print(f"{path.name}: executed in {took:.1f} s"
                  + (f" — FAILED: {error}" if error else ""), flush=True)
            if error:
                failed.append(path.name)
        start = time.perf_counter()
        html_path = args.out / f"{path.stem}.html"
        html_path.write_text(notebook_html(book, args.template), encoding="utf-8")
        seconds["export"] += time.perf_counter() - start
        pages.append((html_path, book, path.stem))

    start = time.perf_counter()
    if have_playwright():
        pictures = shoot_with_playwright(pages, args.out, args.template, args.output_only)
    else:
        print("playwright is not installed: whole-page pictures with chromium --screenshot",
              flush=True)
        pictures = shoot_with_cli(pages, args.out, args.page_height)
    seconds["screenshots"] = time.perf_counter() - start

    print(f"{len(paths)} notebooks, {len(pictures)} pictures in {args.out}; seconds: "
          + ", ".join(f"{name} {value:.1f}" for name, value in seconds.items()))
    if failed:
        print("failed to execute: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
