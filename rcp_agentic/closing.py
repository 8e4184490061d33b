"""Context-manager plumbing shared by everything that owns clients: ``with`` and ``async with``."""

from __future__ import annotations

from typing import Any


class Closable:
    """``with obj:`` calls ``close()``; ``async with obj:`` awaits ``aclose()``."""

    def close(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
