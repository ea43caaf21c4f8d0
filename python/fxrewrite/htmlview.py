"""Before/after pictures of each rewritten region, as one self-contained HTML page.

A region is one auto_functionalized node with its neighbourhood: operands,
getitems, write-back scatters and ``copy_`` nodes, moved readers, readers a
clone was kept for, the first readers of its results (before), and the
surviving ones of those nodes plus the nodes the rewrite inserted for it (the
in-place call, clones) after. Each region is capped at ``MAX_REGION_NODES``
per side, so the page grows with the number of regions, never with the graph.

Each region is laid out and drawn here (``svgdraw``: a layered layout, no
system binary); the SVG is inlined, so the page needs no network to view.
Only ``--html`` and the pass's HTML artifact import this module.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import _core
from .report import Decision, Report
from .svgdraw import Arrow, Box, draw

#: The value tag of a callable in the IR tuples (``rust/ir/wire.rs``).
_T_TARGET = _core.WIRE_CODES["value_tag"]["target"]

__all__ = ["MAX_REGION_NODES", "OPEN_REGIONS", "DrawError", "render_html"]

MAX_REGION_NODES = 40
#: Regions whose drawings are open when the page loads; the others are
#: folded (one click, or the filter box, opens them), so a page of thousands
#: of regions stays light to scroll.
OPEN_REGIONS = 20
_DOWNSTREAM = 3  # readers of each result shown before the rewrite


class DrawError(RuntimeError):
    """The regions could not be drawn."""


def _refs(v: Any, out: list[int]) -> None:
    """Node indices in an encoded value, in order."""
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], int):
        tag, payload = v
        if tag == 0:
            out.append(payload)
        elif tag in (1, 2):
            for x in payload:
                _refs(x, out)


class _Table:
    """The node table of one graph: names, targets, operands and users."""

    def __init__(self, g: _core.Graph) -> None:
        targets, nodes = g.to_parts()
        self.targets = targets
        self.nodes = nodes
        self.names = [n[1] for n in nodes]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.inputs: list[list[int]] = []
        self.users: list[list[int]] = [[] for _ in nodes]
        for i, n in enumerate(nodes):
            refs: list[int] = []
            for a in n[3]:
                _refs(a, refs)
            for _, v in n[4]:
                _refs(v, refs)
            seen = list(dict.fromkeys(refs))
            self.inputs.append(seen)
            for r in seen:
                self.users[r].append(i)

    def target(self, i: int) -> str:
        n = self.nodes[i]
        if n[0] == 0:
            return "input"
        if n[0] == 5:
            return "output"
        name = self.targets[n[2]][0]
        if name.startswith("higher_order."):
            op = next((a for a in n[3] if isinstance(a, tuple) and a[0] == _T_TARGET), None)
            if op is not None:
                return f"{name.removeprefix('higher_order.')}({self.targets[op[1]][0]})"
        return str(name)

    def written(self, i: int) -> list[int]:
        """Operands an operator call writes, per its schema."""
        n = self.nodes[i]
        schema = self.targets[n[2]][2] if n[0] == 2 else None
        if not schema:
            return []
        args = schema[0]
        out: list[int] = []
        for pos, a in enumerate(n[3]):
            if pos < len(args) and args[pos][3]:
                _refs(a, out)
        by_name = {a[0]: a for a in args}
        for k, v in n[4]:
            if k in by_name and by_name[k][3]:
                _refs(v, out)
        return out

    def source(self, i: int) -> str | None:
        s = self.nodes[i][6]
        return s if isinstance(s, str) else None


def _is_writeback(name: str) -> bool:
    return name.endswith("_scatter.default") or name.startswith("aten::copy_")


@dataclass
class Region:
    """One decision's nodes before and after, with the role of each."""

    decision: Decision
    before: dict[int, str] = field(default_factory=dict)  # node index -> role
    after: dict[int, str] = field(default_factory=dict)
    truncated: bool = False


def _add(roles: dict[int, str], items: Iterable[int], role: str) -> bool:
    for i in items:
        if i not in roles:
            if len(roles) >= MAX_REGION_NODES:
                return False
            roles[i] = role
    return True


