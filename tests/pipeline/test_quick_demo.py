"""`trace demo --quick` end to end (slow: minutes on two cores; CI also runs it as a smoke step)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trace_train.pipeline.stages import STAGES


@pytest.mark.slow
def test_quick_demo_runs_every_stage_then_skips_them(tmp_path):
    out = tmp_path / "quick"
    cmd = [sys.executable, "-m", "trace_train.cli", "demo", "--quick", "--out", str(out)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stderr[-4000:]
    for i, stage in enumerate(STAGES, 1):
        state = json.loads((out / f"{i:02d}-{stage.name}" / "stage.json").read_text())
        assert state["status"] == "done", stage.name
    html = (out / "09-report" / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 3  # analysis chart, training curves, final table
    assert "Final table" in (out / "09-report" / "report.md").read_text()
    # the adapters were fitted to oracle episodes before GRPO ([adapters.sft]), and GRPO started there
    adapters = json.loads((out / "06-adapters" / "stage.json").read_text())["result"]["adapters"]
    assert adapters and all(info["sft"]["episodes"] == 2 for info in adapters.values())
    assert all((out / "06-adapters" / cap / "sft" / "adapter").is_dir() for cap in adapters)
    rows = json.loads((out / "08-evaluation" / "table.json").read_text())["rows"]
    assert {r["method"] for r in rows} >= {"base", "router", "moe", "direct_grpo"}

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-4000:]
    assert again.stdout.count("inputs unchanged: skipped") == len(STAGES)


@pytest.mark.slow
def test_a_run_whose_only_env_trace_check_rejects_finishes_and_says_so(tmp_path):
    """error-recovery's catalog env fails the position probe: synthesis rejects it, nothing is trained, the base is
    still evaluated and the run ends normally (a crash at stage 4 would lose the evaluation)."""
    out = tmp_path / "rejected"
    cmd = [sys.executable, "-m", "trace_train.cli", "demo", "--quick", "--out", str(out)]
    done = subprocess.run(
        [*cmd, "--set", 'analysis.force_order=["error-recovery"]'],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    synthesis = json.loads((out / "04-synthesis" / "stage.json").read_text())["result"]
    assert synthesis["envs"] == [] and [r["capability"] for r in synthesis["rejected"]] == ["error-recovery"]
    assert "position_shortcut" in synthesis["rejected"][0]["reason"]
    rows = json.loads((out / "08-evaluation" / "table.json").read_text())["rows"]
    assert [r["method"] for r in rows] == ["base"]
