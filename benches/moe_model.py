"""The model the Python benches compile: custom mutating operators (namespace
``fxr_bench``) and a vLLM-style MoE decoder on them, and the capture of the
real post-grad graph of its one-layer version. ``make_graphs`` stitches larger
graphs from that capture; this file only defines what is compiled.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import asdict, dataclass

import torch
import torch.fx

NS = "fxr_bench"
_BODY_FN = "_moe_layer_body"
_SHARED_ARGS = ("cos", "sin", "slot_idx")  # per-step runtime inputs every layer reads
_CARRIED = ("x", "residual")  # fused_add_rms_norm arguments threaded through the layers


# --- the custom mutating operators ---------------------------------------------------------------


def _registered(name: str) -> bool:
    try:
        getattr(getattr(torch.ops, NS), name)
    except (AttributeError, RuntimeError):
        return False
    return True


if not _registered("fused_add_rms_norm"):  # importing this file twice must not re-register

    @torch.library.custom_op(f"{NS}::fused_add_rms_norm", mutates_args=("x", "residual"))
    def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float) -> None:
        """residual += x; x = rms_norm(residual) * w."""
        residual.add_(x)
        x.copy_(residual * torch.rsqrt(residual.pow(2).mean(-1, keepdim=True) + eps) * w)

    @torch.library.custom_op(f"{NS}::rotary", mutates_args=("q", "k"))
    def rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
        """Rotates every head of q and k ([tokens, heads * head_dim]) in place."""
        half = cos.shape[-1]
        c, s = cos.unsqueeze(-2), sin.unsqueeze(-2)
        for t in (q, k):
            x = t.unflatten(-1, (-1, 2 * half))
            x1, x2 = x[..., :half], x[..., half:]
            r1, r2 = x1 * c - x2 * s, x2 * c + x1 * s
            x1.copy_(r1)
            x2.copy_(r2)

    @torch.library.custom_op(f"{NS}::kv_write", mutates_args=("cache",))
    def kv_write(cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slot_idx: torch.Tensor) -> None:
        """cache[0][slot_idx] = k; cache[1][slot_idx] = v."""
        cache[0].index_copy_(0, slot_idx, k)
        cache[1].index_copy_(0, slot_idx, v)

    @torch.library.custom_op(f"{NS}::silu_and_mul", mutates_args=("out",))
    def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> None:
        """out = silu(x[..., :d]) * x[..., d:]."""
        d = x.shape[-1] // 2
        out.copy_(torch.nn.functional.silu(x[..., :d]) * x[..., d:])


# --- the model -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """Sizes of the captured layer. Small: the benches measure graph passes, not kernels."""

    tokens: int = 8
    hidden: int = 64
    heads: int = 4
    head_dim: int = 16
    ffn: int = 32
    experts: int = 8
    topk: int = 2
    cache_slots: int = 32
    eps: float = 1e-6


def _moe_layer_body(
    layer: MoELayer,
    h: torch.Tensor,
    residual: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    slot_idx: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    # Every node of one layer carries this function's frame in its stack
    # trace; that is how the stitcher finds the layer's node pattern.
    cfg = layer.cfg
    ops = torch.ops.fxr_bench
    ops.fused_add_rms_norm(h, residual, layer.norm1, cfg.eps)
    qkv = h @ layer.w_qkv
    width = cfg.heads * cfg.head_dim
    q, k, v = qkv.split([width, width, width], dim=-1)
    ops.rotary(q, k, cos, sin)
    ops.kv_write(layer.kv_cache, k, v, slot_idx)
    scores = (q @ layer.kv_cache[0].t()) * cfg.head_dim**-0.5
    attn = torch.softmax(scores, dim=-1) @ layer.kv_cache[1]
    o = attn @ layer.w_o
    ops.fused_add_rms_norm(o, residual, layer.norm2, cfg.eps)
    probs = torch.softmax(o @ layer.w_router, dim=-1)
    top_w, top_i = torch.topk(probs, cfg.topk, dim=-1)
    top_w = top_w / top_w.sum(-1, keepdim=True)
    out = torch.zeros_like(o)
    for e in range(cfg.experts):
        gate = (top_w * (top_i == e)).sum(-1, keepdim=True)
        up = o @ layer.w_up[e]
        act = torch.empty(o.shape[0], cfg.ffn, dtype=o.dtype, device=o.device)
        ops.silu_and_mul(act, up)
        out = out + (act @ layer.w_down[e]) * gate
    return out, residual


class MoELayer(torch.nn.Module):
    """One decoder layer; the KV cache is a buffer (a mutated graph input)."""

    def __init__(self, cfg: Config, g: torch.Generator) -> None:
        super().__init__()
        self.cfg = cfg
        h, w, f, e = cfg.hidden, cfg.heads * cfg.head_dim, cfg.ffn, cfg.experts

        def p(*shape: int, scale: float = 1.0, offset: float = 0.0) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randn(*shape, generator=g) * scale + offset)

        self.norm1 = p(h, scale=0.1, offset=1.0)
        self.w_qkv = p(h, 3 * w, scale=h**-0.5)
        self.w_o = p(w, h, scale=w**-0.5)
        self.norm2 = p(h, scale=0.1, offset=1.0)
        self.w_router = p(h, e, scale=h**-0.5)
        self.w_up = p(e, h, 2 * f, scale=h**-0.5)
        self.w_down = p(e, f, h, scale=f**-0.5)
        self.register_buffer("kv_cache", torch.zeros(2, cfg.cache_slots, w))

    def forward(
        self,
        h: torch.Tensor,
        residual: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        slot_idx: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _moe_layer_body(self, h, residual, cos, sin, slot_idx)


class MoEDecoder(torch.nn.Module):
    """``layers`` MoE layers and a final fused add+rms_norm."""

    def __init__(self, cfg: Config, layers: int = 1) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.cfg = cfg
        self.layers = torch.nn.ModuleList(MoELayer(cfg, g) for _ in range(layers))
        self.final_norm = torch.nn.Parameter(torch.ones(cfg.hidden))

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slot_idx: torch.Tensor
    ) -> torch.Tensor:
        h = x.clone()
        residual = torch.zeros_like(x)
        for layer in self.layers:
            h, residual = layer(h, residual, cos, sin, slot_idx)
        torch.ops.fxr_bench.fused_add_rms_norm(h, residual, self.final_norm, self.cfg.eps)
        return h

    def example_inputs(self, seed: int = 0) -> tuple[torch.Tensor, ...]:
        cfg = self.cfg
        g = torch.Generator().manual_seed(seed)
        angle = torch.rand(cfg.tokens, cfg.head_dim // 2, generator=g) * 6.28
        slots = torch.randperm(cfg.cache_slots, generator=g)[: cfg.tokens]
        return torch.randn(cfg.tokens, cfg.hidden, generator=g), angle.cos(), angle.sin(), slots


# --- capture -------------------------------------------------------------------------------------


class _Captured(Exception):
    pass


class _Capture:
    """``post_grad_custom_post_pass`` that deep-copies the graph it sees."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, graph: torch.fx.Graph) -> None:
        root = graph.owning_module if graph.owning_module is not None else torch.nn.Module()
        self.graphs.append(torch.fx.GraphModule(root, copy.deepcopy(graph)))
        raise _Captured  # the rest of the compile (lowering, C++ codegen) is not needed

    def uuid(self) -> None:  # never cached
        return None


@functools.lru_cache(maxsize=8)
def capture(v2: bool, cfg: Config = Config()) -> torch.fx.GraphModule:
    """The real post-grad graph of a 1-layer :class:`MoEDecoder` (cached per process;
    callers must not mutate it: ``build`` copies it)."""
    import torch._dynamo
    from torch._inductor import config as inductor_config

    model = MoEDecoder(cfg, layers=1).eval()
    cap = _Capture()
    torch._dynamo.reset()
    with (
        inductor_config.patch(
            {
                "post_grad_custom_post_pass": cap,
                "fx_graph_cache": False,
                "enable_auto_functionalized_v2": v2,
            }
        ),
        torch.no_grad(),
    ):
        try:
            torch.compile(model, fullgraph=True)(*model.example_inputs())
        except Exception:  # our _Captured, as Inductor wraps it
            if not cap.graphs:
                raise
    torch._dynamo.reset()
    if len(cap.graphs) != 1:
        raise RuntimeError(f"expected one post-grad graph, captured {len(cap.graphs)}")
    gm = cap.graphs[0]
    gm.meta["fxr_bench"] = {"config": asdict(cfg), "v2": v2, "layers": 1}
    return gm
