"""``fxrewrite demo``: a small decoder on mutating custom ops, compiled twice.

The model uses the kinds of kernels inference engines write: an rms_norm
into an out buffer, a fused add+rms_norm that mutates its input and the
residual, and a silu_and_mul into an out buffer. It is compiled on the CPU
once with plain Inductor and once with ``fxrewrite.pass_``; both are checked
against eager, and the post-grad passes are measured for each.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from .encode import count_auto_functionalized

_NS = "fxrewrite_demo"


@torch.library.custom_op(f"{_NS}::rms_norm", mutates_args=("out",))
def rms_norm(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """out = x / rms(x) * weight."""
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)


@torch.library.custom_op(f"{_NS}::fused_add_rms_norm", mutates_args=("x", "residual"))
def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """residual += x; x = rms_norm(residual) * weight."""
    residual.add_(x)
    x.copy_(residual * torch.rsqrt(residual.pow(2).mean(-1, keepdim=True) + eps) * weight)


@torch.library.custom_op(f"{_NS}::silu_and_mul", mutates_args=("out",))
def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> None:
    """out = silu(x[..., :d]) * x[..., d:]."""
    d = x.shape[-1] // 2
    out.copy_(torch.nn.functional.silu(x[..., :d]) * x[..., d:])


class DemoDecoder(torch.nn.Module):
    """A pre-norm decoder stack without attention: enough to exercise every op."""

    def __init__(self, layers: int = 4, hidden: int = 64, ffn: int = 128) -> None:
        super().__init__()
        self.layers = layers
        g = torch.Generator().manual_seed(0)
        self.norm_w = torch.nn.Parameter(torch.rand(layers + 1, hidden, generator=g) + 0.5)
        self.up = torch.nn.Parameter(torch.randn(layers, hidden, 2 * ffn, generator=g) / hidden**0.5)
        self.down = torch.nn.Parameter(torch.randn(layers, ffn, hidden, generator=g) / ffn**0.5)
        self.ffn = ffn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = torch.zeros_like(x)
        h = x.clone()
        for i in range(self.layers):
            torch.ops.fxrewrite_demo.fused_add_rms_norm(h, residual, self.norm_w[i], 1e-6)
            up = h @ self.up[i]
            act = torch.empty(x.shape[0], self.ffn, dtype=x.dtype, device=x.device)
            torch.ops.fxrewrite_demo.silu_and_mul(act, up)
            h = act @ self.down[i]
        out = torch.empty_like(h)
        torch.ops.fxrewrite_demo.rms_norm(out, h + residual, self.norm_w[self.layers], 1e-6)
        return out


@dataclass
class PassStats:
    """What Inductor's post-grad passes did in one compile."""

    seconds: float = 0.0
    found: int = 0
    remaining: int = 0
    clones: int = 0
    #: ``copy_`` nodes left after the passes (input write-backs).
    copies: int = 0


@contextlib.contextmanager
def measure_post_grad() -> Iterator[PassStats]:
    """Times Inductor's post-grad passes and counts auto_functionalized nodes
    before and after, the clones the passes leave and the ``copy_`` nodes
    left."""
    import torch._inductor.compile_fx

    cfx: Any = torch._inductor.compile_fx  # patched below; its imports are not re-exported
    stats = PassStats()
    original = cfx.post_grad_passes

    def clones(g: torch.fx.Graph) -> int:
        return sum(1 for n in g.nodes if n.target is torch.ops.aten.clone.default)

    def copies(g: torch.fx.Graph) -> int:
        return sum(1 for n in g.nodes if n.target is torch.ops.aten.copy_.default)

    def timed(gm: torch.fx.GraphModule, is_inference: bool) -> Any:
        before_af, before_clones = count_auto_functionalized(gm.graph), clones(gm.graph)
        t0 = time.perf_counter()
        result = original(gm, is_inference)
        stats.seconds += time.perf_counter() - t0
        stats.found += before_af
        stats.remaining += count_auto_functionalized(gm.graph)
        stats.clones += clones(gm.graph) - before_clones
        stats.copies += copies(gm.graph)
        return result

    cfx.post_grad_passes = timed
    try:
        yield stats
    finally:
        cfx.post_grad_passes = original


def run_demo(layers: int = 4, tokens: int = 8, hidden: int = 64, out: Any = print) -> bool:
    """Runs the demo; returns True when both compiles agree with eager."""
    import torch._dynamo
    from torch._inductor import config as inductor_config

    from . import Pass

    torch.manual_seed(0)
    model = DemoDecoder(layers=layers, hidden=hidden).eval()
    x = torch.randn(tokens, hidden)
    with torch.no_grad():
        expected = model(x)
    rows = []
    ok = True
    ours = Pass(strict=True)
    for label, custom_pass in (("Inductor alone", None), ("Inductor + fxrewrite", ours)):
        torch._dynamo.reset()
        with (
            inductor_config.patch({"post_grad_custom_post_pass": custom_pass, "fx_graph_cache": False}),
            measure_post_grad() as stats,
            torch.no_grad(),
        ):
            got = torch.compile(model)(x)
        agree = torch.allclose(got, expected, rtol=1e-4, atol=1e-5)
        ok &= agree
        rows.append((label, stats, agree))
    out(f"fxrewrite demo: {layers}-layer decoder on mutating custom ops, {tokens} tokens, CPU\n")
    header = (
        f"{'':24} {'af nodes':>9} {'removed':>8} {'clones left':>12} "
        f"{'post-grad passes':>17} {'matches eager':>14}"
    )
    out(header)
    out("-" * len(header))
    for label, s, agree in rows:
        out(
            f"{label:24} {s.found:>9} {s.found - s.remaining:>8} {s.clones:>12} "
            f"{s.seconds * 1e3:>14.1f} ms {'yes' if agree else 'NO':>14}"
        )
    if ours.last_report is not None:
        out("\n" + ours.last_report.summary())
    out("\nNext: `fxrewrite --help` for the command line tool, README.md for using the pass in your compile.")
    return ok
