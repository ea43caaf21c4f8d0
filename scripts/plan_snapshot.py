"""The engine's output for the saved graphs, byte for byte: writes or checks
``tests/data/plans/<name>.txt`` for every ``tests/data/*.fxir``.

Each snapshot holds what crosses from the engine to its users for one graph:
the report JSON (Python and ``explain --json`` read it), the edits JSON
(``explain --html``), the rewritten graph as ``show`` prints it and the
SHA-256 of its ``.fxir`` bytes (``fxrewrite rewrite``). A refactoring that
keeps behaviour leaves every snapshot byte-identical; a deliberate change
to a plan rewrites them with ``--write``, and the diff shows what changed.
Only the native module is needed, not torch.

Usage: ``python scripts/plan_snapshot.py [--write]`` (``--check`` is the default).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from fxrewrite import _core

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
PLANS = DATA / "plans"


def snapshot(path: Path) -> str:
    """The snapshot text of one ``.fxir`` file."""
    g = _core.Graph.read(path.read_bytes())
    plan = g.plan()
    rewritten, _ = g.rewritten()
    data = rewritten.write([*g.info, ("rewritten_by", "fxrewrite")])
    return (
        "\n".join(
            [
                f"# report\n{plan.report_json()}",
                f"# edits\n{plan.edits_json()}",
                f"# rewritten ({len(rewritten)} nodes, .fxir sha256 {hashlib.sha256(data).hexdigest()})",
                rewritten.show(),
            ]
        )
        + "\n"
    )


def graphs() -> list[Path]:
    """Every saved graph, in name order."""
    return sorted(DATA.glob("*.fxir"))


def differences() -> list[str]:
    """The saved graphs whose snapshot is missing or differs, by name."""
    out = []
    for path in graphs():
        saved = PLANS / f"{path.stem}.txt"
        if not saved.is_file() or saved.read_text() != snapshot(path):
            out.append(path.name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the snapshots instead of checking them")
    args = parser.parse_args(argv)
    if args.write:
        PLANS.mkdir(exist_ok=True)
        for path in graphs():
            (PLANS / f"{path.stem}.txt").write_text(snapshot(path))
            print(f"wrote {path.stem}.txt")
        return 0
    changed = differences()
    for name in changed:
        print(f"{name}: the plan differs from its snapshot", file=sys.stderr)
    print(f"{len(graphs()) - len(changed)} of {len(graphs())} plans identical")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
