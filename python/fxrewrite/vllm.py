"""fxrewrite for vLLM by configuration alone: the name ``"fxrewrite.vllm.pass_"``.

::

    LLM(model, compilation_config={"inductor_passes": {"post_grad_custom_post_pass": "fxrewrite.vllm.pass_"}})
    vllm serve MODEL --compilation-config '{"inductor_passes": {"post_grad_custom_post_pass": "fxrewrite.vllm.pass_"}}'

Three facts of vLLM shape this module (read in its source):

- ``CompilationConfig`` resolves a qualified name ``a.b.c`` with
  ``__import__("a.b").__dict__["c"]``, and ``__import__`` of a dotted name
  returns the *top* package: the lookup reads ``fxrewrite.__dict__["pass_"]``.
  So importing this module binds ``fxrewrite.pass_`` eagerly, to the very
  object ``fxrewrite.vllm.pass_`` is (``importlib.import_module`` plus
  ``getattr``, vLLM's ``resolve_obj_by_qualname``, finds the same one).
- On the VLLM_COMPILE path (the GPU default) ``configure_post_pass`` asserts
  that the configured pass is an instance of vLLM's ``InductorPass``; an
  object that is not is wrapped in ``CallableInductorPass``, whose cache key
  is a hash of the wrapper's source instead of the pass's ``uuid()``. Where
  vLLM's ``InductorPass`` imports, that one object's class therefore becomes
  ``VllmPass``: fxrewrite's ``Pass`` with vLLM's ``InductorPass`` as a further
  base; its ``uuid()`` stays fxrewrite's (``Pass.uuid``, first in the MRO).
- That path runs a user pass *before* ``UnsafeCloneEliminationPass``
  (``passes/ir/clone_elimination.py``), which removes every
  ``aten.clone.default`` unless the clone itself is written by a direct user
  and the original is used after that write. The copies fxrewrite makes are
  written through views (``as_strided`` of the clone), so they would be
  removed and the call would write the original. ``VllmPass`` therefore
  makes every copy that a rewritten call writes, directly or through views,
  with ``empty_like`` + the functional ``aten.copy``: an op vLLM's pass does
  not touch, which Inductor lowers exactly as it lowers ``aten.clone`` (a new
  buffer of the source's values). Not the in-place ``copy_``: up to torch
  2.14, Inductor lowers ``copy_`` into a fresh buffer by pointing that buffer
  at the source's (``mutate_to``'s fast path), so the "copy" was the source
  itself and the call wrote the source (torch 2.15 copies). Values are the
  same with either form, so the cache key does not tell them apart.

``"fxrewrite.vllm.pre_pass"`` names fxrewrite's pre pass the same way, for
``joint_custom_pre_pass`` (what ``install()`` adds: it lets the rewrite keep
calls whose arguments share memory instead of leaving them to Inductor).

Importing ``fxrewrite`` never imports this module or vLLM; without vLLM
``pass_`` and ``pre_pass`` stay fxrewrite's plain ``Pass`` and ``PrePass``.
"""

from __future__ import annotations

import importlib
import operator
import sys
from typing import cast

import torch
import torch.fx
from torch._ops import OpOverload

from ._pre_pass import PrePass
from ._pre_pass import pre_pass as _the_pre_pass
from .inductor_pass import Pass
from .inductor_pass import pass_ as _the_pass

__all__ = [
    "INDUCTOR_PASS_MODULES",
    "VllmPass",
    "VllmPrePass",
    "inductor_pass_types",
    "pass_",
    "pre_pass",
    "protect_written_copies",
]

#: Where vLLM has kept its ``InductorPass``: ``compilation/passes/`` in newer
#: releases, ``compilation/`` before. A class found in both is the same class
#: re-exported; distinct ones all become bases, since either may be checked.
INDUCTOR_PASS_MODULES = (
    "vllm.compilation.passes.inductor_pass",
    "vllm.compilation.inductor_pass",
)


def inductor_pass_types() -> tuple[type, ...]:
    """vLLM's ``InductorPass`` classes that import here (none without vLLM)."""
    found: list[type] = []
    for name in INDUCTOR_PASS_MODULES:
        try:
            cls = getattr(importlib.import_module(name), "InductorPass", None)
        except ImportError:
            continue
        if isinstance(cls, type) and cls not in found:
            found.append(cls)
    return tuple(found)


_aten = torch.ops.aten


def _is_view(node: torch.fx.Node) -> bool:
    """Does ``node`` alias its first argument (a view op, or an element of
    one that returns several views, such as ``split``)?"""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        src = node.args[0]
        return isinstance(src, torch.fx.Node) and _is_view(src)
    if not isinstance(node.target, OpOverload):
        return False
    schema = node.target._schema
    if not schema.returns or not schema.arguments or schema.arguments[0].alias_info is None:
        return False
    ret = schema.returns[0].alias_info
    return ret is not None and not ret.is_write


