"""The last failure of each derived builder still failing: the background worker records it,
the catalog reports it (``derived_status``, lag notes)."""

from __future__ import annotations

import threading


class BuildFailures:
    """The last failure of each derived builder still failing, by the kinds it writes: the
    background worker records them, the catalog reports them (``derived_status``, lag notes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_unit: dict[str, tuple[tuple[str, ...], BaseException]] = {}

    def record(self, unit: str, kinds: tuple[str, ...], exc: BaseException) -> None:
        with self._lock:
            self._by_unit[unit] = (kinds, exc)

    def clear(self, unit: str) -> None:
        with self._lock:
            self._by_unit.pop(unit, None)

    def of_builder(self, unit: str) -> BaseException | None:
        """The last failure of the builder of ``unit`` (None: it has none)."""
        with self._lock:
            got = self._by_unit.get(unit)
        return None if got is None else got[1]

    def of_kind(self, kind: str) -> str:
        """The last failure of the builder that writes ``kind``, as text ("" when none)."""
        with self._lock:
            found = [exc for kinds, exc in self._by_unit.values() if kind in kinds]
        return (str(found[0]) or type(found[0]).__name__) if found else ""
