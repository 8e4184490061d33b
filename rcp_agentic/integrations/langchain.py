"""LangChain retriever over any RCP engine: :class:`RCPRetriever`.

>>> retriever = RCPRetriever.from_url("http://127.0.0.1:8750", token="…", k=5)  # doctest: +SKIP
>>> retriever.invoke("what is reciprocal rank fusion?")                        # doctest: +SKIP
>>> await retriever.ainvoke("fusion", k=2, unit="document", token_budget=800)  # doctest: +SKIP

Each RCP hit becomes a ``Document`` (``id`` = hit id, ``page_content`` = hit text,
``metadata`` = :func:`~.common.hit_metadata`). Every retriever option of
:mod:`rcp_agentic.options` is a field, and any of them (and ``k``) can be overridden per call
as a keyword of ``invoke``/``ainvoke``/``batch``; ``ainvoke`` is natively async (an asyncio
RCP client, no worker thread). The graph's units, ``graph_recall``, ``rewrite`` and what
tracing callbacks see: ``docs/python.md``, "LangChain and LlamaIndex".
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever, LangSmithRetrieverParams
from pydantic import Field, PrivateAttr, SecretStr, model_validator
from typing_extensions import Self

from ..client import AsyncRCPClient, RCPClient
from ..client.registry import EngineSpec, load_registry
from ..client.sync_client import default_stdio_command
from ..closing import Closable
from ..engine import Engine
from ..options import doc
from ..vocabulary import Mode, TransformMethod
from ..wire import RetrieveResult, Unit
from .common import RETRIEVE_OPTIONS, HitSource, hit_metadata, result_metadata, retrieve_options

__all__ = ["RCPRetriever", "RCPRetrieverParams", "hit_to_document"]

# Keywords BaseRetriever.invoke leaves in the kwargs it hands to _get_relevant_documents.
_RUNNABLE_KWARGS = ("verbose", "run_id")


class RCPRetrieverParams(LangSmithRetrieverParams, total=False):
    """Tracing params of one call: LangSmith's, plus the effective RCP options."""

    rcp_k: int
    rcp_mode: str
    rcp_unit: str
    rcp_session_id: str


def hit_to_document(hit: Mapping[str, Any], call: Mapping[str, Any] | None = None) -> Document:
    """One wire hit as a ``Document`` (no text, e.g. ``include_text=False``: empty content);
    ``call`` is what its result says of the whole call (:func:`~.common.result_metadata`)."""
    return Document(id=None if hit.get("id") is None else str(hit["id"]),
                    page_content=hit.get("text") or "", metadata=hit_metadata(hit, call))


