"""What every framework integration shares: where hits come from and the retrieve options.

A *source* is anything the retrievers can ask for hits: an :class:`~rcp_agentic.Engine`
(in process), an :class:`~rcp_agentic.client.RCPClient` / ``AsyncRCPClient``, a
stdio command (a list of strings), an ``http(s)://`` URL, an ``rcp.json`` registry
entry (:class:`~rcp_agentic.client.registry.EngineSpec`), or any object with a
``retrieve(query, k, **options)`` method returning a
:class:`~rcp_agentic.wire.RetrieveResult` (or its wire dict) and optionally an ``async
aretrieve`` (a federation, say). :class:`HitSource` turns it into one sync and one async
``retrieve`` returning a :class:`~rcp_agentic.wire.RetrieveResult`, as the engine and the
clients do. A framework document's metadata holds the hit's wire fields
(:func:`hit_metadata`).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from ..client import AsyncRCPClient, RCPClient
from ..client.registry import EngineSpec
from ..engine import Engine
from ..federation.fanout import FanOut
from ..options import FIELD_NAMES, OPTIONS
from ..wire import RetrieveResult

# The retrieve options a retriever exposes as fields (Python names), from the one vocabulary.
RETRIEVE_OPTIONS: tuple[str, ...] = FIELD_NAMES
# What one call may also pass: this engine's vendor options, by Python name (``tree_search``)
# or wire name; the client sends them under their ``x-rcp-agentic-…`` names.
CALL_OPTIONS: tuple[str, ...] = FIELD_NAMES + tuple(
    o.name for o in OPTIONS if o.vendor and not o.field)


def retrieve_options(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The options of one call: the retriever's fields, then per-call overrides; None = unset."""
    unknown = [name for name in overrides if name not in CALL_OPTIONS and name != "k"
               and not name.startswith(("x-", "_"))]
    if unknown:
        raise TypeError(f"unknown retrieve option(s): {', '.join(sorted(unknown))}; known: k, "
                        + ", ".join(CALL_OPTIONS))
    merged = {**defaults, **overrides}
    return {name: value for name, value in merged.items() if value is not None}


class HitSource:
    """One source of hits with a sync and an async ``retrieve``; clients are opened lazily.

    An async client is bound to the event loop that created it, so one is kept per
    running loop (notebooks and ``asyncio.run`` each bring their own).
    """

    def __init__(self, source: Any, *, token: str | None = None,
                 client_options: Mapping[str, Any] | None = None) -> None:
        if source is None:
            raise TypeError("a source is required: an Engine, an RCP client, a stdio command, "
                            "an http(s) URL or a registry entry")
        if isinstance(source, str) and not source.startswith(("http://", "https://")):
            raise TypeError(f"a string source must be an http(s) URL, not {source!r} (pass a "
                            "stdio command as a list)")
        self.source = source
        self.token = token
        self.options = dict(client_options or {})
        self._sync: Any = None
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary())
        self._lock = threading.Lock()
        self._owned: list[Any] = []
        self._owned_async: list[tuple[weakref.ref[asyncio.AbstractEventLoop], Any]] = []

    # --- clients --------------------------------------------------------------------------

    def sync_client(self) -> Any:
        """The object whose ``retrieve`` serves sync calls."""
        with self._lock:
            if self._sync is None:
                self._sync = self._open_sync()
            return self._sync

    def _open_sync(self) -> Any:
        src = self.source
        if isinstance(src, (RCPClient, AsyncRCPClient)) or _has_retrieve(src):
            return src
        client = self._new_client(RCPClient, src)
        self._owned.append(client)
        return client

    def _new_client(self, cls: Any, src: Any) -> Any:
        if isinstance(src, Engine):
            return cls.in_process(src, **self.options)
        if isinstance(src, EngineSpec):
            return (src.connect if cls is RCPClient else src.connect_async)(**self.options)
        if isinstance(src, str):
            return cls.http(src, self.token, **self.options)
        if isinstance(src, Sequence) and src and all(isinstance(c, str) for c in src):
            return cls.stdio(list(src), **self.options)
        raise TypeError(f"cannot retrieve from a {type(src).__name__}")

    def async_client(self) -> Any:
        """The object whose ``retrieve`` (or ``aretrieve``) serves async calls on this loop."""
        src = self.source
        if isinstance(src, AsyncRCPClient):
            return src
        if isinstance(src, RCPClient) or (_has_retrieve(src) and not isinstance(src, Engine)):
            return src  # sync-only: called in a worker thread
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.get(loop)
            if client is None:
                client = self._async[loop] = self._new_client(AsyncRCPClient, src)
                self._owned_async.append((weakref.ref(loop), client))
            return client

    @property
    def capabilities(self) -> dict[str, Any]:
        """The source's advertised capabilities ({} for a source that has none); a federation's
        are the union of its engines' (its effective set, RCP §16.4)."""
        client = self.sync_client()
        if isinstance(client, RCPClient):
            client.initialize()
            return client.capabilities
        if isinstance(client, FanOut):
            return dict(client.capabilities["union"])
        caps = getattr(client, "capabilities", {})
        return dict(caps() if callable(caps) else caps)

    # --- retrieve -------------------------------------------------------------------------

    def retrieve(self, query: Any, k: int, options: Mapping[str, Any]) -> RetrieveResult:
        """The retrieve result for ``query``."""
        client = self.sync_client()
        if isinstance(client, AsyncRCPClient):
            raise TypeError("an AsyncRCPClient source serves only async calls (ainvoke)")
        return as_result(client.retrieve(query, k, **options), query)

    async def aretrieve(self, query: Any, k: int, options: Mapping[str, Any]) -> RetrieveResult:
        """The same, without blocking the event loop."""
        client = self.async_client()
        if isinstance(client, AsyncRCPClient):
            return await client.retrieve(query, k, **options)
        if hasattr(client, "aretrieve"):
            return as_result(await client.aretrieve(query, k, **options), query)
        return as_result(await asyncio.to_thread(client.retrieve, query, k, **options), query)

    def close(self) -> None:
        """Close the clients this source opened (not ones it was given).

        An async client whose event loop is gone is closed on a private loop; one whose
        loop is still running elsewhere should be closed with :meth:`aclose` on it.
        """
        for client in self._owned:
            client.close()
        self._owned.clear()
        self._sync = None
        for ref, client in self._owned_async:
            loop = ref()
            if loop is None or loop.is_closed() or not loop.is_running():
                asyncio.run(client.close())
            else:
                asyncio.run_coroutine_threadsafe(client.close(), loop)
        self._owned_async.clear()
        self._async.clear()

    async def aclose(self) -> None:
        """Close every client this source opened, the running loop's async client included."""
        loop = asyncio.get_running_loop()
        mine = [c for ref, c in self._owned_async if ref() is loop]
        self._owned_async = [(ref, c) for ref, c in self._owned_async if ref() is not loop]
        self._async.pop(loop, None)
        for client in mine:
            await client.close()
        await asyncio.to_thread(self.close)


