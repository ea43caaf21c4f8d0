"""A small decoder-like program on mutating custom ops (namespace `fxr_aoti`),
for torch.export + AOTInductor and for the command line tool on `.pt2`
archives (`fxrewrite inspect --import aoti_model model.pt2`).

It covers, in one graph: a fused add+norm writing a graph input (`res`, a
user-input mutation), rotary on split qkv (two views of one buffer), a write
into a module buffer (`cache`, a buffer mutation) and an out-buffer op."""

from __future__ import annotations

import torch

MAX_TOKENS = 16
HIDDEN = 16


@torch.library.custom_op("fxr_aoti::add_norm_", mutates_args=("x", "res"))
def add_norm_(x: torch.Tensor, res: torch.Tensor, w: torch.Tensor) -> None:
    res.add_(x)
    x.copy_(res * torch.rsqrt(res.pow(2).mean(-1, keepdim=True) + 1e-6) * w)


@torch.library.custom_op("fxr_aoti::rot_", mutates_args=("q", "k"))
def rot_(q: torch.Tensor, k: torch.Tensor, c: torch.Tensor) -> None:
    q.mul_(c)
    k.add_(c)


@torch.library.custom_op("fxr_aoti::write_rows_", mutates_args=("cache",))
def write_rows_(cache: torch.Tensor, rows: torch.Tensor) -> None:
    cache[: rows.shape[0]].copy_(rows)


@torch.library.custom_op("fxr_aoti::add_into", mutates_args=("out",))
def add_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    out.copy_(a + b)


class Block(torch.nn.Module):
    """``forward(x, res)``: ``res`` (the residual stream) is updated in place,
    and the buffer ``cache`` takes this step's keys; the output reads both."""

    def __init__(self) -> None:
        super().__init__()
        # Inference weights: autograd forbids writing the views of `split` in place.
        g = torch.Generator().manual_seed(0)
        self.norm_w = torch.nn.Parameter(torch.rand(HIDDEN, generator=g) + 0.5, requires_grad=False)
        self.w_qkv = torch.nn.Parameter(torch.randn(HIDDEN, HIDDEN, generator=g) / 4, requires_grad=False)
        self.register_buffer("c", torch.rand(4, generator=g) + 0.5)
        self.register_buffer("cache", torch.zeros(MAX_TOKENS, 4))

    def forward(self, x: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        h = x * 2
        torch.ops.fxr_aoti.add_norm_(h, res, self.norm_w)
        qkv = h @ self.w_qkv
        q, k, v = qkv.split([4, 4, 8], dim=-1)
        torch.ops.fxr_aoti.rot_(q, k, self.c)
        torch.ops.fxr_aoti.write_rows_(self.cache, k)
        out = torch.empty_like(v)
        torch.ops.fxr_aoti.add_into(out, v, qkv[:, :8])
        return out + self.cache.sum(0).repeat(2)


def inputs(tokens: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, HIDDEN, generator=g), torch.randn(tokens, HIDDEN, generator=g)