def _written(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The tensors a call writes (its ``Tensor(a!)`` arguments, lists included)."""
    if node.op != "call_function" or not isinstance(node.target, OpOverload):
        return []
    out: list[torch.fx.Node] = []
    for i, arg in enumerate(node.target._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        values = value if isinstance(value, list | tuple) else [value]
        out.extend(v for v in values if isinstance(v, torch.fx.Node))
    return out


def protect_written_copies(graph: torch.fx.Graph, changed: list[torch.fx.Node]) -> list[torch.fx.Node]:
    """Remakes each ``aten.clone.default`` that a call in ``changed`` writes,
    directly or through views, as ``empty_like`` + ``aten.copy`` (functional:
    lowered as a clone, never as the in-place ``copy_`` whose lowering in
    torch 2.14 and older makes the fresh buffer its source's), so that
    vLLM's clone elimination, which does not follow views, cannot remove it.
    Returns ``changed`` with the nodes made (for the fake-tensor updater).

    The two nodes take the clone's metadata: ``aten.copy(empty, src)`` is a
    tensor laid out as ``empty``, the one new buffer the clone was.
    """
    clones: dict[torch.fx.Node, None] = {}
    for node in changed:
        if node.graph is not graph:
            continue
        for w in _written(node):
            while _is_view(w) and isinstance(w.args[0], torch.fx.Node):
                w = w.args[0]
            if w.op == "call_function" and w.target is _aten.clone.default:
                clones[w] = None
    made: list[torch.fx.Node] = []
    for clone in clones:
        src = clone.args[0]
        with graph.inserting_before(clone):
            empty = graph.call_function(_aten.empty_like.default, (src,), dict(clone.kwargs))
            copy = graph.call_function(_aten.copy.default, (empty, src))
        empty.meta = dict(clone.meta)
        copy.meta = dict(clone.meta)
        clone.replace_all_uses_with(copy)
        graph.erase_node(clone)
        made += [empty, copy]
    if not made:
        return changed
    return [n for n in changed if n not in clones] + made


class _CopiesVllmKeeps(Pass):
    """``Pass`` whose copies survive vLLM's clone elimination; the body of
    ``VllmPass`` (which adds vLLM's ``InductorPass`` where it imports)."""

    def _after_rewrite(self, graph: torch.fx.Graph, changed: list[torch.fx.Node]) -> list[torch.fx.Node]:
        return protect_written_copies(graph, changed)

    def is_applicable_for_range(self, compile_range: object) -> bool:
        """vLLM's manager asks every pass; fxrewrite applies to every range."""
        return True


#: fxrewrite's pass as vLLM's manager wants it: ``Pass`` (its ``uuid()``, its
#: options), copies that vLLM's clone elimination keeps, and vLLM's
#: ``InductorPass`` among its bases where vLLM imports. ``VllmPass(strict=True)``
#: and ``VllmPass(leave=...)`` configure it as ``Pass``.
_VLLM_TYPES = inductor_pass_types()
VllmPass = cast(
    type[Pass],
    type(
        "VllmPass",
        (_CopiesVllmKeeps, *_VLLM_TYPES),
        {"__module__": __name__, "__doc__": _CopiesVllmKeeps.__doc__},
    ),
)

#: fxrewrite's pre pass, an ``InductorPass`` where vLLM imports (its
#: ``uuid()`` stays ``PrePass``'s), for ``joint_custom_pre_pass``.
VllmPrePass = cast(
    type[PrePass],
    type("VllmPrePass", (PrePass, *_VLLM_TYPES), {"__module__": __name__, "__doc__": PrePass.__doc__}),
)

if _VLLM_TYPES:
    # vLLM is here: fxrewrite's pass objects themselves take the vLLM
    # classes, so that one object is ``fxrewrite.pass_``,
    # ``fxrewrite.vllm.pass_`` and what ``install()`` installs (its reports
    # in one place); likewise the pre pass. Their state is unchanged; only
    # behaviour is added.
    if type(_the_pass) is Pass:
        _the_pass.__class__ = VllmPass
    if type(_the_pre_pass) is PrePass:
        _the_pre_pass.__class__ = VllmPrePass

#: The pass to name in vLLM's configuration: ``"fxrewrite.vllm.pass_"``.
pass_: Pass = _the_pass

#: The pre pass to name with it (``joint_custom_pre_pass``): ``"fxrewrite.vllm.pre_pass"``.
pre_pass: PrePass = _the_pre_pass

# vLLM's ``__import__("fxrewrite.vllm").__dict__[name]`` reads the top
# package's namespace, where both are otherwise made on first access.
_package = sys.modules[__name__.rpartition(".")[0]].__dict__
_package["pass_"] = pass_
_package["pre_pass"] = pre_pass
