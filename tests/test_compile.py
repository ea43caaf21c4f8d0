"""Real torch.compile runs with fxrewrite installed: values and input
mutations against eager, the rewritten graph, and the clones kept."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import fake_meta
import fxrewrite
import layouts
from conftest import compile_and_compare
from programs import PROGRAMS


def test_out_buffer_on_intermediate_is_reinplaced(v2):
    def f(a, b):
        out = torch.empty_like(a)
        torch.ops.fxr_test.add_into(out, a, b)
        return out * 2

    r = compile_and_compare(f, torch.randn(4, 8), torch.randn(4, 8), v2=v2).report
    assert (r.found, r.reinplaced, len(r.clones)) == (1, 1, 0)


def test_graph_input_written_back_is_mutated_in_place(v2):
    def f(x, res, w):
        torch.ops.fxr_test.fused_add_(x, res, w)
        return x + 1

    c = compile_and_compare(f, torch.randn(4, 8), torch.randn(4, 8), torch.randn(8), v2=v2)
    assert c.report.reinplaced == 1 and not c.report.clones
    assert c.report.writebacks_removed == 2


def test_input_not_written_back_is_cloned():
    # remove_noop_ops deletes the user's clone, so the op reaches us as a
    # mutation of the input x, which the program never mutates.
    def f(x):
        y = x.clone()
        torch.ops.fxr_test.scale_(y, 3.0)
        return y

    c = compile_and_compare(f, torch.randn(4, 8))
    assert c.report.cloned == 1
    (note,) = c.report.clones
    assert "not written back" in note.reason


def test_later_reader_that_cannot_move_forces_a_clone(v2):
    def f(x):
        y = x * 2
        torch.ops.fxr_test.scale_(y, 3.0)
        return y, y.sum()

    def g(x):
        y = x * 2
        z = y.clone()
        torch.ops.fxr_test.scale_(z, 3.0)
        return z, y  # the old value is a graph output: it cannot move

    compile_and_compare(f, torch.randn(4, 8), v2=v2)
    c = compile_and_compare(g, torch.randn(4, 8), v2=v2)
    assert len(c.report.clones) == 1
    assert c.report.clones[0].reader == "output"


def test_reader_of_old_value_is_moved_instead_of_cloned(v2):
    def f(x):
        y = x * 2
        z = y.clone()
        torch.ops.fxr_test.scale_(z, 3.0)
        return z + y.sum(0)  # y.sum(0) only needs y: it can run first

    c = compile_and_compare(f, torch.randn(4, 8), v2=v2)
    assert c.report.clones == [] and c.report.moved >= 1


def test_rotary_on_split_qkv_needs_no_clone(v2):
    def f(x, w, c):
        qkv = x @ w
        q, k, v = qkv.split([4, 4, 8], dim=-1)
        torch.ops.fxr_test.rot_(q, k, c)
        return qkv, v

    r = compile_and_compare(f, torch.randn(3, 16), torch.randn(16, 16), torch.randn(3, 4), v2=v2).report
    assert r.reinplaced == 1 and r.clones == []
    if not v2:
        assert r.decisions[0].scatters_removed == 2


def test_two_mutations_of_different_views_of_one_buffer(v2):
    # Inductor (torch 2.13, v1) returned uninitialised memory for this program.
    def f(x):
        y = x * 2
        torch.ops.fxr_test.scale_(y[0], 2.0)
        torch.ops.fxr_test.scale_(y[1], 3.0)
        return y

    r = compile_and_compare(f, torch.randn(3, 8), v2=v2).report
    assert r.found == 2 and r.clones == []


def test_op_with_return_value_and_optional_and_list_args(v2):
    def f(x, y):
        a = x * 2
        s = torch.ops.fxr_test.acc_sum(a, y)
        b, c = x * 3, y * 3
        torch.ops.fxr_test.maybe_(b, None)
        torch.ops.fxr_test.maybe_(b, c)
        torch.ops.fxr_test.list_scale_([b, c], 0.5)
        return s, a, b, c

    r = compile_and_compare(f, torch.randn(4, 8), torch.randn(4, 8), v2=v2).report
    assert r.left == [] and r.found == 4


def test_chain_of_mutations_on_graph_input(v2):
    def f(x, res, w):
        for _ in range(3):
            torch.ops.fxr_test.fused_add_(x, res, w)
        return x.sum()

    r = compile_and_compare(f, torch.randn(4, 8), torch.randn(4, 8), torch.randn(8), v2=v2).report
    assert r.reinplaced == 3 and r.clones == []


def test_report_and_public_surface():
    assert fxrewrite.pass_.uuid() is not None
    assert fxrewrite.Pass(strict=True).uuid() != fxrewrite.Pass(strict=False).uuid()
    assert issubclass(fxrewrite.InvalidGraphError, fxrewrite.FxrewriteError)


def test_mutation_inside_a_nested_compile_region():
    # Inductor runs post-grad passes, ours included, on each subgraph.
    @torch.compiler.nested_compile_region
    def block(x, w):
        y = x @ w
        out = torch.empty_like(y)
        torch.ops.fxr_test.add_into(out, y, x)
        return out

    def f(x, w):
        return block(x, w) + block(x * 2, w)

    c = compile_and_compare(f, torch.randn(4, 4), torch.randn(4, 4))
    assert sum(r.reinplaced for r in c.capture.reports) == 1


@torch.library.custom_op("fxr_test::quant_e8m0", mutates_args=("out", "scale"))
def quant_e8m0(out: torch.Tensor, scale: torch.Tensor, x: torch.Tensor) -> None:
    scale.copy_(x.abs().amax(-1, keepdim=True).clamp(min=1e-8).to(torch.float8_e8m0fnu))
    out.copy_(x / scale.float())


def test_float8_e8m0fnu_scale_buffers_are_rewritten(v2):
    # Inductor's pattern-matcher-based decomposition skipped such nodes,
    # leaving an auto_functionalized node that CUDA-graph capture rejects.
    def f(x):
        out = torch.empty_like(x)
        scale = torch.empty(x.shape[0], 1, dtype=torch.float8_e8m0fnu)
        torch.ops.fxr_test.quant_e8m0(out, scale, x)
        return out, scale.float()

    r = compile_and_compare(f, torch.randn(4, 8), v2=v2).report
    assert r.reinplaced == 1


# torch.Tag.out is newer than torch 2.11 (and 2.8). Without it the operator
# is defined untagged, and that torch cannot functionalize it at all (a
# custom operator returning an alias of its input: "Found a custom (non-ATen)
# operator whose output has alias annotations"): nothing for the pass to do.
OUT_TAG = getattr(torch.Tag, "out", None)
torch.library.define(
    "fxr_test::mk_out",
    "(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
    tags=() if OUT_TAG is None else (OUT_TAG,),
)


@torch.library.impl("fxr_test::mk_out", "CompositeExplicitAutograd")
def _mk_out(x, *, out):
    out.copy_(x.sin())
    return out


@torch.library.register_fake("fxr_test::mk_out")
def _mk_out_fake(x, *, out):
    return out


@pytest.mark.skipif(OUT_TAG is None, reason="torch.Tag.out is newer than this torch")
def test_out_tagged_operator_gets_a_fresh_buffer():
    def f(x):
        out = torch.empty_like(x)
        y = torch.ops.fxr_test.mk_out(x, out=out)
        return y * 2, out + 1

    r = compile_and_compare(f, torch.randn(4, 8)).report
    assert r.found == 1 and r.reinplaced == 1
    assert r.decisions[0].rule == "out_buffers_v2"


def test_list_form_of_the_custom_post_pass_and_compose():
    seen = []

    class Mine(torch._inductor.custom_graph_pass.CustomGraphPass):
        def __call__(self, graph):
            seen.append(fxrewrite.encode.count_auto_functionalized(graph))

        def uuid(self):
            return "mine-1"

    def f(a, b):
        out = torch.empty_like(a)
        torch.ops.fxr_test.add_into(out, a, b)
        return out * 2

    a, b = torch.randn(4, 8), torch.randn(4, 8)
    ours = fxrewrite.Pass(strict=True)
    # The list form is newer than torch 2.11 (its Inductor calls the hook as
    # one callable): there compose() is the way, so that is what runs.
    hooks = [Mine(), ours]
    if not hasattr(torch._inductor.custom_graph_pass, "get_custom_graph_passes"):
        hooks = fxrewrite.compose(*hooks)
    torch._dynamo.reset()
    with torch._inductor.config.patch({"post_grad_custom_post_pass": hooks, "fx_graph_cache": False}):
        torch.testing.assert_close(torch.compile(f)(a, b), f(a, b))
    assert seen == [1] and ours.last_report is not None and ours.last_report.reinplaced == 1
    composed = fxrewrite.compose(Mine(), ours)
    assert composed.uuid() is not None and composed.uuid() != fxrewrite.compose(ours).uuid()
    assert fxrewrite.compose(lambda g: None, ours).uuid() is None
    torch._dynamo.reset()
    with torch._inductor.config.patch({"post_grad_custom_post_pass": composed, "fx_graph_cache": False}):
        torch.testing.assert_close(torch.compile(f)(a, b), f(a, b))
    assert seen == [1, 1]


def test_lite_mode_runs_no_post_grad_pass():
    # docs/usage.md, "Inductor's lite mode": mode="lite" turns the post-grad passes
    # off, the custom one among them. The v1 form still compiles: Inductor
    # runs auto_functionalized as a fallback kernel (cloning what it writes).
    if "lite" not in torch._inductor.list_mode_options():
        pytest.skip("this torch has no lite mode")

    def f(x, res, w):
        torch.ops.fxr_test.fused_add_(x, res, w)
        return x + 1

    args = [torch.randn(4, 8), torch.randn(4, 8), torch.randn(8)]
    eager_args = [a.clone() for a in args]
    expected = f(*eager_args)
    ours = fxrewrite.Pass(strict=True)
    torch._dynamo.reset()
    patch = {
        "post_grad_custom_post_pass": ours,
        "fx_graph_cache": False,
        "enable_auto_functionalized_v2": False,
    }
    with torch._inductor.config.patch(patch):
        got = torch.compile(f, mode="lite")(*args)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(args, eager_args)
    assert ours.reports == [] and ours.last_report is None


def test_strict_mode_from_the_environment(monkeypatch):
    monkeypatch.setenv("FXREWRITE_STRICT", "1")
    assert fxrewrite.Pass()._strict() is True
    assert fxrewrite.Pass().uuid() == fxrewrite.Pass(strict=True).uuid()
    monkeypatch.setenv("FXREWRITE_STRICT", "0")
    assert fxrewrite.Pass()._strict() is False


def test_reader_of_a_graph_input_moves_before_its_mutation(v2):
    # Found by the random-program suite: moving `x.clone().t()` ahead of the
    # in-place write of the input x gives a correct FX graph, but Inductor
    # computes the moved reader lazily, after the write, unless the pass marks
    # it to be computed where it stands (as it does for every reader before
    # an in-place write). Then no clone is needed.
    def f(x):
        v = x.clone().transpose(0, 1)
        torch.ops.fxr_test.scale_(x, 2.0)
        return v + 1

    r = compile_and_compare(f, torch.randn(4, 8), v2=v2).report
    # torch 2.13 keeps `clone` and `transpose` apart where 2.15 fuses them
    # into one reader: one or two readers move, never a clone.
    assert r.moved >= 1 and r.clones == [] and r.realized >= 1


# Readers of an old value that the pass moves ahead of the mutation, each with
# later users of several kinds. Inductor computes a pointwise or reduction node
# lazily inside its first user's kernel; without the pass marking the moved
# reader to be computed where it stands, every one of these read the new value.
_OLD_VALUE_READERS = {
    "pointwise": lambda x: x + 0.5,
    "reduction": lambda x: x.sum(0),
    "transpose copy": lambda x: x.t().contiguous(),
    "dtype cast": lambda x: x.to(torch.float64),
    "reshape copy": lambda x: x.t().reshape(-1),
}


@pytest.mark.parametrize("reader", sorted(_OLD_VALUE_READERS))
def test_moved_reader_is_computed_before_the_mutation(v2, reader):
    read = _OLD_VALUE_READERS[reader]

    def f(a):
        x = a * 2
        r = read(x)
        torch.ops.fxr_test.scale_(x, 3.0)
        rf = r.float()
        return r.view(-1), rf + 1, torch.stack([rf, rf]), rf[:1], x

    c = compile_and_compare(f, torch.randn(4, 8), v2=v2)
    assert c.report.moved >= 1 and c.report.clones == []
    assert c.report.realized >= 1


@torch.library.custom_op("fxr_test::strided_scale_", mutates_args=("x",))
def strided_scale_(x: torch.Tensor, stride: list[int], offset: int) -> None:
    # Like a real kernel, it addresses memory by the strides it receives, so
    # it insists on the layout eager passes (size-1 dimension included).
    assert list(x.stride()) == stride and x.storage_offset() == offset, (x.stride(), x.storage_offset())
    x.mul_(2)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_clone_keeps_the_exact_layout_of_a_size_one_view(v2, dynamic):
    # The MLA `k_pe` shape: [T, 1, 64] cut from a wider buffer. The old value
    # of the buffer is returned, so the pass clones it; the kernel then must
    # see eager's strides (80, 64, 1) and offset 16 on the clone.
    def f(a):
        kv = a * 1.5
        snap = kv.clone()  # removed by Inductor: snap is kv's old value
        k_pe = kv[:, 16:].unsqueeze(1)
        torch.ops.fxr_test.strided_scale_(k_pe, [80, 64, 1], 16)
        return kv, snap

    inputs = [torch.randn(5, 80), torch.randn(7, 80)]
    for a in inputs[: 2 if dynamic else 1]:
        c = compile_and_compare(f, a, v2=v2, dynamic=dynamic)
        assert len(c.report.clones) == 1 and not c.report.left


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_programs_with_symbolic_sizes_leave_no_node(v2, program):
    # Serving engines compile with a symbolic token count: views, clones and
    # write-backs are regenerated with symbolic sizes (strict mode raises on
    # any node left).
    c = compile_and_compare(program.fn, *program.make_inputs(), v2=v2, dynamic=True)
    assert not c.report.left


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_decoder_layer_leaves_no_node(v2, dynamic):
    # Rotary on split qkv, then attention writing two column slices of an
    # output buffer, with a static or a dynamic token count. In the v1 form
    # the output buffer is filled by a chain of slice_scatters into an
    # `empty`, the shape Inductor's slice_scatter_chunking pass (which runs
    # after the custom post pass) rewrites; fxrewrite removes the chain first.
    def layer(x, wqkv, cos, wo):
        qkv = x @ wqkv
        q, k, v = qkv.split([16, 16, 16], dim=-1)
        torch.ops.fxr_test.rot_(q, k, cos)
        out = torch.empty(x.shape[0], 32)
        torch.ops.fxr_test.add_into(out[:, :16], q, v)
        torch.ops.fxr_test.add_into(out[:, 16:], k, v)
        return out @ wo, qkv

    for tokens in (5, 9):
        args = (torch.randn(tokens, 32), torch.randn(32, 48), torch.randn(tokens, 16), torch.randn(32, 32))
        c = compile_and_compare(layer, *args, v2=v2, dynamic=dynamic)
        assert not c.report.left and c.report.clones == []
        if not v2:
            # q and k into qkv, and the two halves of the output buffer.
            assert sum(d.scatters_removed for d in c.report.decisions) == 4


@torch.compiler.nested_compile_region
def _mutating_region(x, w):
    torch.ops.fxr_test.scale_(x, 2.0)
    return x * w


def test_nested_compile_region_that_mutates_its_argument_is_explained(v2):
    # Called twice, the region stays an `invoke_subgraph`; its mutation of x
    # is an auto_functionalized node around the higher-order operator. The
    # pass rewrites the op inside the region's own graph and leaves the outer
    # node to Inductor, saying why.
    def f(a, w):
        x = a * 1.5
        y = _mutating_region(x, w)
        z = _mutating_region(y, w)
        return y + x + z

    a, w = torch.randn(4, 8), torch.randn(8)
    expected = f(a.clone(), w)
    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch({"fx_graph_cache": False, "enable_auto_functionalized_v2": v2}):
            torch.compile(f)(a.clone(), w)
    except Exception as e:  # torch before 2.15: Inductor alone refuses the program
        if "Found a custom (non-ATen) operator whose output has alias annotations" not in str(e):
            raise
        pytest.skip(
            f"torch {torch.__version__} cannot compile a mutating custom op in a nested_compile_region"
        )
    ours = fxrewrite.Pass()
    torch._dynamo.reset()
    with torch._inductor.config.patch(
        {"post_grad_custom_post_pass": ours, "fx_graph_cache": False, "enable_auto_functionalized_v2": v2}
    ):
        torch.testing.assert_close(torch.compile(f)(a.clone(), w), expected)
    report = ours.last_report
    assert report is not None and report.left
    assert all("invoke_subgraph" in (d.reason or "") for d in report.left)


def _compile_with(fn, args, passes, v2):
    torch._dynamo.reset()
    with torch._inductor.config.patch(
        {**passes, "fx_graph_cache": False, "enable_auto_functionalized_v2": v2}
    ):
        return torch.compile(fn)(*args)


class _MetaCheck(torch._inductor.custom_graph_pass.CustomGraphPass):
    """Runs fxrewrite, then re-runs fake propagation over the whole graph and
    compares: the metadata fxrewrite leaves (which Inductor is told not to
    recompute) must be what propagation gives, aliasing included."""

    def __init__(self) -> None:
        self.checked = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        report = fxrewrite.rewrite(graph, strict=True)
        assert report.found
        gm = graph.owning_module
        assert fake_meta.layout_and_aliasing(gm) == fake_meta.propagated(gm)
        self.checked += 1

    def uuid(self) -> str:
        return "meta-check"


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_metadata_left_by_the_pass_is_what_fake_propagation_gives(v2, program):
    check = _MetaCheck()
    args = program.make_inputs()
    expected = program.fn(*[a.clone() for a in args])
    got = _compile_with(program.fn, [a.clone() for a in args], {"post_grad_custom_post_pass": check}, v2)
    torch.testing.assert_close(got, expected)
    assert check.checked >= 1


def _updater_counts(program, v2: bool, monkeypatch) -> list[int]:
    """Compiles ``program`` with ``fxrewrite.pass_`` and returns what each
    run of Inductor's ``FakeTensorUpdater.incremental_update`` recomputed."""
    from torch._inductor import fx_utils

    counts: list[int] = []
    real = fx_utils.FakeTensorUpdater.incremental_update

    def counted(self):
        # 2.13 and later return how many nodes they recomputed; 2.11 and 2.12
        # return nothing, so the nodes it fetched fake arguments for (one per node
        # it recomputes, and for their users) are counted instead: 0 exactly
        # when it recomputed none.
        fetched = 0
        real_fetch = fx_utils.get_fake_args_kwargs

        def fetch(*args, **kwargs):
            nonlocal fetched
            fetched += 1
            return real_fetch(*args, **kwargs)

        fx_utils.get_fake_args_kwargs = fetch
        try:
            n = real(self)
        finally:
            fx_utils.get_fake_args_kwargs = real_fetch
        counts.append(int(n) if n is not None else fetched)
        return n

    monkeypatch.setattr(fx_utils.FakeTensorUpdater, "incremental_update", counted)
    args = program.make_inputs()
    expected = program.fn(*[a.clone() for a in args])
    got = _compile_with(
        program.fn, [a.clone() for a in args], {"post_grad_custom_post_pass": fxrewrite.pass_}, v2
    )
    torch.testing.assert_close(got, expected)
    return counts


