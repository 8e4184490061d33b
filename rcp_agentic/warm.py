"""Warming: what :meth:`Engine.warm <rcp_agentic.engine.Engine.warm>` loaded, and the ready line.

An engine loads its models and its per-version structures on first use, so the first
request of a process pays for them (the query encoder alone is seconds). ``Engine.warm``
loads them up front through each part's own methods — the retriever its pool and query
encoder, the graph ops their graph view and communities — and returns a
:class:`WarmReport`; ``rcp-agentic serve`` warms before it serves and prints
:func:`ready_line` on stderr.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import RCPError
from .models.reranker import Reranker
from .models.tokenizer import get_encoding

# The text warming embeds, tokenises and links: any text loads the same structures.
WARM_QUERY = "warm-up query"
READY_PREFIX = "rcp-agentic: ready"


@dataclass(frozen=True)
class WarmReport:
    """What :meth:`Engine.warm` loaded: the version served, its chunk count, whether it holds
    a graph and communities, the seconds it took, and notes on parts that could not load."""

    version: int
    chunks: int
    graph: bool
    communities: bool
    seconds: float
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        """``index v12, 2298 chunks, graph + communities, warmed in 3.1 s``."""
        graph = ("graph + communities" if self.communities
                 else "graph" if self.graph else "no graph")
        text = (f"index v{self.version}, {self.chunks} chunks, {graph}, "
                f"warmed in {self.seconds:.1f} s")
        return text + "".join(f"; {note}" for note in self.notes)


def ready_line(transport: str, report: WarmReport | None, version: str,
               url: str | None = None) -> str:
    """The one line a server prints once it answers: ``rcp-agentic: ready (stdio) index v12,
    ...`` (``(http) <url>/rcp index ...`` over HTTP); ``report`` None: served unwarmed at
    ``version`` (``--no-warm``)."""
    where = f" {url}/rcp" if url else ""
    what = report.describe() if report is not None else f"index {version}, not warmed"
    return f"{READY_PREFIX} ({transport}){where} {what}"


def warm_models(reranker: Reranker | None) -> str | None:
    """Load the token counter (``global`` summaries, token budgets) and a local cross-encoder
    reranker, by scoring one pair (an LLM judge loads nothing, and each call is a model
    request: left alone). A note when the reranker cannot load (rerank requests then fail as
    they would have), else None."""
    get_encoding()
    if reranker is None or reranker.method != "cross-encoder":
        return None
    try:
        reranker.score(WARM_QUERY, [WARM_QUERY])
    except RCPError as exc:
        return f"reranker not loaded: {exc.message}"
    return None
