"""The Report: what a rewrite did to one graph, and why.

Its entries are the engine's own types (``CloneNote``, ``Decision``: frozen
classes of the native module, made from the one declaration of their fields
in ``rust/plan/mod.rs``); ``Report`` takes the engine's report fields
(``Plan.report``) and adds the pass's outcome (``error``, ``timings``) and the
presentation (totals, summary, JSON).
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from ._core import CloneNote, Decision

__all__ = ["Action", "Cause", "CloneNote", "Decision", "Form", "Report", "last_report", "reports"]

if TYPE_CHECKING:
    from ._core import Plan

#: A node's form: which higher-order operator it was.
Form = Literal["v1", "v2"]
#: What happened to a node: rewritten with no copy, with a clone, or left.
Action = Literal["reinplaced", "cloned", "left"]
#: Why a node was left: the engine cannot rewrite it safely, its arguments
#: share memory no record attributes (``fxrewrite.install()`` records it),
#: or the caller asked (``Pass(leave=...)``, ``FXREWRITE_LEAVE``).
Cause = Literal["unsupported", "unattributed_sharing", "requested"]
# The engine's enumerations (``_core.REPORT_VOCABULARY``) name exactly these:
# ``tests/test_report_vocabulary.py``.


@dataclass
class Report:
    """Everything the engine decided about one graph.

    ``error`` is set when the whole graph was left untouched because the pass
    failed (non-strict mode); the graph then goes to Inductor's own passes.
    ``from_cache`` is set when Inductor's FX graph cache served the graph: the
    pass did not run in this compile; the report is the one of the compile
    that made the cached graph (the graph that runs is that one).
    """

    nodes: int = 0
    decisions: list[Decision] = field(default_factory=list)
    writebacks_removed: int = 0
    #: Nodes marked to be computed where they stand: readers of memory an
    #: in-place call after them writes (Inductor would otherwise compute them
    #: lazily, after the write), and computations an in-place call writes
    #: through a view (a lazy view would reach the kernel as a copy).
    realized: int = 0
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    from_cache: bool = False

    @classmethod
    def from_plan(cls, plan: Plan) -> Report:
        """The report of the engine's plan (no error, no timings yet)."""
        return cls(**plan.report())

    @property
    def found(self) -> int:
        """auto_functionalized nodes in the graph."""
        return len(self.decisions)

    @property
    def reinplaced(self) -> int:
        """Nodes rewritten with no copy."""
        return sum(d.action == "reinplaced" for d in self.decisions)

    @property
    def cloned(self) -> int:
        """Nodes rewritten with at least one clone."""
        return sum(d.action == "cloned" for d in self.decisions)

    @property
    def left(self) -> list[Decision]:
        """Nodes left untouched for Inductor."""
        return [d for d in self.decisions if d.action == "left"]

    @property
    def clones(self) -> list[CloneNote]:
        """Every clone kept."""
        return [c for d in self.decisions for c in d.clones]

    @property
    def moved(self) -> int:
        """Readers moved before their mutation instead of cloning."""
        return sum(len(d.moved) for d in self.decisions)

    @property
    def bytes_copied(self) -> int:
        """Bytes copied by the clones kept, where shapes are static."""
        return sum(c.bytes or 0 for c in self.clones)

    @property
    def scatters_removed(self) -> int:
        """Write-back scatters removed (``explain`` lists them per node)."""
        return sum(d.scatters_removed for d in self.decisions)

    @property
    def writebacks_removed_in_all(self) -> int:
        """Every write-back removed: the scatters into written buffers and
        the ``copy_`` write-backs of graph inputs."""
        return self.scatters_removed + self.writebacks_removed

    def clone_sizes(self) -> str:
        """The bytes the clones copy, in words: the static total, and each
        symbolic size as its expression with its value at the traced sizes
        (never a symbolic clone counted as 0 bytes)."""
        symbolic = [c for c in self.clones if c.bytes is None]
        if not symbolic:
            return f"{self.bytes_copied} bytes"
        parts = [f"{self.bytes_copied} bytes"] if self.bytes_copied else []
        parts += [f"{c.bytes_expr} bytes" for c in symbolic if c.bytes_expr]
        unknown = sum(1 for c in symbolic if not c.bytes_expr)
        if unknown:
            parts.append(f"{unknown} of symbolic size")
        text = " + ".join(parts)
        at_trace = [c.bytes_at_trace for c in symbolic if c.bytes_at_trace is not None]
        if len(at_trace) == len(symbolic):
            text += f", {self.bytes_copied + sum(at_trace)} bytes at the traced sizes"
        return text

    def per_op(self) -> list[dict[str, Any]]:
        """Per-operator totals, in order of first appearance."""
        out: dict[str, dict[str, Any]] = {}
        for d in self.decisions:
            s = out.setdefault(
                d.op,
                {"op": d.op, "found": 0, "reinplaced": 0, "cloned": 0, "left": 0, "moved": 0, "bytes": 0},
            )
            s["found"] += 1
            s[d.action] += 1
            s["moved"] += len(d.moved)
            s["bytes"] += sum(c.bytes or 0 for c in d.clones)
        return list(out.values())

    def summary(self) -> str:
        """One line for logs."""
        if self.error:
            return f"fxrewrite: graph left untouched ({self.error})"
        return (
            f"fxrewrite: {self.found} auto_functionalized nodes: {self.reinplaced} re-inplaced, "
            f"{self.cloned} with clones ({len(self.clones)} clones, {self.clone_sizes()}), "
            f"{len(self.left)} left, {self.moved} readers moved, "
            f"{self.writebacks_removed_in_all} write-backs removed ({self.scatters_removed} scatters, "
            f"{self.writebacks_removed} input copy_), {self.realized} nodes realized where they stand"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field, in order (``from_cache`` only
        when true)."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["decisions"] = [d.to_dict() for d in self.decisions]
        out["timings"] = dict(self.timings)
        if not self.from_cache:
            del out["from_cache"]
        return out

    def to_json(self) -> str:
        """The report as JSON text."""
        return json.dumps(self.to_dict(), indent=2)


#: The reports of this process, oldest first: every graph any fxrewrite pass
#: object rewrote, and every graph Inductor's FX graph cache served with
#: fxrewrite's rewrite in it. Bounded; a deque appends atomically.
_REPORTS: deque[Report] = deque(maxlen=1024)


def record(report: Report) -> None:
    """Adds ``report`` to this process's reports (the pass calls it)."""
    _REPORTS.append(report)


def last_report() -> Report | None:
    """The most recent report of this process, whichever pass object made it
    (``fxrewrite.pass_``, ``install()``'s, ``install(strict=True)``'s, vLLM's),
    or restored from Inductor's FX graph cache (``Report.from_cache``); None
    when no graph was compiled with fxrewrite here. Compiles in other
    processes (a serving engine's workers) report there."""
    return _REPORTS[-1] if _REPORTS else None


def reports() -> list[Report]:
    """All reports of this process, oldest first (the latest 1024)."""
    return list(_REPORTS)
