"""The trust of a text a graph or memory op composes (RCP §7.7.2, §15.2).

A node name, a clue's surrogate query, a drift follow-up or a global summary is derived
from chunks. Such a text may claim no more trust than the least trusted of those chunks'
documents, and it is suspected of injection when any of those chunks was, or when the
text itself screens as an instruction (a name can be the quoted instruction itself) or carries
active markup: :func:`~rcp_agentic.trust.derived.derived_trust`, the rule every derived
text follows. :class:`SourceTrust` answers it for one request, reading each chunk's trust once.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..store.reads import Reader, RowsOnce
from ..trust import InjectionScreen, derived_trust
from ..wire import Trust


def chunk_rowids(keys: Iterable[str]) -> list[int]:
    """Rowids of graph chunk keys (``r<rowid>``)."""
    return [int(k[1:]) for k in keys if k[:1] == "r" and k[1:].isdigit()]


class SourceTrust:
    """Trust of composed texts by the chunks they come from, for one request (cached)."""

    def __init__(self, store: Reader, screen: InjectionScreen) -> None:
        self.store = store
        self.screen = screen
        self._trust = RowsOnce(store.unit_trust)

    def prefetch(self, keys: Iterable[str]) -> None:
        """Read the trust of these chunk keys in one go (before many :meth:`of` calls)."""
        self._trust.fetch(chunk_rowids(keys))

    def of(self, keys: Iterable[str], *texts: str) -> Trust:
        """The trust a text composed from the chunks ``keys`` (and reading ``texts``) carries."""
        keys = list(keys)
        self.prefetch(keys)
        got = self._trust.rows
        rows = [got[r] for r in chunk_rowids(keys) if r in got]
        return derived_trust((Trust(level=t, injection_suspected=s) for t, s in rows), texts,
                             self.screen)

    @staticmethod
    def combine(parts: Iterable[Trust | None]) -> Trust | None:
        """One trust for a text built from several parts (None when no part has one)."""
        got = [p for p in parts if p is not None]
        if not got:
            return None
        return derived_trust(got, (), InjectionScreen())
