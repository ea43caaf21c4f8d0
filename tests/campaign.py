"""A campaign of random programs that keeps going after a failure: every
program is judged, failures are grouped by cause, and one program per cause
is shrunk to a small reproducer.

    python tests/campaign.py --full 300 --forms v2,v1 --seed 1 --out /tmp/campaign
    python tests/campaign.py --capture 2000 --forms v2 --seed 2 --out /tmp/campaign

    python tests/campaign.py --minutes 25          # the accumulating campaign
    python tests/campaign.py --programs 6 --no-log --first-seed 0  # CI's slice

``--minutes N`` is the campaign that accumulates (issue 30): both installs
(``fxrewrite.install()`` and the one line), both forms, a quarter of the
programs compiled with ``dynamic=True``, every program judged against eager
*and* Inductor alone. It stops by itself after N minutes (the program under
way is finished), starts at the first seed no earlier row of
``docs/campaign.md`` used, and appends one row per install and form there
(commit it). ``--programs N`` runs the same campaign on exactly N programs,
with no time limit (CI's slice judges a fixed number, however slow the
machine); with ``--minutes`` as well, a run the time limit stops before N
programs exits 1. Either way it prints how many programs it judged. Seeds
are hypothesis seeds of batches of programs, odd seeds drawing programs with
sharing calls (``programs(sharing=True)``), seeds 2 and 3 modulo 4 the
patterns issues named as well (``programs(issue_shapes=True)``: a list
holding a tensor and its row, a user's clone in a slot, vLLM's qkv rotary,
a realized scatter then an input write-back).

The pytest suite stops at the first failure and shrinks it; this script is
for counting. It writes ``<out>/results.jsonl`` (one line per program) and
``<out>/summary.md`` (counts per form, causes with their shrunk programs and
sources). Discarded programs (Inductor alone wrong too) are counted apart.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import UnsatisfiedAssumption

import test_random_programs as trp
from gen_copies import GeneratedCopies
from randprog import Program, make_inputs, programs, run, without_step

#: Hypothesis settings of a counting run: generate from the seed given, no
#: database, no shrinking, no health checks (a slow compile is the point).
GENERATE_ONLY: dict[str, Any] = {
    "phases": [Phase.generate],
    "database": None,
    "deadline": None,
    "derandomize": False,
    "suppress_health_check": list(HealthCheck),
}


def _norm(text: str) -> str:
    """A message with names and numbers made generic, to group by."""
    text = re.sub(r"`[^`]*`", "`_`", text)
    text = re.sub(r"\bauto_functionalized(_v2)?(_\d+)?\b", "AF_NODE", text)
    text = re.sub(r"\([\w:]+\.default\)", "(OP)", text)
    text = re.sub(r"\b[a-z_]+_\d+\b", "NODE", text)
    text = re.sub(r"-?\d+(\.\d+)?", "N", text)
    return text.strip()


_WRITTEN = {
    "scale_": ("x",),
    "add_into": ("out",),
    "out_add": ("out",),
    "fused_add_": ("x", "res"),
    "rot_": ("q", "k"),
    "fill_rows_": ("x",),
    "acc_sum": ("x",),
    "maybe_": ("x", "y"),
}


def _layout_cause(problem: str, program: Program, v2: bool) -> str:
    """Which part of the layout differs (offsets, strides of size-1/size-0
    dims only, or other strides), of a written or a read argument, and
    whether fxrewrite cloned anything (static capture)."""
    roles = set()
    for m in re.finditer(r"site (\d+) `([^`]*)`", problem):
        kind = program.steps[int(m.group(1))][0]
        written = kind == "list_scale_" or m.group(2) in _WRITTEN.get(kind, ())
        roles.add("written" if written else "read")
    try:
        cap = trp.capture(program, v2)
        clones = "clones" if cap.report is not None and cap.report.clones else "no clone"
    except Exception:
        clones = "clones unknown"
    kinds = set()
    for m in re.finditer(
        r"size, stride, offset \[([^\]]*)\], \[([^\]]*)\], (\d+); eager passed \[([^\]]*)\], \[([^\]]*)\], (\d+)",
        problem,
    ):
        size = [int(x) for x in m.group(1).split(",") if x.strip()]
        got = [int(x) for x in m.group(2).split(",") if x.strip()]
        want = [int(x) for x in m.group(5).split(",") if x.strip()]
        if m.group(3) != m.group(6):
            kinds.add("storage offset")
        diff = [d for d in range(len(size)) if got[d] != want[d]]
        if diff and all(size[d] <= 1 for d in diff):
            kinds.add("stride of a size-1/size-0 dim")
        elif diff:
            kinds.add("stride")
    if "not called there in eager" in problem:
        kinds.add("a kernel call eager does not make")
    return f"layout, {' and '.join(sorted(roles))} argument, {clones}: " + " + ".join(sorted(kinds))


def classify_full(problem: str, program: Program, v2: bool) -> str:
    if problem.startswith("raised:"):
        lines = [ln for ln in problem.splitlines() if ln.strip()]
        last = lines[-1]
        for ln in reversed(lines):
            if re.match(r"^[\w.]+(Error|Exception)\b", ln.strip()):
                last = ln.strip()
                break
        return "raised: " + _norm(last)[:240]
    if problem.startswith("a stride-reading kernel"):
        return _layout_cause(problem, program, v2)
    if problem.startswith("the pass"):
        return _norm(problem.splitlines()[0])[:160]
    # Wrong values: is the rewritten post-grad graph itself wrong (run by
    # the FX interpreter), or only what Inductor makes of it?
    try:
        cap = trp.capture(program, v2)
        expected = trp.eager(program)
        assert cap.after is not None
        fx = trp.mismatch(expected, trp.interpret(program, cap.after, cap.placeholders, check_layouts=False))
    except Exception as e:
        return f"values wrong (rewritten graph not checked: {type(e).__name__})"
    if fx is None:
        moved = "readers moved" if cap.report is not None and cap.report.moved else "no reader moved"
        return f"values wrong after Inductor lowering, rewritten graph right in FX ({moved})"
    return "values wrong in the rewritten graph itself"


def judge_full(program: Program, v2: bool, dynamic: bool) -> dict[str, Any]:
    expected = trp.eager(program)
    problem = trp.full_compile(program, expected, v2, dynamic)
    if problem is None:
        return {"status": "ok"}
    alone = trp.full_compile(program, expected, v2, dynamic, with_fxrewrite=False)
    if alone is not None:
        return {"status": "discard", "problem": problem, "alone": alone}
    return {"status": "fail", "problem": problem, "cause": classify_full(problem, program, v2)}


def judge_capture(program: Program, v2: bool, dynamic: bool) -> dict[str, Any]:
    del dynamic
    try:
        trp.check_captured(program, v2)
    except UnsatisfiedAssumption:
        return {"status": "discard", "problem": "torch's graph is wrong (see randprog.DISCARDED)"}
    except AssertionError as e:
        first = str(e).splitlines()[0]
        if first.startswith("harness: the un-rewritten graph disagrees"):
            return {"status": "discard", "problem": str(e)[:4000]}
        return {"status": "fail", "problem": str(e)[:8000], "cause": _norm(first.split(":")[0])[:160]}
    except Exception:
        tb = traceback.format_exc()
        return {
            "status": "fail",
            "problem": tb[-8000:],
            "cause": "raised: " + _norm(tb.splitlines()[-1])[:160],
        }
    return {"status": "ok"}


Judge = Callable[[Program, bool, bool], dict[str, Any]]


def _runs(program: Program) -> bool:
    try:
        run(program, [t.clone() for t in make_inputs(program)])
    except Exception:
        return False
    return True


def shrink(program: Program, v2: bool, dynamic: bool, cause: str, judge: Judge, budget: int) -> Program:
    """Greedy delta debugging: drop steps and outputs, make inputs
    contiguous, keep any change after which the program still fails with
    ``cause`` (and Inductor alone is still right)."""
    calls = 0

    def same(p: Program) -> bool:
        nonlocal calls
        if calls >= budget or not _runs(p):
            return False
        calls += 1
        r = judge(p, v2, dynamic)
        return bool(r["status"] == "fail" and r["cause"] == cause)

    changed = True
    while changed and calls < budget:
        changed = False
        for i in reversed(range(len(program.steps))):
            cand = without_step(program, i) if i < len(program.steps) else None
            if cand is not None and same(cand):
                program, changed = cand, True
        for i in reversed(range(len(program.outputs))):
            if len(program.outputs) > 1:
                cand = replace(program, outputs=program.outputs[:i] + program.outputs[i + 1 :])
                if same(cand):
                    program, changed = cand, True
        for i, step in enumerate(program.steps):
            if step[0] in ("add_into", "fused_add_", "rot_", "fill_rows_", "maybe_", "list_scale_"):
                target = step[1][0] if step[0] == "list_scale_" else step[1]
                cand = replace(
                    program, steps=(*program.steps[:i], ("scale_", target, 2.0), *program.steps[i + 1 :])
                )
                if same(cand):
                    program, changed = cand, True
        if program.input_layouts:
            cand = replace(program, input_layouts=())
            if same(cand):
                program, changed = cand, True
        if program.seed != 0:
            cand = replace(program, seed=0)
            if same(cand):
                program, changed = cand, True
    return program


def _judge_one(
    mode: str,
    form: str,
    v2: bool,
    judge: Judge,
    counts: Counter[tuple[str, str]],
    groups: dict[tuple[str, str], list[dict[str, Any]]],
    results: Path,
) -> Callable[[Program, bool], None]:
    def judge_one(program: Program, dynamic: bool) -> None:
        torch._dynamo.reset()
        try:
            r = judge(program, v2, dynamic)
        except Exception:
            r = {"status": "fail", "problem": traceback.format_exc()[-8000:], "cause": "harness raised"}
        r.update(mode=mode, form=form, dynamic=dynamic, program=repr(program))
        counts[(f"{mode} {form}", r["status"])] += 1
        if r["status"] == "fail":
            groups[(mode, r["cause"])].append(r)
        with results.open("a") as f:
            f.write(json.dumps(r) + "\n")

    return judge_one


# ---------------------------------------------------------------------------
# The accumulating campaign (--minutes).

LOG = Path(__file__).resolve().parent.parent / "docs" / "campaign.md"
BATCH = 8  # programs per seed
COLUMNS = (
    "programs",
    "right",
    "both_wrong",
    "fxrewrite_wrong",
    "inductor_crash_fxrewrite_wrong",
    "held_back_differs",
    "more_copies",
    "fixes",
    "clones",
    "copies_fxrewrite",
    "copies_inductor",
)
#: the columns that must stay 0: a program counted there fails the run
WRONG = ("fxrewrite_wrong", "inductor_crash_fxrewrite_wrong", "held_back_differs")
_LOG_HEAD = """# The random-program campaign