_DECODER_LIKE = [
    p for p in PROGRAMS if p.name in ("residual chain", "rotary on split qkv", "reorderable reader")
]


@pytest.mark.parametrize("program", _DECODER_LIKE, ids=[p.name for p in _DECODER_LIKE])
def test_inductor_recomputes_no_fake_tensor_after_the_pass(v2, program, monkeypatch):
    # The pass tells the running updater which nodes it changed (created,
    # re-pointed) and gives them the values propagation would; the updater
    # then has nothing to redo. Without the mark it recomputes them, and
    # their users.
    assert sum(_updater_counts(program, v2, monkeypatch)) == 0
    import fxrewrite.inductor_pass as ip

    monkeypatch.setattr(ip, "_mark_fake_tensors_current", lambda graph, changed: False)
    assert sum(_updater_counts(program, v2, monkeypatch)) > 0


class _OrderAfterTheCall(torch._inductor.custom_graph_pass.CustomGraphPass):
    """Wraps the first `mul` after the auto_functionalized node in Inductor's
    `control_deps` with the node as an ordering dependency (what Inductor's
    ordering passes and stream code produce), then runs fxrewrite."""

    def __init__(self) -> None:
        self.report: fxrewrite.Report | None = None
        self.deps: list[torch.fx.Node] = []

    def __call__(self, graph: torch.fx.Graph) -> None:
        from torch._inductor.fx_passes.control_dependencies import control_deps, preserve_node_ordering
        from torch.utils._ordered_set import OrderedSet

        from fxrewrite.encode import is_auto_functionalized

        af = next(n for n in graph.nodes if is_auto_functionalized(n))
        later = next(n for n in graph.nodes if n.target is torch.ops.aten.mul.Tensor and n > af)
        preserve_node_ordering(graph, {later: OrderedSet([af])})
        self.report = fxrewrite.rewrite(graph, strict=True)
        (wrapped,) = graph.find_nodes(op="call_function", target=control_deps)
        self.deps = list(wrapped.args[0])

    def uuid(self) -> str:
        return "order-after-the-call"


