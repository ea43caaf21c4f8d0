"""The pass never harms a compile: unknown forms are left alone and reported,
failures leave the graph exactly as it was, missing metadata only costs
precision, and concurrent compiles give the same results."""

from __future__ import annotations

import copy
import json
import logging
import threading
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch._inductor import config as inductor_config

import fxrewrite
import fxrewrite.fx_meta as fx_meta
from conftest import Capture
from fxrewrite.encode import is_auto_functionalized
from fxrewrite.fxir import read_native


def _post_grad_graph(fn, *inputs, v2=True) -> torch.fx.GraphModule:
    cap = Capture(use_fxrewrite=False)
    torch._dynamo.reset()
    with inductor_config.patch(
        {"post_grad_custom_post_pass": cap, "fx_graph_cache": False, "enable_auto_functionalized_v2": v2}
    ):
        torch.compile(fn, fullgraph=True)(*[i.clone() for i in inputs])
    return cap.before[0]


def _program(x, res, w):
    y = x * 2
    out = torch.empty_like(y)
    torch.ops.fxr_test.add_into(out, y, w)
    torch.ops.fxr_test.fused_add_(x, res, w)
    return out + y.sum(0)


def _program_with_realize(x, res, w):
    # `r` reads `y` before bump_ writes it: a realize mark, an in-place
    # call, then a second call.
    y = x * 2
    r = y + 0.5
    torch.ops.fxr_test.bump_(y)
    out = torch.empty_like(y)
    torch.ops.fxr_test.add_into(out, r, w)
    return out, y


def _program_needing_a_clone(x, res, w):
    # Inductor's remove_noop_ops drops the clone: bump_ then writes `y`'s
    # memory, whose old value is returned, so fxrewrite clones it.
    y = x * 2
    c = y.clone()
    torch.ops.fxr_test.bump_(c)
    return c, y


# All one shape: the post-grad placeholders may come in another order than the
# Python arguments, and before-vs-after comparisons feed both the same inputs.
INPUTS = (torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8))


def _run(gm: torch.fx.GraphModule, inputs):
    args = [i.clone() for i in inputs]
    out = torch.fx.Interpreter(gm).run(*args)
    return out, args


def test_unknown_auto_functionalized_argument_is_left_and_reported(caplog):
    gm = _post_grad_graph(_program, *INPUTS)
    af = next(n for n in gm.graph.nodes if is_auto_functionalized(n))
    af.kwargs = {**af.kwargs, "_from_a_newer_torch": 1}
    with caplog.at_level(logging.WARNING, logger="fxrewrite"):
        report = fxrewrite.rewrite(gm.graph)
    (left,) = report.left
    assert "_from_a_newer_torch" in (left.reason or "")
    assert any("_from_a_newer_torch" in r.getMessage() for r in caplog.records)
    assert report.reinplaced == 1  # the other node is still rewritten
    with pytest.raises(fxrewrite.UnsupportedGraphError, match="_from_a_newer_torch") as err:
        fxrewrite.rewrite(copy.deepcopy(gm.graph), strict=True)
    assert err.value.kind == "unsupported"
    assert f"cannot rewrite {af.name} (fxr_test::" in str(err.value)
    assert (err.value.node, err.value.offset) == (af.name, None)
    assert err.value.op is not None and err.value.op.startswith("fxr_test::")


_HOOKS = ("compute", "eager_input_vals")


def _count_hooks(monkeypatch, fail_at: int | None = None) -> dict[str, int]:
    """Counts the FX editor's calls into ``fx_meta`` (one or two per node it
    creates, made right after creating it) and makes the ``fail_at``-th
    raise."""
    calls = {"n": 0}
    for name in _HOOKS:
        real = getattr(fx_meta, name)

        def hook(*args, _real=real):
            calls["n"] += 1
            if calls["n"] == fail_at:
                raise RuntimeError("injected failure")
            return _real(*args)

        monkeypatch.setattr(fx_meta, name, hook)
    return calls


@pytest.mark.parametrize("fail_at", [1, 2])
def test_a_failure_midway_leaves_the_graph_exactly_as_it_was(monkeypatch, caplog, fail_at):
    # Inserted nodes, re-pointed users and realize marks made before the
    # failure are all undone by the one applier's rollback.
    gm = _post_grad_graph(_program_with_realize, *INPUTS)
    probe = copy.deepcopy(gm)
    with monkeypatch.context() as m:
        counted = _count_hooks(m)
        report = fxrewrite.rewrite(probe.graph, strict=True)
    assert counted["n"] == 2 and report.realized == 1, (counted, report.summary())

    before = str(gm.graph)
    metas = [(n.name, set(n.meta)) for n in gm.graph.nodes]
    with monkeypatch.context() as m:
        _count_hooks(m, fail_at)
        with caplog.at_level(logging.WARNING, logger="fxrewrite"):
            report = fxrewrite.rewrite(gm.graph)
    assert report.error and "InternalError" in report.error and "injected failure" in report.error
    assert str(gm.graph) == before
    assert [(n.name, set(n.meta)) for n in gm.graph.nodes] == metas
    gm.graph.lint()
    with monkeypatch.context() as m:
        _count_hooks(m, fail_at)
        with pytest.raises(fxrewrite.InternalError, match="injected failure"):
            fxrewrite.rewrite(gm.graph, strict=True)
    assert str(gm.graph) == before


