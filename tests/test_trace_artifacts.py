"""Under ``TORCH_TRACE`` (what tlparse reads) the pass leaves its documented
artifacts for each graph it rewrites, read back here from the trace of
``fxrewrite demo``: the graph before and after, the report, the page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fxrewrite.inductor_pass import TRACE_ARTIFACTS


def read_artifacts(trace_dir: Path) -> dict[str, list[str]]:
    """Per artifact name, the payloads in the trace: a record is one line
    ``<glog prefix>] {json metadata}``, its payload the tab-indented lines
    after it."""
    out: dict[str, list[str]] = {}
    for log in sorted(trace_dir.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            _, sep, meta = line.partition("] {")
            if not sep:
                continue
            record = json.loads("{" + meta)
            artifact = record.get("artifact")
            if not artifact:
                continue
            payload = []
            for nxt in lines[i + 1 :]:
                if not nxt.startswith("\t"):
                    break
                payload.append(nxt[1:])
            out.setdefault(artifact["name"], []).append("\n".join(payload))
    return out


@pytest.fixture(scope="module")
def demo_trace(tmp_path_factory) -> dict[str, list[str]]:
    trace = tmp_path_factory.mktemp("trace")
    env = dict(os.environ, TORCH_TRACE=str(trace))
    p = subprocess.run(
        [sys.executable, "-m", "fxrewrite", "demo"], env=env, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return read_artifacts(trace)


def test_the_demo_trace_holds_every_documented_artifact_once(demo_trace):
    ours = {k: v for k, v in demo_trace.items() if k.startswith("fxrewrite")}
    assert set(ours) == set(TRACE_ARTIFACTS), sorted(ours)
    assert all(len(v) == 1 for v in ours.values()), {k: len(v) for k, v in ours.items()}


def test_the_artifacts_show_the_rewrite(demo_trace):
    (report,) = demo_trace["fxrewrite_report"]
    r = json.loads(report)
    rewritten = [d for d in r["decisions"] if d["action"] != "left"]
    assert rewritten and len(rewritten) == len(r["decisions"])
    (before,) = demo_trace["fxrewrite_graph_before"]
    (after,) = demo_trace["fxrewrite_graph_after"]
    # Every auto_functionalized node is in the graph before, none after, and
    # each rewritten operator is called directly after.
    assert before.count("auto_functionalized") >= len(rewritten)
    assert "auto_functionalized" not in after
    for d in rewritten:
        assert d["node"] in before
        assert d["op"].split("::")[1].split(".")[0] in after
    (page,) = demo_trace["fxrewrite_regions_html"]
    assert page.startswith("<!DOCTYPE html>") and all(d["node"] in page for d in rewritten)
