"""What vLLM does with a configured post-grad pass, replayed without vLLM
(CI has none), and the children the spawn tests start.

Each function names the vLLM code it stands in for (read in vLLM's source):

- ``resolve_like_vllm_config``: ``vllm/config/compilation.py``,
  ``CompilationConfig.__post_init__`` on ``inductor_passes``:
  ``__import__(module).__dict__[name]``, wrapped in ``CallableInductorPass``
  unless it is an ``InductorPass``;
- ``resolve_obj_by_qualname``: ``vllm/utils/import_utils.py``
  (``importlib.import_module`` + ``getattr``);
- ``load_general_plugins``: ``vllm/plugins/__init__.py`` (entry points of
  group ``vllm.general_plugins``, each loaded and called);
- ``StandInPostGradPassManager``, ``configure_post_pass``:
  ``vllm/compilation/passes/pass_manager.py`` and ``backends.py``
  (``VllmBackend.configure_post_pass``);
- ``unsafe_clone_elimination``: ``passes/ir/clone_elimination.py``;
  ``post_cleanup``: ``passes/utility/post_cleanup.py``.

The children run in processes started with multiprocessing's ``spawn``, as
vLLM's CPU platform starts its workers: nothing of the parent's Inductor
configuration is there, only its environment and what is pickled across.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import logging
import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomllib
import torch
import torch._dynamo
import torch.fx
from torch._higher_order_ops.auto_functionalize import auto_functionalized
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._ops import OpOverload

ROOT = Path(__file__).resolve().parent.parent
STANDIN_VLLM = Path(__file__).resolve().parent / "standin_vllm"
PLUGIN_GROUP = "vllm.general_plugins"
NAME = "fxrewrite.vllm.pass_"  # the documented names
PRE_NAME = "fxrewrite.vllm.pre_pass"


@torch.library.custom_op("fxr_vllmcfg::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(100)


# ----- programs where the rewrite needs a copy --------------------------------------
# Issue 31's four, and two more where vLLM's clone elimination, which does
# not follow views, would remove a copy the rewritten call writes.


def copy_written(a):
    x = a * 2
    y = x.clone()
    torch.ops.fxr_vllmcfg.bump_(y)
    return x, y


def copy_row_written(a):
    x = a * 2
    y = x.clone()
    torch.ops.fxr_vllmcfg.bump_(y[0])
    return x, y


def copy_written_twice(a):
    x = a * 2
    y = x.clone()
    torch.ops.fxr_vllmcfg.bump_(y)
    torch.ops.fxr_vllmcfg.bump_(y)
    return x, y


def view_read_later(a):
    x = a * 2
    v = x[1]
    y = x.clone()
    torch.ops.fxr_vllmcfg.bump_(y)
    return v + 1, y


def view_read_later_and_returned(a):
    x = a * 2
    v = x[0]
    y = x.clone()
    torch.ops.fxr_vllmcfg.bump_(y)
    return v + 1, x, y


def input_copy_row_written(a):
    y = a.clone()
    torch.ops.fxr_vllmcfg.bump_(y[0])
    return a, y


PROGRAMS: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (
        copy_written,
        copy_row_written,
        copy_written_twice,
        view_read_later,
        view_read_later_and_returned,
        input_copy_row_written,
    )
}


# ----- vLLM's resolution of a configured name ---------------------------------------


def resolve_like_vllm_config(qualname: str, inductor_pass: type, callable_pass: type) -> Any:
    names = qualname.split(".")
    module = ".".join(names[:-1])
    func = __import__(module).__dict__[names[-1]]
    return func if isinstance(func, inductor_pass) else callable_pass(func)


def resolve_obj_by_qualname(qualname: str) -> Any:
    module_name, obj_name = qualname.rsplit(".", 1)
    return getattr(importlib.import_module(module_name), obj_name)


# ----- vLLM's plugins ------------------------------------------------------------------


def declared_plugins() -> dict[str, str]:
    """``[project.entry-points."vllm.general_plugins"]`` of pyproject.toml."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    return dict(project.get("entry-points", {}).get(PLUGIN_GROUP, {}))


