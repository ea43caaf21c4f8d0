"""Where vLLM (CPU build) is installed: do fxrewrite's two documented routes
run in vLLM's worker, give eager's tokens, and leave no more copies in the
code Inductor generates than vLLM's own FixFunctionalizationPass?

    python scripts/vllm_cpu_check.py [--model DIR]

Without ``--model`` it writes a tiny Llama config (dummy weights, no
tokenizer, nothing downloaded) with head_dim 64. Every compiled
configuration enables vLLM's ``rotary_embedding`` custom op
(``custom_ops: ["+rotary_embedding"]``; with Inductor vLLM otherwise uses the
op's plain-torch ``forward_native``), so the compiled graph holds
``_C.rotary_embedding`` writing in place into the query and key columns of
the qkv projection: the call whose functionalized form (v1, vLLM's default
``enable_auto_functionalized_v2=False``) costs copies when it is rewritten
badly. Each configuration runs in its own Python process with
``TORCH_LOGS=fxrewrite`` and Inductor's and vLLM's compile caches off:

- ``eager``: ``enforce_eager=True`` (the reference tokens);
- ``inductor``: vLLM-CPU's default compile, no post-grad pass of vLLM's or
  fxrewrite's (vLLM-CPU turns ``VLLM_COMPILE`` into ``DYNAMO_TRACE_ONCE`` with
  the Inductor backend, which does not run vLLM's pass manager): Inductor's
  own reinplacing;
- ``vllm-fix``: vLLM's ``FixFunctionalizationPass`` as the post-grad custom
  pass (where the ``VLLM_COMPILE`` pass manager runs it, last);
- ``name``: ``compilation_config={"inductor_passes": {...: "fxrewrite.vllm.pass_", ...}}``;
- ``install``: ``fxrewrite.install()`` in the launching process.

In every process (vLLM's spawned workers included) a ``sitecustomize``
written by this script wraps Inductor's post-grad passes (to count the
``auto_functionalized`` nodes and their form) and its code generation: per
compiled graph it records the copy kernels (scheduler nodes that only load
one value and store it, counted as ``tests/gen_copies.py`` counts them), the
``clone`` / ``copy_`` calls left in the wrapper and the
``_C.rotary_embedding`` calls in the generated code.

It passes when every compiled configuration gives the eager tokens and calls
``_C.rotary_embedding``, and fxrewrite's two configurations ran in a worker
(not the launcher) with all nodes rewritten, 0 clones, and no more copy
kernels or wrapper copies than ``vllm-fix``. It prints a table. Exit status
0 or 1. Not run in CI (CI has no vLLM); see docs/vllm_cpu_check.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    # head_dim 64 (256 / 4): vLLM-CPU's attention supports 32, 64, 80, ... (not 16)
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

CHILD = """
import json, os, sys
route, model = sys.argv[1], sys.argv[2]
from vllm import LLM, SamplingParams
# A fixed KV cache: without it vLLM-CPU reserves gpu_memory_utilization (0.92) of the
# machine's memory and refuses to start when less than that is free.
kwargs = dict(model=model, load_format="dummy", skip_tokenizer_init=True, dtype="float32", max_model_len=128, seed=0,
              kv_cache_memory_bytes=256 * 2**20)
compilation = {"custom_ops": ["+rotary_embedding"]}
if route == "eager":
    kwargs["enforce_eager"] = True
elif route == "vllm-fix":
    compilation["inductor_passes"] = {"post_grad_custom_post_pass": "fxcheck_vllm_fix.pass_"}
elif route == "name":
    compilation["inductor_passes"] = {
        "post_grad_custom_post_pass": "fxrewrite.vllm.pass_",
        "joint_custom_pre_pass": "fxrewrite.vllm.pre_pass"}
elif route == "install":
    import fxrewrite
    fxrewrite.install()
if route != "eager":
    kwargs["compilation_config"] = compilation
llm = LLM(**kwargs)
params = SamplingParams(temperature=0.0, max_tokens=12, detokenize=False, ignore_eos=True)
prompts = [{"prompt_token_ids": [1, 17, 42, 99, 7]}, {"prompt_token_ids": [1, 5, 6]}]
outs = llm.generate(prompts, params)
print("TOKENS " + json.dumps([list(o.outputs[0].token_ids) for o in outs]), flush=True)
print(f"LAUNCHER {os.getpid()}", flush=True)
"""

# Runs at the start of every Python process of a configuration (the launcher and
# vLLM's spawned workers), where FXCHECK_OUT is set.
SITECUSTOMIZE = """
import os
if os.environ.get("FXCHECK_OUT"):
    import sys
    sys.path.insert(0, os.environ["FXCHECK_TESTS"])
    import fxcheck_count
    fxcheck_count.patch()
