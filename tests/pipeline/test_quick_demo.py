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
    report = (out / "09-report" / "report.md").read_text()
    assert "Final table" in report
    assert (
        "Training curves: every adapter and direct GRPO" in report and "| direct_grpo_compute | 1 |" in report
    )
    assert "the gain stops at" in report  # read from the run's own test episodes
    # the adapters were fitted to oracle episodes before GRPO ([adapters.sft]), and GRPO started there
    adapters = json.loads((out / "06-adapters" / "stage.json").read_text())["result"]["adapters"]
    assert adapters and all(info["sft"]["episodes"] == 2 for info in adapters.values())
    assert all((out / "06-adapters" / cap / "sft" / "adapter").is_dir() for cap in adapters)
    rows = json.loads((out / "08-evaluation" / "table.json").read_text())["rows"]
    assert {r["method"] for r in rows} >= {"base", "router", "moe", "direct_grpo"}
    # every method is tested against the base and against direct GRPO (the fair baseline), on the same tasks
    others = [r for r in rows if r["method"] not in ("base", "direct_grpo", "direct_grpo_compute")]
    assert all("kept_share" in r["vs_base"] and "vs_direct_grpo" in r for r in others)
    # the equal-compute baseline: GRPO on the target until the adapters' and gate data's model FLOPs are spent
    by_method = {r["method"]: r for r in rows}
    compute, moe = by_method["direct_grpo_compute"], by_method["moe"]
    assert all("vs_direct_grpo_compute" in r for r in others)
    assert compute["train_flops"] > 0 and moe["train_flops"] > 0
    assert compute["train_rollouts"] > 0
    # the router's episodes on the tasks it gave the base slot are the base's own records, the rest its own
    routes = json.loads((out / "08-evaluation" / "router_routes.json").read_text())
    (router,) = [r for r in rows if r["method"] == "router"]
    assert router["reused_base_episodes"] == sum(slot == "base" for slot in routes.values())
    base_records = {r["seed"]: r for r in map(json.loads, (out / "08-evaluation" / "base.jsonl").open())}
    for record in map(json.loads, (out / "08-evaluation" / "router.jsonl").open()):
        assert (record == base_records[record["seed"]]) == (routes[str(record["seed"])] == "base")
    gates = json.loads((out / "07-gates" / "stage.json").read_text())["result"]
    assert any(name.endswith("(target)") for name in gates["data"])  # the base's own target contexts, slot 0

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-4000:]
    assert again.stdout.count("inputs unchanged: skipped") == len(STAGES)


@pytest.mark.slow
def test_a_run_whose_only_env_trace_check_rejects_finishes_and_says_so(tmp_path, monkeypatch):
    """When trace check rejects every capability env, nothing is trained, the base is still evaluated and the run
    ends normally (a crash at stage 4 would lose the evaluation). The rejection is planted in step 2's emission:
    every derived env of the target passes trace check now, so no real capability can be forced to fail."""
    from trace_gym.synthesis import emit
    from trace_train.cli import main

    def reject_all(records, target, out, **kwargs):
        return [
            emit.Outcome(r["name"], f"trace/{r['name']}-v0", "x", False, "planted: probe failed", "derived")
            for r in records
        ]

    monkeypatch.setattr(emit, "synthesize", reject_all)
    out = tmp_path / "rejected"
    assert main(["demo", "--quick", "--out", str(out)]) in (0, None)
    synthesis = json.loads((out / "04-synthesis" / "stage.json").read_text())["result"]
    assert synthesis["envs"] == [] and [r["capability"] for r in synthesis["rejected"]] == [
        "precondition-checking"
    ]
    assert synthesis["rejected"][0]["reason"] == "planted: probe failed"
    rows = json.loads((out / "08-evaluation" / "table.json").read_text())["rows"]
    assert [r["method"] for r in rows] == ["base"]


@pytest.mark.slow
def test_the_quick_demo_on_bfcl_runs_every_stage(tmp_path):
    """The second target, which no one here wrote: every stage does work (its derived env is synthesised,
    calibrated, trained and composed), not only the base evaluation."""
    out = tmp_path / "bfcl"
    config = "trace_train/pipeline/configs/bfcl-quick.toml"
    done = subprocess.run(
        [sys.executable, "-m", "trace_train.cli", "run", config, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    synthesis = json.loads((out / "04-synthesis" / "stage.json").read_text())["result"]
    assert [e["env_id"].startswith("trace/bfcl-multi-turn-") for e in synthesis["envs"]] == [True]
    rows = json.loads((out / "08-evaluation" / "table.json").read_text())["rows"]
    assert {r["method"] for r in rows} >= {"base", "router", "moe", "direct_grpo"}