def test_control_deps_ordered_after_the_call_depend_on_the_written_buffer(v2):
    # vLLM's pass crashes here ("still had N users"); Inductor's ordering
    # dependency on the auto_functionalized node moves to the buffer the
    # in-place call writes, which orders it after the call.
    def f(a, b):
        y = a * 2
        torch.ops.fxr_test.scale_(y, 3.0)
        z = b * 5
        return y + 1, z

    a, b = torch.randn(4, 8), torch.randn(4, 8)
    expected = f(a, b)
    p = _OrderAfterTheCall()
    torch.testing.assert_close(_compile_with(f, (a, b), {"post_grad_custom_post_pass": p}, v2), expected)
    assert p.report is not None and p.report.reinplaced == 1
    (dep,) = p.deps
    assert dep.target is torch.ops.aten.mul.Tensor  # y's buffer, written in place


# ---------------------------------------------------------------------------
# Clones must keep the exact layout of the value they stand for: kernels read
# raw strides (size-1 and size-0 dims included). `fxr_test::strided_`
# reports the layouts it is called with; `compile_and_compare` fails when
# they differ from eager's.


def _k_pe_cut_from_kv(h, w, c):
    # k_pe: [T, 1, 64] cut from the [T, 3, 64] kv buffer (stride (192, 64, 1), offset 128).
    kv = (h @ w).view(-1, 3, 64)
    kv2 = kv.clone()  # removed by remove_noop_ops: the op then writes kv itself
    torch.ops.fxr_test.strided_(kv2[:, 2:3, :], c, 0)
    return kv2 * 2 + kv  # reads the new and the old kv in one node: it cannot move, kv is cloned


