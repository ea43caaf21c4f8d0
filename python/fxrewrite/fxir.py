"""Saved graphs: ``.fxir`` files (the engine's IR on disk) and ``torch.export``
archives.

``save`` writes a graph (with source lines, tensor metadata and provenance);
``load`` rebuilds a ``torch.fx.GraphModule`` when every operator it calls is
registered in this process. Reading ``.fxir`` for the command line tool needs
no torch: see ``read_native``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from . import _core
from ._core import FileFormatError, FxrewriteError

SUFFIX = ".fxir"
EXPORT_SUFFIXES = (".pt2",)


def read_native(path: str | os.PathLike[str]) -> _core.Graph:
    """Reads a ``.fxir`` file into the native IR without importing torch.

    Raises:
        FileFormatError: the file is truncated, corrupt or of another version.
        OSError: the file cannot be read.
    """
    data = Path(path).read_bytes()
    return _core.Graph.read(data)


def save(graph_or_module: Any, path: str | os.PathLike[str], *, origin: str = "") -> None:
    """Writes ``graph_or_module`` (an ``fx.Graph`` or ``GraphModule``) to ``path``."""
    import torch
    import torch.fx

    from . import __version__
    from .encode import encode

    graph = graph_or_module.graph if isinstance(graph_or_module, torch.fx.GraphModule) else graph_or_module
    enc = encode(graph, with_sources=True)
    native = _core.Graph.from_parts(*enc.parts)
    info = [("torch_version", str(torch.__version__)), ("producer", f"fxrewrite {__version__}")]
    if origin:
        info.append(("origin", origin))
    Path(path).write_bytes(native.write(info))


def native_from_export(path: str | os.PathLike[str]) -> _core.Graph:
    """The graph of a ``torch.export.save`` archive, in native IR form. Input
    mutations recorded in the graph signature go into the provenance pairs
    (``mutated_inputs``): export returns them as outputs instead of writing
    them back, so the engine keeps such inputs unmutated."""
    import torch

    from .encode import encode

    # torch logs a full traceback before raising; the error we raise says it all.
    export_log = logging.getLogger("torch.export")
    level = export_log.level
    export_log.setLevel(logging.CRITICAL)
    try:
        ep = torch.export.load(str(path))
    except Exception as e:
        raise FileFormatError(
            f"{path}: not a readable torch.export archive ({type(e).__name__}: {str(e)[:300]}); if the program "
            "uses custom operators, import the library that defines them first (fxrewrite --import MODULE)"
        ) from e
    finally:
        export_log.setLevel(level)
    # torch.export keeps mutating operators as they are (a non-functional IR);
    # functionalizing it, with no decompositions, gives the graph Inductor sees.
    try:
        ep = ep.run_decompositions({})
    except Exception as e:
        raise FxrewriteError(
            f"{path}: could not functionalize the exported program: {type(e).__name__}: {e}"
        ) from e
    enc = encode(ep.graph, with_sources=True)
    native = _core.Graph.from_parts(*enc.parts)
    sig = ep.graph_signature
    mutated = sorted(set(sig.user_inputs_to_mutate.values()) | set(sig.buffers_to_mutate.values()))
    info = [("torch_version", str(torch.__version__)), ("origin", f"torch.export archive {Path(path).name}")]
    if mutated:
        info.append(("mutated_inputs", ",".join(mutated)))
    return _core.Graph.read(native.write(info))


def load(path: str | os.PathLike[str]) -> Any:
    """Reads a ``.fxir`` file back into a ``torch.fx.GraphModule``.

    Raises:
        FileFormatError: the file is unreadable.
        FxrewriteError: an operator it calls is not registered in this process
            (import the library that defines it first), or the graph refers to
            module attributes the file does not store.
    """
    import operator

    import torch
    import torch.fx
    from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2

    native = read_native(path)
    targets, nodes = native.to_parts()

    def resolve(t: tuple[str, int, Any], node_name: str) -> Any:
        name, kind, _schema = t
        if kind == 0:
            ns_name, overload = name.split(".", 1)
            ns, op = ns_name.split("::", 1)
            try:
                return getattr(getattr(getattr(torch.ops, ns), op), overload)
            except (AttributeError, RuntimeError) as e:
                raise FxrewriteError(
                    f"{path}: node {node_name} calls operator {name}, which is not registered in this "
                    "process; import the library that defines it before loading"
                ) from e
        if kind == 1:
            return operator.getitem
        if kind == 2:
            return auto_functionalized
        if kind == 3:
            return auto_functionalized_v2
        if kind == 4:
            return getattr(torch.ops.higher_order, name.removeprefix("higher_order."))
        raise FxrewriteError(f"{path}: node {node_name} calls {name}, which cannot be resolved when loading")

    graph = torch.fx.Graph()
    made: list[torch.fx.Node] = []
    resolved: dict[int, Any] = {}

    def value(v: Any) -> Any:
        if not isinstance(v, tuple):
            return v
        tag, body = v
        if tag == 0:
            return made[body]
        if tag == 1:
            return [value(x) for x in body]
        if tag == 2:
            return tuple(value(x) for x in body)
        if tag == 3:
            return getattr(torch, body)
        if tag == 4:
            return torch.device(body)
        if tag == 5:
            return getattr(torch, body)
        if tag == 6:
            return getattr(torch, body)
        if tag == 7:
            return resolve(targets[body], "?")
        raise FxrewriteError(f"{path}: a constant ({body}) cannot be rebuilt when loading")

    opnames = ["placeholder", "get_attr", "call_function", "call_method", "call_module", "output"]
    for opcode, name, tid, args, kwargs, _meta, _source in nodes:
        op = opnames[opcode]
        if op in ("get_attr", "call_module"):
            raise FxrewriteError(
                f"{path}: node {name} refers to a module attribute, which .fxir does not store"
            )
        if op == "call_function":
            if tid not in resolved:
                resolved[tid] = resolve(targets[tid], name)
            target = resolved[tid]
        else:
            target = targets[tid][0]
        n = graph.create_node(
            op, target, tuple(value(a) for a in args), {k: value(v) for k, v in kwargs}, name=name
        )
        made.append(n)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def expand_paths(paths: list[str]) -> list[Path]:
    """Files and, recursively, the saved graphs inside directories, sorted."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out.extend(sorted(q for q in path.rglob("*") if q.suffix in (SUFFIX, *EXPORT_SUFFIXES)))
        else:
            out.append(path)
    return out
