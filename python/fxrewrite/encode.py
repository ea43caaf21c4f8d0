"""fx.Graph -> the IR: ``encode`` hands the live graph to Rust, which reads it
in one walk over its nodes (``rust/python/fx_reader.rs``). The functions
here are what only torch knows, asked once per distinct callable
(``describe_target``) or once per node whose tensor metadata the engine
reads (``tensor_meta``).

Correctness never depends on ``meta['val']``: it only sharpens the engine's
proofs (ranks, static sizes, storage identity) and the byte counts of reports.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from . import _core
from ._core import WIRE_CODES

# The wire codes: one table, in Rust (``rust/ir/wire.rs``).
_ARG = WIRE_CODES["arg_type"]
_ARG_TENSOR, _ARG_OPT_TENSOR = _ARG["tensor"], _ARG["optional_tensor"]
_ARG_TENSOR_LIST, _ARG_OTHER = _ARG["tensor_list"], _ARG["other"]
_KIND = WIRE_CODES["target_kind"]


def _auto_functionalized_operators() -> dict[Any, tuple[str, int]]:
    """The higher-order operators that functionalize a mutating call (one
    per form the engine reads: ``rust/ir/mod.rs``'s ``AUTO_FUNCTIONALIZED``),
    by object: their name and kind code. One this torch lacks is skipped."""
    found: dict[Any, tuple[str, int]] = {}
    for name, code in WIRE_CODES["auto_functionalized_operators"].items():
        try:
            op = getattr(torch.ops.higher_order, name)
        except AttributeError:  # a form newer than this torch
            continue
        found[op] = (f"higher_order.{name}", code)
    return found


#: The auto_functionalized operators of this torch: ``{operator: (name, kind code)}``.
AUTO_FUNCTIONALIZED = _auto_functionalized_operators()


def _auto_functionalized_entry(obj: Any) -> tuple[str, int] | None:
    """``AUTO_FUNCTIONALIZED``'s entry for ``obj``, found by identity (no
    ``__eq__`` or ``__hash__`` of an arbitrary callable target is run)."""
    for op, entry in AUTO_FUNCTIONALIZED.items():
        if obj is op:
            return entry
    return None


_BIT = WIRE_CODES["tag_bit"]

# The tags the engine reads, as (wire bit, tag). ``torch.Tag.out`` and
# ``torch.Tag.inplace`` are newer than the oldest torch supported (2.11 and
# 2.8 have neither): an operator cannot carry a tag its torch lacks, so a
# missing one is simply never set. Without ``out`` torch's v2 form does not
# give out= operators the fresh-buffer encoding either, so the engine reads
# them as ordinary mutations, which is what they are then.
_TAGS = tuple(
    (_BIT[name], tag)
    for name, tag in (
        (name, getattr(torch.Tag, name, None)) for name in ("out", "inplace", "nondeterministic_seeded")
    )
    if tag is not None
)


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
    bits = 0
    for bit, tag in _TAGS:
        if tag in tags:
            bits |= bit
    return args, rets, bits


def source_line(trace: str | None) -> str | None:
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
    """The graph in Rust plus what the applier needs to map a plan back:
    the FX nodes by index and the callables by target index."""

    __slots__ = ("native", "nodes", "targets")

    def __init__(self, native: _core.Graph, nodes: list[torch.fx.Node], targets: list[Any]) -> None:
        self.native = native
        self.nodes = nodes
        self.targets = targets


def describe_target(obj: Any) -> tuple[str, int, Any]:
    """``(name, kind, schema facts or None)`` of a node's target."""
    if isinstance(obj, torch._ops.OpOverload):
        return (op_name(obj), _KIND["operator"], schema_facts(obj))
    if obj is operator.getitem:
        return ("operator.getitem", _KIND["getitem"], None)
    af = _auto_functionalized_entry(obj)
    if af is not None:
        return (af[0], af[1], None)
    if isinstance(obj, torch._ops.HigherOrderOperator):
        hop: Any = obj  # HigherOrderOperator.name is untyped
        return (f"higher_order.{hop.name()}", _KIND["higher_order"], None)
    if isinstance(obj, str):
        return (obj, _KIND["other"], None)
    name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
    return (name, _KIND["other"], None)


