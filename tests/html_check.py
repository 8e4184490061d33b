"""An HTML checker for the display tests: the markup parses with every element closed in
order, and holds no script, no event-handler attribute and no active link."""

from __future__ import annotations

from html.parser import HTMLParser

VOID = {"br", "hr", "img", "input", "meta", "link", "wbr", "col", "area", "base", "source"}


class Checked(HTMLParser):
    """Parses HTML strictly enough to catch breakage: every element opened is closed in
    order; records scripts, event-handler attributes, links and the visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.tags: dict[str, int] = {}
        self.hrefs: list[str] = []
        self.text: list[str] = []
        self.titles: list[str] = []
        self._in_title = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name, value in attrs:
            if name.lower().startswith("on"):
                self.problems.append(f"event attribute {name}={value!r} on <{tag}>")
            if name.lower() in ("href", "src", "xlink:href"):
                self.hrefs.append(value or "")
        if tag == "title":
            self._in_title += 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title -= 1
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        (self.titles if self._in_title else self.text).append(data)


def parsed(markup: str) -> Checked:
    """``markup`` parsed: no problem, nothing left open, no script, no active link."""
    checked = Checked()
    checked.feed(markup)
    checked.close()
    assert not checked.problems, checked.problems[:5]
    assert not checked.stack, f"left open: {checked.stack}"
    assert "script" not in checked.tags
    assert all(not h.strip().lower().startswith(("javascript:", "data:", "vbscript:"))
               for h in checked.hrefs), checked.hrefs
    return checked


def visible(markup: str) -> str:
    """The text a reader sees (whitespace folded), after checking the markup."""
    return " ".join("".join(parsed(markup).text).split())


class _PageText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._skip += tag in ("script", "style", "title")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("script", "style", "title") and self._skip > 0

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)


def page_text(markup: str) -> str:
    """The text of a whole page outside scripts, styles and titles (whitespace folded),
    without checking it: for pages made by other tools (nbconvert's export)."""
    reader = _PageText()
    reader.feed(markup)
    reader.close()
    return " ".join("".join(reader.text).split())
