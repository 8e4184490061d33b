"""Federation (RCP §16): one retrieve, graph op or memory call over every engine of an
``rcp.json`` registry.

:class:`Federation` fans a query out concurrently under a deadline (``fanout``), fuses the
answers by rank (``fusion``), and federates ``graph`` and ``memory/*`` over the engines that
advertise them (``graphcalls``, merged by ``graphs``).
"""

from .graphcalls import Federation

__all__ = ["Federation"]
