"""Rich displays of results, graphs, trees and the engine for Jupyter (HTML and SVG).

Nothing here needs to be called: in a notebook a ``RetrieveResult``, ``Hit`` or
``GraphResult``, a corrective loop's result, the RAPTOR outline, the community store and
the ``Engine`` itself show as HTML through their ``_repr_html_``. Graphs draw as inline
SVG with no JavaScript, so the pictures also show on GitHub and in exported HTML. Every
text shown is escaped.

``to_dataframe(hits)`` turns any list of hits into a pandas DataFrame (the ``notebook``
extra); ``RetrieveResult.to_dataframe()`` does the same for a result.

The results sit below this package and never import it: importing it registers its
functions in :mod:`rcp_agentic.display_hooks`, where their ``_repr_html_`` finds them
(``rcp_agentic`` imports this package, so that is done before any result exists).
"""

from __future__ import annotations

from .. import display_hooks
from .cards import communities_html, engine_card, tree_html
from .frames import to_dataframe
from .graphs import graph_result_html
from .hits import hit_html, result_html
from .loop import loop_html

for _hook in (hit_html, result_html, graph_result_html, loop_html, to_dataframe, engine_card,
              tree_html, communities_html):
    display_hooks.register(_hook)

__all__ = ["to_dataframe"]
