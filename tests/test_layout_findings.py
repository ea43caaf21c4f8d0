"""The programs of the sixth campaign run (seeds 151-204, docs/campaign.md)
counted as *Inductor crash, fxrewrite wrong*: `install()`, v1 form, Inductor
alone raises, fxrewrite's values and input mutations are eager's, and a
stride-reading kernel gets another layout than eager passed it.

Seed 23205 is still so: its test pins the exact difference and says where it
comes from; it fails when the difference changes, fixed or not (then move
the program to the regression tests that require eager's layout). Seed 402
(`DELETED_CLONE_IN_A_LIST`) is fixed: the pre pass records that the slots
held a clone's own result, and the copy is a plain `clone` with eager's
layout; `tests/test_issue_programs.py` runs it every way."""

from __future__ import annotations

import torch

import test_random_programs as trp
from randprog import Program

# Seed 23205: `y = x.t().reshape(-1)` views a (1, 8) input `x` as (8,); a call
# writes `y`, then `add_into(x, x, x)` writes `x` itself.
REGENERATED_VIEW_OF_AN_INPUT = Program(
    shapes=((2, 4, 8), (4, 8), (1, 8)),
    steps=(
        ("unary", "treshape", 2),
        ("fill_rows_", 0, 7.0),
        ("split", 0, 0, 1, 2),
        ("maybe_", 0, None),
        ("rot_", 4, 3, 1),
        ("add_into", 2, 2, 2),
        ("view", 2, (1, 8)),
        ("slice", 3, 0, 0, 8),
        ("select", 2, 1, 6),
        ("bits_list_", (6, 5)),
    ),
    outputs=(("plus", 8), ("plus", 3), ("plus", 5)),
    seed=23205,
    input_layouts=("t", "c", "c"),
)

# Seed 402 (dynamic): `c = v.clone()` of a slice `v` of an input, then one
# call gets `[v.select(1, 3), c, c]`.
DELETED_CLONE_IN_A_LIST = Program(
    shapes=((2, 4, 8), (2, 4, 8), (4, 8)),
    steps=(
        ("binop", "mul", 2, 2),
        ("two_", 2, 2, 2),
        ("slice", 2, 0, 1, 3),
        ("view", 4, (2, 8)),
        ("bits_list_", (3, 4)),
        ("clone", 4),
        ("select", 4, 1, 3),
        ("bits_list_", (7, 6, 6)),
    ),
    outputs=(("plus", 4), ("plus", 0), ("plus", 2)),
    seed=402,
    input_layouts=(),
)


def _ours_where_inductor_alone_raises(p: Program, dynamic: bool) -> str | None:
    """What differs from eager with `install()`, v1 form, once Inductor
    alone is checked to raise on ``p``."""
    expected = trp.eager(p)
    alone = trp.full_compile(p, expected, False, dynamic, with_fxrewrite=False)
    assert alone is not None and alone.startswith("raised:")
    return trp.full_compile(p, expected, False, dynamic, install="full")


def _layout(node: torch.fx.Node) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    val = node.meta["val"]
    return tuple(val.shape), tuple(val.stride()), val.storage_offset()


def test_v1_regenerates_a_written_input_with_another_size_1_stride_and_the_pass_keeps_it():
    """v1's functionalization replays the write of `y` on `x` as
    `y_new.reshape(8, 1).permute(1, 0)`: stride (1, 1) where eager's `x` has
    (8, 1), on the size-1 dimension. The graph handed to the post-grad pass
    passes that view to `add_into`, and nothing in it says eager passed `x`
    itself (a user's own `y.reshape(8, 1).t()` has that stride in eager too),
    so fxrewrite passes the layout the graph states. v2 passes `x`: its bases
    are the inputs."""
    p = REGENERATED_VIEW_OF_AN_INPUT
    arrived = trp.capture(p, v2=False).before.graph
    (call,) = [
        n
        for n in arrived.find_nodes(op="call_function", target=torch.ops.higher_order.auto_functionalized)
        if n.kwargs.get("site") == 5
    ]
    stated = ((1, 8), (1, 1), 0)
    assert {k: _layout(call.kwargs[k]) for k in ("out", "a", "b")} == dict.fromkeys(("out", "a", "b"), stated)

    assert _ours_where_inductor_alone_raises(p, dynamic=False) == (
        "a stride-reading kernel got another layout than in eager:\n"
        "site 5 `out`: size, stride, offset [1, 8], [1, 1], 0; eager passed [1, 8], [8, 1], 0\n"
        "site 5 `a`: size, stride, offset [1, 8], [1, 1], 0; eager passed [1, 8], [8, 1], 0\n"
        "site 5 `b`: size, stride, offset [1, 8], [1, 1], 0; eager passed [1, 8], [8, 1], 0\n"
        "site 9 `xs[0]`: size, stride, offset [1, 8], [1, 1], 0; eager passed [1, 8], [8, 1], 0"
    )
    assert trp.full_compile(p, trp.eager(p), True, False, install="full") is None