"""

COUNT = '''
"""Per compiled graph: auto_functionalized nodes before the post-grad passes,
copy kernels, wrapper copies and rotary calls in the generated code."""
import json, os, re
import torch

RECORD = {}


def _write(rec):
    with open(os.environ["FXCHECK_OUT"], "a") as f:
        f.write(json.dumps(rec) + "\\n")


def patch():
    import torch._inductor.compile_fx as compile_fx
    from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2
    from torch._inductor.graph import GraphLowering
    from torch._inductor.scheduler import Scheduler
    from gen_copies import _WRAPPER_COPY, is_copy_node

    post_grad = compile_fx.post_grad_passes

    def counting_post_grad(gm, *args, **kwargs):
        targets = [n.args[0] for n in gm.graph.nodes if n.target in (auto_functionalized, auto_functionalized_v2)]
        RECORD["af_v1"] = sum(n.target is auto_functionalized for n in gm.graph.nodes)
        RECORD["af_v2"] = sum(n.target is auto_functionalized_v2 for n in gm.graph.nodes)
        RECORD["af_ops"] = sorted({str(t) for t in targets})
        return post_grad(gm, *args, **kwargs)

    compile_fx.post_grad_passes = counting_post_grad
    scheduler_codegen = Scheduler.codegen

    def counting_scheduler_codegen(self):
        RECORD["copy_kernels"] = [
            f"{s.get_name()}: {s.node.get_numel()} x {s.node.get_dtype()}"
            for fused in self.nodes for s in fused.get_nodes() if is_copy_node(s)
        ]
        return scheduler_codegen(self)

    graph_codegen = GraphLowering.codegen

    def counting_graph_codegen(self):
        result = graph_codegen(self)
        text = str(getattr(result[0], "value", result[0]))
        n = len([p for p in os.listdir(os.path.dirname(os.environ["FXCHECK_OUT"]))])
        code = f"{os.environ['FXCHECK_OUT']}.{os.getpid()}.{n}.py"
        with open(code, "w") as f:
            f.write(text)
        rec = dict(RECORD, pid=os.getpid(), code=code,
                   wrapper_copies=_WRAPPER_COPY.findall(text),
                   rotary=len(re.findall(r"_C\\.rotary_embedding", text)))
        rec.setdefault("copy_kernels", [])
        RECORD.clear()
        _write(rec)
        return result

    Scheduler.codegen = counting_scheduler_codegen
    GraphLowering.codegen = counting_graph_codegen
'''

# vLLM's FixFunctionalizationPass, built in the worker at its first graph.
VLLM_FIX = r"""
import os, sys
from vllm.compilation.passes.inductor_pass import InductorPass


class VllmFix(InductorPass):
    def __init__(self):
        self.fix = None

    def __call__(self, graph):
        from torch._higher_order_ops.auto_functionalize import auto_functionalized
        if self.fix is None:
            import inspect, re, types
            import torch
            from vllm.compilation.passes.utility import fix_functionalization
            from vllm.compilation.passes.utility.fix_functionalization import FixFunctionalizationPass
            # The pass compares each node's target with torch.ops._C.<op>.default for
            # ops vLLM-CPU's _C does not build (fused_add_rms_norm_static_fp8_quant, ...):
            # the lookup raises AttributeError. A stand-in that matches no node lets
            # it run as it would where those ops exist but are not in the graph.
            for name in sorted(set(re.findall(r"torch\.ops\._C\.(\w+)", inspect.getsource(fix_functionalization)))):
                if not hasattr(torch.ops._C, name):
                    setattr(torch.ops._C, name, types.SimpleNamespace(default=object()))
                    print(f"vllm fix pass: torch.ops._C.{name} missing, stood in", file=sys.stderr)
            from vllm.config import get_current_vllm_config_or_none, VllmConfig
            self.fix = FixFunctionalizationPass(get_current_vllm_config_or_none() or VllmConfig())
        before = sum(n.target is auto_functionalized for n in graph.nodes)
        self.fix(graph)
        after = sum(n.target is auto_functionalized for n in graph.nodes)
        print(f"vllm fix pass ran: pid {os.getpid()}, {before} auto_functionalized nodes, {after} left",
              file=sys.stderr, flush=True)


