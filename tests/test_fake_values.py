"""``fx_meta.fake_call``: the values the applier gives the views it inserts or
re-points must be the ones fake propagation gives (layout, dtype, device and
storage), whether they come from the meta-kernel shortcut or the fake mode."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from fxrewrite import fx_meta

aten = torch.ops.aten


def _same(got: Any, want: Any) -> None:
    if isinstance(want, list | tuple):
        assert isinstance(got, list | tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w)
        return
    assert type(got) is FakeTensor
    assert got.fake_mode is want.fake_mode
    assert (got.shape, got.stride(), got.storage_offset()) == (
        want.shape,
        want.stride(),
        want.storage_offset(),
    )
    assert (got.dtype, got.device) == (want.dtype, want.device)
    assert fx_meta.storage_of(got) == fx_meta.storage_of(want)


def _slow(mode: FakeTensorMode, target: Any, args: tuple[Any, ...]) -> Any:
    with mode:
        return target(*args)


@st.composite
def _view_calls(draw: st.DrawFn) -> tuple[torch.Tensor, Any, tuple[Any, ...]]:
    """A tensor with a drawn layout (a transposed, sliced or offset view of a
    fresh one) and a view operator with arguments valid for it."""
    rank = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    base = torch.empty(64 + 4 * 5 * 5 * 5)
    t = base.as_strided(sizes, torch.empty(sizes).stride(), draw(st.integers(0, 64)))
    if rank > 1 and draw(st.booleans()):
        t = t.transpose(0, rank - 1)
    dim = draw(st.integers(0, rank - 1))
    n = t.shape[dim]
    start = draw(st.integers(0, n))
    choice = draw(
        st.sampled_from(
            [
                "slice",
                "select",
                "as_strided",
                "view",
                "t",
                "permute",
                "unsqueeze",
                "expand",
                "split",
                "unbind",
                "narrow",
                "alias",
                "dtype",
            ]
        )
    )
    if choice == "slice":
        return t, aten.slice.Tensor, (dim, start, draw(st.integers(start, n)))
    if choice == "select":
        return t, aten.select.int, (dim, min(start, n - 1))
    if choice == "as_strided":
        return t, aten.as_strided.default, ([2, 2], [draw(st.integers(0, 3)), 1], draw(st.integers(0, 8)))
    if choice == "view":
        return t.contiguous(), aten.view.default, ([-1],)
    if choice == "t":
        return t, aten.transpose.int, (0, rank - 1)
    if choice == "permute":
        return t, aten.permute.default, (list(reversed(range(rank))),)
    if choice == "unsqueeze":
        return t, aten.unsqueeze.default, (dim,)
    if choice == "expand":
        return t.select(dim, 0).unsqueeze(dim), aten.expand.default, ([*t.shape],)
    if choice == "split":
        return t, aten.split.Tensor, (max(1, start), dim)
    if choice == "unbind":
        return t, aten.unbind.int, (dim,)
    if choice == "narrow":
        return t, aten.narrow.default, (dim, start, n - start)
    if choice == "alias":
        return t, aten.alias.default, ()
    return t.contiguous(), aten.view.dtype, (torch.int32,)


# Fixed cases (derandomize, no example database): a red CI always means a
# change broke something, never a newly drawn case.
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(_view_calls())
def test_meta_kernel_shortcut_gives_what_fake_propagation_gives(call):
    real, target, rest = call
    mode = FakeTensorMode()
    x = mode.from_tensor(real)
    args = (x, *rest)
    assert target in fx_meta._static_views()
    assert fx_meta._all_static(mode, args, {})
    _same(fx_meta.fake_call(mode, target, args, {}), _slow(mode, target, args))


def test_the_shortcut_does_not_enter_the_fake_mode(monkeypatch):
    # The shortcut is the point of fake_call: it must not dispatch through
    # FakeTensorMode for a static view (else it is only slower).
    mode = FakeTensorMode()
    x = mode.from_tensor(torch.empty(4, 6))

    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("dispatched through the fake mode")

    monkeypatch.setattr(FakeTensorMode, "__torch_dispatch__", refuse)
    out = fx_meta.fake_call(mode, aten.slice.Tensor, (x, 1, 2, 5), {})
    assert (out.shape, out.stride(), out.storage_offset()) == ((4, 3), (6, 1), 2)


def test_symbolic_layouts_go_through_the_fake_mode():
    from torch._dynamo.source import LocalSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = mode.from_tensor(
        torch.empty(8, 6),
        source=LocalSource("x"),
        symbolic_context=StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC]),
    )
    args = (x, 1, 2, 5)
    assert not fx_meta._all_static(mode, args, {})
    _same(fx_meta.fake_call(mode, aten.slice.Tensor, args, {}), _slow(mode, aten.slice.Tensor, args))


@pytest.mark.parametrize("target", [aten.add.Tensor, aten.mul.Tensor, aten.clone.default])
def test_other_operators_go_through_the_fake_mode(target, monkeypatch):
    mode = FakeTensorMode()
    x = mode.from_tensor(torch.empty(4, 6).t())
    args = (x,) if target is aten.clone.default else (x, x)
    want = _slow(mode, target, args)
    dispatched = []
    real = FakeTensorMode.__torch_dispatch__

    def counted(self: Any, *a: Any, **k: Any) -> Any:
        dispatched.append(a[0])
        return real(self, *a, **k)

    monkeypatch.setattr(FakeTensorMode, "__torch_dispatch__", counted)
    got = fx_meta.fake_call(mode, target, args, {})
    assert target in dispatched
    assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)
    assert fx_meta.storage_of(got) != fx_meta.storage_of(x)


def test_refresh_views_skips_only_operators_whose_returns_cannot_alias():
    import operator

    import conftest  # noqa: F401  (registers the fxr_test operators)

    a = torch.ops.aten
    assert fx_meta._returns_no_alias(a.add.Tensor)
    assert fx_meta._returns_no_alias(torch.ops.fxr_test.acc_sum.default)  # a custom op's result is fresh
    for may_alias in (a.slice.Tensor, a.view.default, a.split.Tensor, a.copy_.default, operator.getitem):
        assert not fx_meta._returns_no_alias(may_alias), may_alias


def test_same_layout_of_one_value_and_of_two_equal_or_different_ones():
    """``eager_input_vals`` skips its fake dispatch where eager's base has
    the graph's base layout. One value (the record holding the graph's own
    base) has it when strided, static or symbolic; a sparse one has no
    layout to compare, even with itself."""
    from torch._dynamo.source import LocalSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    mode = FakeTensorMode(shape_env=ShapeEnv())
    with mode:
        x = torch.empty(4, 8)
    y = mode.from_tensor(
        torch.empty(8, 6),
        source=LocalSource("y"),
        symbolic_context=StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC]),
    )
    for a in (x, x[:, 1:], x.t(), y, y[1:]):
        assert fx_meta._same_layout(a, a), a
    assert fx_meta._same_layout(x[:, 1:], x[:, 1:])  # two values, one layout
    assert fx_meta._same_layout(y[1:], y[1:])
    assert not fx_meta._same_layout(x, x.t())
    assert not fx_meta._same_layout(x, x[1:])  # another offset
    assert not fx_meta._same_layout(y, y[1:])
    sparse = torch.eye(3).to_sparse()
    assert not fx_meta._same_layout(sparse, sparse)
    assert not fx_meta._same_layout(x, 1.0) and not fx_meta._same_layout(None, None)
