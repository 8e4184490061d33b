"""Tests for rcp_agentic.corpus.loaders, on real files written to tmp_path."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter

from rcp_agentic.corpus import loaders
from rcp_agentic.corpus.jsonl import bounded_skips
from rcp_agentic.corpus.loaders import SUPPORTED_EXTENSIONS, load_path
from rcp_agentic.corpus.source import Page, SkippedFile, SourceDocument


def load(path: str | os.PathLike[str]) -> list[SourceDocument | SkippedFile]:
    return list(load_path(path))


def only_doc(path: str | os.PathLike[str]) -> SourceDocument:
    (item,) = load(path)
    assert isinstance(item, SourceDocument), item
    return item


def only_skip(path: str | os.PathLike[str]) -> SkippedFile:
    (item,) = load(path)
    assert isinstance(item, SkippedFile), item
    return item


def write_pdf(path: Path, pages: list[list[str]], title: str | None = None) -> Path:
    """One PDF page per entry; each page holds its lines (an empty list makes a blank page)."""
    pdf = FPDF()
    if title:
        pdf.set_title(title)
    pdf.set_font("Helvetica", size=12)
    for lines in pages:
        pdf.add_page()
        for line in lines:
            pdf.cell(0, 10, line, new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(path))
    return path


# --- plain text and Markdown ------------------------------------------------------------

def test_supported_extensions() -> None:
    assert SUPPORTED_EXTENSIONS == frozenset(
        {".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".jsonl"})


def test_txt_file(tmp_path: Path) -> None:
    path = tmp_path / "x" / "notes.txt"
    path.parent.mkdir()
    path.write_text("hello world\nsecond line\n", encoding="utf-8")
    doc = only_doc(path)
    assert doc.id == "notes.txt"
    assert doc.text == "hello world\nsecond line\n"
    assert doc.title is None
    assert doc.file_type == "txt"
    assert doc.source == str(path)
    assert doc.pages == []
    assert doc.meta == {}
    assert doc.modified == pytest.approx(path.stat().st_mtime)


def test_txt_bom_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "win.txt"
    path.write_bytes(b"\xef\xbb\xbfcaf\xc3\xa9\r\nline two\r\n")
    assert only_doc(path).text == "café\nline two\n"


def test_markdown_title_is_first_atx_heading_outside_code(tmp_path: Path) -> None:
    path = tmp_path / "guide.markdown"
    path.write_text(
        "Intro paragraph.\n\n```bash\n# install first\npip install x\n```\n\n"
        "## Getting   Started ##\n\n# Later heading\n",
        encoding="utf-8",
    )
    doc = only_doc(path)
    assert doc.file_type == "md"
    assert doc.title == "Getting   Started"
    assert "pip install x" in doc.text


def test_markdown_without_heading(tmp_path: Path) -> None:
    path = tmp_path / "plain.md"
    path.write_text("#hashtag is not a heading\n", encoding="utf-8")
    assert only_doc(path).title is None


@pytest.mark.parametrize("content", [b"", b"   \n\t\n", b"\xef\xbb\xbf"])
def test_empty_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "empty.txt"
    path.write_bytes(content)
    assert only_skip(path) == SkippedFile(str(path), "empty file")


@pytest.mark.parametrize("content", [b"abc\x00def", b"\x89PNG\r\n\x1a\n\x00\x00", b"caf\xe9 latin-1"])
def test_binary_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "data.md"
    path.write_bytes(content)
    assert only_skip(path).reason == "binary file"


# --- HTML -------------------------------------------------------------------------------

def test_html_text_title_and_entities(tmp_path: Path) -> None:
    path = tmp_path / "page.htm"
    path.write_text(
        """<!DOCTYPE html>
<html><head>
  <title>  Caf&eacute; &amp; Bar </title>
  <meta charset="utf-8">
  <style>body { color: red; }</style>
  <script>var hidden = "do not index";</script>
