"""HTML for the engine and its derived indexes: the engine's summary card, the RAPTOR
tree as a collapsible outline, and the Leiden communities as a table per level.

Each function takes plain facts (counts, statuses, stored rows) gathered by its caller;
nothing here reads an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..display_hooks import EngineFacts
from .html import MUTED, badge, block, details, esc, line, number, shorten, table

if TYPE_CHECKING:
    from ..graph.communities.index import CommunityStore, StoredCommunity
    from ..raptor.outline import TreeOutline

SUMMARY_CHARS = 240
CHILDREN_SHOWN = 12   # children listed under one tree node or community; the rest counted
ROOTS_SHOWN = 20
MAX_ENTRIES = 200     # tree nodes or communities one outline lists in all


def engine_card(facts: EngineFacts) -> str:
    """The engine at a glance: documents, units by kind and level, version, backend, and
    each derived kind's state (the version it reflects, lag, the last failure)."""
    counts = dict(facts.counts)
    documents = counts.pop("documents", 0)
    rows = []
    for kind in sorted(set(counts) | set(facts.derived)):
        status = facts.derived.get(kind, {})
        by_level = status.get("counts") or {}
        levels = ", ".join(f"L{lv}: {n:,}" for lv, n in sorted(by_level.items(),
                                                                 key=lambda kv: int(kv[0])))
        if status.get("composed"):
            size = '<span style="color:#57606a">composed per query</span>'
        else:
            size = f"{counts.get(kind, 0):,}"
        rows.append([esc(kind), size, esc(levels), _state(status)])
    head = (f'<div style="font-size:15px;font-weight:600">rcp-agentic engine '
            f'<span style="{MUTED};font-weight:400">{esc(facts.path)}</span></div>'
            + line(esc(f"{documents:,} documents · index {facts.index_version} · backend "
                       f"{facts.backend} · embedder {facts.embedder} ({facts.dimension} dims)")))
    body = table(("unit", "units", "by level", "derived state"), rows)
    return block(f'<div style="border:1px solid #d0d7de;border-radius:6px;padding:8px">'
                 f"{head}{body}</div>")


def _state(status: Mapping[str, Any]) -> str:
    if not status:
        return f'<span style="{MUTED}">stored</span>'
    parts = []
    if status.get("current", True):
        parts.append(badge("current", "#1a7f37"))
    else:
        parts.append(badge("lagging", "#bf8700"))
    if status.get("reflects"):
        parts.append(f'<span style="{MUTED}">reflects {esc(status["reflects"])}</span>')
    if status.get("error"):
        parts.append(badge("last build failed", "#cf222e")
                     + f'<div style="{MUTED}">{esc(shorten(str(status["error"]), 200))}</div>')
    return " ".join(parts)


