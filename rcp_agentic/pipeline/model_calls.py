"""RCP ``embed`` (§7.3) and ``rerank`` (§7.6) over an engine's models: the inputs bounded and
validated, the outputs checked and encoded."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from ..config import EngineConfig
from ..control import RequestControl
from ..errors import CapabilityMissing, InternalError, InvalidParams, OptionUnsupported, \
    PayloadTooLarge
from ..models.embedder import TimedEmbedder
from ..models.reranker import Reranker
from ..wire import RerankResult
from .params import query_text


def embed(embedder: TimedEmbedder, config: EngineConfig, inputs: list[Any], *,
          kind: str = "document", encoding: str = "json") -> dict[str, Any]:
    """One unit-length vector per input, as JSON numbers or f32-base64."""
    if not isinstance(inputs, list) or not inputs:
        raise InvalidParams("inputs must be a non-empty array", field="inputs")
    if len(inputs) > config.embed_batch_limit:
        raise PayloadTooLarge(f"at most {config.embed_batch_limit} inputs per call "
                              "(embed.batchLimit)", field="inputs")
    if kind not in ("query", "document"):
        raise InvalidParams("kind must be 'query' or 'document'", field="kind")
    if encoding not in ("json", "f32-base64"):
        raise OptionUnsupported(f"encoding {encoding!r} is not offered", option="encoding")
    texts = [query_text(x, field=f"inputs[{i}]", allow_empty=True,
                        max_chars=config.max_embed_chars)
             for i, x in enumerate(inputs)]
    if kind == "query":
        vectors = np.vstack([embedder.embed_query(t) for t in texts])
    else:
        vectors = embedder.embed_documents(texts)
    if not np.isfinite(vectors).all():
        raise InternalError("the embedding model produced non-finite values")
    dim = int(vectors.shape[1])
    if encoding == "json":
        return {"vectors": vectors.astype(np.float64).tolist(), "dimension": dim}
    blobs = [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
    return {"vectors": blobs, "encoding": "f32-base64", "dimension": dim}


def rerank(reranker: Reranker | None, config: EngineConfig, query: Any, passages: list[Any], *,
           method: str | None = None, top_n: int | None = None,
           control: RequestControl | None = None) -> RerankResult:
    """``passages`` scored against ``query``: ``scores[i]`` belongs to ``passages[i]``;
    ``order`` lists indices best first (ties by index), truncated to ``top_n``."""
    if reranker is None:
        raise CapabilityMissing("no reranker is configured for this engine")
    if method is not None and method != reranker.method:
        raise OptionUnsupported(f"rerank method {method!r} is not offered (this engine: "
                                f"{reranker.method!r})", option="method")
    text = query_text(query, max_chars=config.max_query_chars)
    if not isinstance(passages, list) or not passages:
        raise InvalidParams("passages must be a non-empty array", field="passages")
    if len(passages) > config.rerank_max_candidates:
        raise InvalidParams(f"at most {config.rerank_max_candidates} passages",
                            field="passages")
    bodies = [query_text(p, field=f"passages[{i}]", allow_empty=True)
              for i, p in enumerate(passages)]
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int)
                              or top_n < 1):
        raise InvalidParams("topN must be a positive integer", field="topN")
    scores = [float(x) for x in reranker.score(text, bodies, control=control)]
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return RerankResult(scores=scores, order=order[:top_n] if top_n else order)
