"""fx.Graph -> the compact IR tuples that ``fxrewrite._core.Graph.from_parts`` reads.

One pass over the nodes. Layout (the Rust side, ``rust/python/convert.rs``,
is the only consumer):

- ``targets``: ``(name, kind, schema)`` per distinct callable, kind one of
  ``WIRE_CODES["target_kind"]`` (operator overload, getitem, the two
  auto_functionalized forms, another higher-order operator, anything else);
  schema is ``None`` or ``(args, returns, tag_bits)`` with args
  ``(name, type_code, alias_set | None, is_write, kwarg_only)`` and returns
  ``(type_code, alias_set | None, is_write)``.
- ``nodes``: ``(opcode, name, target_index, args, kwargs, meta, source)``.
- values: ``None``/bool/int/float/str as themselves, everything else as a
  tagged pair ``(tag, payload)`` with a tag of ``WIRE_CODES["value_tag"]``
  (node index, list, tuple, dtype, device, layout, memory format, target
  index, opaque ``repr``).

Every code comes from ``fxrewrite._core.WIRE_CODES``, the one table
(``rust/ir/wire.rs``).

Correctness never depends on ``meta['val']``: it only sharpens the engine's
proofs (ranks, static sizes, storage identity) and the byte counts of reports.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2

from ._core import USER_ALIASED_READS as USER_ALIASED_KWARG
from ._core import WIRE_CODES

# The wire codes: one table, in Rust (``rust/ir/wire.rs``).
OPCODES: dict[str, int] = dict(WIRE_CODES["opcode"])
_TAG = WIRE_CODES["value_tag"]
_T_NODE, _T_LIST, _T_TUPLE = _TAG["node"], _TAG["list"], _TAG["tuple"]
_T_DTYPE, _T_DEVICE, _T_LAYOUT = _TAG["dtype"], _TAG["device"], _TAG["layout"]
_T_MEMFMT, _T_TARGET, _T_OPAQUE = _TAG["memory_format"], _TAG["target"], _TAG["opaque"]
_ARG = WIRE_CODES["arg_type"]
_ARG_TENSOR, _ARG_OPT_TENSOR = _ARG["tensor"], _ARG["optional_tensor"]
_ARG_TENSOR_LIST, _ARG_OTHER = _ARG["tensor_list"], _ARG["other"]
_KIND = WIRE_CODES["target_kind"]
_BIT = WIRE_CODES["tag_bit"]


def _type_code(t: Any) -> int:
    if isinstance(t, torch.TensorType):
        return _ARG_TENSOR
    if isinstance(t, torch.OptionalType) and isinstance(t.getElementType(), torch.TensorType):
        return _ARG_OPT_TENSOR
    if isinstance(t, torch.ListType):
        elem = t.getElementType()
        if isinstance(elem, torch.TensorType) or (
            isinstance(elem, torch.OptionalType) and isinstance(elem.getElementType(), torch.TensorType)
        ):
            return _ARG_TENSOR_LIST
    return _ARG_OTHER


def _alias(a: Any) -> tuple[str | None, bool]:
    info = a.alias_info
    if info is None:
        return None, False
    # `Tensor(a -> *) self` of list-returning views: the returns carry `*`,
    # so the set an argument is matched by is the one after the arrow.
    sets = sorted(info.after_set) or sorted(info.before_set)
    return (sets[0] if sets else "*"), bool(info.is_write)


def op_name(op: torch._ops.OpOverload) -> str:
    """Qualified ``ns::name.overload`` of an operator overload."""
    return f"{op._schema.name}.{op._overloadname}"


def schema_facts(op: torch._ops.OpOverload) -> tuple[list[Any], list[Any], int]:
    """The schema facts the engine needs, read once per operator."""
    s = op._schema
    args = []
    for a in s.arguments:
        aset, write = _alias(a)
        args.append((a.name, _type_code(a.type), aset, write, bool(a.kwarg_only)))
    rets = []
    for r in s.returns:
        aset, write = _alias(r)
        rets.append((_type_code(r.type), aset, write))
    tags = op.tags
    bits = (
        (_BIT["out"] if torch.Tag.out in tags else 0)
        | (_BIT["inplace"] if torch.Tag.inplace in tags else 0)
        | (_BIT["nondeterministic_seeded"] if torch.Tag.nondeterministic_seeded in tags else 0)
    )
    return args, rets, bits


def _source_line(trace: str | None) -> str | None:
    """``file:line: code`` of the innermost user frame of a stack trace."""
    if not trace:
        return None
    lines = trace.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].strip()
        if line.startswith('File "'):
            try:
                path, rest = line[6:].split('", line ', 1)
                lineno = rest.split(",", 1)[0]
            except ValueError:
                return line
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return f"{path}:{lineno}: {code}"
    return lines[-1].strip() if lines else None


class Encoded:
    """The encoded graph plus what ``apply`` needs to map the plan back:
    the FX nodes by index and the callables by target index."""

    __slots__ = ("nodes", "parts", "targets")

    def __init__(
        self, parts: tuple[list[Any], list[Any]], nodes: list[torch.fx.Node], targets: list[Any]
    ) -> None:
        self.parts = parts
        self.nodes = nodes
        self.targets = targets


def _meta(val: Any) -> tuple[Any, ...] | None:
    if not isinstance(val, torch.Tensor):
        return None
    try:
        shape = [int(d) for d in val.shape] if all(isinstance(d, int) for d in val.shape) else None
        stride = None
        offset = None
        if val.layout == torch.strided:
            st = val.stride()
            stride = [int(d) for d in st] if all(isinstance(d, int) for d in st) else None
            off = val.storage_offset()
            offset = int(off) if isinstance(off, int) else None
        storage = None
        if torch._C._has_storage(val):
            storage = int(val.untyped_storage()._cdata) & 0xFFFF_FFFF_FFFF_FFFF
        return (
            str(val.dtype).removeprefix("torch."),
            val.dim(),
            shape,
            stride,
            offset,
            val.element_size(),
            storage,
            str(val.device),
        )
    except Exception:  # metadata is optional; a tensor subclass may refuse any of these
        return None


def encode(
    graph: torch.fx.Graph, *, with_sources: bool = False, with_meta: bool = True, meta_mode: str = "all"
) -> Encoded:
    """Encodes ``graph`` in one pass. ``with_sources`` keeps each node's user
    source line (for saved graphs); the pass leaves it off and looks sources
    up only for the nodes a report names."""
    index: dict[torch.fx.Node, int] = {}
    target_ids: dict[Any, int] = {}
    targets: list[Any] = []
    target_objs: list[Any] = []
    nodes_out: list[Any] = []
    fx_nodes: list[torch.fx.Node] = []

    def intern(obj: Any, op: str) -> int:
        key = (op, obj) if isinstance(obj, str) else obj
        try:
            tid = target_ids.get(key)
        except TypeError:  # unhashable callable
            key = ("id", id(obj))
            tid = target_ids.get(key)
        if tid is not None:
            return tid
        if isinstance(obj, torch._ops.OpOverload):
            desc = (op_name(obj), _KIND["operator"], schema_facts(obj))
        elif obj is operator.getitem:
            desc = ("operator.getitem", _KIND["getitem"], None)
        elif obj is auto_functionalized:
            desc = ("higher_order.auto_functionalized", _KIND["auto_functionalized"], None)
        elif obj is auto_functionalized_v2:
            desc = ("higher_order.auto_functionalized_v2", _KIND["auto_functionalized_v2"], None)
        elif isinstance(obj, torch._ops.HigherOrderOperator):
            desc = (f"higher_order.{obj.name()}", _KIND["higher_order"], None)
        elif isinstance(obj, str):
            desc = (obj, _KIND["other"], None)
        else:
            name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
            desc = (name, _KIND["other"], None)
        tid = len(targets)
        targets.append(desc)
        target_objs.append(obj)
        target_ids[key] = tid
        return tid

    dtype_t, device_t, layout_t, memfmt_t = torch.dtype, torch.device, torch.layout, torch.memory_format
    node_t = torch.fx.Node
    opov_t = torch._ops.OpOverload
    hop_t = torch._ops.HigherOrderOperator

    def value(v: Any) -> Any:
        if v is None or v.__class__ in (bool, int, float, str):
            return v
        if isinstance(v, node_t):
            return (_T_NODE, index[v])
        if isinstance(v, list):
            return (_T_LIST, [value(x) for x in v])
        if isinstance(v, tuple):
            return (_T_TUPLE, [value(x) for x in v])
        if isinstance(v, dtype_t):
            return (_T_DTYPE, str(v).removeprefix("torch."))
        if isinstance(v, device_t):
            return (_T_DEVICE, str(v))
        if isinstance(v, layout_t):
            return (_T_LAYOUT, str(v).removeprefix("torch."))
        if isinstance(v, memfmt_t):
            return (_T_MEMFMT, str(v).removeprefix("torch."))
        if isinstance(v, opov_t | hop_t):
            return (_T_TARGET, intern(v, "call_function"))
        if isinstance(v, bool | int | float | str):
            return v
        return (_T_OPAQUE, repr(v))

    # Tensor metadata is slow to read off fake tensors (tens of microseconds a
    # node), so ``meta="operands"`` reads it only for the nodes the engine
    # consults it on: operands of views, scatters, write-backs and
    # auto_functionalized nodes. Saved graphs keep all of it.
    all_meta = with_meta and meta_mode == "all"
    some_meta = with_meta and meta_mode == "operands"
    wants: list[bool] = []  # per target: do its nodes' operands need metadata?
    needed: list[int] = []
    for i, n in enumerate(graph.nodes):
        index[n] = i
        fx_nodes.append(n)
        op = n.op
        meta = n.meta
        tid = intern(n.target, op)
        kwargs = tuple((k, value(v)) for k, v in n.kwargs.items())
        if USER_ALIASED_META in meta:
            kwargs += _user_aliased_reads(n)
        if some_meta and op == "call_function":
            while len(wants) <= tid:
                wants.append(_operands_need_meta(target_objs[len(wants)]))
            if wants[tid]:
                needed.extend(index[a] for a in n.all_input_nodes)
        nodes_out.append(
            (
                OPCODES[op],
                n.name,
                tid,
                tuple(value(a) for a in n.args),
                kwargs,
                _meta(meta.get("val")) if all_meta else None,
                _source_line(meta.get("stack_trace")) if with_sources else None,
            )
        )
    for i in set(needed):
        t = nodes_out[i]
        nodes_out[i] = (*t[:5], _meta(fx_nodes[i].meta.get("val")), t[6])
    return Encoded((targets, nodes_out), fx_nodes, target_objs)


#: The pre pass's ``node.meta`` key (``fxrewrite.pre_pass``), and the IR-only
#: keyword that carries it to the engine (``rust/forms/call.rs``).
USER_ALIASED_META = "fxrewrite_user_aliased_reads"


def _user_aliased_reads(n: torch.fx.Node) -> tuple[tuple[str, Any], ...]:
    """The read arguments the pre pass saw aliased with a written one and
    that still hold the same nodes; a later pass that changed an argument
    voids its record."""
    names = []
    for arg, recorded in n.meta[USER_ALIASED_META].items():
        value = n.kwargs.get(arg)
        nodes = value if isinstance(value, list | tuple) else [value]
        if tuple(getattr(x, "name", None) for x in nodes) == tuple(recorded):
            names.append(arg)
    return ((USER_ALIASED_KWARG, (_T_LIST, names)),) if names else ()


def _operands_need_meta(target: Any) -> bool:
    if target in (auto_functionalized, auto_functionalized_v2):
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    s = target._schema
    return s.name.endswith("_scatter") or any(a.alias_info is not None for a in s.arguments)


def is_auto_functionalized(node: torch.fx.Node) -> bool:
    """True for ``auto_functionalized`` and ``auto_functionalized_v2`` nodes."""
    return node.op == "call_function" and node.target in (auto_functionalized, auto_functionalized_v2)


def count_auto_functionalized(graph: torch.fx.Graph) -> int:
    """Number of auto_functionalized(_v2) nodes in ``graph``."""
    return sum(1 for n in graph.nodes if is_auto_functionalized(n))
