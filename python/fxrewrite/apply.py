"""Plan -> fx.Graph edits, all or nothing.

Every edit is prepared and checked before the graph changes: callables are
resolved, new nodes' ``meta['val']`` are computed on fake tensors, and the
edit list is simulated on use counts. Insertions, moves and replacements are
then applied with an undo log; erasures come last, only once every erased
node is known to be unused. Any failure restores the graph exactly.
"""

from __future__ import annotations

import contextlib
import operator
from typing import Any

import torch
import torch.fx

from ._core import InternalError
from .encode import Encoded

#: The node meta key that makes Inductor compute a node in a buffer of its own
#: at its place in the graph (``GraphLowering.run_node`` realizes it there),
#: instead of lazily inside a later user's kernel. ``Realize`` edits set it.
REALIZE_KEY = "inductor_realize_to_strides"

_OPERATORS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}


def _aten(qualname: str) -> Any:
    ns_name, overload = qualname.split(".", 1)
    ns, name = ns_name.split("::", 1)
    return getattr(getattr(getattr(torch.ops, ns), name), overload)


def _fake_mode(graph: torch.fx.Graph) -> Any:
    from torch._guards import detect_fake_mode

    vals = [n.meta["val"] for n in graph.find_nodes(op="placeholder") if "val" in n.meta]
    try:
        return detect_fake_mode(vals)
    except Exception:  # mixed or missing modes: new nodes get no meta
        return None


class _Prepared:
    __slots__ = ("args", "before", "callee", "id", "kwargs", "meta_val", "origin")

    def __init__(self) -> None:
        self.id = 0
        self.callee: Any = None
        self.args: tuple[Any, ...] = ()
        self.kwargs: dict[str, Any] = {}
        self.meta_val: Any = None
        self.origin: torch.fx.Node | None = None
        self.before: torch.fx.Node | None = None


