"""Random straight-line programs over mutating custom operators.

A program is plain data (``Program``: input shapes and layouts, a tuple of
step tuples and the outputs) so that hypothesis can shrink it and a failing
example prints as something one can paste back into a test. ``run(program,
inputs)`` is the interpreter; it is what eager mode executes and what
``torch.compile`` traces. ``Program.source()`` renders the program as the
Python function it stands for.

Variables are numbered in order of creation: ``x0 .. x{n-1}`` are the float
inputs, every step that creates tensors appends them (``v{n}``, ``v{n+1}``,
...). The int64 index tensor used by ``fill_rows_`` is always the last input
(``idx``) and is not a variable.

Inputs are float32 tensors of ``shapes``; ``input_layouts`` (empty: all
contiguous) gives each one's memory layout: ``"c"`` contiguous, ``"t"``
stored transposed (dims 0 and 1 swapped in memory), ``"w"`` cut from a wider
buffer (``base[..., 1:1 + n]`` of a base three elements wider in the last
dim, so non-contiguous with a storage offset).

Steps (the first element names the kind):

- creating an intermediate: ``("binop", op, a, b)`` with op in add/sub/mul,
  ``("out_add", a, b)`` (``empty_like(a)`` then the out= op ``add_into``),
  ``("clone", a)``, ``("reshape", a, shape)`` (a view or a copy, as eager
  decides), ``("acc_sum", x, y)`` (mutates x, returns a fresh tensor),
  ``("stack", (a, ...), dim)``, ``("cat", (a, ...), dim)``;
- taking views: ``("slice", a, dim, start, end)`` (size-1 and empty slices
  included), ``("select", a, dim, i)``, ``("split", a, dim, size,
  n_chunks)`` (one variable per chunk), ``("transpose", a)`` (dims 0 and 1),
  ``("view", a, shape)``, ``("unsqueeze", a, dim)``;
- mutating: ``("scale_", x, s)``, ``("add_into", out, a, b)``,
  ``("fused_add_", x, res, w)``, ``("rot_", q, k, c)``,
  ``("fill_rows_", x, value)``, ``("maybe_", x, y_or_None)``,
  ``("list_scale_", (x, ...), s)``;
- reading: ``("unary", op, a)`` with op in mul2/neg/sum0/sum/add1 and the
  layout-changing readers tcontig (``a.transpose(0, 1).contiguous()``),
  treshape (``a.transpose(0, 1).reshape(-1)``), contig (``a.contiguous()``),
  f64 / f32 (``a.to(torch.float64)`` and back). A reader whose result is
  the same memory (``contiguous()`` of a contiguous tensor) is a view.

Any tensor may be written: graph inputs (torch then writes them back with
``copy_``), intermediates and views of either.

Every operator also takes ``site`` (the index of its step; ``run`` passes
it) and reports the size, stride and storage offset of each tensor argument
to ``layouts.REGISTRY``: eager records them, a compiled run is checked
against them, as a kernel that reads raw strides would need.

The generator favours the shapes of code that break a re-inplacing pass:
the "old reader" pattern (a reader of a tensor, then a write of that tensor
or of an alias, then a later user of the reader's result: a view, a slice, a
pointwise op, a reduction, stack/cat, another custom op, or the output),
size-1 dims cut from wider buffers (``view`` to 3 dims then a width-1
slice), transposed and unsqueezed views.

Outputs are ``("direct", v)`` (v returned as is: v does not share memory
with an input, so the post-grad graph returns it as is) or ``("plus", v)``
(``v + 0.5``: a fresh value read at the end). This keeps the post-grad
graph's outputs one-to-one with the program's.

By default the generator never passes overlapping memory as two *written*
arguments of one call (the result would depend on the kernel's write order,
which functionalization does not model). A read argument may alias a written
one (those kernels compute their results before writing them), but is drawn
disjoint from the written ones three times out of four.

``programs(sharing=True)`` adds the shapes of issue 21: one memory in several
slots of one call, written and read. Its steps are ``("dview", a)``
(``a.view(torch.int32)``), ``("unbind", a, dim, n)`` and calls of kernels
that write in sequence and read an argument *after* writing another:
``("two_", a, b, c)`` (``a += 1; a += c; b *= 2``), ``("norm_out", out, x,
w)`` (divides by ``x.abs().max()`` after writing ``out``), ``("out_aux", x,
out, aux)`` (keywords ``out=``/``aux=``) and ``("bits_list_", (a, ...))``
(a list whose int32 members get their sign bit flipped, float members
scaled, in list order). Their arguments are a base and its aliases: a view
of the same shape (what ``remove_noop_ops`` deletes), full and partial
slices, selects, unbind parts, dtype views, transposes, or the user's clone
(the pytorch#198031 shape). Such a call's result depends on exactly the
sharing its arguments have, so comparing with eager checks that the
compiled call saw eager's sharing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from layouts import REGISTRY

# ---------------------------------------------------------------------------
# Custom operators (namespace fxr_rand). Every kernel computes all new values
# before it writes any of them, and reports its arguments' layouts.

_LIB = "fxr_rand"


def _seen(site: int, **tensors: torch.Tensor | None) -> None:
    for i, (name, t) in enumerate(tensors.items()):
        if t is not None:
            REGISTRY.seen(site, i, name, t)


@torch.library.custom_op(f"{_LIB}::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, s: float, site: int) -> None:
    _seen(site, x=x)
    x.mul_(s)


@torch.library.custom_op(f"{_LIB}::add_into", mutates_args=("out",))
def add_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, site: int) -> None:
    _seen(site, out=out, a=a, b=b)
    out.copy_(a + b)


@torch.library.custom_op(f"{_LIB}::fused_add_", mutates_args=("x", "res"))
def fused_add_(x: torch.Tensor, res: torch.Tensor, w: torch.Tensor, site: int) -> None:
    _seen(site, x=x, res=res, w=w)
    new_res = x + res
    new_x = new_res * w
    res.copy_(new_res)
    x.copy_(new_x)


@torch.library.custom_op(f"{_LIB}::rot_", mutates_args=("q", "k"))
def rot_(q: torch.Tensor, k: torch.Tensor, c: torch.Tensor, site: int) -> None:
    _seen(site, q=q, k=k, c=c)
    new_q = q * 2 + k.sum() - c.sum()
    new_k = -k + q.sum()
    q.copy_(new_q)
    k.copy_(new_k)


@torch.library.custom_op(f"{_LIB}::fill_rows_", mutates_args=("x",))
def fill_rows_(x: torch.Tensor, idx: torch.Tensor, value: float, site: int) -> None:
    _seen(site, x=x)
    x.index_fill_(0, idx.remainder(x.shape[0]), value)


@torch.library.custom_op(f"{_LIB}::acc_sum", mutates_args=("x",))
def acc_sum(x: torch.Tensor, y: torch.Tensor, site: int) -> torch.Tensor:
    _seen(site, x=x, y=y)
    r = x + y
    x.copy_(r)
    return (r * 2).contiguous()


@acc_sum.register_fake
def _(x: torch.Tensor, y: torch.Tensor, site: int) -> torch.Tensor:
    return x.new_empty(x.shape)


@torch.library.custom_op(f"{_LIB}::maybe_", mutates_args=("x", "y"))
def maybe_(x: torch.Tensor, y: torch.Tensor | None, site: int) -> None:
    _seen(site, x=x, y=y)
    new_x = x + 1
    if y is not None:
        new_y = y * 2 + x.sum()
        y.copy_(new_y)
    x.copy_(new_x)


@torch.library.custom_op(f"{_LIB}::list_scale_", mutates_args=("xs",))
def list_scale_(xs: list[torch.Tensor], s: float, site: int) -> None:
    _seen(site, **{f"xs[{i}]": x for i, x in enumerate(xs)})
    for x in xs:
        x.mul_(s)


# Kernels of the sharing steps: they write in sequence and read an argument
# after writing another, so a call whose arguments share memory gives what
# eager gives only if the compiled call sees exactly eager's sharing.


@torch.library.custom_op(f"{_LIB}::two_", mutates_args=("a", "b"))
def two_(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, site: int) -> None:
    _seen(site, a=a, b=b, c=c)
    a.add_(1)
    a.add_(c)
    b.mul_(2)


@torch.library.custom_op(f"{_LIB}::norm_out", mutates_args=("out",))
def norm_out(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, site: int) -> None:
    _seen(site, out=out, x=x, w=w)
    out.copy_(x * w)
    out.div_(x.abs().amax() + 1)


@torch.library.custom_op(f"{_LIB}::out_aux", mutates_args=("out", "aux"))
def out_aux(x: torch.Tensor, site: int, out: torch.Tensor, aux: torch.Tensor) -> None:
    # Called with out= and aux= as keywords (custom_op refuses keyword-only tensors).

    _seen(site, x=x, out=out, aux=aux)
    out.copy_(x + 1)
    aux.add_(out)


@torch.library.custom_op(f"{_LIB}::bits_list_", mutates_args=("xs",))
def bits_list_(xs: list[torch.Tensor], site: int) -> None:
    """Float members are scaled by -2, int32 members (dtype views of float
    memory) get their sign bit flipped, in list order."""
    _seen(site, **{f"xs[{i}]": x for i, x in enumerate(xs)})
    for x in xs:
        if x.dtype == torch.int32:
            x.bitwise_xor_(-(2**31))
        else:
            x.mul_(-2.0)


OPS = torch.ops.fxr_rand

DISCARDED: list[str] = []
"""Programs (``repr``) a test could not judge because Inductor alone is
wrong on them too; pytest's summary lists how many (see conftest.py)."""

