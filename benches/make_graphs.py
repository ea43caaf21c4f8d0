"""Post-grad graphs in the shape of MoE decoders, for ``benches/compare.py``.

One decoder layer is: fused add+rms_norm (mutates the hidden state and the
residual), a qkv matmul split into q, k, v with rotary applied in place to
the q and k slices, a KV-cache write into a graph input, attention reading
the cache, a second fused add+rms_norm, top-k softmax routing and
``experts`` unrolled expert MLPs, each a silu_and_mul into an empty buffer.

The real post-grad graph of a 1-layer model is captured from
``torch.compile`` (a ``post_grad_custom_post_pass`` deep-copies it, the FX
graph cache is off). Larger graphs are stitched from ``layers`` copies of
that layer's node pattern with ``graph.node_copy``: every layer gets its own
weights and KV cache (new placeholders) and the hidden state and residual
are threaded from one layer to the next. Fake tensor propagation then gives
every node its own ``meta['val']`` (distinct storages per layer, as in a
real capture). Nothing here is committed: graphs are built at run time.

    python benches/make_graphs.py --nodes 1e4 --form v1    # builds one, prints its size and timings
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import operator
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.fx
from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2

from moe_model import _BODY_FN, _CARRIED, _SHARED_ARGS, NS, Config, MoEDecoder, MoELayer, capture

__all__ = ["NS", "Config", "MoEDecoder", "MoELayer", "capture"]  # re-exported: callers import them from here

_AF = (auto_functionalized, auto_functionalized_v2)
_DEFAULT_CONFIG = Config()  # frozen; one shared default (the functions below cache on it)


# --- the layer pattern and the stitcher ----------------------------------------------------------


def _in_body(n: torch.fx.Node) -> bool:
    trace = n.meta.get("stack_trace") or ""
    return f", in {_BODY_FN}\n" in trace


def _is_writeback(n: torch.fx.Node) -> bool:
    return (
        n.op == "call_function"
        and n.target is torch.ops.aten.copy_.default
        and isinstance(n.args[0], torch.fx.Node)
        and n.args[0].op == "placeholder"
    )


def _is_op(n: torch.fx.Node, op: Any) -> bool:
    return n.op == "call_function" and n.target in _AF and n.args[0] is op


def mutable_arg(n: torch.fx.Node, name: str) -> Any:
    """The value passed for mutable argument ``name`` of an auto_functionalized(_v2)
    node, when it is a whole tensor (not a regenerated view)."""
    if n.target is auto_functionalized:
        return n.kwargs[name]
    view_keys = ("_size", "_stride", "_storage_offset", "_slice_dim", "_alias")
    if any(f"_{name}{k}" in n.kwargs for k in view_keys):
        raise ValueError(f"{n.name}: {name} is a view of its base")
    return n.kwargs["_all_bases"][n.kwargs[f"_{name}_base_index"]]


@dataclass
class Pattern:
    """The captured graph cut into its parts."""

    gm: torch.fx.GraphModule
    placeholders: list[torch.fx.Node]
    per_layer: list[torch.fx.Node]  # weights and KV cache: one copy per layer
    prologue: list[torch.fx.Node]
    body: list[torch.fx.Node]
    epilogue: list[torch.fx.Node]
    writebacks: list[torch.fx.Node]  # copy_(per-layer input, new value): one per layer
    output: torch.fx.Node
    carry: dict[torch.fx.Node, torch.fx.Node]  # layer input -> the layer output that feeds the next

    @property
    def nodes_per_layer(self) -> int:
        return len(self.body) + len(self.writebacks) + len(self.per_layer)

    @property
    def fixed_nodes(self) -> int:
        return len(self.gm.graph.nodes) - self.nodes_per_layer


@functools.lru_cache(maxsize=8)
def pattern(v2: bool, cfg: Config = _DEFAULT_CONFIG) -> Pattern:
    """Cuts the captured 1-layer graph into placeholders, prologue, one layer,
    epilogue and input write-backs, and finds what each layer passes on."""
    gm = capture(v2, cfg)
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    (output,) = [n for n in nodes if n.op == "output"]
    writebacks = [n for n in nodes if _is_writeback(n)]
    wb = set(writebacks)
    traced = {n for n in nodes if n.op == "call_function" and n not in wb and _in_body(n)}
    if not traced:
        raise RuntimeError(f"no node carries a {_BODY_FN} frame: stack traces missing?")
    # Nodes Inductor's pattern passes created carry no stack trace: those
    # between two layer nodes, and untraced ones only the layer reads, belong
    # to the layer too.
    below = set(traced)
    for n in nodes:
        if n not in below and n not in wb and any(i in below for i in n.all_input_nodes):
            below.add(n)
    inside = set(traced)
    for n in reversed(nodes):
        if n in inside or n.op != "call_function" or n in wb or not n.users:
            continue
        feeds = any(u in inside for u in n.users)
        if (feeds and n in below) or (not n.meta.get("stack_trace") and all(u in inside for u in n.users)):
            inside.add(n)
    body = [n for n in nodes if n in inside]
    dependent = set(body)
    prologue, epilogue = [], []
    for n in nodes:
        if n.op in ("placeholder", "output") or n in wb or n in dependent:
            continue
        if any(i in dependent for i in n.all_input_nodes):
            epilogue.append(n)
            dependent.add(n)
        else:
            prologue.append(n)

    norm = torch.ops.fxr_bench.fused_add_rms_norm.default
    first = next(n for n in body if _is_op(n, norm))
    last = next(n for n in reversed(epilogue) if _is_op(n, norm))
    carry = {mutable_arg(first, name): mutable_arg(last, name) for name in _CARRIED}
    body_set = set(body)
    for src, dst in carry.items():
        if dst not in body_set:
            raise RuntimeError(f"carried value {dst.name} is not produced by the layer")
        if [u for u in src.users if u in body_set] != [first]:
            raise RuntimeError(f"carried input {src.name} has other readers in the layer")

    shared = {
        v
        for n in body
        if n.target in _AF
        for k, v in n.kwargs.items()
        if k in _SHARED_ARGS and isinstance(v, torch.fx.Node)
    }
    outside = set(prologue) | set(epilogue) | {output}
    per_layer = [
        p
        for p in placeholders
        if p not in carry
        and p not in shared
        and not any(u in outside for u in p.users)
        and any(u in body_set or u in wb for u in p.users)
    ]
    pl = set(per_layer)
    for w in writebacks:
        if w.args[0] not in pl:
            raise RuntimeError(f"{w.name} writes back into a shared input {w.args[0].name}")
    return Pattern(gm, placeholders, per_layer, prologue, body, epilogue, writebacks, output, carry)


def layers_for(target_nodes: int, v2: bool, cfg: Config = _DEFAULT_CONFIG) -> int:
    """Number of layers whose stitched graph is closest to ``target_nodes``."""
    pat = pattern(v2, cfg)
    return max(1, round((target_nodes - pat.fixed_nodes) / pat.nodes_per_layer))


def stitch(
    layers: int, v2: bool, cfg: Config = _DEFAULT_CONFIG
) -> tuple[torch.fx.Graph, list[tuple[torch.fx.Node, torch.fx.Node, int]]]:
    """``layers`` copies of the captured layer, as one graph, and where each
    new node comes from: ``(new, template node, layer)``, layer -1 for the
    nodes outside the layers. ``meta['val']`` still points at the template's
    fake tensors: see :func:`propagate` and :func:`replicate`."""
    pat = pattern(v2, cfg)
    g = torch.fx.Graph()
    origin: list[tuple[torch.fx.Node, torch.fx.Node, int]] = []
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    per_layer = set(pat.per_layer)

    def copy_node(n: torch.fx.Node, look: Callable[[torch.fx.Node], torch.fx.Node], i: int) -> torch.fx.Node:
        new = g.node_copy(n, look)
        origin.append((new, n, i))
        return new

    layer_inputs: list[dict[torch.fx.Node, torch.fx.Node]] = [{} for _ in range(layers)]
    for p in pat.placeholders:
        env[p] = copy_node(p, env.__getitem__, 0 if p in per_layer else -1)
        layer_inputs[0][p] = env[p]
    for i in range(1, layers):
        for p in pat.per_layer:
            q = g.placeholder(f"l{i}_{p.name}")
            q.meta = dict(p.meta)
            origin.append((q, p, i))
            layer_inputs[i][p] = q
    for n in pat.prologue:
        env[n] = copy_node(n, env.__getitem__, -1)

    wb_args: list[list[tuple[torch.fx.Node, torch.fx.Node]]] = []
    lmap: dict[torch.fx.Node, torch.fx.Node] = {}
    for i in range(layers):
        prev = lmap
        lmap = {p: layer_inputs[i][p] for p in per_layer}
        if i > 0:
            for src, dst in pat.carry.items():
                lmap[src] = prev[dst]
        layer_inputs[i] = {}

        def look(x: torch.fx.Node, lmap: dict[torch.fx.Node, torch.fx.Node] = lmap) -> torch.fx.Node:
            return lmap[x] if x in lmap else env[x]

        for n in pat.body:
            lmap[n] = copy_node(n, look, i)
        wb_args.append([(look(w.args[0]), look(w.args[1])) for w in pat.writebacks])

    def last(x: torch.fx.Node) -> torch.fx.Node:
        return lmap[x] if x in lmap else env[x]

    for n in pat.epilogue:
        env[n] = copy_node(n, last, -1)
    for i, args in enumerate(wb_args):
        for w, (dst, src) in zip(pat.writebacks, args, strict=True):
            copy_node(w, {w.args[0]: dst, w.args[1]: src}.__getitem__, i)
    copy_node(pat.output, last, -1)
    return g, origin


def bare_module(graph: torch.fx.Graph) -> torch.fx.GraphModule:
    """A GraphModule owning ``graph`` without generating its Python code
    (codegen of 10^5-10^6 nodes costs far more than the passes measured).
    ``forward`` raises until ``recompile()`` is called."""
    gm = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    gm._graph = graph
    graph.owning_module = gm

    def forward(*args: Any) -> Any:
        raise RuntimeError("bare GraphModule: call recompile() before running it")

    gm.forward = forward  # type: ignore[method-assign]
    return gm


def fake_mode_of(graph: torch.fx.Graph) -> Any:
    """The fake mode of the placeholders' ``meta['val']``."""
    from torch._guards import detect_fake_mode

    return detect_fake_mode([n.meta["val"] for n in graph.find_nodes(op="placeholder")])