def write_plugin_distribution(directory: Path) -> Path:
    """A distribution's metadata carrying pyproject.toml's plugin entry
    points, for a process whose fxrewrite install predates them (an
    editable install's metadata is written at install time). Returns the
    folder to put on ``sys.path``."""
    info = directory / "fxrewrite_plugin_under_test-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fxrewrite-plugin-under-test\nVersion: 0\n")
    lines = [f"[{PLUGIN_GROUP}]"] + [f"{k} = {v}" for k, v in declared_plugins().items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return directory


def load_general_plugins() -> list[str]:
    """Every entry point of the group, loaded and called; returns their names."""
    called = []
    for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        ep.load()()
        called.append(ep.name)
    return called


# ----- vLLM's post-grad manager and what it runs after a user's pass ---------------


def _user_writes_to_node(user: torch.fx.Node, node: torch.fx.Node) -> bool:
    if user.op == "output":
        return False
    if user.op == "call_function" and user.target is auto_functionalized:
        return False  # a functional use; vLLM's pass skips it
    assert isinstance(user.target, OpOverload), (node, user, user.op, user.target)
    schema = user.target._schema
    assert len(user.args) <= len(schema.arguments)
    return any(arg is node and schema.arguments[i].is_write for i, arg in enumerate(user.args))


def unsafe_clone_elimination(graph: torch.fx.Graph, donated_input_ids: frozenset[int] = frozenset()) -> int:
    """vLLM's rule: remove every ``aten.clone.default`` unless exactly one
    direct user writes it and the original has a direct user after that
    write or is a non-donated graph input. At most one writer per clone."""
    index = {n: i for i, n in enumerate(graph.nodes)}
    removed = 0
    for node in list(graph.nodes):
        if not (node.op == "call_function" and node.target is torch.ops.aten.clone.default):
            continue
        original = node.args[0]
        assert isinstance(original, torch.fx.Node)
        writes = [index[u] for u in node.users if _user_writes_to_node(u, node)]
        assert len(writes) in (0, 1)
        if writes:
            if any(index[u] > writes[0] for u in original.users):
                continue
            if original.op == "placeholder" and index[original] not in donated_input_ids:
                continue
        node.replace_all_uses_with(original)
        graph.erase_node(node)
        removed += 1
    return removed


def post_cleanup(graph: torch.fx.Graph) -> None:
    from torch._inductor.pattern_matcher import stable_topological_sort

    stable_topological_sort(graph)
    graph.eliminate_dead_code()


class StandInPostGradPassManager(CustomGraphPass):
    """vLLM's order: its passes and the user's (appended, each asked
    ``is_applicable_for_range``), post_cleanup, IR lowering (nothing here),
    clone elimination, post_cleanup, fix_functionalization (nothing is left
    for it after fxrewrite; it only counts)."""

    def __init__(self, inductor_pass: type | None) -> None:
        self.inductor_pass = inductor_pass
        self.passes: list[Any] = []
        self.clones_removed: list[int] = []
        self.left_for_fix_functionalization: list[int] = []

    def add(self, p: Any) -> None:
        if self.inductor_pass is not None:
            assert isinstance(p, self.inductor_pass)
        self.passes.append(p)

    def __call__(self, graph: torch.fx.Graph) -> None:
        for p in self.passes:
            # vLLM asks each pass (all are InductorPass there); the control
            # test puts a plain Pass here, as if vLLM had let it in.
            if getattr(p, "is_applicable_for_range", lambda _: True)(None):
                p(graph)
        post_cleanup(graph)
        self.clones_removed.append(unsafe_clone_elimination(graph))
        post_cleanup(graph)
        self.left_for_fix_functionalization.append(
            sum(1 for n in graph.nodes if n.op == "call_function" and n.target is auto_functionalized)
        )

    def uuid(self) -> str:
        keys = [p.uuid() for p in self.passes] + ["cleanup", "clone-elimination", "cleanup", "fix"]
        return hashlib.sha256(json.dumps(keys).encode()).hexdigest()


def configure_post_pass(inductor_config: dict[str, Any], manager: StandInPostGradPassManager) -> None:
    key = "post_grad_custom_post_pass"
    if key in inductor_config:
        manager.add(inductor_config[key])
    inductor_config[key] = manager


def run_program(name: str, inductor_config: dict[str, Any], v2: bool, dynamic: bool = False) -> bool:
    """Compiles program ``name`` under ``inductor_config`` (as vLLM hands its
    config to Inductor) and returns whether its values equal eager's."""
    fn = PROGRAMS[name]
    torch._dynamo.reset()
    a = torch.randn(3, 4, generator=torch.Generator().manual_seed(3))
    expected = fn(a.clone())
    config = {**inductor_config, "fx_graph_cache": False, "enable_auto_functionalized_v2": v2}
    with torch._inductor.config.patch(config):
        got = torch.compile(fn, fullgraph=True, dynamic=dynamic)(a.clone())
    return all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))


# ----- the children -------------------------------------------------------------------


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def _listen() -> _Lines:
    handler = _Lines()
    logger = logging.getLogger("fxrewrite")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return handler


def _the_rewrite_in(hook: Any) -> Any:
    from fxrewrite.inductor_pass import Pass, passes_of

    found = passes_of(hook, Pass)
    return found[0] if found else None


