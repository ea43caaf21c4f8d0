"""What a CUDA-graph check configuration counts (``benches/cuda_graphs.py``'s
worker): auto_functionalized nodes left when a post-grad pass runs, CUDA
graphs captured, copy-like kernels in a profile, and the largest error
against eager. Kept apart from the runner so each file reads as one job."""

from __future__ import annotations

from typing import Any

#: Kernel and memcpy names counted as copies (lowercased substrings).
COPY_WORDS = ("copy", "memcpy", "clone")


class AfCounter:
    """A post-grad custom pass that changes nothing and records how many
    auto_functionalized nodes are left when it runs (after fxrewrite, when
    composed after it): vLLM's assertion before capture, as a number."""

    def __init__(self) -> None:
        self.counts: list[int] = []

    def __call__(self, graph: Any) -> None:
        from fxrewrite.encode import count_auto_functionalized

        self.counts.append(count_auto_functionalized(graph))

    def uuid(self) -> None:  # never cached (the FX graph cache is off anyway)
        return None


CAPTURES = [0]


def count_captures() -> int:
    """CUDA graphs captured in this process so far (the first call patches
    ``torch.cuda.CUDAGraph.capture_end``, which every capture ends with)."""
    import torch

    graph_cls: Any = torch.cuda.CUDAGraph
    if not getattr(graph_cls, "_fxr_counted", False):
        capture_end = graph_cls.capture_end

        def counted_capture_end(self: Any) -> None:
            capture_end(self)
            CAPTURES[0] += 1

        graph_cls.capture_end = counted_capture_end
        graph_cls._fxr_counted = True
    return CAPTURES[0]


def copy_kernels(prof: Any, cuda: bool) -> tuple[int, int, dict[str, int]]:
    """(copy-like events, all kernels, copy-like names with counts) in a profile:
    device kernels and memcpys on CUDA, aten operators on the CPU."""
    import torch

    copies, kernels, names = 0, 0, {}
    for evt in prof.events():
        if cuda:
            if evt.device_type != torch.autograd.DeviceType.CUDA:
                continue
        elif not evt.name.startswith("aten::"):
            continue
        kernels += 1
        if any(w in evt.name.lower() for w in COPY_WORDS):
            copies += 1
            names[evt.name[:120]] = names.get(evt.name[:120], 0) + 1
    return copies, kernels, names


def max_err(got: Any, want: Any) -> float:
    import torch

    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf")
    if not got.is_floating_point():
        return 0.0 if torch.equal(got, want) else float("inf")
    return float((got.double() - want.double()).abs().max().item()) if got.numel() else 0.0
