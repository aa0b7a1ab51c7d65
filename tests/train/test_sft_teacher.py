"""``SFTSettings.teacher = oracle-without:CAP``: a warm start on the oracle with one capability removed, every
episode kept (a base with a planted gap, for the known-answer test)."""

from __future__ import annotations

import pytest

import trace_gym  # noqa: F401 - registers the ids
from trace_gym.registration import make_env
from trace_gym.seeds import train_reset_seed
from trace_train import sft
from trace_train.config import SFTSettings

ENV = "trace/retail-v2"


def _seeds(n: int) -> list[int]:
    probe = make_env(ENV)
    seeds = [train_reset_seed(500000 + i, probe) for i in range(n)]
    probe.close()
    return seeds


def test_the_teacher_setting_is_checked():
    assert SFTSettings().removed_capability() is None
    assert SFTSettings(teacher="oracle-without:policy-adherence").removed_capability() == "policy-adherence"
    for bad in ("oracle-without:", "gpt", "oracle-with:x"):
        with pytest.raises(ValueError, match="--teacher must be oracle or oracle-without:CAPABILITY"):
            SFTSettings(teacher=bad)


def test_the_ablated_oracle_keeps_its_failing_episodes(tiny_policy):
    seeds = _seeds(6)
    full, dropped = sft.oracle_trajectories(tiny_policy, ENV, seeds, max_turns=12, difficulty=1)
    planted, failing = sft.oracle_trajectories(
        tiny_policy, ENV, seeds, max_turns=12, difficulty=1, without="policy-adherence"
    )
    assert dropped == 0 and len(full) == 6
    # every episode is kept, and most of them fail: at difficulty 1 nearly every task has a change to confirm
    assert len(planted) == 6 and failing == sum(t.reward < 1.0 for t in planted) >= 3
    for whole, gap in zip(full, planted, strict=True):
        if gap.reward < 1.0:  # the change was made without asking: fewer agent turns than the oracle's
            assert gap.turns < whole.turns


def test_a_capability_the_env_cannot_remove_is_refused_before_any_episode(tiny_policy):
    with pytest.raises(ValueError, match="cannot remove 'tool-use' from the oracle; this env can remove: "):
        sft.oracle_trajectories(tiny_policy, ENV, _seeds(1), difficulty=1, without="tool-use")
