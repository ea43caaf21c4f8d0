"""The verbs of the ``fxrewrite`` command (``inspect``, ``explain``,
``rewrite``, ``show``, ``check``, ``demo``): each takes the parsed arguments
and returns the exit code. The parser that dispatches to them is in ``cli``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from . import _core
from ._cli_io import (
    EXIT_OK,
    EXIT_REMAIN,
    UsageError,
    _emit,
    _files,
    _load,
    _one_file,
    _Progress,
    _skipped_json,
    _write_output,
)
from .report import Report


def _plan(args: argparse.Namespace, g: _core.Graph) -> tuple[_core.Plan, Report]:
    plan = g.plan(args.leave)
    return plan, Report.from_plan(plan)


def _info(g: _core.Graph) -> dict[str, str]:
    return dict(g.info)


def _stage(info: dict[str, str], af_nodes: int) -> str:
    """Where the graph stands: ``after fxrewrite`` for the output of
    ``fxrewrite rewrite`` (its ``rewritten_by``) or a ``-after.fxir`` the pass
    saved, else ``before fxrewrite`` while it holds auto_functionalized nodes."""
    origin = info.get("origin", "")
    if info.get("rewritten_by") or origin.endswith("-after"):
        left = f", {af_nodes} auto_functionalized node(s) left to Inductor" if af_nodes else ""
        return f"after fxrewrite{left}"
    return "before fxrewrite" if af_nodes else "no auto_functionalized nodes"


def _cmd_inspect(args: argparse.Namespace) -> int:
    files, skipped = _files(args)
    progress = _Progress(len(files), "inspect")
    rows: list[dict[str, Any]] = []
    for f in files:
        g = _load(args, f)
        summary = json.loads(g.inspect_json())
        _, report = _plan(args, g)
        info = _info(g)
        mutated = summary["mutated_inputs"] or [m for m in info.get("mutated_inputs", "").split(",") if m]
        rows.append(
            {
                "file": str(f),
                **summary,
                "mutated_inputs": mutated,
                "would": {
                    "reinplace": report.reinplaced,
                    "clone": report.cloned,
                    "clones": len(report.clones),
                    "leave": len(report.left),
                    "move_readers": report.moved,
                    "remove_writebacks": report.writebacks_removed_in_all,
                },
                "stage": _stage(info, sum(c["count"] for c in summary["auto_functionalized"])),
                "info": info,
            }
        )
        progress.step(str(f))

    def text() -> str:
        out = []
        for r in rows:
            out.append(
                f"{r['file']}: {r['stage']}: {r['nodes']} nodes, {r['inputs']} inputs, "
                f"{r['targets']} distinct targets"
            )
            if r["info"].get("origin"):
                then = ", then rewritten by `fxrewrite rewrite`" if r["info"].get("rewritten_by") else ""
                out.append(
                    f"  from: {r['info']['origin']} (torch {r['info'].get('torch_version', '?')}){then}"
                )
            if r["auto_functionalized"]:
                out.append(f"  {'operator':48} {'form':>4} {'nodes':>6}")
                for c in r["auto_functionalized"]:
                    out.append(f"  {c['op']:48} {c['form']:>4} {c['count']:>6}")
            else:
                out.append("  no auto_functionalized nodes")
            out.append(f"  mutated graph inputs: {', '.join(r['mutated_inputs']) or 'none'}")
            w = r["would"]
            out.append(
                f"  fxrewrite would: re-inplace {w['reinplace']}, clone in {w['clone']} ({w['clones']} clones), "
                f"leave {w['leave']}, move {w['move_readers']} readers, remove {w['remove_writebacks']} write-backs"
            )
        return "\n".join(out)

    _emit(args, rows + _skipped_json(skipped), text)
    return EXIT_OK


def _decision_lines(d: Any) -> list[str]:
    where = f"  [{d.source}]" if d.source else ""
    lines = [f"{d.node} ({d.op}, {d.form}): {d.action}{where}"]
    if d.action == "left":
        lines.append(f"    left for Inductor: {d.reason}")
    if d.moved:
        lines.append(f"    moved before the call instead of cloning: {', '.join(d.moved)}")
    if d.scatters_removed:
        lines.append(f"    write-back scatters removed: {d.scatters_removed}")
    for c in d.clones:
        lines.append(f"    clone {c.arg}, {c.size_text()}: {c.reason}")
        if c.reader_source:
            lines.append(f"      reader at {c.reader_source}")
    if d.action == "reinplaced" and not d.moved and not d.scatters_removed:
        lines.append("    no later node reads the old value: written in place")
    return lines


def _cmd_explain(args: argparse.Namespace) -> int:
    f = _one_file(args)
    g = _load(args, f)
    _, report = _plan(args, g)
    decisions = report.decisions
    if args.node:
        decisions = [d for d in decisions if d.node == args.node]
        if not decisions:
            names = ", ".join(d.node for d in report.decisions[:10]) or "none"
            raise UsageError(f"{f}: no auto_functionalized node named {args.node!r} (there are: {names})")

    if args.html:
        from .htmlview import DrawError, render_html

        try:
            page = render_html(g, title=str(f), node=args.node)
        except (DrawError, OSError) as e:
            raise UsageError(f"--html: {e}") from e
        _write_output(args.html, page.encode())

    def text() -> str:
        if not decisions:
            return f"{f}: no auto_functionalized nodes"
        lines = [line for d in decisions for line in _decision_lines(d)]
        if args.html:
            lines.append(f"wrote {args.html}")
        return "\n".join(lines)

    # One to_dict for all (once per decision made explain quadratic: minutes at 10^5 nodes).
    keep = {d.node for d in decisions}
    data = [x for x in report.to_dict()["decisions"] if x["node"] in keep]
    _emit(args, data, text)
    return EXIT_OK


def _cmd_rewrite(args: argparse.Namespace) -> int:
    f = _one_file(args)
    g = _load(args, f)
    rewritten, plan = g.rewritten(args.leave)
    report = Report.from_plan(plan)
    info = [*g.info, ("rewritten_by", "fxrewrite")]
    _write_output(args.output, rewritten.write(info))

    def text() -> str:
        lines = [report.summary(), f"wrote {args.output} ({len(rewritten)} nodes, was {len(g)})"]
        lines += [
            line for d in report.decisions if d.clones or d.action == "left" for line in _decision_lines(d)
        ]
        return "\n".join(lines)

    _emit(args, {"output": args.output, "report": report.to_dict()}, text)
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    f = _one_file(args)
    g = _load(args, f)
    text = g.show()
    _emit(args, {"file": str(f), "graph": text}, lambda: text.rstrip("\n"))
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    files, skipped = _files(args)
    progress = _Progress(len(files), "check")
    remaining = []
    for f in files:
        _, report = _plan(args, _load(args, f))
        for d in report.left:
            remaining.append({"file": str(f), "node": d.node, "op": d.op, "form": d.form, "reason": d.reason})
        progress.step(str(f))

    def text() -> str:
        unread = f" ({len(skipped)} skipped, see the warnings)" if skipped else ""
        if not remaining:
            return f"ok: every auto_functionalized node in {len(files)} graph(s) would be removed{unread}"
        lines = [f"{len(remaining)} auto_functionalized node(s) would remain{unread}:"]
        lines += [f"  {r['file']}: {r['node']} ({r['op']}, {r['form']}): {r['reason']}" for r in remaining]
        return "\n".join(lines)

    data = {"files": len(files), "remaining": remaining, "skipped": _skipped_json(skipped)}
    _emit(args, data, text)
    return EXIT_REMAIN if remaining else EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return EXIT_OK if run_demo(layers=args.layers, tokens=args.tokens, v2=args.v2) else EXIT_REMAIN
