"""Programs named in issues, run as a family: static and ``dynamic=True``,
v1 and v2, both installs (``install()``, the one line), each judged as the
campaign judges a random program (``tests/campaign.py``'s
``judge_installs``): never in a wrong column (fxrewrite wrong where Inductor
alone is right, silently wrong where Inductor alone raises, or held back and
not bitwise Inductor alone's program). Where the issue asks for eager's
result, the test also requires ``right`` for ``install()`` in the
configurations that compile.
"""

from __future__ import annotations

import pytest

import campaign
import test_layout_findings as tlf
import test_random_programs as trp
from randprog import Program

# (program, configurations (v2, dynamic) in which install() must be right)
FAMILIES: dict[str, tuple[Program, set[tuple[bool, bool]]]] = {
    # A list slot whose memory was a clone `remove_noop_ops` deleted (seed
    # 402): install() gave the copy the offset of the memory it came to
    # view (8) where eager's clone has 0. v1 static: Inductor alone and
    # fxrewrite both raise (an unrealized as_strided of the scatter).
    "deleted_clone_in_a_list": (
        tlf.DELETED_CLONE_IN_A_LIST,
        {(True, False), (True, True), (False, True)},
    ),
    # The same with the clone's slot holding the very tensor another slot
    # holds (`[v, v[0], v.clone()]` arrives as `[v, v[0], v]`): only the
    # clone's own slot gets a fresh copy (campaign run 7, seed 1186: offset
    # 16 where eager's clone has 0).
    "deleted_clone_beside_its_source_in_a_list": (
        Program(
            shapes=((4, 8), (8,)),
            steps=(
                ("unbind", 0, 0, 4),
                ("view", 4, (8,)),
                ("dview", 6),
                ("norm_out", 2, 6, 2),
                ("select", 4, 0, 0),
                ("clone", 4),
                ("bits_list_", (4, 7, 9)),
            ),
            outputs=(("plus", 2),),
            seed=1186,
            input_layouts=(),
        ),
        {(True, False), (True, True), (False, False), (False, True)},
    ),
    # A user's clone given in two written slots, then read
    # (`t = x.clone(); two_(t, t, x); add_into(out, t, x)`), the clone
    # deleted by `remove_noop_ops` (campaign run 8, seeds 287 and 295, the
    # latter `out_aux(t, out=t, aux=t)`): install() made the one clone the
    # pre pass recorded, but Inductor computed that lazy value into two
    # buffers, one per written slot, and the call wrote two memories where
    # eager's wrote one.
    "clone_given_in_two_written_slots": (
        Program(
            shapes=((8, 4),),
            steps=(("clone", 0), ("two_", 1, 1, 0), ("out_add", 1, 0)),
            outputs=(("direct", 2),),
            seed=287,
            input_layouts=(),
        ),
        {(True, False), (True, True), (False, False), (False, True)},
    ),
    # A column of a realized `select_scatter` written back into a graph
    # input (seed 65535): the column must be written in place, at eager's
    # offset 3.
    "column_of_a_realized_scatter_written_back": (
        trp.SELECT_OF_A_REALIZED_SCATTER,
        {(True, False), (True, True), (False, False), (False, True)},
    ),
}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_issue_program_is_never_wrong_in_either_install(name: str, v2: bool, dynamic: bool) -> None:
    program, must_be_right = FAMILIES[name]
    tallies = {"full": campaign.Tally(), "one_line": campaign.Tally()}
    campaign.judge_installs(program, v2, dynamic, tallies)
    for install, tally in tallies.items():
        assert tally.counts["programs"] == 1
        wrong = {c: tally.examples[c] for c in campaign.WRONG if tally.counts[c]}
        assert not wrong, f"{install}: {wrong}"
    if (v2, dynamic) in must_be_right:
        full = tallies["full"]
        assert full.counts["right"] == 1, (
            f"install() is not eager's: {dict(full.counts)} {dict(full.examples)}"
        )