One row per install and form for each run of `python tests/campaign.py
--minutes N` (issue 30). Every program is compiled three times per form:
Inductor alone, `fxrewrite.install()` (the pre pass records alias groups,
`Pass(strict=True)`), and the one line (`post_grad_custom_post_pass =
fxrewrite.pass_` only). A quarter are compiled with `dynamic=True`.

- *right*: fxrewrite's results and input mutations equal eager's.
- *both wrong*: fxrewrite and Inductor alone both differ from eager (or both
  raise): a torch bug, not ours.
- *fxrewrite wrong*: Inductor alone is right, fxrewrite is not (wrong values,
  a raise, or a node left). Must be 0.
- *Inductor crash, fxrewrite wrong*: Inductor alone raises, fxrewrite gives
  silently wrong values. Must be 0.
- *held back differs*: the pass held back a graph (sharing no record
  attributes) and the program differs from Inductor alone's, bitwise. Must
  be 0. Where both are wrong and a second run of Inductor alone differs
  from its first (it read memory it never wrote), values cannot tell, and
  the program is not counted here (the run prints how many).
- *more copies*: more copy kernels or bytes in the generated code than
  Inductor alone, among the programs both compiled and ran.
- *fixes*: Inductor alone wrong or raising, fxrewrite right.
- *clones*: clones fxrewrite kept (from its reports); *copies*: copy kernels
  and copy calls in the generated code, fxrewrite / Inductor alone, summed
  over the programs both compiled and ran. Rows before the fourth run (seeds
  0-111) counted every program, so a crash of Inductor alone (no code, 0
  copies) counted as fewer copies than fxrewrite's.