def _k_pe_contiguous(h, w, c):
    # k_pe: a contiguous [T, 1, 64] intermediate (stride (64, 64, 1)).
    k_pe = (h @ w).view(-1, 1, 64)
    k2 = k_pe.clone()
    torch.ops.fxr_test.strided_(k2, c, 0)
    return k2 * 2 + k_pe


def _k_pe_empty(h, w, c):
    # An empty [T, 0, 64] slice of kv (stride (192, 64, 1), offset 192): the
    # write changes nothing, so kv needs no clone where that is provable.
    kv = (h @ w).view(-1, 3, 64)
    kv2 = kv.clone()
    torch.ops.fxr_test.strided_(kv2[:, 3:3, :], c[:, :0], 0)
    return kv2 * 2 + kv


def _k_pe_nested_cut(h, w, c):
    # A select of a slice of kv, unsqueezed: v1 writes it back through a
    # select_scatter into a slice_scatter. Under dynamic=True its storage
    # offset is symbolic: the clone is cut from a copy of kv again.
    kv = (h @ w).view(-1, 3, 64)
    kv2 = kv.clone()
    torch.ops.fxr_test.strided_(kv2[:, 1:3, :].select(1, 1).unsqueeze(1), c, 0)
    return kv2 * 2 + kv


def _k_pe_cut_through_transpose(h, w, c):
    # The same cut through a transpose and back (permute nodes in the graph).
    kv = (h @ w).view(-1, 3, 64)
    kv2 = kv.clone()
    torch.ops.fxr_test.strided_(kv2.transpose(0, 1)[2:3].transpose(0, 1), c, 0)
    return kv2 * 2 + kv


