"""fxrewrite: turns torch.compile's auto_functionalized nodes back into safe in-place calls.

Use it in a compile::

    import torch, fxrewrite
    fxrewrite.install()     # both hooks: the pre pass and the rewrite

(``torch._inductor.config.post_grad_custom_post_pass = fxrewrite.pass_``
alone also works: it leaves calls whose arguments share memory to Inductor.)

``fxrewrite.last_report()`` then is the report of the latest graph compiled
with it in this process (also when Inductor's FX graph cache served the
graph; ``fxrewrite.reports()``: all of them). Or directly on a post-grad graph::

    report = fxrewrite.rewrite(gm.graph)
    print(report.summary())

Everything that needs torch is imported on first use, so the command line
tool reads and rewrites ``.fxir`` files without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._core import (
    DecodeError,
    FileFormatError,
    FxrewriteError,
    InternalError,
    InvalidGraphError,
    UnsupportedGraphError,
    VersionError,
)
from .report import CloneNote, Decision, Report, last_report, reports

if TYPE_CHECKING:
    from ._install import Installation, install
    from ._pre_pass import PrePass, pre_pass
    from .fxir import load, save
    from .inductor_pass import ComposedPass, Pass, compose, pass_
    from .pipeline import rewrite

from ._core import __version__ as _engine_version

#: The package version: the Rust crate's (Cargo.toml), the one definition.
__version__: str = _engine_version

_LAZY = {
    "ComposedPass": "inductor_pass",
    "Pass": "inductor_pass",
    "compose": "inductor_pass",
    "install": "_install",
    "Installation": "_install",
    "pass_": "inductor_pass",
    "rewrite": "pipeline",
    "PrePass": "_pre_pass",
    "pre_pass": "_pre_pass",
    "save": "fxir",
    "load": "fxir",
}

__all__ = [
    "CloneNote",
    "ComposedPass",
    "Decision",
    "DecodeError",
    "FileFormatError",
    "FxrewriteError",
    "Installation",
    "InternalError",
    "InvalidGraphError",
    "Pass",
    "PrePass",
    "Report",
    "UnsupportedGraphError",
    "VersionError",
    "__version__",
    "compose",
    "install",
    "last_report",
    "load",
    "pass_",
    "pre_pass",
    "reports",
    "rewrite",
    "save",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fxrewrite' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
