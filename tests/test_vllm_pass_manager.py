"""fxrewrite in the place of vLLM's FixFunctionalizationPass, through a
stand-in of vLLM's PostGradPassManager: the manager runs its passes on the
functional graph, then its fix-functionalization step last, and folds every
pass's ``uuid()`` into its own (Inductor's FX graph cache key).

The operators mimic vLLM's CPU kernels' schemas (``_C::rotary_embedding``,
``_C::fused_add_rms_norm``, ``_C::rms_norm``, ``_C::silu_and_mul``) under the
``fxr_vllm`` namespace; vLLM compiles with the v1 form."""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._dynamo
from torch._higher_order_ops.auto_functionalize import auto_functionalized
from torch._inductor.custom_graph_pass import CustomGraphPass

import fxrewrite


@torch.library.custom_op("fxr_vllm::rotary_embedding", mutates_args=("query", "key"))
def rotary_embedding(
    positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, head_size: int, cos_sin: torch.Tensor
) -> None:
    c = cos_sin[positions]
    new_q, new_k = query * c[:, :1] + 1, key * c[:, 1:2] - 1
    query.copy_(new_q)
    key.copy_(new_k)


@torch.library.custom_op("fxr_vllm::fused_add_rms_norm", mutates_args=("input", "residual"))
def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    r = input + residual
    residual.copy_(r)
    input.copy_(r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * weight)


@torch.library.custom_op("fxr_vllm::rms_norm", mutates_args=("result",))
def rms_norm(result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    result.copy_(input * torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + eps) * weight)


@torch.library.custom_op("fxr_vllm::silu_and_mul", mutates_args=("result",))
def silu_and_mul(result: torch.Tensor, input: torch.Tensor) -> None:
    d = input.shape[-1] // 2
    result.copy_(torch.nn.functional.silu(input[..., :d]) * input[..., d:])


class StandInPostGradPassManager(CustomGraphPass):
    """The interface of vLLM's PostGradPassManager: passes on the functional
    graph, then the fix-functionalization step, and a uuid over all of them."""

    def __init__(self, fix_functionalization: Callable[[torch.fx.Graph], Any]) -> None:
        self.passes: list[Any] = []
        self.fix_functionalization = fix_functionalization
        self.seen_functional: list[int] = []

    def __call__(self, graph: torch.fx.Graph) -> None:
        for p in self.passes:
            p(graph)
        self.seen_functional.append(fxrewrite.encode.count_auto_functionalized(graph))
        self.fix_functionalization(graph)  # always last: it makes the graph non-functional

    def uuid(self) -> str:
        state = {"passes": [p.uuid() for p in self.passes]}
        state["passes"].append(self.fix_functionalization.uuid())  # type: ignore[attr-defined]
        return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def llama_layer(x, residual, positions, wqkv, cos_sin, ln1, ln2, wo, w13, w2):
    torch.ops.fxr_vllm.fused_add_rms_norm(x, residual, ln1, 1e-6)
    qkv = x @ wqkv
    q, k, v = qkv.split([16, 16, 16], dim=-1)
    torch.ops.fxr_vllm.rotary_embedding(positions, q, k, 16, cos_sin)
    h = (q * k + v) @ wo
    torch.ops.fxr_vllm.fused_add_rms_norm(h, residual, ln2, 1e-6)
    gate_up = h @ w13
    act = torch.empty(h.shape[0], 32)
    torch.ops.fxr_vllm.silu_and_mul(act, gate_up)
    out = torch.empty_like(h)
    torch.ops.fxr_vllm.rms_norm(out, act @ w2, ln1, 1e-6)
    return out, residual


def _inputs(tokens: int = 6) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(tokens)

    def r(*s: int) -> torch.Tensor:
        return torch.randn(*s, generator=g)

    positions = torch.arange(tokens) % 4
    return (
        r(tokens, 16), r(tokens, 16), positions, r(16, 48), r(4, 2),
        r(16), r(16), r(16, 16), r(16, 64), r(32, 16),
    )  # fmt: skip


def _compile(fn: Callable[..., Any], manager: CustomGraphPass, args: tuple[Any, ...], dynamic: bool) -> Any:
    torch._dynamo.reset()
    with torch._inductor.config.patch(
        {
            "post_grad_custom_post_pass": manager,
            "fx_graph_cache": False,
            "enable_auto_functionalized_v2": False,  # vLLM compiles with the v1 form
        }
    ):
        return torch.compile(fn, dynamic=dynamic)(*args)


def _clone_all(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.clone() for a in args)


