"""Copies in the code Inductor generates, not only in the post-grad graph.

A graph with no clone and no ``copy_`` can still compile to copy kernels:
the lowering realizes a value it had kept lazy when a write lands in a view
of it, and writes a graph input back with a kernel of its own. So the copies
a compile pays are counted where Inductor schedules them:

- *copy nodes*: scheduler nodes whose loop body only loads one value and
  stores it (no arithmetic, no reduction), whether or not a kernel of their
  own was made for them (fused into a neighbour they still move their bytes);
- *copy calls*: ``copy_`` / ``clone`` calls left in the wrapper code (extern
  copies, and fallbacks of the ops Inductor does not lower);
- *bytes*: elements times item size of every copy node, symbolic sizes at
  the size hints of the compile.

    with count_generated_copies() as copies:
        torch.compile(f)(*args)
    copies.nodes, copies.calls, copies.bytes
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from torch._inductor.graph import GraphLowering
from torch._inductor.scheduler import ExternKernelSchedulerNode, Scheduler, SchedulerNode
from torch._inductor.virtualized import V

# The loop-body operations of a copy: index arithmetic and one load, one store.
_COPY_OPS = frozenset({"load", "store", "get_index", "index_expr", "output"})
_WRAPPER_COPY = re.compile(r"(?:\.copy_\(|\bclone\(|aten\.copy_|aten\.clone)")


@dataclass
class GeneratedCopies:
    nodes: int = 0
    calls: int = 0
    bytes: int = 0
    graphs: int = 0
    #: one line per copy node: buffer name, elements, dtype
    detail: list[str] = field(default_factory=list)
    #: per copy node, the operators of the extern kernels scheduled before it
    after: list[tuple[str, ...]] = field(default_factory=list)

    def after_op(self, name: str) -> int:
        """Copy nodes scheduled after an extern kernel whose operator name
        contains ``name`` (``"rotary"``: copies after the rotary call)."""
        return sum(any(name in op for op in ops) for ops in self.after)

    @property
    def total(self) -> int:
        return self.nodes + self.calls

    def as_dict(self) -> dict[str, int]:
        return {"nodes": self.nodes, "calls": self.calls, "bytes": self.bytes}


def is_copy_node(snode: Any) -> bool:
    """A scheduler node that loads one value and stores it, nothing else."""
    if not isinstance(snode, SchedulerNode) or snode.is_reduction():
        return False
    body = getattr(snode, "_body", None)
    counts = getattr(body, "op_counts", None)
    if not counts:
        return False
    return set(counts) <= _COPY_OPS and counts.get("load", 0) == 1 and counts.get("store", 0) == 1


def _bytes(node: Any) -> int:
    sizevars = V.graph.sizevars
    # torch 2.15 renamed size_hint to optimization_hint.
    hint = getattr(sizevars, "optimization_hint", None) or sizevars.size_hint
    numel = hint(node.get_numel(), fallback=64)
    return int(numel) * node.get_dtype().itemsize


@contextmanager
def count_generated_copies() -> Iterator[GeneratedCopies]:
    """Counts the copies of every graph Inductor generates code for inside
    the block (see the module docstring)."""
    stats = GeneratedCopies()
    scheduler_codegen = Scheduler.codegen
    graph_codegen = GraphLowering.codegen

    def counting_scheduler_codegen(self: Scheduler) -> Any:
        externs: list[str] = []
        for fused in self.nodes:
            for snode in fused.get_nodes():
                if isinstance(snode, ExternKernelSchedulerNode):
                    externs.append(str(getattr(snode.node, "op_overload", None) or type(snode.node).__name__))
                if is_copy_node(snode):
                    stats.after.append(tuple(externs))
                    stats.nodes += 1
                    stats.bytes += _bytes(snode.node)
                    stats.detail.append(
                        f"{snode.get_name()}: {snode.node.get_numel()} x {snode.node.get_dtype()}"
                    )
        return scheduler_codegen(self)

    def counting_graph_codegen(self: GraphLowering) -> Any:
        result = graph_codegen(self)
        stats.graphs += 1
        wrapper = result[0]
        text = getattr(wrapper, "value", wrapper)
        stats.calls += len(_WRAPPER_COPY.findall(str(text)))
        return result

    with (
        mock.patch.object(Scheduler, "codegen", counting_scheduler_codegen),
        mock.patch.object(GraphLowering, "codegen", counting_graph_codegen),
    ):
        yield stats
