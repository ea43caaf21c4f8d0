"""What the metadata checks compare: each tensor node's fake value as
layout (sizes, strides, storage offset), dtype and aliasing class, and the
same after a fresh fake propagation over a copy of the graph."""

from __future__ import annotations

import copy

import torch
import torch.fx


def layout_and_aliasing(gm: torch.fx.GraphModule) -> dict[str, tuple[object, ...]]:
    """Per tensor node: sizes, strides and offset (symbolic ones by their
    expression, since comparing SymInts would add guards), dtype, and the
    first node (in graph order) sharing its storage."""
    first: dict[int, str] = {}
    out = {}
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if not isinstance(v, torch.Tensor) or not torch._C._has_storage(v):
            continue
        key = v.untyped_storage()._cdata
        dims = tuple(
            d if type(d) is int else str(d) for d in (*v.shape, -1, *v.stride(), -1, v.storage_offset())
        )
        out[n.name] = (dims, v.dtype, first.setdefault(key, n.name))
    return out


def propagated(gm: torch.fx.GraphModule) -> dict[str, tuple[object, ...]]:
    """``layout_and_aliasing`` of a copy of ``gm`` after fake propagation
    from its placeholders' values (``gm`` itself is left as it is)."""
    from torch._guards import detect_fake_mode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    probe = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    inputs = [n.meta["val"] for n in probe.graph.find_nodes(op="placeholder")]
    FakeTensorProp(probe, detect_fake_mode(inputs)).propagate_dont_convert_inputs(*inputs)
    return layout_and_aliasing(probe)
