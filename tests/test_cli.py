"""The `fxrewrite` command line tool, run as a subprocess on graphs saved from
real compiles, on torch.export archives and on damaged files."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import cli_model
import fxrewrite
from fxrewrite.encode import is_auto_functionalized

TESTS = Path(__file__).resolve().parent
#: ``PYTHONPATH`` of the tool's subprocesses: the tests' modules, then the
#: directory of the fxrewrite this run imported, so that a checkout or
#: worktree on ``PYTHONPATH`` is the one its subprocesses test too (not the
#: one the environment has installed).
SUBPROCESS_PYTHONPATH = os.pathsep.join([str(TESTS), str(Path(fxrewrite.__file__).resolve().parent.parent)])


def run(
    *args: str,
    check_rc: int | None = 0,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    wrapper: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs the tool; a hang past ``timeout`` fails the test. Exit 2 must come
    with exactly one error line on stderr (warnings aside), never a traceback.
    ``wrapper`` is a command prefix (see ``_without_root_file_access``)."""
    env = dict(os.environ, PYTHONPATH=SUBPROCESS_PYTHONPATH, **(env or {}))
    p = subprocess.run(
        [*(wrapper or []), sys.executable, "-m", "fxrewrite", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    if check_rc is not None:
        assert p.returncode == check_rc, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    if p.returncode == 2:
        errors = [line for line in p.stderr.splitlines() if line and ": warning: " not in line]
        assert len(errors) == 1 and errors[0].startswith("fxrewrite"), p.stderr
    return p


def hint(stderr: str, marker: str) -> list[str]:
    """The command a message suggests after ``marker``, as arguments after ``fxrewrite``."""
    assert marker in stderr, stderr
    text = stderr.split(marker, 1)[1].splitlines()[0].strip()
    if marker.startswith("("):
        text = text.removesuffix(")")
    argv = shlex.split(text)
    assert argv[0] == "fxrewrite", text
    return argv[1:]


IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("saved")
    env = dict(os.environ, FXREWRITE_SAVE_DIR=str(d), PYTHONPATH=SUBPROCESS_PYTHONPATH)
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


VERBS = ("demo", "inspect", "explain", "rewrite", "show", "check")


def test_help_on_every_level_has_an_example():
    assert "examples:" in run("--help").stdout
    for cmd in VERBS:
        assert "examples:" in run(cmd, "--help").stdout


def test_every_example_in_the_help_parses():
    from fxrewrite.cli import build_parser

    helps = [run("--help").stdout, *(run(cmd, "--help").stdout for cmd in VERBS)]
    commands = []
    for text in helps:
        examples = text.split("examples:", 1)[1]
        commands += re.findall(r"fxrewrite(?: [^\s)|]+)+", examples)
    assert len(commands) >= 2 * len(VERBS), commands
    verbs = set()
    for cmd in commands:
        try:
            args = build_parser().parse_args(shlex.split(cmd)[1:])
        except SystemExit as e:
            pytest.fail(f"the example {cmd!r} is not valid usage (exit {e.code})")
        verbs.add(args.command)
    assert verbs == set(VERBS)


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
        with pytest.raises(fxrewrite.FxrewriteError, match="fxr_gone::write_rows") as caught:
            fxrewrite.load(f)
        # The node is named (the auto_functionalized node taking the operator
        # as its argument, not "?"), with the full operator name and the hint.
        message = str(caught.value)
        assert "node ?" not in message, message
        assert re.search(
            r"node auto_functionalized\w* takes as argument the operator fxr_gone::write_rows\.default",
            message,
        ), message
        assert "registers the 'fxr_gone' operators" in message and "--import MODULE" in message, message


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


def test_export_archive_mutations_are_write_backs(tmp_path):
    """An exported program returns its mutated user inputs and buffers as
    outputs its signature lists as mutations: the caller's tensor (or the
    buffer) is updated, as by a ``copy_`` write-back, so nothing is cloned."""
    module = cli_model.WritesInputAndBuffer()
    x, res = torch.randn(4, 8), torch.randn(4, 8)
    ep = torch.export.export(module, (x, res))
    f = tmp_path / "model.pt2"
    torch.export.save(ep, str(f))
    (row,) = json.loads(run("inspect", "--json", "--import", "cli_model", str(f)).stdout)
    assert sorted(row["mutated_inputs"]) == ["b_cache", "res"], row
    assert row["would"] == {
        "reinplace": 2,
        "clone": 0,
        "clones": 0,
        "leave": 0,
        "move_readers": 0,
        "remove_writebacks": 2,
    }, row
    assert row["info"]["writebacks"] == "2"
    explained = run("explain", "--import", "cli_model", str(f)).stdout
    assert "not written back" not in explained and "clone" not in explained, explained

    # The rewritten graph runs: same output and same mutations as eager.
    out = tmp_path / "after.fxir"
    rep = json.loads(run("rewrite", "--json", "--import", "cli_model", str(f), "-o", str(out)).stdout)
    assert rep["report"]["writebacks_removed"] == 2
    gm = fxrewrite.load(out)
    assert not any(n.target is torch.ops.aten.copy_.default for n in gm.graph.nodes), gm.graph
    eager = cli_model.WritesInputAndBuffer()
    res_eager = res.clone()
    expected = eager(x.clone(), res_eager)
    state = {"b_w": module.w.clone(), "b_cache": module.cache.clone(), "x": x.clone(), "res": res.clone()}
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    (got,) = gm(*(state[p] for p in placeholders))
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(state["res"], res_eager)
    torch.testing.assert_close(state["b_cache"], eager.cache)
    torch.testing.assert_close(state["x"], x)


# Hostile paths: only regular files are opened, each up to a size limit
# checked before reading. Named on the command line: exit 2. Met inside a
# directory: skipped with a warning, the other files still read.

HOSTILE_TIMEOUT = 120  # a FIFO opened for reading blocks: a hang fails the test


def _graphs_dir(saved: Path, tmp_path: Path) -> Path:
    d = tmp_path / "graphs"
    shutil.copytree(saved, d)
    return d


def _has_dev_zero() -> bool:
    return Path("/dev/zero").exists() and hasattr(os, "mkfifo")


needs_posix = pytest.mark.skipif(not _has_dev_zero(), reason="needs /dev/zero and FIFOs")


@needs_posix
def test_a_link_to_dev_zero_named_directly_is_refused_before_reading(tmp_path):
    for name in ("zero.fxir", "zero.pt2"):
        link = tmp_path / name
        link.symlink_to("/dev/zero")
        for args in (
            ("inspect", str(link)),
            ("check", str(link)),
            ("show", str(link)),
            ("explain", str(link)),
            ("rewrite", str(link), "-o", str(tmp_path / "out.fxir")),
        ):
            err = run(*args, check_rc=2, timeout=HOSTILE_TIMEOUT).stderr
            assert f"{link}: not a regular file (a character device)" in err, err
    assert not (tmp_path / "out.fxir").exists()


@needs_posix
def test_refusing_a_hostile_archive_does_not_import_torch(tmp_path):
    link = tmp_path / "zero.pt2"
    link.symlink_to("/dev/zero")
    code = (
        "import sys; from fxrewrite.cli import main; "
        f"rc = main(['inspect', {str(link)!r}, {str(tmp_path)!r}]); "
        "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "not a regular file" in p.stderr, p.stderr


@needs_posix
def test_a_fifo_named_directly_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "p.fxir"
    os.mkfifo(fifo)
    err = run("check", str(fifo), check_rc=2, timeout=HOSTILE_TIMEOUT).stderr
    assert f"{fifo}: not a regular file (a FIFO)" in err


@needs_posix
def test_hostile_entries_in_a_directory_are_skipped_with_a_warning(saved, tmp_path):
    d = _graphs_dir(saved, tmp_path)
    (d / "zero.fxir").symlink_to("/dev/zero")
    (d / "sub").mkdir()
    (d / "sub" / "zero.pt2").symlink_to("/dev/zero")
    os.mkfifo(d / "sub" / "p.fxir")
    (d / "broken.fxir").symlink_to(tmp_path / "nowhere.fxir")
    (d / "good-link.fxir").symlink_to(_before(saved))  # a link to a regular file is read
    expected = {
        str(d / "zero.fxir"): "not a regular file (a character device)",
        str(d / "sub" / "zero.pt2"): "not a regular file (a character device)",
        str(d / "sub" / "p.fxir"): "not a regular file (a FIFO)",
        str(d / "broken.fxir"): "a broken symbolic link",
    }
    p = run("check", str(d), timeout=HOSTILE_TIMEOUT)
    assert "in 3 graph(s) would be removed (4 skipped" in p.stdout, p.stdout
    for path, why in expected.items():
        assert f"fxrewrite check: warning: skipped {path}: {why}" in p.stderr, p.stderr
    data = json.loads(run("check", "--json", str(d), timeout=HOSTILE_TIMEOUT).stdout)
    assert data["files"] == 3 and data["remaining"] == []
    assert {s["file"]: s["skipped"] for s in data["skipped"]} == expected
    rows = json.loads(run("--json", "inspect", str(d), timeout=HOSTILE_TIMEOUT).stdout)
    assert {r["file"]: r["skipped"] for r in rows if "skipped" in r} == expected
    assert len([r for r in rows if "nodes" in r]) == 3
    # Nothing readable left: a clear error, the skips still named.
    only = tmp_path / "hostile-only"
    only.mkdir()
    os.mkfifo(only / "p.fxir")
    p = run("inspect", str(only), check_rc=2, timeout=HOSTILE_TIMEOUT)
    assert "skipped" in p.stderr and "no saved graphs found" in p.stderr


def test_a_file_over_the_size_limit(saved, tmp_path):
    f = _before(saved)
    size = f.stat().st_size
    # Named: exit 2, the message names the limit and a command that reads it.
    for args, env in (
        (("--max-size", "1K", "show", str(f)), None),
        (("show", str(f), "--max-size", "1K"), None),
        (("show", str(f)), {"FXREWRITE_MAX_FILE_SIZE": "1K"}),
    ):
        err = run(*args, check_rc=2, env=env).stderr
        assert f"{f}: {size / 1024:.1f} KiB, over the 1 KiB size limit" in err, err
        again = run(*hint(err, "to read it: "), env=env)
        assert again.stdout.startswith("graph():")
    # In a directory: skipped with a warning, the smaller file still read.
    d = _graphs_dir(saved, tmp_path)
    limit = str(size - 1)
    p = run("check", str(d), "--max-size", limit)
    assert "in 1 graph(s) would be removed (1 skipped" in p.stdout
    assert f"skipped {d / f.name}: " in p.stderr and "size limit" in p.stderr
    assert "in 2 graph(s)" in run(*hint(p.stderr, "to read it: ")).stdout
    data = json.loads(run("check", "--json", str(d), env={"FXREWRITE_MAX_FILE_SIZE": limit}).stdout)
    assert [s["file"] for s in data["skipped"]] == [str(d / f.name)]
    # A limit that is not a size is bad usage.
    assert "not a size" in run("check", str(d), "--max-size", "lots", check_rc=2).stderr
    bad_env = run("check", str(d), check_rc=2, env={"FXREWRITE_MAX_FILE_SIZE": "lots"}).stderr
    assert "FXREWRITE_MAX_FILE_SIZE=lots" in bad_env


def test_unwritable_output_exits_2_naming_the_path(saved, tmp_path):
    f = str(_before(saved))
    missing = tmp_path / "no_such_dir" / "out.fxir"
    err = run("rewrite", f, "-o", str(missing), check_rc=2).stderr
    assert f"{missing}: cannot write the output: no such file or directory" in err
    err = run("rewrite", f, "-o", str(tmp_path), check_rc=2).stderr
    assert f"{tmp_path}: cannot write the output: is a directory" in err
    if Path("/dev/full").exists():
        err = run("rewrite", f, "-o", "/dev/full", check_rc=2).stderr
        assert "/dev/full: cannot write the output: no space left on device" in err
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "out.fifo"
        os.mkfifo(fifo)
        err = run("rewrite", f, "-o", str(fifo), check_rc=2, timeout=HOSTILE_TIMEOUT).stderr
        assert "a FIFO with no reader" in err
    ro = tmp_path / "read-only"
    ro.mkdir(mode=0o500)
    wrapper = _without_root_file_access()
    err = run("rewrite", f, "-o", str(ro / "out.fxir"), check_rc=2, wrapper=wrapper).stderr
    assert "cannot write the output: permission denied" in err


def _without_root_file_access() -> list[str]:
    """A command prefix under which permission bits apply: nothing for an
    ordinary user; for root (CI runs as root, and root reads any file),
    ``setpriv`` dropping the two capabilities that bypass them."""
    if not IS_ROOT:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root and util-linux's setpriv is not installed")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]


def test_unreadable_input_exits_2(saved, tmp_path):
    wrapper = _without_root_file_access()
    f = tmp_path / "locked.fxir"
    shutil.copy(_before(saved), f)
    f.chmod(0)
    assert f"{f}: permission denied" in run("inspect", str(f), check_rc=2, wrapper=wrapper).stderr
    d = tmp_path / "graphs"
    (d / "locked").mkdir(parents=True)
    shutil.copy(_before(saved), d)
    (d / "locked").chmod(0)
    p = run("check", str(d), wrapper=wrapper)
    assert f"skipped {d / 'locked'}: cannot list the directory: permission denied" in p.stderr
    (d / "locked").chmod(0o755)


def test_a_directory_where_one_file_is_expected(saved):
    for verb in ("show", "explain"):
        err = run(verb, str(saved), check_rc=2).stderr
        assert f"{saved}: is a directory, one saved graph file was expected" in err
        listed = run(*hint(err, "to list the graphs in it: ")).stdout
        assert _before(saved).name in listed


def test_shared_options_go_before_or_after_the_verb(saved, tmp_path):
    f = str(_before(saved))
    before = json.loads(run("--json", "inspect", f).stdout)
    after = json.loads(run("inspect", f, "--json").stdout)
    assert before == after
    json.loads(run("--json", "--max-size", "1M", "check", f).stdout)
    # Imports from both places are made.
    ep = torch.export.export(cli_model.Mutating(), (torch.randn(4, 8),))
    pt2 = tmp_path / "model.pt2"
    torch.export.save(ep, str(pt2))
    assert run("--import", "cli_model", "check", str(pt2)).returncode == 0
    assert run("--import", "json", "check", str(pt2), "--import", "cli_model").returncode == 0
    err = run("--import", "no_such_module_here", "check", f, check_rc=2).stderr
    assert "--import no_such_module_here: ModuleNotFoundError" in err


def test_every_hint_is_a_command_that_works(tmp_path):
    # The archive's operators are not registered: the hint names the operator
    # and the command to rerun with the defining library imported.
    ep = torch.export.export(cli_model.Mutating(), (torch.randn(4, 8),))
    pt2 = tmp_path / "model.pt2"
    torch.export.save(ep, str(pt2))
    for verb_args in (("inspect", str(pt2)), ("check", "--json", str(pt2)), ("explain", str(pt2))):
        err = run(*verb_args, check_rc=2).stderr
        assert "calls operator fxr_cli::write_rows_, which is not registered" in err
        argv = hint(err, "rerun with MODULE the library that defines it: ")
        assert "MODULE" in argv
        run(*[a.replace("MODULE", "cli_model") for a in argv])
    # Bad usage: one line, ending in a help command that works.
    for args in (("frobnicate",), ("inspect",), ("--max-size", "x", "check", "."), ("rewrite", "g.fxir")):
        err = run(*args, check_rc=2).stderr
        help_args = hint(err, "(see: ")
        assert help_args[-1] == "--help"
        assert "usage:" in run(*help_args).stdout
    # A file that is not a zip archive gets no import hint.
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"not a zip")
    err = run("inspect", str(junk), check_rc=2).stderr
    assert "not a torch.export archive (not a zip file)" in err and "--import" not in err


#: FIXTURE: a saved graph (v2 form, before fxrewrite) that the tool reads without torch.
FIXTURE = TESTS / "data" / "cli_model_v2.fxir"

#: Runs the tool as its console script does: ``sys.path`` starts with the
#: script's own directory, not the current one (``python -m`` and ``python -c``
#: would put the current directory first and hide the problem). A script in a
#: directory of its own is the faithful stand-in (``python -P``, also without
#: the current directory, needs Python 3.11; the console script in the venv
#: would import fxrewrite from wherever it is installed, not this checkout).
CONSOLE_SCRIPT = """\
import os, sys
assert os.getcwd() not in sys.path and "" not in sys.path, sys.path
if os.environ.get("HIDE_NUMPY"):
    sys.modules["numpy"] = None  # as if numpy were not installed
from fxrewrite.cli import main
sys.exit(main())
"""


def run_console_script(tmp_path: Path, cwd: Path, *args: str, env: dict[str, str] | None = None):
    script = tmp_path / "bin" / "fxrewrite_console.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(CONSOLE_SCRIPT)
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=SUBPROCESS_PYTHONPATH, **(env or {})),
        stdin=subprocess.DEVNULL,
    )


