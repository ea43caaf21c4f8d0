"""benches/cuda_graphs.py --dry-run, as CI runs it: every model and
configuration compiled on the CPU, every check that needs no device, so the
GPU check cannot rot between the sessions that have a device."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benches"))

import cuda_graphs

SCRIPT = Path(cuda_graphs.__file__).resolve()


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict, float]:
    out = tmp_path / "cuda_graphs.json"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    wall = time.monotonic() - t0
    assert out.exists(), proc.stdout + proc.stderr
    return proc, json.loads(out.read_text()), wall


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict, float]:
    return _run(tmp_path_factory.mktemp("dry"))


def test_dry_run_passes_every_check(dry_run):
    proc, report, wall = dry_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["ok"] is True
    assert "GPU part SKIPPED" in proc.stdout and "all checks passed" in proc.stdout
    meta = report["meta"]
    assert meta["mode"] == "dry-run" and meta["gpu_skipped"] == "--dry-run"
    # Under the 3 minutes, with the script's own budget (170 s) enforcing it.
    assert wall < 180


def test_dry_run_covers_every_configuration(dry_run):
    _, report, _ = dry_run
    got = sorted(tuple(r["spec"].values()) for r in report["runs"])
    assert got == sorted((s.model, s.form, s.pass_, s.shapes) for s in cuda_graphs.all_specs()), (
        "a model, form, pass or shape mode went missing"
    )
    assert len(got) == 16


def test_dry_run_results_say_what_was_checked(dry_run):
    _, report, _ = dry_run
    for r in report["runs"]:
        spec = cuda_graphs.Spec(**r["spec"])
        assert r["ok"] and not r["failures"], (spec.label, r["failures"], r["error"])
        # The models do produce auto_functionalized nodes, and none reaches lowering.
        assert r["af_found"] > 0 and r["af_final"] == 0, spec.label
        if spec.pass_ == "fxrewrite":
            # fxrewrite removed them all itself (vLLM's assertion), ...
            assert r["af_after_custom_pass"] and not any(r["af_after_custom_pass"]), spec.label
            assert " re-inplaced, " in r["fxrewrite_summary"] and " 0 left," in r["fxrewrite_summary"]
        else:
            # ... while without it they are still there after the custom pass
            # point: Inductor's own passes remove them later.
            assert all(n > 0 for n in r["af_after_custom_pass"]), spec.label
        assert r["max_abs_err"] <= 1e-4, spec.label
        # Dynamic: one compile served both token counts.
        assert r["graphs_compiled"] == 1, spec.label
        assert set(r["compile_s"]) == {str(n) for n in cuda_graphs.SIZES[spec.shapes]}, spec.label
        assert r["step_us"]["n"] == 50 and r["step_us"]["median"] > 0, spec.label
        assert r["kernels_per_step"] > 0, spec.label
        # No CUDA graphs on the CPU: nothing to count there.
        assert r["cudagraph_skips"] is None and r["cudagraph_captures"] is None


def test_a_failed_check_fails_the_run(tmp_path):
    # A budget no configuration can meet: every one is reported failed and
    # the script exits 1 (still writing its JSON and table).
    proc, report, _ = _run(tmp_path, "--only", "demo,v2,static", "--budget-s", "0.5")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert report["ok"] is False and "SOME CHECKS FAILED" in proc.stdout
    assert len(report["runs"]) == 2
    for r in report["runs"]:
        assert not r["ok"] and "time budget" in r["failures"][0]


def test_bad_arguments_exit_2():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "no-such-model"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "no configuration matches" in proc.stderr
