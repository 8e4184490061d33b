"""A :class:`Snapshot`: one served index version and what it holds, each part loaded on
first use and cached per version by the catalog it reads through (:class:`VersionReads`,
which :class:`~.catalog.Catalog` is)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from .plugins import CommunityStore, GraphView
from .store.memindex import UnitIndex

Kinds = list[tuple[str, int]]


class VersionReads(Protocol):
    """What a snapshot reads of its catalog, at a version (see :class:`~.catalog.Catalog`)."""

    def filter_fields(self) -> dict[str, str]: ...

    def index(self, kinds: Kinds, version: int) -> UnitIndex: ...

    def derived_lag(self, kinds: Kinds, served: int) -> str | None: ...

    def graph_view(self, version: int) -> GraphView | None: ...

    def communities(self, version: int) -> CommunityStore | None: ...

    def passing_rowids(self, filter_: Mapping[str, Any], kinds: Kinds, version: int,
                       fields: Mapping[str, str] | None = None) -> np.ndarray: ...

    def chunk_scope(self, filter_: Mapping[str, Any] | None, version: int,
                    fields: Mapping[str, str] | None = None) -> frozenset[str] | None: ...


@dataclass(frozen=True)
class Snapshot:
    """One served index version and what it holds; everything is loaded on first use and
    cached by the catalog per version."""

    version: int
    catalog: VersionReads = field(repr=False)

    @property
    def token(self) -> str:
        """The opaque ``indexVersion`` of this snapshot."""
        return f"v{self.version}"

    @cached_property
    def fields(self) -> dict[str, str]:
        """Every filterable field and its type (built-ins, declared and inferred fields)."""
        return self.catalog.filter_fields()

    def index(self, kinds: Kinds) -> UnitIndex:
        """The scoring index of a pool of (unit, level) kinds at this version."""
        return self.catalog.index(kinds, self.version)

    def lag(self, kinds: Kinds) -> str | None:
        """A usage note when a derived kind in ``kinds`` lags this version's documents."""
        return self.catalog.derived_lag(kinds, self.version)

    def graph_view(self) -> GraphView | None:
        """The PageRank view of this version's graph (None: it holds none)."""
        return self.catalog.graph_view(self.version)

    def communities(self) -> CommunityStore | None:
        """This version's communities (None: it holds none)."""
        return self.catalog.communities(self.version)

    def passing_rowids(self, filter_: Mapping[str, Any], kinds: Kinds) -> np.ndarray:
        """Rowids of the units of ``kinds`` here that pass ``filter_`` (see
        :meth:`Catalog.passing_rowids`)."""
        return self.catalog.passing_rowids(filter_, kinds, self.version, self.fields)

    def chunk_scope(self, filter_: Mapping[str, Any] | None) -> frozenset[str] | None:
        """The chunk keys here that pass ``filter_`` (see :meth:`Catalog.chunk_scope`)."""
        return self.catalog.chunk_scope(filter_, self.version, self.fields)