def test_version():
    p = run("--version")
    assert p.stdout.strip().startswith(f"fxrewrite {fxrewrite.__version__}"), p.stdout
    assert "--version" in run("--help").stdout


def test_import_finds_a_module_in_the_current_directory(tmp_path):
    work = tmp_path / "mylib_project"
    work.mkdir()
    (work / "fxr_cwd_lib.py").write_text("from pathlib import Path\nPath('imported').write_text('yes')\n")
    p = run_console_script(tmp_path, work, "check", str(FIXTURE), "--import", "fxr_cwd_lib")
    assert p.returncode == 0, p.stderr
    assert (work / "imported").read_text() == "yes"
    # Still one line, exit 2, for a module that is nowhere.
    p = run_console_script(tmp_path, work, "check", str(FIXTURE), "--import", "fxr_no_such_lib")
    assert p.returncode == 2 and "ModuleNotFoundError" in p.stderr and len(p.stderr.splitlines()) == 1


def test_no_numpy_warning_on_stderr(tmp_path):
    """Without numpy, importing torch warns "Failed to initialize NumPy" (two
    lines): the tool silences it, the library does not."""
    hide = {"HIDE_NUMPY": "1"}
    # The tool imports torch (here through --import) and prints nothing on stderr.
    p = run_console_script(tmp_path, tmp_path, "inspect", "--import", "torch", str(FIXTURE), env=hide)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    # With fxrewrite's command line module imported, a library user still sees the warning.
    code = "import sys; sys.modules['numpy'] = None; import fxrewrite.cli; import torch"
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=SUBPROCESS_PYTHONPATH),
    )
    assert p.returncode == 0 and "Failed to initialize NumPy" in p.stderr, p.stderr


