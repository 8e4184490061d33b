"""A pool's unit arrays at a newer version from an older version's plus the rows between.

Reading a pool's arrays whole (``Reader.unit_arrays``: every row's postings and vector)
costs ~35 ms at 2.3k chunks and grows with the corpus; the first retrieve after each write
paid it. :func:`merged_arrays` drops the rows that left and inserts the rows that entered
(``Reader.unit_delta``) in unit id order, so the result equals ``unit_arrays`` at the newer
version row for row; the index built from it (BM25 statistics included) is then the same.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import numpy as np

from .reads import UnitArrays


def merged_arrays(old: UnitArrays, gone: Sequence[int], new: UnitArrays) -> UnitArrays:
    """``old`` less the rows whose rowid is in ``gone``, plus the rows of ``new`` (both in
    unit id order, no uid in both), in unit id order."""
    keep = np.flatnonzero(~np.isin(old.rowids, np.asarray(gone, dtype=np.int64)))
    kept_uids = [old.uids[i] for i in keep]
    # Where each new row lands: its rank among the kept uids plus the new rows before it.
    at = np.fromiter((bisect_left(kept_uids, u) for u in new.uids), dtype=np.int64,
                     count=len(new.uids)) + np.arange(len(new.uids))
    size = len(keep) + len(new.uids)
    landed = np.zeros(size, dtype=bool)
    landed[at] = True
    src = np.empty(size, dtype=np.int64)  # into old's rows, then new's
    src[~landed] = keep
    src[landed] = len(old.rowids) + np.arange(len(new.uids))

    def rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.concatenate([a, b])[src]

    def listed(a: list[str], b: list[str]) -> list[str]:
        both = [*a, *b]
        return [both[i] for i in src]

    starts = np.concatenate([old.offsets[:-1], new.offsets[:-1] + old.offsets[-1]])[src]
    lengths = np.concatenate([np.diff(old.offsets), np.diff(new.offsets)])[src]
    offsets = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    take = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
    vectors = None
    if old.vectors is not None and new.vectors is not None:
        vectors = (rows(old.vectors, new.vectors) if len(new.rowids)
                   else old.vectors[keep])
    return UnitArrays(
        rowids=rows(old.rowids, new.rowids), vectors=vectors,
        term_ids=np.concatenate([old.term_ids, new.term_ids])[take],
        term_tfs=np.concatenate([old.term_tfs, new.term_tfs])[take],
        offsets=offsets, lengths=rows(old.lengths, new.lengths),
        uids=listed(old.uids, new.uids), doc_ids=listed(old.doc_ids, new.doc_ids),
        page_start=rows(old.page_start, new.page_start),
        page_end=rows(old.page_end, new.page_end), tokens=rows(old.tokens, new.tokens),
        units=listed(old.units, new.units), levels=rows(old.levels, new.levels))