def _same_as_eager(manager: CustomGraphPass, dynamic: bool) -> None:
    """The llama layer compiled through ``manager`` gives eager's outputs
    and leaves its inputs as eager does."""
    args = _inputs()
    expected_in = _clone_all(args)
    expected = llama_layer(*expected_in)
    got_in = _clone_all(args)
    got = _compile(llama_layer, manager, got_in, dynamic)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_in, expected_in)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_fxrewrite_as_the_fix_functionalization_step(dynamic):
    fix = fxrewrite.Pass(strict=True)
    manager = StandInPostGradPassManager(fix)
    _same_as_eager(manager, dynamic)  # x and residual are written back too
    report = fix.last_report
    assert report is not None
    assert manager.seen_functional == [report.found] and report.found == 5
    assert report.reinplaced == 5 and report.clones == [] and not report.left
    ops = {d.op for d in report.decisions}
    assert ops == {
        "fxr_vllm::fused_add_rms_norm.default",
        "fxr_vllm::rotary_embedding.default",
        "fxr_vllm::silu_and_mul.default",
        "fxr_vllm::rms_norm.default",
    }
    # The rotary-on-split-qkv write-backs (two slice_scatters) are gone.
    assert sum(d.scatters_removed for d in report.decisions) == 2


def test_the_manager_cache_key_follows_the_pass_configuration():
    plain = StandInPostGradPassManager(fxrewrite.Pass()).uuid()
    assert plain == StandInPostGradPassManager(fxrewrite.Pass()).uuid()
    assert plain != StandInPostGradPassManager(fxrewrite.Pass(strict=True)).uuid()


def _blind_fix_functionalization(graph: torch.fx.Graph) -> None:
    """What vLLM's pass does for its ops, without its per-op list: call the op
    on the written arguments themselves and drop the slice_scatters of
    rotary-on-split-qkv. No safety analysis."""
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not auto_functionalized:
            continue
        op = node.args[0]
        written = [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        with graph.inserting_before(node):
            graph.call_function(op, kwargs=dict(node.kwargs))
        for user in list(node.users):
            assert user.target is operator.getitem
            arg = node.kwargs[written[user.args[1] - 1]]
            for scatter in [u for u in user.users if u.target is torch.ops.aten.slice_scatter.default]:
                scatter.replace_all_uses_with(scatter.args[0])
                graph.erase_node(scatter)
            user.replace_all_uses_with(arg)
            graph.erase_node(user)
        graph.erase_node(node)


_blind_fix_functionalization.uuid = lambda: "blind"  # type: ignore[attr-defined]


def test_a_rewrite_the_blind_pass_gets_wrong_is_refused():
    # A reduction of the old qkv (before rotary) is also returned: the blind
    # rewrite computes it from the rotated qkv. fxrewrite moves the reader
    # ahead of the call (computed there) and matches eager with no clone.
    def f(x, positions, wqkv, cos_sin):
        qkv = x @ wqkv
        q, k, _ = qkv.split([16, 16, 16], dim=-1)
        before = qkv.sum(-1)  # the old value, read after the call in the graph
        torch.ops.fxr_vllm.rotary_embedding(positions, q, k, 16, cos_sin)
        return qkv, before

    args = _inputs()
    call = (args[0], args[2], args[3], args[4])
    expected = f(*_clone_all(call))
    blind = _compile(f, StandInPostGradPassManager(_blind_fix_functionalization), _clone_all(call), False)
    assert not all(torch.allclose(a, b) for a, b in zip(blind, expected, strict=True))
    fix = fxrewrite.Pass(strict=True)
    ours = _compile(f, StandInPostGradPassManager(fix), _clone_all(call), False)
    torch.testing.assert_close(ours, expected)
    assert fix.last_report is not None and not fix.last_report.left
    assert fix.last_report.moved == 1 and fix.last_report.clones == []


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_fxrewrite_as_a_configured_user_pass_in_vllms_order(dynamic):
    # Where "fxrewrite.vllm.pass_" lands on vLLM's GPU path: among the user
    # passes, followed by cleanup, vLLM's clone elimination, cleanup and
    # vLLM's own fix-functionalization (tests/vllm_standin.py replays them).
    import fxrewrite.vllm
    import vllm_standin

    p = fxrewrite.vllm.VllmPass(strict=True)
    manager = vllm_standin.StandInPostGradPassManager(None)
    manager.add(p)
    _same_as_eager(manager, dynamic)
    assert p.last_report is not None and p.last_report.reinplaced == 5 and not p.last_report.left
    assert manager.clones_removed == [0] and manager.left_for_fix_functionalization == [0]
