"""Clones left by Inductor's passes versus by fxrewrite on the test suite's
programs, both forms, printed as the README's Markdown table.

    python benches/copies.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import torch

import conftest  # noqa: F401  (registers the fxr_test operators)
from programs import PROGRAMS
from test_copy_counts import clones_after_post_grad


def main() -> None:
    print("| program | form | Inductor's clones | fxrewrite's clones |")
    print("| --- | --- | ---: | ---: |")
    for p in PROGRAMS:
        for v2 in (True, False):
            ours = clones_after_post_grad(p, use_fxrewrite=True, v2=v2)
            try:
                theirs = str(clones_after_post_grad(p, use_fxrewrite=False, v2=v2))
            except torch._inductor.exc.InductorError:
                theirs = "fails to compile"
            print(f"| {p.name} | {'v2' if v2 else 'v1'} | {theirs} | {ours} |")


if __name__ == "__main__":
    main()
