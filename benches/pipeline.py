"""What a user feels: a real ``torch.compile`` of the MoE decoder of
``benches/make_graphs.py``, Inductor alone against Inductor + fxrewrite, side
by side in one run.

For each size and form it times every post-grad pass by name (wrapping
``GraphTransformObserver.apply_graph_pass`` / ``apply_gm_pass``), Inductor's
``FakeTensorUpdater.incremental_update`` and the nodes it recomputes, the
post-grad passes as a whole, and the compile to first output. Pass-in-isolation
ratios stay in ``benches/compare.py``.

    python benches/pipeline.py --sizes 1e3,1e4 --forms v2,v1
    python benches/pipeline.py --sizes 1e5 --forms v2 --only fxrewrite   # Inductor alone takes many minutes there

Printed as Markdown; ``--json OUT`` keeps every number.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import torch._dynamo
import torch._inductor.compile_fx as compile_fx
import torch._inductor.fx_utils as fx_utils
from torch._inductor import config as inductor_config
from torch.fx.passes.graph_transform_observer import GraphTransformObserver

import fxrewrite
from fxrewrite.encode import count_auto_functionalized
from make_graphs import Config, MoEDecoder, layers_for

METHODS = ("inductor", "fxrewrite")


@dataclass
class Run:
    """One compile."""

    method: str
    nodes: int = 0
    af_nodes: int = 0
    compile_to_first_output_s: float = 0.0
    post_grad_s: float = 0.0
    passes_s: dict[str, float] = field(default_factory=dict)
    incremental_update_s: float = 0.0
    incremental_update_nodes: int = 0
    clones: int = 0
    max_rss_mb: float = 0.0
    matches_eager: bool = False


@contextlib.contextmanager
def _instrument(run: Run) -> Iterator[None]:
    """Times passes by name, the incremental fake tensor updates and the
    post-grad passes; counts nodes, auto_functionalized nodes and clones."""
    passes: dict[str, float] = defaultdict(float)
    originals = (
        GraphTransformObserver.apply_graph_pass,
        GraphTransformObserver.apply_gm_pass,
        fx_utils.FakeTensorUpdater.incremental_update,
        compile_fx.post_grad_passes,
    )
    graph_pass, gm_pass, update, post_grad = originals

    def timed_graph_pass(self: Any, fn: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return graph_pass(self, fn)
        finally:
            passes[self.passname] += time.perf_counter() - t0

    def timed_gm_pass(self: Any, fn: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return gm_pass(self, fn)
        finally:
            passes[self.passname] += time.perf_counter() - t0

    def timed_update(self: Any) -> int:
        t0 = time.perf_counter()
        n = update(self)
        run.incremental_update_s += time.perf_counter() - t0
        run.incremental_update_nodes += int(n or 0)
        return n

    def timed_post_grad(gm: torch.fx.GraphModule, is_inference: bool) -> Any:
        run.nodes += len(gm.graph.nodes)
        run.af_nodes += count_auto_functionalized(gm.graph)
        before = _clones(gm.graph)
        t0 = time.perf_counter()
        try:
            return post_grad(gm, is_inference)
        finally:
            run.post_grad_s += time.perf_counter() - t0
            run.clones += _clones(gm.graph) - before

    GraphTransformObserver.apply_graph_pass = timed_graph_pass  # type: ignore[method-assign]
    GraphTransformObserver.apply_gm_pass = timed_gm_pass  # type: ignore[method-assign]
    fx_utils.FakeTensorUpdater.incremental_update = timed_update  # type: ignore[method-assign]
    compile_fx.post_grad_passes = timed_post_grad
    try:
        yield
    finally:
        (
            GraphTransformObserver.apply_graph_pass,
            GraphTransformObserver.apply_gm_pass,
            fx_utils.FakeTensorUpdater.incremental_update,
            compile_fx.post_grad_passes,
        ) = originals
        run.passes_s = dict(passes)


def _clones(graph: torch.fx.Graph) -> int:
    return sum(1 for n in graph.nodes if n.target is torch.ops.aten.clone.default)


def compile_once(model: MoEDecoder, inputs: tuple[torch.Tensor, ...], method: str, v2: bool) -> Run:
    """One full compile of ``model`` and its first output."""
    run = Run(method)
    with torch.no_grad():
        expected = model(*[x.clone() for x in inputs])
    torch._dynamo.reset()
    patch = {
        "fx_graph_cache": False,
        "enable_auto_functionalized_v2": v2,
        "post_grad_custom_post_pass": fxrewrite.Pass(strict=True) if method == "fxrewrite" else None,
    }
    with inductor_config.patch(patch), _instrument(run), torch.no_grad():
        t0 = time.perf_counter()
        got = torch.compile(model, fullgraph=True)(*[x.clone() for x in inputs])
        run.compile_to_first_output_s = time.perf_counter() - t0
    run.matches_eager = bool(torch.allclose(got, expected, rtol=1e-4, atol=1e-4))
    run.max_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return run


def _fmt_s(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        "| nodes | form | method | post-grad passes | incremental_update (nodes) "
        "| custom pass | reinplace | decompose | compile to first output | clones | eager |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        for m in r["runs"]:
            p = m["passes_s"]
            lines.append(
                f"| {m['nodes']:,} | {r['form']} | {m['method']} | {_fmt_s(m['post_grad_s'])} "
                f"| {_fmt_s(m['incremental_update_s'])} ({m['incremental_update_nodes']:,}) "
                f"| {_fmt_s(p.get('post_grad_custom_post_pass', 0.0))} "
                f"| {_fmt_s(p.get('reinplace_inplaceable_ops', 0.0))} "
                f"| {_fmt_s(p.get('decompose_auto_functionalized', 0.0))} "
                f"| {_fmt_s(m['compile_to_first_output_s'])} | {m['clones']} "
                f"| {'yes' if m['matches_eager'] else 'NO'} |"
            )
        runs = {m["method"]: m for m in r["runs"]}
        if len(runs) == 2:
            a, b = runs["inductor"], runs["fxrewrite"]
            lines.append(
                f"| | {r['form']} | Inductor / fxrewrite | {a['post_grad_s'] / max(b['post_grad_s'], 1e-9):.1f}x "
                f"| | | | | {a['compile_to_first_output_s'] / max(b['compile_to_first_output_s'], 1e-9):.2f}x | | |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e3,1e4", help="target post-grad node counts (default 1e3,1e4)")
    ap.add_argument("--forms", default="v2,v1", help="v2, v1 or both (default v2,v1)")
    ap.add_argument("--only", default=",".join(METHODS), help="inductor, fxrewrite or both")
    ap.add_argument("--json", metavar="OUT", help="also write every number as JSON")
    args = ap.parse_args(argv)
    methods = [m for m in args.only.split(",") if m]
    if bad := [m for m in methods if m not in METHODS]:
        ap.error(f"unknown method {bad[0]!r}; choose from {', '.join(METHODS)}")
    results = []
    for size in (int(float(s)) for s in args.sizes.split(",")):
        for form in args.forms.split(","):
            v2 = form == "v2"
            cfg = Config()
            layers = layers_for(size, v2, cfg)
            model = MoEDecoder(cfg, layers=layers).eval()
            inputs = model.example_inputs()
            runs = []
            for method in methods:
                print(f"compiling {layers} layers ({form}) with {method} ...", file=sys.stderr, flush=True)
                runs.append(asdict(compile_once(model, inputs, method, v2)))
            results.append({"target": size, "form": form, "layers": layers, "runs": runs})
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if all(m["matches_eager"] for r in results for m in r["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