def apply_plan(graph: torch.fx.Graph, enc: Encoded, plan: dict[str, Any]) -> None:
    """Applies ``plan`` (the engine's JSON plan) to ``graph``, which must be
    the graph ``enc`` was encoded from and unchanged since.

    Raises:
        InternalError: the plan does not fit the graph; the graph is unchanged.
    """
    nodes = enc.nodes
    edits: list[dict[str, Any]] = plan["edits"]
    new_nodes: list[torch.fx.Node | None] = [None] * int(plan["new_nodes"])
    prepared: dict[int, _Prepared] = {}
    fake_vals: dict[int, Any] = {}
    fake_mode = None
    fake_mode_looked_up = False

    def old(i: int) -> torch.fx.Node:
        if not 0 <= i < len(nodes):
            raise InternalError(f"plan refers to node {i} of a {len(nodes)}-node graph")
        return nodes[i]

    def fake_of(v: Any) -> Any:
        if isinstance(v, torch.fx.Node):
            return v.meta.get("val")
        if isinstance(v, _NewRef):
            return fake_vals.get(v.id)
        if isinstance(v, list | tuple):
            return type(v)(fake_of(x) for x in v)
        return v

    def arg(a: Any) -> Any:
        ((kind, body),) = a.items() if isinstance(a, dict) else (((a, None),))
        if kind == "Ref":
            return ref(body)
        if kind == "FromKwarg":
            n = old(body["node"])
            if body["key"] not in n.kwargs:
                raise InternalError(f"plan reads missing kwarg {body['key']!r} of {n.name}")
            return n.kwargs[body["key"]]
        if kind == "Int":
            return int(body)
        if kind == "IntList":
            return [int(x) for x in body]
        if kind == "None":
            return None
        if kind == "List":
            return [arg(x) for x in body]
        raise InternalError(f"unknown plan argument {a!r}")

    def ref(r: dict[str, Any]) -> Any:
        ((kind, i),) = r.items()
        if kind == "Old":
            return old(i)
        if i not in prepared:
            raise InternalError(f"plan uses new node {i} before creating it")
        return _NewRef(i)

    # 1. Prepare every insertion and check the edit list against use counts.
    users: dict[torch.fx.Node, int] = {}
    erased: set[torch.fx.Node] = set()

    def count(n: torch.fx.Node) -> int:
        if n not in users:
            users[n] = len(n.users)
        return users[n]

    for e in edits:
        ((kind, body),) = e.items()
        if kind == "Insert":
            p = _Prepared()
            p.id = body["id"]
            callee = body["callee"]
            if callee == "Getitem":
                p.callee = operator.getitem
            elif "Operator" in callee:
                p.callee = _OPERATORS[callee["Operator"]]
            elif "Target" in callee:
                p.callee = enc.targets[callee["Target"]]
            else:
                p.callee = _aten(callee["Aten"])
            p.args = tuple(arg(a) for a in body["args"])
            p.kwargs = {k: arg(v) for k, v in body["kwargs"]}
            p.before = old(body["before"])
            p.origin = old(body["origin"])
            prepared[p.id] = p
            p.meta_val = _meta_for(body["meta"], p, nodes, fake_of)
            if p.meta_val is _COMPUTE:
                if not fake_mode_looked_up:
                    fake_mode, fake_mode_looked_up = _fake_mode(graph), True
                p.meta_val = _compute(fake_mode, p, fake_of)
            fake_vals[p.id] = p.meta_val
        elif kind == "Replace":
            n = old(body["node"])
            target = ref(body["with"])
            if isinstance(target, torch.fx.Node):
                count(target)
                users[target] += count(n)
            users[n] = 0
        elif kind == "Erase":
            n = old(body["node"])
            if count(n) != 0:
                raise InternalError(f"plan erases {n.name} while it still has users")
            for inp in n.all_input_nodes:
                if inp not in erased:
                    users[inp] = count(inp) - 1
            erased.add(n)
        elif kind == "Move":
            old(body["node"])
            old(body["before"])
        elif kind == "Realize":
            old(body["node"])
        else:
            raise InternalError(f"unknown plan edit {kind}")

    # 2. Apply with an undo log.
    undo: list[Any] = []
    to_erase: list[torch.fx.Node] = []
    # (old value of a replaced node, the users moved to its replacement): the
    # views among them now view the replacement's memory.
    repointed: list[tuple[Any, list[torch.fx.Node]]] = []
    try:
        for e in edits:
            ((kind, body),) = e.items()
            if kind == "Insert":
                p = prepared[body["id"]]
                # Re-read pass-through kwargs now: earlier replacements may
                # have rewritten the original node's arguments since.
                args = _materialise(tuple(arg(a) for a in body["args"]), new_nodes)
                kwargs = _materialise({k: arg(v) for k, v in body["kwargs"]}, new_nodes)
                assert p.before is not None and p.origin is not None
                with graph.inserting_before(p.before):
                    created = graph.call_function(p.callee, args, kwargs)
                if p.meta_val is not None:
                    created.meta["val"] = p.meta_val
                if "Target" in body["callee"] and p.origin is not None:
                    eager = _eager_input_vals(p.origin, p.callee, created)
                    if eager is not None:
                        created.meta["eager_input_vals"] = eager
                trace = p.origin.meta.get("stack_trace")
                if trace is not None:
                    created.meta["stack_trace"] = trace
                new_nodes[p.id] = created
                undo.append(("insert", created))
            elif kind == "Move":
                n, before = old(body["node"]), old(body["before"])
                undo.append(("move", n, n.next))
                before.prepend(n)
            elif kind == "Realize":
                n = old(body["node"])
                undo.append(("meta", n, n.meta.get(REALIZE_KEY)))
                n.meta[REALIZE_KEY] = True
            elif kind == "Replace":
                n = old(body["node"])
                target = _materialise(ref(body["with"]), new_nodes)
                saved = [(u, u.args, u.kwargs) for u in list(n.users)]
                undo.append(("replace", saved))
                n.replace_all_uses_with(target)
                repointed.append((n.meta.get("val"), [u for u, _, _ in saved]))
            else:
                to_erase.append(old(body["node"]))
        doomed = set(to_erase)
        for n in to_erase:
            extra = [u for u in n.users if u not in doomed]
            if extra:
                raise InternalError(f"{n.name} is still used by {extra[0].name} after the plan")
    except BaseException:
        _rollback(graph, undo)
        raise
    # Plan order erases users before what they use.
    for n in to_erase:
        graph.erase_node(n)
    if repointed:
        if not fake_mode_looked_up:
            fake_mode = _fake_mode(graph)
        _refresh_views(repointed, fake_mode)


def _rollback(graph: torch.fx.Graph, undo: list[Any]) -> None:
    for entry in reversed(undo):
        if entry[0] == "replace":
            for u, args, kwargs in entry[1]:
                u.args = args
                u.kwargs = kwargs
        elif entry[0] == "move":
            _, n, nxt = entry
            nxt.prepend(n)
        elif entry[0] == "meta":
            _, n, previous = entry
            if previous is None:
                n.meta.pop(REALIZE_KEY, None)
            else:
                n.meta[REALIZE_KEY] = previous
        else:
            graph.erase_node(entry[1])


