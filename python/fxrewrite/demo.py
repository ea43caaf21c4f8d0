"""``fxrewrite demo``: a small decoder on mutating custom ops, compiled twice.

The model uses the kinds of kernels inference engines write: an rms_norm
into an out buffer, a fused add+rms_norm that mutates its input and the
residual, a rotary embedding that writes in place into the q and k column
slices of one qkv projection, and a silu_and_mul into an out buffer. It is
compiled on the CPU once with plain Inductor and once with
``fxrewrite.pass_``, in the v1 auto_functionalized form vLLM and SGLang
compile with (``enable_auto_functionalized_v2=False``) unless asked for v2;
both are checked against eager, and the post-grad passes are measured for
each. In v1, Inductor's own reinplacing copies q and k before the rotary
writes them (a clone of each slice per layer); fxrewrite writes them in place.
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


@torch.library.custom_op(f"{_NS}::rotary_embedding", mutates_args=("query", "key"))
def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
) -> None:
    """Rotates each head of query and key ([tokens, heads * head_size], any
    strides: vLLM passes column slices of the qkv projection) in place."""
    cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    half = head_size // 2
    for t in (query, key):
        x = t.view(t.shape[0], -1, head_size)
        x1, x2 = x[..., :half].clone(), x[..., half:].clone()
        x[..., :half] = x1 * cos - x2 * sin
        x[..., half:] = x2 * cos + x1 * sin


class DemoDecoder(torch.nn.Module):
    """A pre-norm decoder stack: attention (qkv projection, rotary on the q
    and k slices in place, softmax attention) and a gated MLP per layer."""

    def __init__(
        self, layers: int = 4, hidden: int = 64, ffn: int = 128, heads: int = 4, max_positions: int = 4096
    ) -> None:
        super().__init__()
        self.layers, self.ffn, self.heads, self.head_size = layers, ffn, heads, hidden // heads
        g = torch.Generator().manual_seed(0)
        self.norm_w = torch.nn.Parameter(torch.rand(2 * layers + 1, hidden, generator=g) + 0.5)
        self.qkv = torch.nn.Parameter(torch.randn(layers, hidden, 3 * hidden, generator=g) / hidden**0.5)
        self.o = torch.nn.Parameter(torch.randn(layers, hidden, hidden, generator=g) / hidden**0.5)
        self.up = torch.nn.Parameter(torch.randn(layers, hidden, 2 * ffn, generator=g) / hidden**0.5)
        self.down = torch.nn.Parameter(torch.randn(layers, ffn, hidden, generator=g) / ffn**0.5)
        inv_freq = 1.0 / 10000 ** (torch.arange(0, self.head_size, 2).float() / self.head_size)
        angles = torch.outer(torch.arange(max_positions).float(), inv_freq)
        self.register_buffer("cos_sin_cache", torch.cat([angles.cos(), angles.sin()], dim=-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens, hidden = x.shape
        positions = torch.arange(tokens, device=x.device)
        h = x * hidden**0.5  # the embedding scale: a fresh tensor the norm may write
        residual = torch.zeros_like(x)
        for i in range(self.layers):
            torch.ops.fxrewrite_demo.fused_add_rms_norm(h, residual, self.norm_w[2 * i], 1e-6)
            q, k, v = (h @ self.qkv[i]).split([hidden, hidden, hidden], dim=-1)
            torch.ops.fxrewrite_demo.rotary_embedding(positions, q, k, self.head_size, self.cos_sin_cache)
            qh, kh, vh = (t.reshape(tokens, self.heads, self.head_size).transpose(0, 1) for t in (q, k, v))
            attn = torch.softmax(qh @ kh.transpose(1, 2) / self.head_size**0.5, dim=-1) @ vh
            h = attn.transpose(0, 1).reshape(tokens, hidden) @ self.o[i]
            torch.ops.fxrewrite_demo.fused_add_rms_norm(h, residual, self.norm_w[2 * i + 1], 1e-6)
            act = torch.empty(tokens, self.ffn, dtype=x.dtype, device=x.device)
            torch.ops.fxrewrite_demo.silu_and_mul(act, h @ self.up[i])
            h = act @ self.down[i]
        out = torch.empty_like(h)
        torch.ops.fxrewrite_demo.rms_norm(out, h + residual, self.norm_w[2 * self.layers], 1e-6)
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


def run_demo(layers: int = 4, tokens: int = 8, hidden: int = 64, out: Any = print, v2: bool = False) -> bool:
    """Runs the demo; returns True when both compiles agree with eager."""
    import torch._dynamo
    from torch._inductor import config as inductor_config

    from . import Pass

    torch.manual_seed(0)
    model = DemoDecoder(layers=layers, hidden=hidden, max_positions=max(tokens, 1)).eval()
    x = torch.randn(tokens, hidden)
    with torch.no_grad():
        expected = model(x)
    rows = []
    ok = True
    ours = Pass(strict=True)
    for label, custom_pass in (("Inductor alone", None), ("Inductor + fxrewrite", ours)):
        torch._dynamo.reset()
        patch = {"post_grad_custom_post_pass": custom_pass, "fx_graph_cache": False}
        patch["enable_auto_functionalized_v2"] = v2
        with inductor_config.patch(patch), measure_post_grad() as stats, torch.no_grad():
            got = torch.compile(model)(x)
        agree = torch.allclose(got, expected, rtol=1e-4, atol=1e-5)
        ok &= agree
        rows.append((label, stats, agree))
    form = "v2 form" if v2 else "v1 form (enable_auto_functionalized_v2=False, as vLLM and SGLang compile)"
    out(f"fxrewrite demo: {layers}-layer decoder on mutating custom ops, {tokens} tokens, CPU, {form}\n")
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
    alone, with_pass = rows[0][1].clones, rows[1][1].clones
    if alone > with_pass:
        out(
            f"\nInductor alone copies a tensor {alone} times per forward (the rotary's q and k slices of each "
            f"layer's qkv), fxrewrite {with_pass} times: it writes them in place."
        )
    if ours.last_report is not None:
        out("\n" + ours.last_report.summary())
    out("\nNext: `fxrewrite --help` for the command line tool, README.md for using the pass in your compile.")
    return ok
