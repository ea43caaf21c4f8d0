"""The ``fxrewrite`` command line tool.

``demo`` compiles a small model with and without fxrewrite. ``inspect``,
``explain``, ``rewrite``, ``show`` and ``check`` work on saved graphs
(``.fxir`` files, directories of them, ``torch.export`` ``.pt2`` archives);
on ``.fxir`` input they run the Rust engine without importing torch.

Exit codes: 0 success; 1 ``check`` found nodes that would remain (or ``demo``
disagreed with eager); 2 bad usage or unreadable input (one line on stderr,
never a traceback).

The options every verb shares (``--json``, ``--import``, ``--max-size``) go
before or after the verb. Only regular files are read, each up to a size
limit checked before reading; inside directories, entries that cannot be read
that way are skipped with a warning.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import os
import shlex
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import _core
from .fxir import (
    DEFAULT_MAX_FILE_SIZE,
    EXPORT_SUFFIXES,
    MAX_FILE_SIZE_ENV,
    Skipped,
    find_graphs,
    format_size,
    max_file_size,
    parse_size,
    reason_of,
)
from .report import Report

EXIT_OK, EXIT_REMAIN, EXIT_USAGE = 0, 1, 2

EPILOG = """examples:
  fxrewrite demo                               compile a small model with and without fxrewrite
  FXREWRITE_SAVE_DIR=graphs python run.py      save every graph the pass sees (before/after)
  fxrewrite inspect graphs/                    what each saved graph holds and what the pass would do
  fxrewrite explain g.fxir --node auto_functionalized_v2_3
  fxrewrite explain g.fxir --html g.html       each rewritten region drawn before and after
  fxrewrite rewrite g.fxir -o g.rewritten.fxir
  fxrewrite show g.fxir                        the graph as FX prints it, for diffing
  fxrewrite check graphs/ || echo "auto_functionalized nodes would remain"
  fxrewrite --import mylib inspect model.pt2   a torch.export archive calling operators of mylib

--json, --import and --max-size work before or after the command. Only
regular files are read (a symlink to one is followed), each up to the size
limit (default 4 GiB; --max-size or FXREWRITE_MAX_FILE_SIZE, e.g. 512M, 8G).
A file named on the command line that cannot be read that way is an error
(exit 2); inside a directory, such an entry (a FIFO, a device, a broken link,
an oversized file, a subdirectory that cannot be listed) is skipped with a
warning on stderr (and listed with --json) and the other files are still read.

exit codes: 0 ok; 1 check found nodes that would remain (demo: a mismatch
with eager); 2 unreadable input, unwritable output or bad usage (one line on
stderr).
"""


class UsageError(Exception):
    """Bad input: reported on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line, ending in a help command that works."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see: {self.prog} --help)\n")


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return n


def _add_shared(p: argparse.ArgumentParser, *, prefix: str, reads: bool) -> None:
    """The options every verb takes. The top-level parser stores them under
    ``prefix`` so that a verb's own defaults do not overwrite them."""
    p.add_argument(
        "--json", dest=f"{prefix}json", action="store_true", help="print JSON for machines instead of tables"
    )
    if not reads:
        return
    p.add_argument(
        "--import",
        dest=f"{prefix}imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (the library defining the graph's custom operators; needed for .pt2)",
    )
    p.add_argument(
        "--max-size",
        dest=f"{prefix}max_size",
        type=_size,
        default=None,
        metavar="SIZE",
        help=f"read no file larger than SIZE (bytes, or K/M/G/T: 512M, 8G; default {MAX_FILE_SIZE_ENV} "
        f"or {format_size(DEFAULT_MAX_FILE_SIZE)})",
    )


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


