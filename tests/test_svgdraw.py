"""The layered SVG drawing the HTML view uses instead of Graphviz: every
constraining edge points down, boxes never overlap, text is escaped, and the
picture is a well-formed SVG document."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from hypothesis import given, settings
from hypothesis import strategies as st

from fxrewrite.svgdraw import Arrow, Box, draw

NS = "{http://www.w3.org/2000/svg}"


def _rects(svg: str) -> dict[str, tuple[float, float, float, float]]:
    """Per node (its first text line), the box ``(x, y, w, h)``."""
    root = ET.fromstring(svg)
    out = {}
    for g in root.iter(f"{NS}g"):
        rect = g.find(f"{NS}rect")
        texts = [t.text or "" for t in g.findall(f"{NS}text")]
        assert rect is not None and texts
        out[texts[0]] = tuple(float(rect.get(k, "nan")) for k in ("x", "y", "width", "height"))
    return out


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    n=st.integers(1, 14),
    edges=st.lists(st.tuples(st.integers(0, 13), st.integers(0, 13)), max_size=30),
)
def test_constraining_edges_point_down_and_boxes_do_not_overlap(n, edges):
    boxes = [Box(k, (f"n{k}", f"aten::op.default  #{k}")) for k in range(n)]
    arrows = [Arrow(a, b) for a, b in edges if a < b < n]
    # A back edge that must not change the layers (the "writes" edge).
    arrows += [Arrow(b, a, constraint=False, label="writes") for a, b in edges if a < b < n][:2]
    svg = draw(boxes, arrows, "t")
    r = _rects(svg)
    assert set(r) == {f"n{k}" for k in range(n)}
    for a in arrows:
        if a.constraint:
            _, ys, _, hs = r[f"n{a.src}"]
            _, yd, _, _ = r[f"n{a.dst}"]
            assert ys + hs < yd, (a, r)
    items = list(r.values())
    for i, (x0, y0, w0, h0) in enumerate(items):
        for x1, y1, w1, h1 in items[i + 1 :]:
            apart = x0 + w0 <= x1 or x1 + w1 <= x0 or y0 + h0 <= y1 or y1 + h1 <= y0
            assert apart, (items[i], (x1, y1, w1, h1))
    root = ET.fromstring(svg)
    width, height = float(root.get("width", "0")), float(root.get("height", "0"))
    assert all(x >= 0 and y >= 0 and x + w <= width + 0.5 and y + h <= height + 0.5 for x, y, w, h in items)


def test_text_and_tooltips_are_escaped_and_styles_drawn():
    boxes = [
        Box(0, ("a<b", "x & y"), fill="#b9e6b9", tooltip='say "hi" <now>'),
        Box(1, ("c",), dashed=True, text_color="#888888", stroke_width=2.0),
    ]
    svg = draw(boxes, [Arrow(0, 1, style="dotted", label="l<1>")], 'title "q"')
    root = ET.fromstring(svg)  # well formed despite the markup in the labels
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert "a<b" in texts and "x & y" in texts and "l<1>" in texts
    assert root.find(f"{NS}g/{NS}title").text == 'say "hi" <now>'  # type: ignore[union-attr]
    assert 'fill="#b9e6b9"' in svg and 'stroke-dasharray="3,2"' in svg and 'stroke-width="2"' in svg
    assert re.search(r'stroke-dasharray="1,3"', svg)  # the dotted edge


def test_an_empty_region_is_an_empty_picture():
    root = ET.fromstring(draw([], [], "nothing"))
    assert root.tag == f"{NS}svg" and not list(root.iter(f"{NS}rect"))
