"""Where vLLM (CPU build) is installed: do the two documented routes run
fxrewrite in vLLM's worker, and are the tokens eager's?

    python scripts/vllm_cpu_check.py [--model DIR]

Without ``--model`` it writes a tiny Llama config (dummy weights, no
tokenizer, nothing downloaded). Each configuration runs in its own Python
process with ``TORCH_LOGS=fxrewrite``:

- ``eager``: ``enforce_eager=True`` (the reference tokens);
- ``name``: ``compilation_config={"inductor_passes": {...: "fxrewrite.vllm.pass_", ...}}``;
- ``install``: ``fxrewrite.install()`` in the launching process, nothing else.

It passes when both compiled runs print fxrewrite's "fxrewrite ran: pid ..."
line from a process other than the launcher's, with at least one node
rewritten and none left, and give the eager tokens. Exit status 0 or 1.
Not run in CI (CI has no vLLM); written for issue 31. Run on 2026-12-06 with
vllm-cpu 0.32.0 and torch 2.13.0 on a CPU-only machine: both routes ok (10 nodes
rewritten, 0 left, eager's tokens); see docs/vllm_cpu_check.md.
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

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    # head_dim 32 (128 / 4): vLLM-CPU's attention supports 32, 64, 80, ... (not 16)
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
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
if route == "eager":
    kwargs["enforce_eager"] = True
elif route == "name":
    kwargs["compilation_config"] = {"inductor_passes": {
        "post_grad_custom_post_pass": "fxrewrite.vllm.pass_",
        "joint_custom_pre_pass": "fxrewrite.vllm.pre_pass"}}
elif route == "install":
    import fxrewrite
    fxrewrite.install()
llm = LLM(**kwargs)
params = SamplingParams(temperature=0.0, max_tokens=12, detokenize=False, ignore_eos=True)
prompts = [{"prompt_token_ids": [1, 17, 42, 99, 7]}, {"prompt_token_ids": [1, 5, 6]}]
outs = llm.generate(prompts, params)
print("TOKENS " + json.dumps([list(o.outputs[0].token_ids) for o in outs]), flush=True)
print(f"LAUNCHER {os.getpid()}", flush=True)
"""

RAN = re.compile(r"fxrewrite ran: pid (\d+),.*: (\d+) auto_functionalized nodes, (\d+) rewritten, (\d+) left")


def run(route: str, model: str) -> tuple[list[list[int]], str]:
    env = dict(os.environ, TORCH_LOGS="fxrewrite")
    env.pop("FXREWRITE_INSTALL", None)
    p = subprocess.run(
        [sys.executable, "-c", CHILD, route, model], env=env, capture_output=True, text=True, timeout=1800
    )
    text = p.stdout + p.stderr
    if p.returncode != 0:
        raise SystemExit(f"{route}: exit {p.returncode}\n{text[-4000:]}")
    tokens = json.loads(next(line[7:] for line in p.stdout.splitlines() if line.startswith("TOKENS ")))
    return tokens, text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a model folder (default: a tiny Llama with dummy weights)")
    args = ap.parse_args()
    model = args.model
    if model is None:
        model = tempfile.mkdtemp(prefix="fxrewrite-tiny-llama-")
        Path(model, "config.json").write_text(json.dumps(TINY_LLAMA))
    reference, _ = run("eager", model)
    ok = True
    for route in ("name", "install"):
        tokens, text = run(route, model)
        launcher = int(re.search(r"LAUNCHER (\d+)", text).group(1))  # type: ignore[union-attr]
        lines = [m.groups() for m in RAN.finditer(text)]
        in_workers = [g for g in lines if int(g[0]) != launcher]
        rewritten = sum(int(g[2]) for g in in_workers)
        left = sum(int(g[3]) for g in in_workers)
        good = bool(in_workers) and rewritten > 0 and left == 0 and tokens == reference
        ok &= good
        print(
            f"{route}: {'ok' if good else 'FAILED'}: {len(in_workers)} graphs compiled with fxrewrite in "
            f"process(es) {sorted({g[0] for g in in_workers})} (launcher {launcher}), {rewritten} nodes "
            f"rewritten, {left} left, tokens {'=' if tokens == reference else '!='} eager"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
