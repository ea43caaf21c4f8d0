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

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import torch

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
