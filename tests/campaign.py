"""A campaign of random programs that keeps going after a failure: every
program is judged, failures are grouped by cause, and one program per cause
is shrunk to a small reproducer.

    python tests/campaign.py --full 300 --forms v2,v1 --seed 1 --out /tmp/campaign
    python tests/campaign.py --capture 2000 --forms v2 --seed 2 --out /tmp/campaign

The pytest suite stops at the first failure and shrinks it; this script is
for counting. It writes ``<out>/results.jsonl`` (one line per program) and
``<out>/summary.md`` (counts per form, causes with their shrunk programs and
sources). Discarded programs (Inductor alone wrong too) are counted apart.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import UnsatisfiedAssumption

import test_random_programs as trp
from randprog import Program, make_inputs, programs, run, without_step


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", type=int, default=0, help="full-compile programs per form")
    ap.add_argument("--capture", type=int, default=0, help="captured-graph programs per form")
    ap.add_argument("--forms", default="v2,v1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shrink-budget", type=int, default=60, help="judgements per shrunk cause")
    ap.add_argument(
        "--from",
        dest="source",
        type=Path,
        help="results.jsonl of an earlier run: classify its failures again, group and shrink (no new programs)",
    )
    ap.add_argument("--no-shrink", action="store_true")
    args = ap.parse_args()
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
                settings(
                    max_examples=n,
                    phases=[Phase.generate],
                    database=None,
                    deadline=None,
                    derandomize=False,
                    suppress_health_check=list(HealthCheck),
                )(
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
