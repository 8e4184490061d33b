"""Display hooks: how results show in a notebook, filled in by :mod:`rcp_agentic.display`.

A result (:mod:`rcp_agentic.wire`'s, the corrective loop's, the engine, the RAPTOR outline,
the community store) sits below the display package
and never imports it: its ``_repr_html_`` (or ``to_dataframe``) calls :func:`render` with the
name of the display function it needs, and the display package registers its functions
here under their names when it is imported. ``rcp_agentic/__init__.py`` imports it, so the
hooks are in place before any result exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_HOOKS: dict[str, Callable[..., Any]] = {}


def register(hook: Callable[..., Any]) -> None:
    """Make ``hook`` the display function of its name (the display package calls this)."""
    _HOOKS[hook.__name__] = hook


def render(name: str, *args: Any) -> Any:
    """What the display function ``name`` makes of ``args`` (HTML text, or a DataFrame)."""
    return _HOOKS[name](*args)


@dataclass(frozen=True)
class EngineFacts:
    """What the engine card shows, gathered by :class:`~rcp_agentic.Engine` for its card (``engine_card``)."""

    path: str
    index_version: str
    backend: str
    embedder: str
    dimension: int
    counts: Mapping[str, int]
    derived: Mapping[str, Mapping[str, Any]]
