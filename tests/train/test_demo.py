"""The learning demo (``trace_train.demo.run_demo``, run by ``trace run configs/arith.toml``) end to end on the
tiny model: SFT, before/after evaluations on the same test seeds, GRPO chunks, the paired test, summary files."""

import json

import pytest

from trace_train.config import DemoArgs
from trace_train.demo import run_demo

pytest.importorskip("reasoning_gym")


def test_demo_runs_end_to_end_and_reports_the_paired_test(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """Also defect 1 at the demo's level: its test questions are never among its own training questions
    (rg-arith1-v0's 200 test seeds had 79 questions verbatim in the demo's SFT and GRPO tasks)."""
    import trace_train.evaluate as evaluate_module
    from trace_gym.adapters.reasoning_gym import ReasoningGymEnv

    keys: dict[str, set[str]] = {"train": set(), "test": set()}
    phase = {"eval": False}
    real_reset, real_evaluate = ReasoningGymEnv.reset, evaluate_module.evaluate

    def reset(self, **kw):
        out = real_reset(self, **kw)
        keys["test" if phase["eval"] else "train"].add(self.task_key())
        assert phase["eval"] or self.split == "train"  # training resets only train-split tasks
        return out

    def evaluate(*a, **kw):
        phase["eval"] = True
        try:
            return real_evaluate(*a, **kw)
        finally:
            phase["eval"] = False

    monkeypatch.setattr(ReasoningGymEnv, "reset", reset)
    monkeypatch.setattr(evaluate_module, "evaluate", evaluate)
    out = tmp_path / "demo"
    args = DemoArgs(
        model=str(tiny_model_dir),
        out=str(out),
        sft_episodes=4,
        steps=2,
        eval_every=1,
        eval_episodes=4,
        groups_per_step=2,
        group_size=2,
        max_new_tokens=4,
        min_oracle_ceiling=0,  # 4 tokens cut the oracle's answer: this test checks the loop, not a result
        dtype="float32",
        num_threads=1,
    )
    summary = run_demo(args)
    assert summary["env_id"] == "trace/rg-arith2-v2"  # the content-split default (v2: exact grading)
    assert [point["step"] for point in summary["curve"]] == [0, 1, 2]
    assert summary["before"]["split"] == "test" and summary["before"]["episodes"] == 4
    paired = summary["paired"]
    assert paired["n"] == 4 and 0.0 <= paired["mcnemar_p"] <= 1.0
    assert paired["only_a"] + paired["only_b"] <= 4
    phases = [json.loads(line)["phase"] for line in (out / "demo_log.jsonl").read_text().splitlines()]
    assert phases == ["sft", "eval", "eval", "eval", "paired"]
    assert (out / "sft" / "merged" / "config.json").exists()
    assert len((out / "grpo" / "metrics.jsonl").read_text().splitlines()) == 2
    # both evaluations ran on the same test seeds (the pairing), none of them a training seed
    seeds = [{json.loads(x)["seed"] for x in (out / "grpo" / f"eval-step{s}.jsonl").open()} for s in (0, 2)]
    assert seeds[0] == seeds[1] and len(seeds[0]) == 4
    assert "exact McNemar" in capsys.readouterr().out
    assert keys["train"] and keys["test"] and not keys["train"] & keys["test"]


def test_demo_args_refuse_bad_values():
    with pytest.raises(ValueError, match="--group-size"):
        DemoArgs(group_size=1)
    with pytest.raises(ValueError, match="--eval-every"):
        DemoArgs(eval_every=0)