pass_ = VllmFix()
"""

RAN = re.compile(
    r"fxrewrite ran: pid (\d+),.*: (\d+) auto_functionalized nodes, (\d+) rewritten, (\d+) left, (\d+) copies"
)
FIX_RAN = re.compile(r"vllm fix pass ran: pid (\d+), (\d+) auto_functionalized nodes, (\d+) left")
ROUTES = ("eager", "inductor", "vllm-fix", "name", "install")
FXREWRITE_ROUTES = ("name", "install")


def run(route: str, model: str, helpers: Path) -> dict:
    out = helpers / route / "graphs.jsonl"
    out.parent.mkdir()
    env = dict(
        os.environ,
        TORCH_LOGS="fxrewrite",
        PYTHONPATH=os.pathsep.join(filter(None, [str(helpers), os.environ.get("PYTHONPATH")])),
        FXCHECK_OUT=str(out),
        FXCHECK_TESTS=str(TESTS),
        TORCHINDUCTOR_FORCE_DISABLE_CACHES="1",
        VLLM_DISABLE_COMPILE_CACHE="1",
    )
    env.pop("FXREWRITE_INSTALL", None)
    p = subprocess.run(
        [sys.executable, "-c", CHILD, route, model], env=env, capture_output=True, text=True, timeout=1800
    )
    text = p.stdout + p.stderr
    (helpers / route / "log.txt").write_text(text)
    if p.returncode != 0:
        raise SystemExit(f"{route}: exit {p.returncode}\n{text[-4000:]}")
    tokens = json.loads(next(line[7:] for line in p.stdout.splitlines() if line.startswith("TOKENS ")))
    launcher = int(re.search(r"LAUNCHER (\d+)", text).group(1))  # type: ignore[union-attr]
    graphs = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    ran = [g.groups() for g in RAN.finditer(text) if int(g.group(1)) != launcher]
    fix = [g.groups() for g in FIX_RAN.finditer(text) if int(g.group(1)) != launcher]
    return {
        "tokens": tokens,
        "launcher": launcher,
        "graphs": [g for g in graphs if g["pid"] != launcher],
        "fxrewrite": ran,
        "fix": fix,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a model folder (default: a tiny Llama with dummy weights)")
    args = ap.parse_args()
    model = args.model
    if model is None:
        model = tempfile.mkdtemp(prefix="fxrewrite-tiny-llama-")
        Path(model, "config.json").write_text(json.dumps(TINY_LLAMA))
    helpers = Path(tempfile.mkdtemp(prefix="fxrewrite-vllm-check-"))
    (helpers / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (helpers / "fxcheck_count.py").write_text(COUNT)
    (helpers / "fxcheck_vllm_fix.py").write_text(VLLM_FIX)
    print(f"model {model}; logs and generated code under {helpers}")
    results = {route: run(route, model, helpers) for route in ROUTES}
    reference = results["eager"]["tokens"]
    rows = []
    for route in ROUTES[1:]:
        r = results[route]
        g = r["graphs"]
        r["kernels"] = sum(len(x["copy_kernels"]) for x in g)
        r["wrapper"] = sum(len(x["wrapper_copies"]) for x in g)
        r["rotary"] = sum(x["rotary"] for x in g)
        r["form"] = "/".join(sorted({("v2" if x.get("af_v2") else "v1") for x in g})) or "?"
        r["af"] = sum(x.get("af_v1", 0) + x.get("af_v2", 0) for x in g)
        r["clones"] = sum(int(x[4]) for x in r["fxrewrite"]) if r["fxrewrite"] else None
        r["left"] = sum(int(x[3]) for x in r["fxrewrite"]) if r["fxrewrite"] else None
    fix = results["vllm-fix"]
    ok = True
    for route in ROUTES[1:]:
        r = results[route]
        problems = []
        if r["tokens"] != reference:
            problems.append("tokens != eager")
        if not r["graphs"]:
            problems.append("no graph compiled in a worker")
        if r["rotary"] == 0:
            problems.append("no _C.rotary_embedding call")
        if route == "vllm-fix" and not r["fix"]:
            problems.append("FixFunctionalizationPass did not run in a worker")
        if route in FXREWRITE_ROUTES:
            if not r["fxrewrite"]:
                problems.append("fxrewrite did not run in a worker")
            elif r["left"] or r["clones"]:
                problems.append(f"{r['left']} left, {r['clones']} clones")
            if r["kernels"] > fix["kernels"]:
                problems.append("more copy kernels than vllm-fix")
            if r["wrapper"] > fix["wrapper"]:
                problems.append("more wrapper copies than vllm-fix")
        ok &= not problems
        rows.append(
            (
                route,
                "yes" if r["tokens"] == reference else "NO",
                f"{len(r['graphs'])}",
                f"{r['af']} ({r['form']})",
                "-" if r["clones"] is None else str(r["clones"]),
                str(r["kernels"]),
                str(r["wrapper"]),
                str(r["rotary"]),
                "ok" if not problems else "FAILED: " + "; ".join(problems),
            )
        )
    head = (
        "route",
        "tokens = eager",
        "graphs",
        "auto_functionalized",
        "fxrewrite clones",
        "copy kernels",
        "wrapper copies",
        "rotary calls",
        "result",
    )
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    for row in [head, tuple("-" * w for w in widths), *rows]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    for route in ROUTES[1:]:
        for x in results[route]["graphs"]:
            if x["copy_kernels"] or x["wrapper_copies"]:
                print(f"{route}: copy kernels {x['copy_kernels']}, wrapper copies {x['wrapper_copies']}")
    print(f"eager tokens {json.dumps(reference)}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
