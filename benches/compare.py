"""fxrewrite against Inductor's own passes, a blind defunctionalization and a
bare walk over the nodes, side by side on MoE-decoder post-grad graphs.

    python benches/compare.py [--sizes 1e3,1e4,1e5] [--forms v2,v1] [--repeat 5] [--json]
                              [--skip-inductor-above N]
                              [--only fxrewrite,inductor,blind,floor,fxrewrite+update,blind+update]

On the same graph, in one run, each method runs ``--repeat`` times on a fresh
deep copy of the graph (copying is not timed) and the median is reported:

- fxrewrite: ``fxrewrite.rewrite(graph, strict=True)``, with its own
  encode / engine / apply split from ``report.timings``;
- Inductor: ``reinplace_inplaceable_ops(FakeTensorUpdater(gm), graph)``, then
  ``fix_auto_functionalized_dtype_views`` and ``decompose_auto_functionalized``
  as ``post_grad_passes`` runs them, under ``V.set_fake_mode``;
- blind: a vLLM-style defunctionalization in one scan, no safety analysis
  (every auto_functionalized node becomes a direct call on the written
  arguments; it is wrong whenever a written buffer is read later);
- floor: a Python walk over ``graph.nodes`` reading op, target and args;
- fxrewrite+update and blind+update: the pass (fxrewrite as ``pass_`` runs
  it, marking the nodes it changed as current), then what Inductor runs
  right after a custom post pass, ``FakeTensorUpdater.incremental_update``,
  which recomputes the fake values of the changed nodes and their users.
  blind leaves that work to Inductor; fxrewrite does it in the pass. The
  updater is built untimed before the pass, as ``post_grad_passes`` does.

Peak Python memory (``tracemalloc``; native allocations such as the Rust
engine's are not seen) is measured in one more repetition per method, so it
does not distort the timings. The graphs are generated at run time by
``benches/make_graphs.py``.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import torch.fx
from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2

import fxrewrite
import make_graphs

METHODS = ("fxrewrite", "inductor", "blind", "floor", "fxrewrite+update", "blind+update")
_AF = (auto_functionalized, auto_functionalized_v2)


# --- the methods ---------------------------------------------------------------------------------


def run_fxrewrite(gm: torch.fx.GraphModule, ctx: Context) -> dict[str, Any]:
    import fxrewrite.pipeline as pipeline

    saved = pipeline.time
    pipeline.time = _Clock(ctx.clock)  # type: ignore[assignment]
    try:
        report = fxrewrite.rewrite(gm.graph, strict=True)
    finally:
        pipeline.time = saved
    return {"split": dict(report.timings), "report_clones": len(report.clones)}


def run_inductor(gm: torch.fx.GraphModule, ctx: Context) -> dict[str, Any]:
    from torch._inductor.fx_passes.post_grad import (
        decompose_auto_functionalized,
        fix_auto_functionalized_dtype_views,
    )
    from torch._inductor.fx_passes.reinplace import reinplace_inplaceable_ops
    from torch._inductor.fx_utils import FakeTensorUpdater
    from torch._inductor.virtualized import V

    clock = ctx.clock
    with V.set_fake_mode(ctx.fake_mode):
        t0 = clock()
        updater = FakeTensorUpdater(gm)
        t1 = clock()
        reinplace_inplaceable_ops(updater, gm.graph)
        t2 = clock()
        fix_auto_functionalized_dtype_views(gm.graph)
        decompose_auto_functionalized(gm.graph)
        t3 = clock()
    return {"split": {"updater": t1 - t0, "reinplace": t2 - t1, "decompose": t3 - t2}}


def _regenerate(graph: torch.fx.Graph, prefix: str, kw: dict[str, Any], bases: list[Any]) -> Any:
    """The view of ``_all_bases`` a v2 node names with ``prefix``, as torch's
    ``read_view_information_from_args`` regenerates it."""
    idx = kw.pop(f"{prefix}_base_index")
    if idx is None:
        return None
    base = bases[idx]
    if kw.pop(f"{prefix}_alias", None):
        return graph.call_function(torch.ops.aten.alias.default, (base,))
    if f"{prefix}_storage_offset" in kw:
        size, stride = kw.pop(f"{prefix}_size"), kw.pop(f"{prefix}_stride")
        offset = kw.pop(f"{prefix}_storage_offset")
        return graph.call_function(torch.ops.aten.as_strided.default, (base, size, stride, offset))
    if f"{prefix}_slice_dim" in kw:
        dim, start = kw.pop(f"{prefix}_slice_dim"), kw.pop(f"{prefix}_slice_start")
        end = kw.pop(f"{prefix}_slice_end")
        return graph.call_function(torch.ops.aten.slice.Tensor, (base, dim, start, end))
    return base


def run_blind(gm: torch.fx.GraphModule, ctx: Context) -> dict[str, Any]:
    """vLLM-style defunctionalization: one scan, every auto_functionalized(_v2)
    node becomes a call of its op on the written arguments themselves; its
    getitems become those arguments (v2: the bases). No safety analysis."""
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _AF:
            continue
        op = node.args[0]
        schema = op._schema
        kw = dict(node.kwargs)
        with graph.inserting_before(node):
            if node.target is auto_functionalized_v2:
                bases = kw.pop("_all_bases")
                for a in schema.arguments:
                    if a.alias_info is None or not a.alias_info.is_write:
                        continue
                    length = kw.pop(f"_{a.name}_length", -1)
                    if length == -1:
                        kw[a.name] = _regenerate(graph, f"_{a.name}", kw, bases)
                    else:
                        kw[a.name] = (
                            None
                            if length is None
                            else [_regenerate(graph, f"_{a.name}_{i}", kw, bases) for i in range(length)]
                        )
                outs = list(bases)
            else:
                outs = [kw[a.name] for a in schema.arguments if a.alias_info and a.alias_info.is_write]
            call = graph.call_function(op, (), kw)
        returns = len(schema.returns)
        first = max(1, returns)
        for user in list(node.users):
            i = user.args[1]
            if i >= first:
                user.replace_all_uses_with(outs[i - first])
            elif returns == 1:
                user.replace_all_uses_with(call)
            else:
                user.args = (call, i)
                continue
            graph.erase_node(user)
        graph.erase_node(node)
    return {}


def _with_update(edit: Callable[[torch.fx.GraphModule, Any], Any]) -> Callable[..., dict[str, Any]]:
    """``edit``, then what Inductor does right after a custom post pass:
    ``FakeTensorUpdater.incremental_update()``, which recomputes the fake
    values of the nodes the pass changed and of their users. The updater is
    built before the pass, untimed, as ``post_grad_passes`` builds it
    before running any pass. This is the cost a compile pays for the edits
    plus up-to-date metadata, whoever keeps it."""

    def run(gm: torch.fx.GraphModule, ctx: Context) -> dict[str, Any]:
        from torch._inductor.fx_utils import FakeTensorUpdater
        from torch._inductor.virtualized import V

        with V.set_fake_mode(ctx.fake_mode):
            t0 = ctx.clock()
            updater = FakeTensorUpdater(gm)
            untimed = ctx.clock() - t0
            t1 = ctx.clock()
            edit(gm, updater)
            t2 = ctx.clock()
            recomputed = updater.incremental_update()
            t3 = ctx.clock()
        return {
            "untimed": untimed,
            "split": {"pass": t2 - t1, "update": t3 - t2},
            "recomputed": int(recomputed or 0),
        }

    return run


def _fxrewrite_marked(gm: torch.fx.GraphModule, updater: Any) -> None:
    # What fxrewrite.pass_ does inside a compile: rewrite, then mark the
    # nodes it changed as current in the running updater.
    from fxrewrite.inductor_pass import mark_current
    from fxrewrite.pipeline import rewrite_tracking_changes

    _, changed = rewrite_tracking_changes(gm.graph, strict=True)
    mark_current(updater, changed)


def run_floor(gm: torch.fx.GraphModule, ctx: Context) -> dict[str, Any]:
    n_ops = 0
    for n in gm.graph.nodes:
        _ = n.op, n.target, n.args
        n_ops += 1
    return {}


RUNNERS: dict[str, Callable[[torch.fx.GraphModule, Context], dict[str, Any]]] = {
    "fxrewrite": run_fxrewrite,
    "inductor": run_inductor,
    "blind": run_blind,
    "floor": run_floor,
    "fxrewrite+update": _with_update(_fxrewrite_marked),
    "blind+update": _with_update(lambda gm, updater: run_blind(gm, None)),  # type: ignore[arg-type]
}


# --- measuring -----------------------------------------------------------------------------------


@dataclass
class Context:
    fake_mode: Any
    clock: Callable[[], float] = time.perf_counter


class _Clock:
    """Stands in for the ``time`` module inside ``fxrewrite.pipeline`` so that
    ``report.timings`` uses the bench's clock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.perf_counter = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@dataclass
