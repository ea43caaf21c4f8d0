"""The v2 encoding (``_x_base_index``, ``_xs_length``, slices, as_strided
views, aliases) is parsed once, by the engine (``read_written`` in
``rust/forms/reinplace_v2.rs``); the pre pass and the live-graph metadata
read it through ``_core.v2_written_views``. Checked here on a node torch
itself made, against what the keywords say."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo
from torch import Tensor
from torch._higher_order_ops.auto_functionalize import auto_functionalized_v2
from torch._inductor import config as inductor_config

from fxrewrite import _core
from fxrewrite._pre_pass import alias_groups_of
from fxrewrite.encode import schema_facts
from fxrewrite.fx_meta import v2_written_views


@torch.library.custom_op("fxr_v2enc::lists_", mutates_args=("xs", "y"))
def lists_(xs: list[Tensor], y: Tensor, z: Tensor | None) -> None:
    for i, x in enumerate(xs):
        x.add_(i + 1)
    y.mul_(2)


def program(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    lists_([a[1:3], a[0], b.t()[1]], b, None)
    return a + 1, b - 1


class Seen:
    """What the pre pass and the metadata code read off the v2 node, taken
    while the node is alive (Inductor's own passes rewrite it later)."""

    def __init__(self, node: torch.fx.Node) -> None:
        self.op = node.args[0]
        self.kwargs: dict[str, Any] = dict(node.kwargs)
        self.views = v2_written_views(node, self.op)
        self.groups = alias_groups_of(node)


def _seen() -> Seen:
    seen: list[Seen] = []

    def keep(graph: torch.fx.Graph) -> None:
        seen.extend(Seen(n) for n in graph.nodes if n.target is auto_functionalized_v2)

    torch._dynamo.reset()
    with inductor_config.patch(
        post_grad_custom_pre_pass=keep, enable_auto_functionalized_v2=True, fx_graph_cache=False
    ):
        torch.compile(program, backend="inductor", fullgraph=True)(torch.ones(4, 3), torch.ones(3, 3))
    (one,) = seen
    return one


def test_the_engine_reads_each_written_tensor_of_a_real_node() -> None:
    seen = _seen()
    views, kw = seen.views, seen.kwargs
    assert views is not None and set(views) == {"xs", "y"}
    xs, ys = views["xs"], views["y"]
    assert xs is not None and ys is not None and len(ys) == 1
    assert [v[0] for v in xs if v is not None] == ["xs[0]", "xs[1]", "xs[2]"]
    # Every view names its base and the keywords that hold its geometry,
    # exactly as the node holds them.
    for i, v in enumerate(xs):
        assert v is not None
        _, base, kind, keys = v
        assert base == kw[f"_xs_{i}_base_index"]
        assert kind in ("whole", "alias", "slice", "as_strided")
        assert all(k in kw for k in keys) and all(k.startswith(f"_xs_{i}_") for k in keys)
    y = ys[0]
    assert y is not None and y[:3] == ("y", kw["_y_base_index"], "whole")
    assert xs[0][2] != "whole"  # type: ignore[index]  # a row slice of `a`
    # `a`'s rows and `b` are two bases; `b`'s column view shares `b`'s base.
    assert len(kw["_all_bases"]) == 2
    assert xs[0][1] == xs[1][1] != xs[2][1] == y[1]  # type: ignore[index]
    # The pre pass's record groups the slots by those bases.
    assert seen.groups == (("xs[0]", "xs[1]"), ("xs[2]", "y"))


def test_keywords_that_do_not_encode_the_arguments_are_a_reason_not_a_guess() -> None:
    seen = _seen()
    facts = schema_facts(seen.op)
    kw = {k: v for k, v in seen.kwargs.items() if k != "_xs_1_base_index"}
    with pytest.raises(_core.InvalidGraphError, match="missing _xs_1_base_index"):
        _core.v2_written_views(facts, kw)
    kw = dict(seen.kwargs, _xs_length=None)
    assert dict(_core.v2_written_views(facts, kw))["xs"] is None
    kw = dict(seen.kwargs, _y_base_index="zero")
    with pytest.raises(_core.InvalidGraphError, match="unexpected _y_base_index"):
        _core.v2_written_views(facts, kw)
