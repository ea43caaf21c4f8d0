"""The report's entries are the engine's own types (``_core.Decision``,
``_core.CloneNote``: frozen views of ``rust/plan/mod.rs``'s ``NodeReport``
and ``CloneNote``), handed over without a JSON round trip: they say what the
engine serializes, refuse names the engine never writes, cannot be changed
in place, and survive pickling (a pass object holding reports may be
pickled into a serving engine's workers)."""

from __future__ import annotations

import ast
import dataclasses
import json
import pickle
import typing
from pathlib import Path

import pytest
import torch

import cli_model  # noqa: F401  (registers the fxr_cli operators of the fixtures)
from conftest import compile_and_compare
from fxrewrite import CloneNote, Decision, Report, _core
from fxrewrite.report import Action, Cause, Form

FIXTURES = sorted((Path(__file__).resolve().parent / "data").glob("*.fxir"))
LIVE_ONLY = {"bytes_expr", "bytes_at_trace"}  # never in a saved plan's JSON


@pytest.mark.parametrize("saved", FIXTURES, ids=[f.name for f in FIXTURES])
def test_the_entries_say_what_the_engine_serializes(saved: Path) -> None:
    """On the saved graphs, rewritten and left on request: every field of
    every decision (and its clones) equals the engine's own JSON of it."""
    graph = _core.Graph.read(saved.read_bytes())
    ops = sorted({d.op for d in Report.from_plan(graph.plan()).decisions})
    for plan in (graph.plan(), graph.plan(ops)):
        engine = json.loads(plan.report_json())
        report = Report.from_plan(plan)
        assert report.decisions, "a saved graph without auto_functionalized nodes tests nothing"
        assert [report.nodes, report.writebacks_removed, report.realized] == [
            engine["nodes"],
            engine["writebacks_removed"],
            engine["realized"],
        ]
        ours = [d.to_dict() for d in report.decisions]
        for d in ours:
            d["clones"] = [{k: v for k, v in c.items() if k not in LIVE_ONLY} for c in d["clones"]]
        assert ours == engine["decisions"]


