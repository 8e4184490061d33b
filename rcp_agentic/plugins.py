"""The derived-index plug-ins: the knowledge graph (``graph/``) and the RAPTOR tree (``raptor/``).

The core reaches them only through this module, by the module names below (the contracts in
pyproject.toml hold the rest of the core to that). Each names a module of the plug-in that
defines ``PLUGIN``; it is imported on first use, so an engine that builds neither never
loads them. The protocols say what the core asks of each.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .config import EngineConfig
    from .control import RequestControl
    from .derived import BuildContext, DerivedBuilder
    from .store.docstore import Docstore

GRAPH_PLUGIN = "rcp_agentic.graph.plugin"
TREE_PLUGIN = "rcp_agentic.raptor.plugin"

# The graph's own values, which the core hands on without reading them:
# ``rcp_agentic.graph.model.GraphData`` (the knowledge graph of one version),
# ``rcp_agentic.graph.ppr.GraphView`` (its PageRank view) and
# ``rcp_agentic.graph.communities.index.CommunityStore`` (its Leiden communities).
GraphData = Any
GraphView = Any
CommunityStore = Any


class GraphState(Protocol):
    """The graph at one version as the catalog caches it (``graph.follow.GraphState``): the
    graph (None: that version holds none), the version it was patched from and what moved
    (None after a full load), and its rows while it may still be patched (None once handed
    on to a newer state)."""

    @property
    def version(self) -> int: ...

    @property
    def base(self) -> int: ...

    @property
    def change(self) -> Any: ...

    @property
    def rows(self) -> Any: ...

    @property
    def graph(self) -> GraphData | None: ...


class GraphOps(Protocol):
    """The graph and memory ops the engine hands its calls to (``graph.ops.GraphOps``)."""

    ctx: Any  # the engine parts they run over (``graph.context.GraphContext``)

    def warm(self, version: int, query: str) -> bool: ...

    def ops(self) -> list[str]: ...

    def run(self, params: Any, control: RequestControl | None = None) -> Any:
        """The ``graph``, ``memory/build`` or ``memory/recall`` call ``params`` (their model,
        ``pipeline.method_params``) make."""
        ...


class TreePlugin(Protocol):
    """What the core asks of the RAPTOR tree."""

    def builder(self, ctx: BuildContext, config: EngineConfig) -> DerivedBuilder[Any]:
        """The ``tree-node`` builder, with the configuration's tree settings."""
        ...


class GraphPlugin(Protocol):
    """What the core asks of the knowledge graph: its builders, its ops, the per-version
    state the catalog serves, the limits it advertises and graph recall."""

    limits: Mapping[str, int]  # x-rcp-agentic.limits of the graph ops

    def builders(self, ctx: BuildContext, config: EngineConfig) -> dict[str, DerivedBuilder[Any]]:
        """The ``node`` builder (it writes the triplets too) and, with communities on, the
        ``community`` builder after it, in run order."""
        ...

    def ops(self, parts: Mapping[str, Any], composers: dict[str, Any]) -> GraphOps:
        """The graph and memory ops over an engine's ``parts`` (the fields of
        ``graph.context.GraphContext``); the composers of the composed kinds (path,
        subgraph) join ``composers``."""
        ...

    def graph_state(self, base: GraphState | None, store: Docstore, version: int) -> GraphState:
        """The graph visible at ``version``, patched from ``base`` (an older state) when given,
        with what patching it further needs (``graph.follow.GraphState``)."""
        ...

    def graph_view(self, state: GraphState, older: GraphView | None,
                   word_df: Callable[[str], int]) -> GraphView | None:
        """The PageRank view of ``state``'s graph (None without one), patched from ``older``
        (the view of the state it was patched from) when that works."""
        ...

    def communities(self, store: Docstore, version: int) -> CommunityStore | None:
        """The Leiden communities stored and visible at ``version`` (None: none)."""
        ...

    def recall_source(self, recall: Any, calibrator: Any) -> Any:
        """Graph recall's source of ``retrieve``'s lists (``graph.recall.GraphSource``)."""
        ...

    def follow_bridge(self, query: Any, cands: Any) -> None:
        """The bridge hop after fusion (``graph.bridge``): the bridge passages into a chunk
        retrieve's ranking."""
        ...

    def graph_scope(self, plan: Any, snapshot: Any) -> tuple[Any, frozenset[str] | None]:
        """The graph a request may see in ``snapshot`` and the chunk keys its filter allows
        (None, None without a graph; with a usage note)."""
        ...

    def chunk_prior(self, *args: Any) -> dict[str, float]:
        """Graph recall's passage prior (``graph.recall.chunk_prior``)."""
        ...


@functools.cache
def graph() -> GraphPlugin:
    """The knowledge graph's plug-in (imported on first use)."""
    plugin: GraphPlugin = importlib.import_module(GRAPH_PLUGIN).PLUGIN
    return plugin


@functools.cache
def tree() -> TreePlugin:
    """The RAPTOR tree's plug-in (imported on first use)."""
    plugin: TreePlugin = importlib.import_module(TREE_PLUGIN).PLUGIN
    return plugin
