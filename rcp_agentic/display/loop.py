"""HTML for a corrective retrieval loop's result: its verdict, the trace of every step
(action, unit, verdict, best confidence, hits returned and kept, why) and the evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .hits import hits_table
from .html import MUTED, badge, block, confidence_bar, esc, line, table

if TYPE_CHECKING:
    from ..agentic.result import CorrectiveResult

VERDICT_COLOUR = {"correct": "#1a7f37", "ambiguous": "#bf8700", "incorrect": "#cf222e"}
TRACE_HEAD = ("step", "action", "unit", "query", "verdict", "best confidence", "returned",
              "kept", "tokens", "why")


def _verdict(verdict: str | None) -> str:
    return badge(verdict, VERDICT_COLOUR.get(verdict, "#57606a")) if verdict else "-"


def loop_html(result: CorrectiveResult) -> str:
    """The loop's result: a header line, the trace table and the evidence hits."""
    from ..wire import Hit

    head = (f'<div style="margin:4px 0"><b>{esc(result.query)}</b> {_verdict(result.verdict)}'
            f'<span style="{MUTED}"> · {result.calls} call{"s" * (result.calls != 1)} · '
            f"{result.tokens:,} evidence tokens · {esc(result.stop_reason)}</span></div>")
    rows = []
    for step in result.trace:
        query = "" if step.query == result.query else f"<i>{esc(step.query)}</i>"
        why = esc(step.reason) + (f'<div style="color:#cf222e">{esc(step.error)}</div>'
                                  if step.error else "")
        rows.append([str(step.index), esc(step.action + (" +graph" if step.graph else "")),
                     esc(step.unit), query, _verdict(step.verdict),
                     confidence_bar(step.max_confidence), str(step.returned), str(step.kept),
                     f"{step.tokens:,}", why])
    trace = table(TRACE_HEAD, rows)
    hits = [Hit.model_validate(h) for h in result.evidence]
    evidence = (line(f"evidence: {len(hits)} hit{'s' * (len(hits) != 1)}")
                + hits_table(hits, result.query)) if hits else line("no evidence kept")
    return block(head + trace + evidence)