def _rerun(args: argparse.Namespace, option: str, value: str) -> str:
    """The command line of this run with ``option value`` added at the end of
    the verb's options (``--max-size`` replacing any given), quoted for a shell."""
    argv: list[str] = list(args.argv)
    at = argv.index("--") if "--" in argv else len(argv)
    head, tail = argv[:at], argv[at:]
    if option == "--max-size":
        kept: list[str] = []
        skip = False
        for a in head:
            if skip:
                skip = False
            elif a == option:
                skip = True
            elif not a.startswith(f"{option}="):
                kept.append(a)
        head = kept
    return shlex.join(["fxrewrite", *head, option, value, *tail])


def _size_text(n: int) -> str:
    """A size ``--max-size`` reads back: the next power of two above ``n``, in the largest whole unit."""
    p = 1 << max(n, 1).bit_length()
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if p >= 1 << shift:
            return f"{p >> shift}{unit}"
    return str(p)


def _unreadable(args: argparse.Namespace, path: Path, e: OSError) -> str:
    """One line naming ``path`` and why it cannot be read, with a command that reads it when one would."""
    if e.errno == errno.ENOENT:
        return f"{path}: no such file"
    if e.errno == errno.EFBIG:
        size = _file_size(path)
        if size is not None:
            return f"{path}: {reason_of(e)}; to read it: {_rerun(args, '--max-size', _size_text(size))}"
    return f"{path}: {reason_of(e)}"


def _file_size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _load(args: argparse.Namespace, path: Path) -> _core.Graph:
    from .fxir import native_from_export, read_native

    try:
        if path.suffix in EXPORT_SUFFIXES:
            hint = f"rerun with MODULE the library that defines it: {_rerun(args, '--import', 'MODULE')}"
            return native_from_export(path, args.max_size, import_hint=hint)
        return read_native(path, args.max_size)
    except _core.FileFormatError as e:
        message = str(e)
        raise UsageError(message if message.startswith(f"{path}: ") else f"{path}: {message}") from e
    except OSError as e:
        raise UsageError(_unreadable(args, path, e)) from e


def _files(args: argparse.Namespace) -> tuple[list[Path], list[Skipped]]:
    """The graphs named or found under directories, and what was skipped
    there (each skip is warned about on stderr)."""
    files, skipped = find_graphs(args.files, args.max_size)
    for s in skipped:
        line = f"{s.path}: {s.reason}"
        if s.size is not None:
            line += f"; to read it: {_rerun(args, '--max-size', _size_text(s.size))}"
        print(f"fxrewrite {args.command}: warning: skipped {line}", file=sys.stderr)
    if not files:
        raise UsageError("no saved graphs found (looked for *.fxir and *.pt2)")
    return files, skipped


def _one_file(args: argparse.Namespace) -> Path:
    """The FILE of a verb that reads one graph; a directory is an error naming how to list it."""
    path = Path(args.file)
    if path.is_dir():
        raise UsageError(
            f"{path}: is a directory, one saved graph file was expected; to list the graphs in it: "
            f"{shlex.join(['fxrewrite', 'inspect', str(path)])}"
        )
    return path


def _plan(g: _core.Graph) -> tuple[_core.Plan, Report]:
    plan = g.plan()
    return plan, Report.from_engine(json.loads(plan.report_json()))


def _info(g: _core.Graph) -> dict[str, str]:
    return dict(g.info)


def _emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    out = json.dumps(data, indent=2) if args.json else text()
    try:
        print(out, flush=True)
    except BrokenPipeError:
        raise
    except OSError as e:
        raise UsageError(f"cannot write to standard output: {reason_of(e)}") from e


def _skipped_json(skipped: list[Skipped]) -> list[dict[str, str]]:
    return [{"file": str(s.path), "skipped": s.reason} for s in skipped]