def _layout_cases():
    fns = {
        "cut": _k_pe_cut_from_kv,
        "contiguous": _k_pe_contiguous,
        "empty": _k_pe_empty,
        "nested": _k_pe_nested_cut,
        "transposed": _k_pe_cut_through_transpose,
    }
    for name, fn in fns.items():
        for form in ("v2", "v1"):
            for dyn in ("static", "dynamic", "tokens"):
                yield pytest.param(fn, form == "v2", dyn, id=f"{name}-{form}-{dyn}")


@pytest.mark.parametrize(("fn", "v2", "dynamic"), list(_layout_cases()))
def test_clone_keeps_the_layout_a_stride_reading_kernel_sees(fn, v2, dynamic):
    # dynamic: "static"; "dynamic" (torch.compile(dynamic=True): every size
    # symbolic, the weight's too); "tokens" (only the token count symbolic,
    # with mark_dynamic, as serving engines compile).
    def inputs(t):
        g = torch.Generator().manual_seed(t)
        width = 192 if fn is not _k_pe_contiguous else 64
        return (
            torch.randn(t, 16, generator=g),
            torch.randn(16, width, generator=g),
            torch.randn(t, 1, 64, generator=g),
        )

    # Dynamic: one compiled graph, run for two token counts.
    c = compile_and_compare(
        fn,
        *inputs(5),
        v2=v2,
        dynamic=True if dynamic == "dynamic" else None,
        more_inputs=(inputs(7),) if dynamic != "static" else (),
        mark_dynamic=((0, 0), (2, 0)) if dynamic == "tokens" else (),
    )
    # A write into an empty view changes nothing: no clone. (v2 under
    # dynamic=True cuts it with SymInt bounds, `kv[:, s:s + 0]`: equal
    # bounds, an empty view whatever their value.)
    empty = fn is _k_pe_empty
    assert len(c.report.clones) == (0 if empty else 1), c.report.summary()
    if dynamic != "static":
        assert len(c.capture.reports) == 1, "recompiled for the second token count"
    if dynamic == "tokens":
        # Only the token count is symbolic: the clone reads it at run time and
        # nothing else (every other size and every stride a plain int; torch
        # 2.11's Inductor cannot lower a sym_stride of a static dimension).
        def queries(gm: torch.fx.GraphModule) -> Counter[tuple[object, object]]:
            targets = (torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int)
            return Counter((n.target, n.args[1]) for n in gm.graph.nodes if n.target in targets)

        added = queries(c.capture.after[0]) - queries(c.capture.before[0])
        assert all(t is torch.ops.aten.sym_size.int and d == 0 for t, d in added), added


