"""The oracle fit spread over several start depths (``SFTSettings.levels``): issue 29's fit on the turns before
the decision, not only the decision."""

from __future__ import annotations

import pytest

import trace_gym  # noqa: F401 - registers the ids
from trace_gym.registration import make_env
from trace_gym.seeds import train_reset_seed
from trace_train import sft
from trace_train.config import SFTArgs, SFTSettings

ENV = "trace/retail-precise-arguments-v0"


def test_levels_are_taken_in_turn_and_exclude_a_difficulty():
    assert SFTSettings(episodes=5, levels=[1, 3]).episode_difficulties() == [1, 3, 1, 3, 1]
    assert SFTSettings(episodes=2, difficulty=2).episode_difficulties() == [2, 2]
    with pytest.raises(ValueError, match="--levels 1 2 and --difficulty 3"):
        SFTSettings(levels=[1, 2], difficulty=3)
    with pytest.raises(ValueError, match="--levels must be integers >= 0"):
        SFTSettings(levels=[-1])


def test_each_oracle_episode_starts_at_its_own_level(tiny_policy):
    probe = make_env(ENV)
    seed = train_reset_seed(0, probe)
    probe.close()
    trajs, failed = sft.oracle_trajectories(tiny_policy, ENV, [seed, seed], max_turns=12, difficulty=[1, 4])
    assert failed == 0 and len(trajs) == 2
    at_decision, whole_task = trajs
    # level 1 hands over the conversation up to the decision; level 4 is the whole task from its first message
    assert at_decision.turns < whole_task.turns
    assert len(at_decision.messages) - 2 * at_decision.turns > len(whole_task.messages) - 2 * whole_task.turns
    with pytest.raises(ValueError, match="1 difficulties for 2 seeds"):
        sft.oracle_trajectories(tiny_policy, ENV, [seed, seed], difficulty=[1])


def test_run_sft_fits_the_episodes_at_the_levels_it_is_given(tiny_policy, monkeypatch, tmp_path):
    asked = []

    def oracle(policy, env_id, seeds, max_turns, difficulty, without=None):
        asked.append(difficulty)
        raise RuntimeError("stop after the oracle episodes are asked for")

    monkeypatch.setattr(sft, "oracle_trajectories", oracle)
    args = SFTArgs(env_id=ENV, model="tiny", out=str(tmp_path), episodes=3, levels=[1, 4], lora_rank=2)
    with pytest.raises(RuntimeError, match="stop after"):
        sft.run_sft(args, policy=tiny_policy)
    assert asked == [[1, 4, 1]]
