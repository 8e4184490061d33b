"""What the graph and memory ops need of their engine, handed to them once (never the engine)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..bounded import ByteBudget
    from ..catalog import Catalog
    from ..config import EngineConfig
    from ..builder_set import BuilderSet
    from ..ingest import Ingest
    from ..models.embedder import TimedEmbedder
    from ..retriever import Retriever
    from ..store.docstore import Docstore
    from ..trust import InjectionScreen


@dataclass
class GraphContext:
    """The parts of one engine the graph ops use: the catalog (served versions, the graph and
    communities of each, filters), the retriever (graph-aware hits), the write path and the
    derived builders (``memory/build``), the store (hydration, source trust), the embedder,
    the injection screen, the configuration's limits, the session byte budget, the cursor
    secret and the LLM (None: offline; the engine keeps it current)."""

    catalog: Catalog
    retriever: Retriever
    ingest: Ingest
    builders: BuilderSet
    store: Docstore
    embedder: TimedEmbedder
    screen: InjectionScreen
    config: EngineConfig
    session_budget: ByteBudget
    secret: bytes
    llm: Any = None
