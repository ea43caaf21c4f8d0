"""Deployment through torch.export + AOTInductor: the program of `aoti_model`
(mutating custom ops writing a graph input, a module buffer, two views of one
buffer and an out buffer) is compiled into a package with fxrewrite as the
post-grad pass, loaded back and compared with eager, statically and with a
dynamic token count. Each compile builds a C++ shared library (tens of seconds
on a small CPU machine), so there is one compile per shape mode."""

from __future__ import annotations

import copy
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch._inductor import config as inductor_config

import aoti_model
import fxrewrite
from fxrewrite.encode import count_auto_functionalized


@dataclass
class AfterFxrewrite:
    """A post-grad pass composed after fxrewrite: counts what reaches lowering."""

    seen: list[int]

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.seen.append(count_auto_functionalized(graph))

    def uuid(self) -> str:
        return "fxrewrite-test-after"


@dataclass
class Built:
    package: Path
    pass_: fxrewrite.Pass
    reaching_lowering: list[int]
    eager: aoti_model.Block


def _build(tmp_path: Path, dynamic: bool) -> Built:
    model = aoti_model.Block()
    eager = copy.deepcopy(model)
    args = aoti_model.inputs(6)
    shapes = None
    if dynamic:
        tokens = torch.export.Dim("tokens", min=2, max=aoti_model.MAX_TOKENS)
        shapes = {"x": {0: tokens}, "res": {0: tokens}}
    ep = torch.export.export(model, args, dynamic_shapes=shapes)
    the_pass = fxrewrite.Pass(strict=True)
    after = AfterFxrewrite([])
    package = tmp_path / "model.pt2"
    with inductor_config.patch(
        {
            "post_grad_custom_post_pass": fxrewrite.compose(the_pass, after),
            "fx_graph_cache": False,
        }
    ):
        torch._inductor.aoti_compile_and_package(ep, package_path=str(package))
    return Built(package, the_pass, after.seen, eager)


def _generated_sources(package: Path) -> dict[str, str]:
    """The generated C++ and JSON the package holds (``*.wrapper.cpp``,
    ``*.kernel.cpp``, and ``*.wrapper.json``: the custom-op calls the wrapper
    makes through the proxy executor)."""
    with zipfile.ZipFile(package) as z:
        return {
            n: z.read(n).decode("utf-8", "replace")
            for n in z.namelist()
            if n.endswith((".cpp", ".json")) and "/aotinductor/" in n
        }


def _extern_calls(sources: dict[str, str]) -> dict[str, dict[str, str]]:
    """Per custom op the wrapper calls: argument name -> the buffer passed."""
    (wrapper,) = [text for name, text in sources.items() if name.endswith(".wrapper.json")]
    calls: dict[str, dict[str, str]] = {}
    for entry in json.loads(wrapper)["nodes"]:
        node = entry["node"]
        assert node["target"] not in calls, node["target"]
        calls[node["target"]] = {i["name"]: i["arg"]["as_tensor"]["name"] for i in node["inputs"]}
    return calls


def _check(built: Built, token_counts: list[int]) -> None:
    report = built.pass_.last_report
    assert report is not None, "fxrewrite never ran"
    assert report.found == 4 and report.reinplaced == 4, report.summary()
    assert not report.left and not report.clones, report.summary()
    assert report.writebacks_removed == 2, report.summary()  # `res` and the buffer `cache`
    # What reached lowering, right after fxrewrite: the authoritative check.
    assert built.reaching_lowering == [0], built.reaching_lowering

    sources = _generated_sources(built.package)
    assert any(n.endswith(".wrapper.cpp") for n in sources), sorted(sources)
    assert not any("auto_functionalized" in text for text in sources.values())
    calls = _extern_calls(sources)
    assert set(calls) == {f"fxr_aoti::{op}" for op in ("add_norm_", "rot_", "write_rows_", "add_into")}
    # The caller's `res` and the module's `cache` are written in place, not a copy of them.
    assert not calls["fxr_aoti::add_norm_"]["res"].startswith("buf"), calls
    assert calls["fxr_aoti::write_rows_"]["cache"] == "cache", calls

    loaded = torch._inductor.aoti_load_package(str(built.package))
    # Two calls per shape: the second reads the buffer the first wrote.
    for seed, tokens in enumerate(token_counts + token_counts):
        x, res = aoti_model.inputs(tokens, seed)
        x_eager, res_eager = x.clone(), res.clone()
        expected = built.eager(x_eager, res_eager)
        got = loaded(x, res)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(res, res_eager, rtol=1e-5, atol=1e-5)  # the user-input mutation
        torch.testing.assert_close(x, x_eager)  # not mutated, in either


def test_aoti_static(tmp_path: Path) -> None:
    built = _build(tmp_path, dynamic=False)
    _check(built, [6])
    _check_cli_agrees(built, tmp_path)


def test_aoti_dynamic_tokens(tmp_path: Path) -> None:
    _check(_build(tmp_path, dynamic=True), [3, 6, aoti_model.MAX_TOKENS])


def _check_cli_agrees(built: Built, tmp_path: Path) -> None:
    """`fxrewrite inspect` / `explain` on the `torch.export.save` archive of
    the same program report what AOTInductor + fxrewrite did: the mutated
    input and buffer are write-backs, so no clone."""
    from test_cli import run

    ep = torch.export.export(aoti_model.Block(), aoti_model.inputs(6))
    archive = tmp_path / "block.pt2"
    torch.export.save(ep, str(archive))
    (row,) = json.loads(run("inspect", "--json", "--import", "aoti_model", str(archive)).stdout)
    report = built.pass_.last_report
    assert report is not None
    assert row["would"]["clones"] == len(report.clones) == 0
    assert row["would"]["reinplace"] == report.reinplaced == 4
    assert row["would"]["leave"] == len(report.left) == 0
    assert row["would"]["remove_writebacks"] == report.writebacks_removed == 2
    explained = json.loads(run("explain", "--json", "--import", "aoti_model", str(archive)).stdout)
    assert sorted((d["op"], d["action"], len(d["clones"])) for d in explained) == sorted(
        (d.op, d.action, len(d.clones)) for d in report.decisions
    )
    # The AOTInductor package itself holds compiled code, no graph: one clear error.
    err = run("inspect", "--import", "aoti_model", str(built.package), check_rc=2).stderr
    assert "an AOTInductor package" in err and "torch.export.save archive" in err, err