def _eager_input_vals(af: torch.fx.Node, op: Any, call: torch.fx.Node) -> Any:
    """The ``eager_input_vals`` of the direct call that replaces ``af``: the
    fake values its arguments had in eager, read off ``af``'s own record
    (v1: the same arguments; v2: each written view cut again from its
    eager base). Inductor lowers a custom operator with exactly those
    strides (``constrain_to_fake_tensors``); without them it only keeps the
    stride order, and a kernel can see another stride on a size-1
    dimension than eager passed. ``None`` when ``af`` has no record."""
    record = af.meta.get("eager_input_vals")
    schema = getattr(op, "_schema", None)
    if record is None or schema is None:
        return None
    _, eager = record
    v2 = "_all_bases" in af.kwargs

    def view(prefix: str) -> Any:
        bases = eager.get("_all_bases") or []
        index = af.kwargs.get(f"{prefix}_base_index")
        if index is None or index >= len(bases) or bases[index] is None:
            return None
        base, kw = bases[index], af.kwargs
        try:
            with getattr(base, "fake_mode", None) or contextlib.nullcontext():
                if f"{prefix}_storage_offset" in kw:
                    return base.as_strided(
                        kw[f"{prefix}_size"], kw[f"{prefix}_stride"], kw[f"{prefix}_storage_offset"]
                    )
                if f"{prefix}_slice_dim" in kw:
                    dim = kw[f"{prefix}_slice_dim"]
                    return torch.ops.aten.slice.Tensor(
                        base, dim, kw[f"{prefix}_slice_start"], kw[f"{prefix}_slice_end"]
                    )
                return base
        except Exception:  # no constraint rather than a wrong one
            return None

    def eager_of(a: Any) -> Any:
        written = a.alias_info is not None and a.alias_info.is_write
        if not (v2 and written):
            v = eager.get(a.name)
            return v if isinstance(v, torch.Tensor) or isinstance(v, list | tuple) else None
        length = af.kwargs.get(f"_{a.name}_length", -1)
        if length == -1:
            return view(f"_{a.name}")
        return None if length is None else [view(f"_{a.name}_{i}") for i in range(length)]

    args, kwargs = [], {}
    positional = iter(call.args)
    for a in schema.arguments:
        if a.kwarg_only:
            if a.name in call.kwargs:
                kwargs[a.name] = eager_of(a)
        elif next(positional, _MISSING) is not _MISSING:
            args.append(eager_of(a))
    return (tuple(args), kwargs)


def _storage_of(v: Any) -> int | None:
    if isinstance(v, torch.Tensor) and torch._C._has_storage(v):
        return int(v.untyped_storage()._cdata)
    return None


def _refresh_views(repointed: list[tuple[Any, list[torch.fx.Node]]], fake_mode: Any) -> None:
    """Recomputes ``meta['val']`` of the views among re-pointed users (and
    their views, transitively): a user whose value shared the replaced node's
    storage is a view of it, and now views the replacement's memory.
    Inductor's later passes read aliasing from ``meta['val']``; other users'
    values (fresh tensors of unchanged shape) need nothing."""
    if fake_mode is None:
        return
    for old_val, users in repointed:
        old_storage = _storage_of(old_val)
        if old_storage is None:
            continue
        stack = list(users)
        seen: set[torch.fx.Node] = set()
        while stack:
            u = stack.pop()
            if u in seen or u.op != "call_function":
                continue
            seen.add(u)
            val = u.meta.get("val")
            items = val if isinstance(val, list | tuple) else [val]
            if not any(_storage_of(v) == old_storage for v in items):
                continue
            args, kwargs = torch.fx.node.map_arg((u.args, u.kwargs), lambda a: a.meta.get("val"))
            try:
                with fake_mode:
                    u.meta["val"] = u.target(*args, **kwargs)
            except Exception:  # best effort: Inductor's own update recomputes it
                u.meta.pop("val", None)
                continue
            stack.extend(u.users)


class _NewRef:
    __slots__ = ("id",)

    def __init__(self, i: int) -> None:
        self.id = i


_COMPUTE = object()
_MISSING = object()


def _meta_for(meta: Any, p: _Prepared, nodes: list[torch.fx.Node], fake_of: Any) -> Any:
    if meta == "Compute":
        return _COMPUTE
    if meta == "Nothing":
        return None
    ((kind, body),) = meta.items()
    val = nodes[body["node"]].meta.get("val")
    if val is None:
        return None
    if kind == "AfOutput":
        idx = body["index"]
        if idx is None:
            return val
        return val[idx] if isinstance(val, list | tuple) and idx < len(val) else None
    if kind == "AfOutputs":
        return tuple(val[body["start"] : body["end"]]) if isinstance(val, list | tuple) else None
    return None


def _compute(fake_mode: Any, p: _Prepared, fake_of: Any) -> Any:
    if fake_mode is None:
        return None
    args = fake_of(list(p.args))
    kwargs = {k: fake_of(v) for k, v in p.kwargs.items()}
    if any(a is None for a in args[:1]):
        return None
    try:
        with fake_mode:
            return p.callee(*args, **kwargs)
    except Exception:  # metadata is best effort; the rewrite never depends on it
        return None


def _materialise(v: Any, new_nodes: list[torch.fx.Node | None]) -> Any:
    if isinstance(v, _NewRef):
        n = new_nodes[v.id]
        if n is None:
            raise InternalError(f"new node {v.id} used before it was created")
        return n
    if isinstance(v, list):
        return [_materialise(x, new_nodes) for x in v]
    if isinstance(v, tuple):
        return tuple(_materialise(x, new_nodes) for x in v)
    if isinstance(v, dict):
        return {k: _materialise(x, new_nodes) for k, x in v.items()}
    return v
