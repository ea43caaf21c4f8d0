"""Smoke test of the MoE comparison bench (benches/make_graphs.py, benches/compare.py):
the smallest graph in both forms, every method once, and the rewritten graphs
run against the original on real inputs. No timing assertions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benches"))

import compare
import convert
import make_graphs

LAYERS = 2  # the smallest stitched graph: one layer feeding the next


@pytest.fixture(scope="module", params=[True, False], ids=["v2", "v1"])
def graph(request: pytest.FixtureRequest) -> torch.fx.GraphModule:
    gm, info = make_graphs.build_layers(LAYERS, bool(request.param), fake="propagate")
    assert info.layers == LAYERS
    return gm


def _run(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> tuple[Any, list[torch.Tensor]]:
    args = [t.clone() for t in inputs]
    out = torch.fx.Interpreter(gm).run(*args)
    return out, args


def _af(gm: torch.fx.GraphModule) -> int:
    return compare._af_left(gm.graph)


def test_generator_shapes_the_graph(graph):
    v2 = graph.meta["fxr_bench"]["v2"]
    pat = make_graphs.pattern(v2)
    assert len(graph.graph.nodes) == pat.fixed_nodes + LAYERS * pat.nodes_per_layer
    assert _af(graph) == 1 + LAYERS * sum(1 for n in pat.body if n.target in compare._AF)
    # one KV cache per layer, each a mutated graph input
    writebacks = [n for n in graph.graph.nodes if make_graphs._is_writeback(n)]
    assert len({w.args[0] for w in writebacks}) == LAYERS * len(pat.writebacks)
    # every node has its own fake value: no storage is shared between layers
    storages = {
        make_graphs._storage(n.meta["val"])
        for n in graph.graph.find_nodes(op="placeholder")
        if isinstance(n.meta.get("val"), torch.Tensor)
    }
    assert len(storages) == len(graph.graph.find_nodes(op="placeholder"))
    # the fast replication gives the same values as fake propagation
    replicated, _ = make_graphs.build_layers(LAYERS, v2, fake="replicate", codegen=False)
    assert make_graphs.meta_mismatch(graph.graph, replicated.graph) is None


def test_every_method_runs_and_keeps_semantics(graph):
    pat = make_graphs.pattern(graph.meta["fxr_bench"]["v2"])
    ctx = compare.Context(fake_mode=make_graphs.fake_mode_of(pat.gm.graph))
    after = {}
    extra = {}
    for name in compare.METHODS:
        work = compare._fresh(graph)
        extra[name] = compare.RUNNERS[name](work, ctx)
        work.graph.lint()
        after[name] = work
    assert _af(graph) > 0
    for name in ("fxrewrite", "inductor", "blind", "fxrewrite+update", "blind+update"):
        assert _af(after[name]) == 0, name
    # fxrewrite leaves Inductor's updater nothing to recompute; the blind
    # edits leave it the changed nodes and their users.
    assert extra["fxrewrite+update"]["recomputed"] == 0
    assert extra["blind+update"]["recomputed"] > 0
    fx_clones, fx_bytes = compare._clones(after["fxrewrite"].graph)
    ind_clones, ind_bytes = compare._clones(after["inductor"].graph)
    assert fx_clones <= ind_clones
    assert fx_bytes <= ind_bytes

    inputs = make_graphs.random_inputs(graph, seed=1)
    want_out, want_in = _run(graph, inputs)
    assert any(not torch.equal(a, b) for a, b in zip(inputs, want_in, strict=True)), "no input was mutated"
    for name in ("fxrewrite", "inductor"):
        got_out, got_in = _run(after[name], inputs)
        torch.testing.assert_close(got_out, want_out, msg=lambda m, name=name: f"{name} outputs: {m}")
        for i, (a, b) in enumerate(zip(got_in, want_in, strict=True)):
            torch.testing.assert_close(a, b, msg=lambda m, i=i, name=name: f"{name} input {i}: {m}")


def test_compare_cli_json(capsys):
    assert (
        compare.main(
            ["--sizes", "300", "--forms", "v2", "--repeat", "1", "--json", "--only", "fxrewrite,blind,floor"]
        )
        == 0
    )
    import json

    (row,) = json.loads(capsys.readouterr().out)
    assert row["form"] == "v2" and row["methods"]["fxrewrite"]["af_left"] == 0
    assert set(row["methods"]["fxrewrite"]["split"]) >= {"encode", "engine", "apply", "total"}


def test_convert_bench_runs(capsys):
    assert convert.main(["--sizes", "300", "--forms", "v2,v1", "--repeat", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("native module: _core.") and len(lines) == 4
