"""A model on mutating custom ops (namespace `fxr_cli`) whose compiled graphs the
command line tests save, damage and read back."""

from __future__ import annotations

import torch


@torch.library.custom_op("fxr_cli::add_rms_", mutates_args=("x", "res"))
def add_rms_(x: torch.Tensor, res: torch.Tensor, w: torch.Tensor) -> None:
    res.add_(x)
    x.copy_(res * w)


@torch.library.custom_op("fxr_cli::write_rows_", mutates_args=("cache",))
def write_rows_(cache: torch.Tensor, rows: torch.Tensor) -> None:
    cache[: rows.shape[0]].copy_(rows)


def model(x: torch.Tensor, res: torch.Tensor, w: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    h = x * 2
    torch.ops.fxr_cli.add_rms_(h, res, w)
    torch.ops.fxr_cli.write_rows_(cache, h)
    return h.sum(0) + res.sum(0)


def inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(4, 8, generator=g),
        torch.randn(4, 8, generator=g),
        torch.randn(8, generator=g),
        torch.zeros(6, 8),
    )


class Mutating(torch.nn.Module):
    """For torch.export: mutates a buffer through a custom op."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(6, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.ops.fxr_cli.write_rows_(self.cache, x * 3)
        return self.cache.sum(0)


class WritesInputAndBuffer(torch.nn.Module):
    """For torch.export: a user-input mutation (``res``) and a buffer mutation
    (``cache``), which the exported graph returns as outputs its signature
    lists as mutations."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w", torch.linspace(0.5, 1.5, 8))
        self.register_buffer("cache", torch.zeros(6, 8))

    def forward(self, x: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        h = x * 2
        torch.ops.fxr_cli.add_rms_(h, res, self.w)
        torch.ops.fxr_cli.write_rows_(self.cache, h)
        return h.sum(0) + self.cache.sum(0)


if __name__ == "__main__":
    # Compile once with the pass installed; FXREWRITE_SAVE_DIR makes it save.
    import fxrewrite

    torch._inductor.config.fx_graph_cache = False
    torch._inductor.config.post_grad_custom_post_pass = fxrewrite.Pass(strict=True)
    args = inputs()
    expected = model(*[a.clone() for a in args])
    got = torch.compile(model)(*args)
    assert torch.allclose(got, expected)
