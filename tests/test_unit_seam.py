"""The unit-kind seam: units covering many documents, checked against brute force.

A real engine with a real RAPTOR tree over a small two-tenant corpus: filters never
leak a node derived from an excluded document, a pinned version serves its own
tree, a lagging tree hides what changed and says so, sessions and packing apply
containment across kinds, and an engine directory of schema 1 is migrated.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import backend_overrides
from rcp_agentic import Engine, units
from rcp_agentic.errors import OptionUnsupported
from rcp_agentic.pipeline.packing import pack
from rcp_agentic.sessions import Candidate, SessionStore
from rcp_agentic.store.docstore import Docstore

TOPICS = {
    "bees": ["Honey bees pollinate crops and flowering plants across farms.",
             "A bee colony has one queen, thousands of workers and some drones.",
             "Beekeepers harvest honey and wax from wooden hives in summer."],
    "volcanoes": ["Volcanoes erupt molten rock called lava from the mantle.",
                  "Ash clouds from an eruption can ground aircraft for days.",
                  "Magma chambers lie kilometres beneath an active volcano."],
    "chess": ["Chess openings such as the Sicilian Defence shape the middlegame.",
              "A grandmaster calculates many moves ahead in sharp positions.",
              "Endgames with a rook and pawn are the most common in chess."],
    "bread": ["Sourdough bread rises with wild yeast and lactic bacteria.",
              "Kneading develops gluten so the dough traps gas while baking.",
              "Bakers proof loaves overnight in a cool room before the oven."],
}


def corpus(prefix: str = "") -> list[dict[str, Any]]:
    """Two tenants writing about the same four topics, one sentence pair per document."""
    docs = []
    for t, (topic, lines) in enumerate(TOPICS.items()):
        for i, line in enumerate(lines):
            for tenant in ("a", "b"):
                other = lines[(i + 1) % len(lines)]
                docs.append({"id": f"{prefix}{topic}-{i}-{tenant}",
                             "text": f"{line} {other} Notes kept by tenant {tenant}.",
                             "meta": {"tenant": tenant, "topic": topic}})
    return docs


@pytest.fixture(scope="module")
def tree_engine(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Any:
    path = tmp_path_factory.mktemp("tree") / "e"
    eng = Engine(path, embedder=embedder, build_tree=True, tree_top_size=2)
    eng.add_documents(corpus())
    eng.wait_for_derived()
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def seam_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                embedder: Any, backend: str) -> Iterator[Engine]:
    """The tree engine in each recall backend (the embedded one is ``tree_engine``): what
    recall returns over derived units must not depend on where recall runs."""
    if backend == "embedded":
        yield request.getfixturevalue("tree_engine")
        return
    path = tmp_path_factory.mktemp(f"tree-{backend}") / "e"
    with Engine(path, embedder=embedder, build_tree=True, tree_top_size=2,
                **backend_overrides(backend, path)) as eng:
        eng.add_documents(corpus())
        eng.wait_for_derived()
        yield eng


def live_tree(eng: Engine) -> list[dict[str, Any]]:
    return eng.store.live_derived("tree-node")


def leaf_docs(eng: Engine) -> dict[int, str]:
    return {r: doc for r, _u, doc, _s, _t, _x in eng.store.live_leaves("chunk")}


def test_registry_lists_every_offered_kind_once() -> None:
    assert set(units.known()) <= set(units.RCP_UNITS)
    assert units.get("passage").stored == "chunk"
    assert units.ladder(["document", "tree-node", "chunk", "page", "passage"]) == [
        "chunk", "page", "document", "tree-node"]
    assert units.calibration_family("passage") == "chunk"
    assert units.get("tree-node").levelled and units.get("tree-node").level_zero == "chunk"
    with pytest.raises(ValueError):
        units.register(units.UnitKind("sentence", "document", "not an RCP unit"))


def test_tree_is_built_and_advertised(tree_engine: Engine) -> None:
    caps = tree_engine.capabilities()
    status = tree_engine.derived_status()["tree-node"]
    assert "tree-node" in caps["retrieve"]["units"]
    assert caps["retrieve"]["levels"] == max(status["levels"]) + 1 >= 2
    assert status["current"] is True
    nodes = live_tree(tree_engine)
    level1 = {leaf for n in nodes if n["level"] == 1 for leaf in n["covers"]}
    assert level1 == set(leaf_docs(tree_engine))  # every leaf is in some level-1 node


def test_no_tree_no_tree_node(engine: Engine) -> None:
    engine.add_documents(corpus()[:4])
    caps = engine.capabilities()
    assert "tree-node" not in caps["retrieve"]["units"] and "levels" not in caps["retrieve"]
    with pytest.raises(OptionUnsupported):
        engine.retrieve("bees", k=3, unit="tree-node")
    loose = engine.retrieve("bees", k=3, unit="tree-node", strict=False)
    assert {h.unit for h in loose.hits} == {"chunk"} and loose.usage.notes


def test_levels_and_collapsed_pool(seam_engine: Engine) -> None:
    one = seam_engine.retrieve("honey bee hives", k=5, unit="tree-node", level=1).hits
    assert one and {(h.unit, h.level) for h in one} == {("tree-node", 1)}
    assert all(h.chunk is None and h.provenance and h.provenance.leaves for h in one)
    zero = seam_engine.retrieve("honey bee hives", k=5, unit="tree-node", level=0).hits
    assert {h.unit for h in zero} == {"chunk"}
    pooled = seam_engine.retrieve("honey bee hives", k=40, unit="tree-node", mode="dense").hits
    assert {h.unit for h in pooled} == {"chunk", "tree-node"}
    # Hybrid fusion of a pool: the chunks keep the order a chunk-only retrieve gives them.
    hybrid = seam_engine.retrieve("honey bee hives", k=60, unit="tree-node",
                                  candidate_k=60).hits
    alone = seam_engine.retrieve("honey bee hives", k=60, unit="chunk", candidate_k=60).hits
    in_pool = [h.id for h in hybrid if h.unit == "chunk"]
    assert len(in_pool) >= 5
    assert in_pool == [h.id for h in alone if h.id in set(in_pool)]
    with pytest.raises(OptionUnsupported):
        seam_engine.retrieve("bees", k=3, unit="tree-node", level=42)


def test_a_result_never_holds_a_node_and_what_it_contains(seam_engine: Engine) -> None:
    hits = seam_engine.retrieve("volcano eruption ash", k=60, unit="tree-node").hits
    sets = [frozenset(h.provenance.leaves) if h.provenance else frozenset([h.id])
            for h in hits]
    for i, a in enumerate(sets):
        for b in sets[i + 1:]:
            assert not (a <= b or b <= a), "a hit contains another hit of the same result"


def test_node_hits_name_their_sources(tree_engine: Engine) -> None:
    hit = tree_engine.retrieve("sourdough yeast", k=1, unit="tree-node", level=1).hits[0]
    meta = hit.meta or {}
    docs = {d for d in meta["doc_ids"]}
    assert hit.citation and hit.citation.source in docs
    assert {leaf.split("#")[0].removeprefix("doc:") for leaf in hit.provenance.leaves} == docs
    assert meta["child_ids"] and set(meta["child_ids"]) == set(hit.provenance.leaves)
    spans = meta["spans"]
    text = hit.text or ""
    for span in spans:  # extractive: every sentence points at its place in a document
        s, e = span["at"]
        source = tree_engine.store.query("SELECT text FROM documents WHERE id = ? AND v_to IS"
                                         " NULL", (span["doc_id"],))[0][0]
        assert source[span["start"]:span["end"]] == text[s:e]
    assert hit.trust and hit.trust.level == "community"
    parents = tree_engine.retrieve("sourdough yeast", k=3, unit="tree-node", level=0).hits
    assert all((h.meta or {}).get("parent_ids") for h in parents)


@pytest.mark.parametrize("tenant", ["a", "b"])
def test_filters_never_leak_a_node_derived_from_an_excluded_document(
        seam_engine: Engine, tenant: str) -> None:
    docs = leaf_docs(seam_engine)
    tenant_of = {d["id"]: d["meta"]["tenant"] for d in corpus()}
    # Brute force: a node may be returned only if every leaf it covers is the tenant's.
    allowed = {n["uid"] for n in live_tree(seam_engine)
               if all(tenant_of[docs[r]] == tenant for r in n["covers"])}
    flt = {"field": "tenant", "op": "eq", "value": tenant}
    for level in (None, 1):
        hits = seam_engine.retrieve("bees volcano chess bread", k=200, unit="tree-node",
                                    level=level, filter=flt).hits
        nodes = {h.id for h in hits if h.unit == "tree-node"}
        assert nodes <= allowed
        assert all(tenant_of[d] == tenant for h in hits
                   for d in ((h.meta or {}).get("doc_ids") or [h.chunk.doc_id if h.chunk else ""]))
    # The mixed nodes exist, so the filter really had something to hold back.
    assert any(not all(tenant_of[docs[r]] == tenant for r in n["covers"])
               for n in live_tree(seam_engine))


def test_sessions_apply_containment_across_kinds(seam_engine: Engine) -> None:
    sid = "seam-session"
    nodes = seam_engine.retrieve("chess openings", k=2, unit="tree-node", level=1,
                                 session_id=sid).hits
    covered = {leaf for h in nodes for leaf in h.provenance.leaves}
    chunks = seam_engine.retrieve("chess openings", k=48, unit="chunk", session_id=sid).hits
    assert covered and not covered & {h.id for h in chunks}
    # The reverse is allowed: a coarser node may follow the chunks it contains.
    sid2 = "seam-session-2"
    first = seam_engine.retrieve("chess openings", k=1, unit="chunk", session_id=sid2).hits
    later = seam_engine.retrieve("chess openings", k=5, unit="tree-node", level=1,
                                 session_id=sid2).hits
    assert any(first[0].id in h.provenance.leaves for h in later)


def test_session_rules_against_candidates() -> None:
    store = SessionStore()
    node = Candidate("tree:1:x", "tree-node", "", None, None,
                     leaves=frozenset({"doc:a#c0", "doc:b#c1"}), docs=frozenset({"a", "b"}))
    inner = Candidate("tree:1:y", "tree-node", "", None, None,
                      leaves=frozenset({"doc:a#c0"}), docs=frozenset({"a"}))
    outer = Candidate("tree:2:z", "tree-node", "", None, None,
                      leaves=frozenset({"doc:a#c0", "doc:b#c1", "doc:c#c0"}),
                      docs=frozenset({"a", "b", "c"}))
    chunk = Candidate("doc:a#c0", "chunk", "a", None, None)
    store.record("s", [node])
    assert store.filter_new("s", [inner, outer, chunk, node]) == [False, True, False, False]
    store.record("t", [Candidate("doc:a", "document", "a", None, None)])
    assert store.filter_new("t", [inner, node]) == [False, True]


def test_pack_skips_containment_within_one_result() -> None:
    sets = [frozenset({"a", "b"}), frozenset({"a"}), frozenset({"c"}), frozenset({"a", "b", "c"})]
    packed = pack([10, 10, 10, 10], 10, None, leaves=lambda i: sets[i])
    assert packed.taken == [0, 2] and packed.contained == 2


def test_pinned_version_serves_its_own_tree_and_a_lagging_tree_hides_changes(
        tmp_path: Path, embedder: Any, backend: str) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, build_tree=True, tree_top_size=2,
                 **backend_overrides(backend, tmp_path / "e"))
    eng.add_documents(corpus())
    eng.wait_for_derived()
    before = eng.index_version
    old = {h.id for h in eng.retrieve("bees", k=100, unit="tree-node", level=1).hits}
    victim = "bees-0-a"
    builders, eng.builders = eng.builders, {}  # the tree lags behind the next write
    eng.delete_documents([victim])
    lagging = eng.retrieve("bees", k=100, unit="tree-node", level=1)
    assert any("reflect" in n for n in lagging.usage.notes or [])
    assert all(victim not in (h.meta or {})["doc_ids"] for h in lagging.hits)
    assert eng.derived_status()["tree-node"]["current"] is False
    eng.builders = builders
    report = eng.update_derived()[0]
    assert report.mode == "incremental" and report.retired >= 1 and report.added >= 1
    now = eng.retrieve("bees", k=100, unit="tree-node", level=1)
    assert not any("reflect" in n for n in now.usage.notes or [])
    assert all(victim not in (h.meta or {})["doc_ids"] for h in now.hits)
    assert eng.derived_status()["tree-node"]["current"] is True
    pinned = eng.retrieve("bees", k=100, unit="tree-node", level=1, index_version=before)
    assert {h.id for h in pinned.hits} == old
    eng.close()


def test_replacing_a_document_rewrites_the_nodes_over_its_chunks(
        tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, build_tree=True, tree_top_size=2)
    eng.add_documents(corpus())
    eng.wait_for_derived()
    result = eng.add_documents([{"id": "chess-1-b", "text": "A grandmaster now writes about "
                                 "tea ceremonies and green tea leaves instead.",
                                 "meta": {"tenant": "b", "topic": "tea"}}])
    assert [(r.unit, r.mode) for r in result.derived] == [("tree-node", "scheduled")]
    eng.wait_for_derived()
    assert eng.catch_up is not None and eng.catch_up.reports[-1].mode == "incremental"
    live = set(leaf_docs(eng))
    for node in live_tree(eng):
        assert set(node["covers"]) <= live  # no live node covers a replaced chunk row
    hits = eng.retrieve("green tea ceremony", k=50, unit="tree-node", level=1).hits
    assert any("tea" in (h.text or "") for h in hits)
    eng.close()


def test_traversal_descends_from_the_top(seam_engine: Engine) -> None:
    res = seam_engine.retrieve("rook and pawn endgames", k=6, unit="tree-node",
                               tree_search="traversal")
    levels = seam_engine.derived_status()["tree-node"]["levels"]
    # At most k nodes per layer, top layer down to the leaves, are ranked.
    assert res.hits and res.usage.candidates <= 6 * (len(levels) + 1)
    collapsed = seam_engine.retrieve("rook and pawn endgames", k=6, unit="tree-node")
    assert collapsed.usage.candidates > res.usage.candidates
    assert "Endgames with a rook" in (res.hits[0].text or "")
    wire = seam_engine.retrieve_params({"query": "rook endgames", "k": 6, "unit": "tree-node",
                                        "x-rcp-agentic-treeSearch": "traversal"})
    assert wire.hits


def test_cursor_pages_over_the_collapsed_tree(seam_engine: Engine) -> None:
    seen: list[str] = []
    cursor = None
    for _ in range(20):
        res = seam_engine.retrieve("bread and bees", k=7, unit="tree-node", cursor=cursor)
        seen += [h.id for h in res.hits]
        cursor = res.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) and len(seen) > 7


SCHEMA_1_UNITS = """
CREATE TABLE units (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT, uid TEXT NOT NULL, unit TEXT NOT NULL,
    level INTEGER NOT NULL DEFAULT 0, doc_id TEXT NOT NULL,
    doc_row INTEGER NOT NULL REFERENCES documents(drow) ON DELETE CASCADE,
    idx INTEGER NOT NULL, start INTEGER, "end" INTEGER, page_start INTEGER, page_end INTEGER,
    tokens INTEGER NOT NULL, nterms INTEGER NOT NULL, v_from INTEGER NOT NULL, v_to INTEGER,
    text TEXT NOT NULL, vec BLOB NOT NULL, term_ids BLOB NOT NULL, term_tfs BLOB NOT NULL);