</head>
<body>
  <h1>Menu</h1>
  <p>Fish   &amp; <b>chips</b>,
     &lt;fresh&gt; &#8212; daily.</p>
  <script type="text/javascript">if (a < b) { alert("nope"); }</script>
  <ul><li>Tea</li><li>Coffee</li></ul>
  <div>Line one<br>Line two</div>
  <table><tr><td>a</td><td>b</td></tr></table>
  <pre>
  keep   this
    indented</pre>
  <svg><title>icon title</title><text>svg text</text></svg>
</body></html>""",
        encoding="utf-8",
    )
    doc = only_doc(path)
    assert doc.file_type == "html"
    assert doc.title == "Café & Bar"
    assert doc.text == (
        "Menu\n\nFish & chips, <fresh> \u2014 daily.\n\nTea\nCoffee\n\n"
        "Line one\nLine two\n\na b\n\n  keep   this\n    indented"
    )
    for hidden in ("color: red", "do not index", "alert", "icon title", "svg text", "Café"):
        assert hidden not in doc.text


def test_html_missing_head_close_and_declared_charset(tmp_path: Path) -> None:
    path = tmp_path / "legacy.html"
    path.write_bytes(
        b'<html><head><meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1">'
        b"<title>Old</title><body><p>caf\xe9</p></body></html>"
    )
    doc = only_doc(path)
    assert (doc.title, doc.text) == ("Old", "café")


def test_html_without_text(tmp_path: Path) -> None:
    path = tmp_path / "blank.html"
    path.write_text("<html><head><title>T</title></head><body><script>x()</script></body></html>")
    assert only_skip(path).reason == "no text extracted"


# --- PDF --------------------------------------------------------------------------------

def test_pdf_pages_and_offsets(tmp_path: Path) -> None:
    path = write_pdf(
        tmp_path / "report.pdf",
        [["Alpha page one", "second line"], [], ["Beta page three"], ["Gamma page four"]],
        title="Quarterly Report",
    )
    doc = only_doc(path)
    assert doc.file_type == "pdf"
    assert doc.title == "Quarterly Report"
    assert [p.number for p in doc.pages] == [1, 2, 3, 4]
    page_texts = [doc.text[p.start:p.end] for p in doc.pages]
    assert "Alpha page one" in page_texts[0] and "second line" in page_texts[0]
    assert page_texts[1] == ""
    assert doc.pages[1].start == doc.pages[1].end
    assert page_texts[2] == "Beta page three"
    assert page_texts[3] == "Gamma page four"
    # Page text is exactly what pypdf extracts, and non-empty pages are joined by a blank line.
    expected = [(page.extract_text() or "").strip() for page in PdfReader(path).pages]
    assert page_texts == expected
    assert doc.text == "\n\n".join(t for t in expected if t)
    assert doc.text[doc.pages[0].end:doc.pages[2].start] == "\n\n"
    assert all(isinstance(p, Page) for p in doc.pages)


def test_pdf_without_title_metadata(tmp_path: Path) -> None:
    path = write_pdf(tmp_path / "untitled.pdf", [["Just text"]])
    doc = only_doc(path)
    assert doc.title is None
    assert doc.pages == [Page(1, 0, len("Just text"))]


def test_pdf_truncated_is_unreadable(tmp_path: Path) -> None:
    good = write_pdf(tmp_path / "good.pdf", [["Some text"], ["More text"]])
    path = tmp_path / "broken.pdf"
    path.write_bytes(good.read_bytes()[:200])
    skip = only_skip(path)
    assert skip.path == str(path)
    assert skip.reason.startswith("unreadable PDF: ")


def test_pdf_garbage_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "fake.pdf"
    path.write_bytes(b"this is not a pdf at all")
    assert only_skip(path).reason.startswith("unreadable PDF: ")


def test_pdf_without_text(tmp_path: Path) -> None:
    path = write_pdf(tmp_path / "blank.pdf", [[], []])
    assert only_skip(path).reason == "no text extracted"


def _encrypt(src: Path, dest: Path, user_password: str) -> Path:
    writer = PdfWriter(clone_from=str(src))
    writer.encrypt(user_password, owner_password="owner", algorithm="RC4-128")
    with dest.open("wb") as fh:
        writer.write(fh)
    return dest


def test_pdf_encrypted_with_password_is_skipped(tmp_path: Path) -> None:
    plain = write_pdf(tmp_path / "plain.pdf", [["Secret text"]])
    path = _encrypt(plain, tmp_path / "locked.pdf", "secret")
    assert only_skip(path).reason == "unreadable PDF: encrypted"


def test_pdf_encrypted_with_empty_password_loads(tmp_path: Path) -> None:
    plain = write_pdf(tmp_path / "plain.pdf", [["Open text"]])
    path = _encrypt(plain, tmp_path / "owner_only.pdf", "")
    assert only_doc(path).text == "Open text"


# --- JSON Lines -------------------------------------------------------------------------

def test_jsonl_records(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "records.jsonl"
    lines = [
        json.dumps({"_id": "a1", "text": "first", "title": "First", "lang": "en",
                    "tags": ["x", "y"], "nested": {"k": 1}}),
        "",
        json.dumps({"id": 7, "text": "second", "year": 2024, "title": 5}),
        "{not json",
        json.dumps({"title": "no text here"}),
        json.dumps({"text": "third \u2028 with a line separator", "score": None}),
        "[1, 2]",
        json.dumps({"text": 3}),
        "   ",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    items = load(folder)
    docs = [i for i in items if isinstance(i, SourceDocument)]
    skips = [i for i in items if isinstance(i, SkippedFile)]

    assert [d.id for d in docs] == ["a1", "7", "data/records.jsonl#L6"]
    first, second, third = docs
    assert first.text == "First\n\nfirst"
    assert first.title == "First"
    assert first.meta == {"lang": "en", "tags": ["x", "y"], "nested": {"k": 1}}
    assert first.source == f"{path}#L1"
    assert first.file_type == "jsonl"
    assert first.modified == pytest.approx(path.stat().st_mtime)
    assert second.text == "second" and second.title is None
    assert second.meta == {"year": 2024, "title": 5}
    assert third.text == "third \u2028 with a line separator"
    assert third.meta == {"score": None}

    assert [s.path for s in skips] == [f"{path}#L{n}" for n in (4, 5, 7, 8)]
    assert skips[0].reason.startswith("line 4: invalid JSON: ")
    assert "text" in skips[1].reason
    assert skips[2].reason == "line 7 is not a JSON object"
    assert "text" in skips[3].reason


def test_jsonl_single_file_id(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text('{"text": "only"}\n', encoding="utf-8")
    assert only_doc(path).id == "one.jsonl#L1"


def test_jsonl_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "none.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    assert only_skip(path).reason == "empty file"


# --- folders, ids and skipping ----------------------------------------------------------

def test_folder_walk_ids_order_and_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    (docs / "sub" / "deeper").mkdir(parents=True)
    (docs / ".hidden_dir").mkdir()
    (docs / "intro.md").write_text("# Intro\n\nWelcome.")
    (docs / "b.txt").write_text("bee")
    (docs / "sub" / "a.txt").write_text("a in sub")
    (docs / "sub" / "deeper" / "z.html").write_text("<p>deep</p>")
    (docs / "sub" / "image.xyz").write_bytes(b"\x00\x01")
    (docs / "Makefile").write_text("all:")
    (docs / ".secret.txt").write_text("hidden file")
    (docs / ".hidden_dir" / "c.txt").write_text("hidden dir")
    write_pdf(docs / "sub" / "a.pdf", [["pdf text"]])

    monkeypatch.chdir(tmp_path)
    items = load("docs")
    assert [(i.id if isinstance(i, SourceDocument) else i.path) for i in items] == [
        str(docs / "Makefile"),
        "docs/b.txt",
        "docs/intro.md",
        "docs/sub/a.pdf",
        "docs/sub/a.txt",
        "docs/sub/deeper/z.html",
        str(docs / "sub" / "image.xyz"),
    ]
    skips = {Path(i.path).name: i.reason for i in items if isinstance(i, SkippedFile)}
    assert skips == {"Makefile": "no file extension", "image.xyz": "unsupported extension .xyz"}
    assert all("hidden" not in i.text for i in items if isinstance(i, SourceDocument))

    # A trailing slash or an absolute path gives the same ids; a nested folder argument is
    # relative to its own parent.
    assert [i.id for i in load("docs/") if isinstance(i, SourceDocument)][:2] == [
        "docs/b.txt", "docs/intro.md"]
    assert [i.id for i in load(docs / "sub") if isinstance(i, SourceDocument)] == [
        "sub/a.pdf", "sub/a.txt", "sub/deeper/z.html"]
    assert only_doc("docs/sub/a.txt").id == "a.txt"


def test_unsupported_single_file(tmp_path: Path) -> None:
    path = tmp_path / "archive.ZIP"
    path.write_bytes(b"PK")
    assert only_skip(path) == SkippedFile(str(path), "unsupported extension .zip")


def test_uppercase_extension_is_supported(tmp_path: Path) -> None:
    path = tmp_path / "README.TXT"
    path.write_text("shout")
    assert only_doc(path).file_type == "txt"


def test_folder_with_bad_files_never_raises(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "bin.txt").write_bytes(b"\x00" * 10)
    (tmp_path / "bad.pdf").write_bytes(b"%PDF-1.4\n garbage")
    (tmp_path / "bad.jsonl").write_text("nope\n")
    (tmp_path / "ok.txt").write_text("fine")
    items = load(tmp_path)
    assert [type(i).__name__ for i in items] == [
        "SkippedFile", "SkippedFile", "SkippedFile", "SkippedFile", "SourceDocument"]


def test_missing_path_raises_at_call_time(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_path(tmp_path / "nope")


def test_symlink_loop_and_broken_link(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("a")
    (root / "loop").symlink_to(root, target_is_directory=True)
    (root / "dangling.txt").symlink_to(tmp_path / "missing.txt")
    items = load(root)
    assert [i.id for i in items if isinstance(i, SourceDocument)] == ["root/a.txt"]
    assert [i.reason for i in items if isinstance(i, SkippedFile)] == ["broken symlink"]


# --- symlinks, unreadable entries and OSErrors: skipped with their reason -----------------

def _summary(items: list[SourceDocument | SkippedFile], root: Path) -> tuple[list[str], dict]:
    docs = [i.id or "" for i in items if isinstance(i, SourceDocument)]
    skips = {Path(i.path).relative_to(root).as_posix(): i.reason for i in items
             if isinstance(i, SkippedFile)}
    return docs, skips


def _proc1_cwd_unreadable() -> bool:
    try:
        os.stat("/proc/1/cwd")
    except PermissionError:
        return True
    except OSError:
        return False
    return False


def test_self_referencing_symlinks_are_skipped_not_raised(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("alpha")
    (root / "self").symlink_to("self")                 # ELOOP on stat
    (root / "ping.txt").symlink_to("pong.txt")
    (root / "pong.txt").symlink_to("ping.txt")
    (root / "z.txt").write_text("zulu")
    docs, skips = _summary(load(root), root)
    assert docs == ["root/a.txt", "root/z.txt"]
    assert skips == {"ping.txt": "symlink loop", "pong.txt": "symlink loop",
                     "self": "symlink loop"}
    # Named explicitly, a looping link is one skipped entry too, not "missing".
    assert only_skip(root / "self") == SkippedFile(str(root / "self"), "symlink loop")


def test_symlinks_leaving_the_root_are_skipped_unless_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside the indexed folder")
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "s.txt").write_text("inside")
    (root / "out-dir").symlink_to(outside, target_is_directory=True)
    (root / "out-file.txt").symlink_to(outside / "secret.txt")
    (root / "in-file.txt").symlink_to(root / "sub" / "s.txt")   # stays inside: followed

    docs, skips = _summary(load(root), root)
    assert docs == ["root/in-file.txt", "root/sub/s.txt"]
    assert skips == {
        "out-dir": f"symlink to {outside} leaves the indexed folder (--follow-symlinks follows it)",
        "out-file.txt": f"symlink to {outside / 'secret.txt'} leaves the indexed folder "
                        "(--follow-symlinks follows it)"}

    followed = list(load_path(root, follow_symlinks=True))
    docs, skips = _summary(followed, root)
    assert docs == ["root/in-file.txt", "root/out-dir/secret.txt", "root/out-file.txt",
                    "root/sub/s.txt"] and skips == {}

    # A symlink named as the root is the user's choice: followed, ids from its own name.
    link = tmp_path / "link"
    link.symlink_to(root, target_is_directory=True)
    assert [i.id for i in load(link) if isinstance(i, SourceDocument)] == [
        "link/in-file.txt", "link/sub/s.txt"]


def test_a_symlink_cycle_through_an_outside_folder_ends_when_followed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    other = tmp_path / "other"
    root.mkdir()
    other.mkdir()
    (other / "o.txt").write_text("other")
    (other / "back").symlink_to(root, target_is_directory=True)
    (root / "r.txt").write_text("root")
    (root / "there").symlink_to(other, target_is_directory=True)
    docs, skips = _summary(list(load_path(root, follow_symlinks=True)), root)
    assert docs == ["root/r.txt", "root/there/o.txt"] and skips == {}


@pytest.mark.skipif(not _proc1_cwd_unreadable(), reason="/proc/1/cwd is readable here")
def test_unreadable_proc_entry_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("alpha")
    (root / "init-cwd").symlink_to("/proc/1/cwd")
    for follow in (False, True):
        docs, skips = _summary(list(load_path(root, follow_symlinks=follow)), root)
        assert docs == ["root/a.txt"]
        assert skips == {"init-cwd": "unreadable entry: Permission denied"}
    assert load("/proc/1/cwd") == [
        SkippedFile("/proc/1/cwd", "unreadable entry: Permission denied")]


def test_a_folder_removed_during_the_walk_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "later").mkdir(parents=True)
    (root / "a.txt").write_text("alpha")
    (root / "later" / "b.txt").write_text("beta")
    items = load_path(root)
    first = next(items)
    assert isinstance(first, SourceDocument) and first.id == "root/a.txt"
    for child in (root / "later").iterdir():
        child.unlink()
    (root / "later").rmdir()
    assert list(items) == [SkippedFile(str(root / "later"), "entry vanished while indexing")]


def test_fifo_is_skipped_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    assert only_skip(fifo) == SkippedFile(str(fifo), "not a regular file")
    assert load(tmp_path) == [SkippedFile(str(fifo), "not a regular file")]


# --- max_chars: a document longer than the engine accepts is a skipped file ---------------

def test_documents_longer_than_max_chars_are_skipped(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "short.txt").write_text("x" * 100)
    (root / "long.md").write_text("# Long\n\n" + "y" * 200)
    (root / "huge.txt").write_text("z" * 1000)              # > 4 bytes a character allowed
    (root / "page.html").write_text("<html><head><style>" + "s" * 500 + "</style></head>"
                                    "<body><p>visible</p></body></html>")   # text is short
    (root / "recs.jsonl").write_text(json.dumps({"id": "ok", "text": "fits"}) + "\n"
                                     + json.dumps({"id": "big", "text": "w" * 300}) + "\n")
    items = list(load_path(root, max_chars=150))
    docs, skips = _summary(items, root)
    assert docs == ["root/page.html", "ok", "root/short.txt"]
    assert skips == {
        "huge.txt": "file of 1,000 bytes is longer than max_document_chars (150 characters)",
        "long.md": "text of 208 characters is longer than max_document_chars (150)",
        "recs.jsonl#L2": "text of 300 characters is longer than max_document_chars (150)",
    }
    assert [i.id for i in load(root) if isinstance(i, SourceDocument)] == [
        "root/huge.txt", "root/long.md", "root/page.html", "ok", "big", "root/short.txt"]


def test_names_that_are_not_utf8_or_hold_control_characters_are_escaped(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / os.fsdecode(b"caf\xe9.txt")).write_text("latin-1 name")
    (root / "two\nlines.md").write_text("a newline in the name")
    (root / os.fsdecode(b"odd\xff.bin")).write_bytes(b"x")
    items = load(root)
    assert [(i.id, i.source) for i in items if isinstance(i, SourceDocument)] == [
        ("root/caf\\xe9.txt", f"{root}/caf\\xe9.txt"),
        ("root/two\\nlines.md", f"{root}/two\\nlines.md")]
    assert [i for i in items if isinstance(i, SkippedFile)] == [
        SkippedFile(f"{root}/odd\\xff.bin", "unsupported extension .bin")]
    for item in items:   # storable in SQLite, printable on a UTF-8 terminal
        (item.source if isinstance(item, SourceDocument) else item.path).encode("utf-8")


def test_a_very_deep_folder_tree_is_walked(tmp_path: Path) -> None:
    depth = 1500   # deeper than Python's recursion limit, within PATH_MAX
    deep = tmp_path / "root"
    deep.mkdir()
    for _ in range(depth):   # os.makedirs and Path.mkdir(parents=True) recurse
        deep = deep / "d"
        deep.mkdir()
    (deep / "bottom.txt").write_text("at the bottom")
    try:
        (item,) = load(tmp_path / "root")
        assert isinstance(item, SourceDocument) and item.text == "at the bottom"
        assert item.id == "root/" + "d/" * depth + "bottom.txt"
    finally:   # pytest's own clean-up (shutil.rmtree) recurses too
        (deep / "bottom.txt").unlink()
        while deep != tmp_path:
            deep.rmdir()
            deep = deep.parent


def test_a_jsonl_record_nested_past_the_limit_is_skipped(tmp_path: Path) -> None:
    """The standard parser recurses: 100,000 brackets would raise RecursionError mid-ingest."""
    path = tmp_path / "deep.jsonl"
    path.write_text('{"text": "ok"}\n{"text": "x", "meta": ' + "[" * 100_000 + "]" * 100_000
                    + "}\n", "utf-8")
    items = list(load_path(path))
    assert [type(i).__name__ for i in items] == ["SourceDocument", "SkippedFile"]
    assert "nested deeper than" in items[1].reason


# --- hostile folders: swapped parents, huge files, floods of bad lines --------------------

def _swap_for_symlink(folder: Path, target: Path) -> None:
    """Replace ``folder`` by a symlink to ``target``, as an attacker racing the walk would."""
    folder.rename(folder.parent.parent / f"{folder.name}-moved")
    folder.symlink_to(target, target_is_directory=True)


@pytest.fixture
def swap_case(tmp_path: Path) -> tuple[Path, Path]:
    """A root whose sub/ holds a.txt, and an outside folder holding a.txt of its own."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.txt").write_text("outside secret")
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("inside text")
    (root / "top.txt").write_text("top text")
    return root, outside


