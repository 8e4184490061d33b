"""Federation (RCP §16): one retrieve over every engine of an ``rcp.json`` registry.

:class:`Federation` fans a query out concurrently under a deadline (``fanout``) and
fuses the answers by rank (``fusion``).
"""

from .fanout import Federation

__all__ = ["Federation"]
