"""The campaign's tally (``tests/campaign.py`` ``judge_installs``) on
programs whose answers are known: a crash of Inductor alone is a fix, not
fewer copies than ours (it has no code), and so is a wrong result of
Inductor alone (a wrong program's copies are no measure); where both compile
and are right, more copies (kernels or bytes) in our code than in
Inductor's is counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

import campaign
import test_random_programs as trp
from randprog import Program
from test_copy_counts import SNAPSHOT_OF_A_WRITTEN_INPUT

#: Inductor alone fails to lower it (an ``as_strided`` of a computed value);
#: the one line rewrites it with one clone (found by the campaign, seeds
#: 76-111, counted then as more copies than Inductor's 0).
INDUCTOR_ALONE_CRASHES = Program(
    shapes=((8,), (8,), (1, 8)),
    steps=(
        ("binop", "add", 2, 2),
        ("unary", "contig", 1),
        ("rot_", 1, 2, 0),
        ("reshape", 4, (8,)),
        ("slice", 5, 0, 0, 5),
        ("split", 3, 1, 3, 3),
        ("list_scale_", (8, 2, 5), 0.5),
    ),
    outputs=(("direct", 9), ("direct", 3), ("plus", 2)),
    seed=750,
    input_layouts=(),
)

#: Both compile; fxrewrite's code copies more bytes (two clones of 24 floats,
#: 192 bytes, where Inductor alone's three copies move 160), from the same run.
ONE_COPY_MORE = Program(
    shapes=((4, 8), (8,), (1, 8)),
    steps=(
        ("stack", (2, 2, 2), 1),
        ("add_into", 2, 2, 2),
        ("unary", "sum0", 3),
        ("scale_", 3, -1.0),
        ("cat", (4, 4, 4), 0),
        ("add_into", 3, 3, 3),
        ("scale_", 4, -1.0),
        ("acc_sum", 2, 2),
    ),
    outputs=(("plus", 1), ("direct", 6), ("direct", 4)),
    seed=2652,
    input_layouts=(),
)


#: Inductor alone returns a later value (remove_noop_ops deletes the clone,
#: reinplace then writes into it) with 2 copies; fxrewrite is right with 3
#: (docs/campaign-more-copies.md, seed 65536, shrunk).
INDUCTOR_ALONE_WRONG = SNAPSHOT_OF_A_WRITTEN_INPUT


def _tally(program: Program, v2: bool, install: str) -> campaign.Tally:
    tallies = {install: campaign.Tally()}
    campaign.judge_installs(program, v2, False, tallies)
    return tallies[install]


def test_a_crash_of_inductor_alone_is_a_fix_not_fewer_copies() -> None:
    t = _tally(INDUCTOR_ALONE_CRASHES, False, "one_line")
    assert (t.counts["right"], t.counts["fixes"], t.counts["more_copies"]) == (1, 1, 0)
    assert (t.counts["copies_fxrewrite"], t.counts["copies_inductor"]) == (0, 0)


def test_more_copies_where_both_compile_are_counted() -> None:
    t = _tally(ONE_COPY_MORE, True, "full")
    assert (t.counts["right"], t.counts["fixes"], t.counts["more_copies"]) == (1, 0, 1)
    assert (t.counts["copies_fxrewrite"], t.counts["copies_inductor"]) == (2, 3)


def test_a_wrong_result_of_inductor_alone_is_a_fix_not_fewer_copies() -> None:
    t = _tally(INDUCTOR_ALONE_WRONG, True, "full")
    assert (t.counts["right"], t.counts["fixes"], t.counts["more_copies"]) == (1, 1, 0)
    assert (t.counts["copies_fxrewrite"], t.counts["copies_inductor"]) == (0, 0)


# ----- CI's slice: a fixed number of programs, judged whatever the time ------------------------


def _stub_campaign(monkeypatch, judged: list[int]) -> None:
    """Programs and judging replaced by counting: only ``accumulate``'s loop runs."""
    monkeypatch.setattr(campaign, "programs_of_seed", lambda seed: [seed] * campaign.BATCH)
    monkeypatch.setattr(
        campaign, "judge_installs", lambda program, v2, dynamic, tallies: judged.append(program)
    )
    monkeypatch.setattr(campaign, "_commit", lambda: "test")


