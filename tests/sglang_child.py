"""The spawned process of ``tests/test_sglang_plugin.py``: an SGLang process
as far as fxrewrite can tell. It runs SGLang's own plugin loader
(``sglang.srt.plugins.load_plugins``, what SGLang's launcher, scheduler,
detokenizer and data-parallel controller call first), then compiles a
program with a mutating custom op with plain ``torch.compile``, as SGLang's
``--enable-torch-compile`` does."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import torch
import torch._dynamo


@torch.library.custom_op("fxr_sglang::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(100)


def program(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A copy whose first row the op writes: Inductor alone keeps an
    ``auto_functionalized`` copy of the whole clone here."""
    x = a * 2
    y = x.clone()
    torch.ops.fxr_sglang.bump_(y[0])
    return x, y


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def child(plugin_dir: str | None) -> dict[str, Any]:
    """Loads SGLang's plugins as an SGLang process does, first with
    ``FXREWRITE_INSTALL`` hidden, then as inherited; then compiles."""
    if plugin_dir is not None:
        sys.path.insert(0, plugin_dir)
    requested = os.environ.get("FXREWRITE_INSTALL")
    import torch._inductor.config as config

    hook_before = repr(config.post_grad_custom_post_pass)
    from importlib.metadata import entry_points

    import sglang.srt.plugins as plugins

    lines = _Lines()
    logging.getLogger(plugins.__name__).addHandler(lines)
    logging.getLogger(plugins.__name__).setLevel(logging.INFO)
    seen = {
        ep.name: [ep.value, ep.dist.name if ep.dist else None]
        for ep in entry_points(group=plugins.GENERAL_PLUGINS_GROUP)
    }

    # The plugin does nothing unless asked.
    os.environ.pop("FXREWRITE_INSTALL", None)
    plugins.load_plugins()
    hook_unasked = repr(config.post_grad_custom_post_pass)
    if requested is not None:
        os.environ["FXREWRITE_INSTALL"] = requested
    # load_plugins() runs once per process (a module flag): reset it, as a
    # fresh process with the variable set would start.
    plugins._plugins_loaded = False
    plugins.load_plugins()

    import fxrewrite

    config.fx_graph_cache = False  # the pass runs here, not restored from an earlier run's cache
    torch._dynamo.reset()
    a = torch.randn(4, 8)
    expected = program(a.clone())
    got = torch.compile(program)(a.clone())
    report = fxrewrite.last_report()
    return {
        "pid": os.getpid(),
        "requested": requested,
        "hook_before": hook_before,
        "hook_unasked": hook_unasked,
        "entry_points": seen,
        "loader_lines": lines.lines,
        "post_hook": type(config.post_grad_custom_post_pass).__name__,
        "pre_hook": type(config.joint_custom_pre_pass).__name__,
        "equal": all(torch.equal(e, g) for e, g in zip(expected, got, strict=True)),
        "found": report.found if report is not None else None,
        "left": len(report.left) if report is not None else None,
    }