def _write_output(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path``; any failure is a ``UsageError`` naming the path and the reason."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    try:
        # O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of hanging.
        fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0), 0o666)
    except OSError as e:
        why = "a FIFO with no reader" if e.errno == errno.ENXIO else reason_of(e)
        raise UsageError(f"{path}: cannot write the output: {why}") from e
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as e:
        raise UsageError(f"{path}: cannot write the output: {reason_of(e)}") from e
    finally:
        try:
            os.close(fd)
        except OSError as e:
            raise UsageError(f"{path}: cannot write the output: {reason_of(e)}") from e


def _cmd_inspect(args: argparse.Namespace) -> int:
    files, skipped = _files(args)
    progress = _Progress(len(files), "inspect")
    rows: list[dict[str, Any]] = []
    for f in files:
        g = _load(args, f)
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
        size = f", {c.bytes} bytes" if c.bytes is not None else ""
        lines.append(f"    clone {c.arg}{size}: {c.reason}")
        if c.reader_source:
            lines.append(f"      reader at {c.reader_source}")
    if d.action == "reinplaced" and not d.moved and not d.scatters_removed:
        lines.append("    no later node reads the old value: written in place")
    return lines


def _cmd_explain(args: argparse.Namespace) -> int:
    f = _one_file(args)
    g = _load(args, f)
    _, report = _plan(g)
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
    rewritten, plan = g.rewritten()
    report = Report.from_engine(json.loads(plan.report_json()))
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
        _, report = _plan(_load(args, f))
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

    return EXIT_OK if run_demo(layers=args.layers, tokens=args.tokens) else EXIT_REMAIN