def test_a_clone_from_a_real_compile_carries_the_live_facts_and_pickles() -> None:
    """A compile whose reader cannot move keeps a clone: its note names the
    reader and the reader's source line (added from the live graph to the
    engine's note), and the whole report survives pickling and JSON."""

    def reads_old_and_new(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        z = y.clone()
        torch.ops.fxr_test.scale_(z, 3.0)
        return z + y  # reads the old `y` and the written `z`: cannot move before the call

    c = compile_and_compare(reads_old_and_new, torch.randn(4, 8))
    assert all(type(d) is _core.Decision for d in c.report.decisions)
    [clone] = c.report.clones
    assert clone.reader and clone.reader_source and "return z + y" in clone.reader_source, clone
    assert clone.bytes == 4 * 8 * 4 and clone.bytes_expr is None
    back = pickle.loads(pickle.dumps(c.report))
    assert back.decisions == c.report.decisions and back.to_dict() == c.report.to_dict()
    assert json.loads(c.report.to_json())["decisions"][0]["clones"][0]["reader_source"] == clone.reader_source


def test_the_constructors_take_every_name_of_the_vocabulary_and_no_other() -> None:
    rule = _core.engine_fingerprint().split(":")[1].split(",")[0]
    for form in typing.get_args(Form):
        for action in typing.get_args(Action):
            for cause in (None, *typing.get_args(Cause)):
                d = Decision("n", "ns::op", form, rule, action, cause=cause)
                assert (d.form, d.action, d.cause, d.rule) == (form, action, cause, rule)
    assert Decision("n", "ns::op", "v1", "none", "left").rule == "none"
    for bad in (
        {"form": "v3"},
        {"action": "Left"},
        {"cause": "unattributed"},
        {"rule": "reinplace_v3"},
    ):
        args = {"node": "n", "op": "ns::op", "form": "v1", "rule": rule, "action": "left", **bad}
        with pytest.raises(ValueError, match=repr(next(iter(bad.values()))).strip("'")):
            Decision(**args)


def test_entries_are_frozen_and_copies_change_only_what_they_name() -> None:
    note = CloneNote("out", "r", reader="mul", reader_source="m.py:3: y = x * 2", bytes=None)
    with pytest.raises(AttributeError):
        note.reason = "other"  # type: ignore[misc]
    live = note.with_live_facts(bytes_expr="4*s0", bytes_at_trace=32)
    # An omitted fact keeps the note's; a given one replaces it.
    assert live.to_dict() == {**note.to_dict(), "bytes_expr": "4*s0", "bytes_at_trace": 32}
    assert live.with_live_facts(reader_source="other.py:1").reader_source == "other.py:1"
    d = Decision("af", "ns::op", "v2", "none", "cloned", moved=["a"], clones=[note])
    with pytest.raises(AttributeError):
        d.action = "left"  # type: ignore[misc]
    moved = d.moved
    moved.append("b")  # a copy: the decision is unchanged
    assert d.moved == ["a"]
    e = d.with_clones([live])
    assert e.clones == [live] and d.clones == [note]
    assert {k: v for k, v in e.to_dict().items() if k != "clones"} == {
        k: v for k, v in d.to_dict().items() if k != "clones"
    }
    assert e != d and pickle.loads(pickle.dumps(e)) == e
    # By value, like the frozen dataclasses they replace: equal ones hash alike.
    assert len({d, Decision("af", "ns::op", "v2", "none", "cloned", moved=["a"], clones=[note]), e}) == 2
    assert hash(note.with_live_facts()) == hash(note)


def test_a_report_with_an_error_and_timings_is_json() -> None:
    r = Report(nodes=3, error="InternalError: x", timings={"total": 0.5})
    assert json.loads(r.to_json()) == {
        "nodes": 3,
        "decisions": [],
        "writebacks_removed": 0,
        "realized": 0,
        "error": "InternalError: x",
        "timings": {"total": 0.5},
    }
    assert "left untouched" in r.summary()


def _stub_class(name: str) -> ast.ClassDef:
    stub = ast.parse(Path(_core.__file__).with_name("_core.pyi").read_text())
    [cls] = [n for n in stub.body if isinstance(n, ast.ClassDef) and n.name == name]
    return cls


def _stub_fields(name: str) -> tuple[list[str], list[str]]:
    """The constructor's parameters and the properties ``_core.pyi`` declares
    for ``name``, each in the stub's order."""
    cls = _stub_class(name)
    [new] = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__new__"]
    params = [a.arg for a in new.args.args[1:]]
    properties = [
        f.name
        for f in cls.body
        if isinstance(f, ast.FunctionDef) and any(ast.unparse(d) == "property" for d in f.decorator_list)
    ]
    return params, properties


def test_the_fields_are_the_engines_in_its_order_and_the_stub_says_so() -> None:
    """The engine's types are the one declaration of the entries' fields:
    the classes' fields are the keys of the engine's JSON, in its order;
    the stub (a typed view for type checkers) declares the same, in that
    order; so do the keys of ``Plan.report`` and ``Report``'s first fields."""
    plan = _core.Graph.read(FIXTURES[0].read_bytes()).plan()
    engine = json.loads(plan.report_json())
    decision = engine["decisions"][0]
    assert Decision.__match_args__ == tuple(decision)
    note = CloneNote("x", "r").to_dict()
    assert CloneNote.__match_args__ == tuple(note) and set(LIVE_ONLY) < set(note)
    for cls in (CloneNote, Decision):
        assert _stub_fields(cls.__name__) == (list(cls.__match_args__), list(cls.__match_args__)), cls
    typed = [ast.unparse(s.target) for s in _stub_class("ReportFields").body if isinstance(s, ast.AnnAssign)]
    assert typed == list(plan.report()) == list(engine)
    assert [f.name for f in dataclasses.fields(Report)][: len(engine)] == list(engine)


def test_the_constructors_take_fields_by_position_in_order_or_by_name() -> None:
    d = Decision("af", "ns::op", "v1", "none", "left", [], [], 0, "why", "requested", "m.py:1")
    assert (d.reason, d.cause, d.source) == ("why", "requested", "m.py:1")
    assert d == Decision(**{f: getattr(d, f) for f in Decision.__match_args__})
    match d:
        case Decision(node, op, _, _, action):
            assert (node, op, action) == ("af", "ns::op", "left")
        case _:
            pytest.fail("a decision matches its positional pattern")
    # Clones are given as notes (or as the dicts ``to_dict`` writes).
    note = CloneNote("out", "r", bytes=8)
    assert Decision("n", "o", "v2", "none", "cloned", clones=[note.to_dict()]).clones == [note]
    for bad, words in (
        (lambda: Decision("n", "o", "v1", "none"), "missing field `action`"),
        (lambda: Decision("n", "o", "v1", "none", "left", colour=1), "unknown field `colour`"),
        (lambda: CloneNote("out", "r", arg="out"), "multiple values for argument arg"),
        (lambda: CloneNote(*"abcdefgh"), "at most 7 positional arguments"),
    ):
        with pytest.raises(TypeError, match=words):
            bad()
