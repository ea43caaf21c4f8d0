"""Applying a plan reads what it needs of the original nodes in Rust: a v2
node's written views come from the graph the plan was made from, and the
applier never calls back into Rust through Python to parse a node's
keywords again (``fxrewrite._core.v2_written_views`` is the pre pass's,
for a live node before it is encoded)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch._dynamo
from torch._inductor import config as inductor_config

import fxrewrite
import fxrewrite.fx_meta as fx_meta
from conftest import Capture
from fxrewrite.encode import is_auto_functionalized


def _rotary_on_qkv(x: torch.Tensor, w: torch.Tensor, c: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
    # q and k are column slices of one fresh qkv: the v2 node writes two
    # slices of one base, and the direct call needs eager's layout of each.
    qkv = x @ w
    q, k = qkv[:, :8], qkv[:, 8:16]
    torch.ops.fxr_test.rot_(q, k, c)
    torch.ops.fxr_test.fused_add_(x, res, c)
    return qkv * 2


def _inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(4, 8, generator=g),
        torch.randn(8, 24, generator=g),
        torch.randn(4, 8, generator=g),
        torch.randn(4, 8, generator=g),
    )


def _post_grad_v2(dynamic: bool) -> torch.fx.GraphModule:
    cap = Capture(use_fxrewrite=False)
    torch._dynamo.reset()
    with inductor_config.patch(
        {"post_grad_custom_post_pass": cap, "fx_graph_cache": False, "enable_auto_functionalized_v2": True}
    ):
        torch.compile(_rotary_on_qkv, fullgraph=True, dynamic=dynamic)(*[i.clone() for i in _inputs()])
    return cap.before[0]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_the_applier_reads_written_views_from_the_plan_graph(monkeypatch, dynamic):
    gm = _post_grad_v2(dynamic)
    afs = [n for n in gm.graph.nodes if is_auto_functionalized(n)]
    assert len(afs) == 2, gm.graph

    # What the applier hands over for each node is what the engine's parser
    # reads off the live node's keywords.
    seen: list[tuple[str, Any, Any]] = []
    real = fx_meta.eager_input_vals

    def spy(af, op, call, written_views):
        seen.append((af.name, written_views, fx_meta.v2_written_views(af, op)))
        return real(af, op, call, written_views)

    probe = copy.deepcopy(gm)
    with monkeypatch.context() as m:
        m.setattr(fx_meta, "eager_input_vals", spy)
        report = fxrewrite.rewrite(probe.graph, strict=True)
    assert report.left == [] and len(seen) == 2, report.summary()
    for name, given, parsed in seen:
        assert given is not None and given == parsed, name
    kinds = {slot[2] for _, given, _ in seen for slots in given.values() if slots for slot in slots if slot}
    assert "slice" in kinds, seen  # q and k are cut from qkv

    # Applying never parses again: with the live-node parser gone, the
    # rewrite still succeeds and every direct call gets eager's layouts.
    def gone(*args: Any) -> Any:
        raise AssertionError("the applier called _core.v2_written_views")

    with monkeypatch.context() as m:
        m.setattr(fx_meta._core, "v2_written_views", gone)
        report = fxrewrite.rewrite(gm.graph, strict=True)
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and "fxr_test" in str(n.target)]
    assert len(calls) == 2 and report.reinplaced + report.cloned == 2, report.summary()
    for call in calls:
        eager_args, _ = call.meta["eager_input_vals"]
        actual = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in call.args]
        for e, a in zip(eager_args, actual, strict=True):
            if isinstance(a, torch.Tensor):
                assert isinstance(e, torch.Tensor), call.format_node()
                assert (tuple(map(str, e.shape)), tuple(map(str, e.stride()))) == (
                    tuple(map(str, a.shape)),
                    tuple(map(str, a.stride())),
                ), call.format_node()
