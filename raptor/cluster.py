"""RAPTOR clustering: dimension reduction, then a soft Gaussian mixture chosen by BIC, global then local.

Follows Sarthi et al. (ICLR 2024): embeddings are reduced (UMAP with cosine metric
when ``umap-learn`` is installed, otherwise PCA), a Gaussian mixture is fitted
with the number of components that minimises BIC, and a point joins every
component whose posterior exceeds a threshold. A global pass (UMAP
``n_neighbors ≈ sqrt(n)``) is followed by a local pass inside each global cluster
(``n_neighbors = 10``). Everything is deterministic for a seed.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.decomposition import PCA
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

LOCAL_NEIGHBORS = 10
SELECTION_SAMPLE = 2000  # points on which the number of components is chosen
PATIENCE = 3  # coarse grid points past the best before the search stops
REG_COVAR = 1e-5  # slightly above sklearn's 1e-6: duplicate points must not make a fit fail

try:  # optional: the paper's reducer
    import umap as _umap
except ImportError:  # pragma: no cover - depends on the environment
    _umap = None


def reduce(vectors: np.ndarray, dim: int, *, n_neighbors: int, seed: int) -> np.ndarray:
    """``vectors`` reduced to at most ``dim`` columns.

    UMAP (cosine metric) when ``umap`` is importable and the input is large enough
    for it (``n > dim + 1`` and ``n_neighbors < n``); otherwise PCA to
    ``min(dim, n - 1)`` components. Two points or fewer are returned unchanged.
    """
    x = np.asarray(vectors, dtype=np.float64)
    n = x.shape[0]
    if n <= 2 or x.shape[1] <= dim:
        return x
    if _umap is not None and n > dim + 1 and n_neighbors < n:
        reducer = _umap.UMAP(n_neighbors=max(2, n_neighbors), n_components=dim,
                             metric="cosine", random_state=seed)
        return np.asarray(reducer.fit_transform(x), dtype=np.float64)
    k = min(dim, n - 1)
    # Both exact and deterministic: with more rows than columns, the eigenvectors of the
    # small covariance matrix are far cheaper than an SVD of the data.
    solver = "covariance_eigh" if n >= x.shape[1] else "full"
    pca = PCA(n_components=k, svd_solver=solver, random_state=seed)
    return np.asarray(pca.fit_transform(x), dtype=np.float64)


def _grid(k_max: int) -> list[int]:
    """Coarse candidate component counts: every value up to 6, then ~25 % steps."""
    grid, k = [], 1
    while k <= k_max:
        grid.append(k)
        k = k + 1 if k < 6 else max(k + 1, int(round(k * 1.25)))
    if grid[-1] != k_max:
        grid.append(k_max)
    return grid


def _fit(points: np.ndarray, k: int, seed: int, **init: np.ndarray) -> GaussianMixture | None:
    gm = GaussianMixture(n_components=k, random_state=seed, reg_covar=REG_COVAR, **init)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        try:
            gm.fit(points)
        except (ValueError, np.linalg.LinAlgError):  # ill-defined covariance: skip this k
            return None
    return gm


def _select(points: np.ndarray, k_max: int, seed: int) -> GaussianMixture:
    """The mixture with the lowest BIC, searched coarse then fine around the coarse best."""
    fitted: dict[int, GaussianMixture | None] = {}
    bic: dict[int, float] = {}

    def score(k: int) -> float:
        if k not in fitted:
            gm = _fit(points, k, seed)
            fitted[k] = gm
            bic[k] = gm.bic(points) if gm is not None else math.inf
        return bic[k]

    coarse = _grid(k_max)
    best, worse = coarse[0], 0
    for k in coarse:  # BIC rises past its minimum: stop after PATIENCE worse grid points
        if score(k) < score(best):
            best, worse = k, 0
        else:
            worse += 1
            if worse > PATIENCE:
                break
    i = coarse.index(best)
    lo = coarse[i - 1] if i > 0 else best
    hi = coarse[i + 1] if i + 1 < len(coarse) else best
    best = min(range(lo, hi + 1), key=lambda k: (score(k), k))
    model = fitted[best]
    if model is None:  # every fit failed: one component always fits with the regulariser
        model = _fit(points, 1, seed)
        assert model is not None
    return model


def soft_gmm(points: np.ndarray, *, max_clusters: int, threshold: float, seed: int
             ) -> list[list[int]]:
    """Soft clusters of ``points``: index lists, sorted, one per non-empty mixture component.

    The number of components minimises BIC over ``1..min(max_clusters, n - 1)``,
    further bounded so each component has on average more points than dimensions
    (otherwise degenerate covariances reward singletons). Above
    :data:`SELECTION_SAMPLE` points the number is chosen on a seeded subsample and
    the chosen mixture is then refitted on all points, starting from the
    subsample's fit. A point joins every component with posterior > ``threshold``
    and always its most likely one.
    """
    x = np.asarray(points, dtype=np.float64)
    n = x.shape[0]
    if n < 2:
        return [list(range(n))] if n else []
    # Mixtures run many tiny matrix operations: thread pools (BLAS, OpenMP) only add contention.
    with threadpool_limits(limits=1):
        return _soft_gmm(x, max_clusters=max_clusters, threshold=threshold, seed=seed)


def _soft_gmm(x: np.ndarray, *, max_clusters: int, threshold: float, seed: int
              ) -> list[list[int]]:
    n = x.shape[0]
    k_max = max(1, min(max_clusters, n - 1, n // (x.shape[1] + 1)))
    if n > SELECTION_SAMPLE:
        rng = np.random.default_rng(seed)
        sample = np.sort(rng.choice(n, SELECTION_SAMPLE, replace=False))
        chosen = _select(x[sample], k_max, seed)
        model = _fit(x, chosen.n_components, seed, weights_init=chosen.weights_,
                     means_init=chosen.means_, precisions_init=chosen.precisions_) or chosen
    else:
        model = _select(x, k_max, seed)
    proba = model.predict_proba(x)
    member = proba > threshold
    member[np.arange(n), proba.argmax(axis=1)] = True
    clusters = [np.flatnonzero(member[:, k]).tolist() for k in range(member.shape[1])]
    return sorted((c for c in clusters if c), key=lambda c: (c[0], len(c)))


def _reduced_dim(n: int, reduce_dim: int) -> int:
    """Fewer dimensions for few points, so a mixture over them stays well-posed."""
    return max(2, min(reduce_dim, int(math.sqrt(n))))


def cluster(vectors: np.ndarray, *, seed: int, threshold: float = 0.1, max_clusters: int = 50,
            reduce_dim: int = 10) -> list[list[int]]:
    """RAPTOR's two-stage soft clustering of embedding rows; index lists, sorted and distinct.

    A global clustering of everything (reduced with ``n_neighbors ≈ sqrt(n)``),
    then a local clustering inside each global cluster (``n_neighbors = 10``). A
    global cluster too small to reduce again stays whole. Fewer than 3 points form
    one cluster.
    """
    x = np.asarray(vectors, dtype=np.float64)
    n = x.shape[0]
    if n < 3:
        return [list(range(n))] if n else []
    out: set[tuple[int, ...]] = set()
    # Many small matrix problems: on a busy machine, thread pools make each far slower.
    with threadpool_limits(limits=1):
        dim = _reduced_dim(n, reduce_dim)
        reduced = reduce(x, dim, n_neighbors=max(2, int(math.sqrt(n - 1))), seed=seed)
        for members in soft_gmm(reduced, max_clusters=max_clusters, threshold=threshold,
                                seed=seed):
            out.update(_local(x[members], members, reduce_dim=reduce_dim,
                              max_clusters=max_clusters, threshold=threshold, seed=seed))
    return [list(c) for c in sorted(out, key=lambda c: (c[0], len(c), c))]


def _local(x: np.ndarray, members: list[int], *, reduce_dim: int, max_clusters: int,
           threshold: float, seed: int) -> list[tuple[int, ...]]:
    """The local clusters inside one global cluster ``members`` (rows ``x``)."""
    m = len(members)
    local_dim = _reduced_dim(m, reduce_dim)
    if m <= local_dim + 1:
        return [tuple(members)]
    sub = reduce(x, local_dim, n_neighbors=min(LOCAL_NEIGHBORS, m - 1), seed=seed)
    return [tuple(members[i] for i in local)
            for local in soft_gmm(sub, max_clusters=max_clusters, threshold=threshold, seed=seed)]
