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
        # the labels by cause too: the first failure comes at or before the first violation
        assert stopped[2]["first_failure"] == full[2]["first_failure"], seed
        assert stopped[2]["requirements"] == full[2]["requirements"], seed
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
    with pytest.raises(
        ValueError, match="trace/retail-policy-adherence-v0 cannot tell when an episode's outcome"
    ):
        make_envs("trace/retail-policy-adherence-v0", 1, stop_when_decided=True)  # a derived env: not yet
    assert len(make_envs("trace/retail-v2", 2, max_turns=6, stop_when_decided=True)) == 2


def _wrong_refund(env) -> list:
    """The oracle with the first stated amount of a request that does not need structured-reasoning told wrong
    (a cancellation's refund): a violation no decision point of the diagnosis judges, as the demo's base made."""
    import json

    from trace_gym.targets.retail.facts import fmt

    request = env.task.requests[0]
    money = [n for n in request.needs if n.kind == "money"]
    if "structured-reasoning" in request.capabilities or not money:
        return []
    right, wrong = fmt(money[0].value), fmt(money[0].value + 1.0)
    return [json.loads(json.dumps(a).replace(right, wrong)) for a in env.oracle_actions()]


@pytest.mark.parametrize("without", ["structured-reasoning", "policy-adherence", "wrong-refund"])
def test_a_stop_labels_the_episode_as_a_cut_not_as_the_agent_ending_it(without):
    """The stop ends the episode from outside, as a turn cap does: its labels are those of the same actions cut
    there, never "gave up" at the next decision point (which a conversation the user ended would give)."""
    compared = 0
    for seed in range(40):
        env = make_env("trace/retail-v2", stop_when_decided=True)
        env.reset(seed=seed, options={"split": "train", "difficulty": 1})
        if without == "wrong-refund":
            actions = _wrong_refund(env.unwrapped)
        else:
            actions = env.unwrapped.oracle_actions(without=without)
        played, info = 0, {}
        for action in actions:
            _, _, terminated, truncated, info = env.step(action)
            played += 1
            if terminated or truncated:
                break
        if "decided" not in info:
            continue
        cut = make_env("trace/retail-v2")
        cut.reset(seed=seed, options={"split": "train", "difficulty": 1})
        for action in actions[:played]:
            cut.step(action)
        assert info["requirements"] == cut.unwrapped._evaluate().requirements, seed
        assert info["first_failure"] == cut.unwrapped.first_failure(), seed
        compared += 1
    assert compared >= 3
