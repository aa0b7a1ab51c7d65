"""The trainer against the real env contract: trace tool envs (oracle replay through the policy's own text
format) and reasoning-gym datasets through trace_gym's adapter (the third-party path)."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import pytest

from trace_gym.registration import make_env
from trace_gym.seeds import honours_splits, reset_seed
from trace_train.sft import oracle_trajectories

trace_gym = pytest.importorskip("trace_gym")


def _registered(env_id: str) -> bool:
    return env_id in gym.registry


@pytest.mark.parametrize("env_id", ["trace/test-library-v0", "trace/retail-v2"])
def test_oracle_replay_through_rendered_text_scores_one(tiny_policy, env_id):
    if env_id == "trace/test-library-v0":
        from tests import toy_library  # noqa: F401 - registers the test domain
    if not _registered(env_id):
        pytest.skip(f"{env_id} is not registered")
    env = make_env(env_id)
    assert honours_splits(env)
    seeds = [reset_seed("train", i, env) for i in range(3)]
    assert seeds == [0, 1, 2]
    trajs, failed = oracle_trajectories(tiny_policy, env_id, seeds, max_turns=40)
    assert failed == 0, "the oracle, rendered as <tool_call> text, must still score 1.0"
    for t in trajs:
        assert t.turns >= 2 and t.reward == 1.0
        assert sum(t.policy_mask) > 0
        # the policy tokens decode to the tool-call text the renderer produced
        text = tiny_policy.tokenizer.decode([i for i, m in zip(t.token_ids, t.policy_mask, strict=True) if m])
        assert "<tool_call>" in text


@pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None, reason="reasoning-gym not installed")
def test_grpo_on_reasoning_gym_adapter(tiny_model_dir, tmp_path):
    """Third-party path: a reasoning-gym dataset as a Gymnasium env, trained from the CLI."""
    from trace_train.commands import main

    env_id = "trace/rg-basic_arithmetic-v2"
    if not _registered(env_id):
        pytest.skip("reasoning-gym adapter not registered")
    rc = main(
        [
            "train",
            env_id,
            "--model",
            str(tiny_model_dir),
            "--out",
            str(tmp_path / "rg"),
            "--steps",
            "2",
            "--groups-per-step",
            "2",
            "--group-size",
            "3",
            "--max-new-tokens",
            "6",
            "--max-turns",
            "1",
            "--min-oracle-ceiling",  # 6 tokens cut the oracle's answer: the adapter's wiring is under test
            "0",
            "--lora-rank",
            "2",
            "--no-progress",
            "--no-tensorboard",
            "--dynamic-sampling",
        ]
    )
    assert rc == 0
    assert (tmp_path / "rg" / "adapter" / "adapter_model.safetensors").is_file()
    trajs, failed = oracle_trajectories(
        __import__("trace_train.policies.hf", fromlist=["HFPolicy"]).HFPolicy.from_pretrained(
            str(tiny_model_dir)
        ),
        env_id,
        [0, 1],
        max_turns=1,
    )
    assert failed == 0 and [t.reward for t in trajs] == [1.0, 1.0]
