"""Clones left after the post-grad passes: fxrewrite never leaves more than
Inductor's own passes, and leaves none where Inductor clones needlessly."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._inductor import config as inductor_config

import fxrewrite
from fxrewrite.demo import measure_post_grad
from programs import PROGRAMS, Program


def post_grad_counts(p: Program, use_fxrewrite: bool, v2: bool) -> tuple[int, int]:
    """Clones and ``copy_`` write-backs left after the post-grad passes, with
    or without fxrewrite; the compiled result is checked against eager."""
    torch._dynamo.reset()
    custom = fxrewrite.Pass(strict=True) if use_fxrewrite else None
    with (
        inductor_config.patch(
            {
                "post_grad_custom_post_pass": custom,
                "fx_graph_cache": False,
                "enable_auto_functionalized_v2": v2,
            }
        ),
        measure_post_grad() as stats,
    ):
        args = p.make_inputs()
        got = torch.compile(p.fn, fullgraph=True)(*[a.clone() for a in args])
    expected = p.fn(*[a.clone() for a in args])
    torch.testing.assert_close(got, expected)
    assert stats.remaining == 0
    return stats.clones, stats.copies


def clones_after_post_grad(p: Program, use_fxrewrite: bool, v2: bool) -> int:
    return post_grad_counts(p, use_fxrewrite, v2)[0]


# (program, form) -> (Inductor's clones, fxrewrite's clones), measured with torch 2.15.
EXPECTED = {
    ("reorderable reader", True): (1, 0),
    ("reorderable reader", False): (1, 0),
    ("rotary on split qkv", False): (2, 0),
    ("MLA rotary (reshaped q, unsqueezed k_pe)", False): (2, 0),
    ("read from a disjoint view of the written buffer", False): (1, 0),
    ("two views of an input, written back", False): (2, 0),
}


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_never_more_clones_or_copies_than_inductor(program, v2):
    ours, our_copies = post_grad_counts(program, use_fxrewrite=True, v2=v2)
    try:
        inductor, inductor_copies = post_grad_counts(program, use_fxrewrite=False, v2=v2)
    except torch._inductor.exc.InductorError:
        # torch 2.15 fails to lower the v1 form of two mutations of views of
        # one buffer (2.13 returned uninitialised memory); fxrewrite compiles
        # it, matching eager, with no clone.
        assert (program.name, v2) == ("two views of one buffer", False)
        assert ours == 0
        return
    assert ours <= inductor
    assert our_copies <= inductor_copies
    if (program.name, v2) in EXPECTED:
        assert (inductor, ours) == EXPECTED[(program.name, v2)]
