"""Federation (RCP §16): one retrieve, graph op or memory call over every engine of an
``rcp.json`` registry.

:class:`Federation` (``fanout``) fans a call out concurrently under a deadline. Its I/O-free
core plans and merges each call (``core``, ``retrieval``, ``graphcalls``; fused by rank in
``fusion``, graph answers merged by ``graphs``); the sync and asyncio shells (``shells``)
only perform the calls.
"""

from .fanout import Federation

__all__ = ["Federation"]
