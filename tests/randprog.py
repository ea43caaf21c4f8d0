"""Random straight-line programs over mutating custom operators.

A program is plain data (``Program``: input shapes, a tuple of step tuples and
the outputs) so that hypothesis can shrink it and a failing example prints as
something one can paste back into a test. ``run(program, inputs)`` is the
interpreter; it is what eager mode executes and what ``torch.compile`` traces.
``Program.source()`` renders the program as the Python function it stands for.

Variables are numbered in order of creation: ``x0 .. x{n-1}`` are the float
inputs, every step that creates tensors appends them (``v{n}``, ``v{n+1}``,
...). The int64 index tensor used by ``fill_rows_`` is always the last input
(``idx``) and is not a variable.

Steps (the first element names the kind):

- creating an intermediate: ``("binop", op, a, b)`` with op in add/sub/mul,
  ``("out_add", a, b)`` (``empty_like(a)`` then the out= op ``add_into``),
  ``("clone", a)``, ``("reshape", a, shape)`` (a view or a copy, as eager
  decides), ``("acc_sum", x, y)`` (mutates x, returns a fresh tensor);
- taking views: ``("slice", a, dim, start, end)``, ``("select", a, dim, i)``,
  ``("split", a, dim, size, n_chunks)`` (one variable per chunk),
  ``("transpose", a)`` (dims 0 and 1),
  ``("view", a, shape)``;
- mutating: ``("scale_", x, s)``, ``("add_into", out, a, b)``,
  ``("fused_add_", x, res, w)``, ``("rot_", q, k, c)``,
  ``("fill_rows_", x, value)``, ``("maybe_", x, y_or_None)``,
  ``("list_scale_", (x, ...), s)``;
- reading: ``("unary", op, a)`` with op in mul2/neg/sum0/sum/add1.

Any tensor may be written: graph inputs (torch then writes them back with
``copy_``), intermediates and views of either.

Outputs are ``("direct", v)`` (v is a fresh tensor that owns its whole storage
and aliases no input, so AOTAutograd returns it from the graph as is) or
``("plus", v)`` (``v + 0.5``: a fresh value read at the end). This keeps the
post-grad graph's outputs one-to-one with the program's.

The generator never passes overlapping memory as two *written* arguments of
one call (the result would depend on the kernel's write order, which
functionalization does not model). A read argument may alias a written one
(every kernel computes its results before writing them), but is drawn
disjoint from the written ones three times out of four.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

# ---------------------------------------------------------------------------
# Custom operators (namespace fxr_rand). Every kernel computes all new values
# before it writes any of them.

_LIB = "fxr_rand"


@torch.library.custom_op(f"{_LIB}::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, s: float) -> None:
    x.mul_(s)


@torch.library.custom_op(f"{_LIB}::add_into", mutates_args=("out",))
def add_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    out.copy_(a + b)


@torch.library.custom_op(f"{_LIB}::fused_add_", mutates_args=("x", "res"))
def fused_add_(x: torch.Tensor, res: torch.Tensor, w: torch.Tensor) -> None:
    new_res = x + res
    new_x = new_res * w
    res.copy_(new_res)
    x.copy_(new_x)


@torch.library.custom_op(f"{_LIB}::rot_", mutates_args=("q", "k"))
def rot_(q: torch.Tensor, k: torch.Tensor, c: torch.Tensor) -> None:
    new_q = q * 2 + k.sum() - c.sum()
    new_k = -k + q.sum()
    q.copy_(new_q)
    k.copy_(new_k)


@torch.library.custom_op(f"{_LIB}::fill_rows_", mutates_args=("x",))
def fill_rows_(x: torch.Tensor, idx: torch.Tensor, value: float) -> None:
    x.index_fill_(0, idx.remainder(x.shape[0]), value)


@torch.library.custom_op(f"{_LIB}::acc_sum", mutates_args=("x",))
def acc_sum(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    r = x + y
    x.copy_(r)
    return (r * 2).contiguous()


@acc_sum.register_fake
def _(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape)


@torch.library.custom_op(f"{_LIB}::maybe_", mutates_args=("x", "y"))
def maybe_(x: torch.Tensor, y: torch.Tensor | None) -> None:
    new_x = x + 1
    if y is not None:
        new_y = y * 2 + x.sum()
        y.copy_(new_y)
    x.copy_(new_x)


@torch.library.custom_op(f"{_LIB}::list_scale_", mutates_args=("xs",))
def list_scale_(xs: list[torch.Tensor], s: float) -> None:
    for x in xs:
        x.mul_(s)


OPS = torch.ops.fxr_rand

# ---------------------------------------------------------------------------
# Programs as data.

Step = tuple[Any, ...]

SCALES = (2.0, -1.0, 0.5)
FILL_VALUES = (7.0, -3.0)
INDEX_VALUES = (2, 0)
BINOPS = ("add", "sub", "mul")
UNARY = ("mul2", "neg", "sum0", "sum", "add1")
INPUT_SHAPES = ((4, 8), (4, 8), (8, 4), (2, 4, 8), (8,))


@dataclass(frozen=True)
class Program:
    """Input shapes, steps and outputs; ``repr`` is valid Python."""

    shapes: tuple[tuple[int, ...], ...]
    steps: tuple[Step, ...]
    outputs: tuple[tuple[str, int], ...]
    seed: int = 0

    def source(self) -> str:
        """The program as the Python function it stands for."""
        n = len(self.shapes)
        names = [f"x{i}" for i in range(n)]

        def new() -> str:
            names.append(f"v{len(names)}")
            return names[-1]

        args = ", ".join(names) + ", idx"
        shapes = ", ".join(f"x{i}: {tuple(s)}" for i, s in enumerate(self.shapes))
        lines = [f"def f({args}):  # {shapes}, idx = tensor({list(INDEX_VALUES)}), seed {self.seed}"]
        for step in self.steps:
            lines.append("    " + _step_source(step, names, new))
        outs = []
        for kind, v in self.outputs:
            outs.append(names[v] if kind == "direct" else f"{names[v]} + 0.5")
        lines.append("    return " + ", ".join(outs))
        return "\n".join(lines)


def _step_source(step: Step, names: list[str], new: Any) -> str:
    kind = step[0]
    nm = names.__getitem__
    if kind == "binop":
        sym = {"add": "+", "sub": "-", "mul": "*"}[step[1]]
        a, b = nm(step[2]), nm(step[3])
        return f"{new()} = {a} {sym} {b}"
    if kind == "out_add":
        a, b = nm(step[1]), nm(step[2])
        v = new()
        return f"{v} = torch.empty_like({a}); add_into({v}, {a}, {b})"
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
        return f"{new()} = acc_sum({x}, {y})"
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
    if kind == "scale_":
        return f"scale_({nm(step[1])}, {step[2]})"
    if kind == "add_into":
        return f"add_into({nm(step[1])}, {nm(step[2])}, {nm(step[3])})"
    if kind == "fused_add_":
        return f"fused_add_({nm(step[1])}, {nm(step[2])}, {nm(step[3])})"
    if kind == "rot_":
        return f"rot_({nm(step[1])}, {nm(step[2])}, {nm(step[3])})"
    if kind == "fill_rows_":
        return f"fill_rows_({nm(step[1])}, idx, {step[2]})"
    if kind == "maybe_":
        y = "None" if step[2] is None else nm(step[2])
        return f"maybe_({nm(step[1])}, {y})"
    if kind == "list_scale_":
        xs = ", ".join(nm(v) for v in step[1])
        return f"list_scale_([{xs}], {step[2]})"
    if kind == "unary":
        a = nm(step[2])
        expr = {
            "mul2": f"{a} * 2",
            "neg": f"-{a}",
            "sum0": f"{a}.sum(0)",
            "sum": f"{a}.sum()",
            "add1": f"{a} + 1",
        }[step[1]]
        return f"{new()} = {expr}"
    raise ValueError(f"unknown step {step!r}")


# ---------------------------------------------------------------------------
# The interpreter.


def make_inputs(program: Program) -> list[torch.Tensor]:
    """The float inputs (small non-zero integers, so all arithmetic is exact)
    followed by the index tensor."""
    g = torch.Generator().manual_seed(program.seed)
    xs = []
    for shape in program.shapes:
        mag = torch.randint(1, 4, shape, generator=g)
        sign = torch.randint(0, 2, shape, generator=g) * 2 - 1
        xs.append((mag * sign).to(torch.float32))
    xs.append(torch.tensor(INDEX_VALUES, dtype=torch.int64))
    return xs


def run(program: Program, inputs: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Executes ``program`` on ``inputs`` (as made by ``make_inputs``)."""
    env: list[torch.Tensor] = list(inputs[:-1])
    idx = inputs[-1]
    for step in program.steps:
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
            OPS.add_into(out, a, b)
            env.append(out)
        elif kind == "clone":
            env.append(env[step[1]].clone())
        elif kind == "reshape":
            env.append(env[step[1]].reshape(step[2]))
        elif kind == "view":
            env.append(env[step[1]].view(step[2]))
        elif kind == "acc_sum":
            env.append(OPS.acc_sum(env[step[1]], env[step[2]]))
        elif kind == "slice":
            _, a, dim, lo, hi = step
            env.append(env[a].narrow(dim, lo, hi - lo))
        elif kind == "select":
            env.append(env[step[1]].select(step[2], step[3]))
        elif kind == "split":
            _, a, dim, size, _count = step
            env.extend(env[a].split(size, dim))
        elif kind == "transpose":
            env.append(env[step[1]].transpose(0, 1))
        elif kind == "scale_":
            OPS.scale_(env[step[1]], step[2])
        elif kind == "add_into":
            OPS.add_into(env[step[1]], env[step[2]], env[step[3]])
        elif kind == "fused_add_":
            OPS.fused_add_(env[step[1]], env[step[2]], env[step[3]])
        elif kind == "rot_":
            OPS.rot_(env[step[1]], env[step[2]], env[step[3]])
        elif kind == "fill_rows_":
            OPS.fill_rows_(env[step[1]], idx, step[2])
        elif kind == "maybe_":
            OPS.maybe_(env[step[1]], None if step[2] is None else env[step[2]])
        elif kind == "list_scale_":
            OPS.list_scale_([env[v] for v in step[1]], step[2])
        elif kind == "unary":
            a = env[step[2]]
            op = step[1]
            if op == "mul2":
                env.append(a * 2)
            elif op == "neg":
                env.append(-a)
            elif op == "sum0":
                env.append(a.sum(0))
            elif op == "sum":
                env.append(a.sum())
            else:
                env.append(a + 1)
        else:
            raise ValueError(f"unknown step {step!r}")
    outs = []
    for kind, v in program.outputs:
        outs.append(env[v] if kind == "direct" else env[v] + 0.5)
    return tuple(outs)


