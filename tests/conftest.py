"""Shared fixtures: mutating custom ops under the `fxr_test` namespace and a
harness that compiles a function with and without fxrewrite and compares
results and input mutations with eager."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch._dynamo
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass

import fxrewrite
import layouts


@torch.library.custom_op("fxr_test::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, s: float) -> None:
    x.mul_(s)


@torch.library.custom_op("fxr_test::add_into", mutates_args=("out",))
def add_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    out.copy_(a + b)


@torch.library.custom_op("fxr_test::fused_add_", mutates_args=("x", "res"))
def fused_add_(x: torch.Tensor, res: torch.Tensor, w: torch.Tensor) -> None:
    res.add_(x)
    x.copy_(res * w)


@torch.library.custom_op("fxr_test::rot_", mutates_args=("q", "k"))
def rot_(q: torch.Tensor, k: torch.Tensor, c: torch.Tensor) -> None:
    q.mul_(c)
    k.add_(c)


@torch.library.custom_op("fxr_test::acc_sum", mutates_args=("x",))
def acc_sum(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.add_(y)
    return x.sum(0)


@acc_sum.register_fake
def _(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.sum(0)


@torch.library.custom_op("fxr_test::maybe_", mutates_args=("x", "y"))
def maybe_(x: torch.Tensor, y: torch.Tensor | None) -> None:
    x.add_(1)
    if y is not None:
        y.sub_(1)


@torch.library.custom_op("fxr_test::list_scale_", mutates_args=("xs",))
def list_scale_(xs: list[torch.Tensor], s: float) -> None:
    for x in xs:
        x.mul_(s)


@torch.library.custom_op("fxr_test::strided_", mutates_args=("x",))
def strided_(x: torch.Tensor, c: torch.Tensor, site: int) -> None:
    """A kernel that reads raw strides: it reports the size, stride and
    storage offset of ``x`` and ``c`` to ``layouts.REGISTRY`` (eager records
    them per ``site``, ``compile_and_compare`` checks the compiled run)."""
    layouts.REGISTRY.seen(site, 0, "x", x)
    layouts.REGISTRY.seen(site, 1, "c", c)
    x.copy_(x * 2 + c)


@torch.library.custom_op("fxr_test::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(100)


@dataclass
class Capture(CustomGraphPass):
    """A post-grad pass that records the graph before and after fxrewrite."""

    use_fxrewrite: bool = True
    before: list[torch.fx.GraphModule] = field(default_factory=list)
    after: list[torch.fx.GraphModule] = field(default_factory=list)
    reports: list[fxrewrite.Report] = field(default_factory=list)

    def __call__(self, graph: torch.fx.Graph) -> None:
        root = graph.owning_module
        self.before.append(torch.fx.GraphModule(root, copy.deepcopy(graph)))
        if self.use_fxrewrite:
            self.reports.append(fxrewrite.rewrite(graph, strict=True))
        self.after.append(torch.fx.GraphModule(root, copy.deepcopy(graph)))

    def uuid(self) -> str:
        return f"capture-{self.use_fxrewrite}"


def _clone_all(xs: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in xs)


def _assert_same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    else:
        assert a == b


@dataclass
class Compiled:
    capture: Capture
    report: fxrewrite.Report


def compile_and_compare(
    fn: Callable[..., Any],
    *inputs: Any,
    v2: bool = True,
    dynamic: bool | None = None,
    more_inputs: tuple[tuple[Any, ...], ...] = (),
    mark_dynamic: tuple[tuple[int, int], ...] = (),
    pre_pass: bool = True,
) -> Compiled:
    """Compiles ``fn`` with fxrewrite (strict; with its pre pass, as
    ``fxrewrite.install()`` sets it, unless ``pre_pass`` is false) and checks outputs, input
    mutations and the layouts stride-reading kernels see (``strided_``)
    against eager, on ``inputs`` and then on each of ``more_inputs`` (with
    the same compiled function: other sizes exercise a ``dynamic`` graph).
    ``mark_dynamic``: (argument, dim) pairs made symbolic with
    ``torch._dynamo.mark_dynamic``. Returns the captured graphs and the report."""
    cap = Capture()
    torch._dynamo.reset()
    hooks: dict[str, Any] = {"post_grad_custom_post_pass": cap}
    if pre_pass:
        hooks["joint_custom_pre_pass"] = fxrewrite.pre_pass
    with inductor_config.patch({**hooks, "fx_graph_cache": False, "enable_auto_functionalized_v2": v2}):
        compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic)
        for args in (inputs, *more_inputs):
            eager_in = _clone_all(args)
            with layouts.record():
                expected = fn(*eager_in)
            comp_in = _clone_all(args)
            for i, d in mark_dynamic:
                torch._dynamo.mark_dynamic(comp_in[i], d)
            with layouts.check() as reg:
                got = compiled(*comp_in)
            _assert_same(got, expected)
            _assert_same(comp_in, eager_in)
            assert reg.report() is None, reg.report()
    assert cap.reports, "the pass never ran"
    report = cap.reports[-1]
    for gm in cap.after:
        assert fxrewrite.encode.count_auto_functionalized(gm.graph) == 0
    return Compiled(cap, report)


def clones_in(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default)


@pytest.fixture(params=[True, False], ids=["v2", "v1"])
def v2(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def _discarded_here() -> list[str]:
    import sys

    randprog = sys.modules.get("randprog")
    return list(getattr(randprog, "DISCARDED", None) or [])


# Under pytest-xdist (scripts/test.sh runs `-n 2`) the programs are judged in
# the workers, and the summary is printed by the controller: each worker hands
# its list over when it finishes, through xdist's `workeroutput`.
_FROM_WORKERS: list[str] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["fxrewrite_discarded"] = _discarded_here()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    _FROM_WORKERS.extend(getattr(node, "workeroutput", {}).get("fxrewrite_discarded", []))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How many random programs were rejected because Inductor alone is
    wrong on them too (tests/test_random_programs.py): never silent."""
    discarded = _discarded_here() + _FROM_WORKERS
    if not discarded:
        return
    terminalreporter.section("random programs not judged (Inductor alone is wrong too)")
    for line in discarded[:20]:
        terminalreporter.write_line(line)
    if len(discarded) > 20:
        terminalreporter.write_line(f"... {len(discarded) - 20} more")
    terminalreporter.write_line(f"{len(discarded)} in all")
