"""The settings of the community hierarchy: :class:`CommunityConfig`, read by the builder
(:mod:`.build`), its splits (:mod:`.split`) and its edges
(:mod:`.entity_graph`); the edge weights are explained in ``docs/internals.md``, "The entity
graph"."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import InvalidParams

__all__ = ["ALGORITHM", "CommunityConfig"]

ALGORITHM = "communities/2"           # issue 22 part 4a: igraph Leiden, guard, breadth-first


@dataclass(frozen=True)
class CommunityConfig:
    """Settings of the community hierarchy (its ``identity`` is part of the hierarchy's)."""

    max_community_size: int = 10      # GraphRAG's default cap of a leaf community
    resolution: float = 1.0           # Leiden modularity resolution (1.0 = modularity)
    seed: int = 42
    iterations: int = 2               # Leiden passes (-1: until stable; measured 6x slower
                                      # for +0.005 top-level modularity on SciFact)
    relation: float = 1.0             # edge weights (docs/internals.md, "The entity graph")
    synonym: float = 1.0
    about: float = 1.0
    comention: float = 1.0
    date: float = 0.1                 # scale of edges touching dates and numbers
    drift_tolerance: float = 0.25     # relative edge-weight change an update ignores

    def __post_init__(self) -> None:
        if self.max_community_size < 1:
            raise InvalidParams("max_community_size must be >= 1", field="max_community_size")
        if not self.resolution > 0:
            raise InvalidParams("resolution must be > 0", field="resolution")
        for name in ("relation", "synonym", "about", "comention", "date", "drift_tolerance"):
            if not getattr(self, name) >= 0:
                raise InvalidParams(f"{name} must be >= 0", field=name)

    @property
    def identity(self) -> str:
        return (f"{ALGORITHM};max={self.max_community_size};res={self.resolution};"
                f"seed={self.seed};it={self.iterations};rel={self.relation};"
                f"syn={self.synonym};about={self.about};co={self.comention};date={self.date}")