# ---------------------------------------------------------------------------
# The generator. It runs every step that creates a tensor on a "shadow": a
# real tensor whose elements are their own offsets in their storage, so
# shapes, viewability and overlap are read off the shadows.


def _root(shape: tuple[int, ...] | torch.Size) -> torch.Tensor:
    n = 1
    for s in shape:
        n *= s
    return torch.arange(n, dtype=torch.float32).reshape(tuple(shape))


class _Shadows:
    def __init__(self, shapes: tuple[tuple[int, ...], ...]) -> None:
        self.t: list[torch.Tensor] = [_root(s) for s in shapes]
        self.fresh: set[int] = set()

    def __len__(self) -> int:
        return len(self.t)

    def storage(self, v: int) -> int:
        return self.t[v].untyped_storage().data_ptr()

    def cells(self, v: int) -> set[int]:
        return set(self.t[v].reshape(-1).tolist())

    def overlap(self, a: int, b: int) -> bool:
        if self.storage(a) != self.storage(b):
            return False
        return bool(self.cells(a) & self.cells(b))

    def fresh_root(self, v: int) -> bool:
        """v was made by an operator that is not a view: it owns its storage."""
        return v in self.fresh

    def add(self, t: torch.Tensor) -> int:
        self.t.append(t)
        return len(self.t) - 1

    def add_fresh(self, t: torch.Tensor) -> int:
        """A new tensor with the layout of ``t`` (as the real op made it)."""
        v = self.add(t.copy_(_root(t.shape)))
        self.fresh.add(v)
        return v


