"""The ``fxrewrite`` command line tool.

``demo`` compiles a small model with and without fxrewrite. ``inspect``,
``explain``, ``rewrite``, ``show`` and ``check`` work on saved graphs
(``.fxir`` files, directories of them, ``torch.export`` ``.pt2`` archives);
on ``.fxir`` input they run the Rust engine without importing torch.

Exit codes: 0 success; 1 ``check`` found nodes that would remain (or ``demo``
disagreed with eager); 2 bad usage or unreadable input (one line on stderr,
never a traceback).

The options every verb shares (``--json``, ``--import``, ``--leave``, ``--max-size``) go
before or after the verb. Only regular files are read, each up to a size
limit checked before reading; inside directories, entries that cannot be read
that way are skipped with a warning.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from . import _core
from ._cli_commands import _cmd_check, _cmd_demo, _cmd_explain, _cmd_inspect, _cmd_rewrite, _cmd_show
from ._cli_io import EXIT_OK, EXIT_REMAIN, EXIT_USAGE, UsageError
from .fxir import DEFAULT_MAX_FILE_SIZE, MAX_FILE_SIZE_ENV, format_size, max_file_size, parse_size, reason_of
from .leave import LEAVE_ENV, leave_from_env, op_names

__all__ = ["EXIT_OK", "EXIT_REMAIN", "EXIT_USAGE", "UsageError", "build_parser", "main"]

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
  fxrewrite explain g.fxir --leave _C::rotary_embedding
                                               as the pass would with Pass(leave=...) or FXREWRITE_LEAVE

--json, --import, --leave and --max-size work before or after the command. Only
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
        help="import MODULE first (the library defining the graph's custom operators; needed for .pt2); "
        "searched for in the current directory too, as python -m would",
    )
    p.add_argument(
        "--leave",
        dest=f"{prefix}leave",
        action="append",
        default=[],
        metavar="OP",
        help="always leave operator OP to Inductor (ns::name or ns::name.overload; repeatable; added to "
        f"{LEAVE_ENV}): for a kernel that breaks its own schema, e.g. writes outside the view it is given",
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
    p.add_argument("--version", action="version", version=version_text(), help="print the version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = _sub(
        sub,
        "demo",
        "compile a small decoder on mutating custom ops with and without fxrewrite",
        "Builds a small decoder on mutating custom ops (rms_norm into an out buffer, fused add+rms_norm, "
        "a rotary embedding writing in place into the q and k slices of the qkv projection, silu_and_mul), "
        "compiles it on the CPU with plain Inductor and with fxrewrite, checks both against eager and prints "
        "what the post-grad passes did: the auto_functionalized nodes and the clones each leaves. It compiles "
        "in the v1 form vLLM and SGLang use (enable_auto_functionalized_v2=False), where Inductor alone "
        "copies q and k before the rotary writes them and fxrewrite does not; --v2 for torch's default form.",
        ["fxrewrite demo", "fxrewrite demo --layers 8 --tokens 16", "fxrewrite demo --v2"],
        _cmd_demo,
    )
    d.add_argument("--layers", type=_positive, default=4, help="decoder layers (default 4)")
    d.add_argument("--tokens", type=_positive, default=8, help="tokens in the batch (default 8)")
    d.add_argument(
        "--v2",
        action="store_true",
        help="compile in the auto_functionalized_v2 form (torch's default) instead of v1",
    )
    i = _sub(
        sub,
        "inspect",
        "summarise saved graphs",
        "Per file: before or after fxrewrite, nodes, auto_functionalized nodes per operator and form (v1/v2), "
        "mutated graph inputs, "
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
        "(no system program needed; opens offline)",
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


def version_text() -> str:
    """``fxrewrite X.Y.Z``, with the Rust engine's version when it differs
    (a stale build of the extension)."""
    from . import __version__

    engine = getattr(_core, "__version__", None)
    text = f"fxrewrite {__version__}"
    if engine and engine != __version__:
        text += f" (engine {engine})"
    return text


def _import_modules(modules: Sequence[str]) -> None:
    """Imports each ``--import`` module as ``python -m`` would find it: the
    current directory comes first on ``sys.path`` for the import (a console
    script's ``sys.path`` starts with its own directory instead), and is taken
    off again afterwards so that later imports (torch's) are not shadowed."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        for module in modules:
            try:
                importlib.import_module(module)
            except Exception as e:
                raise UsageError(f"--import {module}: {type(e).__name__}: {e}") from e
    finally:
        if added:
            try:
                sys.path.remove(cwd)
            except ValueError:
                pass


@contextlib.contextmanager
def _quiet_numpy_warning() -> Iterator[None]:
    """Silences torch's "Failed to initialize NumPy" warning, printed when
    numpy is not installed, which the command does not need: only for the
    command's run, not for the library's users."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Failed to initialize NumPy", category=UserWarning)
        yield


def _merge_shared(args: argparse.Namespace) -> None:
    """Folds the shared options given before the verb into the verb's own:
    ``--json`` if either, ``--import`` both lists, ``--max-size`` the last one
    typed, then ``FXREWRITE_MAX_FILE_SIZE``, then the default."""
    args.json = bool(getattr(args, "json", False) or args.top_json)
    args.imports = [*args.top_imports, *getattr(args, "imports", [])]
    try:
        args.leave = sorted({*op_names([*args.top_leave, *getattr(args, "leave", [])]), *leave_from_env()})
    except ValueError as e:
        raise UsageError(f"--leave: {e}") from e
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
        with _quiet_numpy_warning():
            _import_modules(args.imports)
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
