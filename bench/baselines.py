"""The two framework baselines: LlamaIndex's and LangChain's documented hybrids.

Both index one node/document per SciFact abstract (``{doc_id: text}``, no
splitting), use the same MiniLM embeddings (``bench.embedcache`` wrappers) and
an in-process ephemeral Chroma collection in cosine space. Nothing is
downloaded: no Chroma default embedding function, no OpenAI default in
LlamaIndex ``Settings``.

* ``LlamaIndexHybrid``: ``QueryFusionRetriever([vector, BM25],
  mode="reciprocal_rerank", num_queries=1, use_async=False)`` over a
  ``VectorStoreIndex`` on ``ChromaVectorStore`` and
  ``llama_index.retrievers.bm25.BM25Retriever`` (defaults: bm25s, English
  stopwords and PyStemmer stemmer); top 100 from each, final top 100.
* ``LangChainEnsemble``: ``EnsembleRetriever([BM25, Chroma], weights=[0.5,
  0.5])`` with ``langchain_community`` ``BM25Retriever`` (rank-bm25, default
  whitespace preprocessing) and a ``langchain_chroma.Chroma`` retriever, k=100.

Each class has ``wrap(cache)`` -> its framework's embeddings object,
``build(corpus, embeddings) -> Built`` and ``search(built, query, k=100) ->
[doc_id]``. ``time_queries`` runs a search function over queries and records
per query the end-to-end latency and the time spent inside the query
embedding, so latency beyond the embedding is ``e2e - embed``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

TOP_K = 100


def _ephemeral_chroma():
    import chromadb
    from chromadb.config import Settings

    return chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))


@dataclass
class Built:
    """A built baseline: its retriever, the embeddings wrapper it queries with."""

    name: str
    retriever: Any
    embeddings: Any
    top_k: int = TOP_K
    extras: dict = field(default_factory=dict)


class LlamaIndexHybrid:
    """LlamaIndex hybrid recipe: RRF fusion of Chroma vector + BM25 retrievers."""

    name = "llamaindex-fusion"

    @staticmethod
    def wrap(cache):
        from bench.embedcache import LlamaIndexCachedEmbedding

        return LlamaIndexCachedEmbedding(cache)

    @staticmethod
    def build(corpus: Mapping[str, str], embeddings, top_k: int = TOP_K) -> Built:
        from llama_index.core import Settings, StorageContext, VectorStoreIndex
        from llama_index.core.retrievers import QueryFusionRetriever
        from llama_index.core.schema import TextNode
        from llama_index.retrievers.bm25 import BM25Retriever
        from llama_index.vector_stores.chroma import ChromaVectorStore

        Settings.embed_model = embeddings
        Settings.llm = None  # MockLLM: never resolve the OpenAI default
        nodes = [TextNode(id_=did, text=text) for did, text in corpus.items()]
        collection = _ephemeral_chroma().create_collection(
            f"li-{uuid.uuid4().hex}", metadata={"hnsw:space": "cosine"}, embedding_function=None
        )
        storage = StorageContext.from_defaults(
            vector_store=ChromaVectorStore(chroma_collection=collection)
        )
        index = VectorStoreIndex(nodes, storage_context=storage, embed_model=embeddings)
        vector_retriever = index.as_retriever(similarity_top_k=top_k)
        bm25_retriever = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=top_k)
        fusion = QueryFusionRetriever(
            [vector_retriever, bm25_retriever],
            similarity_top_k=top_k,
            num_queries=1,  # no LLM query generation
            mode="reciprocal_rerank",
            use_async=False,
        )
        return Built(LlamaIndexHybrid.name, fusion, embeddings, top_k, {"collection": collection})

    @staticmethod
    def search(built: Built, query: str, k: int = TOP_K) -> list[str]:
        return [n.node.node_id for n in built.retriever.retrieve(query)][:k]


class LangChainEnsemble:
    """LangChain ``EnsembleRetriever`` over BM25 + Chroma, weights 0.5/0.5."""

    name = "langchain-ensemble"

    @staticmethod
    def wrap(cache):
        from bench.embedcache import LangChainCachedEmbeddings

        return LangChainCachedEmbeddings(cache)

    @staticmethod
    def build(corpus: Mapping[str, str], embeddings, top_k: int = TOP_K) -> Built:
        from langchain_chroma import Chroma
        from langchain_core.documents import Document

        try:
            from langchain_classic.retrievers import EnsembleRetriever
        except ImportError:  # older layouts
            from langchain.retrievers import EnsembleRetriever
        from langchain_community.retrievers import BM25Retriever

        docs = [
            Document(page_content=text, metadata={"doc_id": did}, id=did)
            for did, text in corpus.items()
        ]
        bm25 = BM25Retriever.from_documents(docs, k=top_k)
        store = Chroma(
            collection_name=f"lc-{uuid.uuid4().hex}",
            embedding_function=embeddings,
            client=_ephemeral_chroma(),
            collection_metadata={"hnsw:space": "cosine"},
        )
        store.add_documents(docs, ids=[d.id for d in docs])
        vector = store.as_retriever(search_kwargs={"k": top_k})
        ensemble = EnsembleRetriever(retrievers=[bm25, vector], weights=[0.5, 0.5])
        return Built(LangChainEnsemble.name, ensemble, embeddings, top_k, {"store": store})

    @staticmethod
    def search(built: Built, query: str, k: int = TOP_K) -> list[str]:
        return [d.metadata["doc_id"] for d in built.retriever.invoke(query)][:k]


BASELINES = (LlamaIndexHybrid, LangChainEnsemble)


def _cpu_snapshot() -> tuple[float, float, float] | None:
    """(wall s, machine busy CPU s, this process's CPU s), or None off Linux."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    busy = sum(f) - f[3] - (f[4] if len(f) > 4 else 0)  # minus idle, iowait
    t = os.times()
    return time.perf_counter(), busy / os.sysconf("SC_CLK_TCK"), t.user + t.system


def other_cpu_load(before, after) -> float | None:
    """Cores' share used by *other* processes between two ``_cpu_snapshot()``s.

    0.0 is a quiet machine; 0.5 on 2 cores means one core was busy elsewhere,
    and the latencies measured meanwhile are inflated.
    """
    if before is None or after is None or after[0] <= before[0]:
        return None
    wall = after[0] - before[0]
    other = (after[1] - before[1]) - (after[2] - before[2])
    return max(0.0, other / (wall * (os.cpu_count() or 1)))


@dataclass
class Timing:
    """Per-query results and latencies (ms) of one system.

    ``other_load``: share of the machine's CPU used by other processes during
    the timed pass (see ``other_cpu_load``); latencies are only comparable
    when it is near 0.
    """

    run: dict[str, list[str]]
    e2e_ms: list[float]
    embed_ms: list[float]
    other_load: float | None = None

    @property
    def beyond_ms(self) -> list[float]:
        return [max(0.0, e - m) for e, m in zip(self.e2e_ms, self.embed_ms)]


def time_queries(
    search: Callable[[str], list[str]],
    queries: Mapping[str, str],
    embeddings: Any,
    warmup: int = 5,
) -> Timing:
    """Run ``search(text)`` for each query, timing it end to end.

    ``embeddings`` is anything with ``reset_query_time()`` and ``query_ms``
    (the ``bench.embedcache`` wrappers): its ``query_ms`` after a query is the
    time that query spent inside the embedding model. The first ``warmup``
    queries are run once, untimed, before the timed pass over all queries.
    """
    texts = list(queries.values())
    for text in texts[:warmup]:
        search(text)
    run: dict[str, list[str]] = {}
    e2e: list[float] = []
    emb: list[float] = []
    before = _cpu_snapshot()
    for qid, text in queries.items():
        embeddings.reset_query_time()
        t0 = time.perf_counter()
        run[qid] = search(text)
        e2e.append((time.perf_counter() - t0) * 1000.0)
        emb.append(embeddings.query_ms)
    return Timing(run, e2e, emb, other_cpu_load(before, _cpu_snapshot()))


def time_baseline(
    system, built: Built, queries: Mapping[str, str], k: int = TOP_K, warmup: int = 5
) -> Timing:
    """``time_queries`` for one of ``BASELINES`` after ``system.build``."""
    return time_queries(lambda q: system.search(built, q, k), queries, built.embeddings, warmup)
