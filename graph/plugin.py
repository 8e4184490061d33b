"""The knowledge graph as a plug-in of the core (:mod:`rcp_agentic.plugins`): its builders, its
graph and memory ops, the per-version state the catalog serves, the limits it advertises, and
graph recall (its recall source, the bridge hop, the graph a request may see)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..config import EngineConfig
from ..derived import BuildContext, DerivedBuilder
from ..pipeline.method_params import GRAPH_LIMITS
from ..store.docstore import Docstore
from . import bridge
from . import ops as graph_ops
from .communities.index import CommunityIndex, CommunityStore, load_communities
from .compose import composers as graph_composers
from .context import GraphContext
from .follow import GraphState, advance
from .index import GraphIndex
from .ppr import GraphView
from .recall import GraphSource, chunk_prior, graph_scope
from .view_patch import patched_view

# x-rcp-agentic.limits: the bounds of the graph and memory ops RCP has no key for (§6.2), which
# their params models check (rcp_agentic/pipeline/method_params.py).
LIMITS: Mapping[str, int] = GRAPH_LIMITS


class _GraphPlugin:
    """What the core asks of the graph (``rcp_agentic.plugins.GraphPlugin``)."""

    limits: Mapping[str, int] = LIMITS

    def builders(self, ctx: BuildContext, config: EngineConfig) -> dict[str, DerivedBuilder[Any]]:
        out: dict[str, DerivedBuilder[Any]] = {"node": GraphIndex(ctx, config.graph_section)}
        if config.graph_communities:  # after the graph: it clusters that graph
            out["community"] = CommunityIndex(ctx, config.community_section)
        return out

    def ops(self, parts: Mapping[str, Any], composers: dict[str, Any]) -> graph_ops.GraphOps:
        ctx = GraphContext(**parts)
        for unit, composer in graph_composers(ctx.store).items():
            composers.setdefault(unit, composer)
        return graph_ops.GraphOps(ctx)

    def graph_state(self, base: GraphState | None, store: Docstore, version: int) -> GraphState:
        return advance(base, store, version)

    def graph_view(self, state: GraphState, older: GraphView | None,
                   word_df: Callable[[str], int]) -> GraphView | None:
        graph = state.graph
        if graph is None:
            return None
        if older is not None and state.change is not None:
            view = patched_view(older, graph, state.change, word_df)
            if view is not None:
                return view
        return GraphView(graph, word_df=word_df)

    def communities(self, store: Docstore, version: int) -> CommunityStore | None:
        return load_communities(store, version)

    def recall_source(self, recall: Any, calibrator: Any) -> GraphSource:
        return GraphSource(recall, calibrator)

    def follow_bridge(self, query: Any, cands: Any) -> None:
        bridge.follow_bridge(query, cands)  # looked up on the module: benches swap it

    graph_scope = staticmethod(graph_scope)
    chunk_prior = staticmethod(chunk_prior)


PLUGIN = _GraphPlugin()
