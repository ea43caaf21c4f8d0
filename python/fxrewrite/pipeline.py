"""``rewrite(graph)``: the whole pipeline on one fx.Graph (encode, engine, apply)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import Any

import torch.fx

from . import _core
from .encode import encode, is_auto_functionalized
from .leave import leave_from_env, op_names
from .report import Report

log = logging.getLogger("fxrewrite")


def strict_from_env() -> bool:
    """``FXREWRITE_STRICT=1`` turns strict mode on for every pass."""
    return os.environ.get("FXREWRITE_STRICT", "").strip().lower() in ("1", "true", "yes", "on")


def rewrite(
    graph: torch.fx.Graph, *, strict: bool | None = None, leave: Iterable[Any] | None = None
) -> Report:
    """Rewrites every auto_functionalized node of ``graph`` in place and
    returns the report.

    Nodes the engine cannot handle are left untouched (and reported); any
    failure leaves the whole graph exactly as it was, logs a warning and
    returns a report with ``error`` set. With ``strict`` (or
    ``FXREWRITE_STRICT=1``) both raise instead. The operators in ``leave``
    (and in ``FXREWRITE_LEAVE``) are always left to Inductor; strict mode
    does not raise for them.

    Raises:
        UnsupportedGraphError: strict mode, and a node was left untouched.
        FxrewriteError: strict mode, and the rewrite failed.
        ValueError: ``leave`` or ``FXREWRITE_LEAVE`` names no operator.
    """
    return rewrite_tracking_changes(graph, strict=strict, leave=leave)[0]


def rewrite_tracking_changes(
    graph: torch.fx.Graph, *, strict: bool | None = None, leave: Iterable[Any] | None = None
) -> tuple[Report, list[torch.fx.Node]]:
    """``rewrite``, also returning the nodes whose FX hash (node, target,
    arguments) the rewrite changed: the nodes it created and the users it
    re-pointed. Every other node keeps its hash."""
    strict = strict_from_env() if strict is None else strict
    left_ops = sorted({*op_names(leave or ()), *leave_from_env()})
    t0 = time.perf_counter()
    if not any(is_auto_functionalized(n) for n in graph.nodes):
        return Report(nodes=len(graph.nodes), timings={"total": time.perf_counter() - t0}), []
    try:
        enc = encode(graph, meta_mode="operands")
        t1 = time.perf_counter()
        native = enc.native
        plan = native.plan(left_ops)
        t2 = time.perf_counter()
        report = Report.from_plan(plan)
        _add_live_facts(graph, report)
        if strict:
            plan.require_complete()
        # Checks the plan against the graph and its own report first, then
        # edits; checks the order of every node it touched before erasing;
        # restores the graph on any failure.
        changed = native.apply_fx(plan, graph, enc.nodes, enc.targets)
        t3 = time.perf_counter()
    except _core.UnsupportedGraphError:
        raise
    except Exception as e:
        if strict:
            raise
        log.warning("fxrewrite left the graph untouched: %s: %s", type(e).__name__, e)
        return Report(nodes=len(graph.nodes), error=f"{type(e).__name__}: {e}"), []
    report.timings = {
        "encode": t1 - t0,
        "engine": t2 - t1,
        "apply": t3 - t2,
        "total": time.perf_counter() - t0,
    }
    unattributed = [d for d in report.left if d.cause == "unattributed_sharing"]
    for d in report.left:
        # By cause, not by membership in ``unattributed``: a held-back graph
        # leaves every call, and a list search per call is quadratic.
        level = logging.INFO if d.cause in ("unattributed_sharing", "requested") else logging.WARNING
        log.log(level, "fxrewrite left %s (%s) for Inductor: %s", d.node, d.op, d.reason)
    if unattributed:
        _warn_once_about_the_pre_pass(unattributed)
    # DEBUG: the pass logs its own one INFO line per graph (with the
    # process and graph), and a direct call has the report in hand.
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s", report.summary())
    return report, changed


_warned_about_the_pre_pass = False


def _warn_once_about_the_pre_pass(nodes: list[Any]) -> None:
    """One warning per process: the fix is one line, and a decoder repeats
    the same call in every layer."""
    global _warned_about_the_pre_pass
    if _warned_about_the_pre_pass:
        return
    _warned_about_the_pre_pass = True
    # The calls whose own arguments share memory; the others of the graph
    # are held back with them (their reason starts "held back with").
    sharing = [d for d in nodes if not (d.reason or "").startswith("held back with")] or nodes
    log.warning(
        "fxrewrite left a graph of %d call(s) to Inductor (the one line holds back the whole graph): "
        "the arguments of %s (%s) share memory and nothing recorded whether the program shared it or "
        "Inductor's remove_noop_ops made it by deleting a clone (pytorch#198031). Install the pre pass "
        "that records it: fxrewrite.install() (or torch._inductor.config.joint_custom_pre_pass = "
        "fxrewrite.pre_pass). This warning is shown once.",
        len(nodes),
        sharing[0].node,
        sharing[0].op,
    )


def _add_live_facts(graph: torch.fx.Graph, report: Report) -> None:
    """Gives each clone what only the live graph knows: its reader's source
    line, and, where its size is symbolic, its bytes as an expression of the
    graph's symbols with that expression at the traced sizes, read off the
    auto_functionalized node's argument (so this runs before the plan is
    applied: the engine sees only static sizes). Only decisions with
    clones are looked at, with one map of the graph's names."""
    from .encode import source_line

    todo = [i for i, d in enumerate(report.decisions) if d.clones]
    if not todo:
        return
    by_name = {n.name: n for n in graph.nodes}
    for i in todo:
        d = report.decisions[i]
        af = by_name.get(d.node)
        clones = []
        for c in d.clones:
            expr, at = (None, None)
            if c.bytes is None and af is not None:
                expr, at = _symbolic_bytes(_slot_value(af, c.arg))
            reader_source = None if c.reader_source else _trace_of(by_name, c.reader, source_line)
            clones.append(c.with_live_facts(reader_source=reader_source, bytes_expr=expr, bytes_at_trace=at))
        report.decisions[i] = d.with_clones(clones)


def _trace_of(by_name: dict[str, torch.fx.Node], name: str | None, fmt: object) -> str | None:
    if name is None or name not in by_name:
        return None
    trace = by_name[name].meta.get("stack_trace")
    return fmt(trace) if callable(fmt) else None


def _slot_value(af: torch.fx.Node, label: str) -> Any:
    """The fake value of slot ``label`` (``x``, ``xs[1]``, ``_all_bases[0]``) of ``af``."""
    name, _, rest = label.partition("[")
    arg = af.kwargs.get(name)
    if rest:
        try:
            arg = arg[int(rest.rstrip("]"))]  # type: ignore[index]
        except (TypeError, ValueError, IndexError):
            return None
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None


def _symbolic_bytes(val: Any) -> tuple[str | None, int | None]:
    if not isinstance(val, torch.Tensor):
        return None, None
    try:
        nbytes = val.numel() * val.element_size()
        if isinstance(nbytes, int):
            return str(nbytes), nbytes
        hint = nbytes.node.hint
        return str(nbytes.node.expr), int(hint) if hint is not None else None
    except Exception:  # no size rather than a wrong one
        return None, None
