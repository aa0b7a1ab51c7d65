"""``--reward success|shaped|mix:ALPHA`` (issue 29): only what the env declares; advantages stay group-normalised."""

from __future__ import annotations

import pytest

from tests.train.levels_args import levels_args
from trace_train.grpo import trainer as trainer_mod
from trace_train.grpo.curriculum import RewardChoice
from trace_train.grpo.trainer import GRPOTrainer
from trace_train.rollout import RolloutStats


def test_parse():
    assert RewardChoice.parse("success") == RewardChoice("success", 0.0)
    assert RewardChoice.parse("shaped") == RewardChoice("shaped", 1.0)
    assert RewardChoice.parse("mix:0.25") == RewardChoice("mix", 0.25)
    for bad in ("mix:1.5", "mix:x", "dense", ""):
        with pytest.raises(ValueError, match="--reward"):
            RewardChoice.parse(bad)
    with pytest.raises(ValueError, match="--reward"):
        levels_args("m", "o", reward="milestones")


@pytest.mark.parametrize("choice", ["shaped", "mix:0.5"])
def test_shaped_is_refused_before_any_rollout_when_the_env_declares_none(
    tiny_model_dir, tmp_path, monkeypatch, choice
):
    def no_rollouts(*a, **k):
        raise AssertionError("a rollout ran")

    monkeypatch.setattr(trainer_mod, "collect", no_rollouts)
    with pytest.raises(ValueError, match="declares none"):
        GRPOTrainer(
            levels_args(tiny_model_dir, tmp_path / "x", env_id="traintest/parity-v0", reward=choice)
        ).train()


# (success, milestones) of the 8 rollouts: group 0 all fail but reach different milestones, group 1 differs in both
SCRIPT = [(0.0, 0.0), (0.0, 0.5), (0.0, 1.0), (0.0, 0.5), (1.0, 1.0), (0.0, 0.5), (1.0, 1.0), (0.0, 0.0)]


@pytest.mark.parametrize(
    ("choice", "reward_of", "equal_groups"),
    [
        ("success", lambda r, m: r, 1),
        ("shaped", lambda r, m: m, 0),
        ("mix:0.25", lambda r, m: 0.25 * m + 0.75 * r, 0),
    ],
)
def test_the_declared_shaped_reward_is_what_advantages_see(
    tiny_model_dir, tmp_path, monkeypatch, choice, reward_of, equal_groups
):
    real = trainer_mod.collect

    def scripted(policy, envs, specs, *a, **k):
        trajs = real(policy, envs, specs, *a, **k)
        for t, (r, m) in zip(trajs, SCRIPT, strict=True):
            t.reward = r
            t.info["reward_components"] = {"milestones": m, "success": r}
        return trajs

    captured = {}
    real_adv = trainer_mod.group_advantages

    def spy(rewards, groups, *a, **k):
        captured["rewards"] = list(rewards)
        return real_adv(rewards, groups, *a, **k)

    monkeypatch.setattr(trainer_mod, "collect", scripted)
    monkeypatch.setattr(trainer_mod, "group_advantages", spy)
    trainer = GRPOTrainer(levels_args(tiny_model_dir, tmp_path / choice.replace(":", "_"), reward=choice))
    trajs, m = trainer.collect_groups(RolloutStats())
    trainer.optimise(trajs)
    want = [reward_of(r, s) for r, s in SCRIPT]
    assert captured["rewards"] == pytest.approx(want)
    assert m["equal_reward_groups"] == equal_groups  # milestones make group 0 informative
    assert m["success_rate"] == 0.25  # the env's success is still what is reported
    if choice != "success":
        assert m["train_reward_mean"] == pytest.approx(sum(want) / len(want))