class RCPRetriever(BaseRetriever, Closable):
    """A LangChain retriever over an RCP engine (in process, stdio, HTTP, registry or client).

    ``None`` leaves an option to the engine. Engine errors surface as
    :class:`~rcp_agentic.errors.RCPError` subclasses (``InvalidParams`` with
    ``.field``, ``OptionUnsupported``, …); an unknown per-call keyword is a TypeError.
    """

    source: Any = Field(exclude=True, repr=False, description=(
        "Where hits come from: an Engine, an RCPClient/AsyncRCPClient, a stdio command "
        "(list of strings), an http(s) URL, a registry EngineSpec, or any object with "
        "retrieve(query, k, **options)."))
    token: SecretStr | None = Field(default=None, exclude=True, repr=False,
                                    description="Bearer token for an http(s) URL source.")
    client_options: dict[str, Any] | None = Field(default=None, exclude=True, description=(
        "Keyword arguments for the RCP clients the retriever opens (timeout, max_retries, …)."))
    engine_name: str | None = Field(default=None, description=(
        "The engine's name in tracing metadata (rcp_engine); default: derived from the source."))

    k: int = Field(default=4, gt=0, description="Number of hits to return (RCP `k`).")
    # One field per retriever option of rcp_agentic.options (descriptions from there); written
    # out, not generated, so type checkers and IDEs see them (tests/test_options_vocabulary.py).
    mode: Mode | None = Field(default=None, description=doc("mode"))
    unit: Unit | None = Field(default=None, description=doc("unit"))
    level: int | None = Field(default=None, ge=0, description=doc("level"))
    token_budget: int | None = Field(default=None, gt=0, description=doc("token_budget"))
    filter: dict[str, Any] | None = Field(default=None, description=doc("filter"))
    session_id: str | None = Field(default=None, description=doc("session_id"))
    mmr: dict[str, Any] | None = Field(default=None, description=doc("mmr"))
    rerank: dict[str, Any] | Literal[False] | None = Field(default=None, description=doc("rerank"))
    recency: dict[str, Any] | None = Field(default=None, description=doc("recency"))
    min_score: float | None = Field(default=None, description=doc("min_score"))
    candidate_k: int | None = Field(default=None, gt=0, description=doc("candidate_k"))
    fusion: dict[str, Any] | None = Field(default=None, description=doc("fusion"))
    include_text: bool | None = Field(default=None, description=doc("include_text"))
    index_version: str | None = Field(default=None, description=doc("index_version"))
    seed: int | None = Field(default=None, description=doc("seed"))
    strict: bool | None = Field(default=None, description=doc("strict"))
    graph_recall: bool | None = Field(default=None, description=doc("graph_recall"))
    rewrite: TransformMethod | Literal[False] | None = Field(default=None,
                                                              description=doc("rewrite"))

    _hits: HitSource = PrivateAttr()

    @model_validator(mode="after")
    def _defaults(self) -> Self:
        name, transport = _describe(self.source)
        if self.engine_name is None:
            self.engine_name = name
        # Caller-given tags and metadata win; ours only fill gaps.
        self.tags = list(dict.fromkeys(["rcp", *(self.tags or [])]))
        self.metadata = {"rcp_engine": self.engine_name, "rcp_transport": transport,
                         **(self.metadata or {})}
        return self

    def model_post_init(self, context: Any, /) -> None:
        """Wrap the source (clients open lazily, on the first call that needs one)."""
        super().model_post_init(context)
        self._hits = HitSource(self.source,
                               token=self.token.get_secret_value() if self.token else None,
                               client_options=self.client_options)

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def from_engine(cls, engine: Engine, **fields: Any) -> RCPRetriever:
        """Over an Engine in this process (an in-process RCP client, as the wire would)."""
        return cls(source=engine, **fields)

    @classmethod
    def from_client(cls, client: RCPClient | AsyncRCPClient | Any, **fields: Any) -> RCPRetriever:
        """Over an existing client (or federation); the caller keeps closing it."""
        return cls(source=client, **fields)

    @classmethod
    def from_stdio(cls, command: Sequence[str] | None = None,
                   engine_dir: str | os.PathLike[str] | None = None,
                   **fields: Any) -> RCPRetriever:
        """Over a stdio server subprocess (default: ``rcp-agentic serve --stdio --engine DIR``)."""
        return cls(source=list(command) if command else default_stdio_command(engine_dir),
                   **fields)

    @classmethod
    def from_url(cls, url: str, token: str | None = None, **fields: Any) -> RCPRetriever:
        """Over an RCP HTTP server, with an optional bearer token."""
        return cls(source=url, token=None if token is None else SecretStr(token), **fields)

    @classmethod
    def from_registry(cls, registry: str | os.PathLike[str] | Mapping[str, Any], engine_id: str,
                      **fields: Any) -> RCPRetriever:
        """Over the engine ``engine_id`` of an ``rcp.json`` registry (path or parsed mapping)."""
        return cls(source=load_registry(registry)[engine_id], **fields)

    # --- retrieval ------------------------------------------------------------------------

    def _call(self, overrides: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """``k`` and the retrieve options of one call: fields, then per-call overrides."""
        overrides = {n: v for n, v in overrides.items() if n not in _RUNNABLE_KWARGS}
        k = overrides.pop("k", None)
        defaults = {name: getattr(self, name) for name in RETRIEVE_OPTIONS}
        return (self.k if k is None else k), retrieve_options(defaults, overrides)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> list[Document]:
        k, options = self._call(kwargs)
        return _documents(self._hits.retrieve(query, k, options))

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **kwargs: Any) -> list[Document]:
        k, options = self._call(kwargs)
        return _documents(await self._hits.aretrieve(query, k, options))

    def _get_ls_params(self, **kwargs: Any) -> RCPRetrieverParams:
        """Tracing params with the effective options of this call (``kwargs``: its overrides)."""
        try:
            k, options = self._call(kwargs)
        except TypeError:  # a bad keyword fails the call itself, reported as a retriever error
            k, options = self.k, {}
        params = RCPRetrieverParams(ls_retriever_name="rcp", rcp_k=k)
        for name in ("mode", "unit", "session_id"):
            if options.get(name) is not None:
                params[f"rcp_{name}"] = str(options[name])  # type: ignore[literal-required]
        return params

    # --- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the sync clients this retriever opened (never a client it was given)."""
        self._hits.close()

    async def aclose(self) -> None:
        """Also close the async client this retriever opened on the running event loop."""
        await self._hits.aclose()



def _documents(result: RetrieveResult) -> list[Document]:
    call = result_metadata(result)
    return [hit_to_document(hit.to_wire(), call) for hit in result.hits]


def _describe(source: Any) -> tuple[str, str]:
    """A name and transport for tracing, known without any I/O."""
    if isinstance(source, EngineSpec):
        return source.id, source.transport
    if isinstance(source, Engine):
        return source.path.name, "in-process"
    if isinstance(source, str):
        parts = urlsplit(source)
        return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl(), "http"
    if isinstance(source, (RCPClient, AsyncRCPClient)):
        server = (source.server or {}).get("server") or {}
        kind = type(source.transport).__name__.removeprefix("Async").removesuffix("Transport")
        return str(server.get("name") or "rcp"), {"InProcess": "in-process"}.get(kind, kind.lower())
    if isinstance(source, Sequence) and source and all(isinstance(c, str) for c in source):
        command = list(source)
        if "--engine" in command[:-1]:
            return Path(command[command.index("--engine") + 1]).name, "stdio"
        return Path(command[0]).name, "stdio"
    return type(source).__name__, "client"