def test_an_inserted_node_that_fails_on_fake_values_rolls_the_rewrite_back(monkeypatch, caplog):
    # A node the rewrite inserts must run on the fake values of its inputs
    # (a wrong one, such as an `as_strided` of a list, does not): the graph
    # is left as it was, rather than with a node without `meta['val']` that
    # Inductor's reinplace pass would fail on.
    gm = _post_grad_graph(_program_needing_a_clone, *INPUTS)
    before = str(gm.graph)
    real = fx_meta.fake_call

    def refuse_clones(mode, target, args, kwargs):
        if target is torch.ops.aten.clone.default:
            raise ValueError("refused")
        return real(mode, target, args, kwargs)

    probe = copy.deepcopy(gm)
    assert fxrewrite.rewrite(probe.graph, strict=True).clones, "the program must need a clone"
    monkeypatch.setattr(fx_meta, "fake_call", refuse_clones)
    with caplog.at_level(logging.WARNING, logger="fxrewrite"):
        report = fxrewrite.rewrite(gm.graph)
    assert report.error and "does not run on fake values" in report.error and "refused" in report.error
    assert str(gm.graph) == before
    assert any("left the graph untouched" in r.getMessage() for r in caplog.records)
    with pytest.raises(fxrewrite.FxrewriteError, match="does not run on fake values"):
        fxrewrite.rewrite(gm.graph, strict=True)
    assert str(gm.graph) == before


def _program_with_a_view_of_the_result(x, res, w):
    # The transpose views bump_'s result: re-pointed to `y`, its fake value
    # is recomputed on `y`'s.
    y = x * 2
    torch.ops.fxr_test.bump_(y)
    return y.t() + 1


def test_a_view_that_fails_on_its_new_input_rolls_the_rewrite_back(monkeypatch):
    gm = _post_grad_graph(_program_with_a_view_of_the_result, *INPUTS)
    before = str(gm.graph)
    vals = {n.name: n.meta.get("val") for n in gm.graph.nodes}
    real_fake_call, real_refresh = fx_meta.fake_call, fx_meta.refresh_views
    refreshing = {"on": False, "calls": 0}

    def fake_call(mode, target, args, kwargs):
        if refreshing["on"]:
            refreshing["calls"] += 1
            if refreshing.get("fail"):
                raise ValueError("refused")
        return real_fake_call(mode, target, args, kwargs)

    def refresh(repointed, mode):
        refreshing["on"] = True
        try:
            real_refresh(repointed, mode)
        finally:
            refreshing["on"] = False

    monkeypatch.setattr(fx_meta, "fake_call", fake_call)
    monkeypatch.setattr(fx_meta, "refresh_views", refresh)
    probe = copy.deepcopy(gm)
    assert fxrewrite.rewrite(probe.graph, strict=True).reinplaced == 1
    assert refreshing["calls"] >= 1, "the program must have a view to refresh"

    refreshing["fail"] = True
    report = fxrewrite.rewrite(gm.graph)
    assert report.error and "does not run on its new input" in report.error
    assert str(gm.graph) == before
    assert all(n.meta.get("val") is vals[n.name] for n in gm.graph.nodes)
    gm.graph.lint()


def test_missing_metadata_still_rewrites_correctly():
    gm = _post_grad_graph(_program, *INPUTS)
    expected = _run(gm, INPUTS)
    for n in gm.graph.nodes:
        n.meta.pop("val", None)
        n.meta.pop("stack_trace", None)
    report = fxrewrite.rewrite(gm.graph, strict=True)
    gm.recompile()
    assert report.found == 2 and report.left == []
    got = _run(gm, INPUTS)
    torch.testing.assert_close(got, expected)


def test_rewritten_nodes_keep_metadata():
    gm = _post_grad_graph(_program, *INPUTS)
    old = {n.name for n in gm.graph.nodes}
    fxrewrite.rewrite(gm.graph, strict=True)
    created = [n for n in gm.graph.nodes if n.name not in old]
    assert created
    for n in created:
        assert "stack_trace" in n.meta
        if n.op == "call_function" and n.target._schema.returns:
            assert isinstance(n.meta.get("val"), torch.Tensor)


def _model_a(x):
    out = torch.empty_like(x)
    torch.ops.fxr_test.add_into(out, x, x * 3)
    return out.sin()


def _model_b(x, res, w):
    torch.ops.fxr_test.fused_add_(x, res, w)
    return x.cos() + res