def child_by_install(plugin_dir: str) -> dict[str, Any]:
    """A worker configured only by ``install()`` in its parent: what it
    inherited is ``FXREWRITE_INSTALL``; it loads vLLM's plugins as vLLM
    does, then compiles a program with a mutating custom op."""
    sys.path.insert(0, plugin_dir)
    requested = os.environ.get("FXREWRITE_INSTALL")
    import torch._inductor.config as config

    hook_before = config.post_grad_custom_post_pass
    # The plugin does nothing unless asked: first with the request hidden.
    os.environ.pop("FXREWRITE_INSTALL", None)
    called_unasked = load_general_plugins()
    hook_unasked = config.post_grad_custom_post_pass
    if requested is not None:
        os.environ["FXREWRITE_INSTALL"] = requested
    called = load_general_plugins()
    ours = _the_rewrite_in(config.post_grad_custom_post_pass)
    lines = _listen()
    torch._dynamo.reset()
    equal = run_program("copy_row_written", {}, v2=False)
    report = ours.last_report if ours is not None else None
    return {
        "pid": os.getpid(),
        "requested": requested,
        "hook_before": repr(hook_before),
        "plugins_unasked": called_unasked,
        "hook_unasked": repr(hook_unasked),
        "plugins": called,
        "installed_pre_pass": type(config.joint_custom_pre_pass).__name__,
        "uuid": ours.uuid() if ours is not None else None,
        "found": report.found if report else None,
        "left": len(report.left) if report else None,
        "equal": equal,
        "lines": lines.lines,
    }


def _raw_resolution(qualname: str) -> Any:
    """vLLM's config lookup without its wrapping (no vLLM, no wrapper)."""
    names = qualname.split(".")
    return __import__(".".join(names[:-1])).__dict__[names[-1]]


def child_by_name(name: str, with_standin_vllm: bool) -> dict[str, Any]:
    """A process configured only by the qualified name, as a ``vllm serve
    --compilation-config '...'`` process is: it resolves the name as vLLM's
    config does (and as ``resolve_obj_by_qualname`` does), pickles the result
    as vLLM does to send its config to the engine's processes, and compiles
    with it as the CPU platform does (the config handed to Inductor) and,
    with the stand-in vLLM, through vLLM's manager (the GPU path)."""
    if with_standin_vllm:
        sys.path.insert(0, str(STANDIN_VLLM))
        from vllm.compilation.passes.inductor_pass import CallableInductorPass, InductorPass

    import fxrewrite

    out: dict[str, Any] = {"pid": os.getpid(), "pass_bound_before": "pass_" in fxrewrite.__dict__}
    by_qualname = resolve_obj_by_qualname(name)
    pre_by_qualname = resolve_obj_by_qualname(PRE_NAME)
    if with_standin_vllm:
        resolved = resolve_like_vllm_config(name, InductorPass, CallableInductorPass)
        pre = resolve_like_vllm_config(PRE_NAME, InductorPass, CallableInductorPass)
        out["wrapped"] = isinstance(resolved, CallableInductorPass) or isinstance(pre, CallableInductorPass)
        out["is_inductor_pass"] = isinstance(resolved, InductorPass) and isinstance(pre, InductorPass)
    else:
        resolved = _raw_resolution(name)
        pre = _raw_resolution(PRE_NAME)
    out["pre_same_object"] = pre is pre_by_qualname is fxrewrite.pre_pass
    out["pre_uuid"] = pickle.loads(pickle.dumps(pre)).uuid()
    shipped = pickle.loads(pickle.dumps(resolved))
    lines = _listen()
    out.update(
        {
            "vllm_imported": "vllm" in sys.modules,
            "same_object": resolved is by_qualname,
            "is_fxrewrite_pass_": resolved is fxrewrite.pass_,
            "class": f"{type(resolved).__module__}.{type(resolved).__qualname__}",
            "shipped_class": f"{type(shipped).__module__}.{type(shipped).__qualname__}",
            "uuid": resolved.uuid(),
            "shipped_uuid": shipped.uuid(),
            "fxrewrite_uuid": fxrewrite.Pass().uuid(),
        }
    )
    runs = {
        "cpu": {
            "post_grad_custom_post_pass": shipped,
            "joint_custom_pre_pass": pickle.loads(pickle.dumps(pre)),
        }
    }
    manager = None
    if with_standin_vllm:
        manager = StandInPostGradPassManager(InductorPass)
        gpu: dict[str, Any] = {"post_grad_custom_post_pass": pickle.loads(pickle.dumps(resolved))}
        configure_post_pass(gpu, manager)
        runs["gpu"] = gpu
    for route, config in runs.items():
        ours = _the_rewrite_in(config["post_grad_custom_post_pass"])
        out[f"{route}_equal"] = run_program("copy_row_written", config, v2=False)
        report = ours.last_report
        out[f"{route}_found"] = report.found if report else None
        out[f"{route}_left"] = len(report.left) if report else None
    if manager is not None:
        out["clones_removed"] = manager.clones_removed
        out["left_for_fix_functionalization"] = manager.left_for_fix_functionalization
    out["lines"] = lines.lines
    return out