def tensor_meta(val: Any) -> tuple[Any, ...] | None:
    """``(dtype, sizes, strides, offset, itemsize, storage, device)`` of a
    tensor value, ``None`` for a non-tensor. Each size, stride and the offset
    is an ``int``, or the ``str`` of its symbolic expression (``s0``,
    ``64*s0``): a graph compiled for a symbolic token count keeps its other
    dimensions as numbers. ``strides`` and ``offset`` are ``None`` for a
    tensor that is not strided.

    The reader calls it for every operand the engine consults (thousands of
    nodes on a large graph), so it reads each fact once and names dtypes and
    devices from a cache."""
    if not isinstance(val, torch.Tensor):
        return None
    try:
        sizes = _dims(val.shape)
        strides = None
        offset = None
        if val.layout == torch.strided:
            strides = _dims(val.stride())
            offset = _dim(val.storage_offset())
        storage = None
        if torch._C._has_storage(val):
            storage = val.untyped_storage()._cdata & 0xFFFF_FFFF_FFFF_FFFF
        dtype = _DTYPE_NAMES.get(val.dtype)
        if dtype is None:
            dtype = _DTYPE_NAMES[val.dtype] = (str(val.dtype).removeprefix("torch."), val.element_size())
        device = _DEVICE_NAMES.get(val.device)
        if device is None:
            device = _DEVICE_NAMES[val.device] = str(val.device)
        return (dtype[0], sizes, strides, offset, dtype[1], storage, device)
    except Exception:  # metadata is optional; a tensor subclass may refuse any of these
        return None


def _dims(dims: Any) -> tuple[int | str, ...]:
    if all(type(d) is int for d in dims):  # the common case: no symbol at all
        return tuple(dims)
    return tuple(_dim(d) for d in dims)


def _dim(d: Any) -> int | str:
    """A size, stride or offset: its number, or its expression's text. A
    SymInt is never turned into an ``int`` (that would add a guard
    specializing the graph); one whose expression is a number is read as
    that number."""
    if type(d) is int:
        return d
    expr = d.node.expr
    if getattr(expr, "is_number", False) and getattr(expr, "is_integer", False):
        return int(expr)
    return str(expr)


_DTYPE_NAMES: dict[torch.dtype, tuple[str, int]] = {}
_DEVICE_NAMES: dict[torch.device, str] = {}


def encode(
    graph: torch.fx.Graph, *, with_sources: bool = False, with_meta: bool = True, meta_mode: str = "all"
) -> Encoded:
    """Reads ``graph`` into Rust in one walk. ``with_sources`` keeps each
    node's user source line (for saved graphs); the pass leaves it off and
    looks sources up only for the nodes a report names. ``meta_mode``
    ``"operands"`` reads tensor metadata only where the engine consults it
    (operands of views, scatters, write-backs and auto_functionalized nodes):
    it is slow to read off fake tensors, tens of microseconds a node."""
    meta = meta_mode if with_meta else "none"
    native, nodes, targets = _core.Graph.from_fx(graph, meta=meta, sources=with_sources)
    return Encoded(native, nodes, targets)


#: The pre pass's ``node.meta`` key (``fxrewrite.pre_pass``): the alias
#: groups of an auto_functionalized node, a tuple of tuples of slot labels.
#: The reader carries it to the engine as the IR-only keyword
#: ``_core.ALIAS_GROUPS``.
ALIAS_GROUPS_META = "fxrewrite_alias_groups"


#: Metadata key under which ``fxrewrite.pre_pass`` records the slots of an
#: auto_functionalized node whose memory was the whole result of a
#: ``clone`` (a tuple of slot labels). The reader carries it to the engine
#: as the IR-only keyword ``_core.FRESH_SLOTS``.
FRESH_SLOTS_META = "fxrewrite_fresh_slots"


def fresh_slots(n: torch.fx.Node) -> list[str]:
    """The slots the pre pass recorded as a clone's own result on ``n``
    (empty when there is none or the record is malformed)."""
    record = n.meta.get(FRESH_SLOTS_META)
    if not isinstance(record, list | tuple) or not all(isinstance(s, str) for s in record):
        return []
    return list(record)


def alias_groups(n: torch.fx.Node) -> list[list[str]] | None:
    """The alias groups the pre pass recorded on ``n``, or None when the
    record is not a tuple of tuples of labels (then nothing is attributed)."""
    record = n.meta.get(ALIAS_GROUPS_META)
    if not isinstance(record, list | tuple):
        return None
    groups = []
    for g in record:
        if not isinstance(g, list | tuple) or not all(isinstance(s, str) for s in g):
            return None
        groups.append(list(g))
    return groups


def operands_need_meta(target: Any) -> bool:
    """Whether the engine reads the tensor metadata of a node's operands."""
    if _auto_functionalized_entry(target) is not None:
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target is torch.ops.aten.sym_storage_offset.default:
        # A v2 view given by `sym_storage_offset(x)`: the engine passes `x`
        # itself once its layout matches (engine/written_args.rs).
        return True
    s = target._schema
    return s.name.endswith("_scatter") or any(a.alias_info is not None for a in s.arguments)


def is_auto_functionalized(node: torch.fx.Node) -> bool:
    """True for ``auto_functionalized`` and ``auto_functionalized_v2`` nodes."""
    return node.op == "call_function" and _auto_functionalized_entry(node.target) is not None


def count_auto_functionalized(graph: torch.fx.Graph) -> int:
    """Number of auto_functionalized(_v2) nodes in ``graph``."""
    return sum(1 for n in graph.nodes if is_auto_functionalized(n))
