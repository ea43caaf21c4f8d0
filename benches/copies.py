"""Clones and ``copy_`` write-backs left by Inductor's passes versus by
fxrewrite on the test suite's programs, both forms, printed as docs/correctness.md's
Markdown table.

    python benches/copies.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import torch

import conftest  # noqa: F401  (registers the fxr_test operators)
from programs import PROGRAMS
from test_copy_counts import post_grad_counts


def main() -> None:
    print("| program | form | Inductor's clones / copies | fxrewrite's clones / copies |")
    print("| --- | --- | ---: | ---: |")
    for p in PROGRAMS:
        for v2 in (True, False):
            ours = "{} / {}".format(*post_grad_counts(p, use_fxrewrite=True, v2=v2))
            try:
                theirs = "{} / {}".format(*post_grad_counts(p, use_fxrewrite=False, v2=v2))
            except torch._inductor.exc.InductorError:
                theirs = "fails to compile"
            print(f"| {p.name} | {'v2' if v2 else 'v1'} | {theirs} | {ours} |")


if __name__ == "__main__":
    main()
