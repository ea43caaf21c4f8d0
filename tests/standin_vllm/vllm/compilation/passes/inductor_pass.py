"""Stand-in of ``vllm/compilation/passes/inductor_pass.py``: the base class
vLLM's post-grad manager asserts, and the wrapper vLLM's config puts around
any other callable (its cache key is a hash of source text, not the
callable's ``uuid()``)."""

from __future__ import annotations

import hashlib
import inspect
import json
import types
from collections.abc import Callable
from typing import Any

import torch.fx
from torch._inductor.custom_graph_pass import CustomGraphPass


class InductorPass(CustomGraphPass):
    """vLLM's pass base: ``uuid()`` defaults to a hash of the class source."""

    def uuid(self) -> Any:
        return InductorPass.hash_source(self)

    @staticmethod
    def hash_source(*srcs: Any) -> str:
        h = hashlib.sha256()
        for src in srcs:
            if isinstance(src, str):
                text = src
            elif isinstance(src, types.FunctionType | type):
                text = inspect.getsource(src)
            else:
                text = inspect.getsource(src.__class__)
            h.update(text.encode())
        return h.hexdigest()

    @staticmethod
    def hash_dict(d: dict[Any, Any]) -> str:
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()

    def is_applicable_for_range(self, compile_range: Any) -> bool:
        return True


class CallableInductorPass(InductorPass):
    """What vLLM's config makes of a resolved name that is not an InductorPass."""

    def __init__(self, callable: Callable[[torch.fx.Graph], None], uuid: Any = None) -> None:
        self.callable = callable
        self._uuid = self.hash_source(callable) if uuid is None else uuid

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.callable(graph)

    def uuid(self) -> Any:
        return self._uuid