# ---------------------------------------------------------------------------
# A reader of the old value of a written intermediate, used later: Inductor
# computes pointwise and reduction nodes lazily, inside the kernel of their
# first realized user, so the reader must be realized before the in-place
# call (or the old value cloned). Only a full compile shows it.

_READERS = {
    "add": lambda x: x + 0.5,
    "sum0": lambda x: x.sum(0),
    "t_contiguous": lambda x: x.t().contiguous(),
    "to_float64": lambda x: x.to(torch.float64),
    "t_reshape": lambda x: x.t().reshape(-1),
}


def _other_op(r):
    out = torch.empty_like(r)
    torch.ops.fxr_test.add_into(out, r, r)
    return out


_USERS = {
    "view": lambda r: r.view(-1),
    "slice": lambda r: r[1:],
    "mul": lambda r: r * 3,
    "stack": lambda r: torch.stack([r, r]),
    "cat": lambda r: torch.cat([r, r]),
    "other_op": _other_op,
    "return": lambda r: r,
}


def _reader_cases():
    for reader, user in [(r, "view") for r in _READERS] + [("add", u) for u in _USERS if u != "view"]:
        for form in ("v2", "v1"):
            yield pytest.param(reader, user, form == "v2", id=f"{reader}-{user}-{form}")


@pytest.mark.parametrize(("reader", "user", "v2"), list(_reader_cases()))
def test_reader_of_old_value_is_computed_before_the_in_place_call(reader, user, v2):
    read, use = _READERS[reader], _USERS[user]

    def f(a):
        x = a * 2
        r = read(x)
        torch.ops.fxr_test.bump_(x)
        return use(r), x

    compile_and_compare(f, torch.arange(12.0).reshape(3, 4), v2=v2)


