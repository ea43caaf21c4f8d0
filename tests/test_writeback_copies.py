"""A graph input written through a view and then by a call (issue 30, item
4): fxrewrite costs no more copies in the generated code than Inductor
alone, and computes eager's values. The campaign found five fresh programs
of this family with one ``copy_`` more; these are written by hand, one per
kind of view (slice, dtype view, index_put on a row, a row of a transpose)
and the other order (the call first). Copies are counted where Inductor
schedules them (``gen_copies``), with and without fxrewrite, side by side."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import fxrewrite

sys.path.insert(0, str(Path(__file__).parent))
from gen_copies import GeneratedCopies, count_generated_copies


@torch.library.custom_op("fxr_wb::axpy_", mutates_args=("t",))
def axpy_(t: Tensor, o: Tensor, alpha: float) -> None:
    t.add_(o * alpha)


def slice_then_call(a0: Tensor) -> tuple[Tensor, ...]:
    a0[0:2].mul_(2)
    axpy_(a0, torch.ones(4, 6), 1.0)
    return (a0 + 1,)


def dtype_view_then_call(a0: Tensor) -> tuple[Tensor, ...]:
    a0.view(torch.int32).bitwise_xor_(1)
    axpy_(a0, torch.ones(4, 6), 1.0)
    return (a0 * 2,)


def index_put_then_call_on_rows(a0: Tensor) -> tuple[Tensor, ...]:
    a0[1] = 3.0
    axpy_(a0[2:], torch.ones(2, 6), 1.0)
    return (a0.sum(),)


def transposed_row_then_call(a0: Tensor) -> tuple[Tensor, ...]:
    a0.t()[1].add_(1)
    axpy_(a0, torch.ones(4, 6), 1.0)
    return (a0 * 2,)


def call_then_slice(a0: Tensor) -> tuple[Tensor, ...]:
    axpy_(a0, torch.ones(4, 6), 1.0)
    a0[0:2].mul_(2)
    return (a0 + 1,)


PROGRAMS: dict[str, Callable[[Tensor], tuple[Tensor, ...]]] = {
    f.__name__: f
    for f in (
        slice_then_call,
        dtype_view_then_call,
        index_put_then_call_on_rows,
        transposed_row_then_call,
        call_then_slice,
    )
}


def _compile(fn: Any, v2: bool, with_fxrewrite: bool, dynamic: bool) -> tuple[Any, GeneratedCopies]:
    torch._dynamo.reset()
    a0 = torch.arange(24.0).reshape(4, 6)
    the_pass = fxrewrite.Pass(strict=True) if with_fxrewrite else None
    copies = GeneratedCopies()
    with (
        torch._inductor.config.patch(
            post_grad_custom_post_pass=the_pass, fx_graph_cache=False, enable_auto_functionalized_v2=v2
        ),
        count_generated_copies() as counted,
    ):
        try:
            out = torch.compile(fn, fullgraph=True, dynamic=dynamic)(a0)
        except Exception as e:
            return ("raised", type(e).__name__), copies
    copies.nodes, copies.calls, copies.bytes = counted.nodes, counted.calls, counted.bytes
    return ("ok", (out, a0)), copies


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_an_input_written_through_a_view_then_by_a_call_costs_no_more_copies(
    name: str, v2: bool, dynamic: bool
) -> None:
    fn = PROGRAMS[name]
    want_in = torch.arange(24.0).reshape(4, 6)
    want = fn(want_in)
    ours, our_copies = _compile(fn, v2, True, dynamic)
    theirs, their_copies = _compile(fn, v2, False, dynamic)
    assert ours[0] == "ok", ours
    (out, a0) = ours[1]
    for got, exp in zip(out, want, strict=True):
        torch.testing.assert_close(got, exp)
    torch.testing.assert_close(a0, want_in)
    if theirs[0] == "ok":
        assert our_copies.total <= their_copies.total and our_copies.bytes <= their_copies.bytes, (
            f"fxrewrite {our_copies.as_dict()} vs Inductor alone {their_copies.as_dict()}"
        )