def _new_node_origins(
    before: _Table, after: _Table, plan: dict[str, Any]
) -> tuple[dict[int, int], dict[int, Any]]:
    """Inserted node (index in ``after``) -> the original node it was made for
    (the ``origin`` of its edit), matched by its target and the nodes it reads
    (after the plan's replacements)."""
    unmatched = {j for j, name in enumerate(after.names) if name not in before.index}
    by_input: dict[str, list[int]] = {}  # candidates by a node they read: linear, not quadratic
    for j in sorted(unmatched):
        for r in after.inputs[j]:
            by_input.setdefault(after.names[r], []).append(j)
    edits = [e for e in plan.get("edits", []) if isinstance(e, dict)]
    replaced = {e["Replace"]["node"]: e["Replace"]["with"] for e in edits if "Replace" in e}
    new_names: dict[int, str] = {}

    def ref_name(r: dict[str, Any], depth: int = 0) -> str | None:
        if "Old" in r:
            i = r["Old"]
            if i in replaced and depth < 64:
                return ref_name(replaced[i], depth + 1)
            return str(before.names[i])
        return new_names.get(r.get("New", -1))

    def arg_names(a: Any, out: list[str]) -> None:
        if not isinstance(a, dict):
            return
        if "Ref" in a:
            name = ref_name(a["Ref"])
            if name is not None:
                out.append(name)
        elif "FromKwarg" in a:
            fk = a["FromKwarg"]
            for k, v in before.nodes[fk["node"]][4]:
                if k == fk["key"]:
                    refs: list[int] = []
                    _refs(v, refs)
                    out.extend(ref_name({"Old": r}) or "" for r in refs)
        elif "List" in a:
            for x in a["List"]:
                arg_names(x, out)

    origins: dict[int, int] = {}
    for edit in edits:
        ins = edit.get("Insert")
        if not ins:
            continue
        names: list[str] = []
        for a in ins["args"]:
            arg_names(a, names)
        for _, a in ins["kwargs"]:
            arg_names(a, names)
        callee = ins["callee"]
        target = (
            before.targets[callee["Target"]][0] if isinstance(callee, dict) and "Target" in callee else None
        )
        want = set(names)

        def score(j: int, want: set[str] = want, target: str | None = target) -> tuple[int, int]:
            got = {after.names[r] for r in after.inputs[j]}
            return (int(target is None or after.target(j) == target), len(got & want) - len(got ^ want))

        if not unmatched:
            break
        near = {j for n in want for j in by_input.get(n, ()) if j in unmatched}
        j = max(sorted(near or unmatched), key=score)
        unmatched.discard(j)
        new_names[ins["id"]] = after.names[j]
        origins[j] = ins["origin"]
    return origins, replaced


def regions(before: _Table, after: _Table, plan: dict[str, Any], report: Report) -> list[Region]:
    """The region of every decision that changed the graph (re-inplaced or cloned)."""
    origins, replaced = _new_node_origins(before, after, plan)
    by_origin: dict[int, list[int]] = {}
    for j, o in origins.items():
        by_origin.setdefault(o, []).append(j)
    out = []
    for d in report.decisions:
        if d.action == "left" or d.node not in before.index:
            continue
        af = before.index[d.node]
        r = Region(d)
        b = r.before
        ok = _add(b, [af], "call")
        ok = ok and _add(b, (before.index[m] for m in d.moved if m in before.index), "moved")
        readers = [before.index[c.reader] for c in d.clones if c.reader and c.reader in before.index]
        ok = ok and _add(b, readers, "reader")
        getitems = before.users[af]
        ok = ok and _add(b, getitems, "getitem")
        writebacks: list[int] = []
        frontier = list(getitems)
        for _ in range(4):  # scatter chains into a copy_
            frontier = [
                u for x in frontier for u in before.users[x] if _is_writeback(before.target(u)) and u not in b
            ]
            writebacks += frontier
        ok = ok and _add(b, writebacks, "writeback")
        ok = ok and _add(b, before.inputs[af], "operand")
        ok = ok and _add(b, (u for x in getitems for u in before.users[x][:_DOWNSTREAM]), "reader")
        for x in list(b):
            if b[x] == "writeback":
                ok = ok and _add(b, before.inputs[x], "operand")
        for i, role in list(b.items()):
            if before.names[i] not in after.index:
                b[i] = "removed" if role in ("getitem", "writeback") else role
        # After: what survives, plus what the rewrite inserted for this node.
        a = r.after
        new_for = by_origin.get(af, [])
        call = [j for j in new_for if after.target(j) == d.op]
        ok = _add(a, call, "call") and ok
        ok = _add(a, (j for j in new_for if j not in a), "clone" if d.clones else "new") and ok
        for i, role in b.items():
            kept = after.index.get(before.names[i])
            if kept is not None:
                ok = _add(a, [kept], role) and ok
        for i in b:  # a removed node: what replaced it
            if before.names[i] in after.index or i == af:
                continue
            calls = [
                j for j in by_origin.get(i, []) if after.target(j) == before.target(i).partition("(")[2][:-1]
            ]
            ok = _add(a, calls, "reader") and ok
            with_ = replaced.get(i, {}).get("Old")
            if with_ is not None and before.names[with_] in after.index:
                ok = _add(a, [after.index[before.names[with_]]], "operand") and ok
        r.truncated = not ok
        out.append(r)
    return out


