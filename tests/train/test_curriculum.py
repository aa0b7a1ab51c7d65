"""Adaptive start depth (issue 29): the level of each group follows the running success estimate per level, the
env receives it, every group's level is logged, and resume stays exact with the curriculum on."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.train.levels_args import levels_args
from trace_train.grpo import trainer as trainer_mod
from trace_train.grpo.curriculum import LevelCurriculum, env_levels
from trace_train.grpo.trainer import GRPOTrainer


def _args(model_dir, out, **kw):
    return levels_args(model_dir, out, **{"steps": 5, "curriculum": "adaptive", "curriculum_ema": 0.5, **kw})


def _play(c: LevelCurriculum, script: list[tuple[int, int, float, int]]) -> None:
    for level, wins, est, nxt in script:
        assert c.choose() == level
        c.update(level, wins, 4)
        assert c.estimate(level) == pytest.approx(est)
        assert c.choose() == nxt, (level, wins, c.estimates)


def test_a_level_near_the_target_is_kept_until_it_is_mastered():
    """The default rung opening (advance 0.75, above the 0.5 target): G = 4, EMA weight 0.6, worked by hand. A
    level at 0.72 is kept (its groups are informative); the next rung opens only at 0.888 >= 0.75."""
    c = LevelCurriculum("e", [1, 2, 3], target=0.5, ema=0.6, group_size=4)
    assert c.advance == 0.75
    _play(
        c,
        [
            # (level, successes of 4, estimate after, next level)
            (1, 2, 0.5, 1),  # the first group sets the estimate
            (1, 4, 0.8, 2),  # 0.4 * 0.5 + 0.6 >= 0.75: level 2 opens (assumed at the target, 0.5, nearer)
            (2, 3, 0.75, 3),  # tried: 0.75 >= 0.75 opens level 3 (0.5 is nearer the target than 0.75 and 0.8)
            (3, 2, 0.5, 3),  # at the target on the full task: stays
        ],
    )
    d = LevelCurriculum("e", [1, 2, 3], target=0.5, ema=0.6, group_size=4)
    _play(d, [(1, 2, 0.5, 1), (1, 3, 0.65, 1), (1, 3, 0.71, 1)])  # below 0.75: level 2 is never tried
    with pytest.raises(ValueError, match="curriculum-advance"):
        LevelCurriculum("e", [1, 2], advance=0.0)


def test_level_choice_follows_scripted_success():
    """G = 4 (saturated: within 1/8 of 0 or 1), target 0.5, EMA weight 0.6, and the next rung opening at the
    target (advance 0.5); each line: one group's outcome at the level just chosen, then the estimate and the next
    level, worked out by hand from the documented rule."""
    c = LevelCurriculum("e", [1, 2, 3], target=0.5, ema=0.6, group_size=4, advance=0.5)
    assert c.choose() == 1  # nothing measured: the easiest level
    script = [
        # (level, successes of 4, estimate after, next level)
        (1, 0, 0.0, 1),  # fails everything: stays at the easiest (nothing easier)
        (1, 2, 0.3, 1),  # 0.4 * 0 + 0.6 * 0.5
        (1, 4, 0.72, 2),  # 0.4 * 0.3 + 0.6 >= target: the next harder level is tried (assumed at the target)
        (2, 0, 0.0, 1),  # too hard for now: back to the level near the target
        (1, 4, 0.888, 2),  # mastered (> 1 - 1/8): on to the easiest level it fails (its 0 is stale)
        (2, 2, 0.3, 2),  # informative there
        (2, 4, 0.72, 3),  # >= target: the full task is tried
        (3, 2, 0.5, 3),  # at the target on the full task: stays
        (3, 0, 0.2, 2),  # |0.2 - 0.5| > |0.72 - 0.5|: back to level 2
    ]
    _play(c, script)
    # ties go to the harder level; a start level is honoured before any estimate
    t = LevelCurriculum("e", [1, 2, 3], group_size=4)
    t.load_state_dict({"e": {"1": 0.6, "2": 0.4}})
    assert t.choose() == 2
    assert LevelCurriculum("e", [1, 2, 3], start=2).choose() == 2
    with pytest.raises(ValueError, match="declares none"):
        LevelCurriculum("e", [])


def test_env_levels_are_sorted_easiest_first():
    class E:
        difficulty_levels = (3, 1, 2)

    assert env_levels(E()) == [1, 2, 3]
    assert env_levels(object()) == []


def test_trainer_picks_levels_from_the_estimate_and_logs_them(tiny_model_dir, tmp_path, monkeypatch):
    """A scripted agent that solves level 1 always, level 2 half the time and level 3 never: levels by hand
    (2 groups per step, EMA 0.5, the next rung opening at the target, 0.5): step 1 at 1 (nothing known) -> p1 = 1; step 2: p1 >= 0.5 opens level 2 (assumed
    at 0.5), tried by the first group only, the other stays at 1 -> p2 = 0.5, p1 = 1; step 3: level 3 opens the
    same way (ties go harder), the other group at 2 -> p3 = 0; steps 4-5 at 2 (p1 = 1 and p3 = 0 are saturated,
    p2 = 0.5 is the target)."""
    wins = {1: 4, 2: 2, 3: 0}
    real = trainer_mod.collect

    def scripted(policy, envs, specs, *a, **k):
        trajs = real(policy, envs, specs, *a, **k)
        seen: dict[int, int] = {}
        for t in trajs:
            level = t.spec.difficulty
            assert f"Level {level}," in t.messages[1]["content"]  # the env was reset at the chosen level
            j = seen[t.spec.group] = seen.get(t.spec.group, -1) + 1
            t.reward = 1.0 if j < wins[level] else 0.0
        return trajs

    monkeypatch.setattr(trainer_mod, "collect", scripted)
    GRPOTrainer(_args(tiny_model_dir, tmp_path / "run", curriculum_advance=0.5)).train()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["group_levels"] for m in lines] == [[1, 1], [2, 1], [3, 2], [2, 2], [2, 2]]
    assert lines[-1]["level_success_est_1"] == 1.0 and lines[-1]["level_success_est_3"] == 0.0
    assert lines[3]["groups_at_level_2"] == 2 and lines[3]["level_mean"] == 2.0


def test_a_round_is_one_update_whatever_its_groups_order():
    """Two groups of one round at level 1, 4/4 and 0/4: one pooled update (first at the level: p = 4/8), not 0.7
    or 0.3 by their order; later rounds weigh n groups as n one-group updates would (EMA 0.3, 2 groups: 0.51)."""
    c = LevelCurriculum("e", [1, 2, 3], target=0.5, ema=0.3, group_size=4)
    c.update(1, 4, 8, groups=2)
    assert c.estimate(1) == pytest.approx(0.5)
    c.update(1, 8, 8, groups=2)
    assert c.estimate(1) == pytest.approx(0.49 * 0.5 + 0.51 * 1.0)
    one_by_one = LevelCurriculum("e", [1, 2, 3], target=0.5, ema=0.3, group_size=4)
    one_by_one.update(1, 4, 8, groups=2)
    one_by_one.update(1, 4, 4)
    one_by_one.update(1, 4, 4)  # two one-group updates of full success: the same as the pooled one
    assert one_by_one.estimate(1) == pytest.approx(c.estimate(1))


def test_an_untried_level_gets_one_group_of_the_round():
    c = LevelCurriculum("e", [1, 2, 3], target=0.5, ema=0.3, group_size=4, advance=0.5)
    assert c.choose_round(3) == [1, 1, 1]  # nothing tried: the start level
    c.update(1, 5, 8, groups=2)  # 0.625 >= target: level 2 opens, assumed at the target
    assert c.choose_round(3) == [2, 1, 1]  # the others stay on what was measured
    assert c.choose_round(1) == [2]  # a round of one group explores with it
    c.update(2, 1, 4)  # tried now, 0.25: level 1 (0.625) is nearer the target, and no rung opens
    assert c.choose_round(2) == [1, 1]
    c.update(2, 2, 4)  # the EMA: 0.7 * 0.25 + 0.3 * 0.5 = 0.325 (level 1, 0.625, is still nearer)
    c.update(1, 6, 8, groups=2)  # 0.49 * 0.625 + 0.51 * 0.75 = 0.689 -> |0.189| > |0.175|: level 2, as tried
    assert c.choose_round(2) == [2, 2]


def test_curriculum_needs_declared_levels(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="difficulty_levels"):
        GRPOTrainer(_args(tiny_model_dir, tmp_path / "x", env_id="traintest/parity-v0"))


def test_resume_is_exact_with_the_curriculum_on(tiny_model_dir, tmp_path):
    """The estimates are part of the checkpoint: a resumed run picks the levels the uninterrupted one did (with
    rescue hints, a shaped reward and dynamic sampling on too) and ends with the same weights."""
    kw = dict(
        steps=4,
        save_every=2,
        temperature=1.0,
        lr=5e-2,
        rescue_fraction=0.5,
        curriculum_target=0.3,  # the tiny model solves about half: the level climbs from step 2 on
        curriculum_advance=0.3,
        reward="mix:0.5",
        dynamic_sampling=True,
        ppo_epochs=2,
        num_minibatches=2,
        micro_batch_size=3,
    )
    GRPOTrainer(_args(tiny_model_dir, tmp_path / "full", **kw)).train()
    GRPOTrainer(_args(tiny_model_dir, tmp_path / "half", **{**kw, "steps": 2})).train()
    step2 = json.loads((tmp_path / "half" / "metrics.jsonl").read_text().splitlines()[-1])
    resumed = GRPOTrainer(_args(tiny_model_dir, tmp_path / "half", resume=str(tmp_path / "half"), **kw))
    # the estimates it goes on from are step 2's (the levels alone need not show it: refills explore too)
    assert resumed.curriculum.metrics() == {
        k: v for k, v in step2.items() if k.startswith("level_success_est_")
    }
    assert resumed.curriculum.metrics()
    resumed.train()
    a = load_file(str(tmp_path / "full" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "half" / "adapter" / "adapter_model.safetensors"))
    for k in a:
        assert torch.equal(a[k], b[k]), k
    full = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    half = [json.loads(x) for x in (tmp_path / "half" / "metrics.jsonl").read_text().splitlines()]
    assert [m["group_levels"] for m in full] == [m["group_levels"] for m in half]
    assert [m["rollouts_total"] for m in full] == [m["rollouts_total"] for m in half]
