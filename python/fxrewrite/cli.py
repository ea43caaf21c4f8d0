"""The ``fxrewrite`` command line tool.

Subcommands: ``demo`` (the first thing to run), and for saved graphs
``inspect``, ``explain``, ``rewrite``, ``show`` and ``check``. Exit codes:
0 success, 1 ``check`` found nodes that would remain, 2 bad usage or
unreadable input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

EPILOG = """examples:
  fxrewrite demo                      compile a small model with and without fxrewrite
  fxrewrite demo --layers 8 --tokens 32
"""


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return 0 if run_demo(layers=args.layers, tokens=args.tokens) else 1


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with a help text and an example on every level."""
    p = argparse.ArgumentParser(
        prog="fxrewrite",
        description="Turn torch.compile's auto_functionalized nodes back into safe in-place calls.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="compile a small decoder on mutating custom ops with and without fxrewrite",
        description="Builds a small decoder on mutating custom ops (rms_norm into an out buffer, fused "
        "add+rms_norm, silu_and_mul), compiles it on the CPU with plain Inductor and with fxrewrite, checks "
        "both against eager and prints what the post-grad passes did.",
        epilog="example:\n  fxrewrite demo --layers 8",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    demo.add_argument("--tokens", type=int, default=8, help="tokens in the batch (default 8)")
    demo.set_defaults(func=_cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
