"""LLM replies kept with the engine, keyed by content hash, so a build never asks the same
thing twice: a rebuild, an incremental update that touches nothing, or a build resumed
after a crash reads the replies it already paid for.

The key is a SHA-256 over the cache format, the model's identity (class, model name,
generation settings), the stage, the prompt template's system turn and the user turn; a
change of any of them is a miss. Each reply is committed as it arrives (not with the
build's commit), which is what lets a build killed half-way resume without repeating a
call. Entries are small (a reply and its token counts) and never expire on their own:
``clear`` drops them (``rcp-agentic llm-cache clear``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from .connection import Connection

CACHE_FORMAT = "llm-cache/1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_cache (
    key TEXT PRIMARY KEY,
    stage TEXT NOT NULL,
    model TEXT NOT NULL,
    reply TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    at REAL NOT NULL
) WITHOUT ROWID;
"""


def cache_key(model: str, stage: str, system: str, user: str) -> str:
    """The content hash one call is cached under."""
    blob = json.dumps([CACHE_FORMAT, model, stage, system, user], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedReply:
    """A reply as it was received, with what it cost then."""

    reply: str
    prompt_tokens: int
    completion_tokens: int


class LLMCache:
    """The ``llm_cache`` table beside the docstore's."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        with connection.transaction() as db:
            db.execute(_SCHEMA)

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedReply]:
        """The cached replies among ``keys``."""
        wanted = list(dict.fromkeys(keys))
        out: dict[str, CachedReply] = {}
        for i in range(0, len(wanted), 900):
            part = wanted[i:i + 900]
            for key, reply, p, c in self.connection.query(
                    "SELECT key, reply, prompt_tokens, completion_tokens FROM llm_cache WHERE "
                    f"key IN ({','.join('?' * len(part))})", part):
                out[key] = CachedReply(reply, int(p), int(c))
        return out

    def put(self, key: str, *, stage: str, model: str, reply: CachedReply) -> None:
        """Keep one reply (committed at once)."""
        with self.connection.transaction() as db:
            db.execute("INSERT OR REPLACE INTO llm_cache(key, stage, model, reply, prompt_tokens,"
                       " completion_tokens, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (key, stage, model, reply.reply, reply.prompt_tokens,
                        reply.completion_tokens, time.time()))

    def stats(self) -> dict[str, int]:
        """Entries by stage."""
        return {stage: int(n) for stage, n in self.connection.query(
            "SELECT stage, COUNT(*) FROM llm_cache GROUP BY stage ORDER BY stage")}

    def clear(self) -> int:
        """Drop every entry; how many there were."""
        with self.connection.transaction() as db:
            return db.execute("DELETE FROM llm_cache").rowcount
