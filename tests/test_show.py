"""The Rust printer (``rust/ir/show.rs``: FX's namer, ``num_users`` and
argument formatting, behind ``fxrewrite show``) against torch's own: each saved
fixture of a real compile (``tests/data/*.fxir``), loaded back into a
``torch.fx.Graph``, prints exactly as the Rust side prints the file."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

import cli_model  # noqa: F401  (registers the fxr_cli operators of the fixtures)
import fxrewrite
from fxrewrite.fxir import read_native

FIXTURES = sorted((Path(__file__).parent / "data").glob("*.fxir"))


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_show_matches_torch_fx_printer(path: Path) -> None:
    torch_text = str(fxrewrite.load(path).graph).rstrip("\n")
    rust_text = read_native(path).show().rstrip("\n")
    diff = "\n".join(
        difflib.unified_diff(torch_text.splitlines(), rust_text.splitlines(), "torch", "rust", lineterm="")
    )
    assert rust_text == torch_text, diff


def test_there_are_fixtures() -> None:
    assert len(FIXTURES) >= 2
