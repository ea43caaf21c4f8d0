"""The README does what it says: it stays short, every path it and the docs
index name exists, its runnable example prints the lines it shows, every
`fxrewrite` command it shows is one the tool accepts, and the two commands
CI runs are there verbatim.

Markers in README.md: `<!-- runnable -->` before a ```python block the test
runs; `<!-- output -->` before a ```text block whose lines that run must
print; `<!-- log -->` before a ```text block of log lines it must log under
`TORCH_LOGS=fxrewrite` (any pid; a line served from Inductor's FX graph
cache carries a marked suffix)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fxrewrite

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DOCS_INDEX = DOCS / "README.md"
#: The fxrewrite this run imported, first on the subprocesses' path (as in test_cli.py).
PYTHONPATH = str(Path(fxrewrite.__file__).resolve().parent.parent)
MAX_README_LINES = 300
#: First components of the repository paths named in backticks.
REPO_DIRS = {".ci", "benches", "docs", "python", "rust", "scripts", "tests"}
REPO_FILES = {"ARCHITECTURE.md", "Cargo.toml", "Cargo.lock", "pyproject.toml", "README.md", "clippy.toml"}


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _fences(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def _marked(text: str, marker: str, lang: str) -> list[str]:
    return re.findall(rf"^<!-- {marker} -->\n+```{lang}\n(.*?)^```", text, re.S | re.M)


def _without_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _named_paths(md: Path) -> list[tuple[str, Path]]:
    """Each relative link target of ``md`` (relative to its folder) and each
    repository path in backticks (relative to the root), as written and resolved."""
    prose = _without_fences(_text(md))
    out: list[tuple[str, Path]] = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        out.append((target, (md.parent / target.split("#")[0]).resolve()))
    for code in re.findall(r"`([^`]+)`", prose):
        for word in code.split():  # `bash scripts/build_wheel.sh`: the path in a command too
            first = word.split("/")[0]
            if ("/" in word and first in REPO_DIRS) or word in REPO_FILES:
                out.append((word, ROOT / word))
    return out


def test_the_readme_is_at_most_300_lines():
    lines = len(_text(README).splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


@pytest.mark.parametrize("md", [README, DOCS_INDEX], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_named_exists(md: Path):
    named = _named_paths(md)
    assert len(named) >= 5, named  # the parser found the paths
    missing = [written for written, path in named if not path.exists()]
    assert not missing, f"{md.relative_to(ROOT)} names paths that do not exist: {missing}"
    outside = [written for written, path in named if not path.is_relative_to(ROOT)]
    assert not outside, f"{md.relative_to(ROOT)} links outside the repository: {outside}"


def test_the_docs_index_lists_every_file_in_docs():
    listed = {path for _, path in _named_paths(DOCS_INDEX)}
    unlisted = [p.name for p in sorted(DOCS.iterdir()) if p != DOCS_INDEX and p.resolve() not in listed]
    assert not unlisted, f"docs/README.md does not list {unlisted}"


def test_no_word_a_reader_of_a_clone_cannot_follow():
    """No issue numbers, no talk of how or where the text was written, no
    path on the machine it was written on."""
    texts = [README, ROOT / "ARCHITECTURE.md", *sorted(DOCS.glob("*.md"))]
    pattern = re.compile(r"\bissues? \d+|\bsessions?\b|\bbriefs?\b|\bhelpers?\b|/work/|shared/STYLE", re.I)
    found = [
        f"{md.relative_to(ROOT)}:{n}: {line.strip()}"
        for md in texts
        for n, line in enumerate(_text(md).splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_runnable_example_prints_what_the_readme_shows(tmp_path: Path):
    text = _text(README)
    programs = _marked(text, "runnable", "python")
    outputs = _marked(text, "output", "text")
    logs = _marked(text, "log", "text")
    assert len(programs) == 1 and len(outputs) == 1 and len(logs) == 1, (programs, outputs, logs)
    script = tmp_path / "example.py"
    script.write_text(programs[0])
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, TORCH_LOGS="fxrewrite")
    env.pop("FXREWRITE_SAVE_DIR", None)
    p = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 0, p.stderr
    printed = p.stdout.splitlines()
    for line in outputs[0].splitlines():
        assert line in printed, f"README shows {line!r}; the example printed:\n{p.stdout}"
    for line in logs[0].splitlines():
        pattern = re.escape(line).replace(r"pid\ 2545", r"pid\ \d+")
        pattern += r"(?: \(from Inductor's FX graph cache: the rewrite pid \d+ made is in effect\))?$"
        assert re.search(pattern, p.stderr, re.M), (
            f"README shows the log line {line!r}; it logged:\n{p.stderr}"
        )


def _fxrewrite_commands(text: str) -> list[list[str]]:
    """The arguments of every `fxrewrite ...` command in the bash blocks."""
    commands: list[list[str]] = []
    for block in _fences(text, "bash"):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line)
            for segment in re.split(r"&&|\|\||;|\|", line):
                words = segment.split()
                while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
                    words.pop(0)
                if words and words[0] == "fxrewrite":
                    commands.append(words[1:])
    return commands


def _help(args: list[str]) -> str:
    p = subprocess.run(
        [sys.executable, "-m", "fxrewrite", *args],
        env=dict(os.environ, PYTHONPATH=PYTHONPATH),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p.stdout


def test_every_fxrewrite_command_shown_is_accepted():
    commands = _fxrewrite_commands(_text(README))
    assert len(commands) >= 3, commands
    for args in commands:
        subcommand = next((a for a in args if not a.startswith("-")), None)
        if subcommand is None:  # `fxrewrite --help` and the like: runs as is
            _help(args)
            continue
        usage = _help([subcommand, "--help"])
        for option in (a.split("=")[0] for a in args if a.startswith("--")):
            assert option in usage, f"`fxrewrite {' '.join(args)}`: {subcommand} --help has no {option}"


def test_the_two_commands_ci_runs_are_in_the_readme_verbatim():
    text = _text(README)
    section = re.search(r"^#+ Two commands\n(.*?)(?=^#)", text, re.S | re.M)
    assert section, "README.md has no 'Two commands' section"
    blocks = _fences(section.group(1), "bash")
    assert blocks, "the 'Two commands' section has no bash block"
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in blocks[0].splitlines()]
    assert lines == ["bash scripts/setup.sh", "bash scripts/test.sh"], lines
    assert "bash scripts/test.sh" in _text(ROOT / ".ci" / "run").splitlines()


def _campaign_totals() -> dict[str, int]:
    """The sums of docs/campaign.md's rows, by column name."""
    text = (ROOT / "docs" / "campaign.md").read_text()
    header: list[str] = []
    totals: dict[str, int] = {}
    runs: set[tuple[str, str, str]] = set()
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| date |"):
            header = cells
            continue
        if not header or not line.startswith("| 20") or len(cells) != len(header):
            continue
        row = dict(zip(header, cells, strict=True))
        runs.add((row["date"], row["commit"], row["seeds"]))
        for name, value in row.items():
            if value.isdigit() and name not in ("date", "commit", "install", "form", "seeds"):
                totals[name] = totals.get(name, 0) + int(value)
    totals["runs"] = len(runs)
    return totals


def test_the_readme_campaign_figures_are_the_sums_of_docs_campaign_rows() -> None:
    """The README's campaign totals are what docs/campaign.md's rows add up
    to: a new run's rows without the README's figures updated fails here."""
    t = _campaign_totals()
    readme = " ".join((ROOT / "README.md").read_text().split())
    n = lambda v: f"{v:,}"  # noqa: E731
    assert t["programs"] % 4 == 0, t
    expected = [
        f"{n(t['programs'] // 4)} programs per install and form",
        f"{n(t['programs'])} compiles with fxrewrite",
        f"{n(t['right'])} right",
        f"{n(t['both wrong'])} on which Inductor alone fails too",
        f"{n(t['fixes'])} fixed",
        f"{n(t['copies fxrewrite'])} against Inductor alone's {n(t['copies Inductor'])}",
        f"{n(t['more copies'])} compiles copy more",
        f"**{n(t['fxrewrite wrong'])} wrong where Inductor alone is right**",
        f"{n(t['held back differs'])} held-back graphs that differ",
    ]
    missing = [e for e in expected if e not in readme]
    assert not missing, f"README's campaign figures are not docs/campaign.md's sums: {missing}"
