"""rcp-agentic: a retrieval engine for agentic RAG that speaks the Retrieval Context Protocol (RCP/1).

The entry point is :class:`Engine`; results are :class:`RetrieveResult` objects whose
``to_wire()`` is the exact RCP result; every error is an :class:`RCPError`.
"""

from .config import EngineConfig
from .engine import AddResult, EmbeddingMismatch, Engine
from .errors import (BackendUnavailable, CapabilityMissing, Conflict, InternalError, InvalidParams,
                     NotFound, OptionUnsupported, RCPError)
from .wire import Citation, Hit, RetrieveResult, Usage

__all__ = [
    "AddResult", "BackendUnavailable", "CapabilityMissing", "Citation", "Conflict",
    "EmbeddingMismatch", "Engine", "EngineConfig", "Hit", "InternalError", "InvalidParams",
    "NotFound", "OptionUnsupported", "RCPError", "RetrieveResult", "Usage",
]
__version__ = "0.1.0"
