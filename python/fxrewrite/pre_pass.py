"""The optional companion pass that runs *before* Inductor's first
``remove_noop_ops`` (``torch._inductor.config.joint_custom_pre_pass =
fxrewrite.pre_pass``: the joint graph passes already remove no-ops, before
any post-grad pass runs).

Why it exists: by the time the main pass runs, Inductor's ``remove_noop_ops``
has deleted copies the user wrote (``y = x.clone(); op(out=y, x=x)`` reaches
the post pass as ``op(out=x, x=x)``). A read argument that shares memory with a
written one then looks the same whether the user passed aliased memory
(``op(out, out)``: eager ran the kernel on it, so in place is exact) or the
aliasing was made by ``remove_noop_ops`` (in place would feed the kernel
memory it is writing, which eager never did; pytorch#198031). Without this
pass fxrewrite clones in both cases; with it, only in the second.

It records, on each auto_functionalized node, the read arguments whose
tensors already share storage with a written argument, by argument and node
name. The main pass trusts a record only while the argument still holds the
same nodes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2
from torch._inductor.custom_graph_pass import CustomGraphPass

__all__ = ["META_KEY", "PrePass", "pre_pass", "record_user_aliasing"]

from .encode import USER_ALIASED_META as META_KEY  # ``{read argument: (node names, ...)}``
from .fx_meta import storage_of


def _nodes(value: Any) -> list[torch.fx.Node]:
    if isinstance(value, torch.fx.Node):
        return [value]
    if isinstance(value, list | tuple):
        return [n for v in value for n in _nodes(v)]
    return []


def _storage(node: torch.fx.Node) -> int | None:
    return storage_of(node.meta.get("val"))


def _written_nodes(node: torch.fx.Node, schema: Any) -> list[torch.fx.Node]:
    if node.target is auto_functionalized_v2:
        return _nodes(node.kwargs.get("_all_bases"))
    written: list[torch.fx.Node] = []
    for a in schema.arguments:
        if a.alias_info is not None and a.alias_info.is_write:
            written += _nodes(node.kwargs.get(a.name))
    return written


def record_user_aliasing(graph: torch.fx.Graph) -> int:
    """Records on every auto_functionalized node of ``graph`` which read
    arguments share storage with a written one; returns how many nodes got a
    record."""
    recorded = 0
    for node in graph.nodes:
        if node.op != "call_function" or node.target not in (auto_functionalized, auto_functionalized_v2):
            continue
        op = node.args[0] if node.args else None
        schema = getattr(op, "_schema", None)
        if schema is None:
            continue
        written = {s for s in map(_storage, _written_nodes(node, schema)) if s is not None}
        aliased: dict[str, tuple[str, ...]] = {}
        for a in schema.arguments:
            if a.alias_info is not None and a.alias_info.is_write:
                continue
            nodes = _nodes(node.kwargs.get(a.name))
            if nodes and any(_storage(n) in written for n in nodes):
                aliased[a.name] = tuple(n.name for n in nodes)
        if aliased:
            node.meta[META_KEY] = aliased
            recorded += 1
    return recorded


class PrePass(CustomGraphPass):
    """``joint_custom_pre_pass``: see the module docstring. It changes no
    node; it only records what the main pass needs."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        record_user_aliasing(graph)

    def uuid(self) -> str:
        # What it records changes the main pass's decisions, whose own uuid
        # covers the engine; this names the recording logic.
        return "fxrewrite-pre-pass-1"


#: The pre pass, ready for ``post_grad_custom_pre_pass``.
pre_pass = PrePass()