_CREATE = ("binop", "out_add", "clone", "reshape", "acc_sum")
_VIEW = ("slice", "select", "split", "transpose", "view")
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
# that shrinking turns steps into plain reads.
STEP_KINDS = ("unary", *_CREATE, *_VIEW, *_MUTATE, *_MUTATE, "scale_", "slice", "select")


def _pick(draw: Any, candidates: list[int], *, prefer_recent: bool = False) -> int:
    if prefer_recent:
        # Index 0 is the most recent: shrinking moves towards it.
        i = draw(st.integers(0, len(candidates) - 1))
        return candidates[len(candidates) - 1 - i]
    return draw(st.sampled_from(candidates))


def _same_shape(sh: _Shadows, v: int) -> list[int]:
    return [u for u in range(len(sh)) if sh.t[u].shape == sh.t[v].shape]


def _disjoint_from(sh: _Shadows, cands: list[int], written: list[int]) -> list[int]:
    return [u for u in cands if not any(sh.overlap(u, w) for w in written)]


def _read_arg(draw: Any, sh: _Shadows, cands: list[int], written: list[int]) -> int:
    """A read argument of a mutating call: usually disjoint from the written
    ones (an alias forces a clone, so it would hide the interesting cases)."""
    disjoint = _disjoint_from(sh, cands, written)
    if disjoint and draw(st.integers(0, 3)) != 3:
        return draw(st.sampled_from(disjoint))
    return draw(st.sampled_from(cands))


