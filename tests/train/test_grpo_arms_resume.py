"""benchmarks/grpo_arms.py resumes an evaluation from its finished half (each half is ~20 min on a 2-core CPU)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from trace_gym.derived.levels import DEFAULT_LADDER
from trace_train.rollout import ResetSpec

REPO = Path(__file__).resolve().parents[2]


def load_arms(monkeypatch):
    spec = importlib.util.spec_from_file_location("grpo_arms", REPO / "benchmarks" / "grpo_arms.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "grpo_arms", module)  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_an_interrupted_evaluation_plays_only_its_unfinished_half(tmp_path, monkeypatch):
    arms = load_arms(monkeypatch)
    settings = arms.Settings(
        policy="policy-dir", capability="precise-arguments", target="target-env", target_difficulty=1,
        arms=[], budget=8, group_size=2, groups_per_step=2, level=1, max_turns=12, max_new_tokens=8,
        env_eval=3, target_eval=2, lr=1e-4, temperature=1.0, sft_episodes=0, sft_epochs=1,
        sft_seed_offset=0, sft_levels=[], micro_batch_tokens=64, eval_batch_size=2, ladder=DEFAULT_LADDER,
        out=tmp_path, dtype="float32",
    )  # fmt: skip
    target_specs = [ResetSpec(seed=10, group=0, split="test"), ResetSpec(seed=11, group=1, split="test")]
    played: list[str] = []
    stop_in_target = {"armed": True}

    def episodes(policy, env_id, specs, s):
        played.append(env_id)
        if env_id == "target-env" and stop_in_target["armed"]:
            stop_in_target["armed"] = False
            raise KeyboardInterrupt  # the run is killed while the target half plays
        return [{"reward": 1.0 if spec.seed % 2 else 0.0} for spec in specs]

    monkeypatch.setattr(arms, "episodes", episodes)
    monkeypatch.setattr("trace_train.policy_factory.make_policy", lambda *args, **kwargs: object())
    with pytest.raises(KeyboardInterrupt):
        arms.evaluate("base", "policy-dir", None, "capability-env", settings, target_specs)
    assert played == ["capability-env", "target-env"]

    played.clear()
    env_success, target_rewards = arms.evaluate(
        "base", "policy-dir", None, "capability-env", settings, target_specs
    )
    assert played == ["target-env"], "the finished env half was played again"
    assert env_success == [False, True, False] and target_rewards == [0.0, 1.0]
    assert not (tmp_path / "evals" / "base.env.json").exists()

    played.clear()
    assert arms.evaluate("base", "policy-dir", None, "capability-env", settings, target_specs) == (
        env_success,
        target_rewards,
    )
    assert played == []
    # other inputs (another adapter) play both halves again
    arms.evaluate("other", "policy-dir", "adapter-dir", "capability-env", settings, target_specs)
    assert played == ["capability-env", "target-env"]
