"""The install story: ``python -m fxrewrite`` is the ``fxrewrite`` command, the
committed fixtures work without torch, and the native module is the stable-ABI
build (``scripts/check_wheel.sh`` tries the wheel itself on every Python)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fxrewrite import _core

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = [DATA / "cli_model_v2.fxir", DATA / "cli_model_v1.fxir"]


def python_m(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fxrewrite", *args], capture_output=True, text=True, timeout=120
    )


def test_python_m_fxrewrite_is_the_command():
    p = python_m("--help")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: fxrewrite ") and "examples:" in p.stdout
    p = python_m("check", "--help")
    assert p.returncode == 0 and p.stdout.startswith("usage: fxrewrite check "), p.stderr
    p = python_m("check", *map(str, FIXTURES))
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "every auto_functionalized node in 2 graph(s) would be removed" in p.stdout
    assert python_m("frobnicate").returncode == 2


def test_committed_fixtures_need_no_torch():
    # What check_wheel.sh runs in venvs without torch, here in one process
    # that must never import it.
    code = f"""
import contextlib, io, json, sys
from fxrewrite.cli import main
files = {[str(f) for f in FIXTURES]!r}
out = io.StringIO()
with contextlib.redirect_stdout(out):
    assert main(["inspect", *files]) == 0
    assert main(["check", *files]) == 0
for f in files:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["explain", "--json", f]) == 0
    print(json.dumps(json.loads(buf.getvalue())))
assert "torch" not in sys.modules, "torch was imported"
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    per_file = [json.loads(line) for line in p.stdout.splitlines()]
    assert [[d["form"] for d in ds] for ds in per_file] == [["v2", "v2"], ["v1", "v1"]]
    for ds in per_file:
        assert {d["op"] for d in ds} == {"fxr_cli::add_rms_.default", "fxr_cli::write_rows_.default"}
        assert {d["action"] for d in ds} == {"reinplaced"}


def test_native_module_is_the_stable_abi_build():
    path = Path(_core.__file__)
    natives = sorted(p.name for p in path.parent.glob("_core.*") if p.suffix in (".so", ".pyd"))
    # A version-specific module left by an older build (_core.cpython-311-*.so)
    # is imported in preference to a fresh _core.abi3.so, silently running old
    # code; scripts/setup.sh and scripts/test.sh remove it before building.
    assert path.name.startswith("_core.abi3.") and len(natives) == 1, (str(path), natives)


def test_package_names_stay_the_objects_whatever_is_imported_first():
    """``fxrewrite.install`` and ``fxrewrite.pre_pass`` are the function and
    the pass, never a module, whatever a program imports first: the modules
    that define them have other names (``_install``, ``_pre_pass``), since
    importing a submodule binds it on the package under its own name (a
    test importing a helper of the pre pass once made ``fxrewrite.pre_pass``
    the module, and Inductor then called a module). Each order runs in a
    fresh interpreter, as a user's first access would."""
    firsts = (
        "fxrewrite.install",
        "fxrewrite.pre_pass",
        "fxrewrite.Installation",
        "fxrewrite.PrePass",
        "import fxrewrite.vllm",
    )
    imports = ("from fxrewrite._pre_pass import record_alias_groups", "import fxrewrite._install")
    # Each first access alone, then each submodule import before the two
    # names' first access: the orders that can bind a module over a name.
    orders = [("", first) for first in firsts]
    orders += [(imported, first) for imported in imports for first in firsts[:2]]
    script = """
import fxrewrite, types
{imported}
{first}
{imported}
for name in ("install", "pre_pass"):
    value = getattr(fxrewrite, name)
    assert not isinstance(value, types.ModuleType), (name, value)
assert isinstance(fxrewrite.pre_pass, fxrewrite.PrePass)
assert callable(fxrewrite.install)
"""
    # Fresh interpreters, started together: the test's time is one import
    # of torch per core rather than per order.
    runs = [
        (order, subprocess.Popen([sys.executable, "-c", script.format(imported=order[0], first=order[1])]))
        for order in orders
    ]
    failed = [order for order, p in runs if p.wait(timeout=300) != 0]
    assert not failed, failed