def test_a_parent_swapped_for_a_symlink_before_a_file_is_opened_is_not_followed(
        swap_case: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = swap_case
    real_load_file = loaders._load_file

    def racing(path: Path, doc_id: str, walk: loaders._Walk) -> Any:
        # The walk has listed sub/ and found a.txt a regular file; now sub/ changes.
        if path == root / "sub" / "a.txt":
            _swap_for_symlink(root / "sub", outside)
        return real_load_file(path, doc_id, walk)

    monkeypatch.setattr(loaders, "_load_file", racing)
    items = load(root)
    assert all("outside secret" not in i.text for i in items if isinstance(i, SourceDocument))
    docs, skips = _summary(items, root)
    assert docs == ["root/top.txt"]
    assert skips == {"sub/a.txt": f"opened as {outside / 'a.txt'}, outside the indexed folder "
                                  "(a folder on its path was replaced while indexing)"}


def test_a_folder_swapped_for_a_symlink_before_it_is_listed_is_not_walked(
        swap_case: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = swap_case
    real_list_folder = loaders._list_folder

    def racing(folder: Path, walk: loaders._Walk) -> Any:
        # The walk has seen sub/ as a real folder (not a symlink); now it changes.
        if folder == root / "sub":
            _swap_for_symlink(folder, outside)
        return real_list_folder(folder, walk)

    monkeypatch.setattr(loaders, "_list_folder", racing)
    docs, skips = _summary(load(root), root)
    assert docs == ["root/top.txt"]
    assert skips == {"sub": f"opened as {outside}, outside the indexed folder (a folder on its "
                            "path was replaced while indexing)"}
    # Followed symlinks are the caller's choice: then the swapped folder is walked.
    monkeypatch.setattr(loaders, "_list_folder", real_list_folder)
    docs, _skips = _summary(list(load_path(root, follow_symlinks=True)), root)
    assert docs == ["root/sub/a.txt", "root/top.txt"]


@pytest.mark.parametrize("name,size,allowed", [("page.html", 200 * 2**20, "html (8"),
                                               ("scan.pdf", 400 * 2**20, "pdf (32"),
                                               ("notes.md", 200 * 2**20, None)])
def test_a_file_too_large_for_max_chars_is_skipped_unread(tmp_path: Path, name: str, size: int,
                                                          allowed: str | None) -> None:
    path = tmp_path / name
    with path.open("wb") as f:   # a small head, then a sparse hole: nothing to write or read
        f.write(b"<html><head><title>big</title></head><body><p>" + b"word " * 4000)
        f.truncate(size)
    started = time.monotonic()
    (item,) = load_path(path, max_chars=10_000_000)
    assert time.monotonic() - started < 2
    reason = f"file of {size:,} bytes is longer than max_document_chars (10,000,000 characters)"
    assert item == SkippedFile(str(path), reason + (f" allows for {allowed} bytes a character)"
                                                    if allowed else ""))


def test_a_jsonl_line_too_large_for_max_chars_is_skipped_unread(tmp_path: Path) -> None:
    path = tmp_path / "recs.jsonl"
    huge = json.dumps({"id": "huge", "text": "w" * 2000})
    path.write_text(json.dumps({"id": "small", "text": "fits"}) + "\n" + huge + "\n"
                    + json.dumps({"id": "last", "text": "after the long line"}), "utf-8")
    items = list(load_path(path, max_chars=100))
    assert [i.id for i in items if isinstance(i, SourceDocument)] == ["small", "last"]
    assert [i for i in items if isinstance(i, SkippedFile)] == [SkippedFile(
        f"{path}#L2", f"line 2 of {len(huge):,} bytes is longer than max_document_chars "
                      "(100 characters) allows for jsonl (8 bytes a character)")]


def test_a_flood_of_bad_jsonl_lines_is_reported_in_a_few_entries(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "good", "text": "one good record"}) + "\n"
                    + "{not json\n" * 100_000, "utf-8")
    items = load(path)
    assert [i.id for i in items if isinstance(i, SourceDocument)] == ["good"]
    skips = [i for i in items if isinstance(i, SkippedFile)]
    assert [s.path for s in skips] == [f"{path}#L{n}" for n in range(2, 7)] + [str(path)]
    assert all(s.reason.startswith(f"line {n}: invalid JSON")
               for n, s in zip(range(2, 7), skips))
    assert skips[-1].reason == "99,995 more bad lines skipped (lines 7, 8, 9 …)"


def test_bounded_skips_summarises_each_jsonl_file_past_the_first_lines() -> None:
    many = [SkippedFile(f"/d/a.jsonl#L{n}", "bad id") for n in range(1, 10)]
    others = [SkippedFile("/d/x.txt", "empty file"), SkippedFile("/d/b#L3.txt", "binary file"),
              SkippedFile("/d/b.jsonl#L4", "bad id")]
    assert bounded_skips(many[:3] + others + many[3:]) == [
        *many[:3], *others, *many[3:5], SkippedFile("/d/a.jsonl", "4 more bad lines skipped "
                                                                  "(lines 6, 7, 8 …)")]
    assert bounded_skips(many[:6]) == [*many[:5], SkippedFile("/d/a.jsonl", "1 more bad lines "
                                                                            "skipped (lines 6)")]
