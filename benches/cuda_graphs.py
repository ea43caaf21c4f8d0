"""CUDA-graph capture with and without fxrewrite: the demo decoder and the MoE
decoder compiled with ``torch.compile(mode="reduce-overhead")``, every
combination of form (v2, v1), pass (Inductor alone, Inductor + fxrewrite) and
shapes (static; token dimension marked dynamic, run at two sizes).

    python benches/cuda_graphs.py                      # on a CUDA device: the GPU check
    python benches/cuda_graphs.py --dry-run            # CPU only (also when no CUDA device)
    python benches/cuda_graphs.py --out r.json --only moe,v1

Each configuration runs in its own process (multiprocessing "spawn"): a
capture failure, a crash or leaked device memory cannot poison the next.
For each one it checks:

  capture     no CUDA-graph skip (Inductor's counters["inductor"]["cudagraph_skips"],
              which every skip reason bumps) and at least one graph captured per
              token size (torch.cuda.CUDAGraph.capture_end calls);
  af left     no auto_functionalized(_v2) node reached the graph that is lowered
              and captured (counted after all post-grad passes), and, with
              fxrewrite, none is left right after the custom post pass, which is
              the assertion vLLM makes before capture (strict mode: fxrewrite
              raises instead of leaving a node);
  af found    the model does produce auto_functionalized nodes (else nothing
              was tested);
  values      outputs, every buffer (the MoE KV caches are mutated graph
              inputs) and the inputs equal eager, on three calls per size
              (warm-up, capture, replay) with fresh data each call;
  one graph   dynamic runs: one compile served both sizes (the dimension was
              really dynamic).

and it measures: device copies per step (torch.profiler: kernels and memcpys
whose name holds "copy", "memcpy" or "clone", over a few profiled steps),
kernels per step, the step time (median of --steps timed steps after
warm-up; steps are timed one configuration at a time), the compile time (the
first call at each size) and the post-grad passes' time.

Without fxrewrite, Inductor's own passes remove the auto_functionalized nodes
too (after the custom post pass): those runs are the baseline for copies and
time; the check that matters is that with fxrewrite no node is left after
its pass and capture happens.

Time: 16 configurations, --jobs at a time (8 on a 16-core GPU machine),
each with a fresh Inductor cache (compile times are cold; steps are timed
while other configurations may be compiling). The models are small (4 and 2
layers, 8 and 16 tokens, hidden 64) so that one configuration compiles in
well under a minute on a GPU machine. --budget-s (default 270 s on a GPU,
none dry) stops the work, never fails it: configurations still running then
are killed, those not started are not started, and all of them are reported
"skipped: over budget" (in the table, the JSON's "skipped" list and the last
lines), so the whole GPU path ends in under 5 minutes by construction. The
dry run judges every configuration, however long that takes.

--dry-run (and whenever torch.cuda.is_available() is False) builds every
model, compiles on the CPU with the default Inductor backend (no CUDA
graphs) and runs every check that needs no device; it says that the GPU part
was skipped. CI runs it (tests/test_cuda_graphs_dry_run.py).

Writes one JSON file (--out, default benches/data/cuda_graphs.json), prints
one table; exits 1 if any check of a configuration run fails, 2 on bad
arguments (a configuration skipped over budget is no failure).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# The worker imports moe_model and cuda_graph_probes from here; spawn passes sys.path to children.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_graph_probes import AfCounter, copy_kernels, count_captures, max_err

MODELS = ("demo", "moe")
FORMS = ("v2", "v1")
PASSES = ("inductor", "fxrewrite")
SHAPES = ("static", "dynamic")
#: Token counts per shape mode. Both dynamic sizes are >= 2 (0 and 1 are
#: specialized) and within the MoE KV cache's 32 slots.
SIZES = {"static": (8,), "dynamic": (8, 16)}
CALLS_PER_SIZE = 3  # cudagraph trees: warm-up run, capture, replay
WARMUP_STEPS = 10
PROFILED_STEPS = 5
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "cuda_graphs.json"


@dataclass(frozen=True)
class Spec:
    """One configuration."""

    model: str
    form: str
    pass_: str
    shapes: str

    @property
    def label(self) -> str:
        return f"{self.model} {self.form} {self.pass_} {self.shapes}"


@dataclass
class Result:
    """What one configuration's process measured and checked."""

    spec: dict[str, str]
    device: str = ""
    ok: bool = False
    failures: list[str] = field(default_factory=list)
    #: why the configuration was not judged ("skipped: over budget ..."): no check ran to the end
    skipped: str | None = None
    error: str | None = None
    af_found: int = 0
    af_after_custom_pass: list[int] = field(default_factory=list)
    af_final: int = 0
    post_grad_s: float = 0.0
    post_grad_clones: int = 0
    fxrewrite_summary: str | None = None
    graphs_compiled: int = 0
    cudagraph_skips: int | None = None
    cudagraph_captures: int | None = None
    max_abs_err: float = 0.0
    compile_s: dict[str, float] = field(default_factory=dict)
    step_us: dict[str, float] = field(default_factory=dict)
    copies_per_step: float | None = None
    kernels_per_step: float | None = None
    copy_names: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0