def _draw_step(draw: Any, sh: _Shadows, kind: str) -> Step | None:
    allv = list(range(len(sh)))
    if kind == "unary":
        op = draw(st.sampled_from(UNARY))
        cands = allv if op != "sum0" else [v for v in allv if sh.t[v].dim() >= 1]
        if not cands:
            return None
        a = _pick(draw, cands, prefer_recent=True)
        t = sh.t[a]
        out = {"mul2": t * 2, "neg": -t, "sum0": t.sum(0) if t.dim() else t, "sum": t.sum(), "add1": t + 1}[
            op
        ]
        sh.add_fresh(out)
        return ("unary", op, a)
    if kind == "binop":
        a = _pick(draw, allv, prefer_recent=True)
        b = draw(st.sampled_from(_same_shape(sh, a)))
        op = draw(st.sampled_from(BINOPS))
        sh.add_fresh(sh.t[a] + sh.t[b])
        return ("binop", op, a, b)
    if kind == "out_add":
        a = _pick(draw, allv, prefer_recent=True)
        b = draw(st.sampled_from(_same_shape(sh, a)))
        sh.add_fresh(torch.empty_like(sh.t[a]))
        return ("out_add", a, b)
    if kind == "clone":
        a = _pick(draw, allv, prefer_recent=True)
        sh.add_fresh(sh.t[a].clone())
        return ("clone", a)
    if kind in ("reshape", "view"):
        a = _pick(draw, allv, prefer_recent=True)
        t = sh.t[a]
        n = t.numel()
        shapes = [(n,)]
        if t.dim() >= 2:
            shapes.append((t.shape[1], t.shape[0], *t.shape[2:]))
        if n % 2 == 0 and n > 2:
            shapes.append((2, n // 2))
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
        r = t.reshape(s)
        if r.untyped_storage().data_ptr() != t.untyped_storage().data_ptr():
            sh.add_fresh(r)
        else:
            sh.add(r)
        return (kind, a, tuple(s))
    if kind == "acc_sum":
        x = _pick(draw, allv, prefer_recent=True)
        y = _read_arg(draw, sh, _same_shape(sh, x), [x])
        sh.add_fresh(torch.empty(sh.t[x].shape))
        return ("acc_sum", x, y)
    if kind in ("slice", "select", "split"):
        cands = [v for v in allv if sh.t[v].dim() >= 1 and sh.t[v].shape[0] >= 2]
        if not cands:
            return None
        a = _pick(draw, cands)
        t = sh.t[a]
        dims = [d for d in range(min(t.dim(), 2)) if t.shape[d] >= 2]
        dim = draw(st.sampled_from(dims))
        size = t.shape[dim]
        if kind == "slice":
            lo = draw(st.integers(0, size - 1))
            hi = draw(st.integers(lo + 1, size))
            sh.add(t.narrow(dim, lo, hi - lo))
            return ("slice", a, dim, lo, hi)
        if kind == "select":
            i = draw(st.integers(0, size - 1))
            sh.add(t.select(dim, i))
            return ("select", a, dim, i)
        chunk = draw(st.integers(1, size - 1))
        parts = t.split(chunk, dim)
        for p in parts:
            sh.add(p)
        return ("split", a, dim, chunk, len(parts))
    if kind == "transpose":
        cands = [v for v in allv if sh.t[v].dim() >= 2]
        if not cands:
            return None
        a = _pick(draw, cands)
        sh.add(sh.t[a].transpose(0, 1))
        return ("transpose", a)
    if kind == "scale_":
        return ("scale_", _pick(draw, allv), draw(st.sampled_from(SCALES)))
    if kind == "add_into":
        out = _pick(draw, allv)
        same = _same_shape(sh, out)
        return ("add_into", out, _read_arg(draw, sh, same, [out]), _read_arg(draw, sh, same, [out]))
    if kind == "fused_add_":
        x = _pick(draw, allv)
        res_c = _disjoint_from(sh, _same_shape(sh, x), [x])
        if not res_c:
            return None
        res = draw(st.sampled_from(res_c))
        w = _read_arg(draw, sh, _same_shape(sh, x), [x, res])
        return ("fused_add_", x, res, w)
    if kind == "rot_":
        q = _pick(draw, allv)
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
        cands = [v for v in allv if sh.t[v].dim() >= 1 and sh.t[v].shape[0] >= 1]
        if not cands:
            return None
        return ("fill_rows_", _pick(draw, cands), draw(st.sampled_from(FILL_VALUES)))
    if kind == "maybe_":
        x = _pick(draw, allv)
        y_c = _disjoint_from(sh, allv, [x])
        if not y_c or not draw(st.booleans()):
            return ("maybe_", x, None)
        return ("maybe_", x, draw(st.sampled_from(y_c)))
    if kind == "list_scale_":
        n = draw(st.integers(1, 3))
        xs: list[int] = []
        for _ in range(n):
            c = _disjoint_from(sh, [u for u in allv if u not in xs], xs)
            if not c:
                break
            xs.append(draw(st.sampled_from(c)))
        return ("list_scale_", tuple(xs), draw(st.sampled_from(SCALES)))
    raise ValueError(kind)


@st.composite
def programs(draw: Any, min_steps: int = 3, max_steps: int = 10) -> Program:
    """A random program: 2-3 inputs, ``min_steps``..``max_steps`` steps."""
    n_inputs = draw(st.integers(2, 3))
    shapes = tuple(draw(st.sampled_from(INPUT_SHAPES)) for _ in range(n_inputs))
    sh = _Shadows(shapes)
    n_steps = draw(st.integers(min_steps, max_steps))
    steps: list[Step] = []
    while len(steps) < n_steps:
        kind = draw(st.sampled_from(STEP_KINDS))
        step = _draw_step(draw, sh, kind)
        if step is not None:
            steps.append(step)
    # Outputs: distinct variables, biased towards recent ones.
    n_vars = len(sh)
    chosen = draw(
        st.lists(st.integers(0, n_vars - 1), min_size=1, max_size=3, unique=True).map(
            lambda xs: [n_vars - 1 - i for i in xs]
        )
    )
    outputs = tuple(("direct" if sh.fresh_root(v) else "plus", v) for v in chosen)
    seed = draw(st.integers(0, 2**16))
    return Program(shapes=shapes, steps=tuple(steps), outputs=outputs, seed=seed)
