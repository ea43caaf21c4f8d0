"""fxrewrite in vLLM by configuration alone (issue 31), without vLLM: the
documented name resolved exactly as vLLM resolves it, ``install()`` reaching
a worker started with ``spawn`` through the ``vllm.general_plugins`` entry
point, the pass as vLLM's GPU manager wants it (an ``InductorPass``, with
fxrewrite's ``uuid()``), its copies surviving what vLLM runs after a user's
pass, and the one log line that shows it ran. ``vllm_standin`` holds the
replayed vLLM code and the children; ``standin_vllm/`` the stand-in of
vLLM's ``InductorPass``, put on ``sys.path`` only in children."""

from __future__ import annotations

import logging
import multiprocessing
import os
import subprocess
import sys
from typing import Any

import pytest
import torch

import fxrewrite
import fxrewrite.vllm
import vllm_standin as S
from fxrewrite._install_env import INSTALL_ENV, encode_options, requested


def _spawn(fn: Any, *args: Any) -> dict[str, Any]:
    """``fn(*args)`` in a process started as vLLM's CPU platform starts its
    workers: with multiprocessing's ``spawn`` method."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        result: dict[str, Any] = pool.apply_async(fn, args).get(timeout=400)
    return result


def _ran_lines(lines: list[str], pid: int) -> list[str]:
    return [line for line in lines if line.startswith(f"INFO fxrewrite ran: pid {pid},")]


# ----- 1. the name --------------------------------------------------------------------


def test_the_documented_name_is_one_object_under_both_of_vllms_resolutions():
    top = __import__("fxrewrite.vllm")
    assert top is fxrewrite  # __import__ of a dotted name returns the top package
    by_config = top.__dict__["pass_"]  # what vLLM's CompilationConfig reads
    assert by_config is S.resolve_obj_by_qualname(S.NAME) is fxrewrite.vllm.pass_ is fxrewrite.pass_
    assert "vllm" not in sys.modules  # no vLLM here: fxrewrite's own Pass
    assert type(by_config) is fxrewrite.Pass
    assert by_config.uuid() == fxrewrite.Pass().uuid()
    pre = top.__dict__["pre_pass"]
    assert pre is S.resolve_obj_by_qualname(S.PRE_NAME) is fxrewrite.vllm.pre_pass is fxrewrite.pre_pass
    assert type(pre) is fxrewrite.PrePass


def test_importing_fxrewrite_imports_neither_vllm_nor_torch():
    code = "import fxrewrite, sys; print(sorted(m for m in ('torch', 'vllm', 'fxrewrite.vllm') if m in sys.modules))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_the_short_name_is_not_resolvable_by_vllm_so_the_docs_name_the_module():
    # fxrewrite.pass_ is made on first access; vLLM's lookup reads the
    # package's __dict__ and fails (issue 31's KeyError). Binding it eagerly
    # would need torch at `import fxrewrite`, and in vLLM a plain Pass would
    # be wrapped and run without the copies vLLM's clone elimination keeps.
    code = "import fxrewrite; __import__('fxrewrite').__dict__['pass_']"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "KeyError: 'pass_'" in p.stderr


def test_a_spawned_process_configured_by_the_name_runs_the_pass():
    got = _spawn(S.child_by_name, S.NAME, False)
    assert got["pid"] != os.getpid() and not got["vllm_imported"]
    assert not got["pass_bound_before"]  # bound by resolving the name, nothing else
    assert got["same_object"] and got["is_fxrewrite_pass_"]
    assert got["class"] == got["shipped_class"] == "fxrewrite.inductor_pass.Pass"
    assert got["uuid"] == got["shipped_uuid"] == got["fxrewrite_uuid"] == fxrewrite.Pass().uuid()
    assert got["pre_same_object"] and got["pre_uuid"] == fxrewrite.PrePass().uuid()
    assert got["cpu_equal"] and got["cpu_found"] == 1 and got["cpu_left"] == 0
    assert _ran_lines(got["lines"], got["pid"]), got["lines"]


def test_with_the_stand_in_vllm_the_name_is_its_inductor_pass_in_its_manager_order():
    got = _spawn(S.child_by_name, S.NAME, True)
    assert got["vllm_imported"]
    assert got["is_inductor_pass"] and not got["wrapped"]  # vLLM keys its cache on our uuid()
    assert got["same_object"] and got["is_fxrewrite_pass_"]
    assert got["class"] == got["shipped_class"] == "fxrewrite.vllm.VllmPass"
    assert got["uuid"] == got["shipped_uuid"] == got["fxrewrite_uuid"] == fxrewrite.Pass().uuid()
    assert got["pre_same_object"] and got["pre_uuid"] == fxrewrite.PrePass().uuid()
    for route in ("cpu", "gpu"):
        assert got[f"{route}_equal"] and got[f"{route}_found"] == 1 and got[f"{route}_left"] == 0, route
    # The copy the rewrite made survived the clone elimination, and nothing
    # was left for vLLM's FixFunctionalizationPass.
    assert got["clones_removed"] == [0] and got["left_for_fix_functionalization"] == [0]
    assert len(_ran_lines(got["lines"], got["pid"])) == 2, got["lines"]


# ----- 2. install() across spawn ------------------------------------------------------


def test_the_plugin_entry_point_is_declared():
    assert S.declared_plugins() == {"fxrewrite": "fxrewrite._install_env:vllm_plugin"}


def test_install_records_itself_in_the_environment_and_uninstall_restores_it(monkeypatch):
    monkeypatch.delenv(INSTALL_ENV, raising=False)
    config = torch._inductor.config
    with config.patch({"post_grad_custom_post_pass": None, "joint_custom_pre_pass": None}):
        with fxrewrite.install():
            assert os.environ[INSTALL_ENV] == "1" and requested() == {}
        assert INSTALL_ENV not in os.environ
        with fxrewrite.install(strict=True, leave=["fxr_vllmcfg::bump_"]) as inst:
            assert requested() == {"strict": True, "leave": ["fxr_vllmcfg::bump_"]}
            assert inst.pass_.strict
        assert INSTALL_ENV not in os.environ
    assert encode_options(None, []) == "1"
    for bad in ("yes", '{"strict": 1}', '{"other": true}', '{"leave": "a::b"}'):
        monkeypatch.setenv(INSTALL_ENV, bad)
        with pytest.raises(ValueError, match=INSTALL_ENV):
            requested()


def test_install_reaches_a_spawned_worker_through_the_plugin(tmp_path, monkeypatch, capfd):
    plugin_dir = S.write_plugin_distribution(tmp_path)
    # The documented way to see it ran inside an engine: TORCH_LOGS=fxrewrite
    # prints the pass's line in every process that compiles.
    monkeypatch.setenv("TORCH_LOGS", "fxrewrite")
    monkeypatch.delenv(INSTALL_ENV, raising=False)
    config = torch._inductor.config
    with config.patch({"post_grad_custom_post_pass": None, "joint_custom_pre_pass": None}):
        with fxrewrite.install() as installed:
            got = _spawn(S.child_by_install, str(plugin_dir))
            parent_uuid = installed.pass_.uuid()
    assert got["requested"] == "1"
    assert got["hook_before"] == "None"  # nothing of the parent's hooks came along
    assert set(got["plugins_unasked"]) == {"fxrewrite"} and got["hook_unasked"] == "None"
    assert set(got["plugins"]) == {"fxrewrite"} and got["installed_pre_pass"] == "PrePass"
    assert got["uuid"] == parent_uuid == fxrewrite.Pass().uuid()
    assert got["equal"] and got["found"] == 1 and got["left"] == 0
    assert _ran_lines(got["lines"], got["pid"]), got["lines"]
    assert f"fxrewrite ran: pid {got['pid']}," in capfd.readouterr().err


def test_without_install_the_spawned_worker_gets_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(INSTALL_ENV, raising=False)
    got = _spawn(S.child_by_install, str(S.write_plugin_distribution(tmp_path)))
    assert got["requested"] is None and set(got["plugins"]) == {"fxrewrite"}
    assert got["uuid"] is None and got["found"] is None  # the pass did not run
    assert got["equal"]  # Inductor's own answer
    assert not _ran_lines(got["lines"], got["pid"])


def _compile_bump(manager: Any) -> None:
    torch._dynamo.reset()
    a = torch.randn(3, 4)
    with torch._inductor.config.patch({"post_grad_custom_post_pass": manager, "fx_graph_cache": False}):
        torch.compile(S.copy_written, fullgraph=True)(a)


def test_install_says_when_the_engine_replaced_its_hook(monkeypatch, caplog):
    # vLLM's GPU path sets post_grad_custom_post_pass to its own manager for
    # each compile: install()'s rewrite then never runs, and the pre pass
    # (still installed) says what to write instead.
    # The module found through a class it defines: importing ``fxrewrite.pre_pass``
    # as a module would bind it over the package's ``pre_pass`` object.
    monkeypatch.setattr(sys.modules[fxrewrite.PrePass.__module__], "_warned_not_rewritten", False)
    config = torch._inductor.config
    with config.patch({"post_grad_custom_post_pass": None, "joint_custom_pre_pass": None}):
        with fxrewrite.install():
            with caplog.at_level(logging.WARNING, logger="fxrewrite"):
                with_ours = S.StandInPostGradPassManager(None)
                with_ours.add(fxrewrite.vllm.VllmPass())
                _compile_bump(with_ours)
                assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
                _compile_bump(S.StandInPostGradPassManager(None))
                _compile_bump(S.StandInPostGradPassManager(None))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "StandInPostGradPassManager" in warnings[0] and "fxrewrite.vllm.pass_" in warnings[0]


# ----- 3. safe in vLLM's order ----------------------------------------------------------


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("program", list(S.PROGRAMS))
def test_copies_survive_what_vllm_runs_after_a_user_pass(program, v2):
    manager = S.StandInPostGradPassManager(None)
    manager.add(fxrewrite.vllm.VllmPass(strict=True))
    assert S.run_program(program, {"post_grad_custom_post_pass": manager}, v2=v2)
    assert manager.clones_removed == [0] and manager.left_for_fix_functionalization == [0]


def test_copies_survive_with_a_dynamic_token_count():
    manager = S.StandInPostGradPassManager(None)
    manager.add(fxrewrite.vllm.VllmPass(strict=True))
    assert S.run_program("copy_row_written", {"post_grad_custom_post_pass": manager}, v2=False, dynamic=True)
    assert manager.clones_removed == [0]


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("program", ["copy_written", "copy_row_written", "copy_written_twice"])
def test_the_stand_in_catches_plain_copies_being_removed(program, v2):
    # The control: fxrewrite's plain Pass makes its copies with aten.clone,
    # written through views; vLLM's clone elimination removes them and the
    # call then writes the original (issue 31: 6 of 8 wrong).
    manager = S.StandInPostGradPassManager(None)
    manager.add(fxrewrite.Pass(strict=True))
    assert not S.run_program(program, {"post_grad_custom_post_pass": manager}, v2=v2)
    assert manager.clones_removed == [1]


# ----- 4. seeing that it ran --------------------------------------------------------------


def test_one_info_line_per_graph_and_saving_needs_no_system_program(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("FXREWRITE_SAVE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))
    p = fxrewrite.Pass(strict=True)
    with caplog.at_level(logging.DEBUG, logger="fxrewrite"):
        assert S.run_program("copy_row_written", {"post_grad_custom_post_pass": p}, v2=True)
    ran = [r for r in caplog.records if r.getMessage().startswith("fxrewrite ran:")]
    assert len(ran) == 1 and ran[0].levelno == logging.INFO
    assert f"pid {os.getpid()}, compile 0/0, graph " in ran[0].getMessage()
    assert "1 auto_functionalized nodes, 1 rewritten, 0 left, 1 copies" in ran[0].getMessage()
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # The graphs and their page, drawn with no system program (no `dot`).
    assert sorted(f.suffix for f in tmp_path.iterdir()) == [".fxir", ".fxir", ".html"]


# ----- 5. the documented commands ---------------------------------------------------------


def test_the_documented_configurations_resolve_to_fxrewrites_passes():
    # vLLM itself is not here: what can be checked is that every
    # configuration the docs give parses and names what vLLM's lookup finds.
    import json
    import re

    docs = ("README.md", "docs/vllm.md", "docs/replacing-fix-functionalization.md")
    texts = [(S.ROOT / f).read_text() for f in docs]
    configs = [json.loads(m) for t in texts for m in re.findall(r"--compilation-config '([^']*)'", t)]
    assert len(configs) == 3
    names: set[str] = set()
    for c in configs:
        names |= set(c["inductor_passes"].values())
    for t in texts:  # the Python form names the same passes
        names |= set(re.findall(r'"(fxrewrite\.[\w.]+)",?\s*(?:#.*)?$', t, re.M))
    assert names == {S.NAME, S.PRE_NAME}
    expected = {S.NAME: fxrewrite.pass_, S.PRE_NAME: fxrewrite.pre_pass}
    for name in names:
        module, _, attr = name.rpartition(".")
        assert __import__(module).__dict__[attr] is S.resolve_obj_by_qualname(name) is expected[name]
