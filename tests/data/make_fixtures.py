"""Regenerates the committed ``.fxir`` fixtures from real compiles of
``tests/cli_model.py`` (the graph the pass receives, before its rewrite), in
the v2 form and in the v1 form::

    python tests/data/make_fixtures.py

They let the command line tool be tried without torch (``scripts/check_wheel.sh``
runs it from the wheel on every supported Python). Source paths are written
relative to the repository, so the files do not depend on the checkout.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

import fxrewrite
from fxrewrite import _core

DATA = Path(__file__).resolve().parent
ROOT = DATA.parent.parent
sys.path.insert(0, str(DATA.parent))

import cli_model  # noqa: E402  (found through the path set just above)


def capture(v2: bool, out: Path) -> None:
    """Compiles ``cli_model.model`` and writes the post-grad graph fxrewrite receives to ``out``."""
    form = "v2" if v2 else "v1"
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.fxir"
        rewrite = fxrewrite.Pass(strict=True)

        def save_then_rewrite(graph: torch.fx.Graph) -> None:
            fxrewrite.save(graph, raw)
            rewrite(graph)

        torch._dynamo.reset()
        patch = {
            "fx_graph_cache": False,
            "enable_auto_functionalized_v2": v2,
            "post_grad_custom_post_pass": save_then_rewrite,
        }
        args = cli_model.inputs()
        expected = cli_model.model(*[a.clone() for a in args])
        with torch._inductor.config.patch(patch):
            got = torch.compile(cli_model.model)(*args)
        torch.testing.assert_close(got, expected)
        native = _core.Graph.read(raw.read_bytes())
    targets, nodes = native.to_parts()
    prefix = f"{ROOT}/"
    nodes = [(*n[:6], n[6].replace(prefix, "") if n[6] else n[6]) for n in nodes]
    info = [
        *[(k, v) for k, v in native.info if k != "origin"],
        ("origin", f"tests/cli_model.py, torch.compile, {form} form, before fxrewrite"),
    ]
    out.write_bytes(_core.Graph.from_parts(targets, nodes).write(info))
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    capture(True, DATA / "cli_model_v2.fxir")
    capture(False, DATA / "cli_model_v1.fxir")
