"""fxrewrite: turns torch.compile's auto_functionalized nodes back into safe in-place calls.

Use it in a compile::

    import torch, fxrewrite
    fxrewrite.install()     # both hooks: the pre pass and the rewrite

(``torch._inductor.config.post_grad_custom_post_pass = fxrewrite.pass_``
alone also works: it leaves calls whose arguments share memory to Inductor.)

or directly on a post-grad graph::

    report = fxrewrite.rewrite(gm.graph)
    print(report.summary())

Everything that needs torch is imported on first use, so the command line
tool reads and rewrites ``.fxir`` files without importing torch.
"""

from __future__ import annotations

import importlib
import types
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
from .report import CloneNote, Decision, Report

if TYPE_CHECKING:
    from .fxir import load, save
    from .inductor_pass import ComposedPass, Pass, compose, pass_
    from .install import Installation, install
    from .pipeline import rewrite
    from .pre_pass import PrePass, pre_pass

from ._core import __version__ as _engine_version

#: The package version: the Rust crate's (Cargo.toml), the one definition.
__version__: str = _engine_version

_LAZY = {
    "ComposedPass": "inductor_pass",
    "Pass": "inductor_pass",
    "compose": "inductor_pass",
    "install": "install",
    "Installation": "install",
    "pass_": "inductor_pass",
    "rewrite": "pipeline",
    "PrePass": "pre_pass",
    "pre_pass": "pre_pass",
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
    "load",
    "pass_",
    "pre_pass",
    "rewrite",
    "save",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fxrewrite' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    _unshadow()
    return value


def _unshadow() -> None:
    """Importing a submodule binds it on the package under its own name, and
    two of them bear the name of the object they define (``install``,
    ``pre_pass``): ``install.py`` importing ``pre_pass.py`` made
    ``fxrewrite.pre_pass`` the module. Put the objects back."""
    for name, module in _LAZY.items():
        value = globals().get(name)
        if (
            name == module
            and isinstance(value, types.ModuleType)
            and value.__name__ == f"{__name__}.{module}"
        ):
            globals()[name] = getattr(value, name)