def _has_retrieve(obj: Any) -> bool:
    return callable(getattr(obj, "retrieve", None)) and not isinstance(obj, (Engine, str))


def as_result(result: Any, query: Any) -> RetrieveResult:
    """What a source's ``retrieve`` returned, as a :class:`~rcp_agentic.wire.RetrieveResult`
    (a wire dict, from a source of its own, parsed by the model)."""
    if isinstance(result, RetrieveResult):
        return result
    return RetrieveResult.model_validate(result).with_query(query)


# Hit fields copied into a framework document's metadata, under these names.
_HIT_FIELDS = ("score", "confidence", "unit", "level", "scores", "citation", "provenance",
               "chunk", "trust")


# Fields of the whole result copied into every document's metadata, under these names.
_RESULT_FIELDS = ("rewritten_query",)


def result_metadata(result: RetrieveResult) -> dict[str, Any]:
    """What a retrieve result says of the whole call, for each of its documents' metadata:
    ``rewritten_query``, the query the engine searched with when ``rewrite`` was asked."""
    return {name: getattr(result, name) for name in _RESULT_FIELDS
            if getattr(result, name) is not None}


def hit_metadata(hit: Mapping[str, Any],
                 call: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A wire hit's metadata for a framework document: the hit fields (as RCP spells them:
    a typed :class:`~rcp_agentic.wire.Hit` gives them with ``hit.to_wire()``), ``call`` (the
    :func:`result_metadata` of its result), then ``meta`` flattened.

    ``meta`` (the document's own metadata and the static fields such as
    ``page_range_start`` or ``chunk_index``) is flattened to the top level, where
    framework filters and postprocessors look, without overwriting a hit field;
    ``hit_id`` keeps the hit's id; a ``meta`` key named like a hit or call field becomes
    ``meta_<key>``.
    """
    out: dict[str, Any] = {"hit_id": hit.get("id")}
    out.update({name: hit[name] for name in _HIT_FIELDS if hit.get(name) is not None})
    out.update(call or {})
    for key, value in (hit.get("meta") or {}).items():
        out[f"meta_{key}" if key in out or key in _HIT_FIELDS else key] = value
    return out
