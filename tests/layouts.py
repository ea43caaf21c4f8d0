"""Kernels that see raw strides: a registry of the layouts eager passes to a
custom operator, per call site, and a check that a compiled run passes the
same ones.

A real kernel (Triton, CUDA) reads its arguments through their raw sizes,
strides and storage offsets, size-1 and size-0 dimensions included. A CPU
custom operator written with torch ops does not: it computes the same values
for any layout, so a clone with the wrong strides passes by luck of
contiguous memory. The operators built on this registry close that gap: in a
``record()`` block (eager) they store, per call-site id (an int argument of
the operator) and argument, the ``(size, stride, storage_offset)`` they are
called with; in a ``check()`` block (a compiled run on the same inputs) they
compare what they get with what eager recorded and keep every difference in
``mismatches``. Outside both blocks they only compute.

The registry is global and single-threaded, like the operators' callers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch.utils._python_dispatch import TorchDispatchMode

Layout = tuple[tuple[int, ...], tuple[int, ...], int]


def layout_of(t: torch.Tensor) -> Layout:
    return (tuple(t.shape), tuple(t.stride()), int(t.storage_offset()))


@dataclass
class LayoutRegistry:
    mode: Literal["off", "record", "check"] = "off"
    expected: dict[tuple[int, int], Layout] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)
    checked: int = 0

    def seen(self, site: int, arg: int, name: str, t: torch.Tensor) -> None:
        """Called by a kernel for each tensor argument it reads by stride."""
        got = layout_of(t)
        if self.mode == "record":
            self.expected[(site, arg)] = got
        elif self.mode == "check":
            self.checked += 1
            want = self.expected.get((site, arg))
            if want is None:
                self.mismatches.append(f"site {site} `{name}`: not called there in eager")
            elif got != want:
                self.mismatches.append(
                    f"site {site} `{name}`: size, stride, offset {_fmt(got)}; eager passed {_fmt(want)}"
                )

    def report(self) -> str | None:
        """None when every checked call saw eager's layouts, else the differences."""
        if not self.mismatches:
            return None
        return "a stride-reading kernel got another layout than in eager:\n" + "\n".join(self.mismatches)


def _fmt(layout: Layout) -> str:
    size, stride, offset = layout
    return f"{list(size)}, {list(stride)}, {offset}"


REGISTRY = LayoutRegistry()


@contextmanager
def record() -> Iterator[LayoutRegistry]:
    """Eager run: remember the layouts every call site is given."""
    REGISTRY.mode = "record"
    REGISTRY.expected = {}
    REGISTRY.mismatches = []
    REGISTRY.checked = 0
    try:
        yield REGISTRY
    finally:
        REGISTRY.mode = "off"


@contextmanager
def check() -> Iterator[LayoutRegistry]:
    """Compiled run on the same inputs: compare with what ``record`` saw."""
    REGISTRY.mode = "check"
    REGISTRY.mismatches = []
    REGISTRY.checked = 0
    try:
        yield REGISTRY
    finally:
        REGISTRY.mode = "off"


# ---------------------------------------------------------------------------
# The layouts torch's own fake tensors state. A compiled program is traced
# with fake tensors, and every pass after the trace (Inductor's and ours) can
# only pass a kernel the layout the traced graph states. Where torch's fake
# kernel for an op disagrees with its eager kernel (e.g. a ``view`` to the
# same shape keeps its input's size-1 strides under ``FakeTensorMode`` and
# recomputes them in eager), every compiled program differs from eager: a
# torch bug, not one of the passes.


class _RecordCalls(TorchDispatchMode):
    """Under a fake mode: the layout of each tensor argument of each call of
    an operator of ``namespace``, by call site (its ``site`` argument) and
    argument name (``name[i]`` for an element of a list)."""

    def __init__(self, namespace: str) -> None:
        super().__init__()
        self.namespace = namespace
        self.layouts: dict[tuple[int, str], Layout] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func.namespace == self.namespace:
            named = dict(zip((a.name for a in func._schema.arguments), args, strict=False)) | kwargs
            site = named.get("site")
            for name, value in named.items():
                items = [(name, value)]
                if isinstance(value, list | tuple):
                    items = [(f"{name}[{i}]", v) for i, v in enumerate(value)]
                for label, t in items:
                    if isinstance(t, torch.Tensor) and isinstance(site, int):
                        self.layouts[(site, label)] = layout_of(t)
        return func(*args, **kwargs)


def fake_layouts(
    fn: Callable[[list[torch.Tensor]], Any], inputs: list[torch.Tensor], namespace: str
) -> dict[tuple[int, str], Layout] | None:
    """The layouts torch's ``FakeTensorMode`` gives the arguments of the
    operators of ``namespace`` when ``fn`` runs on fake copies of
    ``inputs``; ``None`` when ``fn`` does not run on fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    recorder = _RecordCalls(namespace)
    try:
        fakes = [mode.from_tensor(t) for t in inputs]
        with mode, recorder:
            fn(fakes)
    except Exception:
        return None
    return recorder.layouts


_MISMATCH = re.compile(
    r"^site (\d+) `([^`]+)`: size, stride, offset \[([^\]]*)\], \[([^\]]*)\], (-?\d+); "
    r"eager passed \[([^\]]*)\], \[([^\]]*)\], (-?\d+)$"
)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def stated_by_fake_tensors(problem: str | None, traced: dict[tuple[int, str], Layout] | None) -> bool:
    """True when ``problem`` (a ``report()``) is only layouts that torch's
    fake tensors state and eager does not: each kernel got exactly the
    layout of ``traced`` (``fake_layouts``) for its site and argument, and
    that layout is not eager's."""
    if problem is None or traced is None or not problem.startswith("a stride-reading kernel"):
        return False
    lines = problem.splitlines()[1:]
    for line in lines:
        m = _MISMATCH.match(line)
        if m is None:
            return False
        got = (_ints(m.group(3)), _ints(m.group(4)), int(m.group(5)))
        want = (_ints(m.group(6)), _ints(m.group(7)), int(m.group(8)))
        if traced.get((int(m.group(1)), m.group(2))) != got or got == want:
            return False
    return bool(lines)