def test_two_threads_compiling_with_the_same_pass():
    torch._dynamo.reset()
    xa, (xb, rb, wb) = torch.randn(8, 8), (torch.randn(4, 8), torch.randn(4, 8), torch.randn(8))
    results: dict[str, object] = {}
    errors: list[BaseException] = []

    def work(name, fn, args):
        try:
            with inductor_config.patch(
                {"post_grad_custom_post_pass": fxrewrite.pass_, "fx_graph_cache": False}
            ):
                cloned = [a.clone() for a in args]
                results[name] = (torch.compile(fn)(*cloned), cloned)
        except BaseException as e:
            errors.append(e)

    threads = [
        threading.Thread(target=work, args=("a", _model_a, (xa,))),
        threading.Thread(target=work, args=("b", _model_b, (xb, rb, wb))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    ea = [xa.clone()]
    eb = [xb.clone(), rb.clone(), wb.clone()]
    torch.testing.assert_close(results["a"], (_model_a(*ea), ea))
    torch.testing.assert_close(results["b"], (_model_b(*eb), eb))


def test_report_goes_to_the_structured_trace(monkeypatch):
    gm = _post_grad_graph(_program, *INPUTS)
    seen = []

    def fake_trace(kind, metadata_fn=None, payload_fn=None, **_kwargs):
        meta = metadata_fn() if metadata_fn else {}
        if meta.get("name") == "fxrewrite_report":
            seen.append((kind, meta, json.loads(payload_fn())))

    monkeypatch.setattr(torch._logging, "trace_structured", fake_trace)
    fxrewrite.Pass(strict=True)(gm.graph)
    ((kind, meta, payload),) = seen
    assert kind == "artifact" and meta["name"] == "fxrewrite_report"
    assert len(payload["decisions"]) == 2


def test_every_error_carries_a_stable_kind(tmp_path):
    # From Rust: the variant's kind on the instance.
    with pytest.raises(fxrewrite.FileFormatError) as rust_err:
        fxrewrite._core.Graph.read(b"not an fxir file")
    assert rust_err.value.kind == "decode"
    # From Python: the class's kind.
    not_zip = tmp_path / "model.pt2"
    not_zip.write_bytes(b"not a zip")
    with pytest.raises(fxrewrite.FileFormatError) as py_err:
        fxrewrite.load(not_zip)
    assert py_err.value.kind == "decode"
    assert fxrewrite.FxrewriteError("x").kind == "error"
    assert fxrewrite.InternalError("x").kind == "internal"


FIXTURES = Path(__file__).parent / "data"


def test_errors_cross_as_one_class_per_kind_with_their_fields():
    # Decoding: a DecodeError (a FileFormatError) at a byte offset.
    with pytest.raises(fxrewrite.DecodeError) as decode:
        fxrewrite._core.Graph.read(b"not an fxir file")
    assert isinstance(decode.value, fxrewrite.FileFormatError)
    assert (decode.value.kind, decode.value.node, decode.value.op, decode.value.offset) == (
        "decode",
        None,
        None,
        0,
    )
    # Another format version (newer than this build's 2): a VersionError,
    # also a FileFormatError, naming both versions.
    header = b"\x89FXIR\r\n\x1a" + (3).to_bytes(4, "little") + bytes(24)
    with pytest.raises(fxrewrite.FileFormatError) as version:
        fxrewrite._core.Graph.read(header)
    assert type(version.value) is fxrewrite.VersionError
    assert (version.value.kind, version.value.offset) == ("version", None)
    assert "version 3" in str(version.value) and "versions 1 to 2" in str(version.value)
    # An invalid graph: the offending node's index.
    targets, nodes = read_native(FIXTURES / "cli_model_v1.fxir").to_parts()
    nodes = list(nodes)
    nodes[3] = (*nodes[3][:2], len(targets) + 7, *nodes[3][3:])
    with pytest.raises(fxrewrite.InvalidGraphError) as invalid:
        fxrewrite._core.Graph.from_parts(targets, nodes)
    assert (invalid.value.kind, invalid.value.node, invalid.value.op) == ("invalid_graph", 3, None)
    # Raised from Python: the class's kind, no fields.
    err = fxrewrite.FxrewriteError("x")
    assert (err.node, err.op, err.offset) == (None, None, None)
    assert fxrewrite.VersionError("x").kind == "version"


def test_a_live_graph_the_reader_cannot_read_is_an_invalid_graph_error():
    """The live-graph reader's refusals are typed like the engine's: an
    argument nested deeper than the IR allows, and an argument naming a
    node that comes after it (a graph out of order)."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    deep: object = x
    for _ in range(40):
        deep = [deep]
    y = g.call_function(torch.ops.aten.clone.default, (x,))
    g.output((y,))
    y.args = (deep,)
    with pytest.raises(fxrewrite.InvalidGraphError, match="nested too deeply") as err:
        fxrewrite._core.Graph.from_fx(g, meta="none", sources=False)
    assert err.value.kind == "invalid_graph"
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(torch.ops.aten.clone.default, (x,))
    b = g.call_function(torch.ops.aten.neg.default, (x,))
    g.output((a, b))
    a.args = (b,)  # `a` now reads `b`, which comes after it
    with pytest.raises(fxrewrite.InvalidGraphError, match="not earlier in the graph"):
        fxrewrite._core.Graph.from_fx(g, meta="none", sources=False)
