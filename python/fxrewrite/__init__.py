"""fxrewrite: turns torch.compile's auto_functionalized nodes back into safe in-place calls.

Use it in a compile::

    import torch, fxrewrite
    torch._inductor.config.post_grad_custom_post_pass = fxrewrite.pass_

or directly on a post-grad graph::

    report = fxrewrite.rewrite(gm.graph)
    print(report.summary())
"""

from __future__ import annotations

from ._core import (
    FileFormatError,
    FxrewriteError,
    InternalError,
    InvalidGraphError,
    UnsupportedGraphError,
)
from .pass_ import ComposedPass, Pass, compose, pass_
from .pipeline import rewrite
from .report import CloneNote, Decision, Report

__version__ = "0.1.0"

__all__ = [
    "CloneNote",
    "ComposedPass",
    "Decision",
    "FileFormatError",
    "FxrewriteError",
    "InternalError",
    "InvalidGraphError",
    "Pass",
    "Report",
    "UnsupportedGraphError",
    "__version__",
    "compose",
    "pass_",
    "rewrite",
]