def tree_html(outline: TreeOutline, nodes: Sequence[Mapping[str, Any]]) -> str:
    """The RAPTOR tree as a collapsible outline: per level its size and coverage, and from
    the top level down each node's summary with its children nested under it.

    ``nodes`` are the live tree-node rows (``uid``, ``level``, ``text``, ``tokens``,
    ``covers``, ``umeta.children``)."""
    head = line(esc(
        f"RAPTOR tree over {outline.leaves:,} chunks from {outline.documents:,} documents "
        f"(mean {outline.leaf_tokens:.0f} tokens)"
        + (f"; reflects {outline.reflects}" + ("" if outline.current else ", lagging")
           if outline.reflects else "")))
    if not outline.levels:
        return block(head + line("no tree built yet"))
    sizes = table(("level", "nodes", "mean tokens", "chunks covered"),
                  [[str(lv.level), f"{lv.nodes:,}", f"{lv.mean_tokens:.0f}",
                    f"{lv.leaves_covered:,} ({outline.coverage(lv.level):.0%})"]
                   for lv in outline.levels])
    by_uid = {str(n["uid"]): n for n in nodes}
    top = max(lv.level for lv in outline.levels)

    def children(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        kids = [by_uid[c] for c in (node.get("umeta") or {}).get("children", [])
                if c in by_uid and by_uid[c]["level"] < node["level"]]
        return sorted(kids, key=lambda n: (-len(n["covers"]), n["uid"]))

    def summary(node: Mapping[str, Any]) -> str:
        return (f"<b>L{node['level']}</b> {esc(node['uid'])} "
                f'<span style="{MUTED}">{len(node["covers"])} chunks, {node["tokens"]} '
                f"tokens</span><div>{esc(shorten(str(node['text']), SUMMARY_CHARS))}</div>")

    roots = sorted((n for n in nodes if n["level"] == top),
                   key=lambda n: (-len(n["covers"]), n["uid"]))
    shown = _outline(roots, children, summary,  # level 1: its children are chunks
                     lambda n: f"covers {len(n['covers'])} chunks")
    return block(head + sizes + f'<div style="margin-top:6px">{shown}</div>')


def _outline(roots: Sequence[Any], children: Callable[[Any], Sequence[Any]],
             summary: Callable[[Any], str], leaf_note: Callable[[Any], str]) -> str:
    """Nested ``<details>``, the first root open: at most ``ROOTS_SHOWN`` roots and
    ``CHILDREN_SHOWN`` children of each, ``MAX_ENTRIES`` in all, every root shown before
    any descendant takes the rest (a deep hierarchy stays a page long); what is left out
    is counted."""
    shown_roots = list(roots[:ROOTS_SHOWN])
    left = [MAX_ENTRIES - len(shown_roots)]

    def entry(item: Any, open_: bool) -> str:
        kids = children(item)
        body = entries(kids) if kids else line(esc(leaf_note(item)))
        return details(summary(item), body, open_=open_)

    def entries(items: Sequence[Any]) -> str:
        out = []
        for item in items[:CHILDREN_SHOWN]:
            if left[0] <= 0:
                break
            left[0] -= 1
            out.append(entry(item, False))
        if len(items) > len(out):
            out.append(line(f"and {len(items) - len(out)} more"))
        return "".join(out)

    out = "".join(entry(item, i == 0) for i, item in enumerate(shown_roots))
    if len(roots) > len(shown_roots):
        out += line(f"and {len(roots) - len(shown_roots)} more")
    return out


def communities_html(store: CommunityStore) -> str:
    """The community hierarchy at a glance (communities and sizes per level) and, from the
    top level down, each community's title, size, rating and summary, children nested."""
    levels = []
    for level in range(store.top_level + 1):
        sizes = [c.size for c in store.level(level)]
        levels.append([str(level), f"{len(sizes):,}", f"{max(sizes, default=0):,}",
                       f"{sum(sizes) / len(sizes):.1f}" if sizes else "-",
                       esc(_histogram(sizes))])
    glance = table(("level", "communities", "largest", "mean size", "sizes"), levels)
    def children(c: StoredCommunity) -> list[StoredCommunity]:
        return sorted((store.by_id[x] for x in c.children if x in store.by_id),
                      key=lambda x: (-x.size, x.id))

    def summary(c: StoredCommunity) -> str:
        rating = "" if c.rating is None else f", rating {number(c.rating, 1)}"
        return (f"<b>{esc(c.title or c.id)}</b> "
                f'<span style="{MUTED}">{c.size} entities, levels {c.levels.start}–'
                f"{c.levels.stop - 1}{esc(rating)}</span>"
                f"<div>{esc(shorten(c.summary or c.text, SUMMARY_CHARS))}</div>")

    shown = _outline(store.level(store.top_level), children, summary,
                     lambda c: f"{c.id}: no finer communities")
    head = line(f"{len(store.by_id):,} communities over {store.top_level + 1} levels "
                f"(0 = finest) at index v{store.version}")
    return block(head + glance + f'<div style="margin-top:6px">{shown}</div>')


def _histogram(sizes: Sequence[int]) -> str:
    shown = sorted(sizes, reverse=True)[:CHILDREN_SHOWN]
    rest = len(sizes) - len(shown)
    return ", ".join(map(str, shown)) + (f", … ({rest} more)" if rest > 0 else "")
