"""Tensor metadata for the applier on a live graph: the torch half of the FX
editor (``rust/python/fx_editor.rs``), which calls these functions for the
nodes it creates or re-points. The edits themselves, their order, the checks
and the rollback are the one applier's, in Rust (``rust/plan/apply/``).

Where the graph carries no fake values (or a node's input has none), the
inserted node gets none either: missing metadata costs only precision. An
inserted node that fails on the fake values it has is a wrong rewrite, and
the applier rolls the rewrite back (``compute``). The eager layouts of a
direct call and the refreshed values of re-pointed views are best effort:
one that cannot be computed is left unset for Inductor's own
``FakeTensorUpdater``.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

from . import _core
from .encode import schema_facts

_MISSING = object()


def aten(qualname: str) -> Any:
    """The overload ``ns::name.overload`` (``aten::clone.default``)."""
    ns_name, overload = qualname.split(".", 1)
    ns, name = ns_name.split("::", 1)
    return getattr(getattr(getattr(torch.ops, ns), name), overload)


def fake_mode_of(graph: torch.fx.Graph) -> Any:
    """The fake mode of the graph's placeholder values; ``None`` if mixed or missing."""
    from torch._guards import detect_fake_mode

    vals = [n.meta["val"] for n in graph.find_nodes(op="placeholder") if "val" in n.meta]
    try:
        return detect_fake_mode(vals)
    except Exception:  # mixed or missing modes: new nodes get no meta
        return None


def compute(fake_mode: Any, node: torch.fx.Node) -> Any:
    """``node``'s value on its inputs' fake values; ``None`` when the graph
    or the node's first input carries none (missing metadata costs only
    precision).

    Raises:
        RuntimeError: the inputs have fake values and ``node`` fails on
            them. A node the rewrite inserted that torch refuses to run is a
            wrong rewrite, and left without a value it would also stop
            Inductor's later passes (``canonicalize_view_scatter_ops`` reads
            ``meta['val']`` of its inputs before any update): the applier
            rolls the whole rewrite back instead.
    """
    if fake_mode is None:
        return None
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda a: a.meta.get("val"))
    if args and args[0] is None:
        return None
    try:
        return fake_call(fake_mode, node.target, args, kwargs)
    except Exception as e:
        raise RuntimeError(
            f"the inserted node {node.format_node()} does not run on fake values: {type(e).__name__}: {e}"
        ) from e