def all_specs() -> list[Spec]:
    return [Spec(m, f, p, s) for m in MODELS for f in FORMS for s in SHAPES for p in PASSES]


# --- models (imported in the worker: torch is not imported by the parent's argument parsing) -----


def _build(model: str, device: Any) -> tuple[Any, Any]:
    """The model and a function ``inputs(tokens, seed)`` giving its inputs on ``device``."""
    import torch

    if model == "demo":
        from fxrewrite.demo import DemoDecoder

        demo = DemoDecoder(layers=4, hidden=64).eval().to(device)

        def demo_inputs(tokens: int, seed: int) -> tuple[torch.Tensor, ...]:
            g = torch.Generator().manual_seed(seed)
            return (torch.randn(tokens, 64, generator=g).to(device),)

        return demo, demo_inputs
    import moe_model

    cfg = moe_model.Config()
    moe = moe_model.MoEDecoder(cfg, layers=2).eval().to(device)

    def moe_inputs(tokens: int, seed: int) -> tuple[torch.Tensor, ...]:
        # moe_model.MoEDecoder.example_inputs at another token count.
        g = torch.Generator().manual_seed(seed)
        angle = torch.rand(tokens, cfg.head_dim // 2, generator=g) * 6.28
        slots = torch.randperm(cfg.cache_slots, generator=g)[:tokens]
        x = torch.randn(tokens, cfg.hidden, generator=g)
        return tuple(t.to(device) for t in (x, angle.cos(), angle.sin(), slots))

    return moe, moe_inputs


# --- the worker ------------------------------------------------------------------------------------


def run_batch(
    batch: list[tuple[int, Spec]], cuda: bool, steps: int, out_dir: str, lock: Any, cache_dir: str
) -> None:
    """Runs configurations one after another in this process; writes each
    one's :class:`Result` as JSON to ``out_dir/run<i>.json`` as soon as it is
    done (a crash loses only the rest). On a GPU a batch is one configuration."""
    # Before torch is imported: the Inductor (and Triton) caches this process uses.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    os.environ["TRITON_CACHE_DIR"] = os.path.join(cache_dir, "triton")
    for i, spec in batch:
        t_start = time.perf_counter()
        result = Result(spec=asdict(spec))
        try:
            _run_isolated(spec, cuda, steps, lock, result)
        except Exception as e:  # the worker reports every failure, then goes on
            result.error = "".join(traceback.format_exception(e))[-4000:]
            result.failures.append(f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        result.ok = not result.failures
        result.wall_s = time.perf_counter() - t_start
        Path(out_dir, f"run{i}.json").write_text(json.dumps(asdict(result), indent=1))


def _run_isolated(spec: Spec, cuda: bool, steps: int, lock: Any, result: Result) -> None:
    """One configuration with its own Inductor settings and counters; what it
    set is undone after, for the next one in the same process."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config

    torch._dynamo.reset()
    counters.clear()
    settings: dict[str, Any] = {
        "fx_graph_cache": False,
        "enable_auto_functionalized_v2": spec.form == "v2",
        # fxrewrite.install() composes with what these hold: start from none.
        "joint_custom_pre_pass": None,
        "post_grad_custom_post_pass": None,
    }
    with inductor_config.patch(settings):
        functorch_config: Any = torch._functorch.config
        saved = getattr(functorch_config, "enable_autograd_cache", None)
        if saved is not None:
            functorch_config.enable_autograd_cache = False
        try:
            _run_checks(spec, cuda, steps, lock, result)
        finally:
            if saved is not None:
                functorch_config.enable_autograd_cache = saved
            torch._dynamo.reset()


def _run_checks(spec: Spec, cuda: bool, steps: int, lock: Any, result: Result) -> None:
    import copy

    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config

    import fxrewrite
    from fxrewrite.demo import measure_post_grad

    device = torch.device("cuda" if cuda else "cpu")
    result.device = torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu"
    counter = AfCounter()
    installation = None
    if spec.pass_ == "fxrewrite":
        # strict: fxrewrite raises rather than leave a node to Inductor.
        installation = fxrewrite.install(strict=True)
        inductor_config.post_grad_custom_post_pass = fxrewrite.compose(
            inductor_config.post_grad_custom_post_pass, counter
        )
    else:
        inductor_config.post_grad_custom_post_pass = counter

    captures_before = count_captures() if cuda else 0
    torch.manual_seed(0)
    model, inputs = _build(spec.model, device)
    eager = copy.deepcopy(model)
    if spec.model == "moe":
        # The KV caches are written in place every step: a serving engine
        # gives them static addresses (vLLM does), so CUDA graphs may mutate them.
        for b in model.buffers():
            torch._dynamo.mark_static_address(b)
    # Static: every dimension specialized. Dynamic: the token dimension is
    # marked on each call's inputs below, as an engine marks it (dynamic=True
    # would make every dimension symbolic).
    compiled = torch.compile(
        model, mode="reduce-overhead" if cuda else None, dynamic=False if spec.shapes == "static" else None
    )
    sizes = SIZES[spec.shapes]

    def step(args: tuple[Any, ...]) -> Any:
        if cuda:
            torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args)

    with torch.no_grad(), measure_post_grad() as stats:
        for tokens in sizes:
            for call in range(CALLS_PER_SIZE):
                args = inputs(tokens, seed=1000 * tokens + call)
                mine = tuple(a.clone() for a in args)  # what the compiled model gets (and may mutate)
                if spec.shapes == "dynamic":
                    for a in mine:
                        torch._dynamo.mark_dynamic(a, 0)
                t0 = time.perf_counter()
                got = step(mine)
                # cudagraph outputs are overwritten by the next replay: keep a copy.
                got = got.clone()
                if cuda:
                    torch.cuda.synchronize()
                if call == 0:
                    result.compile_s[str(tokens)] = time.perf_counter() - t0
                want = eager(*args)
                errs = [max_err(got, want)]
                errs += [max_err(a, b) for a, b in zip(mine, args, strict=True)]
                errs += [
                    max_err(a, b)
                    for (_, a), (_, b) in zip(model.named_buffers(), eager.named_buffers(), strict=True)
                ]
                result.max_abs_err = max(result.max_abs_err, *errs)
    tolerance = 2e-3 if cuda else 1e-4
    if not result.max_abs_err <= tolerance:
        result.failures.append(f"values: max |compiled - eager| = {result.max_abs_err:.3g} > {tolerance}")

    result.af_found = stats.found
    result.af_final = stats.remaining
    result.post_grad_s = stats.seconds
    result.post_grad_clones = stats.clones
    result.af_after_custom_pass = list(counter.counts)
    result.graphs_compiled = int(counters["stats"]["unique_graphs"])
    if installation is not None and installation.pass_.last_report is not None:
        result.fxrewrite_summary = installation.pass_.last_report.summary()
    if result.af_found == 0:
        result.failures.append("af found: the model produced no auto_functionalized node")
    if result.af_final != 0:
        result.failures.append(f"af left: {result.af_final} auto_functionalized node(s) reached lowering")
    if not counter.counts:
        result.failures.append("af left: the custom post pass never ran")
    if spec.pass_ == "fxrewrite" and any(counter.counts):
        result.failures.append(f"af left after fxrewrite: {counter.counts}")
    if spec.shapes == "dynamic" and result.graphs_compiled != 1:
        result.failures.append(f"one graph: {result.graphs_compiled} graphs compiled for {len(sizes)} sizes")
    if cuda:
        result.cudagraph_skips = int(counters["inductor"]["cudagraph_skips"])
        result.cudagraph_captures = count_captures() - captures_before
        if result.cudagraph_skips:
            result.failures.append(f"capture: {result.cudagraph_skips} cudagraph skip(s)")
        if result.cudagraph_captures < len(sizes):
            result.failures.append(
                f"capture: {result.cudagraph_captures} graph(s) captured for {len(sizes)} sizes"
            )

    # Timing, one configuration at a time (the lock): other processes may be
    # compiling, none is timing.
    args = inputs(sizes[0], seed=7)
    with torch.no_grad(), lock:
        for _ in range(WARMUP_STEPS):
            step(args)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step(args)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            for _ in range(PROFILED_STEPS):
                step(args)
            if cuda:
                torch.cuda.synchronize()
    quantiles = statistics.quantiles(times, n=10) if len(times) > 1 else [times[0]] * 9
    result.step_us = {
        "median": statistics.median(times) * 1e6,
        "p10": quantiles[0] * 1e6,
        "p90": quantiles[-1] * 1e6,
        "n": float(len(times)),
    }
    copies, kernels, names = copy_kernels(prof, cuda)
    result.copies_per_step = copies / PROFILED_STEPS
    result.kernels_per_step = kernels / PROFILED_STEPS
    result.copy_names = names
    if cuda and kernels == 0:
        result.failures.append("copies: the profiler saw no device kernel")


# --- the parent: one process per configuration, a hard deadline, the table ---------------------------


def _failed(spec: Spec, why: str) -> dict[str, Any]:
    r = Result(spec=asdict(spec), failures=[why])
    return asdict(r)


def _skipped(spec: Spec, why: str) -> dict[str, Any]:
    r = Result(spec=asdict(spec), skipped=why)
    return asdict(r)


def _verdict(r: dict[str, Any]) -> str:
    if r["skipped"]:
        return r["skipped"]
    return "ok" if r["ok"] else "FAILED: " + "; ".join(r["failures"])


def run_all(
    batches: list[list[tuple[int, Spec]]],
    cuda: bool,
    steps: int,
    jobs: int,
    budget_s: float | None,
    fresh_cache: bool,
) -> list[dict[str, Any]]:
    """Runs each batch of (index, configuration) in its own spawned process,
    ``jobs`` at a time. With a ``budget_s``, whatever is still running then is
    killed and nothing more is started: those configurations without a result
    are reported skipped (over budget), not failed."""
    ctx = multiprocessing.get_context("spawn")
    lock = ctx.Lock()
    specs = {i: spec for batch in batches for i, spec in batch}
    results: dict[int, dict[str, Any]] = {}
    deadline = None if budget_s is None else time.monotonic() + budget_s
    with tempfile.TemporaryDirectory(prefix="fxr-cuda-graphs-") as tmp:

        def collect(batch: list[tuple[int, Spec]], missing: Any) -> None:
            for i, spec in batch:
                path = Path(tmp) / f"run{i}.json"
                r = json.loads(path.read_text()) if path.exists() else missing(spec)
                results[i] = r
                print(
                    f"[{len(results):2}/{len(specs)}] {spec.label:32} {r['wall_s']:6.1f} s  {_verdict(r)}",
                    flush=True,
                )

        pending = list(enumerate(batches))
        running: dict[int, Any] = {}
        while pending or running:
            while pending and len(running) < jobs:
                b, batch = pending.pop(0)
                # A fresh cache per process on a GPU keeps compile times cold
                # and comparable; the dry run shares one to stay fast.
                cache = os.path.join(tmp, f"cache{b}" if fresh_cache else "cache")
                running[b] = ctx.Process(
                    target=run_batch, args=(batch, cuda, steps, tmp, lock, cache), name=f"batch{b}"
                )
                running[b].start()
            for b, proc in list(running.items()):
                if not proc.is_alive():
                    proc.join()
                    del running[b]
                    why = f"worker died (exit code {proc.exitcode}), no result"
                    collect(batches[b], lambda spec, why=why: _failed(spec, why))
            if deadline is not None and time.monotonic() >= deadline:
                for b, proc in running.items():
                    proc.kill()
                    proc.join()
                    why = f"skipped: over budget (killed at {budget_s:g} s)"
                    collect(batches[b], lambda spec, why=why: _skipped(spec, why))
                for _, batch in pending:
                    why = f"skipped: over budget (not started within {budget_s:g} s)"
                    collect(batch, lambda spec, why=why: _skipped(spec, why))
                break
            time.sleep(0.1)
    return [results[i] if i in results else _failed(specs[i], "no result") for i in sorted(specs)]


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(runs: list[dict[str, Any]], cuda: bool) -> str:
    head = (
        f"{'configuration':32} {'af found/after pass/final':>25} {'capture':>9} {'max err':>8} "
        f"{'copies/step':>11} {'kernels/step':>12} {'step µs':>9} {'compile s':>9} {'post-grad ms':>12}  result"
    )
    lines = [head, "-" * len(head)]
    for r in runs:
        s = Spec(**r["spec"])
        after = ",".join(map(str, r["af_after_custom_pass"])) or "-"
        af = f"{r['af_found']}/{after}/{r['af_final']}"
        if cuda and r["cudagraph_captures"] is not None:
            capture = f"{r['cudagraph_captures']} ({r['cudagraph_skips']} skip)"
        else:
            capture = "-"
        compile_s = "+".join(f"{v:.1f}" for v in r["compile_s"].values()) or "-"
        verdict = "skipped" if r["skipped"] else "ok" if r["ok"] else "FAILED"
        lines.append(
            f"{s.label:32} {af:>25} {capture:>9} {_fmt(r['max_abs_err'], '.1e'):>8} "
            f"{_fmt(r['copies_per_step'], '.1f'):>11} {_fmt(r['kernels_per_step'], '.1f'):>12} "
            f"{_fmt(r['step_us'].get('median'), '.1f'):>9} {compile_s:>9} {r['post_grad_s'] * 1e3:>12.1f}  {verdict}"
        )
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="cuda_graphs.py",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="CPU only: default Inductor backend, no CUDA graphs (also the behaviour without a CUDA device)",
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSON file (default {DEFAULT_OUT})")
    ap.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="configurations at a time (default: half the cores up to 8 on a GPU, 2 dry)",
    )
    ap.add_argument("--steps", type=int, default=50, help="timed steps per configuration (default 50)")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="time budget for all configurations, seconds (default 270 on a GPU, none dry): what is "
        "still running then is killed and reported 'skipped: over budget', never failed",
    )
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated words every configuration run must contain, e.g. moe,v1 or fxrewrite,dynamic",
    )
    args = ap.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        ap.error("--jobs must be at least 1")
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    if args.budget_s is not None and args.budget_s <= 0:
        ap.error("--budget-s must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    words = [w for w in args.only.split(",") if w]
    specs = [s for s in all_specs() if all(w in s.label.split() for w in words)]
    if not specs:
        print(f"no configuration matches --only {args.only!r}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    import torch

    import fxrewrite

    skipped = None
    if args.dry_run:
        skipped = "--dry-run"
    elif not torch.cuda.is_available():
        skipped = "torch.cuda.is_available() is False"
    cuda = skipped is None
    # On a GPU machine (16 cores there) 8 at a time, 2 cores each: the
    # compiles dominate, and the budget must hold them all.
    jobs = args.jobs or (min(8, max(1, (os.cpu_count() or 1) // 2)) if cuda else 2)
    budget = args.budget_s if args.budget_s is not None else (270.0 if cuda else None)
    if not cuda:
        print(f"GPU part SKIPPED ({skipped}): CPU dry run, default Inductor backend, no CUDA graphs.")
    print(
        f"{len(specs)} configurations, {jobs} at a time, "
        f"budget {'none' if budget is None else f'{budget:g} s'}; torch {torch.__version__}, "
        f"fxrewrite {fxrewrite.__version__} from {Path(fxrewrite.__file__).parent}",
        flush=True,
    )
    # Each process gets its share of the cores (the children inherit this
    # environment): for Inductor's compile workers, and on the CPU for the
    # kernels' threads, which otherwise spin against each other.
    share = str(max(1, (os.cpu_count() or 1) // jobs))
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", share)
    if not cuda:
        os.environ.setdefault("OMP_NUM_THREADS", share)
    indexed = list(enumerate(specs))
    if cuda:
        batches = [[item] for item in indexed]  # one configuration per process
    else:
        # Dry: importing torch and Inductor costs seconds per process, on a
        # machine with a few cores; ``jobs`` processes share the configurations.
        batches = [indexed[k::jobs] for k in range(jobs) if indexed[k::jobs]]
    runs = run_all(batches, cuda, args.steps, jobs, budget, fresh_cache=cuda)
    skipped_runs = [Spec(**r["spec"]).label for r in runs if r["skipped"]]
    ok = all(r["ok"] for r in runs if not r["skipped"])
    report = {
        "ok": ok,
        "skipped": skipped_runs,
        "meta": {
            "mode": "gpu" if cuda else "dry-run",
            "gpu_skipped": skipped,
            "device": next((r["device"] for r in runs if r["device"]), ""),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "python": platform.python_version(),
            "fxrewrite": fxrewrite.__version__,
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "jobs": jobs,
            "steps": args.steps,
            "budget_s": budget,
            "wall_s": time.perf_counter() - t0,
            "sizes": SIZES,
            "notes": "compile_s: first call per token size (compile + first run), "
            + ("a fresh Inductor cache per run" if cuda else "one Inductor cache shared by the runs")
            + (f", {jobs} configurations compiling at a time" if jobs > 1 else "")
            + "; step_us: wall time per step, timed one configuration at a time; copies: "
            + ("device kernels/memcpys" if cuda else "aten operators")
            + " named copy/memcpy/clone per step",
        },
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print()
    print(table(runs, cuda))
    for r in runs:
        if r["error"]:
            print(f"\n--- {Spec(**r['spec']).label}: {r['error']}", file=sys.stderr)
    print(f"\nwrote {args.out} ({report['meta']['wall_s']:.0f} s)")
    if not cuda:
        print(f"GPU part SKIPPED ({skipped}): no capture, no device copies, no GPU timings were checked.")
    if skipped_runs:
        print(
            f"skipped: over budget ({budget:g} s), {len(skipped_runs)} of {len(runs)} configurations not judged:"
        )
        for label in skipped_runs:
            print(f"  {label}")
        counts = f"{len(runs) - len(skipped_runs)} of {len(runs)} configurations judged, {len(skipped_runs)} skipped"
        print(f"SOME CHECKS FAILED ({counts})" if not ok else f"no check failed ({counts})")
    else:
        print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
