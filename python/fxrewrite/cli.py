"""The ``fxrewrite`` command line tool.

``demo`` compiles a small model with and without fxrewrite. ``inspect``,
``explain``, ``rewrite``, ``show`` and ``check`` work on saved graphs
(``.fxir`` files, directories of them, ``torch.export`` ``.pt2`` archives);
on ``.fxir`` input they run the Rust engine without importing torch.

Exit codes: 0 success; 1 ``check`` found nodes that would remain (or ``demo``
disagreed with eager); 2 bad usage or unreadable input.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import _core
from .report import Report

EXIT_OK, EXIT_REMAIN, EXIT_USAGE = 0, 1, 2

EPILOG = """examples:
  fxrewrite demo                          compile a small model with and without fxrewrite
  FXREWRITE_SAVE_DIR=graphs python run.py save every graph the pass sees (before/after)
  fxrewrite inspect graphs/               what each saved graph holds and what the pass would do
  fxrewrite explain g.fxir --node auto_functionalized_v2_3
  fxrewrite rewrite g.fxir -o g.rewritten.fxir
  fxrewrite show g.fxir                   the graph as FX prints it, for diffing
  fxrewrite check graphs/ || echo "auto_functionalized nodes would remain"
"""


class UsageError(Exception):
    """Bad input: reported on stderr, exit code 2."""


class _Progress:
    """A one-line progress display on stderr, only for interactive runs."""

    def __init__(self, total: int, label: str) -> None:
        self.total, self.label, self.done = total, label, 0
        self.enabled = total > 1 and sys.stderr.isatty()

    def step(self, what: str) -> None:
        self.done += 1
        if self.enabled:
            sys.stderr.write(f"\r{self.label} [{self.done}/{self.total}] {what[-60:]:<60}")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def _load(path: Path) -> _core.Graph:
    from .fxir import EXPORT_SUFFIXES, native_from_export, read_native

    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.suffix in EXPORT_SUFFIXES:
        return native_from_export(path)
    try:
        return read_native(path)
    except _core.FileFormatError as e:
        raise UsageError(f"{path}: {e}") from e
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror or e}") from e


def _files(paths: list[str]) -> list[Path]:
    from .fxir import expand_paths

    files = expand_paths(paths)
    if not files:
        raise UsageError("no saved graphs found (looked for *.fxir and *.pt2)")
    return files


def _plan(g: _core.Graph) -> tuple[dict[str, Any], Report]:
    plan = json.loads(g.plan_json())
    return plan, Report.from_engine(plan["report"])


def _info(g: _core.Graph) -> dict[str, str]:
    return dict(g.info)


def _emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(text())


def _cmd_inspect(args: argparse.Namespace) -> int:
    files = _files(args.files)
    progress = _Progress(len(files), "inspect")
    rows = []
    for f in files:
        g = _load(f)
        summary = json.loads(g.inspect_json())
        _, report = _plan(g)
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
                    "remove_writebacks": report.writebacks_removed,
                },
                "info": info,
            }
        )
        progress.step(str(f))

    def text() -> str:
        out = []
        for r in rows:
            out.append(
                f"{r['file']}: {r['nodes']} nodes, {r['inputs']} inputs, {r['targets']} distinct targets"
            )
            if r["info"].get("origin"):
                out.append(f"  from: {r['info']['origin']} (torch {r['info'].get('torch_version', '?')})")
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

    _emit(args, rows, text)
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
        size = f", {c.bytes} bytes" if c.bytes is not None else ""
        lines.append(f"    clone {c.arg}{size}: {c.reason}")
        if c.reader_source:
            lines.append(f"      reader at {c.reader_source}")
    if d.action == "reinplaced" and not d.moved and not d.scatters_removed:
        lines.append("    no later node reads the old value: written in place")
    return lines


def _cmd_explain(args: argparse.Namespace) -> int:
    (f,) = _files([args.file])
    _, report = _plan(_load(f))
    decisions = report.decisions
    if args.node:
        decisions = [d for d in decisions if d.node == args.node]
        if not decisions:
            names = ", ".join(d.node for d in report.decisions[:10]) or "none"
            raise UsageError(f"{f}: no auto_functionalized node named {args.node!r} (there are: {names})")

    def text() -> str:
        if not decisions:
            return f"{f}: no auto_functionalized nodes"
        return "\n".join(line for d in decisions for line in _decision_lines(d))

    _emit(args, [report.to_dict()["decisions"][report.decisions.index(d)] for d in decisions], text)
    return EXIT_OK


def _cmd_rewrite(args: argparse.Namespace) -> int:
    (f,) = _files([args.file])
    g = _load(f)
    rewritten, plan_json = g.rewritten()
    report = Report.from_engine(json.loads(plan_json)["report"])
    info = [*g.info, ("rewritten_by", "fxrewrite")]
    Path(args.output).write_bytes(rewritten.write(info))

    def text() -> str:
        lines = [report.summary(), f"wrote {args.output} ({len(rewritten)} nodes, was {len(g)})"]
        lines += [
            line for d in report.decisions if d.clones or d.action == "left" for line in _decision_lines(d)
        ]
        return "\n".join(lines)

    _emit(args, {"output": args.output, "report": report.to_dict()}, text)
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    (f,) = _files([args.file])
    g = _load(f)
    text = g.show()
    _emit(args, {"file": str(f), "graph": text}, lambda: text.rstrip("\n"))
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    files = _files(args.files)
    progress = _Progress(len(files), "check")
    remaining = []
    for f in files:
        _, report = _plan(_load(f))
        for d in report.left:
            remaining.append({"file": str(f), "node": d.node, "op": d.op, "form": d.form, "reason": d.reason})
        progress.step(str(f))

    def text() -> str:
        if not remaining:
            return f"ok: every auto_functionalized node in {len(files)} graph(s) would be removed"
        lines = [f"{len(remaining)} auto_functionalized node(s) would remain:"]
        lines += [f"  {r['file']}: {r['node']} ({r['op']}, {r['form']}): {r['reason']}" for r in remaining]
        return "\n".join(lines)

    _emit(args, {"files": len(files), "remaining": remaining}, text)
    return EXIT_REMAIN if remaining else EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return EXIT_OK if run_demo(layers=args.layers, tokens=args.tokens) else EXIT_REMAIN


def _sub(
    sub: Any, name: str, help_: str, description: str, example: str, func: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    p = sub.add_parser(
        name,
        help=help_,
        description=description,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print JSON for machines instead of tables")
    if name != "demo":
        p.add_argument(
            "--import",
            dest="imports",
            action="append",
            default=[],
            metavar="MODULE",
            help="import MODULE first (the library defining the graph's custom operators; needed for .pt2)",
        )
    p.set_defaults(func=func)
    return p


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with a help text and an example on every level."""
    p = argparse.ArgumentParser(
        prog="fxrewrite",
        description="Turn torch.compile's auto_functionalized nodes back into safe in-place calls, "
        "and inspect saved graphs (.fxir files, directories of them, torch.export .pt2 archives).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = _sub(
        sub,
        "demo",
        "compile a small decoder on mutating custom ops with and without fxrewrite",
        "Builds a small decoder on mutating custom ops (rms_norm into an out buffer, fused add+rms_norm, "
        "silu_and_mul), compiles it on the CPU with plain Inductor and with fxrewrite, checks both against "
        "eager and prints what the post-grad passes did.",
        "fxrewrite demo --layers 8",
        _cmd_demo,
    )
    d.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    d.add_argument("--tokens", type=int, default=8, help="tokens in the batch (default 8)")
    i = _sub(
        sub,
        "inspect",
        "summarise saved graphs",
        "Per file: nodes, auto_functionalized nodes per operator and form (v1/v2), mutated graph inputs, "
        "and what the pass would do.",
        "fxrewrite inspect graphs/ model.pt2",
        _cmd_inspect,
    )
    i.add_argument("files", nargs="+", metavar="FILE", help=".fxir file, .pt2 archive or directory")
    e = _sub(
        sub,
        "explain",
        "say what the pass decides for each auto_functionalized node, and why",
        "Per auto_functionalized node: re-inplace, move readers, clone or leave, and the reason, naming the "
        "node that reads the old value (and its source line) when a clone is kept.",
        "fxrewrite explain g.fxir --node auto_functionalized_v2_3",
        _cmd_explain,
    )
    e.add_argument("file", metavar="FILE")
    e.add_argument("--node", metavar="NAME", help="only this node")
    r = _sub(
        sub,
        "rewrite",
        "write the rewritten graph and print the report",
        "Runs the engine on FILE, applies its plan to the saved graph and writes the result to OUT.",
        "fxrewrite rewrite g.fxir -o g.after.fxir",
        _cmd_rewrite,
    )
    r.add_argument("file", metavar="FILE")
    r.add_argument("-o", "--output", required=True, metavar="OUT", help="where to write the rewritten graph")
    s = _sub(
        sub,
        "show",
        "print a saved graph as FX prints graphs",
        "Prints the graph in the familiar torch.fx text form, so before and after can be read and diffed.",
        "diff <(fxrewrite show before.fxir) <(fxrewrite show after.fxir)",
        _cmd_show,
    )
    s.add_argument("file", metavar="FILE")
    c = _sub(
        sub,
        "check",
        "for CI: fail when auto_functionalized nodes would remain",
        "Exit 0 when every auto_functionalized node of every graph would be removed, 1 when any would "
        "remain (each listed with its operator and the reason), 2 for unreadable input or bad usage.",
        "fxrewrite check graphs/",
        _cmd_check,
    )
    c.add_argument("files", nargs="+", metavar="FILE")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help is 0, bad usage 2
        return int(e.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        for module in getattr(args, "imports", []):
            try:
                importlib.import_module(module)
            except Exception as e:
                raise UsageError(f"--import {module}: {type(e).__name__}: {e}") from e
        return int(args.func(args))
    except UsageError as e:
        print(f"fxrewrite {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except _core.FxrewriteError as e:
        print(f"fxrewrite {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