def fake_call(fake_mode: Any, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``target(*args, **kwargs)`` on fake values, as fake propagation gives it.

    The views the rewrite inserts or re-points (slices, selects, ...) on
    static layouts run their meta kernel directly and are wrapped as fake
    tensors: what ``FakeTensorMode`` does for them, without its dispatch,
    cache-key and output-cache work (about 4x cheaper per call). Anything
    else, or anything symbolic, goes through the fake mode."""
    if target in _static_views() and _all_static(fake_mode, args, kwargs):
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        with in_kernel_invocation_manager(fake_mode):
            out = target(*args, **kwargs)
        # The meta outputs are fresh and dropped here: no converter memo.
        if isinstance(out, torch.Tensor):
            return FakeTensor(fake_mode, out, device)
        return type(out)(FakeTensor(fake_mode, o, device) for o in out)
    with fake_mode:
        return target(*args, **kwargs)


@functools.cache
def _static_views() -> frozenset[Any]:
    """The view operators ``fake_call`` runs on their meta kernel: each
    computes its output's layout from its input's alone, and returns views
    of it (no new storage, no data-dependent shape)."""
    a = torch.ops.aten
    return frozenset(
        {
            a.slice.Tensor,
            a.select.int,
            a.as_strided.default,
            a.view.default,
            a.view.dtype,
            a._reshape_alias.default,
            a.alias.default,
            a.t.default,
            a.transpose.int,
            a.permute.default,
            a.unsqueeze.default,
            a.squeeze.dim,
            a.expand.default,
            a.split.Tensor,
            a.split_with_sizes.default,
            a.unbind.int,
            a.narrow.default,
            a.diagonal.default,
            a.unfold.default,
        }
    )


def _all_static(fake_mode: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Every tensor argument is a plain fake tensor of ``fake_mode`` with
    integer sizes, strides and offset, every other argument holds no
    symbolic number, and at least one tensor is there."""
    seen_tensor = False
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            if (
                type(a) is not FakeTensor
                or a.fake_mode is not fake_mode
                or a.constant is not None
                or a.layout != torch.strided
            ):
                return False
            dims = (*a.shape, *a.stride(), a.storage_offset())
            if not all(type(d) is int for d in dims):
                return False
            seen_tensor = True
        elif isinstance(a, list | tuple):
            if not all(type(d) is int for d in a):
                return False
        elif a is not None and type(a) not in (int, bool, torch.dtype):
            return False
    return seen_tensor


#: The schema facts of an operator, read once per process: the pre pass asks
#: for them at every v2 node of every graph (only read, never changed).
_schema_facts = functools.cache(schema_facts)


def v2_written_views(node: torch.fx.Node, op: Any) -> dict[str, list[Any] | None] | None:
    """The written tensors of a v2 node ``node`` calling ``op``, by argument
    name, as the engine's own parser of the v2 encoding reads them
    (``_core.v2_written_views``: ``None`` for a ``None`` argument, else per
    tensor ``None`` or ``(label, base index, kind, keys)``). ``None`` when
    ``op`` has no schema or the keywords do not encode its arguments."""
    if getattr(op, "_schema", None) is None:
        return None
    try:
        return dict(_core.v2_written_views(_schema_facts(op), dict(node.kwargs)))
    except _core.InvalidGraphError:
        return None


#: One schema argument as ``eager_input_vals`` reads it: name, keyword-only,
#: written, a tensor list.
_ArgFacts = tuple[str, bool, bool, bool]


@functools.cache
def _arguments(op: Any) -> tuple[_ArgFacts, ...]:
    """The schema arguments of ``op``, read once per process: each read of
    ``op._schema.arguments`` builds new Python objects for every argument,
    and the applier asks at every direct call it inserts."""
    return tuple(
        (
            a.name,
            bool(a.kwarg_only),
            a.alias_info is not None and a.alias_info.is_write,
            isinstance(a.type, torch.ListType),
        )
        for a in op._schema.arguments
    )


def eager_input_vals(
    af: torch.fx.Node, op: Any, call: torch.fx.Node, written_views: dict[str, list[Any] | None] | None
) -> Any:
    """The ``eager_input_vals`` of the direct call that replaces ``af``: the
    fake values its arguments had in eager, read off ``af``'s own record
    (v1: the same arguments; v2: each written view cut again from its
    eager base). Inductor lowers a custom operator with exactly those
    strides (``constrain_to_fake_tensors``); without them it only keeps the
    stride order, and a kernel can see another stride on a size-1
    dimension than eager passed. ``written_views``: a v2 node's written
    tensors as the engine's parser read them off the graph the plan was
    made from (the shape ``v2_written_views`` returns), ``None`` for v1 or
    a v2 node it could not read. ``None`` when ``af`` has no record."""
    record = af.meta.get("eager_input_vals")
    schema = getattr(op, "_schema", None)
    if record is None or schema is None:
        return None
    _, eager = record
    kw: dict[str, Any] = dict(af.kwargs)  # arguments of any type, read by name
    v2 = "_all_bases" in kw
    if v2 and written_views is None:
        return None

    graph_bases = kw.get("_all_bases") or []
    same_base: dict[int, bool] = {}  # per base index: eager's layout is the graph's

    def view(slot: Any, actual: Any) -> Any:
        if slot is None:
            return None
        _label, index, kind, keys = slot
        bases = eager.get("_all_bases") or []
        if index >= len(bases) or bases[index] is None:
            return None
        base = bases[index]
        # Where eager's base has the layout the graph's base has, the view
        # cut from it has the layout of the call's own argument (the same
        # view of the graph's base, or its exact clone): no fake dispatch.
        if isinstance(actual, torch.fx.Node) and isinstance(actual.meta.get("val"), torch.Tensor):
            if index not in same_base:
                graph_base = graph_bases[index] if index < len(graph_bases) else None
                same_base[index] = isinstance(graph_base, torch.fx.Node) and _same_layout(
                    base, graph_base.meta.get("val")
                )
            if same_base[index]:
                return actual.meta["val"]
        if kind == "as_strided":
            target: Any = torch.ops.aten.as_strided.default
        elif kind == "slice":
            target = torch.ops.aten.slice.Tensor
        else:
            return base
        args = (base, *(kw[k] for k in keys))
        try:
            mode = getattr(base, "fake_mode", None)
            return target(*args) if mode is None else fake_call(mode, target, args, {})
        except Exception:  # no constraint rather than a wrong one
            return None

    def eager_of(a: _ArgFacts, actual: Any) -> Any:
        name, _, written, is_list = a
        if not (v2 and written):
            v = eager.get(name)
            return v if isinstance(v, torch.Tensor) or isinstance(v, list | tuple) else None
        slots = (written_views or {}).get(name)
        if slots is None:
            return None
        if not is_list:
            return view(slots[0], actual)
        items = (
            actual if isinstance(actual, list | tuple) and len(actual) == len(slots) else [None] * len(slots)
        )
        return [view(slot, item) for slot, item in zip(slots, items, strict=True)]

    args, kwargs = [], {}
    positional = iter(call.args)
    call_kwargs = call.kwargs
    for a in _arguments(op):
        if a[1]:
            if a[0] in call_kwargs:
                kwargs[a[0]] = eager_of(a, call_kwargs[a[0]])
        else:
            actual = next(positional, _MISSING)
            if actual is not _MISSING:
                args.append(eager_of(a, actual))
    return (tuple(args), kwargs)


def _same_layout(a: Any, b: Any) -> bool:
    """Whether two tensors have the same dtype, device, sizes, strides and
    storage offset; symbolic ones compared by their expression, since
    comparing SymInts would add guards. Called once per base of every
    rewritten v2 node: the all-integer case is compared without building
    keys."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    try:
        if a is b:
            # One value (the record holds the graph's own base): one layout.
            return a.layout == torch.strided
        if (
            a.dtype != b.dtype
            or a.device != b.device
            or a.layout != torch.strided
            or b.layout != torch.strided
        ):
            return False
        da = (*a.shape, *a.stride(), a.storage_offset())
        db = (*b.shape, *b.stride(), b.storage_offset())
        if len(da) != len(db):
            return False
        ints_a = all(type(d) is int for d in da)
        if ints_a != all(type(d) is int for d in db):
            return False
        return da == db if ints_a else tuple(map(str, da)) == tuple(map(str, db))
    except Exception:  # a subclass that refuses: no shortcut
        return False


def storage_of(v: Any) -> int | None:
    """Identity of a tensor value's storage (what fake propagation keeps for
    aliases); ``None`` for a non-tensor or a tensor without storage."""
    if not isinstance(v, torch.Tensor) or not torch._C._has_storage(v):
        return None
    try:
        return int(v.untyped_storage()._cdata)
    except Exception:  # a tensor subclass without storage: unknown
        return None


@functools.cache
def _returns_no_alias(target: Any) -> bool:
    """An operator overload none of whose returns is annotated as an alias
    of an input (a pointwise op, a reduction, a custom op: torch forbids a
    custom op to return its input): its value is fresh memory whatever its
    inputs, so ``refresh_views`` need not read its storage. ``getitem`` and
    anything without a schema may alias (a ``split``'s pieces): not these."""
    schema = getattr(target, "_schema", None)
    if not isinstance(target, torch._ops.OpOverload) or schema is None:
        return False
    return all(r.alias_info is None for r in schema.returns)


def refresh_views(repointed: list[tuple[Any, list[torch.fx.Node]]], fake_mode: Any) -> None:
    """Recomputes ``meta['val']`` of the views among re-pointed users (and
    their views, transitively): a user whose value shared the replaced node's
    storage is a view of it, and now views the replacement's memory.
    Inductor's later passes read aliasing from ``meta['val']``; other users'
    values (fresh tensors of unchanged shape) need nothing.

    Raises:
        RuntimeError: a view fails on its new input's fake value: the
            rewrite gave it an input it cannot view, a wrong rewrite. Every
            value changed so far is restored first, so that the applier's
            rollback leaves the graph exactly as it was.
    """
    if fake_mode is None:
        return
    changed: list[tuple[torch.fx.Node, Any]] = []
    try:
        for old_val, users in repointed:
            old_storage = storage_of(old_val)
            if old_storage is None:
                continue
            stack = list(users)
            seen: set[torch.fx.Node] = set()
            while stack:
                u = stack.pop()
                if u in seen or u.op != "call_function" or _returns_no_alias(u.target):
                    continue
                seen.add(u)
                val = u.meta.get("val")
                items = val if isinstance(val, list | tuple) else [val]
                if not any(storage_of(v) == old_storage for v in items):
                    continue
                args, kwargs = torch.fx.node.map_arg((u.args, u.kwargs), lambda a: a.meta.get("val"))
                try:
                    new_val = fake_call(fake_mode, u.target, args, kwargs)
                except Exception as e:
                    raise RuntimeError(
                        f"the view {u.format_node()} of a re-pointed value does not run on its new "
                        f"input's fake value: {type(e).__name__}: {e}"
                    ) from e
                changed.append((u, val))
                u.meta["val"] = new_val
                stack.extend(u.users)
    except BaseException:
        for u, val in reversed(changed):
            u.meta["val"] = val
        raise