def _refresh_eager_input_vals(graph: torch.fx.Graph) -> None:
    """``meta['eager_input_vals']`` (Inductor's decomposition reads it) from the
    inputs' current ``meta['val']``, in the capture's layout: a fake tensor per
    node argument, None for everything else."""

    def val(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return a.meta.get("val")
        if isinstance(a, list | tuple):
            return type(a)(val(x) for x in a)
        if isinstance(a, dict):
            return {k: val(x) for k, x in a.items()}
        return None

    for n in graph.nodes:
        if "eager_input_vals" in n.meta:
            n.meta["eager_input_vals"] = (val(tuple(n.args)), val(dict(n.kwargs)))


def propagate(gm: torch.fx.GraphModule, fake_mode: Any) -> None:
    """Re-runs fake tensor propagation (``FakeTensorProp``) over the whole graph:
    every node gets its own ``meta['val']``, with fresh storages per layer."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    inputs = []
    with fake_mode:
        for p in placeholders:
            v = p.meta["val"]
            inputs.append(torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device))
    FakeTensorProp(gm, mode=fake_mode).propagate_dont_convert_inputs(*inputs)
    for p, v in zip(placeholders, inputs, strict=True):
        p.meta["val"] = v
    _refresh_eager_input_vals(gm.graph)


def _storage(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def replicate(
    pat: Pattern, origin: list[tuple[torch.fx.Node, torch.fx.Node, int]], layers: int, fake_mode: Any
) -> None:
    """What :func:`propagate` computes, without running the graph: each new
    node gets the template node's fake value rebuilt on fresh storages, one set
    per layer for the layer's own buffers (weights, KV cache, activations) and
    one for the rest. 10-20x faster than ``FakeTensorProp``; ``meta_mismatch``
    checks the two agree."""
    from torch._subclasses.fake_tensor import FakeTensor

    per_layer = set(pat.per_layer) | set(pat.body)
    owner_is_layer: dict[int, bool] = {}
    for n in pat.gm.graph.nodes:
        for t in _tensors(n.meta.get("val")):
            owner_is_layer.setdefault(_storage(t), n in per_layer)
    conv = fake_mode.fake_tensor_converter
    bases: dict[tuple[int, int], torch.Tensor] = {}
    typed: dict[tuple[int, int, torch.dtype], torch.Tensor] = {}

    def rebuild(v: Any, ctx: int) -> Any:
        if isinstance(v, FakeTensor):
            sid = _storage(v)
            key = (sid, ctx if owner_is_layer.get(sid, False) else -1)
            tkey = (*key, v.dtype)
            base = typed.get(tkey)
            if base is None:
                raw = bases.get(key)
                if raw is None:
                    raw = bases[key] = torch.empty(
                        v.untyped_storage().nbytes(), dtype=torch.uint8, device="meta"
                    )
                base = typed[tkey] = raw.view(v.dtype)
            elem = base.as_strided(v.shape, v.stride(), v.storage_offset())
            return conv.from_meta_and_device(fake_mode, elem, v.device)
        if isinstance(v, list | tuple):
            return type(v)(rebuild(x, ctx) for x in v)
        if isinstance(v, torch.Tensor):
            raise TypeError(f"unexpected non-fake tensor value {type(v)}")
        return v

    last = layers - 1
    for new, tmpl, ctx in origin:
        if "val" in tmpl.meta:
            new.meta["val"] = rebuild(tmpl.meta["val"], last if ctx < 0 else ctx)
    _refresh_eager_input_vals(origin[0][0].graph)


def _tensors(v: Any) -> list[torch.Tensor]:
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, list | tuple):
        return [t for x in v for t in _tensors(x)]
    return []


def meta_mismatch(a: torch.fx.Graph, b: torch.fx.Graph) -> str | None:
    """None when the two graphs' ``meta['val']`` agree node by node in shape,
    stride, offset, dtype and device, and alias the same way (one-to-one map
    between their storages); else the first difference."""
    fwd: dict[int, int] = {}
    bwd: dict[int, int] = {}
    for x, y in zip(a.nodes, b.nodes, strict=True):
        tx, ty = _tensors(x.meta.get("val")), _tensors(y.meta.get("val"))
        if len(tx) != len(ty):
            return f"{x.name}: {len(tx)} tensors against {len(ty)}"
        for s, t in zip(tx, ty, strict=True):
            if (s.shape, s.stride(), s.storage_offset(), s.dtype, s.device) != (
                t.shape,
                t.stride(),
                t.storage_offset(),
                t.dtype,
                t.device,
            ):
                return f"{x.name}: {s} against {t}"
            ss, st = _storage(s), _storage(t)
            if fwd.setdefault(ss, st) != st or bwd.setdefault(st, ss) != ss:
                return f"{x.name}: storages alias differently"
    return None


PROPAGATE_UP_TO = 150_000  # nodes; FakeTensorProp takes about 0.7 ms a node on a CPU


@dataclass
class BuildInfo:
    layers: int
    nodes: int
    fake: str  # how meta['val'] was refreshed: "propagate", "replicate" or "none"
    stitch_s: float
    fake_s: float


def build_layers(
    layers: int,
    v2: bool,
    *,
    cfg: Config = _DEFAULT_CONFIG,
    fake: str = "auto",
    codegen: bool | None = None,
) -> tuple[torch.fx.GraphModule, BuildInfo]:
    """A ``layers``-layer graph and how it was built.

    ``fake``: "propagate" (``FakeTensorProp``), "replicate" (same values, much
    faster: see :func:`replicate`), "none" (every layer shares the template's
    fake tensors, hence storages) or "auto" (propagate up to
    ``PROPAGATE_UP_TO`` nodes, replicate above). ``codegen`` (default: up to
    20,000 nodes) generates ``forward``; otherwise see :func:`bare_module`."""
    pat = pattern(v2, cfg)
    t0 = time.perf_counter()
    graph, origin = stitch(layers, v2, cfg)
    t1 = time.perf_counter()
    nodes = len(graph.nodes)
    gm = bare_module(graph)
    if fake == "auto":
        fake = "propagate" if nodes <= PROPAGATE_UP_TO else "replicate"
    mode = fake_mode_of(pat.gm.graph)
    if fake == "propagate":
        propagate(gm, mode)
    elif fake == "replicate":
        replicate(pat, origin, layers, mode)
    elif fake != "none":
        raise ValueError(f"unknown fake mode {fake!r}")
    del origin
    t2 = time.perf_counter()
    if codegen if codegen is not None else nodes <= 20_000:
        gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    gm.meta["fxr_bench"] = {"config": asdict(cfg), "v2": v2, "layers": layers, "fake": fake}
    return gm, BuildInfo(layers, nodes, fake, t1 - t0, t2 - t1)


def build(target_nodes: int, v2: bool, *, experts: int = 8, fake: str = "auto") -> torch.fx.GraphModule:
    """A post-grad MoE-decoder graph of about ``target_nodes`` nodes, in the
    auto_functionalized_v2 form (``v2``) or the v1 form, every node with its
    own fake ``meta['val']``."""
    cfg = Config(experts=experts)
    gm, _ = build_layers(layers_for(target_nodes, v2, cfg), v2, cfg=cfg, fake=fake)
    return gm


# --- inputs for running a graph ------------------------------------------------------------------


def random_inputs(gm: torch.fx.GraphModule, seed: int = 0) -> list[torch.Tensor]:
    """Real random inputs shaped like the placeholders' ``meta['val']``: floats
    normal, integer inputs distinct indices into the KV cache."""
    cfg = Config(**gm.meta["fxr_bench"]["config"])
    g = torch.Generator().manual_seed(seed)
    out = []
    for p in gm.graph.find_nodes(op="placeholder"):
        v = p.meta["val"]
        if v.dtype.is_floating_point:
            t = torch.randn(v.shape, generator=g, dtype=v.dtype)
        else:
            t = torch.randperm(cfg.cache_slots, generator=g)[: v.numel()].reshape(v.shape).to(v.dtype)
        out.append(torch.empty_strided(v.shape, v.stride(), dtype=v.dtype).copy_(t))
    return out


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import logging

    logger = logging.getLogger("torch")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def count(graph: torch.fx.Graph, pred: Callable[[torch.fx.Node], bool]) -> int:
    return sum(1 for n in graph.nodes if pred(n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=float, default=1e3)
    ap.add_argument("--form", choices=("v2", "v1"), default="v2")
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--fake", choices=("auto", "propagate", "replicate", "none"), default="auto")
    ap.add_argument("--check", action="store_true", help="check replicate against propagate")
    args = ap.parse_args()
    v2 = args.form == "v2"
    cfg = Config(experts=args.experts)
    t0 = time.perf_counter()
    with _quiet():
        pat = pattern(v2, cfg)
    t1 = time.perf_counter()
    layers = layers_for(int(args.nodes), v2, cfg)
    gm, info = build_layers(layers, v2, cfg=cfg, fake=args.fake, codegen=False)
    af = count(gm.graph, lambda n: n.op == "call_function" and n.target in _AF)
    getitems = count(gm.graph, lambda n: n.target is operator.getitem)
    print(
        f"{args.form}: capture {t1 - t0:.1f} s; layer pattern {pat.nodes_per_layer} nodes "
        f"(+{pat.fixed_nodes} fixed); {info.layers} layers -> {info.nodes} nodes "
        f"({af} auto_functionalized, {getitems} getitems); stitch {info.stitch_s:.2f} s, "
        f"fake values ({info.fake}) {info.fake_s:.2f} s"
    )
    if args.check:
        other, oinfo = build_layers(
            layers, v2, cfg=cfg, fake="replicate" if info.fake == "propagate" else "propagate", codegen=False
        )
        diff = meta_mismatch(gm.graph, other.graph)
        print(
            f"{oinfo.fake} {oinfo.fake_s:.2f} s; meta['val'] {'agree' if diff is None else 'DIFFER: ' + diff}"
        )


if __name__ == "__main__":
    main()
