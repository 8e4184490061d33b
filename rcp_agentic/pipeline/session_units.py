"""What a session's dedup rule (:mod:`..sessions`) sees of a unit about to be returned.

A stored unit is judged by its id, its place (document, pages) and, for a derived unit
that contains its leaves (a summary), the leaf chunks and documents it covers. A graph
unit's leaves only attest it (a node is not the chunks that mention it), so it is judged
by its id alone; so is a composed unit, which is new unless it was returned or every chunk
whose sentences it shows was returned already.
"""

from __future__ import annotations

from typing import Any

from .. import units
from ..sessions import Candidate, SessionStore
from ..store.docstore import Docstore
from ..store.memindex import UnitIndex


def stored_candidates(store: Docstore, index: UnitIndex, positions: list[int]
                      ) -> list[Candidate]:
    """The session view of the units at ``positions``; a summary brings its leaves."""
    def summary(p: int) -> bool:
        return not index.doc_ids[p] and units.get(index.units[p]).contains_leaves

    derived = [int(index.rowids[p]) for p in positions if summary(p)]
    rows = store.hydrate(derived) if derived else {}
    out = []
    for p in positions:
        ps, pe = int(index.page_start[p]), int(index.page_end[p])
        row = rows.get(int(index.rowids[p])) if summary(p) else None
        out.append(Candidate(index.uids[p], index.units[p], index.doc_ids[p],
                             ps if ps >= 0 else None, pe if pe >= 0 else None,
                             leaves=None if row is None else frozenset(row["leaves"]),
                             docs=frozenset() if row is None else frozenset(row["doc_ids"])))
    return out


def composed_candidate(c: Any) -> Candidate:
    """The session view of a composed unit (a path or subgraph): its id alone."""
    return Candidate(c.uid, c.unit, "", None, None)


def composed_is_new(sessions: SessionStore, session_id: str, c: Any) -> bool:
    """A composed unit is new in a session unless it was returned, or every chunk whose
    sentences it shows was returned already (as a chunk, in a summary or whole document)."""
    if not sessions.is_new(session_id, composed_candidate(c)):
        return False
    leaves = [Candidate(uid, "chunk", doc, None, None)
              for uid, doc in zip(c.leaf_uids, c.leaf_docs)]
    return not leaves or any(sessions.filter_new(session_id, leaves))
