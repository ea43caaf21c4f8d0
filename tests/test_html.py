"""The HTML view of rewritten regions: ``fxrewrite explain FILE --html OUT`` and
the pass's page (save dir, tlparse artifact), parsed and checked region by
region on a graph from a real compile and on a 10^4-node MoE decoder graph."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from test_cli import SUBPROCESS_PYTHONPATH, TESTS, run

ROOT = TESTS.parent


class Page(HTMLParser):
    """The regions of a page: per ``section.region``, its node, action, the
    text of its reasons and the text drawn in its before and after SVGs."""

    def __init__(self) -> None:
        super().__init__()
        self.regions: dict[str, dict[str, object]] = {}
        self.links: set[str] = set()
        self.ids: set[str] = set()
        self.external: list[str] = []
        self._region: dict[str, object] | None = None
        self._side: str | None = None
        self._in_reasons = False
        self._svg_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"] or "")
        for key in ("src", "href"):
            v = a.get(key)
            if v and key == "href" and tag == "a" and v.startswith("#"):
                self.links.add(v[1:])
            elif v and tag in ("script", "link", "img", "iframe"):
                self.external.append(v)
        cls = (a.get("class") or "").split()
        if tag == "section" and "region" in cls:
            self._region = {
                "action": a.get("data-action"),
                "reasons": "",
                "before": [],
                "after": [],
                "svgs": {"before": 0, "after": 0},
            }
            self.regions[a["data-node"] or ""] = self._region
        elif tag == "div" and "side" in cls and self._region is not None:
            self._side = "before" if "before" in cls else "after"
        elif tag == "ul" and "reasons" in cls:
            self._in_reasons = True
        elif tag == "svg" and self._side and self._region is not None:
            self._region["svgs"][self._side] += 1  # type: ignore[index]
            self._svg_depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._region, self._side = None, None
        elif tag == "ul":
            self._in_reasons = False
        elif tag == "svg" and self._svg_depth:
            self._svg_depth -= 1
            if not self._svg_depth:
                self._side = None

    def handle_data(self, data: str) -> None:
        if self._region is None:
            return
        if self._in_reasons:
            self._region["reasons"] += data  # type: ignore[operator]
        if self._svg_depth and self._side:
            self._region[self._side].append(data.strip())  # type: ignore[union-attr]


def parse(path: Path) -> Page:
    p = Page()
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    return p


def check_every_region(page: Page, decisions: list[dict[str, object]]) -> None:
    """Every rewritten node has its region: action, reasons, a drawing before
    showing the auto_functionalized node and one after showing the in-place call."""
    rewritten = [d for d in decisions if d["action"] != "left"]
    assert rewritten
    assert set(page.regions) == {d["node"] for d in rewritten}
    for d in rewritten:
        r = page.regions[str(d["node"])]
        assert r["action"] == d["action"]
        assert r["svgs"] == {"before": 1, "after": 1}, (d["node"], r["svgs"])
        assert r["reasons"], d["node"]
        assert d["node"] in r["before"], (d["node"], r["before"])
        op = str(d["op"])
        assert any(op in t for t in r["after"]), (d["node"], op, r["after"])  # type: ignore[union-attr]
        assert not any(t == d["node"] for t in r["after"])  # type: ignore[union-attr]
        for m in d["moved"]:  # type: ignore[attr-defined]
            assert m in r["before"] and m in r["after"]
        for c in d["clones"]:  # type: ignore[attr-defined]
            assert c["reason"].split(":")[0][:40] in str(r["reasons"]).replace("\n", " ")
    assert {f"r-{d['node']}" for d in rewritten} <= page.links & page.ids
    assert not page.external  # self-contained: nothing loaded at view time


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> tuple[Path, Path]:
    """One real compile (tests/cli_model.py) with the save dir and tlparse's trace on."""
    d = tmp_path_factory.mktemp("html")
    save, trace = d / "saved", d / "trace"
    env = dict(
        os.environ, FXREWRITE_SAVE_DIR=str(save), TORCH_TRACE=str(trace), PYTHONPATH=SUBPROCESS_PYTHONPATH
    )
    subprocess.run(
        [sys.executable, str(TESTS / "cli_model.py")], env=env, check=True, timeout=300, capture_output=True
    )
    return save, trace


def test_explain_html_draws_every_rewritten_region(traced, tmp_path):
    save, _ = traced
    (before,) = save.glob("*-before.fxir")
    out = tmp_path / "g.html"
    text = run("explain", str(before), "--html", str(out)).stdout
    assert f"wrote {out}" in text
    decisions = json.loads(run("explain", "--json", str(before)).stdout)
    page = parse(out)
    check_every_region(page, decisions)
    one = tmp_path / "one.html"
    run("explain", str(before), "--node", decisions[0]["node"], "--html", str(one))
    assert set(parse(one).regions) == {decisions[0]["node"]}


