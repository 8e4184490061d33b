"""The inline SVG graph drawing: well-formed, safe with hostile text, deterministic, bounded."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcp_agentic.display.graph_svg import SvgEdge, SvgNode, graph_svg
from rcp_agentic.display.svg_parts import EDGE_LABEL_MAX_CHARS, LABEL_MAX_CHARS

NS = "{http://www.w3.org/2000/svg}"
HOSTILE = [
    "</svg><script>alert(1)</script>",
    '" onload="alert(1)',
    "' onmouseover='x",
    "<a href=\"javascript:alert(1)\">x</a>",
    "&amp; &lt; ]]> <!-- -->",
    "bell\x07nul\x00esc\x1b del\x7f \ufffe end",
]


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def tag(el: ET.Element) -> str:
    return el.tag.removeprefix(NS)


def node_groups(root: ET.Element) -> list[ET.Element]:
    return [g for g in root.iter(f"{NS}g") if "data-node" in g.attrib]


def node_xy(group: ET.Element) -> tuple[float, float]:
    shape = next(c for c in group if tag(c) in ("circle", "rect"))
    if tag(shape) == "circle":
        return float(shape.get("cx", "nan")), float(shape.get("cy", "nan"))
    return (float(shape.get("x", "nan")) + float(shape.get("width", "nan")) / 2,
            float(shape.get("y", "nan")) + float(shape.get("height", "nan")) / 2)


def labels(root: ET.Element) -> dict[str, str]:
    return {t.get("data-label", ""): t.text or "" for t in root.iter(f"{NS}text")
            if "data-label" in t.attrib}


def edge_labels(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{NS}text") if "data-edge-label" in t.attrib]


def caption(root: ET.Element) -> str:
    return next((t.text or "" for t in root.iter(f"{NS}text") if "data-caption" in t.attrib), "")


def assert_safe(svg: str) -> ET.Element:
    root = parse(svg)
    assert tag(root) == "svg"
    for el in root.iter():
        assert tag(el) not in ("script", "foreignObject", "a", "image", "use", "style")
        for name, value in el.attrib.items():
            assert not name.lower().startswith("on"), name
            assert "href" not in name.lower() and "src" not in name.lower(), name
            if name == "style":
                assert "url(" not in value.lower() and "script" not in value.lower(), value
            elif not name.startswith("data-") and name != "aria-label":  # these carry text
                assert ":" not in value and "(" not in value, (name, value)
    assert "<script" not in svg.lower()
    # Quotes in text are escaped, so a raw `on…="` can only be a real attribute.
    assert not re.search(r"\son\w+\s*=\s*[\"']", svg, re.IGNORECASE)
    return root


def expected_text(text: str, limit: int) -> str:
    """The spec of a drawn label, written independently of the module: XML-invalid and
    control characters dropped, whitespace runs made one space, stripped, cut with '…'."""
    kept = "".join(
        c for c in text
        if not (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF
                or c in "\ufffe\uffff")
        or c in "\t\n\r"
    )
    clean = " ".join(kept.split())
    if len(clean) <= limit:
        return clean
    return clean[: limit - 1].rstrip() + "\u2026"


def sample() -> tuple[list[SvgNode], list[SvgEdge]]:
    nodes = [
        SvgNode("a", "Marie Curie", "seed", 0.9),
        SvgNode("b", "Pierre Curie", score=0.5),
        SvgNode("c", "University of Paris, Faculty of Sciences", score=0.3),
        SvgNode("d", "Radium"),
        SvgNode("p1", "#1 Discovery of radium", "chunk", 0.7, title="Passage text"),
    ]
    edges = [
        SvgEdge("a", "b", 2.0, "married to"),
        SvgEdge("a", "d", 1.0, "discovered", directed=True),
        SvgEdge("a", "c", 0.5, "worked at the university for many years"),
        SvgEdge("p1", "a"),
        SvgEdge("p1", "d"),
    ]
    return nodes, edges


# ---------------------------------------------------------------- structure


def test_parses_with_root_svg_viewbox_and_size() -> None:
    nodes, edges = sample()
    root = assert_safe(graph_svg(nodes, edges, width=500, height=300))
    assert root.get("viewBox") == "0 0 500 300"
    assert root.get("width") == "500" and root.get("height") == "300"
    assert root[0].tag == f"{NS}title"


def test_one_shape_per_node_circles_and_passage_boxes() -> None:
    nodes, edges = sample()
    root = parse(graph_svg(nodes, edges))
    groups = node_groups(root)
    assert sorted(g.get("data-node") for g in groups) == ["a", "b", "c", "d", "p1"]
    shapes = {g.get("data-node"): [tag(c) for c in g if tag(c) != "title"] for g in groups}
    assert shapes["p1"] == ["rect"]
    assert all(shapes[n] == ["circle"] for n in "abcd")


def test_seed_is_styled_apart_with_bold_label() -> None:
    nodes, edges = sample()
    root = parse(graph_svg(nodes, edges))
    circles = {g.get("data-node"): next(c for c in g if tag(c) == "circle")
               for g in node_groups(root) if g.get("data-role") != "chunk"}
    seed, other = circles["a"], circles["b"]
    assert seed.get("fill") != other.get("fill")
    assert float(seed.get("stroke-width", "0")) > float(other.get("stroke-width", "0"))
    weights = {t.get("data-label"): t.get("font-weight") for t in root.iter(f"{NS}text")
               if "data-label" in t.attrib}
    assert weights["a"] == "bold" and weights["b"] is None


def test_legend_only_for_roles_present() -> None:
    def legend(svg: str) -> list[str]:
        layer = next(g for g in parse(svg).iter(f"{NS}g") if g.get("data-layer") == "legend")
        return [t.text or "" for t in layer.iter(f"{NS}text")]

    nodes, edges = sample()
    assert legend(graph_svg(nodes, edges)) == ["seed", "entity", "passage"]
    assert legend(graph_svg([SvgNode("x", "X"), SvgNode("y", "Y")], [])) == ["entity"]


def test_path_layout_orders_x_by_hop_order() -> None:
    order = ["q", "b", "z", "a", "m"]
    nodes = [SvgNode(i, f"hop {k}") for k, i in enumerate(order)]
    edges = [SvgEdge(a, b, 1.0, "next", directed=True) for a, b in itertools.pairwise(order)]
    root = parse(graph_svg(nodes, edges, layout="path", height=150))
    xy = {g.get("data-node"): node_xy(g) for g in node_groups(root)}
    xs = [xy[i][0] for i in order]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)
    assert len({xy[i][1] for i in order}) == 1  # one row
    # Directed hops carry arrowheads.
    assert len(list(root.iter(f"{NS}polygon"))) == len(edges)


def test_long_path_wraps_rows_in_reading_order() -> None:
    order = [f"n{k:02d}" for k in range(30)]
    nodes = [SvgNode(i, i) for i in order]
    root = parse(graph_svg(nodes, [], layout="path", width=400, height=300))
    xy = {g.get("data-node"): node_xy(g) for g in node_groups(root)}
    reading = sorted(order, key=lambda i: (xy[i][1], xy[i][0]))
    assert reading == order


def test_edge_labels_present_truncated_and_tooltip_full() -> None:
    nodes, edges = sample()
    root = parse(graph_svg(nodes, edges))
    drawn = edge_labels(root)
    assert "married to" in drawn and "discovered" in drawn
    long = "worked at the university for many years"
    cut = next(t for t in drawn if t.startswith("worked"))
    assert len(cut) == EDGE_LABEL_MAX_CHARS and cut.endswith("\u2026")
    titles = [t.text or "" for t in root.iter(f"{NS}title")]
    assert any(long in t for t in titles)


def test_node_label_truncated_and_tooltip_carries_full_label() -> None:
    full = "The International Committee on Intellectual Cooperation"
    root = parse(graph_svg([SvgNode("x", full), SvgNode("y", "short", title="custom tip")], []))
    shown = labels(root)
    assert shown["x"] == expected_text(full, LABEL_MAX_CHARS)
    assert len(shown["x"]) == LABEL_MAX_CHARS and shown["x"].endswith("\u2026")
    assert shown["y"] == "short"
    tips = {g.get("data-node"): g.find(f"{NS}title") for g in node_groups(root)}
    assert tips["x"] is not None and tips["x"].text == full
    assert tips["y"] is not None and tips["y"].text == "custom tip"


def test_edge_width_follows_weight() -> None:
    nodes = [SvgNode(i, i) for i in "abcd"]
    edges = [SvgEdge("a", "b", 4.0), SvgEdge("b", "c", 1.0), SvgEdge("c", "d", None)]
    root = parse(graph_svg(nodes, edges))
    widths = [float(p.get("stroke-width", "0")) for p in root.iter(f"{NS}path")]
    assert len(widths) == 3
    # Sorted by (src, dst): a-b (max weight), b-c (a quarter), c-d (no weight: thin).
    assert widths[0] > widths[1] > 0
    assert widths[2] <= widths[1]


def test_scores_size_nodes() -> None:
    nodes = [SvgNode("hi", "hi", score=1.0), SvgNode("lo", "lo", score=0.1)]
    root = parse(graph_svg(nodes, [SvgEdge("hi", "lo")]))
    r = {g.get("data-node"): float(next(c for c in g if tag(c) == "circle").get("r", "0"))
         for g in node_groups(root)}
    assert r["hi"] > r["lo"]


def test_caption_drawn_and_escaped() -> None:
    root = assert_safe(graph_svg([SvgNode("a", "A")], [], caption="5 entities <b>&</b>"))
    assert caption(root) == "5 entities <b>&</b>"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        graph_svg([], [], layout="circle")
    with pytest.raises(ValueError):
        graph_svg([], [], max_nodes=0)


# ---------------------------------------------------------------- edge cases


def test_no_nodes_gives_a_small_no_entities_svg() -> None:
    svg = graph_svg([], [SvgEdge("a", "b")])
    root = assert_safe(svg)
    assert int(root.get("height", "0")) < 100
    assert any((t.text or "") == "no entities" for t in root.iter(f"{NS}text"))
    assert not node_groups(root)


def test_one_node_is_centred() -> None:
    root = parse(graph_svg([SvgNode("solo", "Solo", "seed")], [], width=400, height=300))
    (group,) = node_groups(root)
    x, _ = node_xy(group)
    assert x == 200


def test_disconnected_nodes_all_drawn_inside_the_canvas() -> None:
    nodes = [SvgNode(f"n{k}", f"node {k}") for k in range(7)]
    edges = [SvgEdge("n0", "n1"), SvgEdge("n2", "n3")]
    root = parse(graph_svg(nodes, edges, width=500, height=300))
    pts = [node_xy(g) for g in node_groups(root)]
    assert len(pts) == 7 and len(set(pts)) == 7
    assert all(0 < x < 500 and 0 < y < 300 for x, y in pts)


def test_self_loop_drawn_as_small_loop() -> None:
    root = parse(graph_svg([SvgNode("a", "A"), SvgNode("b", "B")],
                           [SvgEdge("a", "a", 1.0, "cites itself"), SvgEdge("a", "b")]))
    paths = [p.get("d", "") for p in root.iter(f"{NS}path")]
    assert len(paths) == 2 and sum("C" in d for d in paths) == 1
    assert "cites itself" in edge_labels(root)


def test_duplicate_edges_merge_with_max_weight_and_both_labels() -> None:
    nodes = [SvgNode("a", "A"), SvgNode("b", "B"), SvgNode("c", "C")]
    edges = [SvgEdge("a", "b", 1.0, "knows"), SvgEdge("b", "a", 3.0, "met"),
             SvgEdge("a", "b", 2.0, "knows"), SvgEdge("b", "c", 3.0)]
    root = parse(graph_svg(nodes, edges))
    widths = [p.get("stroke-width") for p in root.iter(f"{NS}path")]
    assert len(widths) == 2 and widths[0] == widths[1]  # a-b took the max weight, 3
    assert edge_labels(root) == ["knows / met"]


def test_opposite_directed_edges_bend_apart() -> None:
    nodes = [SvgNode("a", "A"), SvgNode("b", "B")]
    root = parse(graph_svg(nodes, [SvgEdge("a", "b", directed=True),
                                   SvgEdge("b", "a", directed=True)]))
    paths = [p.get("d", "") for p in root.iter(f"{NS}path")]
    assert len(paths) == 2 and all("Q" in d for d in paths)
    controls = [d.split("Q")[1].split()[:2] for d in paths]
    assert controls[0] != controls[1]


def test_edges_to_unknown_nodes_are_dropped() -> None:
    root = parse(graph_svg([SvgNode("a", "A"), SvgNode("b", "B")],
                           [SvgEdge("a", "ghost", 9.0, "boo"), SvgEdge("a", "b", 1.0)]))
    assert len(list(root.iter(f"{NS}path"))) == 1
    assert "boo" not in edge_labels(root)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -2.0])
def test_bad_weights_and_scores_are_treated_as_missing(bad: float) -> None:
    nodes = [SvgNode("a", "A", score=bad), SvgNode("b", "B", score=bad), SvgNode("c", "C")]
    edges = [SvgEdge("a", "b", bad), SvgEdge("b", "c", None)]
    svg = graph_svg(nodes, edges)
    root = assert_safe(svg)
    assert "nan" not in svg.lower() and "inf" not in svg.lower()
    widths = [p.get("stroke-width") for p in root.iter(f"{NS}path")]
    assert widths[0] == widths[1]  # both missing
    radii = {float(c.get("r", "0")) for c in root.iter(f"{NS}circle")
             if c.get("cy") != "15.5"}  # not the legend's
    assert len(radii) == 1


def test_duplicate_node_ids_merge_and_seed_wins() -> None:
    nodes = [SvgNode("a", "A plain"), SvgNode("a", "A seed", "seed"), SvgNode("b", "B")]
    root = parse(graph_svg(nodes, [SvgEdge("a", "b")]))
    groups = {g.get("data-node"): g for g in node_groups(root)}
    assert len(groups) == 2 and groups["a"].get("data-role") == "seed"
    assert labels(root)["a"] == "A seed"


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_everywhere_stays_text(text: str) -> None:
    nodes = [SvgNode(text, text, "seed", title=text), SvgNode("b", text, "chunk")]
    edges = [SvgEdge(text, "b", 1.0, text, directed=True)]
    svg = graph_svg(nodes, edges, caption=text)
    root = assert_safe(svg)
    assert labels(root)[expected_text(text, 200)] == expected_text(text, LABEL_MAX_CHARS)
    assert edge_labels(root) == [expected_text(text, EDGE_LABEL_MAX_CHARS)]
    assert caption(root) == expected_text(text, 10_000)
    assert len(node_groups(root)) == 2


# ---------------------------------------------------------------- properties

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(label=TEXT, relation=TEXT, caption_text=TEXT, node_id=TEXT)
def test_arbitrary_text_parses_and_round_trips(
    label: str, relation: str, caption_text: str, node_id: str
) -> None:
    other = "other" if node_id != "other" else "another"
    nodes = [SvgNode(node_id, label, "seed"), SvgNode(other, "O")]
    svg = graph_svg(nodes, [SvgEdge(node_id, other, 1.0, relation)], caption=caption_text)
    root = assert_safe(svg)
    want = expected_text(label, LABEL_MAX_CHARS) or expected_text(node_id, LABEL_MAX_CHARS)
    group = next(g for g in node_groups(root) if g.get("data-role") == "seed")
    assert group.get("data-node") == expected_text(node_id, 200)
    drawn = [t for t in root.iter(f"{NS}text") if t.get("font-weight") == "bold"]
    assert [t.text or "" for t in drawn] == ([want] if want else [])
    rel = expected_text(relation, EDGE_LABEL_MAX_CHARS)
    assert edge_labels(root) == ([rel] if rel else [])
    assert caption(root) == expected_text(caption_text, 10_000)


node_strategy = st.builds(
    SvgNode,
    id=st.sampled_from(list("abcdefgh")),
    label=st.text(max_size=12),
    role=st.sampled_from(["seed", "entity", "chunk", "other"]),
    score=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    title=st.one_of(st.none(), st.text(max_size=8)),
)
edge_strategy = st.builds(
    SvgEdge,
    src=st.sampled_from(list("abcdefghz")),
    dst=st.sampled_from(list("abcdefghz")),
    weight=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    label=st.one_of(st.none(), st.text(max_size=10)),
    directed=st.booleans(),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    nodes=st.lists(node_strategy, max_size=12),
    edges=st.lists(edge_strategy, max_size=20),
)
def test_permuted_inputs_give_identical_svg(
    data: st.DataObject, nodes: list[SvgNode], edges: list[SvgEdge]
) -> None:
    first = graph_svg(nodes, edges, max_nodes=6)
    assert graph_svg(list(nodes), list(edges), max_nodes=6) == first
    nodes2 = data.draw(st.permutations(nodes))
    edges2 = data.draw(st.permutations(edges))
    assert graph_svg(nodes2, edges2, max_nodes=6) == first
    assert_safe(first)
    assert len(node_groups(parse(first))) == min(len({n.id for n in nodes}), 6)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), edges=st.lists(edge_strategy, max_size=20))
def test_path_layout_ignores_edge_order(data: st.DataObject, edges: list[SvgEdge]) -> None:
    nodes = [SvgNode(i, f"hop {i}") for i in "dbcae"]
    first = graph_svg(nodes, edges, layout="path")
    assert graph_svg(nodes, data.draw(st.permutations(edges)), layout="path") == first


def test_coordinates_are_rounded_to_one_decimal() -> None:
    nodes, edges = sample()
    svg = graph_svg(nodes, edges)
    assert not re.search(r"\d\.\d\d", svg.replace("0.85", ""))  # stroke-opacity aside


# ---------------------------------------------------------------- bounds


def test_bounded_to_max_nodes_keeping_seeds_and_top_scores() -> None:
    nodes = [SvgNode(f"e{k:03d}", f"Entity {k}", "seed" if k % 100 == 7 else "entity",
                     score=(k % 97) / 97) for k in range(500)]
    edges = [SvgEdge(f"e{(k * 7) % 500:03d}", f"e{(k * 13 + 1) % 500:03d}", float(k % 5))
             for k in range(2000)]
    svg = graph_svg(nodes, edges, max_nodes=60, caption="local search")
    root = assert_safe(svg)
    drawn = {g.get("data-node") for g in node_groups(root)}
    assert len(drawn) == 60
    seeds = {n.id for n in nodes if n.role == "seed"}
    assert seeds <= drawn
    others = sorted((n for n in nodes if n.role != "seed"), key=lambda n: (-(n.score or 0), n.id))
    assert drawn - seeds == {n.id for n in others[: 60 - len(seeds)]}
    assert caption(root) == "local search \u00b7 +440 more not drawn"
    # Every drawn edge joins two drawn nodes; no more labels than the cap.
    assert len(labels(root)) <= 24


def test_more_seeds_than_max_nodes_keeps_the_best_seeds() -> None:
    nodes = [SvgNode(f"s{k}", f"S{k}", "seed", score=k) for k in range(10)]
    root = parse(graph_svg(nodes, [], max_nodes=3))
    assert {g.get("data-node") for g in node_groups(root)} == {"s9", "s8", "s7"}
    assert caption(root) == "+7 more not drawn"