| date | commit | install | form | seeds | programs | right | both wrong | fxrewrite wrong | Inductor crash, fxrewrite wrong | held back differs | more copies | fixes | clones | copies fxrewrite | copies Inductor |
| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
"""


def next_seed(log: Path = LOG) -> int:
    """The first seed no row of ``log`` used."""
    if not log.exists():
        return 0
    last = -1
    for m in re.finditer(r"^\|[^|]*\|[^|]*\|[^|]*\|[^|]*\| (\d+)-(\d+) \|", log.read_text(), re.M):
        last = max(last, int(m.group(2)))
    return last + 1


def programs_of_seed(seed: int) -> list[Program]:
    """The ``BATCH`` programs of ``seed``: the same on every run."""
    out: list[Program] = []

    @hypothesis_seed(seed)
    @settings(max_examples=BATCH, **GENERATE_ONLY)
    @given(program=programs(min_steps=4, sharing=seed % 2 == 1, issue_shapes=seed % 4 >= 2))
    def draw(program: Program) -> None:
        if _runs(program):
            out.append(program)

    draw()
    return out


@dataclass
class Tally:
    counts: Counter[str] = dc_field(default_factory=Counter)
    #: the first few problems of each wrong column, for the summary
    examples: dict[str, list[str]] = dc_field(default_factory=lambda: defaultdict(list))
    #: held-back programs not judged bitwise: Inductor alone, wrong, did not reproduce its own bits
    not_reproducible: int = 0

    def add(self, column: str, program: Program, dynamic: bool, problem: str = "") -> None:
        self.counts[column] += 1
        if column in WRONG or column == "more_copies":
            if len(self.examples[column]) < 3:
                self.examples[column].append(f"{program!r} dynamic={dynamic}\n{problem[-1500:]}")


def _bitwise(a: trp.Result, b: trp.Result) -> bool:
    def same(x: torch.Tensor, y: torch.Tensor) -> bool:
        return x.shape == y.shape and x.dtype == y.dtype and bool(torch.equal(x, y))

    return (
        len(a.outputs) == len(b.outputs)
        and all(same(x, y) for x, y in zip(a.outputs, b.outputs, strict=True))
        and all(same(x, y) for x, y in zip(a.inputs, b.inputs, strict=True))
    )


def judge_installs(program: Program, v2: bool, dynamic: bool, tallies: dict[str, Tally]) -> None:
    """Compiles ``program`` with Inductor alone and with each install, and
    adds it to the tally of each install."""
    expected = trp.eager(program)
    theirs: dict[str, Any] = {}
    their_copies = GeneratedCopies()
    alone = trp.full_compile(
        program, expected, v2, dynamic, with_fxrewrite=False, copies=their_copies, sink=theirs
    )
    for install, tally in tallies.items():
        ours: dict[str, Any] = {}
        our_copies = GeneratedCopies()
        problem = trp.full_compile(
            program, expected, v2, dynamic, install=install, copies=our_copies, sink=ours
        )
        tally.counts["programs"] += 1
        reports = ours.get("reports", [])
        tally.counts["clones"] += sum(len(r.clones) for r in reports)
        if problem is None:
            tally.add("right", program, dynamic)
            if alone is not None:
                tally.add("fixes", program, dynamic)
        elif alone is None:
            tally.add("fxrewrite_wrong", program, dynamic, problem)
        elif trp.silently_wrong_where_inductor_raises(program, problem, alone):
            tally.add("inductor_crash_fxrewrite_wrong", program, dynamic, problem)
        else:
            tally.add("both_wrong", program, dynamic)
        # Copies compare only where both compiled, ran and are right: a
        # crash has no code, and its 0 copies are not fewer than ours; a
        # wrong program's copies are no measure (Inductor alone can copy
        # less by losing a value: docs/campaign-more-copies.md, seed 65536).
        both_ran = "result" in ours and "result" in theirs
        comparable = both_ran and problem is None and alone is None
        held = any(d.cause == "unattributed_sharing" for r in reports for d in r.decisions)
        if held:
            same = (
                _bitwise(ours["result"], theirs["result"])
                if both_ran
                else ("result" in ours) == ("result" in theirs)
            )
            if not same and problem is not None and alone is not None and both_ran:
                # Both wrong: Inductor alone may read memory it never wrote (torch
                # 2.14 does on some of these programs), and then two runs of the one
                # program differ. Values that Inductor alone cannot reproduce are no
                # measure of whether the held-back graph is its program.
                again: dict[str, Any] = {}
                trp.full_compile(program, expected, v2, dynamic, with_fxrewrite=False, sink=again)
                if "result" in again and not _bitwise(theirs["result"], again["result"]):
                    tally.not_reproducible += 1
                    same = True
            if not same:
                tally.add("held_back_differs", program, dynamic, f"ours: {problem}\nalone: {alone}")
        if comparable:
            tally.counts["copies_fxrewrite"] += our_copies.total
            tally.counts["copies_inductor"] += their_copies.total
        if comparable and (our_copies.total > their_copies.total or our_copies.bytes > their_copies.bytes):
            tally.add(
                "more_copies",
                program,
                dynamic,
                f"fxrewrite {our_copies.as_dict()} {our_copies.detail}\nInductor {their_copies.as_dict()}",
            )


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], capture_output=True, text=True, check=True, cwd=LOG.parent
    ).stdout.strip()


def _commit() -> str:
    try:
        dirty = _git("status", "--porcelain", "--untracked-files=no")
        return _git("rev-parse", "--short", "HEAD") + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def accumulate(
    minutes: float | None, log: Path | None, *, first_seed: int | None = None, n_programs: int | None = None
) -> int:
    """Runs the campaign for ``minutes``, or on ``n_programs`` programs
    exactly (no time limit unless ``minutes`` is given too), and appends its
    rows to ``log`` (none: CI's slice). Starts at ``first_seed``, by default
    the first seed no row of ``docs/campaign.md`` used. Returns the exit
    status: 1 when a must-be-0 column is not 0, or when fewer than
    ``n_programs`` programs were judged."""
    if minutes is None and n_programs is None:
        raise ValueError("accumulate needs minutes or n_programs")
    first = next_seed(LOG) if first_seed is None else first_seed
    deadline = None if minutes is None else time.monotonic() + minutes * 60
    # The code judged is the code at the start: commits made while the run
    # goes on (it runs beside other work) are not in it.
    commit = _commit()
    tallies = {(install, form): Tally() for install in trp.INSTALLS for form in ("v2", "v1")}
    seed = first
    judged = 0

    def done() -> bool:
        if n_programs is not None and judged >= n_programs:
            return True
        return deadline is not None and time.monotonic() >= deadline

    t0 = time.perf_counter()
    while not done():
        for i, program in enumerate(programs_of_seed(seed)):
            if done():
                break
            dynamic = (seed * BATCH + i) % 4 == 0
            for form in ("v2", "v1"):
                judge_installs(
                    program,
                    form == "v2",
                    dynamic,
                    {install: tallies[(install, form)] for install in trp.INSTALLS},
                )
            judged += 1
            print(f"seed {seed} program {i}: {judged} judged, {time.perf_counter() - t0:.0f} s", flush=True)
        seed += 1
    last = seed - 1
    date = datetime.date.today().isoformat()
    rows = []
    status = 0
    for (install, form), tally in tallies.items():
        c = tally.counts
        label = {"full": "install()", "one_line": "one line"}[install]
        rows.append(
            f"| {date} | {commit} | {label} | {form} | {first}-{last} | "
            + " | ".join(str(c[k]) for k in COLUMNS)
            + " |"
        )
        for column, examples in tally.examples.items():
            if column in WRONG:
                status = 1
            for e in examples:
                print(f"\n{label} {form}: {column}\n{e}", flush=True)
        if tally.not_reproducible:
            print(
                f"\n{label} {form}: {tally.not_reproducible} held-back program(s) not judged bitwise: "
                "Inductor alone, wrong, gave other bits on a second run (counted as both wrong)",
                flush=True,
            )
    print("\n".join(rows))
    if log is not None:
        if not log.exists():
            log.write_text(_LOG_HEAD)
        with log.open("a") as f:
            f.write("\n".join(rows) + "\n")
        print(f"appended {len(rows)} rows to {log}")
    seeds = f"seeds {first}-{last}" if judged else "no seed"
    if n_programs is not None and judged < n_programs:
        print(f"judged {judged} of {n_programs} programs ({seeds}): stopped by the time limit, FAILED")
        return 1
    print(f"judged {judged} programs ({seeds})")
    return status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", type=int, default=0, help="full-compile programs per form")
    ap.add_argument("--capture", type=int, default=0, help="captured-graph programs per form")
    ap.add_argument("--forms", default="v2,v1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--shrink-budget", type=int, default=60, help="judgements per shrunk cause")
    ap.add_argument(
        "--from",
        dest="source",
        type=Path,
        help="results.jsonl of an earlier run: classify its failures again, group and shrink (no new programs)",
    )
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument(
        "--minutes",
        type=float,
        help="the accumulating campaign: both installs and forms for this many minutes, rows "
        "appended to docs/campaign.md (exits 1 when a wrong column is not 0)",
    )
    ap.add_argument(
        "--no-log", action="store_true", help="with --minutes or --programs: append no row (CI's slice)"
    )
    ap.add_argument(
        "--programs",
        type=int,
        help="the accumulating campaign on exactly this many programs, with no time limit (CI's slice: "
        "the same programs on every run, so it is never red by chance); with --minutes too, exits 1 "
        "if the time limit stops it first",
    )
    ap.add_argument(
        "--first-seed",
        type=int,
        help="with --minutes or --programs: start here, not after the last seed of docs/campaign.md",
    )
    args = ap.parse_args()
    if args.programs is not None and args.programs < 1:
        ap.error("--programs must be at least 1")
    if args.minutes is not None or args.programs is not None:
        log = None if args.no_log else LOG
        sys.exit(accumulate(args.minutes, log, first_seed=args.first_seed, n_programs=args.programs))
    if args.out is None:
        ap.error("--out is required (except with --minutes or --programs)")
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    summary_rows: list[str] = []
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    counts: Counter[tuple[str, str]] = Counter()

    if args.source is not None:
        for line in args.source.read_text().splitlines():
            r = json.loads(line)
            counts[(f"{r['mode']} {r['form']}", r["status"])] += 1
            if r["status"] == "fail":
                if r["mode"] == "full" and r["cause"] != "harness raised":
                    program = eval(r["program"], {"Program": Program})
                    r["cause"] = classify_full(r["problem"], program, r["form"] == "v2")
                groups[(r["mode"], r["cause"])].append(r)
            with results.open("a") as f:
                f.write(json.dumps(r) + "\n")

    for mode, n, judge, min_steps in (
        ("full", args.full, judge_full, 4),
        ("capture", args.capture, judge_capture, 3),
    ):
        if not n:
            continue
        for form in args.forms.split(","):
            v2 = form == "v2"
            t0 = time.perf_counter()

            judge_one = _judge_one(mode, form, v2, judge, counts, groups, results)
            one = hypothesis_seed(args.seed)(
                settings(max_examples=n, **GENERATE_ONLY)(
                    given(
                        program=programs(min_steps=min_steps),
                        dynamic=st.sampled_from((False, False, True)) if mode == "full" else st.just(False),
                    )(judge_one)
                )
            )
            one()
            print(f"{mode} {form}: {n} programs in {time.perf_counter() - t0:.0f} s", flush=True)

    for key in sorted({k for k, _ in counts}):
        summary_rows.append(
            f"| {key} | {sum(c for (k, _), c in counts.items() if k == key)} | {counts[(key, 'ok')]} "
            f"| {counts[(key, 'fail')]} | {counts[(key, 'discard')]} |"
        )
    out = [
        "# Campaign",
        "",
        f"seed {args.seed}",
        "",
        "| run | programs | ok | failed | discarded |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    out += summary_rows
    out += ["", "## Failures by cause", ""]
    for (mode, cause), rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        per = Counter(f"{r['form']}{' dynamic' if r['dynamic'] else ''}" for r in rs)
        out.append(f"### {mode}: {cause}")
        out.append("")
        out.append(f"{len(rs)} programs ({', '.join(f'{k}: {v}' for k, v in sorted(per.items()))})")
        smallest = min(rs, key=lambda r: len(eval(r["program"], {"Program": Program}).steps))
        program = eval(smallest["program"], {"Program": Program})
        judge = judge_full if mode == "full" else judge_capture
        t0 = time.perf_counter()
        budget = 0 if args.no_shrink else args.shrink_budget
        small = shrink(program, smallest["form"] == "v2", smallest["dynamic"], cause, judge, budget)
        out += [
            "",
            f"shrunk ({time.perf_counter() - t0:.0f} s) from {len(program.steps)} to {len(small.steps)} steps, "
            f"{smallest['form']}{' dynamic' if smallest['dynamic'] else ''}:",
            "",
            "```python",
            repr(small),
            small.source(),
            "```",
            "",
            "<details><summary>first problem</summary>",
            "",
            "```",
            smallest["problem"][-3000:],
            "```",
            "</details>",
            "",
        ]
        (args.out / "summary.md").write_text("\n".join(out) + "\n")
        print(f"shrunk {mode}: {cause}", flush=True)
    (args.out / "summary.md").write_text("\n".join(out) + "\n")
    print("\n".join(out[: 12 + len(summary_rows)]))


if __name__ == "__main__":
    main()
