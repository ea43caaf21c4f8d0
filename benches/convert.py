"""The parts of fxrewrite that cross the CPython C API, timed on the MoE graphs
of ``benches/make_graphs.py``: what the stable-ABI (abi3) build can cost.

    python benches/convert.py [--sizes 1e3,1e4] [--forms v2,v1] [--repeat 21]

- ``from_fx``: ``_core.Graph.from_fx``, the pass's reader: one walk over the
  live graph's nodes, every node read from Python objects into the IR;
- ``plan``: the engine with the GIL released (the plan stays in Rust);
- ``to_parts``: the IR back into Python tuples.

Medians of process CPU time. To compare builds, install each wheel in turn
(``pip install --force-reinstall --no-deps WHEEL``) and run this script on
each; docs/install.md ("What the stable ABI costs") has the numbers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_graphs
from fxrewrite import _core
from fxrewrite.encode import encode


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    """Median CPU time of ``repeat`` calls, in milliseconds."""
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e3,1e4", help="target node counts, comma separated")
    ap.add_argument("--forms", default="v2,v1", help="v2, v1 or both")
    ap.add_argument("--repeat", type=int, default=21)
    args = ap.parse_args(argv)
    print(f"native module: {Path(_core.__file__).name}; Python {sys.version.split()[0]}; CPU time, median")
    print(f"{'nodes':>7} {'form':>4} {'from_fx':>11} {'plan':>9} {'to_parts':>9}")
    for size in (int(float(s)) for s in args.sizes.split(",") if s.strip()):
        for form in (f.strip() for f in args.forms.split(",") if f.strip()):
            v2 = form == "v2"
            gm, _ = make_graphs.build_layers(make_graphs.layers_for(size, v2), v2, codegen=False)
            native = encode(gm.graph, meta_mode="operands").native
            row = [
                median_ms(lambda gm=gm: _core.Graph.from_fx(gm.graph, meta="operands"), args.repeat),
                median_ms(native.plan, args.repeat),
                median_ms(native.to_parts, args.repeat),
            ]
            print(f"{len(native):>7} {form:>4} " + " ".join(f"{ms:>8.2f} ms" for ms in row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
