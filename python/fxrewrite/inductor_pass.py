"""The Inductor custom pass (``fxrewrite.pass_``; the module is not named ``pass_``
so that importing it can never shadow the pass object on the package): ``torch._inductor.config.post_grad_custom_post_pass = fxrewrite.pass_``.

The pass runs after Inductor's post-grad pattern passes and before its own
``reinplace_inplaceable_ops`` / ``decompose_auto_functionalized``, which then
find nothing left to do. The in-place calls it creates have no users, so
nothing after it may run dead-code elimination over them; Inductor's own
pipeline does not (it treats mutating operators as impure).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import torch.fx
from torch._inductor.custom_graph_pass import CustomGraphPass

from . import _core, _graph_cache
from ._build_id import native_build_id, python_sources_id
from .leave import leave_from_env, op_names
from .pipeline import rewrite_tracking_changes, strict_from_env
from .report import Report, record

__all__ = ["ComposedPass", "Pass", "compose", "pass_", "passes_of"]

log = logging.getLogger("fxrewrite")


_graph_counter = itertools.count()


def _graph_id() -> tuple[str, int]:
    """Which compile (torch's compile id, ``none`` outside one) and which
    graph of this process (a counter): what the log line and the saved
    files name."""
    compile_id = "none"
    try:
        from torch._guards import CompileContext

        cid = CompileContext.current_compile_id()
        if cid is not None:
            compile_id = str(cid).replace(" ", "")
    except Exception:  # no compile context (a direct call): the counter still tells graphs apart
        pass
    return compile_id, next(_graph_counter)


def _save_stem(graph_id: tuple[str, int]) -> str:
    """``<pid>-compile<id>-graph<n>``: which process, compile and graph."""
    compile_id, n = graph_id
    return f"{os.getpid()}-compile{compile_id.replace('/', '_')}-graph{n}"


def _log_ran(graph_id: tuple[str, int], report: Report, cached_from: int | None = None) -> None:
    """The one INFO line per graph that says the pass ran, in the process
    that compiled it: engines compile in spawned workers, where the pass
    object's ``reports`` are not the launching process's (``TORCH_LOGS=fxrewrite``
    shows it in every process). A graph served by Inductor's FX graph cache
    (``cached_from``: the pid that rewrote it) gets the same line, marked."""
    compile_id, n = graph_id
    if report.error:
        outcome = f"graph left untouched ({report.error})"
    else:
        outcome = (
            f"{report.found} auto_functionalized nodes, {report.found - len(report.left)} rewritten, "
            f"{len(report.left)} left, {len(report.clones)} copies"
        )
    if cached_from is not None:
        outcome += f" (from Inductor's FX graph cache: the rewrite pid {cached_from} made is in effect)"
    log.info(
        "fxrewrite ran: pid %d, compile %s, graph %d, %d nodes: %s",
        os.getpid(),
        compile_id,
        n,
        report.nodes,
        outcome,
    )


#: The files ``FXREWRITE_SAVE_DIR`` gets per graph, after the stem.
_SAVED_SUFFIXES = ("-before.fxir", "-after.fxir", ".html")


def _saved_files(directory: str, stem: str) -> dict[str, bytes]:
    """The files saved for ``stem``, by suffix, to go into the cache entry."""
    out: dict[str, bytes] = {}
    for suffix in _SAVED_SUFFIXES:
        path = os.path.join(directory, stem + suffix)
        if os.path.exists(path):
            with open(path, "rb") as f:
                out[suffix] = f.read()
    return out


def _record_for_cache(
    p: Pass, graph: torch.fx.Graph, report: Report, save_dir: str | None, stem: str
) -> None:
    """What goes into Inductor's cache entry of this graph (``_graph_cache``)."""
    try:
        _graph_cache.remember(
            graph,
            {
                "version": 1,
                "uuid": p.uuid(),
                "pid": os.getpid(),
                "stem": stem,
                "report": pickle.dumps(report),
                "files": _saved_files(save_dir, stem) if save_dir else {},
            },
        )
    except Exception as e:
        log.warning("fxrewrite: the FX graph cache entry will not say what fxrewrite did: %s", e)


def _replay(entry: dict[str, Any]) -> None:
    """A graph with fxrewrite's rewrite in it was served by Inductor's FX
    graph cache (``_graph_cache``): what the pass did when it made that graph,
    said again here, where the pass does not run: the log line (marked), the
    report (``last_report()``, and the pass object of this configuration), the
    structured-trace report and the ``FXREWRITE_SAVE_DIR`` files."""
    report = pickle.loads(entry["report"])
    if not isinstance(report, Report):
        raise TypeError(f"a cached record holds {type(report).__name__}, not a Report")
    report.from_cache = True
    graph_id = _graph_id()
    _log_ran(graph_id, report, cached_from=int(entry.get("pid", 0)))
    save_dir = os.environ.get("FXREWRITE_SAVE_DIR")
    if save_dir:
        files: dict[str, bytes] = entry.get("files") or {}
        if not files:
            log.warning(
                "fxrewrite: the cached graph %s was compiled without FXREWRITE_SAVE_DIR: nothing to save",
                entry.get("stem") or "",
            )
        else:
            stem = _save_stem(graph_id)
            try:
                os.makedirs(save_dir, exist_ok=True)
                for suffix, data in files.items():
                    with open(os.path.join(save_dir, stem + suffix), "wb") as f:
                        f.write(data)
            except OSError as e:
                log.warning("fxrewrite could not save %s to %s: %s", stem, save_dir, e)
    _trace(report)
    record(report)
    try:
        import torch._inductor.config as inductor_config

        for p in passes_of(inductor_config.post_grad_custom_post_pass, Pass):
            if p.uuid() == entry.get("uuid"):
                p._keep(report)
                break
    except Exception:  # the process-wide record above is the one that matters
        pass


def _save(graph: torch.fx.Graph, directory: str, stem: str) -> None:
    """Saves for ``FXREWRITE_SAVE_DIR``; a failure to save never fails the compile."""
    from .fxir import save

    try:
        os.makedirs(directory, exist_ok=True)
        save(graph, os.path.join(directory, f"{stem}.fxir"), origin=stem)
    except Exception as e:
        log.warning("fxrewrite could not save %s to %s: %s", stem, directory, e)


def _timed(name: str) -> Any:
    try:
        from torch._dynamo.utils import dynamo_timed

        return dynamo_timed(name, log_pt2_compile_event=True)
    except Exception:  # an older torch without the hook: no accounting
        import contextlib

        return contextlib.nullcontext()


#: The structured-trace artifacts of one graph (tlparse shows them beside
#: Inductor's own, per compile): the graph as the pass got it and as it left
#: it (Python code with shapes, as ``torch.fx`` prints it), the report, and
#: the HTML page of the rewritten regions. Stable names: tools may rely on them.
TRACE_ARTIFACTS = (
    "fxrewrite_graph_before",
    "fxrewrite_graph_after",
    "fxrewrite_report",
    "fxrewrite_regions_html",
)


def _trace_graph(graph: torch.fx.Graph, name: str) -> None:
    """``graph`` as the ``name`` artifact, printed only when tracing is on
    (``trace_structured`` calls the payload function only then, at once)."""
    try:
        from torch._logging import trace_structured  # type: ignore[attr-defined]

        trace_structured(
            "artifact",
            metadata_fn=lambda: {"name": name, "encoding": "string"},
            payload_fn=lambda: graph.python_code("self", verbose=True).src,
        )
    except Exception:  # tracing is diagnostics only; never fail a compile on it
        return


def _trace(report: Report) -> None:
    """The report as a structured-trace artifact, shown by tlparse beside
    Inductor's own."""
    try:
        from torch._logging import trace_structured  # type: ignore[attr-defined]

        trace_structured(
            "artifact",
            metadata_fn=lambda: {"name": "fxrewrite_report", "encoding": "json"},
            payload_fn=report.to_json,
        )
    except Exception:  # tracing is diagnostics only; never fail a compile on it
        return


def _mark_fake_tensors_current(graph: torch.fx.Graph, changed: Sequence[torch.fx.Node]) -> bool:
    """Tells the ``FakeTensorUpdater`` of the running ``post_grad_passes``
    that every node's ``meta['val']`` is current. Returns whether it was found.

    Why: right after the custom post pass, Inductor re-runs fake propagation
    on every node whose target or arguments changed, and then on their
    users, transitively. torch 2.15's sameness test (`_is_fake_tensor_same`)
    never accepts a recomputed tensor as unchanged when it checks storage, so
    the update spreads to everything downstream of a rewritten call: about
    70% of a decoder's nodes, for nothing. fxrewrite already gives every node
    it touches the value fake propagation gives: inserted nodes are computed
    on fake tensors, the views of re-pointed results are recomputed by the
    applier (they now view the written buffer), and the other re-pointed
    users keep their shapes and fresh storages. What is left is to say so:
    the updater lives in a local of ``post_grad_passes``, found on the stack.
    Where it is not found (another torch, a direct call) Inductor recomputes
    as before.

    Only ``changed`` (the nodes the rewrite created or re-pointed) has a hash
    the updater has not seen: a node's hash is its identity, target and
    arguments, unchanged for every other node. Hashing only those keeps the
    cost proportional to the rewrite (measured on the 10^4-node MoE graphs:
    31 ms for every node, 8 ms for the changed ones).
    """
    import sys
    import types

    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "post_grad_passes":
            updater = frame.f_locals.get("fake_tensor_updater")
            # Its graph: ``updater.gm.graph`` in newer torch (2.15), ``updater.graph`` in older (2.11).
            gm = getattr(updater, "gm", None)
            mine = gm.graph if gm is not None else getattr(updater, "graph", None)
            if updater is not None and mine is graph:
                return mark_current(updater, changed)
            return False
        frame = frame.f_back
    return False


def mark_current(updater: Any, changed: Sequence[torch.fx.Node]) -> bool:
    """Records ``changed`` as up to date in a ``FakeTensorUpdater``, so its
    next ``incremental_update`` recomputes none of them. Returns whether
    the updater has the fields this torch is known to use.

    ``processed_hashes`` and ``hash_node`` are in every supported torch;
    ``tracked_node_ids`` only in newer ones (2.15 has it, 2.11 does not), so
    it is filled where it exists. Not marking on 2.11 is not just slower:
    its updater then recomputes the users of the changed nodes, and its
    sameness test fails on a plain ``int`` value ("Unknown type <class
    'int'>"), such as a ``sym_size`` of a static dimension under dynamic
    shapes: the compile failed."""
    hashes = getattr(updater, "processed_hashes", None)
    if hashes is None or not hasattr(updater, "hash_node"):
        return False
    tracked = getattr(updater, "tracked_node_ids", None)
    for node in changed:
        hashes.add(updater.hash_node(node))
        if tracked is not None:
            tracked.add(id(node))
    return True


def _tracing() -> bool:
    """Is structured tracing (``TORCH_TRACE``, read by tlparse) on?"""
    try:
        from torch._logging._internal import trace_log

        return bool(trace_log.handlers)
    except Exception:
        return False


def _native_before(graph: torch.fx.Graph, save_dir: str | None, stem: str) -> Any:
    """The graph before the rewrite in the engine's form, for the HTML view;
    None when no view is wanted (no save dir, no tracing) or it has nothing to show."""
    from .encode import count_auto_functionalized, encode

    if not (save_dir or _tracing()) or count_auto_functionalized(graph) == 0:
        return None
    try:
        if save_dir:
            from pathlib import Path

            from .fxir import read_native

            return read_native(Path(save_dir) / f"{stem}-before.fxir", None)
        return encode(graph, with_sources=True, meta_mode="operands").native
    except Exception as e:
        log.warning("fxrewrite: no HTML view of %s: %s", stem or "this graph", e)
        return None


def _html(native: Any, save_dir: str | None, stem: str) -> None:
    """The before/after page of the rewritten regions: ``<stem>.html`` in the
    save dir, and the ``fxrewrite_regions_html`` artifact for tlparse. Never
    fails the compile."""
    from .htmlview import render_html

    try:
        page = render_html(native, title=stem or "graph")
    except Exception as e:
        log.warning("fxrewrite: no HTML view of %s: %s", stem or "this graph", e)
        return
    if save_dir:
        try:
            with open(os.path.join(save_dir, f"{stem}.html"), "w", encoding="utf-8") as f:
                f.write(page)
        except OSError as e:
            log.warning("fxrewrite could not save %s.html to %s: %s", stem, save_dir, e)
    try:
        from torch._logging import trace_structured  # type: ignore[attr-defined]

        trace_structured(
            "artifact",
            metadata_fn=lambda: {"name": "fxrewrite_regions_html", "encoding": "string"},
            payload_fn=lambda: page,
        )
    except Exception:
        return


class Pass(CustomGraphPass):
    """fxrewrite as an Inductor post-grad pass.

    Arguments:
        strict: raise instead of leaving nodes (or the whole graph) to Inductor.
            Defaults to the ``FXREWRITE_STRICT`` environment switch.
        leave: operators always left to Inductor (``torch.ops.ns.op``, an
            overload, a ``torch.library.custom_op`` object, or a name
            ``"ns::op"`` / ``"ns::op.overload"``), added to those
            ``FXREWRITE_LEAVE`` names: the escape hatch for a kernel that
            breaks its own schema (writes outside the view it is given).
            Strict mode does not raise for them.

    ``last_report`` holds the report of the most recent graph (per pass
    object; concurrent compiles may interleave, so prefer ``reports``).

    Raises:
        ValueError: an entry of ``leave`` is not an operator.
    """

    def __init__(self, *, strict: bool | None = None, leave: Sequence[Any] = ()) -> None:
        self.strict = strict
        self.leave = op_names(leave)
        self.last_report: Report | None = None
        self.reports: list[Report] = []

    def __call__(self, graph: torch.fx.Graph) -> None:
        save_dir = os.environ.get("FXREWRITE_SAVE_DIR")
        graph_id = _graph_id()
        stem = _save_stem(graph_id) if save_dir else ""
        if save_dir:
            _save(graph, save_dir, f"{stem}-before")
        native = _native_before(graph, save_dir, stem)
        tracing = _tracing()
        if tracing:
            _trace_graph(graph, "fxrewrite_graph_before")
        # Shows up in torch's compile-time accounting (tlparse, compile events).
        with _timed("fxrewrite_pass"):
            report, changed = rewrite_tracking_changes(graph, strict=self._strict(), leave=self.leave)
            if changed:
                changed = self._after_rewrite(graph, changed)
                _mark_fake_tensors_current(graph, changed)
        _log_ran(graph_id, report)
        if save_dir:
            _save(graph, save_dir, f"{stem}-after")
        if tracing:
            _trace_graph(graph, "fxrewrite_graph_after")
        _trace(report)
        if native is not None and report.error is None:
            _html(native, save_dir, stem)
        _graph_cache.install_hooks(_replay)
        _record_for_cache(self, graph, report, save_dir, stem)
        record(report)
        self._keep(report)

    def _keep(self, report: Report) -> None:
        self.last_report = report
        self.reports.append(report)
        del self.reports[:-64]

    def _strict(self) -> bool:
        return strict_from_env() if self.strict is None else self.strict

    def _after_rewrite(self, graph: torch.fx.Graph, changed: list[torch.fx.Node]) -> list[torch.fx.Node]:
        """A subclass's last edit of a rewritten graph (``fxrewrite.vllm``
        makes its copies survive vLLM's clone elimination). Returns the
        nodes created or re-pointed, ``changed`` included where still in
        the graph."""
        return changed

    def uuid(self) -> str:
        """Cache key: package version, native build, Python sources, rule set
        and configuration. Never None (None would turn Inductor's FX graph
        cache off). ``FXREWRITE_SAVE_DIR`` set or not is part of it (its path
        is not): a cached graph then carries the saved files, which a cache
        hit writes again (``_graph_cache``).

        Inductor calls it before every cache lookup, in every process that
        compiles: it also installs, once per process, what replays the
        pass's log line and report when the cache serves a graph."""
        from . import __version__

        _graph_cache.install_hooks(_replay)
        parts = [
            "fxrewrite",
            __version__,
            _core.engine_fingerprint(),
            native_build_id(),
            python_sources_id(),
            f"strict={self._strict()}",
            "leave=" + ",".join(sorted({*self.leave, *leave_from_env()})),
        ]
        if os.environ.get("FXREWRITE_SAVE_DIR"):
            parts.append("save")
        return hashlib.sha256("|".join(parts).encode()).hexdigest()


class ComposedPass(CustomGraphPass):
    """Several passes run in order as one; ``uuid()`` combines theirs.

    A pass without a ``uuid`` (a plain function) makes the combined pass
    uncacheable on purpose: Inductor cannot know when it changes.
    """

    def __init__(self, passes: Sequence[Callable[[torch.fx.Graph], Any]]) -> None:
        self.passes = list(passes)

    def __call__(self, graph: torch.fx.Graph) -> None:
        for p in self.passes:
            p(graph)

    def uuid(self) -> Any:
        keys = []
        for p in self.passes:
            u = p.uuid() if hasattr(p, "uuid") else None
            if u is None:
                return None
            keys.append(str(u))
        return hashlib.sha256("|".join(keys).encode()).hexdigest()


def passes_of(hook: Any, kind: type) -> list[Any]:
    """The passes of ``kind`` a hook value runs, in order: itself, those of
    a ``compose``, a list, or a pass manager's ``passes`` (vLLM's)."""
    if isinstance(hook, kind):
        return [hook]
    if isinstance(hook, list | tuple):
        return [q for p in hook for q in passes_of(p, kind)]
    passes = hook.passes if isinstance(hook, ComposedPass) else getattr(hook, "passes", None)
    if isinstance(passes, list | tuple):
        return [q for p in passes for q in passes_of(p, kind)]
    return []


def compose(*passes: Callable[[torch.fx.Graph], Any]) -> ComposedPass:
    """``compose(my_pass, fxrewrite.pass_)``: run user passes and fxrewrite as one
    Inductor custom pass with a correct combined cache key."""
    return ComposedPass(passes)


pass_ = Pass()
