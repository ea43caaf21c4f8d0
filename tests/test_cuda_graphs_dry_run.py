"""benches/cuda_graphs.py --dry-run, as CI runs it: every model and
configuration compiled on the CPU, every check that needs no device, so the
GPU check cannot rot between the sessions that have a device. Nothing here
is timed: the dry run has no time budget and judges every configuration; a
budget (--budget-s) only skips work, and says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benches"))

import cuda_graphs

SCRIPT = Path(cuda_graphs.__file__).resolve()


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    # No timeout of its own: the suite's hang guard (pytest-timeout, pyproject.toml) is the only one.
    out = tmp_path / "cuda_graphs.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--out", str(out), *args], capture_output=True, text=True
    )
    assert out.exists(), proc.stdout + proc.stderr
    return proc, json.loads(out.read_text())


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict]:
    return _run(tmp_path_factory.mktemp("dry"))


def test_dry_run_passes_every_check(dry_run):
    proc, report = dry_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["ok"] is True
    assert "GPU part SKIPPED" in proc.stdout and "all checks passed" in proc.stdout
    meta = report["meta"]
    assert meta["mode"] == "dry-run" and meta["gpu_skipped"] == "--dry-run"
    # No budget dry: every configuration was judged, none skipped.
    assert meta["budget_s"] is None
    assert report["skipped"] == [] and "over budget" not in proc.stdout


def test_dry_run_covers_every_configuration(dry_run):
    _, report = dry_run
    got = sorted(tuple(r["spec"].values()) for r in report["runs"])
    assert got == sorted((s.model, s.form, s.pass_, s.shapes) for s in cuda_graphs.all_specs()), (
        "a model, form, pass or shape mode went missing"
    )
    assert len(got) == 16


def test_dry_run_results_say_what_was_checked(dry_run):
    _, report = dry_run
    for r in report["runs"]:
        spec = cuda_graphs.Spec(**r["spec"])
        assert r["skipped"] is None, (spec.label, r["skipped"])
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


def test_over_budget_is_skipped_and_said_not_failed(tmp_path):
    # A budget no configuration can meet: the work stops, every configuration
    # is reported skipped (table, JSON, last lines), none failed, exit 0.
    proc, report = _run(tmp_path, "--only", "demo,v2,static", "--budget-s", "0.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    labels = ["demo v2 inductor static", "demo v2 fxrewrite static"]
    assert sorted(report["skipped"]) == sorted(labels)
    assert len(report["runs"]) == 2
    for r in report["runs"]:
        assert r["skipped"].startswith("skipped: over budget") and not r["failures"]
    assert "skipped: over budget (0.5 s), 2 of 2 configurations not judged:" in proc.stdout
    assert all(f"  {label}\n" in proc.stdout for label in labels)
    assert (
        "no check failed (0 of 2 configurations judged, 2 skipped)" in proc.stdout
        and "SOME CHECKS FAILED" not in proc.stdout
    )


def test_a_failed_check_fails_the_run(tmp_path, monkeypatch, capsys):
    # One configuration's check fails, one is skipped over budget: the run
    # exits 1 (still writing its JSON and table), the skip is said apart.
    specs = [s for s in cuda_graphs.all_specs() if s.label.startswith("demo v2 ") and s.shapes == "static"]
    failed = cuda_graphs._failed(specs[0], "values: max |compiled - eager| = 1 > 0.0001")
    skipped = cuda_graphs._skipped(specs[1], "skipped: over budget (killed at 9 s)")

    def fake_run_all(batches, *args, **kwargs):
        assert sorted(i for batch in batches for i, _ in batch) == [0, 1]
        return [failed, skipped]

    monkeypatch.setattr(cuda_graphs, "run_all", fake_run_all)
    # main() sets these for its workers; keep this process's values.
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "cuda_graphs.json"
    assert (
        cuda_graphs.main(["--dry-run", "--out", str(out), "--only", "demo,v2,static", "--budget-s", "9"]) == 1
    )
    stdout = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["ok"] is False and report["skipped"] == [specs[1].label]
    assert "SOME CHECKS FAILED (1 of 2 configurations judged, 1 skipped)" in stdout
    assert "skipped: over budget (9 s), 1 of 2 configurations not judged:" in stdout


def test_bad_arguments_exit_2():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "no-such-model"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "no configuration matches" in proc.stderr
