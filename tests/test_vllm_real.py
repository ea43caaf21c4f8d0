"""fxrewrite against vLLM's own pass classes, where vLLM imports.

``tests/vllm_standin.py`` replays what vLLM does with a configured pass, so
the suite runs without vLLM. Here the same programs meet the real classes of
vLLM 0.34 (which pins torch 2.14.0): its ``CompilationConfig`` resolving the
documented names, its ``InductorPass``, its ``PostGradPassManager`` with its
own passes in its own order (no-op elimination, fxrewrite, cleanup, IR
lowering, its unsafe clone elimination, cleanup, ``FixFunctionalizationPass``
last), and the stand-in's clone elimination is checked against vLLM's on the
graphs fxrewrite leaves.

``scripts/test.sh`` makes that environment (torch 2.14.0, vLLM 0.34.0 without
its dependencies, the few its pass modules import) and runs this file there
with ``FXREWRITE_REQUIRE_VLLM=1``, where it cannot skip. Elsewhere, without
vLLM, it skips and says why.

vLLM's CPU kernels are not loadable here (the CUDA wheel), so
``_C::rotary_embedding`` is defined with vLLM's schema and a reference
implementation that reads its arguments through their strides: vLLM's
``FixFunctionalizationPass`` looks that operator up on every call, and a
Llama with head_dim 64 calls it on the query and key columns of ``qkv``.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch._dynamo
import torch.fx

import fxrewrite
import fxrewrite.vllm
import vllm_standin as S
from fxrewrite.encode import count_auto_functionalized
from gen_copies import count_generated_copies

if os.environ.get("FXREWRITE_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401  (required: an import error fails the run)
else:
    pytest.importorskip(
        "vllm", reason="vLLM is not installed here; scripts/test.sh runs this file where it is"
    )

from vllm.compilation.passes.inductor_pass import CallableInductorPass, InductorPass, pass_context
from vllm.compilation.passes.ir.clone_elimination import UnsafeCloneEliminationPass
from vllm.compilation.passes.pass_manager import PostGradPassManager
from vllm.config import CompilationConfig
from vllm.config.utils import Range

HEAD = 64  # vLLM's Llama with head_dim 64: 4 query heads, 2 key/value heads
Q, KV = 4 * HEAD, 2 * HEAD


def _define_rotary_embedding() -> None:
    if hasattr(torch.ops._C, "rotary_embedding"):
        return
    lib = torch.library.Library("_C", "FRAGMENT")  # kept alive in _LIBS
    lib.define(
        "rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, "
        "Tensor cos_sin_cache, bool is_neox, int rope_dim_offset=0, bool inverse=False) -> ()"
    )

    def rotary_embedding(
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor | None,
        head_size: int,
        cos_sin_cache: torch.Tensor,
        is_neox: bool,
        rope_dim_offset: int = 0,
        inverse: bool = False,
    ) -> None:
        cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)
        cos, sin = cos[:, None, :], (-sin if inverse else sin)[:, None, :]
        for t in (query, key):
            if t is None:
                continue
            # A view of the caller's memory, through its strides (qkv's columns are not contiguous).
            heads = t.view(t.shape[0], -1, head_size)
            x1, x2 = heads[..., : head_size // 2], heads[..., head_size // 2 :]
            new = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
            heads.copy_(new)

    lib.impl("rotary_embedding", rotary_embedding, "CompositeExplicitAutograd")

    @torch.library.register_fake("_C::rotary_embedding", lib=lib)
    def rotary_embedding_fake(*args: Any, **kwargs: Any) -> None:
        return None

    _LIBS.append(lib)


_LIBS: list[Any] = []
_define_rotary_embedding()


def qkv_rotary(positions, x, w, cos_sin):
    """vLLM's Llama attention input: one matmul into qkv, split, rotary in
    place on the query and key columns, then q, k, v read."""
    qkv = x @ w
    q, k, v = qkv.split([Q, KV, KV], dim=-1)
    torch.ops._C.rotary_embedding(positions, q, k, HEAD, cos_sin, True)
    return q * 1, k * 1, v * 1


def _qkv_inputs(tokens: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(tokens)
    return (
        torch.randint(0, 32, (tokens,), generator=g),
        torch.randn(tokens, 32, generator=g),
        torch.randn(32, Q + 2 * KV, generator=g),
        torch.randn(32, HEAD, generator=g),
    )


# ----- vLLM's pass manager, configured as vLLM configures it -------------------------


def vllm_config() -> Any:
    """What ``PostGradPassManager.configure`` and vLLM's passes read of a
    ``VllmConfig``: its real ``CompilationConfig``, no model, no device (a
    ``VllmConfig`` itself asks the platform, and vLLM's CPU platform wants
    triton-cpu)."""
    return SimpleNamespace(compilation_config=CompilationConfig(), model_config=None, device_config=None)


class Counted:
    """One of the manager's steps, wrapped to see the graph it gets."""

    def __init__(self, step: Any, before: Callable[[torch.fx.Graph], None]) -> None:
        self.step, self.before = step, before

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.before(graph)
        self.step(graph)

    def uuid(self) -> Any:
        return self.step.uuid()


def clones(graph: torch.fx.Graph) -> int:
    return sum(1 for n in graph.nodes if n.op == "call_function" and n.target is torch.ops.aten.clone.default)