def _run_last_call_in_place_on_a_clone(graph: torch.fx.Graph) -> None:
    """A user pass before fxrewrite: the last v1 auto_functionalized node
    becomes `c = clone(x); scale_(c, s)` (Inductor's own decomposition of
    it), so an in-place write stands in the middle of the graph when
    fxrewrite runs."""
    from torch._higher_order_ops.auto_functionalize import auto_functionalized

    af = [n for n in graph.nodes if n.op == "call_function" and n.target is auto_functionalized][-1]
    x = af.kwargs["x"]
    with graph.inserting_before(af):
        c = graph.call_function(torch.ops.aten.clone.default, (x,))
        graph.call_function(af.args[0], (), {**af.kwargs, "x": c})
    fake_mode = x.meta["val"].fake_mode
    with fake_mode:
        c.meta["val"] = torch.ops.aten.clone.default(x.meta["val"])
    for user in list(af.users):
        assert user.args[1] == 1
        user.replace_all_uses_with(c)
        graph.erase_node(user)
    graph.erase_node(af)


def test_a_reader_is_not_moved_across_an_in_place_write_in_a_full_compile():
    # `b + a` reads the old value of `b` (the clone of `b` that remove_noop_ops
    # drops makes scale_ write `b` itself) and the value the user pass's
    # in-place scale_ writes into its clone of `a`. Moved ahead of the first
    # call it would also come before that write: fxrewrite clones `b`
    # instead, and the compiled program still matches eager.
    # The first call is a kernel that reads raw strides (of the transposed
    # `b` it writes in place): it must see eager's layout too.
    def f(x):
        b = (x * 3).t()
        c0 = b.clone()
        torch.ops.fxr_test.strided_(c0, x.t(), 0)
        a = x.t() * 2
        torch.ops.fxr_test.scale_(a, 5.0)
        return c0, b + a

    x = torch.randn(4, 8)
    with layouts.record():
        expected = f(x)
    ours = fxrewrite.Pass(strict=True)
    passes = {"post_grad_custom_post_pass": fxrewrite.compose(_run_last_call_in_place_on_a_clone, ours)}
    with layouts.check() as seen:
        got = _compile_with(f, (x,), passes, v2=False)
    torch.testing.assert_close(got, expected)
    assert seen.checked == 2 and seen.report() is None, seen.report()
    report = ours.last_report
    assert report is not None and report.found == 1
    assert not report.decisions[0].moved and len(report.clones) == 1


