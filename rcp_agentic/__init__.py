"""rcp-agentic: a retrieval engine for agentic RAG that speaks the Retrieval Context Protocol (RCP/1).

The entry point is :class:`Engine`; results are :class:`RetrieveResult` objects whose
``to_wire()`` is the exact RCP result; every error is an :class:`RCPError`. The
engine (and its model stack) is imported on first use, so ``rcp_agentic.client``
alone stays light. The notebook displays (:mod:`.display`) are imported here: they register
the results' ``_repr_html_`` renderers (:mod:`.display_hooks`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import display  # noqa: F401  (registers the results' notebook displays)
from .errors import (BackendUnavailable, CapabilityMissing, Conflict, InternalError, InvalidParams,
                     NotFound, OptionUnsupported, RCPError)
from .version import __version__

if TYPE_CHECKING:
    from .config import EngineConfig
    from .engine import AddResult, EmbeddingMismatch, Engine
    from .wire import Citation, Hit, RetrieveResult, Usage

_LAZY = {"EngineConfig": "config", "AddResult": "engine", "EmbeddingMismatch": "engine",
         "Engine": "engine", "Citation": "wire", "Hit": "wire", "RetrieveResult": "wire",
         "Usage": "wire"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AddResult", "BackendUnavailable", "CapabilityMissing", "Citation", "Conflict",
    "EmbeddingMismatch", "Engine", "EngineConfig", "Hit", "InternalError", "InvalidParams",
    "NotFound", "OptionUnsupported", "RCPError", "RetrieveResult", "Usage", "__version__",
]