@contextmanager
def vllms_manager_with_fxrewrite(pre_pass: bool = True) -> Iterator[tuple[Any, dict[str, list[int]]]]:
    """vLLM's manager with fxrewrite added as ``configure_post_pass`` adds
    the configured pass, inside vLLM's pass context; yields the Inductor
    config and what the wrapped steps saw. ``pre_pass``: the documented
    config, which names the pre pass too; without it, the post pass alone
    (as the one line installs it)."""
    passes = {"post_grad_custom_post_pass": S.NAME}
    if pre_pass:
        passes["joint_custom_pre_pass"] = S.PRE_NAME
    compilation = CompilationConfig(inductor_passes=passes)
    manager = PostGradPassManager()
    manager.configure(vllm_config())
    manager.add(compilation.inductor_compile_config["post_grad_custom_post_pass"])
    seen: dict[str, list[int]] = {"left_for_fix": [], "clones_before_elimination": []}
    manager.clone_elimination = Counted(
        manager.clone_elimination, lambda g: seen["clones_before_elimination"].append(clones(g))
    )

    manager.fix_functionalization = Counted(
        manager.fix_functionalization, lambda g: seen["left_for_fix"].append(count_auto_functionalized(g))
    )
    config = {"post_grad_custom_post_pass": manager}
    if pre_pass:
        config["joint_custom_pre_pass"] = compilation.inductor_compile_config["joint_custom_pre_pass"]
    with pass_context(Range(start=1, end=8192)):
        yield config, seen


# ----- the names ------------------------------------------------------------------------


def test_vllms_compilation_config_resolves_the_documented_names_to_fxrewrites_passes() -> None:
    compilation = CompilationConfig(
        inductor_passes={"post_grad_custom_post_pass": S.NAME, "joint_custom_pre_pass": S.PRE_NAME}
    )
    post = compilation.inductor_compile_config["post_grad_custom_post_pass"]
    pre = compilation.inductor_compile_config["joint_custom_pre_pass"]
    # Not wrapped: vLLM wraps a plain callable in CallableInductorPass, whose uuid is its source's hash.
    assert post is fxrewrite.vllm.pass_ and pre is fxrewrite.vllm.pre_pass
    assert isinstance(post, InductorPass) and isinstance(pre, InductorPass)
    assert not isinstance(post, CallableInductorPass)
    assert post.uuid() == fxrewrite.Pass().uuid()
    shipped = pickle.loads(pickle.dumps(post))  # as vLLM sends its config to the engine's processes
    assert isinstance(shipped, InductorPass) and shipped.uuid() == post.uuid()


def test_the_stand_in_resolves_names_as_vllms_compilation_config_does() -> None:
    compilation = CompilationConfig(inductor_passes={"post_grad_custom_post_pass": S.NAME})
    real = compilation.inductor_compile_config["post_grad_custom_post_pass"]
    replayed = S.resolve_like_vllm_config(S.NAME, InductorPass, CallableInductorPass)
    assert replayed is real


# ----- the programs through vLLM's manager ------------------------------------------------


@pytest.mark.parametrize("pre_pass", [True, False], ids=["with-pre-pass", "post-pass-only"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("name", sorted(S.PROGRAMS))
def test_vllms_manager_with_fxrewrite_gives_eagers_values_and_leaves_nothing_to_fix(
    name: str, v2: bool, dynamic: bool, pre_pass: bool
) -> None:
    with vllms_manager_with_fxrewrite(pre_pass) as (config, seen):
        assert S.run_program(name, config, v2=v2, dynamic=dynamic), "values differ from eager's"
    assert seen["left_for_fix"] and all(n == 0 for n in seen["left_for_fix"]), seen


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("pre_pass", [True, False], ids=["with-pre-pass", "post-pass-only"])
def test_vllms_qkv_rotary_is_rewritten_in_place_without_a_copy(
    v2: bool, dynamic: bool, pre_pass: bool
) -> None:
    """The graph every Llama step compiles: rotary in place on two column
    slices of one qkv, under vLLM's manager. Eager's values, nothing left
    for vLLM's FixFunctionalizationPass, no clone in the graph and no copy
    kernel in the code Inductor generates."""
    args = _qkv_inputs(7)
    expected = qkv_rotary(*[a.clone() for a in args])
    torch._dynamo.reset()
    with vllms_manager_with_fxrewrite(pre_pass) as (config, seen), count_generated_copies() as copies:
        with torch._inductor.config.patch(
            {**config, "fx_graph_cache": False, "enable_auto_functionalized_v2": v2}
        ):
            got = torch.compile(qkv_rotary, fullgraph=True, dynamic=dynamic)(*[a.clone() for a in args])
    assert all(torch.allclose(g, e) for g, e in zip(got, expected, strict=True))
    report = fxrewrite.vllm.pass_.last_report
    assert report is not None and report.found == 1 and not report.left, report
    assert seen["left_for_fix"] == [0] and seen["clones_before_elimination"] == [0], seen
    assert copies.total == 0, copies.detail


# ----- the stand-in's clone elimination is vLLM's -----------------------------------------


def _copy(graph: torch.fx.Graph) -> torch.fx.Graph:
    out = torch.fx.Graph()
    out.output(out.graph_copy(graph, {}))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("name", sorted(S.PROGRAMS))
def test_the_stand_ins_clone_elimination_removes_what_vllms_removes(name: str, v2: bool) -> None:
    """On the graph fxrewrite leaves, ``vllm_standin.unsafe_clone_elimination``
    (what the suite without vLLM runs) and vLLM's ``UnsafeCloneEliminationPass``
    give the same graph."""
    compared: list[tuple[str, str]] = []
    real = UnsafeCloneEliminationPass(vllm_config())

    def both(graph: torch.fx.Graph) -> None:
        replayed = _copy(graph)
        S.unsafe_clone_elimination(replayed)
        real(graph)
        compared.append((str(replayed), str(graph)))

    with vllms_manager_with_fxrewrite() as (config, _):
        manager = config["post_grad_custom_post_pass"]
        manager.clone_elimination = both
        assert S.run_program(name, config, v2=v2)
    assert compared
    for replayed, vllms in compared:
        assert replayed == vllms
