"""The RAPTOR tree as a plug-in of the core (:mod:`rcp_agentic.plugins`): its builder."""

from __future__ import annotations

from typing import Any

from ..config import EngineConfig
from ..derived import BuildContext, DerivedBuilder
from .index import TreeIndex


class _TreePlugin:
    """What the core asks of the tree (``rcp_agentic.plugins.TreePlugin``)."""

    def builder(self, ctx: BuildContext, config: EngineConfig) -> DerivedBuilder[Any]:
        return TreeIndex(ctx, config.tree_section)


PLUGIN = _TreePlugin()
