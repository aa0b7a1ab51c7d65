"""``trace demo`` end to end on the tiny model: SFT, before/after evaluations, GRPO chunks, summary files."""

import json

from trace_gym.cli import main


def test_demo_runs_end_to_end_and_reports_the_curve(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "demo"
    argv = ["demo", "--model", str(tiny_model_dir), "--out", str(out), "--sft-episodes", "4", "--steps", "2"]
    argv += ["--eval-every", "1", "--eval-episodes", "4", "--groups-per-step", "2", "--group-size", "2"]
    argv += ["--max-new-tokens", "4", "--dtype", "float32"]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [point["step"] for point in summary["curve"]] == [0, 1, 2]
    assert summary["before"]["split"] == "test" and summary["before"]["episodes"] == 4
    phases = [json.loads(line)["phase"] for line in (out / "demo_log.jsonl").read_text().splitlines()]
    assert phases == ["sft", "eval", "eval", "eval"]
    assert (out / "sft" / "merged" / "config.json").exists()
    assert len((out / "grpo" / "metrics.jsonl").read_text().splitlines()) == 2
    assert "test success" in capsys.readouterr().out