# ----- what the report says agrees with explain (issue 34) ----------------------------------


def test_the_summary_counts_the_write_backs_explain_lists(tmp_path):
    """MLA rotary in v1: the write-back scatters of the rotary's two views
    are removed, which ``explain`` lists per node; the summary's count is
    theirs plus the input ``copy_`` write-backs, never 0 beside them."""
    import json

    from test_cli import run

    prog = next(p for p in PROGRAMS if p.name.startswith("MLA rotary"))
    c = compile_and_compare(prog.fn, *prog.make_inputs(), v2=False)
    r = c.report
    assert r.scatters_removed >= 2, r.summary()
    assert f"{r.scatters_removed + r.writebacks_removed} write-backs removed" in r.summary()
    saved = tmp_path / "mla.fxir"
    fxrewrite.save(c.capture.before[0], saved)
    decisions = json.loads(run("explain", "--json", str(saved)).stdout)
    assert sum(d["scatters_removed"] for d in decisions) == r.scatters_removed


def test_a_clone_of_symbolic_size_is_never_zero_bytes():
    """The unmovable reader needs a clone; compiled with a dynamic token
    count its size is symbolic: the report gives it as an expression and as
    a number at the traced sizes, and the summary says so."""
    prog = next(p for p in PROGRAMS if p.name == "unmovable reader")
    (x,) = prog.make_inputs()
    c = compile_and_compare(prog.fn, x, dynamic=True, more_inputs=((torch.randn(6, 8),),))
    (clone,) = c.report.clones
    assert clone.bytes is None and clone.bytes_expr and clone.bytes_at_trace == x.numel() * 4, clone
    assert any(ch.isalpha() for ch in clone.bytes_expr), clone.bytes_expr  # a symbol, not a number
    s = c.report.summary()
    assert (
        "0 bytes)" not in s and clone.bytes_expr in s and f", {x.numel() * 4} bytes at the traced sizes" in s
    )


def test_clone_sizes_in_words_with_and_without_the_live_graph():
    from fxrewrite.report import CloneNote, Decision, Report

    def report(*clones: CloneNote) -> Report:
        return Report(
            decisions=[Decision("af", "ns::op", "v1", "reinplace_v1", "cloned", clones=list(clones))]
        )

    assert report(CloneNote("x", "r", bytes=64)).clone_sizes() == "64 bytes"
    # A saved graph has no symbols to name: the size is said to be symbolic, not 0.
    assert (
        report(CloneNote("x", "r", bytes=64), CloneNote("y", "r")).clone_sizes()
        == "64 bytes + 1 of symbolic size"
    )
    live = CloneNote("y", "r", bytes_expr="4*s0", bytes_at_trace=32)
    assert [c.size_text() for c in (CloneNote("x", "r", bytes=64), live, CloneNote("z", "r"))] == [
        "64 bytes",
        "4*s0 bytes (32 at the traced sizes)",
        "symbolic size",
    ]
    assert report(CloneNote("x", "r", bytes=64), live).clone_sizes() == (
        "64 bytes + 4*s0 bytes, 96 bytes at the traced sizes"
    )
