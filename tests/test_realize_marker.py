"""A node the plan realizes must reach Inductor's lowering with its mark.

Inductor's reinplace pass runs after the custom post pass and replaces every
view-scatter node (``select_scatter``, ``slice_scatter``, ...) by a new one
that keeps only ``meta['val']``, so a mark put on the scatter itself is lost
and a call writing a column of the scatter's value gets a copy of that column
(other memory, another storage offset). The applier marks an ``aten.alias``
inserted just after such a node instead (``REPLACED_BEFORE_LOWERING``).
Found by the campaign (issue 30): ``SELECT_OF_A_REALIZED_SCATTER``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo
from torch import Tensor
from torch._inductor import config as inductor_config
from torch._inductor.fx_passes import reinplace
from torch._inductor.graph import GraphLowering
from torch._inductor.utils import run_and_get_code

import fxrewrite
from fxrewrite import _core

PROBE = "fxr_probe"


@torch.library.custom_op("fxr_rm::neg_col_", mutates_args=("x",))
def neg_col_(x: Tensor) -> None:
    # A kernel that reads raw strides: eager passes column 3 of a contiguous
    # (8, 4) buffer. A copy of the column has offset 0.
    assert (tuple(x.shape), x.stride(), x.storage_offset()) == ((8,), (4,), 3), (
        tuple(x.shape),
        x.stride(),
        x.storage_offset(),
    )
    x.neg_()


def column_of_a_scattered_input(a: Tensor) -> Tensor:
    # Two writes of one column: Inductor's reinplace pass then keeps the
    # scatters functional (one write lets it scatter into `a` in place,
    # where the column is `a`'s own memory either way).
    a[:, 1] = 5.0
    a[:, 1] = 6.0
    neg_col_(a[:, 3])
    return a.sum(0)


def test_the_list_is_the_one_inductor_s_reinplace_pass_replaces() -> None:
    replaced = {f"{op.name()}.{op._overloadname}" for op in reinplace._SCATTER_OP_TO_VIEW}
    assert set(_core.REPLACED_BEFORE_LOWERING) == replaced


def test_torch_still_drops_a_mark_on_a_view_scatter(monkeypatch: Any) -> None:
    """The premise: when this fails, torch keeps meta on the scatters it
    replaces, and the alias is no longer needed. A mark on a pointwise node
    (the control) reaches the lowering."""
    lowered: dict[str, bool] = {}
    run_node = GraphLowering.run_node

    def recording(self: GraphLowering, n: torch.fx.Node) -> Any:
        if n.op == "call_function":
            lowered[str(n.target)] = lowered.get(str(n.target), False) or PROBE in n.meta
        return run_node(self, n)

    def mark(graph: torch.fx.Graph) -> None:
        for n in graph.nodes:
            if n.target in (torch.ops.aten.select_scatter.default, torch.ops.aten.mul.Tensor):
                n.meta[PROBE] = True

    def f(a: Tensor) -> Tensor:
        b = a * 2
        b[:, 1] = 5.0
        return b + 1

    monkeypatch.setattr(GraphLowering, "run_node", recording)
    torch._dynamo.reset()
    with inductor_config.patch(post_grad_custom_post_pass=mark, fx_graph_cache=False):
        torch.compile(f, backend="inductor", fullgraph=True)(torch.ones(8, 4))
    assert lowered.get("aten.mul.Tensor") is True
    assert lowered.get("aten.select_scatter.default") is False


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_column_of_a_scattered_input_is_written_in_place(dynamic: bool) -> None:
    """The call writes column 3 of the input's new value (a ``select_scatter``
    that is then copied back into the input): in place, with eager's layout,
    and no copy of the column in the generated code."""
    a = torch.arange(32.0).reshape(8, 4)
    expected_a = a.clone()
    expected = column_of_a_scattered_input(expected_a)
    for v2 in (False, True):
        torch._dynamo.reset()
        p = fxrewrite.Pass(strict=True)
        got_a = a.clone()
        with inductor_config.patch(
            post_grad_custom_post_pass=p,
            joint_custom_pre_pass=fxrewrite.pre_pass,
            enable_auto_functionalized_v2=v2,
            fx_graph_cache=False,
        ):
            compiled = torch.compile(
                column_of_a_scattered_input, backend="inductor", fullgraph=True, dynamic=dynamic
            )
            got, (code,) = run_and_get_code(compiled, got_a)
        assert torch.equal(got, expected)
        assert torch.equal(got_a, expected_a)
        (report,) = p.reports
        assert report.left == [] and report.clones == [], report.summary()
        call = next(line for line in code.splitlines() if "fxr_rm.neg_col_" in line)
        assert "reinterpret_tensor(" in call and ", 3)" in call, call
