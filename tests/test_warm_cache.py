"""With Inductor's FX graph cache warm, a second run still says what fxrewrite
did: the log line (marked as from the cache), ``fxrewrite.last_report()``,
and ``FXREWRITE_SAVE_DIR`` for ``fxrewrite check``. And ``last_report()`` is
the one place to look, whichever pass object ran."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import torch

import fxrewrite

SCRIPT = textwrap.dedent(
    """
    import json, logging
    import torch
    from torch._dynamo.utils import counters
    from torch._inductor import config
    import fxrewrite

    @torch.library.custom_op("fxr_warm::add_into", mutates_args=("out",))
    def add_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        out.copy_(a + b)

    def f(a, b):
        out = torch.empty_like(a)
        torch.ops.fxr_warm.add_into(out, a, b)
        return out * 2

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    logging.getLogger("fxrewrite").setLevel(logging.INFO)
    config.fx_graph_cache = True
    installation = fxrewrite.install(strict=True)
    a, b = torch.ones(4, 4), torch.ones(4, 4)
    assert torch.equal(torch.compile(f)(a, b), f(a, b))
    report = fxrewrite.last_report()
    print(json.dumps({
        "cache": {k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")},
        "report": None if report is None else report.to_dict(),
        "reports": len(fxrewrite.reports()),
        "same_as_installed": report is not None and report is installation.pass_.last_report,
    }))
    """
)


def _run(tmp_path: Path, save_dir: Path) -> tuple[dict, str]:
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    env = dict(
        os.environ,
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-cache"),
        FXREWRITE_SAVE_DIR=str(save_dir),
    )
    for name in ("FXREWRITE_STRICT", "FXREWRITE_LEAVE", "FXREWRITE_INSTALL"):
        env.pop(name, None)
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def _check(save_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fxrewrite.cli", "check", str(save_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_second_run_served_by_the_cache_says_what_the_first_did(tmp_path):
    first, first_log = _run(tmp_path, tmp_path / "saved-1")
    assert first["cache"].get("fxgraph_cache_miss") == 1, first
    [line] = [x for x in first_log.splitlines() if "fxrewrite ran: pid" in x]
    assert "1 rewritten, 0 left" in line and "FX graph cache" not in line, first_log
    assert first["report"]["decisions"][0]["action"] == "reinplaced" and "from_cache" not in first["report"]

    second, second_log = _run(tmp_path, tmp_path / "saved-2")
    # Really served by the cache: the pass did not run in this process.
    cache = second["cache"]
    assert cache.get("fxgraph_cache_hit") == 1 and not cache.get("fxgraph_cache_miss"), second
    [line] = [x for x in second_log.splitlines() if "fxrewrite ran: pid" in x]
    assert line.startswith("INFO fxrewrite fxrewrite ran: pid"), line
    assert "1 rewritten, 0 left" in line and "from Inductor's FX graph cache" in line, line
    report = second["report"]
    assert report is not None and report["from_cache"] is True, second
    assert [d["action"] for d in report["decisions"]] == ["reinplaced"]
    assert second["reports"] == 1 and second["same_as_installed"], second

    # The CI gate works on the warm cache: the saved graphs are there again.
    saved = sorted(p.name for p in (tmp_path / "saved-2").iterdir())
    assert [n.split("-graph0")[1] for n in saved] == ["-after.fxir", "-before.fxir", ".html"], saved
    check = _check(tmp_path / "saved-2")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ok: every auto_functionalized node in 2 graph(s)" in check.stdout


def _graph() -> torch.fx.Graph:
    return torch.fx.symbolic_trace(lambda x: x + 1).graph


def test_last_report_is_the_latest_whichever_pass_ran():
    fxrewrite.pass_(_graph())
    assert fxrewrite.last_report() is fxrewrite.pass_.last_report is not None

    config = types.SimpleNamespace(post_grad_custom_post_pass=None, joint_custom_pre_pass=None)
    with fxrewrite.install(strict=True, config=config) as installation:
        assert installation.pass_ is not fxrewrite.pass_
        config.post_grad_custom_post_pass(_graph())
        latest = fxrewrite.last_report()
        assert latest is installation.pass_.last_report is not None
        assert fxrewrite.pass_.last_report is not latest
        assert fxrewrite.reports()[-1] is latest

    from fxrewrite import vllm

    vllm.pass_(_graph())
    assert fxrewrite.last_report() is vllm.pass_.last_report is not latest


def test_a_broken_record_is_a_warning_and_the_cached_graph_is_still_served(caplog):
    """Replaying a record that cannot be read warns; the cache hit goes on."""
    from fxrewrite import _graph_cache
    from fxrewrite.inductor_pass import _replay

    class Loaded:
        pass

    loaded = Loaded()
    setattr(loaded, _graph_cache.ATTR, [{"report": b"not a pickle"}])

    class FakeCache:
        @staticmethod
        def cache_hit_post_compile(graph, cache_info, constants):
            return graph, cache_info

    _graph_cache._wrap_hit(FakeCache, _replay)
    with caplog.at_level(logging.WARNING, logger="fxrewrite"):
        assert FakeCache.cache_hit_post_compile(loaded, {"x": 1}, None) == (loaded, {"x": 1})
    assert any("the compile goes on" in r.getMessage() for r in caplog.records)


def test_the_compiled_graph_of_a_rewritten_module_carries_its_record():
    from fxrewrite import _graph_cache

    class Compiled:
        def __init__(self, current_callable, graph, gm, *rest):
            self.gm = gm

    _graph_cache._wrap_init(Compiled)
    gm = torch.fx.symbolic_trace(lambda x: x * 2)
    other = torch.fx.symbolic_trace(lambda x: x * 3)
    _graph_cache.remember(gm.graph, {"report": b"mine"})
    _graph_cache.remember(other.graph, {"report": b"other"})
    assert getattr(Compiled(None, None, gm), _graph_cache.ATTR) == [{"report": b"mine"}]
    assert not hasattr(Compiled(None, None, gm), _graph_cache.ATTR)  # taken once
    assert getattr(Compiled(None, None, gm=other), _graph_cache.ATTR) == [{"report": b"other"}]