def test_the_slice_judges_exactly_its_programs_and_says_so(monkeypatch, capsys) -> None:
    judged: list[int] = []
    _stub_campaign(monkeypatch, judged)
    assert campaign.accumulate(None, None, first_seed=0, n_programs=10) == 0
    assert judged == [0] * 2 * campaign.BATCH + [1] * 2 * 2  # both forms of each program
    assert capsys.readouterr().out.splitlines()[-1] == "judged 10 programs (seeds 0-1)"


def test_a_slice_stopped_by_the_time_limit_exits_1(monkeypatch, capsys) -> None:
    judged: list[int] = []
    _stub_campaign(monkeypatch, judged)
    assert campaign.accumulate(0, None, first_seed=3, n_programs=6) == 1
    assert judged == []
    assert "judged 0 of 6 programs" in capsys.readouterr().out.splitlines()[-1]


def test_the_campaigns_slice_judges_its_six_programs_with_none_wrong() -> None:
    """The campaign itself, on the same 6 programs every run (seed 0, both
    installs and forms, eager and Inductor alone beside): it must judge
    exactly 6 and exit 0, which it does only when every must-be-0 column is
    0. In a child process: the campaign installs fxrewrite process-wide."""
    script = Path(campaign.__file__)
    run = subprocess.run(
        [sys.executable, str(script), "--programs", "6", "--no-log", "--first-seed", "0"],
        capture_output=True,
        text=True,
        timeout=540,
    )
    tail = run.stdout[-4000:] + run.stderr[-4000:]
    assert run.returncode == 0, tail
    assert "judged 6 programs" in run.stdout, tail


def _held_back_judged(monkeypatch: Any, alone_runs: list[float], ours: float) -> campaign.Tally:
    """``judge_installs`` on one program whose graph the one line held back
    (a decision with cause ``unattributed_sharing``), where every compile is
    wrong: Inductor alone returns ``alone_runs`` in turn, fxrewrite ``ours``."""
    runs = iter(alone_runs)
    held = SimpleNamespace(clones=[], decisions=[SimpleNamespace(cause="unattributed_sharing")])

    def full_compile(program: Any, expected: Any, v2: bool, dynamic: bool, **kw: Any) -> str:
        value = next(runs) if kw.get("with_fxrewrite") is False else ours
        sink = kw.get("sink")
        if sink is not None:
            sink["result"] = trp.Result(outputs=(torch.tensor([value]),), inputs=[])
            if kw.get("with_fxrewrite") is not False:
                sink["reports"] = [held]
        return "output 0 differs"

    monkeypatch.setattr(trp, "full_compile", full_compile)
    monkeypatch.setattr(trp, "eager", lambda program: trp.Result(outputs=(torch.tensor([1.0]),), inputs=[]))
    tally = campaign.Tally()
    campaign.judge_installs(ONE_COPY_MORE, False, False, {"one_line": tally})
    return tally


def test_a_held_back_graph_that_differs_from_a_reproducible_inductor_alone_is_counted(
    monkeypatch: Any,
) -> None:
    tally = _held_back_judged(monkeypatch, alone_runs=[5.0, 5.0], ours=7.0)
    assert tally.counts["held_back_differs"] == 1 and tally.not_reproducible == 0
    assert tally.counts["both_wrong"] == 1


def test_held_back_values_are_not_judged_where_inductor_alone_does_not_reproduce_its_own(
    monkeypatch: Any,
) -> None:
    """torch 2.14's Inductor reads memory it never wrote on some programs it
    gets wrong: two runs of one compile differ, so its bits are no reference."""
    tally = _held_back_judged(monkeypatch, alone_runs=[5.0, 6.0], ours=7.0)
    assert tally.counts["held_back_differs"] == 0 and tally.not_reproducible == 1
    assert tally.counts["both_wrong"] == 1
