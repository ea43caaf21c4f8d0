"""A layered drawing of a small directed graph as inline SVG: how the HTML
view draws each rewritten region, with no system binary and nothing to load.

Why not Graphviz: the view must work where users look, and servers and CI
images rarely have ``dot``. A region is a few dozen nodes at most
(``htmlview.MAX_REGION_NODES``) whose edges run forward in program order, so
the classic layered layout is enough and small: a node's layer is the
longest path to it over the edges that constrain layout, each layer is
ordered by the mean position of its predecessors (two sweeps), and layers
are centred under each other. Edges that do not constrain layout (the
"writes" edge from an in-place call back to the buffer it writes) are drawn
as curves on the right.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Arrow", "Box", "draw"]

_CHAR_W = 5.4  # an average glyph of the 9px sans-serif the page sets
_LINE_H = 11.0
_PAD_X, _PAD_Y = 6.0, 4.0
_GAP_X, _GAP_Y = 14.0, 26.0
_MARGIN = 6.0


@dataclass(frozen=True)
class Box:
    """A node: its text lines and looks."""

    key: int
    lines: tuple[str, ...]
    fill: str = "#ffffff"
    dashed: bool = False
    text_color: str = "#222222"
    stroke_width: float = 1.0
    tooltip: str = ""


@dataclass(frozen=True)
class Arrow:
    """An edge. ``constraint=False`` edges do not place nodes."""

    src: int
    dst: int
    style: str = "solid"  # "solid" | "dotted" | "dashed"
    color: str = "#555555"
    label: str = ""
    head: bool = True
    constraint: bool = True


@dataclass
class _Placed:
    box: Box
    layer: int
    x: float = 0.0  # centre
    y: float = 0.0  # top
    w: float = 0.0
    h: float = 0.0


def _layers(boxes: Sequence[Box], arrows: Sequence[Arrow]) -> dict[int, int]:
    """Longest path over the constraining edges, in key order (program
    order: every constraining edge runs from a smaller key to a larger one;
    one that does not is ignored for layering rather than looping)."""
    preds: dict[int, list[int]] = {b.key: [] for b in boxes}
    for a in arrows:
        if a.constraint and a.src in preds and a.dst in preds and a.src < a.dst:
            preds[a.dst].append(a.src)
    layer: dict[int, int] = {}
    for k in sorted(preds):
        layer[k] = max((layer[p] + 1 for p in preds[k]), default=0)
    return layer


def _order(rows: list[list[_Placed]], arrows: Sequence[Arrow]) -> None:
    """Orders each layer by the mean position of its nodes' predecessors
    (two downward sweeps, stable: ties keep program order)."""
    preds: dict[int, list[int]] = {}
    for a in arrows:
        if a.constraint:
            preds.setdefault(a.dst, []).append(a.src)
    for _ in range(2):
        pos: dict[int, float] = {}
        for row in rows:
            for i, p in enumerate(row):
                ps = [pos[s] for s in preds.get(p.box.key, []) if s in pos]
                p.x = sum(ps) / len(ps) if ps else float(i)
            row.sort(key=lambda p: p.x)
            for i, p in enumerate(row):
                pos[p.box.key] = float(i)


def draw(boxes: Sequence[Box], arrows: Sequence[Arrow], title: str = "") -> str:
    """The graph as one ``<svg>`` element (text sized by the page's CSS)."""
    layer = _layers(boxes, arrows)
    placed = {b.key: _Placed(b, layer[b.key]) for b in boxes}
    rows: list[list[_Placed]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for b in boxes:
        rows[layer[b.key]].append(placed[b.key])
    _order(rows, arrows)
    for p in placed.values():
        p.w = max(40.0, max((len(s) for s in p.box.lines), default=0) * _CHAR_W + 2 * _PAD_X)
        p.h = len(p.box.lines) * _LINE_H + 2 * _PAD_Y
    widths = [sum(p.w for p in row) + _GAP_X * max(0, len(row) - 1) for row in rows]
    width = max(widths, default=0.0) + 2 * _MARGIN
    y = _MARGIN
    for row, row_w in zip(rows, widths, strict=True):
        x = (width - row_w) / 2
        row_h = max((p.h for p in row), default=0.0)
        for p in row:
            p.x, p.y = x + p.w / 2, y + (row_h - p.h) / 2
            x += p.w + _GAP_X
        y += row_h + _GAP_Y
    curves = [
        a
        for a in arrows
        if a.src in placed and a.dst in placed and placed[a.src].layer >= placed[a.dst].layer
    ]
    width += 40.0 if curves else 0.0
    height = max(y - _GAP_Y + _MARGIN, 2 * _MARGIN)
    e = html.escape
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.1f} {height:.1f}" role="img" aria-label="{e(title)}">'
    ]
    for a in arrows:
        if a.src in placed and a.dst in placed:
            out.append(_edge(placed[a.src], placed[a.dst], a))
    for p in placed.values():
        out.append(_node(p))
    out.append("</svg>")
    return "".join(out)