def test_the_pass_writes_the_page_next_to_its_graphs_and_as_a_tlparse_artifact(traced):
    save, trace = traced
    (before,) = save.glob("*-before.fxir")
    (page_file,) = save.glob("*.html")
    assert page_file.name == before.name.replace("-before.fxir", ".html")
    decisions = json.loads(run("explain", "--json", str(before)).stdout)
    check_every_region(parse(page_file), decisions)
    logs = "".join(p.read_text(errors="replace") for p in trace.glob("*"))
    assert '"name": "fxrewrite_regions_html"' in logs and '"name": "fxrewrite_report"' in logs


def test_html_errors_are_one_line_exit_2(traced, tmp_path):
    save, _ = traced
    (before,) = save.glob("*-before.fxir")
    p = run("explain", str(before), "--html", str(tmp_path / "no" / "such" / "dir.html"), check_rc=2)
    assert "cannot write the output" in p.stderr
    # No system program is needed: with no `dot` anywhere on PATH the page is drawn.
    p = run("explain", str(before), "--html", str(tmp_path / "x.html"), env={"PATH": "/nonexistent"})
    assert (tmp_path / "x.html").exists() and "Graphviz" not in p.stderr


def test_html_on_a_large_graph_shows_regions_not_the_graph(tmp_path):
    """A 10^4-node MoE decoder graph (v1: clones, moved readers, write-backs):
    every rewritten region is drawn, and the page grows with the regions."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[2]); import make_graphs, fxrewrite; "
        "fxrewrite.save(make_graphs.build(10_000, False), sys.argv[1])"
    )
    g = tmp_path / "moe.fxir"
    subprocess.run(
        [sys.executable, "-c", code, str(g), str(ROOT / "benches")],
        check=True,
        timeout=600,
        capture_output=True,
    )
    out = tmp_path / "moe.html"
    run("explain", str(g), "--html", str(out))
    decisions = json.loads(run("explain", "--json", str(g)).stdout)
    page = parse(out)
    check_every_region(page, decisions)
    rewritten = sum(d["action"] != "left" for d in decisions)
    assert rewritten > 300
    assert any(d["moved"] or d["clones"] or d["scatters_removed"] for d in decisions)
    size = out.stat().st_size
    assert size < 16_000 * rewritten + 100_000, (size, rewritten)
    # Usable at that size: a filter box, and all but the first regions' drawings folded.
    text = out.read_text(encoding="utf-8")
    assert '<input type="search" id="filter"' in text
    from fxrewrite.htmlview import OPEN_REGIONS

    assert text.count("<details open>") == OPEN_REGIONS
    assert text.count("<details>") == rewritten - OPEN_REGIONS


def _browser() -> str | None:
    import shutil

    found = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if found is None and os.environ.get("FXREWRITE_REQUIRE_BROWSER") != "1":
        pytest.skip("no headless browser (bash scripts/install_browser.sh installs Chromium as root)")
    assert found, "FXREWRITE_REQUIRE_BROWSER=1 but no chromium on PATH"
    return found


def _screenshot(browser: str, page: Path, out: Path) -> dict[tuple[int, int, int], int]:
    """The page as Chromium draws it (1400x2400, headless), as pixel counts per colour."""
    from PIL import Image

    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--window-size=1400,2400",
            f"--screenshot={out}",
            page.as_uri(),
        ],
        check=True,
        timeout=120,
        capture_output=True,
    )
    with Image.open(out) as im:
        return {c: n for n, c in im.convert("RGB").getcolors(maxcolors=1 << 20) or []}


def test_a_headless_browser_draws_the_regions_with_no_system_program(traced, tmp_path):
    """The page of a real compile, opened in headless Chromium with no
    Graphviz anywhere: its screenshot shows the first region's
    auto_functionalized node (red before) and its in-place call (green
    after), beyond what the page shows of those colours with its drawings
    removed (the legend), so the check can fail."""
    browser = _browser()
    save, _ = traced
    (page,) = save.glob("*.html")
    import re

    # The legend shows both colours too: only what the drawings add counts.
    bare = tmp_path / "bare.html"
    bare.write_text(
        re.sub(r"<svg\b.*?</svg>", "", page.read_text(encoding="utf-8"), flags=re.S), encoding="utf-8"
    )
    without = _screenshot(browser, bare, tmp_path / "bare.png")
    drawn = _screenshot(browser, page, tmp_path / "page.png")
    af_red, call_green = (0xF6, 0xC1, 0xC1), (0xB9, 0xE6, 0xB9)
    for colour in (af_red, call_green):
        assert drawn.get(colour, 0) - without.get(colour, 0) > 500, (
            colour,
            drawn.get(colour),
            without.get(colour),
        )
