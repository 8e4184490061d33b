"""The weights of graph recall: :class:`PPRWeights`, shared by the matrix's edges
(:mod:`.edges`) and the PageRank over them (:mod:`.ppr`; each choice is explained in
``docs/internals.md``, "Personalised PageRank")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PPRWeights:
    """Edge and reset weights of graph recall (each explained in ``docs/internals.md``,
    "Personalised PageRank")."""

    mention: float = 1.0
    about: float = 2.0
    relation: float = 1.0
    synonym: float = 1.0
    p2p: float = 1.0
    date: float = 0.1            # edge scale for dates and numbers
    damping: float = 0.5         # probability of following an edge (HippoRAG: 0.5)
    prior: float = 0.05          # share of the reset mass on the dense/sparse passage scores
    partial_link: float = 0.5    # link weight of a partial-name match
    partial_max: int = 5         # a name contained in more entities than this is too vague
    partial_cover: float = 0.5   # ... or covering less than this share of the entity's words
    embed_link: float = 0.8      # min cosine for a name-embedding link
    specificity: str = "inverse"  # inverse (1/df) | idf (log(N/df)) | none
    max_iter: int = 50
    tol: float = 1e-7