def _sub(
    sub: Any,
    name: str,
    help_: str,
    description: str,
    examples: Sequence[str],
    func: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help_,
        description=textwrap.fill(description, 79),
        epilog="examples:\n" + "".join(f"  {e}\n" for e in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_shared(p, prefix="", reads=name != "demo")
    p.set_defaults(func=func)
    return p


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with a help text and an example on every level."""
    p = _Parser(
        prog="fxrewrite",
        description=textwrap.fill(
            "Turn torch.compile's auto_functionalized nodes back into safe in-place calls, "
            "and inspect saved graphs (.fxir files, directories of them, torch.export .pt2 archives).",
            79,
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_shared(p, prefix="top_", reads=True)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = _sub(
        sub,
        "demo",
        "compile a small decoder on mutating custom ops with and without fxrewrite",
        "Builds a small decoder on mutating custom ops (rms_norm into an out buffer, fused add+rms_norm, "
        "silu_and_mul), compiles it on the CPU with plain Inductor and with fxrewrite, checks both against "
        "eager and prints what the post-grad passes did.",
        ["fxrewrite demo", "fxrewrite demo --layers 8 --tokens 16"],
        _cmd_demo,
    )
    d.add_argument("--layers", type=_positive, default=4, help="decoder layers (default 4)")
    d.add_argument("--tokens", type=_positive, default=8, help="tokens in the batch (default 8)")
    i = _sub(
        sub,
        "inspect",
        "summarise saved graphs",
        "Per file: nodes, auto_functionalized nodes per operator and form (v1/v2), mutated graph inputs, "
        "and what the pass would do. Directories are searched recursively for *.fxir and *.pt2; an entry "
        "there that is not a regular file, is over the size limit or cannot be listed is skipped with a "
        "warning on stderr "
        '(with --json, also listed as {"file": ..., "skipped": reason}).',
        [
            "fxrewrite inspect graphs/",
            "fxrewrite inspect model.pt2 --import mylib --json",
            "fxrewrite --max-size 16G inspect huge.fxir",
        ],
        _cmd_inspect,
    )
    i.add_argument("files", nargs="+", metavar="FILE", help=".fxir file, .pt2 archive or directory")
    e = _sub(
        sub,
        "explain",
        "say what the pass decides for each auto_functionalized node, and why",
        "Per auto_functionalized node: re-inplace, move readers, clone or leave, and the reason, naming the "
        "node that reads the old value (and its source line) when a clone is kept.",
        [
            "fxrewrite explain g.fxir",
            "fxrewrite explain g.fxir --node auto_functionalized_v2_3",
            "fxrewrite explain g.fxir --html g.html",
        ],
        _cmd_explain,
    )
    e.add_argument("file", metavar="FILE", help="one .fxir file or .pt2 archive")
    e.add_argument("--node", metavar="NAME", help="only this node")
    e.add_argument(
        "--html",
        metavar="OUT",
        help="also write OUT, one self-contained HTML page drawing each rewritten region before and after "
        "(needs Graphviz's dot)",
    )
    r = _sub(
        sub,
        "rewrite",
        "write the rewritten graph and print the report",
        "Runs the engine on FILE, applies its plan to the saved graph and writes the result to OUT "
        "(exit 2, naming OUT and the reason, when it cannot be written).",
        ["fxrewrite rewrite g.fxir -o g.after.fxir"],
        _cmd_rewrite,
    )
    r.add_argument("file", metavar="FILE", help="one .fxir file or .pt2 archive")
    r.add_argument("-o", "--output", required=True, metavar="OUT", help="where to write the rewritten graph")
    s = _sub(
        sub,
        "show",
        "print a saved graph as FX prints graphs",
        "Prints the graph in the familiar torch.fx text form, so before and after can be read and diffed.",
        ["fxrewrite show g.fxir", "diff <(fxrewrite show before.fxir) <(fxrewrite show after.fxir)"],
        _cmd_show,
    )
    s.add_argument("file", metavar="FILE", help="one .fxir file or .pt2 archive")
    c = _sub(
        sub,
        "check",
        "for CI: fail when auto_functionalized nodes would remain",
        "Exit 0 when every auto_functionalized node of every graph would be removed, 1 when any would "
        "remain (each listed with its operator and the reason), 2 for unreadable input or bad usage. "
        "Directories are searched recursively for *.fxir and *.pt2; an entry there that is not a regular "
        "file, is over the size limit or cannot be listed is skipped with a warning on stderr (and listed under "
        '"skipped" with --json) and does not change the exit code; a file named on the command line that '
        "cannot be read is exit 2.",
        ["fxrewrite check graphs/", "fxrewrite check --json graphs/ model.pt2 --import mylib"],
        _cmd_check,
    )
    c.add_argument("files", nargs="+", metavar="FILE", help=".fxir file, .pt2 archive or directory")
    return p


def _merge_shared(args: argparse.Namespace) -> None:
    """Folds the shared options given before the verb into the verb's own:
    ``--json`` if either, ``--import`` both lists, ``--max-size`` the last one
    typed, then ``FXREWRITE_MAX_FILE_SIZE``, then the default."""
    args.json = bool(getattr(args, "json", False) or args.top_json)
    args.imports = [*args.top_imports, *getattr(args, "imports", [])]
    size = getattr(args, "max_size", None)
    if size is None:
        size = args.top_max_size
    if size is None:
        try:
            size = max_file_size()
        except ValueError as e:
            raise UsageError(str(e)) from e
    args.max_size = size


def _quiet_stdout() -> None:
    """Points stdout at /dev/null so that the interpreter's final flush of a
    broken or full stdout prints nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help is 0, bad usage 2
        return int(e.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    args.argv = argv
    command = f"fxrewrite {args.command}"
    try:
        _merge_shared(args)
        for module in args.imports:
            try:
                importlib.import_module(module)
            except Exception as e:
                raise UsageError(f"--import {module}: {type(e).__name__}: {e}") from e
        return int(args.func(args))
    except (UsageError, _core.FxrewriteError) as e:
        print(f"{command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_OK
    except OSError as e:  # anything the verbs did not name themselves: still one line, exit 2
        where = f"{e.filename}: " if e.filename else ""
        print(f"{command}: {where}{reason_of(e)}", file=sys.stderr)
        return EXIT_USAGE
    except MemoryError:
        print(f"{command}: out of memory", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
