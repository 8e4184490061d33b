"""The corrective loop for LlamaIndex: a retriever whose nodes are the loop's evidence."""

from __future__ import annotations

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from ..integrations.llamaindex import ScoreMode, hit_to_node
from .loop import CorrectiveRetriever
from .result import CorrectiveResult


def evidence_nodes(result: CorrectiveResult, score_mode: ScoreMode = "confidence"
                   ) -> list[NodeWithScore]:
    """The evidence as scored nodes, metadata holding the step that found each hit."""
    nodes = []
    for hit in result.evidence:
        node = hit_to_node(hit, score_mode)
        node.node.metadata["step"] = (hit.get("meta") or {}).get("step")
        nodes.append(node)
    return nodes


class CorrectiveLlamaRetriever(BaseRetriever):
    """A LlamaIndex retriever running the corrective loop per query (sync and async)."""

    def __init__(self, loop: CorrectiveRetriever, *, score_mode: ScoreMode = "confidence",
                 **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.loop = loop
        self.score_mode = score_mode

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return evidence_nodes(self.loop.run(query_bundle.query_str), self.score_mode)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return evidence_nodes(await self.loop.arun(query_bundle.query_str), self.score_mode)
