"""The companion pass that runs *before* Inductor's first ``remove_noop_ops``
(``torch._inductor.config.joint_custom_pre_pass = fxrewrite.pre_pass``; the
joint graph passes already remove no-ops, before any post-grad pass runs).
``fxrewrite.install()`` sets it together with the main pass.

Why it exists: the kernel of a call must see exactly the memory sharing
eager's call saw, and by the time the main pass runs that can no longer be
read off the graph. Inductor's ``remove_noop_ops`` deletes copies the user
wrote: ``y = x.clone(); op(out=y, x=x)`` reaches the post pass as
``op(out=x, x=x)``, which looks exactly like a program that passed ``x``
twice (pytorch#198031). In the first the kernel must get two memories, in the
second one; a kernel that reads ``x`` after writing ``out`` tells them apart.

So this pass records, on each auto_functionalized node, its *alias groups*:
the partition of the call's tensor slots (written and read arguments, one
slot per list element, ``name`` or ``name[i]``) by the storage each held in
the program as functionalized, before any cleanup. The main pass keeps every
group's sharing and splits every sharing no group has; without a record it
leaves a call whose arguments share memory to Inductor, never guessing.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
import torch.fx
from torch._inductor.custom_graph_pass import CustomGraphPass

__all__ = ["META_KEY", "PrePass", "pre_pass", "record_alias_groups"]

from ._build_id import native_build_id, python_sources_id
from ._install_record import INSTALL_ENV
from .encode import ALIAS_GROUPS_META as META_KEY  # ``((slot label, ...), ...)``
from .encode import (
    FRESH_SLOTS_META,  # ``(slot label, ...)``
    is_auto_functionalized,
)
from .fx_meta import storage_of, v2_written_views


def _tensor_slots(name: str, value: Any) -> list[tuple[str, torch.fx.Node]]:
    """``(label, node)`` of each tensor node an argument holds."""
    if isinstance(value, torch.fx.Node):
        return [(name, value)]
    if isinstance(value, list | tuple):
        return [(f"{name}[{i}]", v) for i, v in enumerate(value) if isinstance(v, torch.fx.Node)]
    return []


def _call_slots(node: torch.fx.Node) -> list[tuple[str, torch.fx.Node, bool]] | None:
    """``(label, node, whole)`` of each tensor slot of one auto_functionalized
    node: a v2 written argument lives in its base (``whole``: it is all of
    that base), every other slot is its own node. None when the node's
    operator has no schema or its v2 keywords do not encode the arguments."""
    op = node.args[0] if node.args else None
    schema = getattr(op, "_schema", None)
    if schema is None:
        return None
    # Written arguments cut from ``_all_bases`` (v2): the one encoding the
    # pre pass reads apart; every other form passes them as they are.
    v2 = "_all_bases" in node.kwargs
    written_views = v2_written_views(node, op) if v2 else {}
    if written_views is None:
        return None
    raw = node.kwargs.get("_all_bases")
    bases: list[Any] = list(raw) if isinstance(raw, list | tuple) else []
    slots: list[tuple[str, torch.fx.Node, bool]] = []
    for a in schema.arguments:
        if v2 and a.name in written_views:
            # v2 passes written tensors as views of ``_all_bases``: the slot
            # lives in its base.
            for view in written_views[a.name] or []:
                if view is not None and view[1] < len(bases) and isinstance(bases[view[1]], torch.fx.Node):
                    slots.append((view[0], bases[view[1]], view[2] == "whole"))
        else:
            slots += [(label, n, True) for label, n in _tensor_slots(a.name, node.kwargs.get(a.name))]
    return slots


def alias_groups_of(node: torch.fx.Node) -> tuple[tuple[str, ...], ...] | None:
    """The alias groups of one auto_functionalized node as the graph holds
    it now, or None when a slot's storage is unknown (no fake value, a tensor
    without storage): then no record is better than a wrong one."""
    return _groups(_call_slots(node))


def _groups(slots: list[tuple[str, torch.fx.Node, bool]] | None) -> tuple[tuple[str, ...], ...] | None:
    """The slots partitioned by storage (``alias_groups_of``)."""
    if slots is None:
        return None
    groups: dict[int, list[str]] = {}
    for label, n, _whole in slots:
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue  # a SymInt or a constant: not memory
        storage = storage_of(val)
        if storage is None:
            return None
        groups.setdefault(storage, []).append(label)
    return tuple(tuple(g) for g in groups.values())


def _is_plain_clone(n: Any) -> bool:
    """A ``clone`` that keeps its source's layout (``preserve_format``): a
    fresh memory with the source's strides, at offset 0."""
    return (
        isinstance(n, torch.fx.Node)
        and n.op == "call_function"
        and n.target is torch.ops.aten.clone.default
        and n.kwargs.get("memory_format") in (None, torch.preserve_format)
    )