# ---------------------------------------------------------------------------
# Programs as data.

Step = tuple[Any, ...]

SCALES = (2.0, -1.0, 0.5)
FILL_VALUES = (7.0, -3.0)
INDEX_VALUES = (2, 0)
BINOPS = ("add", "sub", "mul")
UNARY = ("mul2", "neg", "sum0", "sum", "add1", "tcontig", "treshape", "contig", "f64", "f32")
INPUT_SHAPES = ((4, 8), (4, 8), (8, 4), (2, 4, 8), (8,), (4, 1, 8), (1, 8))
INPUT_LAYOUTS = ("c", "t", "w")

_UNARY_SRC = {
    "mul2": "{a} * 2",
    "neg": "-{a}",
    "sum0": "{a}.sum(0)",
    "sum": "{a}.sum()",
    "add1": "{a} + 1",
    "tcontig": "{a}.transpose(0, 1).contiguous()",
    "treshape": "{a}.transpose(0, 1).reshape(-1)",
    "contig": "{a}.contiguous()",
    "f64": "{a}.to(torch.float64)",
    "f32": "{a}.to(torch.float32)",
}


def unary(op: str, a: torch.Tensor) -> torch.Tensor:
    if op == "mul2":
        return a * 2
    if op == "neg":
        return -a
    if op == "sum0":
        return a.sum(0)
    if op == "sum":
        return a.sum()
    if op == "add1":
        return a + 1
    if op == "tcontig":
        return a.transpose(0, 1).contiguous()
    if op == "treshape":
        return a.transpose(0, 1).reshape(-1)
    if op == "contig":
        return a.contiguous()
    if op == "f64":
        return a.to(torch.float64)
    if op == "f32":
        return a.to(torch.float32)
    raise ValueError(f"unknown unary op {op!r}")


def unary_applies(op: str, a: torch.Tensor) -> bool:
    if op == "sum0":
        return a.dim() >= 1
    if op in ("tcontig", "treshape"):
        return a.dim() >= 2
    if op == "f64":
        return a.dtype == torch.float32
    if op == "f32":
        return a.dtype == torch.float64
    return True


