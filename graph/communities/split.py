"""One split of the community hierarchy: a connected node set into at least two parts.

:func:`split` is what :mod:`.build` calls for every node set larger than the cap. It
runs igraph's C Leiden (``Graph.community_leiden``, modularity, seeded) on the set's
igraph subgraph (cut in C from its parent's); when Leiden keeps a small set whole (a star,
a clique), leidenalg with ``max_comm_size`` (igraph's Leiden has no size constraint) and
then a breadth-first cut enforce the cap. The **shrink guard**: a set larger than
:data:`GUARD` x the cap is never split into a part larger than half of it; such a part is
re-split at a higher resolution and, failing that, peeled: its breadth-first order cut into
halves. Every set at depth ``d`` above ``GUARD x cap`` thus holds at most ``n / 2**d``
entities, so the tree's depth, and the work per entity, is logarithmic.

Leiden runs with a fresh ``random.Random(seed)`` as igraph's generator for each call (under
a lock: igraph's generator is global), so a part depends only on its subgraph.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .config import CommunityConfig

__all__ = ["GUARD", "CommunityStats", "bfs_order", "chunks", "groups", "split"]

GUARD = 8                         # sets above GUARD x cap never keep a part above half
RESOLUTION_STEPS = (4.0, 16.0)    # the guard's re-split resolutions (x the config's)
CAP_ENFORCEMENT = 1000.0          # strict: at 1 leidenalg still returned 13 nodes for a cap of 5
_RNG = threading.Lock()


@dataclass
class CommunityStats:
    """What one build or update of the hierarchy did (the scale bench and tests read it)."""

    leiden_calls: int = 0
    leiden_nodes: int = 0         # vertices of every graph Leiden ran on, summed
    guarded: int = 0              # giant parts the shrink guard re-split
    peeled: int = 0               # ... of which peeled (breadth-first halves)
    depths: int = 0               # breadth-first depths of the tree built and kept
    complete: bool = True         # False: the time budget stopped it (leaves may be large)
    reason: str = ""


def groups(labels: Sequence[int] | np.ndarray) -> list[np.ndarray]:
    """Vertex indices by label, largest group first (ties by first vertex)."""
    labels = np.asarray(labels)
    order = np.argsort(labels, kind="stable")
    cuts = np.flatnonzero(np.diff(labels[order])) + 1
    out = np.split(order, cuts) if len(order) else []
    return sorted(out, key=lambda v: (-len(v), int(v[0])))


def leiden(g: Any, config: CommunityConfig, stats: CommunityStats, *,
           resolution: float | None = None, initial: list[int] | None = None) -> list[int]:
    """igraph's Leiden (modularity, ``config.iterations`` passes, seeded per call)."""
    import igraph as ig

    stats.leiden_calls += 1
    stats.leiden_nodes += g.vcount()
    with _RNG:
        ig.set_random_number_generator(random.Random(config.seed))
        try:
            part = g.community_leiden(
                objective_function="modularity", weights="weight",
                # igraph's default node weights leave self-loops out (an update's units
                # carry their internal weight as one): the strength counts a loop twice.
                node_weights=g.strength(weights="weight"),
                resolution=config.resolution if resolution is None else resolution,
                n_iterations=config.iterations, initial_membership=initial)
        finally:
            ig.set_random_number_generator(random)
    return list(part.membership)


def leiden_capped(g: Any, config: CommunityConfig, stats: CommunityStats,
                  max_size: int) -> list[int]:
    """leidenalg's Leiden (RB configuration) with every community at most ``max_size``."""
    import leidenalg

    stats.leiden_calls += 1
    stats.leiden_nodes += g.vcount()
    part = leidenalg.RBConfigurationVertexPartition(
        g, weights="weight", resolution_parameter=config.resolution)
    opt = leidenalg.Optimiser()
    opt.max_comm_size = max_size      # leidenalg >= 0.12 enforces it only with an enforcement
    opt.community_constraint_enforcement = CAP_ENFORCEMENT
    opt.set_rng_seed(config.seed)
    opt.optimise_partition(part, config.iterations)
    return list(part.membership)


def bfs_order(g: Any) -> list[int]:
    """Every vertex, breadth-first from the strongest (ties by index), each vertex's
    unseen neighbours strongest edge first (ties by index); components in that order."""
    strength = g.strength(weights="weight")
    adj = g.get_inclist()
    ends = g.get_edgelist()
    weight = g.es["weight"]
    seen = [False] * g.vcount()
    order: list[int] = []
    for root in sorted(range(g.vcount()), key=lambda v: (-strength[v], v)):
        if seen[root]:
            continue
        seen[root] = True
        queue = [root]
        while queue:
            order.extend(queue)
            nxt: list[int] = []
            for a in queue:
                near = sorted(((-weight[e], b) for e in adj[a]
                               for b in [ends[e][0] ^ ends[e][1] ^ a] if not seen[b]))
                for _w, b in near:
                    if not seen[b]:
                        seen[b] = True
                        nxt.append(b)
            queue = nxt
    return order


def chunks(g: Any, size: int) -> list[np.ndarray]:
    """Last resort: :func:`bfs_order` cut into pieces of ``size`` (each sorted)."""
    order = bfs_order(g)
    return [np.sort(np.asarray(order[i:i + size], dtype=np.int64))
            for i in range(0, len(order), size)]


def split(g: Any, config: CommunityConfig, stats: CommunityStats,
          guided: Callable[[], list[np.ndarray]] | None = None) -> list[np.ndarray]:
    """At least two parts (vertex index arrays, each sorted) of the connected graph ``g``,
    larger than the cap (module doc). ``guided``: an update's split on old units, tried
    first."""
    n = g.vcount()
    cap = config.max_community_size
    parts = guided() if guided is not None else []
    if len(parts) < 2:
        parts = groups(leiden(g, config, stats))
    if len(parts) < 2 and n <= GUARD * cap:
        parts = groups(leiden_capped(g, config, stats, cap))
    if n > GUARD * cap and len(parts[0]) > n // 2:
        parts = parts[1:] + _shrink(g, parts[0], n // 2, config, stats)
    if len(parts) < 2:
        parts = chunks(g, cap)
    return sorted(parts, key=lambda v: (-len(v), int(v[0])))


def _shrink(g: Any, part: np.ndarray, limit: int, config: CommunityConfig,
            stats: CommunityStats) -> list[np.ndarray]:
    """``part`` (of ``g``) in pieces of at most ``limit``: Leiden on its subgraph at higher
    resolutions, else its breadth-first order cut into equal pieces."""
    stats.guarded += 1
    sub = g.induced_subgraph(part.tolist())
    for step in RESOLUTION_STEPS:
        got = groups(leiden(sub, config, stats, resolution=config.resolution * step))
        if len(got) > 1 and len(got[0]) <= limit:
            return [part[p] for p in got]
    stats.peeled += 1
    order = np.asarray(bfs_order(sub), dtype=np.int64)
    pieces = -(-len(order) // limit)
    return [np.sort(part[p]) for p in np.array_split(order, pieces)]
