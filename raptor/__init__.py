"""RAPTOR tree index builder, installed as ``rcp_agentic.raptor``.

Recursive clustering and summarisation of chunks into tree nodes with levels (Sarthi et
al., ICLR 2024; see DESIGN.md, "Flows"). Pure algorithm, no storage:

- :mod:`.cluster` — reduction (UMAP if installed, else PCA) and soft Gaussian-mixture
  clustering chosen by BIC, global then local;
- :mod:`.summarize` — the offline extractive summariser and the LLM (abstractive) one;
- :mod:`.tree` — :func:`build_tree` and :func:`update_tree` (incremental) over :class:`Leaf`
  inputs, returning :class:`Node` objects with stable ids (level + covered leaves);
- :mod:`.index` — the engine's builder of ``tree-node`` units; :mod:`.outline` — the tree
  at a glance; :mod:`.plugin` — what the core asks of the tree.

The core loads the tree (through :mod:`rcp_agentic.plugins`) only when ``build_tree`` is on.
"""

from ..text import Sentence, Span, split_sentences
from .cluster import cluster, reduce, soft_gmm
from .summarize import ExtractiveSummarizer, LLMSummarizer, Passage, Summary
from .tree import (Leaf, Node, Summarizer, TreeConfig, TreeDelta, TreeShape, build_tree,
                   node_id, update_tree)

__all__ = [
    "ExtractiveSummarizer", "LLMSummarizer", "Leaf", "Node", "Passage", "Sentence", "Span",
    "Summarizer", "Summary", "TreeConfig", "TreeDelta", "TreeShape", "build_tree", "cluster",
    "node_id", "reduce", "soft_gmm", "split_sentences", "update_tree",
]
