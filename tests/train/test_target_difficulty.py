"""``--target-difficulty``: a derived env's target at the difficulty a run trains on, not its package's default.

A derived id's own ``difficulty`` is its start depth; its target is made with the kwargs its package registered
(a committed package: the target's default, difficulty 2 for retail-v2). The demo trains at target difficulty 1,
so standalone commands measured another env until this flag (docs/derived.md, "Two difficulties")."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

import trace_gym  # noqa: F401 - registers the ids
from trace_gym.records import read_records
from trace_gym.registration import set_target_kwargs, use_target_difficulty
from trace_train.cli import main

DERIVED = "trace/retail-precondition-checking-v0"


@pytest.fixture(autouse=True)
def restore_registry():
    """The flag re-registers the id for the rest of the process: put the committed registration back."""
    spec = gym.spec(DERIVED)
    yield
    gym.registry[DERIVED] = spec


def _requests(env_id: str) -> int:
    env = gym.make(env_id, difficulty=1, disable_env_checker=True)
    try:
        env.reset(seed=0, options={"split": "train"})
        return len(env.unwrapped.target.unwrapped.task.requests)
    finally:
        env.close()


def test_the_target_difficulty_reaches_the_derived_envs_target() -> None:
    assert _requests(DERIVED) > 1  # as committed: the target's default difficulty (several requests)
    use_target_difficulty(DERIVED, 1)
    assert gym.spec(DERIVED).kwargs["target_kwargs"] == {"difficulty": 1}
    assert _requests(DERIVED) == 1
    assert not set_target_kwargs(DERIVED, {"difficulty": 1})  # already so: nothing re-registered
    use_target_difficulty(DERIVED, None)  # None leaves the registration alone
    assert _requests(DERIVED) == 1


def test_a_target_difficulty_on_an_env_without_a_target_is_refused(capsys) -> None:
    with pytest.raises(gym.error.Error, match="trace/retail-v2 is not derived from a target"):
        use_target_difficulty("trace/retail-v2", 1)
    assert main(["evaluate", "trace/retail-v2", "--model", "oracle", "--target-difficulty", "1"]) == 2
    assert "not derived from a target" in capsys.readouterr().out


def test_trace_rollout_plays_the_target_difficulty_and_records_it(tmp_path: Path) -> None:
    out = tmp_path / "ro"
    argv = [
        "rollout",
        DERIVED,
        "--model",
        "oracle",
        "--out",
        str(out),
        "--episodes",
        "2",
        "--difficulty",
        "4",
    ]
    assert main([*argv, "--target-difficulty", "1"]) == 0
    records = read_records(out / "trajectories.jsonl")
    assert [r["run"]["target_difficulty"] for r in records] == [1, 1]
    assert gym.spec(DERIVED).kwargs["target_kwargs"] == {"difficulty": 1}
    # resuming the file at another target difficulty is another env: refused, naming the setting
    assert main([*argv, "--resume", "--episodes", "3"]) == 2
