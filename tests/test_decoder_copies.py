"""A vLLM-shaped decoder layer through full ``torch.compile``: fused add +
norm in place, qkv projection, a per-head norm written in plain torch
(pointwise, kept lazy by Inductor), reshaped back, then the rotary writing
in place into q and k, attention into an ``out=`` buffer.

The rotary writes into a reshape of the norm's pointwise output: if the
rewrite puts that write where Inductor has not realized the value, the
lowering adds a copy kernel of its own (issue 21, seen in vLLM-CPU on
Qwen3-MoE). So the copies are counted in the generated code, with and
without fxrewrite, and the results compared with eager at two token
counts of one dynamic compile."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._dynamo
from torch import Tensor
from torch._inductor import config as inductor_config

import fxrewrite

sys.path.insert(0, str(Path(__file__).parent))
from gen_copies import GeneratedCopies, count_generated_copies

H, KH, D, HIDDEN = 4, 2, 8, 32


@torch.library.custom_op("fxr_dec::fused_add_rms_norm", mutates_args=("x", "residual"))
def fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    residual.add_(x)
    var = residual.pow(2).mean(-1, keepdim=True)
    x.copy_(residual * torch.rsqrt(var + eps) * weight)


@torch.library.custom_op("fxr_dec::rotary_embedding", mutates_args=("query", "key"))
def rotary_embedding(
    positions: Tensor, query: Tensor, key: Tensor, head_size: int, cos_sin_cache: Tensor, is_neox: bool
) -> None:
    _rotate_in_place(positions, (query, key), head_size, cos_sin_cache)


def _rotate_in_place(
    positions: Tensor, ts: tuple[Tensor, ...], head_size: int, cos_sin_cache: Tensor
) -> None:
    # Reads and writes through the arguments' own strides (query and key are
    # [tokens, heads * head_size] views, as vLLM passes them).
    cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    half = head_size // 2
    for t in ts:
        x = t.view(t.shape[0], -1, head_size)
        x1, x2 = x[..., :half].clone(), x[..., half:].clone()
        x[..., :half] = x1 * cos - x2 * sin
        x[..., half:] = x2 * cos + x1 * sin


@torch.library.custom_op("fxr_dec::attention", mutates_args=("out",))
def attention(q: Tensor, k: Tensor, v: Tensor, out: Tensor) -> None:
    _attend_into(q, k, v, out)


def _attend_into(q: Tensor, k: Tensor, v: Tensor, out: Tensor) -> None:
    t = q.shape[0]
    qh = q.view(t, H, D)
    kh = k.view(t, KH, D).repeat_interleave(H // KH, dim=1)
    vh = v.reshape(t, KH, D).repeat_interleave(H // KH, dim=1)
    scores = torch.einsum("thd,shd->hts", qh, kh) / D**0.5
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    out.view(t, H, D).copy_(torch.einsum("hts,shd->thd", probs, vh))


def head_norm(x: Tensor, weight: Tensor) -> Tensor:
    """RMSNorm in plain torch (vLLM's ``forward_native``): pointwise ops and
    a reduction that Inductor keeps lazy until a kernel needs them."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * weight


def _qkv(hidden: Tensor, residual: Tensor, ln_w: Tensor, wqkv: Tensor) -> tuple[Tensor, ...]:
    """Fused add + norm in place, then ``q``, ``k``, ``v``: three ``split``
    outputs of one ``qkv`` matmul."""
    torch.ops.fxr_dec.fused_add_rms_norm(hidden, residual, ln_w, 1e-6)
    qkv = hidden @ wqkv
    return qkv.split([H * D, KH * D, KH * D], dim=-1)


def _attend(q: Tensor, k: Tensor, v: Tensor, wo: Tensor) -> Tensor:
    out = torch.empty(q.shape[0], H * D)
    torch.ops.fxr_dec.attention(q, k, v, out)
    return out @ wo


def layer(
    positions: Tensor,
    hidden: Tensor,
    residual: Tensor,
    ln_w: Tensor,
    wqkv: Tensor,
    qn_w: Tensor,
    kn_w: Tensor,
    cos_sin: Tensor,
    wo: Tensor,
) -> tuple[Tensor, Tensor]:
    """Qwen3's layer: a per-head norm in plain torch before the rotary."""
    q, k, v = _qkv(hidden, residual, ln_w, wqkv)
    t = q.shape[0]
    q = head_norm(q.view(t, H, D), qn_w).view(t, H * D)
    k = head_norm(k.reshape(t, KH, D), kn_w).reshape(t, KH * D)
    torch.ops.fxr_dec.rotary_embedding(positions, q, k, D, cos_sin, True)
    return _attend(q, k, v, wo), residual


def llama_layer(
    positions: Tensor,
    hidden: Tensor,
    residual: Tensor,
    ln_w: Tensor,
    wqkv: Tensor,
    qn_w: Tensor,
    kn_w: Tensor,
    cos_sin: Tensor,
    wo: Tensor,
) -> tuple[Tensor, Tensor]:
    """Llama's layer: the rotary writes in place into ``q`` and ``k``, two
    ``split`` outputs of one ``qkv`` matmul (column ranges ``[0, H*D)`` and
    ``[H*D, (H+KH)*D)`` of rows of stride ``(H+2*KH)*D``; only the row count
    is symbolic). They share a storage, not one element: the proof of
    disjointness must hold with the symbolic token count (issue 30)."""
    q, k, v = _qkv(hidden, residual, ln_w, wqkv)
    t = q.shape[0]
    # Viewed as heads, as the layer passes them.
    torch.ops.fxr_dec.rotary_embedding(positions, q.view(t, H, D), k.view(t, KH, D), D, cos_sin, True)
    return _attend(q, k, v, wo), residual


# vLLM's own Llama graph (issue 40): `qkv` comes from an `out=` matmul into
# a fresh `empty` (vLLM-CPU's `_C::onednn_mm`), the rotary has vLLM's schema
# (`key` an optional written tensor, two defaulted trailing arguments) and
# writes into two `split` outputs of `qkv` as they are, and attention reads
# `q`, `k`, `v` through `reshape(-1, heads, head_size)`, a view the engine
# does not model. In v1 the rotary's writes come back as two `slice_scatter`s
# into `qkv`, read through those reshapes.
torch.library.define("fxr_dec::onednn_mm", "(Tensor(a!) c, Tensor a, Tensor? bias) -> ()")


@torch.library.impl("fxr_dec::onednn_mm", "CompositeExplicitAutograd")
def _onednn_mm(c: Tensor, a: Tensor, bias: Tensor | None) -> None:
    c.copy_(a @ bias if bias is not None else a)


@torch.library.register_fake("fxr_dec::onednn_mm")
def _onednn_mm_fake(c: Tensor, a: Tensor, bias: Tensor | None) -> None:
    return None


torch.library.define(
    "fxr_dec::vllm_rotary_embedding",
    "(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, Tensor cos_sin_cache, "
    "bool is_neox, int rope_dim_offset=0, bool inverse=False) -> ()",
)


@torch.library.impl("fxr_dec::vllm_rotary_embedding", "CompositeExplicitAutograd")
def _vllm_rotary(
    positions: Tensor,
    query: Tensor,
    key: Tensor | None,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox: bool,
    rope_dim_offset: int = 0,
    inverse: bool = False,
) -> None:
    # vLLM's kernel reads `query` and `key` through their row strides (they
    # are column ranges of `qkv`): assert the layout eager passes.
    assert query.stride() == (H * D + 2 * KH * D, 1), query.stride()
    if key is not None:
        assert key.stride() == (H * D + 2 * KH * D, 1), key.stride()
    _rotate_in_place(positions, (query,) if key is None else (query, key), head_size, cos_sin_cache)


@torch.library.register_fake("fxr_dec::vllm_rotary_embedding")
def _vllm_rotary_fake(*args: Any, **kwargs: Any) -> None:
    return None


@torch.library.custom_op("fxr_dec::heads_attention", mutates_args=("out",))
def heads_attention(q: Tensor, k: Tensor, v: Tensor, out: Tensor) -> None:
    t = q.shape[0]
    _attend_into(q.reshape(t, H * D), k.reshape(t, KH * D), v.reshape(t, KH * D), out)


def vllm_llama_layer(
    positions: Tensor,
    hidden: Tensor,
    residual: Tensor,
    ln_w: Tensor,
    wqkv: Tensor,
    qn_w: Tensor,
    kn_w: Tensor,
    cos_sin: Tensor,
    wo: Tensor,
) -> tuple[Tensor, Tensor]:
    """vLLM's Llama layer as its graph arrives (issue 40's first item)."""
    torch.ops.fxr_dec.fused_add_rms_norm(hidden, residual, ln_w, 1e-6)
    qkv = torch.empty(hidden.shape[0], (H + 2 * KH) * D)
    torch.ops.fxr_dec.onednn_mm(qkv, hidden, wqkv)
    q, k, v = qkv.split([H * D, KH * D, KH * D], dim=-1)
    torch.ops.fxr_dec.vllm_rotary_embedding(positions, q, k, D, cos_sin, True)
    out = torch.empty(q.shape[0], H * D)
    torch.ops.fxr_dec.heads_attention(q.view(-1, H, D), k.view(-1, KH, D), v.view(-1, KH, D), out)
    return out @ wo, residual


LAYERS = {"qwen3": layer, "llama": llama_layer, "vllm_llama": vllm_llama_layer}


def make_inputs(tokens: int) -> list[Tensor]:
    g = torch.Generator().manual_seed(tokens)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return [
        torch.arange(tokens),
        r(tokens, HIDDEN),
        r(tokens, HIDDEN),
        r(HIDDEN),
        r(HIDDEN, (H + 2 * KH) * D) / HIDDEN**0.5,
        r(D),
        r(D),
        r(64, D),
        r(H * D, HIDDEN) / (H * D) ** 0.5,
    ]


MODES = ("inductor", "full", "one_line")


def compile_and_run(
    mode: str, v2: bool, copies: GeneratedCopies, fn: Any = layer, *, dynamic: bool = True
) -> list[fxrewrite.Report]:
    """Compiles ``fn`` (a layer) once with the token count dynamic, runs it at two
    token counts, compares outputs and mutated inputs with eager, and fills
    ``copies`` from the generated code. Static (``dynamic=False``): one
    compile, run at one token count."""
    torch._dynamo.reset()
    p = fxrewrite.Pass(strict=mode == "full") if mode != "inductor" else None
    patch: dict[str, Any] = {
        "post_grad_custom_post_pass": p,
        "joint_custom_pre_pass": fxrewrite.pre_pass if mode == "full" else None,
        "enable_auto_functionalized_v2": v2,
        "fx_graph_cache": False,
    }
    with inductor_config.patch(patch), count_generated_copies() as counted:
        compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic)
        for tokens in (5, 9) if dynamic else (5,):
            args = make_inputs(tokens)
            want_args = [a.clone() for a in args]
            want = fn(*want_args)
            got = compiled(*args)
            for name, a, b in zip(("out", "residual"), got, want, strict=True):
                torch.testing.assert_close(
                    a, b, msg=lambda m, n=name, t=tokens: f"{mode} {t} tokens, {n}: {m}"
                )
            for i, (a, b) in enumerate(zip(args, want_args, strict=True)):
                torch.testing.assert_close(a, b, msg=lambda m, i=i: f"{mode}, input {i} after the call: {m}")
    copies.nodes, copies.calls, copies.bytes = counted.nodes, counted.calls, counted.bytes
    copies.detail, copies.after, copies.graphs = counted.detail, counted.after, counted.graphs
    assert counted.graphs == 1, "one compile (dynamic: for both token counts)"
    return p.reports if p is not None else []


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
@pytest.mark.parametrize("mode", ["full", "one_line"])
@pytest.mark.parametrize("shape", list(LAYERS))
def test_decoder_layer_has_no_more_copy_kernels_than_inductor_and_none_after_the_rotary(
    shape: str, mode: str, v2: bool
) -> None:
    theirs, ours = GeneratedCopies(), GeneratedCopies()
    compile_and_run("inductor", v2, theirs, LAYERS[shape])
    reports = compile_and_run(mode, v2, ours, LAYERS[shape])
    assert reports and all(not r.left and r.error is None for r in reports), [r.summary() for r in reports]
    assert ours.total <= theirs.total and ours.bytes <= theirs.bytes, (ours, theirs)
    assert ours.after_op("rotary") == 0, ours