def input_base(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """The shape of the buffer an input of ``layout`` is a view of."""
    if layout == "t":
        return (shape[1], shape[0], *shape[2:])
    if layout == "w":
        return (*shape[:-1], shape[-1] + 3)
    return shape


def input_view(base: torch.Tensor, shape: tuple[int, ...], layout: str) -> torch.Tensor:
    if layout == "t":
        return base.transpose(0, 1)
    if layout == "w":
        return base.narrow(-1, 1, shape[-1])
    return base


def layouts_for(shape: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(x for x in INPUT_LAYOUTS if (x != "t" or len(shape) >= 2) and (x != "w" or len(shape) >= 1))


@dataclass(frozen=True)
class Program:
    """Input shapes, steps and outputs; ``repr`` is valid Python."""

    shapes: tuple[tuple[int, ...], ...]
    steps: tuple[Step, ...]
    outputs: tuple[tuple[str, int], ...]
    seed: int = 0
    input_layouts: tuple[str, ...] = ()

    def layout(self, i: int) -> str:
        return self.input_layouts[i] if self.input_layouts else "c"

    def source(self) -> str:
        """The program as the Python function it stands for."""
        n = len(self.shapes)
        names = [f"x{i}" for i in range(n)]

        def new() -> str:
            names.append(f"v{len(names)}")
            return names[-1]

        args = ", ".join(names) + ", idx"
        lay = {"c": "", "t": " stored transposed", "w": " cut from a wider buffer"}
        shapes = ", ".join(f"x{i}: {tuple(s)}{lay[self.layout(i)]}" for i, s in enumerate(self.shapes))
        lines = [f"def f({args}):  # {shapes}, idx = tensor({list(INDEX_VALUES)}), seed {self.seed}"]
        for site, step in enumerate(self.steps):
            lines.append("    " + _step_source(step, site, names, new))
        outs = []
        for kind, v in self.outputs:
            outs.append(names[v] if kind == "direct" else f"{names[v]} + 0.5")
        lines.append("    return " + ", ".join(outs))
        return "\n".join(lines)


def _step_source(step: Step, site: int, names: list[str], new: Any) -> str:
    kind = step[0]
    nm = names.__getitem__
    at = f"site={site}"
    if kind == "binop":
        sym = {"add": "+", "sub": "-", "mul": "*"}[step[1]]
        a, b = nm(step[2]), nm(step[3])
        return f"{new()} = {a} {sym} {b}"
    if kind == "out_add":
        a, b = nm(step[1]), nm(step[2])
        v = new()
        return f"{v} = torch.empty_like({a}); add_into({v}, {a}, {b}, {at})"
    if kind == "clone":
        a = nm(step[1])
        return f"{new()} = {a}.clone()"
    if kind == "reshape":
        a = nm(step[1])
        return f"{new()} = {a}.reshape{tuple(step[2])}"
    if kind == "view":
        a = nm(step[1])
        return f"{new()} = {a}.view{tuple(step[2])}"
    if kind == "acc_sum":
        x, y = nm(step[1]), nm(step[2])
        return f"{new()} = acc_sum({x}, {y}, {at})"
    if kind in ("stack", "cat"):
        xs = ", ".join(nm(v) for v in step[1])
        return f"{new()} = torch.{kind}([{xs}], {step[2]})"
    if kind == "slice":
        _, a, dim, lo, hi = step
        a = nm(a)
        sl = ", ".join([":"] * dim + [f"{lo}:{hi}"])
        return f"{new()} = {a}[{sl}]"
    if kind == "select":
        _, a, dim, i = step
        a = nm(a)
        return f"{new()} = {a}.select({dim}, {i})"
    if kind == "split":
        _, a, dim, size, count = step
        a = nm(a)
        outs = ", ".join(new() for _ in range(count))
        return f"{outs}, = {a}.split({size}, {dim})"
    if kind == "transpose":
        a = nm(step[1])
        return f"{new()} = {a}.transpose(0, 1)"
    if kind == "unsqueeze":
        a = nm(step[1])
        return f"{new()} = {a}.unsqueeze({step[2]})"
    if kind == "scale_":
        return f"scale_({nm(step[1])}, {step[2]}, {at})"
    if kind == "add_into":
        return f"add_into({nm(step[1])}, {nm(step[2])}, {nm(step[3])}, {at})"
    if kind == "fused_add_":
        return f"fused_add_({nm(step[1])}, {nm(step[2])}, {nm(step[3])}, {at})"
    if kind == "rot_":
        return f"rot_({nm(step[1])}, {nm(step[2])}, {nm(step[3])}, {at})"
    if kind == "fill_rows_":
        return f"fill_rows_({nm(step[1])}, idx, {step[2]}, {at})"
    if kind == "maybe_":
        y = "None" if step[2] is None else nm(step[2])
        return f"maybe_({nm(step[1])}, {y}, {at})"
    if kind == "list_scale_":
        xs = ", ".join(nm(v) for v in step[1])
        return f"list_scale_([{xs}], {step[2]}, {at})"
    if kind == "unary":
        a = nm(step[2])
        return f"{new()} = " + _UNARY_SRC[step[1]].format(a=a)
    if kind == "dview":
        return f"{new()} = {nm(step[1])}.view(torch.int32)"
    if kind == "unbind":
        _, a, dim, count = step
        outs = ", ".join(new() for _ in range(count))
        return f"{outs}, = {nm(a)}.unbind({dim})"
    if kind == "two_":
        return f"two_({nm(step[1])}, {nm(step[2])}, {nm(step[3])}, {at})"
    if kind == "norm_out":
        return f"norm_out({nm(step[1])}, {nm(step[2])}, {nm(step[3])}, {at})"
    if kind == "out_aux":
        return f"out_aux({nm(step[1])}, {at}, out={nm(step[2])}, aux={nm(step[3])})"
    if kind == "bits_list_":
        xs = ", ".join(nm(v) for v in step[1])
        return f"bits_list_([{xs}], {at})"
    raise ValueError(f"unknown step {step!r}")


# Where each kind of step keeps its variables: positions of single variables
# and of tuples of variables (``maybe_``'s ``y`` may be None).
_VAR_FIELDS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "binop": ((2, 3), ()),
    "out_add": ((1, 2), ()),
    "clone": ((1,), ()),
    "reshape": ((1,), ()),
    "view": ((1,), ()),
    "acc_sum": ((1, 2), ()),
    "stack": ((), (1,)),
    "cat": ((), (1,)),
    "slice": ((1,), ()),
    "select": ((1,), ()),
    "split": ((1,), ()),
    "transpose": ((1,), ()),
    "unsqueeze": ((1,), ()),
    "scale_": ((1,), ()),
    "add_into": ((1, 2, 3), ()),
    "fused_add_": ((1, 2, 3), ()),
    "rot_": ((1, 2, 3), ()),
    "fill_rows_": ((1,), ()),
    "maybe_": ((1, 2), ()),
    "list_scale_": ((), (1,)),
    "unary": ((2,), ()),
    "dview": ((1,), ()),
    "unbind": ((1,), ()),
    "two_": ((1, 2, 3), ()),
    "norm_out": ((1, 2, 3), ()),
    "out_aux": ((1, 2, 3), ()),
    "bits_list_": ((), (1,)),
}


def created(step: Step) -> int:
    """How many variables ``step`` creates."""
    kind = step[0]
    if kind == "split":
        return int(step[4])
    if kind == "unbind":
        return int(step[3])
    if kind in _MUTATE or kind in _SHARING_CALLS:
        return 0
    return 1


def map_vars(step: Step, f: Any) -> Step:
    """``step`` with every variable ``v`` replaced by ``f(v)``."""
    singles, tuples = _VAR_FIELDS[step[0]]
    out = list(step)
    for i in singles:
        if out[i] is not None:
            out[i] = f(out[i])
    for i in tuples:
        out[i] = tuple(f(v) for v in out[i])
    return tuple(out)


def without_step(program: Program, i: int) -> Program | None:
    """``program`` without its step ``i``; None when a later step or an
    output uses a variable that step creates."""
    first = len(program.shapes) + sum(created(s) for s in program.steps[:i])
    n = created(program.steps[i])

    class _Used(Exception):
        pass

    def f(v: int) -> int:
        if first <= v < first + n:
            raise _Used
        return v - n if v >= first + n else v

    try:
        steps = program.steps[:i] + tuple(map_vars(s, f) for s in program.steps[i + 1 :])
        outputs = tuple((k, f(v)) for k, v in program.outputs)
    except _Used:
        return None
    return Program(program.shapes, steps, outputs, program.seed, program.input_layouts)


# ---------------------------------------------------------------------------
# The interpreter.


def make_inputs(program: Program) -> list[torch.Tensor]:
    """The float inputs (small non-zero integers, so all arithmetic is exact)
    in their layouts, followed by the index tensor."""
    g = torch.Generator().manual_seed(program.seed)
    xs = []
    for i, shape in enumerate(program.shapes):
        layout = program.layout(i)
        base_shape = input_base(shape, layout)
        mag = torch.randint(1, 4, base_shape, generator=g)
        sign = torch.randint(0, 2, base_shape, generator=g) * 2 - 1
        xs.append(input_view((mag * sign).to(torch.float32), shape, layout))
    xs.append(torch.tensor(INDEX_VALUES, dtype=torch.int64))
    return xs


def run(program: Program, inputs: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Executes ``program`` on ``inputs`` (as made by ``make_inputs``)."""
    env: list[torch.Tensor] = list(inputs[:-1])
    idx = inputs[-1]
    for site, step in enumerate(program.steps):
        kind = step[0]
        if kind == "binop":
            a, b = env[step[2]], env[step[3]]
            op = step[1]
            if op == "add":
                env.append(a + b)
            elif op == "sub":
                env.append(a - b)
            else:
                env.append(a * b)
        elif kind == "out_add":
            a, b = env[step[1]], env[step[2]]
            out = torch.empty_like(a)
            OPS.add_into(out, a, b, site)
            env.append(out)
        elif kind == "clone":
            env.append(env[step[1]].clone())
        elif kind == "reshape":
            env.append(env[step[1]].reshape(step[2]))
        elif kind == "view":
            env.append(env[step[1]].view(step[2]))
        elif kind == "acc_sum":
            env.append(OPS.acc_sum(env[step[1]], env[step[2]], site))
        elif kind == "stack":
            env.append(torch.stack([env[v] for v in step[1]], step[2]))
        elif kind == "cat":
            env.append(torch.cat([env[v] for v in step[1]], step[2]))
        elif kind == "slice":
            _, a, dim, lo, hi = step
            env.append(env[a].narrow(dim, lo, hi - lo))
        elif kind == "select":
            env.append(env[step[1]].select(step[2], step[3]))
        elif kind == "split":
            _, a, dim, size, _count = step
            env.extend(env[a].split(size, dim))  # type: ignore[no-untyped-call]
        elif kind == "transpose":
            env.append(env[step[1]].transpose(0, 1))
        elif kind == "unsqueeze":
            env.append(env[step[1]].unsqueeze(step[2]))
        elif kind == "scale_":
            OPS.scale_(env[step[1]], step[2], site)
        elif kind == "add_into":
            OPS.add_into(env[step[1]], env[step[2]], env[step[3]], site)
        elif kind == "fused_add_":
            OPS.fused_add_(env[step[1]], env[step[2]], env[step[3]], site)
        elif kind == "rot_":
            OPS.rot_(env[step[1]], env[step[2]], env[step[3]], site)
        elif kind == "fill_rows_":
            OPS.fill_rows_(env[step[1]], idx, step[2], site)
        elif kind == "maybe_":
            OPS.maybe_(env[step[1]], None if step[2] is None else env[step[2]], site)
        elif kind == "list_scale_":
            OPS.list_scale_([env[v] for v in step[1]], step[2], site)
        elif kind == "unary":
            env.append(unary(step[1], env[step[2]]))
        elif kind == "dview":
            env.append(env[step[1]].view(torch.int32))
        elif kind == "unbind":
            env.extend(env[step[1]].unbind(step[2]))
        elif kind == "two_":
            OPS.two_(env[step[1]], env[step[2]], env[step[3]], site)
        elif kind == "norm_out":
            OPS.norm_out(env[step[1]], env[step[2]], env[step[3]], site)
        elif kind == "out_aux":
            OPS.out_aux(env[step[1]], site, out=env[step[2]], aux=env[step[3]])
        elif kind == "bits_list_":
            OPS.bits_list_([env[v] for v in step[1]], site)
        else:
            raise ValueError(f"unknown step {step!r}")
    outs = []
    for kind, v in program.outputs:
        outs.append(env[v] if kind == "direct" else env[v] + 0.5)
    return tuple(outs)


# ---------------------------------------------------------------------------
# The generator. It runs every step that creates a tensor on a "shadow": a
# real tensor with the layout the real one will have, whose elements name
# their storage cells uniquely, so shapes, layouts, viewability and overlap
# are read off the shadows.


def _root(shape: tuple[int, ...] | torch.Size) -> torch.Tensor:
    n = 1
    for s in shape:
        n *= s
    return torch.arange(n, dtype=torch.float32).reshape(tuple(shape))


class _Shadows:
    def __init__(self, shapes: tuple[tuple[int, ...], ...], layouts: tuple[str, ...]) -> None:
        self.t: list[torch.Tensor] = [
            input_view(_root(input_base(s, lay)), s, lay) for s, lay in zip(shapes, layouts, strict=True)
        ]
        self.inputs = {self.storage(v) for v in range(len(self.t))}
        self.fresh: set[int] = set()

    def __len__(self) -> int:
        return len(self.t)

    def storage(self, v: int) -> int:
        return self.t[v].untyped_storage().data_ptr()

    def cells(self, v: int) -> set[float]:
        t = self.t[v]
        if t.dtype == torch.int32:  # a dtype view of float32 cells: name them as floats
            t = t.view(torch.float32)
        return set(t.reshape(-1).tolist())

    def plain(self) -> list[int]:
        """The variables ordinary steps may use: not the int32 dtype views
        (only the sharing calls take those)."""
        return [v for v in range(len(self.t)) if self.t[v].dtype != torch.int32]

    def overlap(self, a: int, b: int) -> bool:
        if self.storage(a) != self.storage(b):
            return False
        return bool(self.cells(a) & self.cells(b))

    def aliases_input(self, v: int) -> bool:
        return self.storage(v) in self.inputs

    def add(self, t: torch.Tensor) -> int:
        self.t.append(t)
        return len(self.t) - 1

    def add_fresh(self, t: torch.Tensor) -> int:
        """A new tensor with the layout of ``t`` (as the real op made it)."""
        v = self.add(t.copy_(_root(t.shape)))
        self.fresh.add(v)
        return v

    def add_result(self, t: torch.Tensor, *sources: int) -> int:
        """``t`` computed from ``sources``: a view when it shares memory with one."""
        ptr = t.untyped_storage().data_ptr()
        if any(self.storage(s) == ptr for s in sources):
            return self.add(t)
        return self.add_fresh(t)


_CREATE = ("binop", "out_add", "clone", "reshape", "acc_sum", "stack", "cat")
_VIEW = ("slice", "select", "split", "transpose", "view", "unsqueeze")
_MUTATE = (
    "scale_",
    "add_into",
    "fused_add_",
    "rot_",
    "fill_rows_",
    "maybe_",
    "list_scale_",
)
# Mutations are listed more than once to make them frequent; "unary" first so
# that shrinking turns steps into plain reads. "old_reader" is the pattern of
# three steps described in the module docstring.
STEP_KINDS = (
    "unary",
    "old_reader",
    *_CREATE,
    *_VIEW,
    *_MUTATE,
    *_MUTATE,
    "scale_",
    "slice",
    "select",
    "old_reader",
    "old_reader",
)
# What uses the result of an old reader after the write ("op_read": a read
# argument of another custom op; "output": returned).
_USER_KINDS = (
    "unary",
    "output",
    "binop",
    "view",
    "reshape",
    "slice",
    "select",
    "transpose",
    "unsqueeze",
    "stack",
    "cat",
    "op_read",
    "scale_",
    "acc_sum",
)


def _pick(draw: Any, candidates: list[int], *, prefer_recent: bool = False) -> int:
    if prefer_recent:
        # Index 0 is the most recent: shrinking moves towards it.
        i = draw(st.integers(0, len(candidates) - 1))
        return candidates[len(candidates) - 1 - int(i)]
    return int(draw(st.sampled_from(candidates)))


def _same_shape(sh: _Shadows, v: int) -> list[int]:
    t = sh.t[v]
    return [u for u in range(len(sh)) if sh.t[u].shape == t.shape and sh.t[u].dtype == t.dtype]


def _disjoint_from(sh: _Shadows, cands: list[int], written: list[int]) -> list[int]:
    return [u for u in cands if not any(sh.overlap(u, w) for w in written)]


def _read_arg(draw: Any, sh: _Shadows, cands: list[int], written: list[int]) -> int:
    """A read argument of a mutating call: usually disjoint from the written
    ones (an alias forces a clone, so it would hide the interesting cases)."""
    disjoint = _disjoint_from(sh, cands, written)
    if disjoint and draw(st.integers(0, 3)) != 3:
        return int(draw(st.sampled_from(disjoint)))
    return int(draw(st.sampled_from(cands)))


def _view_shapes(t: torch.Tensor) -> list[tuple[int, ...]]:
    """Shapes to view or reshape ``t`` as: flat, dims 0 and 1 swapped, two
    rows, the last dim split in two, a size-1 dim inserted."""
    n = t.numel()
    shapes: list[tuple[int, ...]] = [(n,)]
    if t.dim() >= 2:
        shapes.append((t.shape[1], t.shape[0], *t.shape[2:]))
    if n % 2 == 0 and n > 2:
        shapes.append((2, n // 2))
    if t.dim() >= 1 and t.shape[-1] % 2 == 0 and t.shape[-1] >= 2:
        shapes.append((*t.shape[:-1], 2, t.shape[-1] // 2))
    if t.dim() >= 1:
        shapes.append((t.shape[0], 1, *t.shape[1:]))
    return shapes


def _draw_step(draw: Any, sh: _Shadows, kind: str, target: int | None = None) -> Step | None:
    """One step of ``kind``; its first operand is ``target`` when given (the
    written one for a mutation). None when the kind does not apply."""
    allv = sh.plain()

    def first(cands: list[int], *, prefer_recent: bool = True) -> int | None:
        if target is not None:
            return target if target in cands else None
        if not cands:
            return None
        return _pick(draw, cands, prefer_recent=prefer_recent)

    if kind == "unary":
        a = first(allv)
        if a is None:
            return None
        ops = [op for op in UNARY if unary_applies(op, sh.t[a])]
        op = draw(st.sampled_from(ops))
        sh.add_result(unary(op, sh.t[a]), a)
        return ("unary", op, a)
    if kind == "binop":
        a = first(allv)
        if a is None:
            return None
        b = draw(st.sampled_from(_same_shape(sh, a)))
        op = draw(st.sampled_from(BINOPS))
        sh.add_fresh(sh.t[a] + sh.t[b])
        return ("binop", op, a, b)
    if kind == "out_add":
        a = first(allv)
        if a is None:
            return None
        b = draw(st.sampled_from(_same_shape(sh, a)))
        sh.add_fresh(torch.empty_like(sh.t[a]))
        return ("out_add", a, b)
    if kind == "clone":
        a = first(allv)
        if a is None:
            return None
        sh.add_fresh(sh.t[a].clone())
        return ("clone", a)
    if kind in ("stack", "cat"):
        a = first(allv if kind == "stack" else [v for v in allv if sh.t[v].dim() >= 1])
        if a is None:
            return None
        others = draw(st.lists(st.sampled_from(_same_shape(sh, a)), min_size=1, max_size=2))
        parts = (a, *others)
        dim = draw(st.integers(0, sh.t[a].dim() - (kind == "cat")))
        fn = torch.stack if kind == "stack" else torch.cat
        sh.add_fresh(fn([sh.t[v] for v in parts], dim))
        return (kind, parts, dim)
    if kind in ("reshape", "view"):
        a = first(allv)
        if a is None:
            return None
        t = sh.t[a]
        shapes = _view_shapes(t)
        if kind == "view":
            ok = []
            for s in shapes:
                try:
                    t.view(s)
                except RuntimeError:
                    continue
                ok.append(s)
            shapes = ok
            if not shapes:
                return None
        s = draw(st.sampled_from(shapes))
        sh.add_result(t.reshape(s), a)
        return (kind, a, tuple(s))
    if kind == "acc_sum":
        x = first(allv)
        if x is None:
            return None
        y = _read_arg(draw, sh, _same_shape(sh, x), [x])
        sh.add_fresh(torch.empty(sh.t[x].shape, dtype=sh.t[x].dtype))
        return ("acc_sum", x, y)
    if kind in ("slice", "select", "split"):
        least = {"slice": 1, "select": 1, "split": 2}[kind]
        cands = [v for v in allv if any(s >= least for s in sh.t[v].shape)]
        a = first(cands, prefer_recent=False)
        if a is None:
            return None
        t = sh.t[a]
        dims = [d for d in range(t.dim()) if t.shape[d] >= least]
        dim = draw(st.sampled_from(dims))
        size = t.shape[dim]
        if kind == "slice":
            lo = draw(st.integers(0, size - 1))
            width = draw(st.integers(0, 15))
            if width == 15:  # empty
                hi = lo
            elif width >= 11:  # size 1
                hi = lo + 1
            else:
                hi = draw(st.integers(lo + 1, size))
            sh.add(t.narrow(dim, lo, hi - lo))
            return ("slice", a, dim, lo, hi)
        if kind == "select":
            i = draw(st.integers(0, size - 1))
            sh.add(t.select(dim, i))
            return ("select", a, dim, i)
        chunk = draw(st.integers(1, size - 1))
        parts = t.split(chunk, dim)  # type: ignore[no-untyped-call]
        for p in parts:
            sh.add(p)
        return ("split", a, dim, chunk, len(parts))
    if kind == "transpose":
        a = first([v for v in allv if sh.t[v].dim() >= 2], prefer_recent=False)
        if a is None:
            return None
        sh.add(sh.t[a].transpose(0, 1))
        return ("transpose", a)
    if kind == "unsqueeze":
        a = first(allv, prefer_recent=False)
        if a is None:
            return None
        dim = draw(st.integers(0, sh.t[a].dim()))
        sh.add(sh.t[a].unsqueeze(dim))
        return ("unsqueeze", a, dim)
    if kind == "scale_":
        x = first(allv, prefer_recent=False)
        if x is None:
            return None
        return ("scale_", x, draw(st.sampled_from(SCALES)))
    if kind == "add_into":
        out = first(allv, prefer_recent=False)
        if out is None:
            return None
        same = _same_shape(sh, out)
        return ("add_into", out, _read_arg(draw, sh, same, [out]), _read_arg(draw, sh, same, [out]))
    if kind == "fused_add_":
        x = first(allv, prefer_recent=False)
        if x is None:
            return None
        res_c = _disjoint_from(sh, _same_shape(sh, x), [x])
        if not res_c:
            return None
        res = draw(st.sampled_from(res_c))
        w = _read_arg(draw, sh, _same_shape(sh, x), [x, res])
        return ("fused_add_", x, res, w)
    if kind == "rot_":
        q = first(allv, prefer_recent=False)
        if q is None:
            return None
        k_c = _disjoint_from(sh, allv, [q])
        if not k_c:
            return None
        # Prefer a k in q's storage (two written views of one base).
        same_storage = [u for u in k_c if sh.storage(u) == sh.storage(q)]
        if same_storage and draw(st.booleans()):
            k = draw(st.sampled_from(same_storage))
        else:
            k = draw(st.sampled_from(k_c))
        return ("rot_", q, k, _read_arg(draw, sh, allv, [q, k]))
    if kind == "fill_rows_":
        x = first([v for v in allv if sh.t[v].dim() >= 1 and sh.t[v].shape[0] >= 1], prefer_recent=False)
        if x is None:
            return None
        return ("fill_rows_", x, draw(st.sampled_from(FILL_VALUES)))
    if kind == "maybe_":
        x = first(allv, prefer_recent=False)
        if x is None:
            return None
        y_c = _disjoint_from(sh, allv, [x])
        if not y_c or not draw(st.booleans()):
            return ("maybe_", x, None)
        return ("maybe_", x, draw(st.sampled_from(y_c)))
    if kind == "list_scale_":
        n = draw(st.integers(1, 3))
        xs: list[int] = [] if target is None else [target]
        while len(xs) < n:
            c = _disjoint_from(sh, [u for u in allv if u not in xs], xs)
            if not c:
                break
            xs.append(draw(st.sampled_from(c)))
        return ("list_scale_", tuple(xs), draw(st.sampled_from(SCALES)))
    raise ValueError(kind)


def _draw_old_reader(draw: Any, sh: _Shadows, outputs: list[int]) -> list[Step]:
    """A reader of x, a write of x or of memory overlapping it, then a user
    of the reader's result (or the result is returned: appended to
    ``outputs``)."""
    allv = sh.plain()
    x = _pick(draw, allv, prefer_recent=True)
    step = _draw_step(draw, sh, "unary", target=x)
    assert step is not None
    steps = [step]
    r = len(sh) - 1
    aliases = [x] + [u for u in sh.plain() if u != x and u != r and sh.overlap(u, x)]
    w = draw(st.sampled_from(aliases))
    write = _draw_step(draw, sh, draw(st.sampled_from(_MUTATE)), target=w)
    steps.append(write if write is not None else ("scale_", w, draw(st.sampled_from(SCALES))))
    user_kind = draw(st.sampled_from(_USER_KINDS))
    user: Step | None = None
    if user_kind == "op_read":
        # r read by another custom op: written into a buffer that is not r.
        same = _disjoint_from(sh, _same_shape(sh, r), [r])
        if same:
            user = ("add_into", draw(st.sampled_from(same)), r, draw(st.sampled_from(_same_shape(sh, r))))
        else:
            user = _draw_step(draw, sh, "out_add", target=r)
    elif user_kind != "output":
        user = _draw_step(draw, sh, user_kind, target=r)
    if user is None:
        outputs.append(r)
    else:
        steps.append(user)
        if draw(st.integers(0, 3)) == 0:
            outputs.append(len(sh) - 1)
    return steps


_SHARING_CALLS = ("two_", "norm_out", "out_aux", "bits_list_")


def _alias_of(draw: Any, sh: _Shadows, x: int) -> Step | None:
    """A new view of ``x`` (or the user's clone of it) that a sharing call
    may pass beside ``x``: a view of the same shape (which Inductor's
    ``remove_noop_ops`` deletes), a full or partial slice, a select, the
    parts of an unbind, an int32 dtype view, a transpose."""
    t = sh.t[x]
    kind = draw(
        st.sampled_from(
            ("same_view", "full_slice", "slice", "select", "unbind", "dview", "clone", "transpose")
        )
    )
    if kind == "same_view":
        sh.add(t.view(t.shape))
        return ("view", x, tuple(t.shape))
    if kind == "clone":
        sh.add_fresh(t.clone())
        return ("clone", x)
    if kind == "dview":
        if t.dtype != torch.float32:
            return None
        sh.add(t.view(torch.int32))
        return ("dview", x)
    if kind == "transpose":
        if t.dim() < 2:
            return None
        sh.add(t.transpose(0, 1))
        return ("transpose", x)
    dims = [d for d in range(t.dim()) if t.shape[d] >= 1]
    if not dims:
        return None
    dim = draw(st.sampled_from(dims))
    size = t.shape[dim]
    if kind == "full_slice":
        sh.add(t.narrow(dim, 0, size))
        return ("slice", x, dim, 0, size)
    if kind == "slice":
        # Partial slices of one width at nearby starts overlap each other.
        width = draw(st.integers(1, size))
        lo = draw(st.integers(0, size - width))
        sh.add(t.narrow(dim, lo, width))
        return ("slice", x, dim, lo, lo + width)
    if kind == "select":
        i = draw(st.integers(0, size - 1))
        sh.add(t.select(dim, i))
        return ("select", x, dim, i)
    if size > 4:
        return None
    for part in t.unbind(dim):
        sh.add(part)
    return ("unbind", x, dim, size)


def _prefer(draw: Any, preferred: list[int], others: list[int]) -> int:
    """One of ``preferred`` three times out of four (when there are any)."""
    if preferred and (not others or draw(st.integers(0, 3)) != 3):
        return int(draw(st.sampled_from(preferred)))
    return int(draw(st.sampled_from(others or preferred)))


def _draw_shared_call(draw: Any, sh: _Shadows) -> list[Step]:
    """One memory in several slots of one call: a base, views of it (or a
    clone), then a call of a kernel that writes in sequence and reads after
    writing, given the base and its aliases in its written and read slots, in
    lists and keyword arguments."""
    cands = [v for v in sh.plain() if sh.t[v].dtype == torch.float32 and sh.t[v].numel() >= 1]
    if not cands:
        return []
    x = _pick(draw, cands, prefer_recent=True)
    steps: list[Step] = []
    for _ in range(draw(st.integers(0, 3))):
        src = _pick(
            draw, [x] + [v for v in range(len(sh)) if v > x and sh.overlap(v, x)], prefer_recent=False
        )
        step = _alias_of(draw, sh, src) if sh.t[src].dtype == torch.float32 else None
        if step is not None:
            steps.append(step)
    group = [v for v in range(len(sh)) if sh.t[v].numel() >= 1 and (v == x or sh.overlap(v, x))]
    group += [v for v in range(len(sh)) if v > x and v not in group and sh.t[v].numel() >= 1]  # the clones
    kind = draw(st.sampled_from(_SHARING_CALLS))
    if kind == "bits_list_":
        n = draw(st.integers(2, 4))
        others = [v for v in range(len(sh)) if sh.t[v].numel() >= 0]
        members = tuple(_prefer(draw, group, others) for _ in range(n))
        steps.append(("bits_list_", members))
        return steps
    floats = [v for v in group if sh.t[v].dtype.is_floating_point]
    if not floats:
        return steps
    first = int(draw(st.sampled_from(floats)))
    same = [v for v in _same_shape(sh, first) if sh.t[v].numel() >= 1]
    near = [v for v in same if v == first or sh.overlap(v, first) or v in group]
    second = _prefer(draw, near, same)
    third = _prefer(draw, near, same)
    if kind == "two_":
        steps.append(("two_", first, second, third))
    elif kind == "norm_out":
        steps.append(("norm_out", first, second, third))
    else:
        steps.append(("out_aux", third, first, second))
    return steps


def _draw_qkv_rotary(draw: Any, sh: _Shadows) -> list[Step]:
    """vLLM's attention block: ``qkv`` from an out= call, split along its
    last dimension, a rotary writing two of the splits in place, then
    ``qkv`` split again for the readers (in v1 the rotary's writes come back
    as scatters into ``qkv``, read through the second split)."""
    cands = [
        v for v in sh.plain() if sh.t[v].dim() >= 2 and sh.t[v].shape[-1] % 2 == 0 and sh.t[v].numel() >= 1
    ]
    if not cands:
        return []
    a = _pick(draw, cands, prefer_recent=True)
    b = int(draw(st.sampled_from(_same_shape(sh, a))))
    qkv = sh.add_fresh(torch.empty_like(sh.t[a]))
    steps: list[Step] = [("out_add", a, b)]
    dim = sh.t[qkv].dim() - 1
    size = sh.t[qkv].shape[-1] // 2 if draw(st.booleans()) else max(1, sh.t[qkv].shape[-1] // 4)
    count = -(-sh.t[qkv].shape[-1] // size)
    first_part = len(sh)
    for part in sh.t[qkv].split(size, dim):
        sh.add(part)
    steps.append(("split", qkv, dim, size, count))
    c = int(draw(st.sampled_from(sh.plain())))
    steps.append(("rot_", first_part, first_part + 1, c))
    again = len(sh)
    for part in sh.t[qkv].split(size, dim):
        sh.add(part)
    steps.append(("split", qkv, dim, size, count))
    reader = _draw_step(draw, sh, "unary", target=again + int(draw(st.integers(0, count - 1))))
    if reader is not None:
        steps.append(reader)
    return steps


def _draw_scatter_then_writeback(draw: Any, sh: _Shadows) -> list[Step]:
    """A graph input written through a row or column (a scatter into its
    new value), the new value read (realizing the scatter), then the input
    written again as a whole (its write-back ``copy_`` follows)."""
    cands = [v for v in sh.plain() if sh.aliases_input(v) and sh.t[v].dim() >= 2 and sh.t[v].numel() >= 1]
    if not cands:
        return []
    x = _pick(draw, cands, prefer_recent=False)
    dim = int(draw(st.integers(0, sh.t[x].dim() - 1)))
    i = int(draw(st.integers(0, sh.t[x].shape[dim] - 1)))
    sel = sh.add(sh.t[x].select(dim, i))
    steps: list[Step] = [("select", x, dim, i), ("scale_", sel, draw(st.sampled_from(SCALES)))]
    reader = _draw_step(draw, sh, "unary", target=x)
    if reader is not None:
        steps.append(reader)
    steps.append(("scale_", x, draw(st.sampled_from(SCALES))))
    return steps


#: The patterns of issues drawn as one step kind each (``issue_shapes``).
_ISSUE_PATTERNS = ("qkv_rotary", "scatter_writeback", "shared_call")


@st.composite
def programs(
    draw: Any, min_steps: int = 3, max_steps: int = 10, sharing: bool = False, issue_shapes: bool = False
) -> Program:
    """A random program: 2-3 inputs, ``min_steps``..``max_steps`` steps
    (one more or two when the last is an old-reader pattern). With
    ``sharing``, a third of the steps are sharing calls (``_draw_shared_call``).
    With ``issue_shapes``, the patterns issues named are drawn too: a list
    holding a tensor and one of its rows or columns, or a user's clone
    (``_draw_shared_call``), vLLM's qkv rotary (``_draw_qkv_rotary``), a
    realized scatter then an input write-back (``_draw_scatter_then_writeback``)."""
    n_inputs = draw(st.integers(2, 3))
    shapes = tuple(draw(st.sampled_from(INPUT_SHAPES)) for _ in range(n_inputs))
    # Contiguous inputs three times out of four.
    layouts = tuple(
        "c" if draw(st.integers(0, 3)) != 3 else draw(st.sampled_from(layouts_for(s))) for s in shapes
    )
    sh = _Shadows(shapes, layouts)
    n_steps = draw(st.integers(min_steps, max_steps))
    steps: list[Step] = []
    wanted: list[int] = []
    while len(steps) < n_steps:
        kinds = STEP_KINDS + ("shared_call",) * (len(STEP_KINDS) // 2 if sharing else 0)
        kind = draw(st.sampled_from(kinds + (_ISSUE_PATTERNS * 3 if issue_shapes else ())))
        if kind == "qkv_rotary":
            steps.extend(_draw_qkv_rotary(draw, sh))
            continue
        if kind == "scatter_writeback":
            steps.extend(_draw_scatter_then_writeback(draw, sh))
            continue
        if kind == "shared_call":
            steps.extend(_draw_shared_call(draw, sh))
            continue
        if kind == "old_reader":
            steps.extend(_draw_old_reader(draw, sh, wanted))
            continue
        step = _draw_step(draw, sh, kind)
        if step is not None:
            steps.append(step)
    # Outputs: those the old-reader patterns asked for, then distinct
    # variables biased towards recent ones.
    n_vars = len(sh)
    chosen = draw(
        st.lists(st.integers(0, n_vars - 1), min_size=1, max_size=3, unique=True).map(
            lambda xs: [n_vars - 1 - i for i in xs]
        )
    )
    chosen = list(dict.fromkeys([*wanted[:2], *chosen]))
    outputs = tuple(("plus" if sh.aliases_input(v) else "direct", v) for v in chosen)
    seed = draw(st.integers(0, 2**16))
    return Program(
        shapes=shapes,
        steps=tuple(steps),
        outputs=outputs,
        seed=seed,
        input_layouts=layouts if any(x != "c" for x in layouts) else (),
    )