"""


def test_schema_1_directory_is_migrated_keeping_rows_and_rowid_sequence(tmp_path: Path) -> None:
    path = tmp_path / "engine.db"
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE documents (drow INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT"
                     " NULL, title TEXT, source TEXT, uri TEXT, file_type TEXT, meta TEXT NOT NULL"
                     " DEFAULT '{}', fmeta TEXT NOT NULL DEFAULT '{}', pages TEXT, modified_ms"
                     " REAL, trust TEXT NOT NULL DEFAULT 'community', v_from INTEGER NOT NULL,"
                     " v_to INTEGER, text TEXT NOT NULL);" + SCHEMA_1_UNITS)
    db.execute("INSERT INTO documents(id, v_from, text) VALUES ('a', 1, 'hello world')")
    vec = np.ones(4, dtype=np.float32).tobytes()
    for rowid in (1, 2, 9):
        db.execute("INSERT INTO units(rowid, uid, unit, doc_id, doc_row, idx, tokens, nterms,"
                   " v_from, text, vec, term_ids, term_tfs) VALUES (?, ?, 'chunk', 'a', 1, 0, 2,"
                   " 2, 1, 'hello world', ?, x'', x'')", (rowid, f"doc:a#c{rowid}", vec))
    db.execute("DELETE FROM units WHERE rowid = 9")  # the sequence stays at 9
    db.commit()
    db.close()
    store = Docstore(path)
    cols = {r[1]: r[3] for r in store.query("PRAGMA table_info(units)")}
    assert "umeta" in cols and cols["doc_row"] == 0  # nullable now
    assert store.query("SELECT uid FROM units ORDER BY rowid") == [("doc:a#c1",), ("doc:a#c2",)]
    assert store.info("schema_version") == "2"
    with store.transaction() as tx:
        tx.execute("INSERT INTO units(uid, unit, doc_id, doc_row, idx, tokens, nterms, v_from,"
                   " text, vec, term_ids, term_tfs) VALUES ('n', 'chunk', 'a', 1, 0, 1, 1, 2, 'x',"
                   " x'', x'', x'')")
    assert store.query("SELECT rowid FROM units WHERE uid = 'n'")[0][0] == 10  # never reused
    store.close()
    Docstore(path).close()  # opening again is a no-op


def test_rebuild_keeps_ids_and_emptied_nodes_disappear(tmp_path: Path, embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, build_tree=True, tree_top_size=2)
    eng.add_documents(corpus())
    eng.wait_for_derived()
    ids = {n["uid"] for n in live_tree(eng)}
    report = eng.update_derived(full=True)[0]
    assert report.mode == "full" and (report.added, report.retired) == (0, 0)
    assert {n["uid"] for n in live_tree(eng)} == ids  # same leaves, same seed: same ids
    eng.delete_documents([d["id"] for d in corpus() if d["meta"]["topic"] != "bees"])
    eng.wait_for_derived()
    left = live_tree(eng)
    bees = set(leaf_docs(eng))
    assert left and all(set(n["covers"]) <= bees for n in left)
    eng.delete_documents([d["id"] for d in corpus() if d["meta"]["topic"] == "bees"])
    eng.wait_for_derived()
    assert live_tree(eng) == []
    # Still built (build_tree), now with no node: tree-node stays offered, and finds nothing
    # (its level 0, the chunks, is empty too).
    assert "tree-node" in eng.capabilities()["retrieve"]["units"]
    assert eng.retrieve("bees", k=3, unit="tree-node").hits == []
    eng.close()


def test_tree_hits_over_the_protocol_match_the_schema(tree_engine: Engine) -> None:
    import json

    import jsonschema

    from conftest import REPO, rpc_call

    from rcp_agentic.protocol.dispatcher import Dispatcher

    schema = json.loads((REPO / "tests" / "schema" / "rcp-1.0.json").read_text("utf-8"))
    check = jsonschema.Draft202012Validator({"$schema": schema["$schema"],
                                             "$defs": schema["$defs"],
                                             "$ref": "#/$defs/RetrieveResult"})
    rpc = Dispatcher(tree_engine)
    caps = rpc_call(rpc, "initialize", {"protocolVersion": 1}, 0)["result"]["capabilities"]
    assert "tree-node" in caps["retrieve"]["units"] and caps["retrieve"]["levels"] >= 2
    assert caps["x-rcp-agentic"]["units"]["tree-node"]["levels"] and "limits" in caps[
        "x-rcp-agentic"]
    for params in ({"unit": "tree-node"}, {"unit": "tree-node", "level": 1},
                   {"unit": "tree-node", "x-rcp-agentic-treeSearch": "traversal"}):
        out = rpc_call(rpc, "retrieve", {"query": "lava and magma", "k": 8, **params})
        check.validate(out["result"])
        assert any(h["unit"] == "tree-node" and h["provenance"]["leaves"]
                   for h in out["result"]["hits"]) or params.get("level") is None
    bad = rpc_call(rpc, "retrieve", {"query": "lava", "unit": "tree-node", "level": 9})
    assert bad["error"]["code"] == -32005 and bad["error"]["data"]["option"] == "level"


def test_chroma_backed_tree_recall_agrees_with_exact(tree_engine: Engine, tmp_path: Path,
                                                     embedder: Any) -> None:
    eng = Engine(tmp_path / "e", embedder=embedder, build_tree=True, tree_top_size=2,
                 dense_exact_max=0)
    eng.add_documents(corpus())
    eng.wait_for_derived()
    for level in (None, 1):
        ann = eng.retrieve("honey and wax", k=10, unit="tree-node", level=level, mode="dense")
        exact = tree_engine.retrieve("honey and wax", k=10, unit="tree-node", level=level,
                                     mode="dense")
        assert [h.id for h in ann.hits] == [h.id for h in exact.hits]
    eng.close()


def test_filters_at_the_limits_are_answered_for_tree_nodes(seam_engine: Engine) -> None:
    leaf = {"field": "tenant", "op": "eq", "value": "a"}
    deep: dict[str, Any] = leaf
    for _ in range(31):
        deep = {"and": [leaf] * 15 + [deep]}
    nots: dict[str, Any] = leaf
    for _ in range(31):  # 31 nots around "tenant a": tenant b
        nots = {"not": nots}
    tenant = {t: {d["id"] for d in corpus() if d["meta"]["tenant"] == t} for t in "ab"}
    for flt, allowed in ((deep, tenant["a"]), ({"or": [leaf] * 511}, tenant["a"]),
                         (nots, tenant["b"])):
        for level in (None, 1):
            hits = seam_engine.retrieve("bees", k=20, unit="tree-node", level=level,
                                        filter=flt).hits
            assert hits or level == 1  # level 1 may hold only nodes mixing tenants
            assert all(set((h.meta or {}).get("doc_ids") or [h.chunk.doc_id]) <= allowed
                       for h in hits if h.unit == "tree-node" or h.chunk)


def test_chunks_score_in_the_collapsed_pool_as_they_do_alone(seam_engine: Engine) -> None:
    alone = {h.id: h.scores for h in seam_engine.retrieve("honey wax hives", k=48,
                                                          unit="chunk").hits}
    pooled = seam_engine.retrieve("honey wax hives", k=100, unit="tree-node").hits
    chunks = [h for h in pooled if h.unit == "chunk" and h.id in alone]
    assert len(chunks) >= 10
    for h in chunks:  # each layer keeps its own BM25 statistics
        assert h.scores["sparse"] == pytest.approx(alone[h.id]["sparse"])
        assert h.scores["dense"] == pytest.approx(alone[h.id]["dense"])


def test_a_malformed_vendor_option_names_itself(tree_engine: Engine) -> None:
    from rcp_agentic.errors import InvalidParams

    for value in (123, [], "sideways"):
        with pytest.raises(InvalidParams) as exc:
            tree_engine.retrieve_params({"query": "bees", "unit": "tree-node",
                                         "x-rcp-agentic-treeSearch": value})
        assert exc.value.field == "x-rcp-agentic-treeSearch"
