"""fxrewrite in SGLang by configuration alone: ``install()`` (or
``FXREWRITE_INSTALL=1``) in the launcher reaches a process started with
``spawn``, as SGLang starts its scheduler, through fxrewrite's
``sglang.srt.plugins`` entry point, called there by SGLang's own plugin
loader (``sglang.srt.plugins.load_plugins``, SGLang 0.5.23 installed
without its dependencies by scripts/setup.sh); a plain ``torch.compile``
there (SGLang's ``--enable-torch-compile``) then leaves no
``auto_functionalized`` node and computes eager's values.

Which entry point the loader finds: the one in the installed fxrewrite
distribution's metadata, which ``pip install -e .`` (scripts/setup.sh) writes
from pyproject.toml; the test checks it declares pyproject's. Only when the
installed fxrewrite is an editable install of another checkout (a second
working tree of the repository sharing one environment) does the test write
this checkout's entry points as a separate distribution's metadata, put on
the child's ``sys.path``; a checkout whose own install lacks them fails,
naming the command to run."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
import tomllib
import torch

import fxrewrite
import sglang_child
from fxrewrite._install_env import INSTALL_ENV

ROOT = Path(__file__).resolve().parent.parent
GROUP = "sglang.srt.plugins"
SGLANG_VERSION = "0.5.23"
OURS = {"fxrewrite": "fxrewrite._install_env:sglang_plugin"}


def _declared() -> dict[str, str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    return dict(project.get("entry-points", {}).get(GROUP, {}))


def _require_sglang() -> None:
    if importlib.util.find_spec("sglang") is None:
        pytest.fail(
            f"sglang is not installed: scripts/setup.sh installs it with "
            f'`python -m pip install --no-deps "sglang=={SGLANG_VERSION}" ...`'
        )
    assert md.version("sglang") == SGLANG_VERSION


def _editable_checkout(dist: md.Distribution) -> Path | None:
    """The source folder of an editable install, None for any other."""
    raw = dist.read_text("direct_url.json")
    if not raw:
        return None
    info = json.loads(raw)
    if not info.get("dir_info", {}).get("editable") or not info.get("url", "").startswith("file://"):
        return None
    return Path(info["url"][len("file://") :]).resolve()


def _plugin_dir(tmp_path: Path) -> tuple[str | None, str]:
    """The folder the child puts on ``sys.path`` (None: the installed
    distribution is the one tested) and the distribution SGLang should see."""
    dist = md.distribution("fxrewrite")
    installed = {ep.name: ep.value for ep in dist.entry_points if ep.group == GROUP}
    if installed == OURS:
        return None, dist.metadata["Name"]
    checkout = _editable_checkout(dist)
    if checkout is None or checkout == ROOT:
        pytest.fail(
            f"the installed fxrewrite declares {installed} under {GROUP}, pyproject.toml {OURS}: "
            "reinstall it (`pip install -e .`, as scripts/setup.sh does)"
        )
    info = tmp_path / "fxrewrite_sglang_under_test-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fxrewrite-sglang-under-test\nVersion: 0\n")
    body = "".join(f"{k} = {v}\n" for k, v in _declared().items())
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{body}")
    return str(tmp_path), "fxrewrite-sglang-under-test"


def _spawn(plugin_dir: str | None) -> dict[str, Any]:
    """The child in a process started with multiprocessing's ``spawn``, as
    SGLang starts its scheduler: nothing of this process's hooks comes along."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got: dict[str, Any] = pool.apply_async(sglang_child.child, (plugin_dir,)).get(timeout=500)
    return got


def test_the_sglang_entry_point_is_declared():
    assert _declared() == OURS


def test_install_reaches_a_spawned_sglang_process_through_sglangs_loader(tmp_path, monkeypatch):
    _require_sglang()
    plugin_dir, dist_name = _plugin_dir(tmp_path)
    monkeypatch.delenv(INSTALL_ENV, raising=False)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)  # SGLang's allow-list of plugin names
    monkeypatch.delenv("SGLANG_PLATFORM", raising=False)
    # SGLang points Inductor's cache at its own folder on import: keep both in tmp_path.
    monkeypatch.setenv("SGLANG_CACHE_DIR", str(tmp_path / "sglang-cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    config = torch._inductor.config
    with config.patch({"post_grad_custom_post_pass": None, "joint_custom_pre_pass": None}):
        with fxrewrite.install():
            got = _spawn(plugin_dir)
    assert got["pid"] != os.getpid()
    assert got["requested"] == "1"
    assert got["hook_before"] == "None"  # the launcher's hooks did not come along
    assert got["entry_points"]["fxrewrite"] == [OURS["fxrewrite"], dist_name]
    assert got["hook_unasked"] == "None"  # loaded, and nothing installed unasked
    assert "Executed general plugin: fxrewrite" in got["loader_lines"], got["loader_lines"]
    assert not [line for line in got["loader_lines"] if line.startswith("Failed")], got["loader_lines"]
    assert got["post_hook"] == "Pass" and got["pre_hook"] == "PrePass"
    assert got["found"] == 1 and got["left"] == 0, got
    assert got["equal"]
