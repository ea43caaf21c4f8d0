"""Two builds of fxrewrite side by side on the same graphs, in one run:
where the pass's time goes (encode / engine / apply) before and after a
change, with the bare walk and, optionally, Inductor's own passes as the
yardsticks.

    python benches/before_after.py --before DIR --after DIR [--rounds 5]
                                   [--sizes 1e4] [--forms v2,v1] [--inductor]

Each of ``--before`` and ``--after`` is a directory holding an importable
``fxrewrite`` package with its native module: for example a copy of
``python/`` after ``maturin develop --release`` at each revision, or
``pip install --no-deps --target DIR`` of the wheel ``scripts/build_wheel.sh``
builds there. Every process gets one hash seed (``PYTHONHASHSEED=0``:
per-process seeds alone moved a build's timings by up to 50%). Every round runs ``benches/compare.py`` once per build, in a
fresh process with that directory first on ``PYTHONPATH``, alternating which
build goes first; each run reports the median of ``--repeat`` rewrites of a
fresh copy of the graph (process CPU time), and the table gives the median
over rounds. A shared machine drifts: only the rows of one run compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

COMPARE = Path(__file__).resolve().parent / "compare.py"
PARTS = ("encode", "engine", "apply")
#: One hash seed for every run: with a random seed per process, two runs of
#: one build differed by up to 50% in the bare walk and 18% in encoding (set
#: and dict layouts of the graph's nodes); with one seed, by 2%.
HASH_SEED = "0"


def _run(build: Path, only: str, sizes: str, forms: str, repeat: int) -> list[dict[str, Any]]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(build), os.environ.get("PYTHONPATH", "")]),
        PYTHONHASHSEED=HASH_SEED,
    )
    cmd = [sys.executable, str(COMPARE), "--only", only, "--sizes", sizes, "--forms", forms]
    cmd += ["--repeat", str(repeat), "--no-memory", "--json"]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("[\n") :])


def _check_build(build: Path) -> None:
    if not (build / "fxrewrite" / "__init__.py").is_file():
        sys.exit(
            f"before_after.py: {build} holds no fxrewrite package (expected {build}/fxrewrite/__init__.py)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--before", type=Path, required=True, help="directory holding the first build's fxrewrite"
    )
    ap.add_argument(
        "--after", type=Path, required=True, help="directory holding the second build's fxrewrite"
    )
    ap.add_argument("--rounds", type=int, default=5, help="runs of each build, alternating (default 5)")
    ap.add_argument("--repeat", type=int, default=3, help="rewrites per run; each run reports their median")
    ap.add_argument("--sizes", default="1e4", help="target node counts, comma separated (default 1e4)")
    ap.add_argument("--forms", default="v2,v1", help="v2, v1 or both")
    ap.add_argument(
        "--inductor", action="store_true", help="also time Inductor's passes once (slow: ~12 s a run)"
    )
    args = ap.parse_args()
    builds = {"before": args.before.resolve(), "after": args.after.resolve()}
    for b in builds.values():
        _check_build(b)

    runs: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for side in order:
            print(f"round {r + 1}/{args.rounds}: {side}", file=sys.stderr, flush=True)
            for row in _run(builds[side], "fxrewrite,floor", args.sizes, args.forms, args.repeat):
                runs.setdefault((side, row["form"], row["nodes"]), []).append(row["methods"])
    inductor: dict[tuple[str, int], float] = {}
    if args.inductor:
        print("Inductor's passes", file=sys.stderr, flush=True)
        for row in _run(builds["after"], "inductor", args.sizes, args.forms, args.repeat):
            inductor[(row["form"], row["nodes"])] = row["methods"]["inductor"]["median_s"]

    def med(side: str, form: str, nodes: int, part: str) -> float:
        rows = runs[(side, form, nodes)]
        if part == "total":
            return statistics.median(m["fxrewrite"]["median_s"] for m in rows)
        if part == "floor":
            return statistics.median(m["floor"]["median_s"] for m in rows)
        return statistics.median(m["fxrewrite"]["split"][part] for m in rows)

    print(
        f"median of {args.rounds} runs per build (each the median of {args.repeat}); process CPU time, ms\n"
    )
    head = "| nodes | form | build | encode | engine | apply | total | bare walk | total / walk |"
    if inductor:
        head += " Inductor / total |"
    print(head)
    print("|" + " ---: |" * 2 + " --- |" + " ---: |" * (7 if inductor else 6))
    keys = sorted({(form, nodes) for _, form, nodes in runs}, key=lambda k: (k[1], k[0]))
    for form, nodes in keys:
        for side in ("before", "after"):
            vals = [med(side, form, nodes, p) * 1e3 for p in (*PARTS, "total", "floor")]
            line = f"| {nodes:,} | {form} | {side} | " + " | ".join(f"{v:.1f}" for v in vals)
            line += f" | {vals[3] / vals[4]:.0f}x |"
            if inductor:
                line += f" {inductor[(form, nodes)] * 1e3 / vals[3]:.0f}x |"
            print(line)
        ratios = [med("after", form, nodes, p) / med("before", form, nodes, p) for p in (*PARTS, "total")]
        cells = [f"{r:.2f}" for r in ratios] + ["", ""] + ([""] if inductor else [])
        print(f"| {nodes:,} | {form} | after / before | " + " | ".join(cells) + " |")
    if inductor:
        print(
            "\nInductor's reinplace + decompose (one run of --repeat): "
            + ", ".join(
                f"{form} {nodes:,} nodes {s * 1e3:,.0f} ms" for (form, nodes), s in sorted(inductor.items())
            )
        )


if __name__ == "__main__":
    main()