@dataclass(frozen=True)
class _Look:
    fill: str = "#ffffff"
    dashed: bool = False
    text_color: str = "#222222"


#: Per role, the look before and after the rewrite (``None``: not drawn on that side).
_STYLE: dict[str, tuple[_Look | None, _Look | None]] = {
    "call": (_Look("#f6c1c1"), _Look("#b9e6b9")),
    "moved": (_Look("#ffd59e"), _Look("#ffd59e")),
    "reader": (_Look("#dde8ff"), _Look("#dde8ff")),
    "getitem": (_Look("#eeeeee"), _Look("#eeeeee")),
    "writeback": (_Look("#eeeeee"), _Look("#eeeeee")),
    "removed": (_Look("#eeeeee", dashed=True, text_color="#888888"), _Look()),
    "operand": (_Look(), _Look()),
    "clone": (_Look(), _Look("#fff3a0")),
    "new": (_Look(), _Look("#d8f0d8")),
}


def _drawing(t: _Table, roles: dict[int, str], side: int, title: str) -> str:
    boxes = []
    for i in sorted(roles):
        role = roles[i]
        look = _STYLE.get(role, (_Look(), _Look()))[side] or _Look()
        boxes.append(
            Box(
                key=i,
                lines=(t.names[i], f"{t.target(i)[:60]}  #{i}"),
                fill=look.fill,
                dashed=look.dashed,
                text_color=look.text_color,
                stroke_width=2.0 if role == "call" and side == 1 else 1.0,
                tooltip=t.source(i) or t.target(i),
            )
        )
    arrows = []
    for i in sorted(roles):
        arrows += [Arrow(r, i) for r in t.inputs[i] if r in roles]
        if side == 1 and roles[i] == "call":
            for k in sorted(roles):  # program order around the call
                if roles[k] in ("reader", "moved") and i not in t.inputs[k]:
                    src, dst = (k, i) if k < i else (i, k)
                    arrows.append(Arrow(src, dst, style="dotted", color="#999999", head=False))
            arrows += [
                Arrow(i, w, style="dashed", color="#c03030", label="writes", constraint=False)
                for w in t.written(i)
                if w in roles
            ]
    return draw(boxes, arrows, title)


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222}
h1{font-size:1.4em} h2{font-size:1.1em;margin:0}
table.index{border-collapse:collapse} table.index td,table.index th{border:1px solid #ccc;padding:2px 6px;text-align:left}
section.region{border:1px solid #bbb;border-radius:6px;padding:.6em 1em;margin:1.2em 0}
.sides{display:flex;gap:1em;flex-wrap:wrap} .side{flex:1 1 45%;min-width:300px;overflow:auto}
.side h3{font-size:.95em;margin:.3em 0} .side svg{max-width:100%;height:auto}
.side svg text{font:9px Helvetica,sans-serif;text-anchor:middle}
section.region{content-visibility:auto;contain-intrinsic-size:auto 500px}
.action-reinplaced{color:#1a7f1a} .action-cloned{color:#9a6a00}
code{background:#f3f3f3;padding:0 3px} .legend span{padding:0 6px;margin-right:4px;border-radius:3px}
.note{color:#666;font-size:.9em}
"""

# Filters the index and the regions by node or operator name as one types.
# Inline: the page loads nothing.
_FILTER = (
    '<p><input type="search" id="filter" size="40" placeholder="filter regions by node or operator">'
    ' <span id="shown"></span></p><script>'
    "const f=document.getElementById('filter'),shown=document.getElementById('shown');"
    "f.addEventListener('input',()=>{const q=f.value.toLowerCase();let n=0;"
    "for(const s of document.querySelectorAll('section.region')){"
    "const hit=!q||(s.dataset.node+' '+s.dataset.op).toLowerCase().includes(q);"
    "s.hidden=!hit;if(hit){n++;if(q)s.querySelector('details').open=true;}}"
    "for(const a of document.querySelectorAll('table.index a')){"
    "a.hidden=!!q&&!a.textContent.toLowerCase().includes(q)&&"
    "!a.closest('tr').cells[0].textContent.toLowerCase().includes(q);}"
    "shown.textContent=q?n+' regions match':'';});"
    "</script>"
)

_LEGEND = (
    '<p class="legend"><span style="background:#f6c1c1">auto_functionalized call</span>'
    '<span style="background:#b9e6b9">in-place call</span><span style="background:#fff3a0">clone</span>'
    '<span style="background:#ffd59e">moved reader</span><span style="background:#dde8ff">reader</span>'
    '<span style="background:#eee;border:1px dashed #888">removed (getitem, write-back)</span>'
    " <b>#k</b> is the node's position in its graph.</p>"
)


def _decision_html(d: Decision) -> Iterator[str]:
    e = html.escape
    yield (
        f'<p><span class="action action-{e(d.action)}">{e(d.action)}</span> by rule <code>{e(d.rule)}</code>'
        f" &middot; <code>{e(d.op)}</code> ({e(d.form)})</p>"
    )
    if d.source:
        yield f'<p class="note">source: <code>{e(d.source)}</code></p>'
    reasons: list[str] = []
    if d.moved:
        reasons.append(f"moved before the call instead of cloning: {e(', '.join(d.moved))}")
    if d.scatters_removed:
        reasons.append(f"write-back scatters removed: {d.scatters_removed}")
    for c in d.clones:
        size = ", " + e(c.size_text())
        where = f" (reader at <code>{e(c.reader_source)}</code>)" if c.reader_source else ""
        reasons.append(f"clone <code>{e(c.arg)}</code>{size}: {e(c.reason)}{where}")
    if d.reason:
        reasons.append(e(d.reason))
    if not reasons:
        reasons.append("no later node reads the old value: written in place")
    yield '<ul class="reasons">' + "".join(f"<li>{r}</li>" for r in reasons) + "</ul>"


def _anchor(name: str) -> str:
    return "r-" + re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def render_html(g: _core.Graph, *, title: str, node: str | None = None) -> str:
    """The page for graph ``g``: a summary, an index of the rewritten regions
    and each region drawn before and after the rewrite (only ``node``'s
    when given).

    Raises:
        DrawError: a region could not be drawn.
    """
    import json

    rewritten, native_plan = g.rewritten()
    plan = {"edits": json.loads(native_plan.edits_json())}
    report = Report.from_plan(native_plan)
    before, after = _Table(g), _Table(rewritten)
    regs = [r for r in regions(before, after, plan, report) if node is None or r.decision.node == node]
    svgs: list[str] = []
    try:
        for r in regs:
            svgs.append(_drawing(before, r.before, 0, f"before {r.decision.node}"))
            svgs.append(_drawing(after, r.after, 1, f"after {r.decision.node}"))
    except (ValueError, KeyError, IndexError) as err:
        raise DrawError(f"cannot draw the regions: {type(err).__name__}: {err}") from err
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>fxrewrite: {e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>fxrewrite: {e(title)}</h1>",
        f'<p class="summary">{e(report.summary())}</p>',
        f"<p>{len(before.names)} nodes before, {len(after.names)} after; {len(regs)} rewritten regions "
        f"shown (at most {MAX_REGION_NODES} nodes a side).</p>",
        _LEGEND,
        _FILTER if len(regs) > 1 else "",
    ]
    groups: dict[tuple[str, str], list[Region]] = {}
    for r in regs:
        groups.setdefault((r.decision.op, r.decision.action), []).append(r)
    parts.append(
        '<h2>Regions</h2><table class="index"><tr><th>operator</th><th>action</th><th>nodes</th></tr>'
    )
    for (op, action), rs in groups.items():
        links = ", ".join(f'<a href="#{_anchor(r.decision.node)}">{e(r.decision.node)}</a>' for r in rs)
        parts.append(f"<tr><td><code>{e(op)}</code></td><td>{e(action)}</td><td>{links}</td></tr>")
    parts.append("</table>")
    left = report.left
    if left:
        parts.append(f"<h2>Left for Inductor ({len(left)})</h2><ul>")
        parts += [f"<li><code>{e(d.node)}</code> ({e(d.op)}): {e(d.reason or '')}</li>" for d in left]
        parts.append("</ul>")
    for k, r in enumerate(regs):
        d = r.decision
        parts.append(
            f'<section class="region" id="{_anchor(d.node)}" data-node="{e(d.node)}" data-op="{e(d.op)}" '
            f'data-action="{e(d.action)}">'
            f"<h2>{e(d.node)}</h2>"
        )
        parts += list(_decision_html(d))
        if r.truncated:
            parts.append(f'<p class="note">region cut at {MAX_REGION_NODES} nodes a side</p>')
        parts.append(
            f"<details{' open' if k < OPEN_REGIONS else ''}><summary>drawings</summary>"
            f'<div class="sides"><div class="side before"><h3>before</h3>{svgs[2 * k]}</div>'
            f'<div class="side after"><h3>after</h3>{svgs[2 * k + 1]}</div></div></details></section>'
        )
    parts.append("</body></html>\n")
    return "\n".join(parts)
