"""Reading the stored communities for the community ops (:mod:`.ops`, :mod:`.drift`): the
store of a version, a level checked against its levels, the level's communities ranked for a
query by retrieve, the communities a filter passes, their trust, and the derived-lag note. One
reader serves ``communities``, ``global`` and ``drift`` alike; their params come checked
(:class:`~rcp_agentic.pipeline.method_params.GraphParams`).

The default level of ``global``/``drift`` (:func:`default_level`) is the level whose
partition is closest, on a log scale, to ``GLOBAL_TARGET`` communities (ties: the coarser).
GraphRAG defaults to its level 2 of a top-down numbering, a middle level; a fixed number
means different things on different corpora, a target size does not: ranking needs enough
communities to tell topics apart, and a report must stay specific enough to be worth its
tokens (the finest communities are a handful of entities each).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...control import RequestControl
from ...errors import InvalidParams, OptionUnsupported
from ...pipeline.method_params import MAX_COMMUNITIES
from ...pipeline.params import query_text
from ...wire import Hit, Trust

if TYPE_CHECKING:
    from ..context import GraphContext
    from .index import CommunityStore, StoredCommunity

MAX_PAGE = MAX_COMMUNITIES  # communities per page / ranked communities of ``global``
GLOBAL_TARGET = 50  # communities in the partition global/drift default to


# --- levels ---------------------------------------------------------------------------------

def existing_level(level: int | None, store: CommunityStore) -> int | None:
    """``level`` (None when absent) if ``store`` holds it; InvalidParams naming the levels."""
    if level is not None and not 0 <= level <= store.top_level:
        shown = level if -10**6 < level < 10**6 else "given"
        raise InvalidParams(f"level {shown} does not exist: the community levels are "
                            f"0..{store.top_level}", field="level")
    return level


def default_level(store: CommunityStore) -> int:
    """The level whose partition size is closest to ``GLOBAL_TARGET`` (log scale; ties: the
    coarser level)."""
    def distance(level: int) -> tuple[float, int]:
        n = max(1, len(store.level(level)))
        return abs(math.log(n / GLOBAL_TARGET)), -level
    return min(range(store.top_level + 1), key=distance)


def filter_key(filter_: Mapping[str, Any] | None) -> str:
    """A filter as a canonical string ("" for none): what a cursor or a drift frontier was
    made under, so neither is replayed under another filter."""
    return json.dumps(filter_, sort_keys=True, default=str) if filter_ else ""


def community_kinds(store: CommunityStore) -> list[tuple[str, int]]:
    """The (unit, level) pairs community rows are stored under (each at its lowest level)."""
    return [("community", lv) for lv in range(store.top_level + 1)]


def version_of(token: str | None) -> int | None:
    """The version of an ``indexVersion`` token ``v<N>`` (None for another form)."""
    if token and token.startswith("v") and token[1:].isdigit():
        return int(token[1:])
    return None


class CommunityReader:
    """The stored communities of one engine's served versions, as the community ops read
    them (see the module doc)."""

    def __init__(self, ctx: GraphContext) -> None:
        self.ctx = ctx

    def store(self, version: int | None = None) -> CommunityStore | None:
        """The community store of ``version`` (default: the served one), or None."""
        return self.ctx.catalog.communities(version)

    def offered(self) -> bool:
        """Whether the served version holds community units."""
        store = self.store()
        return store is not None and bool(store.by_id)

    def require(self, op: str, version: int | None = None) -> CommunityStore:
        """The community store of ``version`` (default: the served one); OptionUnsupported
        naming ``op`` when there is none."""
        store = self.store(version)
        if store is None or not store.by_id:
            raise OptionUnsupported(f"graph op {op!r} needs Leiden communities, which this "
                                    "engine has not built (open it with build_graph=True and "
                                    "graph_communities=True)", option="op")
        return store

    def searched(self, query: Any, op: str, level: int | None) -> tuple[str, CommunityStore, int]:
        """What a search op (``global``, ``drift``) runs on: the query's text, the served
        community store and the level (:func:`default_level` when ``level`` is absent)."""
        text = self.query(query, op)
        store = self.require(op)
        lvl = existing_level(level, store)
        return text, store, default_level(store) if lvl is None else lvl

    def lag(self, version: int | None, kinds: Sequence[str]) -> list[str]:
        """The note retrieve gives (``Catalog.derived_lag``) when a derived kind an op read
        at ``version`` lags the documents: the same words in every community op."""
        if version is None:
            return []
        note = self.ctx.catalog.derived_lag([(kind, 0) for kind in kinds], version)
        return [note] if note else []

    def query(self, query: Any, op: str) -> str:
        """The query text of ``op`` (InvalidParams when absent or too long)."""
        if query is None:
            raise InvalidParams(f"op {op!r} needs a query", field="query")
        return query_text(query, max_chars=self.ctx.config.max_query_chars)

    def ranked(self, text: str, level: int, k: int, filter_: Mapping[str, Any] | None,
                control: RequestControl, skip: Sequence[str] = ()
                ) -> tuple[list[tuple[Hit, StoredCommunity]], CommunityStore, str | None]:
        """The level's communities ranked for ``text`` by retrieve (``skip``: ids left out),
        with the store of the version retrieve served."""
        raw: dict[str, Any] = {"query": text, "unit": "community", "level": level,
                               "k": min(self.ctx.config.max_k, k + len(skip))}
        if filter_ is not None:
            raw["filter"] = dict(filter_)
        res = self.ctx.retriever.retrieve_params(raw, control)
        version = version_of(res.index_version)
        store = self.require("global", version)
        out = []
        for hit in res.hits:
            c = store.by_id.get(hit.id)
            if c is not None and hit.id not in skip:
                out.append((hit, c))
        return out[:k], store, res.index_version

    def _rowids(self, store: CommunityStore) -> dict[str, int]:
        """Community id -> its row, for the communities of ``store`` (one version)."""
        index = self.ctx.catalog.index(community_kinds(store), store.version)
        return {str(u): int(r) for u, r in zip(index.uids, index.rowids)}

    def passing(self, store: CommunityStore, filter_: Mapping[str, Any]) -> set[str]:
        """Ids of the communities of ``store`` that pass ``filter_``: every chunk a community
        covers passes (as retrieve judges a derived unit)."""
        rows = self.ctx.catalog.passing_rowids(filter_, community_kinds(store), store.version)
        by_row = {r: u for u, r in self._rowids(store).items()}
        return {by_row[int(r)] for r in rows if int(r) in by_row}

    def trust(self, store: CommunityStore, ids: Sequence[str]) -> dict[str, Trust]:
        """The trust each community's report carries, as its retrieve hit does: the lowest of
        the documents it covers, suspected when the report screened as an injection."""
        rowids = self._rowids(store)
        rows = self.ctx.store.hydrate([rowids[i] for i in ids if i in rowids])
        out: dict[str, Trust] = {}
        for row in rows.values():
            out[row["uid"]] = Trust(level=row["trust"],
                                    injection_suspected=bool(row["injection_suspected"]))
        return out
