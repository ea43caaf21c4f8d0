"""The command line tool prints and rewrites saved graphs in Rust (its own
FX printer and namer, and the one applier through its IR editor, so that it
never imports torch on `.fxir` files). Those must agree with torch's: on
graphs saved from real compiles, `fxrewrite show` prints what `str(graph)`
prints, and `fxrewrite rewrite` gives the graph the pass gives on the live FX
graph (the same applier through the FX editor, FX's own namer), node for node
and name for name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch._inductor.custom_graph_pass import CustomGraphPass

import cli_model  # noqa: F401  (registers the fxr_cli operators of the fixtures)
import fxrewrite
from programs import PROGRAMS

TESTS = Path(__file__).resolve().parent
SUBPROCESS_PYTHONPATH = os.pathsep.join([str(TESTS), str(Path(fxrewrite.__file__).resolve().parent.parent)])
FIXTURES = sorted((TESTS / "data").glob("*.fxir"))


def _tool(*args: str) -> str:
    p = subprocess.run(
        [sys.executable, "-m", "fxrewrite", *args],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": SUBPROCESS_PYTHONPATH, "PATH": "/usr/bin:/bin"},
    )
    return p.stdout


def _check(saved: Path, tmp_path: Path, rewritten_live: str | None = None) -> None:
    """``rewritten_live``: the live graph rewritten by the pass, printed by
    torch; by default the saved graph loaded back and rewritten (a loaded
    graph has no tensor metadata, which some rewrites need)."""
    assert _tool("show", str(saved)).strip() == str(fxrewrite.load(saved).graph).strip()
    out = tmp_path / f"{saved.stem}-after.fxir"
    _tool("rewrite", str(saved), "-o", str(out))
    if rewritten_live is None:
        live = fxrewrite.load(saved)
        fxrewrite.rewrite(live.graph, strict=True)
        rewritten_live = str(live.graph)
    assert _tool("show", str(out)).strip() == rewritten_live.strip()


@pytest.mark.parametrize("saved", FIXTURES, ids=[f.name for f in FIXTURES])
def test_on_the_committed_fixtures(saved, tmp_path):
    _check(saved, tmp_path)


class _Save(CustomGraphPass):
    """Saves the graph, then rewrites it with the pass and keeps torch's
    print of the result."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rewritten = ""

    def __call__(self, graph: torch.fx.Graph) -> None:
        fxrewrite.save(graph, str(self.path))
        fxrewrite.rewrite(graph, strict=True)
        self.rewritten = str(graph)

    def uuid(self) -> str:
        return "save"


_CHOSEN = [
    p
    for p in PROGRAMS
    if p.name
    in {
        "unmovable reader",
        "reorderable reader",
        "rotary on split qkv",
        "MLA rotary (reshaped q, unsqueezed k_pe)",
    }
]


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
@pytest.mark.parametrize("program", _CHOSEN, ids=[p.name for p in _CHOSEN])
def test_on_graphs_saved_from_a_compile(program, v2, tmp_path):
    # Clones with their exact layout, moved readers, removed write-backs.
    saved = tmp_path / "g.fxir"
    save = _Save(saved)
    torch._dynamo.reset()
    with torch._inductor.config.patch(
        {"post_grad_custom_post_pass": save, "fx_graph_cache": False, "enable_auto_functionalized_v2": v2}
    ):
        torch.compile(program.fn)(*program.make_inputs())
    _check(saved, tmp_path, save.rewritten)