@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic", "static"])
@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
@pytest.mark.parametrize("mode", ["full", "one_line"])
def test_vllms_llama_graph_rotates_in_place_with_no_clone_and_no_copy_kernel(
    mode: str, v2: bool, dynamic: bool
) -> None:
    """Issue 40: on vLLM's Llama graph every call is rewritten in place, the
    rotary's write-back scatters go (v1), and the generated code holds no
    clone and no copy kernel, as with vLLM's own FixFunctionalizationPass.
    Before the fix each rotary call cloned `query` and `key` in v1, because
    attention reads the written-back `qkv` through a view the engine does
    not model."""
    ours = GeneratedCopies()
    reports = compile_and_run(mode, v2, ours, vllm_llama_layer, dynamic=dynamic)
    assert reports and all(not r.left and r.error is None for r in reports), [r.summary() for r in reports]
    rotary = [d for r in reports for d in r.decisions if "rotary" in d.op]
    assert rotary and all(d.action == "reinplaced" for d in rotary), [r.summary() for r in reports]
    assert sum(r.cloned for r in reports) == 0, [r.summary() for r in reports]
    if not v2:
        assert sum(r.scatters_removed for r in reports) >= 2, [r.summary() for r in reports]
    assert ours.total == 0 and ours.bytes == 0, ours
