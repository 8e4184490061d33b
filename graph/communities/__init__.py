"""The graph's communities: hierarchical Leiden over the entity graph, stored as ``community``
units with their reports, and the community ops over them (GraphRAG's global and DRIFT).

The core (no engine part, no request):

* :mod:`.config` — the settings; :mod:`.entity_graph` — the weighted entity-entity edges;
* :mod:`.split` — one Leiden split; :mod:`.build` — the hierarchy, built and updated;
* :mod:`.index` — the ``community`` builder and the stored hierarchy (``CommunityStore``);
  :mod:`.tracking` — what it keeps between runs; :mod:`.community_rows` — the rows it writes.

The services, over an engine's parts (``GraphContext``):

* :mod:`.reads` — the stored communities read for a request;
* :mod:`.drift` — DRIFT search; :mod:`.ops` — the ``communities``, ``global`` and ``drift`` ops.
"""
