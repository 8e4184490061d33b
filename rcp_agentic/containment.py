"""Containment, written once: when one returned unit already holds another (RCP §7.7.3 sessions).

A unit *holds* another when every leaf chunk of the other is among its own. Per-document
units know their leaves by place: a document holds its pages and chunks, a page the chunks
that lie on it. A derived unit that contains its leaves (a summary) lists them and holds the
chunks among them, the summaries whose leaves are a subset, and is held by the documents it
wholly lies in. A graph unit (an entity, a fact, a path) is derived from its leaves but is not
made of them: it neither holds nor is held, and only its own id repeats it.

:class:`Held` is what a set of units holds together, kept the way a session needs it (the
documents and pages returned whole, the summaries' leaf sets); :func:`contains` is the same
rule for one unit against another. Sessions (:mod:`.sessions`) and the corrective loop
(:mod:`.agentic.loop`) both judge by it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

CHUNKS = ("chunk", "passage")


@dataclass(frozen=True)
class Extent:
    """What containment reads of a unit: its id, its stored kind (``unit``), its document and
    pages, and — a summary — the leaf chunk ids and documents it covers (``leaves`` None: a
    unit judged by place or by id alone)."""

    uid: str
    unit: str
    doc_id: str
    page_start: int | None
    page_end: int | None
    leaves: frozenset[str] | None = None
    docs: frozenset[str] = frozenset()


@dataclass
class Held:
    """What a set of units holds together: their ids, the documents and pages among them
    (returned whole), the summaries' leaf sets and the union of those leaves."""

    seen: dict[str, None] = field(default_factory=dict)  # ids, oldest first
    whole_docs: set[str] = field(default_factory=set)
    whole_pages: set[tuple[str, int]] = field(default_factory=set)
    summaries: list[frozenset[str]] = field(default_factory=list)
    summarised: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, units: Iterable[Extent]) -> Held:
        held = cls()
        for unit in units:
            held.add(unit)
        return held

    def add(self, u: Extent) -> None:
        """Hold ``u`` too."""
        self.seen[u.uid] = None
        if u.leaves is not None:
            if u.leaves and u.leaves not in self.summaries:
                self.summaries.append(u.leaves)
                self.summarised |= u.leaves
        elif u.unit == "document":
            self.whole_docs.add(u.doc_id)
        elif u.unit == "page" and u.page_start is not None:
            self.whole_pages.add((u.doc_id, u.page_start))

    def holds(self, c: Extent) -> bool:
        """Whether ``c`` is one of these units or lies inside them (module doc)."""
        return c.uid in self.seen or holds_by_place_or_leaves(
            c, whole_docs=self.whole_docs, whole_pages=self.whole_pages,
            summaries=self.summaries, summarised=self.summarised)


def holds_by_place_or_leaves(c: Extent, *, whole_docs: set[str] | frozenset[str],
                             whole_pages: set[tuple[str, int]] | frozenset[tuple[str, int]],
                             summaries: list[frozenset[str]],
                             summarised: set[str] | frozenset[str]) -> bool:
    """The one containment rule: whether ``c`` lies inside the documents and pages returned
    whole or the summaries' leaf sets (``summarised``: their union)."""
    if c.leaves is not None:  # a summary: inside documents it wholly lies in, or a summary
        if c.docs and c.docs <= whole_docs:
            return True
        return any(c.leaves <= other for other in summaries)
    if c.unit in CHUNKS and c.uid in summarised:
        return True
    if c.unit in (*CHUNKS, "page") and c.doc_id in whole_docs:
        return True
    if c.unit in CHUNKS and c.page_start is not None:
        end = c.page_end if c.page_end is not None else c.page_start
        return any((c.doc_id, p) in whole_pages for p in range(c.page_start, end + 1))
    return False


def contains(outer: Extent, inner: Extent) -> bool:
    """Whether ``outer`` holds ``inner`` (another unit: a unit does not contain itself)."""
    return outer.uid != inner.uid and Held.of([outer]).holds(inner)