def _fresh(slots: list[tuple[str, torch.fx.Node, bool]] | None) -> tuple[str, ...]:
    """The slots of one auto_functionalized node that hold the whole result
    of a ``clone`` now, before ``remove_noop_ops`` can delete it: a copy the
    main pass makes for such a slot is then a ``clone`` of it, with the
    layout eager's clone had, not a copy of the memory it came to view."""
    return tuple(label for label, n, whole in slots or [] if whole and _is_plain_clone(n))


def record_alias_groups(graph: torch.fx.Graph) -> int:
    """Records the alias groups of every auto_functionalized node of
    ``graph`` (``node.meta[META_KEY]``); returns how many nodes got one."""
    recorded = 0
    for node in graph.nodes:
        if not is_auto_functionalized(node):
            continue
        slots = _call_slots(node)  # read once for both records
        fresh = _fresh(slots)
        if fresh:
            node.meta[FRESH_SLOTS_META] = fresh
        else:
            node.meta.pop(FRESH_SLOTS_META, None)
        groups = _groups(slots)
        if groups is None:
            node.meta.pop(META_KEY, None)
            continue
        node.meta[META_KEY] = groups
        recorded += 1
    return recorded


class PrePass(CustomGraphPass):
    """``joint_custom_pre_pass``: see the module docstring. It changes no
    node; it only records what the main pass needs."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        record_alias_groups(graph)
        if os.environ.get(INSTALL_ENV, "").strip() not in ("", "0"):
            # install() asked for the rewrite: say so if the engine's own
            # hook for this compile replaced it (vLLM's GPU path).
            warn_if_the_rewrite_does_not_run(graph)

    def uuid(self) -> str:
        # What it records changes the main pass's decisions, whose own uuid
        # covers the engine; this names the recording logic and its sources
        # (it reads the v2 encoding through the engine's parser).
        return f"fxrewrite-pre-pass-3-{python_sources_id()}-{native_build_id()}"


_warned_not_rewritten = False


def warn_if_the_rewrite_does_not_run(graph: torch.fx.Graph) -> None:
    """Warns, once per process, when this compile's
    ``post_grad_custom_post_pass`` runs no fxrewrite pass although
    ``install()`` asked for it, so that the nodes recorded here would
    silently stay for the engine. Read inside the compile, where an engine's
    own setting for that compile is visible (vLLM's GPU path sets its
    manager there, replacing ``install()``'s hook)."""
    global _warned_not_rewritten
    if _warned_not_rewritten:
        return
    import torch._inductor.config as config

    from .encode import count_auto_functionalized
    from .inductor_pass import Pass, passes_of

    hook = config.post_grad_custom_post_pass
    if passes_of(hook, Pass) or count_auto_functionalized(graph) == 0:
        return
    _warned_not_rewritten = True
    logging.getLogger("fxrewrite").warning(
        "fxrewrite.install() is in effect in process %d (%s), but this compile's post_grad_custom_post_pass "
        "is %s, which runs no fxrewrite pass: the engine set it for the compile, replacing install()'s. "
        "Nothing will be rewritten here. In vLLM (its VLLM_COMPILE path, the GPU default) name the pass "
        'in the configuration instead: compilation_config={"inductor_passes": '
        '{"post_grad_custom_post_pass": "fxrewrite.vllm.pass_"}}. This warning is shown once.',
        os.getpid(),
        INSTALL_ENV,
        type(hook).__qualname__ if hook is not None else "None",
    )


#: The pre pass, ready for ``joint_custom_pre_pass``.
pre_pass = PrePass()
