"""What the pass did, carried along with Inductor's FX graph cache entry.

With the cache warm, Inductor serves a compiled graph without running any
post-grad pass, so the pass's log line, report and ``FXREWRITE_SAVE_DIR``
files would be missing from every run after the first, although the graph
that runs is the rewritten one. So the pass's record of each graph (the
pickled ``Report``, the ``uuid()`` of the pass that made it, the saved files
when ``FXREWRITE_SAVE_DIR`` was set) rides along *inside* the cache entry:

- when the pass runs, it ``remember``\\ s its record against the ``fx.Graph``
  it rewrote;
- when Inductor makes the ``CompiledFxGraph`` of that graph module (its
  ``__init__`` gets the ``gm``), the records of its graphs become an
  attribute of that object, which Inductor's cache pickles with the rest
  (local, remote, and AOTAutograd's bundled entries alike);
- when Inductor serves a graph from the cache, every path goes through
  ``FxGraphCache.cache_hit_post_compile``; after it, the records found on
  the loaded graph are replayed (``inductor_pass._replay``): the log line
  marked as from the cache, the report, the saved files.

Nothing here enters the cache key (``Pass.uuid`` says which configuration
made the entry). The two wrappers are installed once per process by the
pass itself (``uuid()``, which Inductor calls before every lookup, and
``__call__``), so spawned workers that only import the pass by name get them
too. Any failure here is a warning; the compile goes on.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger("fxrewrite")

#: The attribute of a ``CompiledFxGraph`` that holds the records (a list of
#: dicts of plain values and bytes: unpickling the entry never needs fxrewrite).
ATTR = "_fxrewrite_records"

_lock = threading.Lock()
_installed = False
_pending: list[tuple[weakref.ref[Any], dict[str, Any]]] = []


def remember(graph: Any, record: dict[str, Any]) -> None:
    """Keeps ``record`` until the compiled graph of ``graph``'s module is made."""
    with _lock:
        _pending[:] = [(g, r) for g, r in _pending if g() is not None]
        _pending.append((weakref.ref(graph), record))


def _take(gm: Any) -> list[dict[str, Any]]:
    """The records of ``gm``'s graphs (its own and its submodules'), removed."""
    import torch.fx

    graphs = {id(m.graph) for m in gm.modules() if isinstance(m, torch.fx.GraphModule)}
    with _lock:
        mine = [r for g, r in _pending if id(g()) in graphs]
        _pending[:] = [(g, r) for g, r in _pending if g() is not None and id(g()) not in graphs]
    return mine


def _warn(what: str, e: BaseException) -> None:
    log.warning(
        "fxrewrite: %s failed (%s: %s); the compile goes on, but a graph served from "
        "Inductor's FX graph cache may not say what fxrewrite did to it",
        what,
        type(e).__name__,
        e,
    )


def install_hooks(replay: Callable[[dict[str, Any]], None]) -> None:
    """Wraps ``CompiledFxGraph.__init__`` and ``FxGraphCache.cache_hit_post_compile``
    once per process; ``replay`` (the pass's ``inductor_pass._replay``, passed in
    so that this module never imports the pass) says again what the pass did
    for each record of a graph the cache serves. Where this torch lacks either
    hook, warns once and does without."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        _installed = True
    try:
        from torch._inductor.codecache import FxGraphCache
        from torch._inductor.output_code import CompiledFxGraph

        _wrap_init(CompiledFxGraph)
        _wrap_hit(FxGraphCache, replay)
    except Exception as e:
        _warn("following Inductor's FX graph cache", e)


def _wrap_init(cls: Any) -> None:
    original = cls.__init__
    if getattr(original, "_fxrewrite", False):
        return
    params = list(inspect.signature(original).parameters)
    if "gm" not in params:
        raise TypeError("CompiledFxGraph.__init__ takes no gm")
    position = params.index("gm")  # counting self

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            gm = kwargs["gm"] if "gm" in kwargs else args[position - 1] if len(args) >= position else None
            records = _take(gm) if gm is not None else []
            if records:
                setattr(self, ATTR, records)
        except Exception as e:
            _warn("recording the rewrite in the compiled graph", e)

    __init__._fxrewrite = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


def _wrap_hit(cls: Any, replay: Callable[[dict[str, Any]], None]) -> None:
    original = inspect.getattr_static(cls, "cache_hit_post_compile")
    if not isinstance(original, staticmethod):
        raise TypeError("FxGraphCache.cache_hit_post_compile is not a staticmethod")
    func = original.__func__
    if getattr(func, "_fxrewrite", False):
        return

    @functools.wraps(func)
    def cache_hit_post_compile(*args: Any, **kwargs: Any) -> Any:
        result = func(*args, **kwargs)
        try:
            compiled = result[0] if isinstance(result, tuple) else None
            records = getattr(compiled, ATTR, None) if compiled is not None else None
            if records:
                for record in records:
                    replay(record)
        except Exception as e:
            _warn("replaying the rewrite of a cached graph", e)
        return result

    cache_hit_post_compile._fxrewrite = True  # type: ignore[attr-defined]
    cls.cache_hit_post_compile = staticmethod(cache_hit_post_compile)
