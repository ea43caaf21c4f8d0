"""Small programs on the `fxr_test` custom ops (defined in conftest.py), shared by
the copy-count tests and the comparison table of docs/correctness.md."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Program:
    name: str
    fn: Callable[..., Any]
    make_inputs: Callable[[], tuple[torch.Tensor, ...]]


def _out_buffer(a, b):
    out = torch.empty_like(a)
    torch.ops.fxr_test.add_into(out, a, b)
    return out * 2


def _input_writeback(x, res, w):
    torch.ops.fxr_test.fused_add_(x, res, w)
    return x + 1


def _reorderable_reader(x):
    y = x * 2
    z = y.clone()
    torch.ops.fxr_test.scale_(z, 3.0)
    return z + y.sum(0)


def _unmovable_reader(x):
    y = x * 2
    z = y.clone()
    torch.ops.fxr_test.scale_(z, 3.0)
    return z, y


def _rotary_split_qkv(x, w, c):
    qkv = x @ w
    q, k, v = qkv.split([4, 4, 8], dim=-1)
    torch.ops.fxr_test.rot_(q, k, c)
    return qkv, v


def _two_views_one_buffer(x):
    y = x * 2
    torch.ops.fxr_test.scale_(y[0], 2.0)
    torch.ops.fxr_test.scale_(y[1], 3.0)
    return y


def _residual_chain(x, res, w):
    for _ in range(3):
        torch.ops.fxr_test.fused_add_(x, res, w)
    return x.sum()


def _clone_removed_by_inductor(x):
    y = x.clone()
    torch.ops.fxr_test.scale_(y, 3.0)
    return y


def _mla_rotary(x, wq, wkv, cos):
    # DeepSeek-V2-style attention: rotary on q_pe, a slice of q reshaped to
    # heads, and on k_pe, a slice of the kv projection unsqueezed to one head.
    q = (x @ wq).view(x.shape[0], 2, 24)
    _, q_pe = q.split([16, 8], dim=-1)
    kv = x @ wkv
    _, k_pe = kv.split([16, 8], dim=-1)
    torch.ops.fxr_test.rot_(q_pe, k_pe.unsqueeze(1), cos)
    return q, kv


def _disjoint_read_view(x):
    # One half of a buffer written from the other half.
    y = x * 2
    top, bottom = y.chunk(2, dim=0)
    torch.ops.fxr_test.add_into(top, bottom, bottom)
    return y


def _two_views_of_an_input(x, c):
    # Rotary on two column slices of a graph input, written back by the graph.
    torch.ops.fxr_test.rot_(x[:, :4], x[:, 4:], c)
    return x.sum()


def _empty_slice_write(x):
    # A write into an empty slice of a graph input changes nothing: no copy.
    torch.ops.fxr_test.scale_(x[2:2], 2.0)
    return x * 3


def _r(*shape: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


PROGRAMS = [
    Program("out buffer", _out_buffer, lambda: (_r(4, 8)(), _r(4, 8)())),
    Program("input write-back", _input_writeback, lambda: (_r(4, 8)(), _r(4, 8)(), _r(8)())),
    Program("reorderable reader", _reorderable_reader, lambda: (_r(4, 8)(),)),
    Program("unmovable reader", _unmovable_reader, lambda: (_r(4, 8)(),)),
    Program("rotary on split qkv", _rotary_split_qkv, lambda: (_r(3, 16)(), _r(16, 16)(), _r(3, 4)())),
    Program("two views of one buffer", _two_views_one_buffer, lambda: (_r(3, 8)(),)),
    Program("residual chain", _residual_chain, lambda: (_r(4, 8)(), _r(4, 8)(), _r(8)())),
    Program("clone removed by Inductor", _clone_removed_by_inductor, lambda: (_r(4, 8)(),)),
    Program(
        "MLA rotary (reshaped q, unsqueezed k_pe)",
        _mla_rotary,
        lambda: (_r(5, 32)(), _r(32, 48)(), _r(32, 24)(), _r(5, 1, 8)()),
    ),
    Program("read from a disjoint view of the written buffer", _disjoint_read_view, lambda: (_r(4, 8)(),)),
    Program("two views of an input, written back", _two_views_of_an_input, lambda: (_r(3, 8)(), _r(3, 4)())),
    Program("write into an empty slice of an input", _empty_slice_write, lambda: (_r(4, 8)(),)),
]
