"""Target mixing and the rollout budget (issue 29): the share of each step's groups drawn from the target is
what was asked, on the target's own env and train seeds, refills keep it, and every rollout is counted."""

from __future__ import annotations

import json

import pytest

from tests.train.levels_args import levels_args
from trace_train.grpo import trainer as trainer_mod
from trace_train.grpo.rescue import MAIN, TARGET
from trace_train.grpo.trainer import GRPOTrainer
from trace_train.rollout import RolloutStats


def _args(model_dir, out, **kw):
    return levels_args(
        model_dir,
        out,
        **{"target_env_id": "traintest/parity-v0", "steps": 3, "groups_per_step": 4, "group_size": 2, **kw},
    )


def _record(monkeypatch, reward=None):
    """Check every rollout ran on its source's env; optionally script rewards ``reward(call, spec, j)``."""
    import toy_envs

    real = trainer_mod.collect
    calls = []

    def recording(policy, envs, specs, *a, **k):
        for env, spec in zip(envs, specs, strict=True):
            want = toy_envs.ParityEnv if spec.source == TARGET else toy_envs.LevelParityEnv
            assert isinstance(env.unwrapped, want)
        trajs = real(policy, envs, specs, *a, **k)
        calls.append([t.spec for t in trajs])
        if reward is not None:
            seen: dict[int, int] = {}
            for t in trajs:
                j = seen[t.spec.group] = seen.get(t.spec.group, -1) + 1
                t.reward = reward(len(calls), t.spec, j)
        return trajs

    monkeypatch.setattr(trainer_mod, "collect", recording)
    return calls


@pytest.mark.parametrize(("share", "n_target"), [(0.5, 2), (0.25, 1), (0.0, 0)])
def test_the_mixing_share_is_what_was_asked(tiny_model_dir, tmp_path, monkeypatch, share, n_target):
    calls = _record(monkeypatch)
    trainer = GRPOTrainer(_args(tiny_model_dir, tmp_path / "m", target_share=share))
    trainer.train()
    lines = [json.loads(x) for x in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()]
    assert len(calls) == 3
    for specs in calls:
        groups = {s.group: s.source for s in specs}
        assert sum(src == TARGET for src in groups.values()) == n_target
    if share:
        assert [m["target_group_share"] for m in lines] == [share] * 3
        # the target's tasks are counted apart from the env's, each through the train-seed guard
        assert trainer.state["next_target_task"] == 3 * n_target
        assert trainer.state["next_task"] == 3 * (4 - n_target)
        target_seeds = [s.seed for c in calls for s in c if s.source == TARGET]
        assert sorted(set(target_seeds)) == list(range(3 * n_target))
    else:
        assert "target_group_share" not in lines[0]


def test_refills_keep_the_share_and_count_in_the_budget(tiny_model_dir, tmp_path, monkeypatch):
    """First round: every group has equal rewards; the refill round's groups all differ. Each dead group is
    replaced by a fresh one of its own source, and the rollouts spent include the refills."""
    calls = _record(monkeypatch, reward=lambda call, spec, j: float(j == 0) if call > 1 else 0.0)
    trainer = GRPOTrainer(
        _args(tiny_model_dir, tmp_path / "r", target_share=0.5, dynamic_sampling=True, max_refill_rounds=1)
    )
    trajs, m = trainer.collect_groups(RolloutStats())
    assert m["equal_reward_groups"] == 4 and m["refilled_groups"] == 4
    assert sum(s.source == TARGET for s in calls[1]) == sum(s.source == MAIN for s in calls[1]) == 4
    sources = {t.spec.group: t.spec.source for t in trajs}
    assert sorted(sources) == [0, 1, 2, 3] and sum(v == TARGET for v in sources.values()) == 2
    assert m["target_group_share"] == 0.5
    assert m["rollouts"] == 16 and m["rollouts_total"] == 16


def test_a_rollout_budget_stops_the_run(tiny_model_dir, tmp_path, monkeypatch):
    """Budget 12 with 8 rollouts a step: step 1 spends 8, its refills are cut to the 4 left (two groups of the
    env, none of the target), and with 12 spent no second step starts."""
    _record(monkeypatch, reward=lambda call, spec, j: 0.0)  # every group dead, always
    trainer = GRPOTrainer(
        _args(tiny_model_dir, tmp_path / "b", target_share=0.5, dynamic_sampling=True, rollout_budget=12)
    )
    result = trainer.train()
    assert result["step"] == 1 and trainer.state["rollouts"] == 12
    assert result["rollouts"] == 12


def test_the_last_step_takes_only_the_groups_that_fit(tiny_model_dir, tmp_path, monkeypatch):
    """Budget 14 with 8 rollouts a step (4 groups of 2, half from the target): step 1 spends 8, step 2 only the
    3 groups that fit (1 from the target: the share rounded down), and then no group fits: 14, never 16."""
    calls = _record(monkeypatch)
    trainer = GRPOTrainer(_args(tiny_model_dir, tmp_path / "f", target_share=0.5, rollout_budget=14))
    result = trainer.train()
    assert result["step"] == 2 and trainer.state["rollouts"] == 14
    assert [len(c) for c in calls] == [8, 6]
    assert sorted(s.source for s in calls[1] if s.group in {0, 1, 2}) == [MAIN] * 4 + [TARGET] * 2
    lines = [json.loads(x) for x in (tmp_path / "f" / "metrics.jsonl").read_text().splitlines()]
    assert [m["rollouts"] for m in lines] == [8, 6]


def test_a_budget_under_one_group_is_refused():
    with pytest.raises(ValueError, match="fits no group"):
        _args("m", "o", rollout_budget=1)


def test_mixing_needs_a_target():
    with pytest.raises(ValueError, match="--target-env-id"):
        _args("m", "o", target_env_id=None, target_share=0.5)


def test_a_flop_budget_stops_the_run_at_the_compute_spent(tiny_model_dir, tmp_path, monkeypatch):
    """The equal-compute baseline's budget: with room for about one and a half steps of model FLOPs (measured on
    a first run), step 1 is whole, step 2 takes only the groups that fit at the mean FLOPs per rollout, and no
    third step starts. The totals are the ledger's: rollouts' prefill and decode plus training."""
    calls = _record(monkeypatch)
    probe = GRPOTrainer(_args(tiny_model_dir, tmp_path / "p", steps=1))
    probe.train()
    one_step = probe.state["flops"]
    assert one_step > 0 and probe.state["tokens"] > 0
    calls.clear()
    trainer = GRPOTrainer(_args(tiny_model_dir, tmp_path / "f", flop_budget=1.5 * one_step))
    result = trainer.train()
    assert result["step"] == 2
    assert len(calls[0]) == 8 and 0 < len(calls[1]) < 8
    lines = [json.loads(x) for x in (tmp_path / "f" / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["flops_total"] == trainer.state["flops"]
    # resumable: the checkpoint keeps the compute spent, so a resumed run does not start the budget afresh
    resumed = GRPOTrainer(
        _args(
            tiny_model_dir,
            tmp_path / "f",
            flop_budget=1.5 * one_step,
            resume=str(tmp_path / "f" / "checkpoints"),
        )
    )
    assert resumed.state["flops"] == trainer.state["flops"] and resumed._groups_that_fit()[0] == 0


def test_a_negative_flop_budget_is_refused():
    with pytest.raises(ValueError, match="--flop-budget"):
        _args("m", "o", flop_budget=-1.0)
