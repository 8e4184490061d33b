"""The corrective loop for LangChain: a retriever, and a node for LangGraph state graphs.

:class:`CorrectiveRCPRetriever` returns the loop's evidence as Documents (each with
its ``step`` in metadata); ``invoke`` works in chains and with
``create_retriever_tool``. :func:`corrective_node` wraps a loop as a LangGraph node
that reads the question from the state and writes the evidence and the trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from langchain_core.callbacks import (AsyncCallbackManagerForRetrieverRun,
                                      CallbackManagerForRetrieverRun)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from ..integrations.langchain import hit_to_document
from .loop import CorrectiveRetriever
from .result import CorrectiveResult


def evidence_documents(result: CorrectiveResult) -> list[Document]:
    """The evidence as Documents, metadata holding the step that found each hit."""
    docs = []
    for hit in result.evidence:
        doc = hit_to_document(hit)
        doc.metadata["step"] = (hit.get("meta") or {}).get("step")
        docs.append(doc)
    return docs


class CorrectiveRCPRetriever(BaseRetriever):
    """A LangChain retriever whose every call runs the corrective loop.

    Build it from a :class:`~rcp_agentic.agentic.CorrectiveRetriever` (``loop=...``).
    Documents carry the ``step`` that found them; call ``loop.run`` (or use
    :func:`corrective_node`) when the trace itself is wanted.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    loop: CorrectiveRetriever = Field(description="the corrective loop to run")

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return evidence_documents(self.loop.run(query))

    async def _aget_relevant_documents(
            self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return evidence_documents(await self.loop.arun(query))


def corrective_node(loop: CorrectiveRetriever, *, question_key: str = "question",
                    documents_key: str = "documents", trace_key: str = "trace"
                    ) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A LangGraph node: ``state[question_key]`` in, evidence Documents and the trace out."""
    def node(state: Mapping[str, Any]) -> dict[str, Any]:
        result = loop.run(state[question_key])
        return {documents_key: evidence_documents(result),
                trace_key: [asdict(step) for step in result.trace]}

    return node
