"""Memory sharing between the arguments of one call, through full
``torch.compile``: the rewritten call must see exactly the sharing eager's
call saw. Every kernel here reads an argument *after* writing another, so a
call given another sharing than eager's computes another value.

Two installs: the one line (``post_grad_custom_post_pass = fxrewrite.pass_``,
no record of the program's sharing: a call whose arguments share memory is
left to Inductor, whose answer it then is) and ``fxrewrite.install()`` (the
pre pass records the alias groups: the sharing is kept, or split where
Inductor's ``remove_noop_ops`` made it). Results are compared with eager,
never with Inductor alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

import fxrewrite
from fxrewrite import pipeline


@torch.library.custom_op("fxr_share::two_", mutates_args=("a", "b"))
def two_(a: Tensor, b: Tensor, c: Tensor) -> None:
    a.add_(1)
    a.add_(c)  # reads c after writing a: c is a in eager
    b.mul_(2)


@torch.library.custom_op("fxr_share::shift_add", mutates_args=("out",))
def shift_add(out: Tensor, x: Tensor) -> None:
    # Writes row by row while reading the row before: on shared memory it
    # computes a running sum, as a streaming kernel would.
    for i in range(x.shape[0]):
        out[i] = x[i] + (x[i - 1] if i > 0 else 0)


@torch.library.custom_op("fxr_share::norm_out", mutates_args=("out",))
def norm_out(out: Tensor, x: Tensor, w: Tensor) -> None:
    out.copy_(x * w)
    out.div_(x.abs().max() + 1)  # reads x after writing out


@torch.library.custom_op("fxr_share::pair_", mutates_args=("out", "aux"))
def pair_(out: Tensor, aux: Tensor) -> None:
    out.mul_(3)
    aux.add_(out.flatten()[: aux.numel()].view_as(aux))  # reads out after writing it


@torch.library.custom_op("fxr_share::chain_", mutates_args=("xs",))
def chain_(xs: list[Tensor]) -> None:
    # Each element gets the sum of the one before it, read after that one
    # was written: elements sharing memory see each other's writes.
    for i, x in enumerate(xs):
        x.add_(1 if i == 0 else xs[i - 1].float().sum().item() % 7)


@torch.library.custom_op("fxr_share::bits_", mutates_args=("f", "i"))
def bits_(f: Tensor, i: Tensor) -> None:
    f.mul_(2)
    i.bitwise_xor_(1)  # the int32 view of f: flips a bit of what was just written


def _run(
    fn: Callable[..., Any],
    args: tuple[Tensor, ...],
    *,
    v2: bool,
    install: str,
    dynamic: bool = False,
    leave: tuple[Any, ...] = (),
) -> tuple[Any, tuple[Tensor, ...], fxrewrite.Pass | None]:
    """Compiles ``fn`` with ``install`` ("none": Inductor alone, "line":
    the post pass only, "full": ``fxrewrite.install()``), runs it on copies
    of ``args``; returns the result, the copies after the call and the pass."""
    torch._dynamo.reset()
    the_pass = fxrewrite.Pass(leave=leave) if install != "none" else None
    hooks: dict[str, Any] = {"post_grad_custom_post_pass": the_pass}
    if install == "full":
        hooks["joint_custom_pre_pass"] = fxrewrite.pre_pass
    with torch._inductor.config.patch(
        {**hooks, "fx_graph_cache": False, "enable_auto_functionalized_v2": v2}
    ):
        inputs = tuple(a.clone() for a in args)
        if dynamic:
            for t in inputs:
                torch._dynamo.mark_dynamic(t, 0)
        out = torch.compile(fn, fullgraph=True)(*inputs)
    return out, inputs, the_pass


def _eager(fn: Callable[..., Any], args: tuple[Tensor, ...]) -> tuple[Any, tuple[Tensor, ...]]:
    inputs = tuple(a.clone() for a in args)
    return fn(*inputs), inputs


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Tensor):
        return a.shape == b.shape and bool(torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-5))
    return all(_same(x, y) for x, y in zip(a, b, strict=True))


def _report(p: fxrewrite.Pass | None) -> fxrewrite.Report:
    assert p is not None and p.last_report is not None, "the pass never ran"
    return p.last_report


def _right(fn: Callable[..., Any], args: tuple[Tensor, ...], **kw: Any) -> fxrewrite.Report:
    """Compiles with fxrewrite, asserts eager's outputs and input mutations,
    returns the report."""
    want, want_in = _eager(fn, args)
    got, got_in, p = _run(fn, args, **kw)
    assert _same(got, want), "outputs differ from eager"
    assert _same(got_in, want_in), "input mutations differ from eager"
    return _report(p)


# ----- the example -------------------------------------------------


def _example(a: Tensor, b: Tensor) -> Tensor:
    torch.ops.fxr_share.two_(a, b, a)  # c is a
    return a + b


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_one_tensor_as_read_and_written_argument_is_right_with_the_one_line(v2, dynamic):
    args = (torch.randn(6), torch.randn(6))
    report = _right(_example, args, v2=v2, install="line", dynamic=dynamic)
    [d] = report.decisions
    assert d.action == "left" and d.cause == "unattributed_sharing", d
    assert "fxrewrite.install()" in (d.reason or "")


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_one_tensor_as_read_and_written_argument_is_in_place_with_the_pre_pass(v2, dynamic):
    args = (torch.randn(6), torch.randn(6))
    report = _right(_example, args, v2=v2, install="full", dynamic=dynamic)
    [d] = report.decisions
    assert d.action == "reinplaced", d
    assert report.clones == []


def test_the_one_line_warns_once_naming_the_fix(caplog):
    pipeline._warned_about_the_pre_pass = False
    args = (torch.randn(6), torch.randn(6))
    with caplog.at_level(logging.WARNING, logger="fxrewrite"):
        _run(_example, args, v2=True, install="line")
        _run(_example, args, v2=False, install="line")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "install()" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert "pytorch#198031" in warnings[0].getMessage()


def test_strict_mode_raises_on_unattributed_sharing():
    torch._dynamo.reset()
    with (
        torch._inductor.config.patch(
            {"post_grad_custom_post_pass": fxrewrite.Pass(strict=True), "fx_graph_cache": False}
        ),
        pytest.raises(Exception, match="share memory"),
    ):
        torch.compile(_example, fullgraph=True)(torch.randn(6), torch.randn(6))


# ----- sharing the program had: kept -----------------------------------------


def test_norm_into_its_own_input_on_a_graph_input_and_on_a_matmul_result(v2):
    def on_input(x: Tensor, w: Tensor) -> Tensor:
        torch.ops.fxr_share.norm_out(x, x, w)
        return x * 1.5

    def on_matmul(x: Tensor, w: Tensor) -> Tensor:
        t = x @ x.T
        torch.ops.fxr_share.norm_out(t, t, w)
        return t

    args = (torch.randn(5, 5), torch.randn(5))
    for fn in (on_input, on_matmul):
        for install in ("line", "full"):
            report = _right(fn, args, v2=v2, install=install)
            [d] = report.decisions
            assert d.action == ("left" if install == "line" else "reinplaced"), (fn.__name__, install, d)


def test_one_fresh_tensor_in_two_written_slots_is_one_memory(v2):
    def f(x: Tensor) -> Tensor:
        t = x * 2
        torch.ops.fxr_share.pair_(out=t, aux=t)
        return t

    report = _right(f, (torch.randn(4, 3),), v2=v2, install="full")
    assert [d.action for d in report.decisions] == ["reinplaced"]


def test_a_list_holding_a_tensor_twice_and_a_view_of_it(v2):
    def f(x: Tensor) -> Tensor:
        a = x + 1
        t = a[1:3]
        torch.ops.fxr_share.chain_([t, a, a])
        return a

    report = _right(f, (torch.randn(4, 3),), v2=v2, install="full")
    assert [d.action for d in report.decisions] == ["reinplaced"]


def test_a_dtype_view_in_a_written_slot(v2):
    def f(x: Tensor) -> Tensor:
        t = x + 0.25
        torch.ops.fxr_share.bits_(t, t.view(torch.int32))
        return t

    report = _right(f, (torch.randn(8),), v2=v2, install="full")
    assert [d.action for d in report.decisions] == ["reinplaced"]


def test_a_tensor_and_an_unbound_column_in_two_written_slots(v2):
    def f(x: Tensor) -> Tensor:
        a = x * 3
        torch.ops.fxr_share.pair_(a, a.unbind(1)[0])
        return a

    report = _right(f, (torch.randn(4, 3),), v2=v2, install="full")
    assert [d.action for d in report.decisions] == ["reinplaced"]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_shared_memory_that_must_be_copied_gets_one_copy_for_all_its_slots(v2, dynamic):
    # `c` snapshots `t` (Inductor drops the clone: then `c` reads `t`'s old
    # value after the call), so `t` cannot be written in place. The kernel
    # must still see its two slots as one memory: one copy serves both.
    # Inductor alone copies the written slot only, and the kernel reads the
    # old value where eager read what it had just written.
    def f(x: Tensor, b: Tensor) -> Tensor:
        t = x * 2
        c = t.clone()
        torch.ops.fxr_share.two_(t, b, t)
        return c + t

    args = (torch.randn(6), torch.randn(6))
    report = _right(f, args, v2=v2, install="full", dynamic=dynamic)
    [d] = report.decisions
    assert d.action == "cloned" and len(d.clones) == 1, d
    assert "one copy also serves" in d.clones[0].reason
    want, _ = _eager(f, args)
    alone, _, _ = _run(f, args, v2=v2, install="none", dynamic=dynamic)
    assert not _same(alone, want), "Inductor alone is right here: the test no longer shows the split it fixes"


# ----- sharing the program did not have: split ------------------------------


def test_a_clone_removed_by_inductor_is_made_again(v2):
    # pytorch#198031: `remove_noop_ops` deletes the user's clone, and the
    # kernel would read memory it is writing. Inductor alone runs it in
    # place and computes a running sum.
    def f(a: Tensor) -> Tensor:
        t = a * 2
        y = t.clone()
        torch.ops.fxr_share.shift_add(y, t)
        return y

    args = (torch.randn(5, 3),)
    report = _right(f, args, v2=v2, install="full")
    [d] = report.decisions
    assert d.action == "cloned" and "did not in the program" in d.clones[0].reason, d
    line = _run(f, args, v2=v2, install="line")[2]
    assert _report(line).decisions[0].cause == "unattributed_sharing"


def test_a_clone_of_one_written_argument_removed_by_inductor_is_made_again(v2):
    def f(x: Tensor) -> tuple[Tensor, Tensor]:
        t = x * 2
        u = t.clone()
        torch.ops.fxr_share.pair_(t, u)
        return t, u

    report = _right(f, (torch.randn(4, 3),), v2=v2, install="full")
    [d] = report.decisions
    assert d.action == "cloned" and len(d.clones) == 1, d


# ----- the escape hatch -------------------------------------------------------


def test_an_operator_named_in_leave_is_left_even_in_strict_mode(v2, monkeypatch):
    def f(x: Tensor, w: Tensor) -> Tensor:
        t = x + 1
        torch.ops.fxr_share.norm_out(t, x, w)
        return t

    args = (torch.randn(4, 4), torch.randn(4))
    for leave in ((torch.ops.fxr_share.norm_out,), ("fxr_share::norm_out.default",), (norm_out,)):
        report = _right(f, args, v2=v2, install="full", leave=leave)
        [d] = report.decisions
        assert d.action == "left" and d.cause == "requested", (leave, d)
    strict = fxrewrite.Pass(strict=True, leave=["fxr_share::norm_out"])
    assert strict.uuid() != fxrewrite.Pass(strict=True).uuid()
    monkeypatch.setenv("FXREWRITE_LEAVE", "fxr_share::norm_out")
    assert strict.uuid() == fxrewrite.Pass(strict=True).uuid()
    report = _right(f, args, v2=v2, install="full")
    assert report.decisions[0].cause == "requested"


def test_leave_rejects_what_is_not_an_operator(monkeypatch):
    with pytest.raises(ValueError, match="not an operator name"):
        fxrewrite.Pass(leave=["norm_out"])
    with pytest.raises(ValueError, match="neither an operator"):
        fxrewrite.Pass(leave=[3])
    monkeypatch.setenv("FXREWRITE_LEAVE", "rotary")
    with pytest.raises(ValueError, match="FXREWRITE_LEAVE"):
        fxrewrite.Pass().uuid()


# ----- fxrewrite.install() --------------------------------------------------------


class _Recorder(torch._inductor.custom_graph_pass.CustomGraphPass):
    def __init__(self, seen: list[str], name: str) -> None:
        self.seen, self.name = seen, name

    def __call__(self, graph: torch.fx.Graph) -> None:
        afs = fxrewrite.encode.count_auto_functionalized(graph)
        self.seen.append(f"{self.name}:{afs}")

    def uuid(self) -> str:
        return self.name


def test_install_sets_both_hooks_after_and_before_the_passes_already_there():
    seen: list[str] = []
    config = torch._inductor.config
    with config.patch(
        {
            "post_grad_custom_post_pass": _Recorder(seen, "user-post"),
            "joint_custom_pre_pass": _Recorder(seen, "user-pre"),
            "fx_graph_cache": False,
        }
    ):
        before = (config.post_grad_custom_post_pass, config.joint_custom_pre_pass)
        with fxrewrite.install() as installed:
            again = fxrewrite.install()  # installs nothing twice
            assert again.pass_ is installed.pass_
            torch._dynamo.reset()
            args = (torch.randn(6), torch.randn(6))
            want, _ = _eager(_example, args)
            got = torch.compile(_example, fullgraph=True)(*(a.clone() for a in args))
            assert _same(got, want)
            report = installed.pass_.last_report
            assert report is not None and [d.action for d in report.decisions] == ["reinplaced"]
            # The user's post pass saw the node, fxrewrite then rewrote it.
            assert "user-post:1" in seen and "user-pre:1" in seen
            assert isinstance(config.post_grad_custom_post_pass, fxrewrite.ComposedPass)
            assert config.post_grad_custom_post_pass.uuid() is not None
        assert (config.post_grad_custom_post_pass, config.joint_custom_pre_pass) == before


def test_install_with_options_makes_its_own_pass():
    config = torch._inductor.config
    with config.patch({"post_grad_custom_post_pass": None, "joint_custom_pre_pass": None}):
        installed = fxrewrite.install(strict=True, leave=["fxr_share::norm_out"])
        try:
            assert installed.pass_ is not fxrewrite.pass_
            assert installed.pass_.strict and installed.pass_.leave == ["fxr_share::norm_out"]
            assert config.post_grad_custom_post_pass is installed.pass_
            assert config.joint_custom_pre_pass is fxrewrite.pre_pass
        finally:
            installed.uninstall()
        assert config.post_grad_custom_post_pass is None and config.joint_custom_pre_pass is None
