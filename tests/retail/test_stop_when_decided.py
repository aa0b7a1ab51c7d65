"""``stop_when_decided``: retail ends an episode at its first violation, and the reward is the full episode's.

The stop rests on one claim: a violation (``verifier.milestone_events``) fails a reward component for good. The
ablated oracles break that claim's premises in each way the verifier knows (an unconfirmed write, acting before
reading, a detail used before the user said it), so their full episodes are the check: each scores the same with
and without the stop, and the oracle itself is never stopped."""

from __future__ import annotations

import pytest

from trace_gym.registration import make_env
from trace_train.episodes import make_envs

SEEDS = range(12)


def _play(seed: int, difficulty: int, stop: bool, without: str | None = None) -> tuple[float, int, dict]:
    env = make_env("trace/retail-v2", stop_when_decided=stop)
    env.reset(seed=seed, options={"split": "train", "difficulty": difficulty})
    reward, turns, info = 0.0, 0, {}
    for action in env.unwrapped.oracle_actions(without=without):
        _, reward, terminated, truncated, info = env.step(action)
        turns += 1
        if terminated or truncated:
            break
    env.close()
    return reward, turns, info


@pytest.mark.parametrize("difficulty", [1, 2])
@pytest.mark.parametrize("without", ["policy-adherence", "precondition-checking", "information-gathering"])
def test_a_stopped_episode_scores_what_the_full_one_scores(difficulty, without):
    saved = 0
    for seed in SEEDS:
        full = _play(seed, difficulty, stop=False, without=without)
        stopped = _play(seed, difficulty, stop=True, without=without)
        assert stopped[0] == full[0], (seed, full, stopped)
        assert stopped[1] <= full[1]
        if stopped[1] < full[1]:
            # ended by the stop, at the violation it names, as a terminal step with the reward components
            assert stopped[2]["decided"]["turn"] == stopped[1]
            assert stopped[2]["reward_components"] and stopped[0] == 0.0
        saved += full[1] - stopped[1]
    if without != "policy-adherence" or difficulty == 2:
        assert saved > 0  # the stop does fire (a planted no-op stop fails here)


@pytest.mark.parametrize("difficulty", [1, 2])
def test_the_oracle_is_never_stopped(difficulty):
    for seed in SEEDS:
        reward, turns, info = _play(seed, difficulty, stop=True)
        assert reward == 1.0 and "decided" not in info, seed


def test_decided_names_the_first_violation():
    env = make_env("trace/retail-v2")
    env.reset(seed=0, options={"split": "train", "difficulty": 1})
    assert env.unwrapped.decided() is None
    _, violations = env.unwrapped.milestone_events()
    assert violations == []
    for action in env.unwrapped.oracle_actions(without="information-gathering"):
        env.step(action)
        if env.unwrapped.decided() is not None:
            break
    _, violations = env.unwrapped.milestone_events()
    turn, key = violations[0]
    assert env.unwrapped.decided() == {"turn": turn, "violation": key}


def test_an_env_that_cannot_tell_is_refused_by_name():
    with pytest.raises(ValueError, match="trace/bfcl-multi-turn-v0 cannot tell when an episode's outcome"):
        make_envs("trace/bfcl-multi-turn-v0", 1, stop_when_decided=True)
    assert len(make_envs("trace/retail-v2", 2, max_turns=6, stop_when_decided=True)) == 2