class MethodResult:
    runs: int = 0
    seconds: list[float] = field(default_factory=list)
    median_s: float | None = None
    split: dict[str, float] = field(default_factory=dict)  # medians
    clones: int | None = None
    clone_bytes: int | None = None
    af_left: int | None = None
    peak_bytes: int | None = None
    peak_skipped: str | None = None
    skipped: str | None = None
    recomputed: int | None = None  # nodes incremental_update recomputed (the +update methods)


@dataclass
class SizeResult:
    target: int
    form: str
    nodes: int
    layers: int
    af_nodes: int
    fake: str
    build_s: float
    clones_before: int
    methods: dict[str, MethodResult] = field(default_factory=dict)


def _clones(graph: torch.fx.Graph) -> tuple[int, int]:
    count, total = 0, 0
    for n in graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten.clone.default:
            count += 1
            val = n.meta.get("val")
            if not isinstance(val, torch.Tensor) and isinstance(n.args[0], torch.fx.Node):
                val = n.args[0].meta.get("val")
            if isinstance(val, torch.Tensor):
                total += val.numel() * val.element_size()
    return count, total


def _af_left(graph: torch.fx.Graph) -> int:
    return sum(1 for n in graph.nodes if n.op == "call_function" and n.target in _AF)


def _fresh(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    fresh = make_graphs.bare_module(copy.deepcopy(gm.graph))
    fresh.meta.update(gm.meta)
    return fresh


def measure(
    name: str,
    gm: torch.fx.GraphModule,
    ctx: Context,
    repeat: int,
    budget_s: float,
    memory: bool,
    memory_max_s: float = 60.0,
) -> MethodResult:
    """``repeat`` timed runs (fewer once ``budget_s`` is spent, at least one),
    each on a fresh copy, then one untimed run under tracemalloc (skipped
    when a run takes over ``memory_max_s``: tracemalloc slows Python 2-3x)."""
    runner = RUNNERS[name]
    res = MethodResult()
    splits: dict[str, list[float]] = {}
    spent = 0.0
    for i in range(repeat):
        work = _fresh(gm)
        gc.collect()
        t0 = ctx.clock()
        extra = runner(work, ctx)
        dt = ctx.clock() - t0 - extra.get("untimed", 0.0)
        res.seconds.append(dt)
        spent += dt
        for k, v in extra.get("split", {}).items():
            splits.setdefault(k, []).append(v)
        if i == 0:
            res.recomputed = extra.get("recomputed")
        if i == 0 and name != "floor":
            work.graph.lint()
            res.clones, res.clone_bytes = _clones(work.graph)
            res.af_left = _af_left(work.graph)
        del work
        if spent >= budget_s:
            break
    res.runs = len(res.seconds)
    res.median_s = statistics.median(res.seconds)
    res.split = {k: statistics.median(v) for k, v in splits.items()}
    if memory and res.median_s > memory_max_s:
        res.peak_skipped = f"a run takes over {memory_max_s:.0f} s"
    elif memory:
        work = _fresh(gm)
        gc.collect()
        tracemalloc.start()
        runner(work, ctx)
        res.peak_bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del work
    gc.collect()
    return res


def bench_one(
    target: int,
    v2: bool,
    methods: list[str],
    repeat: int,
    skip_inductor_above: int,
    budget_s: float,
    memory: bool,
    clock: Callable[[], float] = time.perf_counter,
    memory_max_s: float = 60.0,
) -> SizeResult:
    layers = make_graphs.layers_for(target, v2)
    gm, info = make_graphs.build_layers(layers, v2, codegen=False)
    pat = make_graphs.pattern(v2)
    ctx = Context(fake_mode=make_graphs.fake_mode_of(pat.gm.graph), clock=clock)
    out = SizeResult(
        target=target,
        form="v2" if v2 else "v1",
        nodes=info.nodes,
        layers=layers,
        af_nodes=_af_left(gm.graph),
        fake=info.fake,
        build_s=info.stitch_s + info.fake_s,
        clones_before=_clones(gm.graph)[0],
    )
    for name in methods:
        if name == "inductor" and info.nodes > skip_inductor_above:
            out.methods[name] = MethodResult(skipped=f"more than {skip_inductor_above} nodes")
            continue
        if name == "inductor" and info.fake == "none":
            out.methods[name] = MethodResult(skipped="no fake values")
            continue
        out.methods[name] = measure(name, gm, ctx, repeat, budget_s, memory, memory_max_s)
        print(
            f"  [{out.form} {info.nodes} nodes] {name}: {out.methods[name].median_s * 1e3:.1f} ms "
            f"({out.methods[name].runs} runs)",
            file=sys.stderr,
            flush=True,
        )
    del gm
    gc.collect()
    return out


# --- reporting -----------------------------------------------------------------------------------


def _ms(m: MethodResult | None) -> str:
    if m is None:
        return "-"
    if m.skipped:
        return "skipped"
    assert m.median_s is not None
    return f"{m.median_s * 1e3:,.1f}"


def _ratio(a: MethodResult | None, b: MethodResult | None) -> str:
    if a is None or b is None or a.median_s is None or b.median_s is None or b.median_s == 0:
        return "-"
    r = a.median_s / b.median_s
    return f"{r:,.0f}x" if r >= 100 else f"{r:.2f}x"


def _mib(m: MethodResult | None) -> str:
    if m is not None and m.peak_skipped:
        return "not measured"
    return "-" if m is None or m.peak_bytes is None else f"{m.peak_bytes / 2**20:,.1f}"


def _clone_cell(m: MethodResult | None) -> str:
    if m is None or m.clones is None:
        return "-"
    return f"{m.clones} / {m.clone_bytes:,}"


def print_tables(results: list[SizeResult]) -> None:
    print("\nTimes (median ms; each run on a fresh copy of the same graph)\n")
    print(
        "| size | form | nodes | af nodes | fxrewrite | Inductor | blind | floor "
        "| Inductor/fxrewrite | fxrewrite/blind | fxrewrite/floor |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        m = r.methods
        print(
            f"| {r.target:.0e} | {r.form} | {r.nodes:,} | {r.af_nodes:,} | {_ms(m.get('fxrewrite'))} "
            f"| {_ms(m.get('inductor'))} | {_ms(m.get('blind'))} | {_ms(m.get('floor'))} "
            f"| {_ratio(m.get('inductor'), m.get('fxrewrite'))} | {_ratio(m.get('fxrewrite'), m.get('blind'))} "
            f"| {_ratio(m.get('fxrewrite'), m.get('floor'))} |"
        )
    print("\nClones left / bytes copied (aten.clone nodes after the pass), peak Python memory (MiB)\n")
    print(
        "| size | form | fxrewrite clones | Inductor clones | blind clones "
        "| peak fxrewrite | peak Inductor | peak blind | peak floor |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        m = r.methods
        print(
            f"| {r.target:.0e} | {r.form} | {_clone_cell(m.get('fxrewrite'))} | {_clone_cell(m.get('inductor'))} "
            f"| {_clone_cell(m.get('blind'))} | {_mib(m.get('fxrewrite'))} | {_mib(m.get('inductor'))} "
            f"| {_mib(m.get('blind'))} | {_mib(m.get('floor'))} |"
        )
    print("\nfxrewrite: where the time goes (median ms) and time per node\n")
    print("| size | form | nodes | encode | engine | apply | total | engine share | us/node | vs smallest |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    smallest: dict[str, float] = {}
    for r in sorted(results, key=lambda r: (r.form, r.nodes)):
        fx = r.methods.get("fxrewrite")
        if fx is None or fx.median_s is None:
            continue
        s = fx.split
        per_node = fx.median_s / r.nodes * 1e6
        base = smallest.setdefault(r.form, per_node)
        print(
            f"| {r.target:.0e} | {r.form} | {r.nodes:,} | {s.get('encode', 0) * 1e3:,.1f} "
            f"| {s.get('engine', 0) * 1e3:,.1f} | {s.get('apply', 0) * 1e3:,.1f} | {s.get('total', 0) * 1e3:,.1f} "
            f"| {s.get('engine', 0) / s['total'] * 100 if s.get('total') else 0:.1f}% "
            f"| {per_node:.2f} | {per_node / base:.2f}x |"
        )
    ind = [
        (r, r.methods["inductor"])
        for r in results
        if "inductor" in r.methods and r.methods["inductor"].median_s is not None
    ]
    if ind:
        print("\nInductor: where the time goes (median ms)\n")
        print("| size | form | FakeTensorUpdater | reinplace | decompose | runs |")
        print("| ---: | --- | ---: | ---: | ---: | ---: |")
        for r, m in ind:
            s = m.split
            print(
                f"| {r.target:.0e} | {r.form} | {s['updater'] * 1e3:,.1f} | {s['reinplace'] * 1e3:,.1f} "
                f"| {s['decompose'] * 1e3:,.1f} | {m.runs} |"
            )
    upd = [r for r in results if "fxrewrite+update" in r.methods or "blind+update" in r.methods]
    if upd:
        print(
            "\nWith Inductor's metadata update after the pass (median ms; pass + "
            "FakeTensorUpdater.incremental_update, nodes it recomputed)\n"
        )
        print("| size | form | fxrewrite+update | recomputed | blind+update | recomputed | fxrewrite/blind |")
        print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        for r in upd:
            f, b = r.methods.get("fxrewrite+update"), r.methods.get("blind+update")
            print(
                f"| {r.target:.0e} | {r.form} | {_ms(f)} | {'-' if f is None else f.recomputed} "
                f"| {_ms(b)} | {'-' if b is None else b.recomputed} | {_ratio(f, b)} |"
            )
    print("\nGraphs\n")
    print("| size | form | nodes | layers | fake values | build s | clones before |")
    print("| ---: | --- | ---: | ---: | --- | ---: | ---: |")
    for r in results:
        print(
            f"| {r.target:.0e} | {r.form} | {r.nodes:,} | {r.layers:,} | {r.fake} | {r.build_s:.1f} "
            f"| {r.clones_before} |"
        )


def _as_json(results: list[SizeResult]) -> str:
    from dataclasses import asdict

    return json.dumps([asdict(r) for r in results], indent=2)


def _sizes(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e3,1e4,1e5", help="target node counts, comma separated")
    ap.add_argument("--forms", default="v2,v1", help="v2, v1 or both")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--skip-inductor-above", type=float, default=2e5, help="nodes")
    ap.add_argument("--only", default=",".join(METHODS), help="methods to run, comma separated")
    ap.add_argument(
        "--budget",
        type=float,
        default=120.0,
        help="seconds of timed runs per method and graph before stopping",
    )
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc repetition")
    ap.add_argument(
        "--memory-max-s",
        type=float,
        default=60.0,
        help="no tracemalloc repetition for methods slower than this",
    )
    ap.add_argument("--save", metavar="PATH", help="also write the JSON results to PATH")
    ap.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="cpu: this process's CPU time (steady on a shared machine; every method is single-threaded); "
        "wall: time.perf_counter",
    )
    args = ap.parse_args(argv)
    methods = [m for m in args.only.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        ap.error(f"unknown methods {bad}; choose from {METHODS}")
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    if any(f not in ("v2", "v1") for f in forms):
        ap.error("--forms takes v2 and/or v1")
    results = []
    for target in _sizes(args.sizes):
        for form in forms:
            print(f"building {form} ~{target} nodes ...", file=sys.stderr, flush=True)
            results.append(
                bench_one(
                    target,
                    form == "v2",
                    methods,
                    args.repeat,
                    int(args.skip_inductor_above),
                    args.budget,
                    not args.no_memory,
                    time.process_time if args.clock == "cpu" else time.perf_counter,
                    args.memory_max_s,
                )
            )
    if args.save:
        Path(args.save).write_text(_as_json(results))
    if args.json:
        print(_as_json(results))
    else:
        print(
            f"torch {torch.__version__}, fxrewrite {fxrewrite.__version__}, Python {sys.version.split()[0]}, "
            f"CPU; clock: {'process CPU time' if args.clock == 'cpu' else 'wall'}; "
            f"median of up to {args.repeat} runs"
        )
        print_tables(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