def _node(p: _Placed) -> str:
    e = html.escape
    b = p.box
    dash = ' stroke-dasharray="3,2"' if b.dashed else ""
    parts = [f"<g><title>{e(b.tooltip)}</title>"] if b.tooltip else ["<g>"]
    parts.append(
        f'<rect x="{p.x - p.w / 2:.1f}" y="{p.y:.1f}" width="{p.w:.1f}" height="{p.h:.1f}" rx="2" '
        f'fill="{e(b.fill)}" stroke="#333333" stroke-width="{b.stroke_width:g}"{dash}/>'
    )
    for i, line in enumerate(b.lines):
        ty = p.y + _PAD_Y + (i + 0.8) * _LINE_H
        parts.append(f'<text x="{p.x:.1f}" y="{ty:.1f}" fill="{e(b.text_color)}">{e(line)}</text>')
    parts.append("</g>")
    return "".join(parts)


def _edge(s: _Placed, d: _Placed, a: Arrow) -> str:
    e = html.escape
    dash = {"dotted": ' stroke-dasharray="1,3"', "dashed": ' stroke-dasharray="4,3"'}.get(a.style, "")
    if s.layer < d.layer:
        x0, y0, x1, y1 = s.x, s.y + s.h, d.x, d.y
        path = f"M{x0:.1f},{y0:.1f} L{x1:.1f},{y1:.1f}"
        tx, ty, mx, my = x0, y0, (x0 + x1) / 2, (y0 + y1) / 2
    else:  # back or sideways: a curve out to the right
        x0, y0 = s.x + s.w / 2, s.y + s.h / 2
        x1, y1 = d.x + d.w / 2, d.y + d.h / 2
        bulge = max(x0, x1) + 30.0
        path = f"M{x0:.1f},{y0:.1f} C{bulge:.1f},{y0:.1f} {bulge:.1f},{y1:.1f} {x1:.1f},{y1:.1f}"
        tx, ty, mx, my = bulge, y1, bulge - 8.0, (y0 + y1) / 2
    parts = [f'<path d="{path}" fill="none" stroke="{e(a.color)}"{dash}/>']
    if a.head:
        parts.append(_head(tx, ty, x1, y1, a.color))
    if a.label:
        parts.append(f'<text x="{mx:.1f}" y="{my:.1f}" fill="{e(a.color)}">{e(a.label)}</text>')
    return "".join(parts)


def _head(fx: float, fy: float, x: float, y: float, color: str) -> str:
    """An arrowhead at ``(x, y)`` pointing away from ``(fx, fy)``."""
    ang = math.atan2(y - fy, x - fx)
    size, spread = 6.0, 0.45
    pts = [
        (x, y),
        (x - size * math.cos(ang - spread), y - size * math.sin(ang - spread)),
        (x - size * math.cos(ang + spread), y - size * math.sin(ang + spread)),
    ]
    coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
    return f'<polygon points="{coords}" fill="{html.escape(color)}"/>'
