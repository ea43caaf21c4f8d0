"""The plans of the saved graphs (``tests/data/*.fxir``) stay byte-identical:
report, edits and rewritten graph against ``tests/data/plans/``
(``scripts/plan_snapshot.py``; ``--write`` after a deliberate change)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "plan_snapshot.py"
_spec = importlib.util.spec_from_file_location("plan_snapshot", _SCRIPT)
assert _spec is not None and _spec.loader is not None
plan_snapshot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan_snapshot)


@pytest.mark.parametrize("path", plan_snapshot.graphs(), ids=lambda p: p.name)
def test_plan_matches_its_snapshot(path: Path) -> None:
    saved = plan_snapshot.PLANS / f"{path.stem}.txt"
    assert saved.read_text() == plan_snapshot.snapshot(path), (
        f"{path.name}: the plan changed; if on purpose, run scripts/plan_snapshot.py --write"
    )


def test_every_saved_graph_has_a_snapshot() -> None:
    assert plan_snapshot.graphs()
    assert {p.stem for p in plan_snapshot.PLANS.glob("*.txt")} == {p.stem for p in plan_snapshot.graphs()}
