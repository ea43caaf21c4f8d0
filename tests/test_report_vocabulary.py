"""The report's enumerations are the engine's: ``fxrewrite.report``'s
``Literal`` types list exactly the names Rust serializes
(``_core.REPORT_VOCABULARY``, from ``Form``, ``Action`` and ``LeftCause``),
and every report the engine sends uses only those names."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

import cli_model  # noqa: F401  (registers the fxr_cli operators of the fixtures)
import fxrewrite
from fxrewrite import _core
from fxrewrite.report import Action, Cause, Form

FIXTURES = sorted((Path(__file__).resolve().parent / "data").glob("*.fxir"))


def test_the_literal_types_list_the_engine_s_names() -> None:
    assert _core.REPORT_VOCABULARY == {
        "form": list(typing.get_args(Form)),
        "action": list(typing.get_args(Action)),
        "cause": list(typing.get_args(Cause)),
    }


@pytest.mark.parametrize("saved", FIXTURES, ids=[f.name for f in FIXTURES])
def test_reports_use_only_those_names(saved: Path) -> None:
    """On the saved graphs, rewritten whole and with every operator left on
    request: each report's names are in the types."""
    rewritten = fxrewrite.rewrite(fxrewrite.load(saved).graph)
    live = fxrewrite.load(saved).graph
    ops = {
        n.args[0] for n in live.nodes if n.op == "call_function" and "auto_functionalized" in str(n.target)
    }
    left = fxrewrite.rewrite(live, leave=ops)
    decisions = rewritten.decisions + left.decisions
    assert {d.action for d in left.decisions} == {"left"}
    assert {d.cause for d in left.decisions} == {"requested"}
    assert {d.action for d in rewritten.decisions} - {"left"}
    for d in decisions:
        assert d.form in typing.get_args(Form)
        assert d.action in typing.get_args(Action)
        assert d.cause is None or d.cause in typing.get_args(Cause)