def test_inspect_says_where_the_graph_stands(saved, tmp_path):
    before = run("inspect", str(FIXTURE)).stdout
    assert f"{FIXTURE}: before fxrewrite:" in before
    out = tmp_path / "rewritten.fxir"
    run("rewrite", str(FIXTURE), "-o", str(out))
    text = run("inspect", str(out)).stdout
    assert f"{out}: after fxrewrite:" in text and "then rewritten by `fxrewrite rewrite`" in text, text
    assert "before fxrewrite:" not in text
    (row,) = json.loads(run("inspect", "--json", str(out)).stdout)
    assert row["stage"] == "after fxrewrite"
    (after,) = saved.glob("*-after.fxir")
    assert f"{after}: after fxrewrite:" in run("inspect", str(after)).stdout


def test_demo_shows_a_copy_inductor_keeps_and_fxrewrite_does_not():
    """The demo's point: in the v1 form (vLLM's), Inductor alone clones the q
    and k slices the rotary writes (2 per layer); fxrewrite clones none. Both
    agree with eager."""
    out = run("demo", "--layers", "2", timeout=120).stdout
    rows = {}
    for line in out.splitlines():
        m = re.match(
            r"(Inductor alone|Inductor \+ fxrewrite)\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+ ms\s+(\w+)$", line
        )
        if m:
            rows[m.group(1)] = (int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5))
    assert set(rows) == {"Inductor alone", "Inductor + fxrewrite"}, out
    assert rows["Inductor alone"][2] == 4 and rows["Inductor + fxrewrite"][2] == 0, out
    assert all(r[0] == r[1] and r[3] == "yes" for r in rows.values()), out
    assert "v1 form" in out and "copies a tensor 4 times per forward" in out, out
