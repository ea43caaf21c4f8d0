"""Inductor's FX graph cache: a second compile of the same function in a fresh
process hits the cache with fxrewrite installed, and changing fxrewrite's
configuration misses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from torch._dynamo.utils import counters
    from torch._inductor import config
    import fxrewrite

    @torch.library.custom_op("fxr_cache::add_into", mutates_args=("out",))
    def add_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        out.copy_(a + b)

    def f(a, b):
        out = torch.empty_like(a)
        torch.ops.fxr_cache.add_into(out, a, b)
        return out * 2

    strict = sys.argv[1] == "strict"
    config.fx_graph_cache = True
    config.post_grad_custom_post_pass = fxrewrite.Pass(strict=strict)
    a, b = torch.ones(4, 4), torch.ones(4, 4)
    got = torch.compile(f)(a, b)
    assert torch.equal(got, f(a, b))
    print(json.dumps({k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")}))
    """
)


def _run(tmp_path: Path, mode: str) -> dict[str, int]:
    script = tmp_path / "compile_once.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-cache"))
    env.pop("FXREWRITE_STRICT", None)
    out = subprocess.run(
        [sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_compile_in_a_fresh_process_hits_the_cache(tmp_path):
    first = _run(tmp_path, "lenient")
    assert first.get("fxgraph_cache_miss", 0) == 1, first
    second = _run(tmp_path, "lenient")
    assert second.get("fxgraph_cache_hit", 0) == 1, second
    changed = _run(tmp_path, "strict")
    assert changed.get("fxgraph_cache_miss", 0) == 1 and changed.get("fxgraph_cache_hit", 0) == 0, changed


UUIDS = "import fxrewrite; print(fxrewrite.Pass().uuid(), fxrewrite.pre_pass.uuid())"


def test_an_edited_python_source_is_a_new_cache_key(tmp_path):
    """The version string stays the same between development builds: a
    pass whose Python sources changed must not reuse graphs the old one
    compiled. A copy of the package, edited, gives other keys for both
    passes; unedited, the same keys."""
    import shutil

    import fxrewrite

    package = tmp_path / "pkg" / "fxrewrite"
    shutil.copytree(Path(fxrewrite.__file__).resolve().parent, package)
    env = dict(os.environ, PYTHONPATH=str(package.parent))

    def uuids() -> list[str]:
        out = subprocess.run(
            [sys.executable, "-c", UUIDS], env=env, capture_output=True, text=True, timeout=120, check=True
        )
        return out.stdout.split()

    before = uuids()
    assert uuids() == before
    with (package / "fx_meta.py").open("a") as f:
        f.write("\n# edited\n")
    after = uuids()
    assert len(after) == 2 and after[0] != before[0] and after[1] != before[1]
