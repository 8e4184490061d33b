"""RCP/1's method table, shared by the server's dispatcher and the client's gating (§7)."""

from __future__ import annotations

PROTOCOL_VERSION = 1
# Every method RCP/1 defines, and the capability that gates it (None: always offered).
RCP_METHODS: dict[str, str | None] = {
    "initialize": None, "info": None, "ping": None, "shutdown": None, "embed": "embed",
    "embed/sparse": "sparseEmbed", "embed/multi": "multiVector", "rerank": "rerank",
    "retrieve": "retrieve", "query/transform": "transform", "graph": "graph",
    "index/add": "index", "index/delete": "index", "catalog/list": "catalog",
    "feedback": "feedback", "memory/build": "memory", "memory/recall": "memory",
}
