"""The `fxrewrite` command line tool, run as a subprocess on graphs saved from
real compiles, on torch.export archives and on damaged files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import cli_model
import fxrewrite
from fxrewrite.encode import is_auto_functionalized

TESTS = Path(__file__).resolve().parent


def run(*args: str, check_rc: int | None = 0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    p = subprocess.run(
        [sys.executable, "-m", "fxrewrite", *args], capture_output=True, text=True, timeout=300, env=env
    )
    if check_rc is not None:
        assert p.returncode == check_rc, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    return p


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("saved")
    env = dict(os.environ, FXREWRITE_SAVE_DIR=str(d), PYTHONPATH=str(TESTS))
    subprocess.run(
        [sys.executable, str(TESTS / "cli_model.py")], env=env, check=True, timeout=300, capture_output=True
    )
    return d


def _before(d: Path) -> Path:
    (f,) = sorted(d.glob("*-before.fxir"))
    return f


def test_the_pass_saves_each_graph_before_and_after(saved):
    names = sorted(p.name for p in saved.glob("*.fxir"))
    assert len(names) == 2
    assert names[0].endswith("-after.fxir") and names[1].endswith("-before.fxir")
    assert "compile" in names[0] and "graph0" in names[0]


def test_inspect_table_and_json(saved):
    out = run("inspect", str(saved)).stdout
    assert "fxr_cli::add_rms_.default" in out and "v2" in out
    data = json.loads(run("inspect", "--json", str(_before(saved))).stdout)
    (row,) = data
    assert {c["op"] for c in row["auto_functionalized"]} == {
        "fxr_cli::add_rms_.default",
        "fxr_cli::write_rows_.default",
    }
    assert len(row["mutated_inputs"]) == 2  # res and cache are written back
    assert row["would"]["leave"] == 0


def test_inspect_does_not_import_torch(saved):
    code = (
        "import sys; from fxrewrite.cli import main; "
        f"rc = main(['inspect', {str(saved)!r}]); "
        "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_explain_names_each_decision(saved):
    f = _before(saved)
    out = run("explain", str(f)).stdout
    assert "reinplaced" in out
    data = json.loads(run("explain", "--json", str(f)).stdout)
    first = data[0]["node"]
    one = json.loads(run("explain", "--json", str(f), "--node", first).stdout)
    assert [d["node"] for d in one] == [first]
    bad = run("explain", str(f), "--node", "no_such_node", check_rc=2)
    assert "no auto_functionalized node named" in bad.stderr


def test_rewrite_show_and_check_round_trip(saved, tmp_path):
    f = _before(saved)
    out = tmp_path / "after.fxir"
    rep = json.loads(run("rewrite", str(f), "-o", str(out), "--json").stdout)
    assert rep["report"]["decisions"] and out.exists()
    shown = run("show", str(out)).stdout
    assert shown.startswith("graph():") and "auto_functionalized" not in shown
    assert "torch.ops.fxr_cli.add_rms_.default" in shown
    before_shown = run("show", str(f)).stdout
    assert "torch.ops.higher_order.auto_functionalized_v2" in before_shown
    assert json.loads(run("show", "--json", str(f)).stdout)["graph"] == before_shown.rstrip("\n")
    assert run("check", str(f), str(out)).returncode == 0
    assert json.loads(run("check", "--json", str(f)).stdout)["remaining"] == []


def test_check_fails_when_a_node_would_remain(saved, tmp_path):
    gm = fxrewrite.load(_before(saved))
    af = next(n for n in gm.graph.nodes if is_auto_functionalized(n))
    af.kwargs = {**af.kwargs, "_from_a_newer_torch": 1}
    bad = tmp_path / "newer.fxir"
    fxrewrite.save(gm, bad)
    p = run("check", str(bad), check_rc=1)
    assert "_from_a_newer_torch" in p.stdout and "would remain" in p.stdout
    data = json.loads(run("check", "--json", str(bad), check_rc=1).stdout)
    assert data["remaining"][0]["op"].startswith("fxr_cli::")


def test_unreadable_input_and_bad_usage_exit_2(saved, tmp_path):
    data = _before(saved).read_bytes()
    # Truncated at many offsets (every section boundary among them), flipped
    # bytes, a wrong version: always a clear message, exit 2, no traceback.
    offsets = sorted({0, 1, 8, 12, 20, 28, *range(29, len(data), max(1, len(data) // 40)), len(data) - 1})
    for i, cut in enumerate(offsets):
        f = tmp_path / f"cut{i}.fxir"
        f.write_bytes(data[:cut])
        p = run("check", str(f), check_rc=2)
        assert "unreadable .fxir" in p.stderr or "truncated" in p.stderr or "not a .fxir" in p.stderr, (
            p.stderr
        )
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    (tmp_path / "flip.fxir").write_bytes(bytes(flipped))
    assert "checksum" in run("inspect", str(tmp_path / "flip.fxir"), check_rc=2).stderr
    wrong = bytearray(data)
    wrong[8] = 99
    (tmp_path / "ver.fxir").write_bytes(bytes(wrong))
    assert "version" in run("show", str(tmp_path / "ver.fxir"), check_rc=2).stderr
    assert "no such file" in run("inspect", str(tmp_path / "missing.fxir"), check_rc=2).stderr
    run("frobnicate", check_rc=2)
    run("check", check_rc=2)


def test_help_on_every_level_has_an_example():
    assert "examples:" in run("--help").stdout
    for cmd in ("demo", "inspect", "explain", "rewrite", "show", "check"):
        assert "example:" in run(cmd, "--help").stdout


def test_save_load_compile_gives_the_same_results(saved):
    gm = fxrewrite.load(_before(saved))
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    native = fxrewrite.fxir.read_native(_before(saved))
    metas = [n[5] for n in native.to_parts()[1] if n[0] == 0]
    assert len(metas) == len(phs)
    g = torch.Generator().manual_seed(1)
    args = [torch.randn(m[2], generator=g) for m in metas]
    a1, a2 = [a.clone() for a in args], [a.clone() for a in args]
    torch._dynamo.reset()
    with torch._inductor.config.patch({"post_grad_custom_post_pass": fxrewrite.Pass(strict=True)}):
        got = torch.compile(gm)(*a1)
    expected = gm(*a2)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(a1, a2)


def test_load_names_a_missing_operator(tmp_path, saved):
    data = _before(saved).read_bytes()
    renamed = data.replace(b"fxr_cli::write_rows_", b"fxr_gone::write_rows")
    native = fxrewrite._core.Graph.read(
        fxrewrite._core.Graph.from_parts(*fxrewrite._core.Graph.read(data).to_parts()).write([])
    )
    assert len(native) > 0
    if renamed != data:
        # The checksum protects the bytes: rebuild the file from renamed parts instead.
        targets, nodes = fxrewrite._core.Graph.read(data).to_parts()
        targets = [(n.replace("fxr_cli::write_rows_", "fxr_gone::write_rows"), k, s) for n, k, s in targets]
        f = tmp_path / "gone.fxir"
        f.write_bytes(fxrewrite._core.Graph.from_parts(targets, nodes).write([]))
        with pytest.raises(fxrewrite.FxrewriteError, match="fxr_gone::write_rows"):
            fxrewrite.load(f)


def test_export_archive(tmp_path):
    ep = torch.export.export(cli_model.Mutating(), (torch.randn(4, 8),))
    f = tmp_path / "model.pt2"
    torch.export.save(ep, str(f))
    err = run("inspect", str(f), check_rc=2).stderr
    assert "--import" in err  # the operators are not registered in a bare process
    data = json.loads(run("inspect", "--json", "--import", "cli_model", str(f)).stdout)
    (row,) = data
    assert row["auto_functionalized"], row
    assert row["mutated_inputs"], row
    assert run("check", "--import", "cli_model", str(f)).returncode == 0
