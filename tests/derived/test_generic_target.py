"""The derived env on a target that is not BFCL: the toy library with the two protocol methods (as retail will
have them). Nothing in trace_gym/derived names a target class; the generic milestone rule applies."""

from __future__ import annotations

import gymnasium as gym
import pytest

from tests.toy_library import LibraryEnv
from trace_gym.derived.levels import LEVELS
from trace_gym.derived.registration import register_derived
from trace_gym.derived.shaped import SHAPED_KEY

TOY = "trace/test-derived-source-library-v0"


class ProtocolLibraryEnv(LibraryEnv):
    """The toy library plus task_capabilities() and decision_points() (get_book is oracle action 3)."""

    def task_capabilities(self) -> tuple[str, ...]:
        return ("precondition-checking",)

    def decision_points(self) -> dict[str, list[int]]:
        return {"precondition-checking": [3]}


@pytest.fixture(scope="module")
def derived_toy():
    before = set(gym.registry)
    gym.register(id=TOY, entry_point=f"{__name__}:ProtocolLibraryEnv")
    (env_id,) = register_derived(TOY, ["precondition-checking"])
    yield env_id
    for name in set(gym.registry) - before:  # other tests list the registry
        del gym.registry[name]


def make(env_id):
    return gym.make(env_id, window=40, disable_env_checker=True).unwrapped


def play(env, actions):
    for action in actions:
        result = env.step(action)
        if result[2] or result[3]:
            return result
    return result


def test_id_and_replay_on_every_level(derived_toy):
    assert derived_toy == "trace/test-derived-source-library-precondition-checking-v0"
    env = make(derived_toy)
    for level in LEVELS:
        for seed in range(10):
            obs, info = env.reset(seed=seed, options={"split": "train", "difficulty": level})
            assert info["prefix_actions"] == {1: 3, 2: 1, 3: 0, 4: 0}[level]
            assert info["source"]["target"] == TOY
            result = play(env, env.oracle_actions())
            assert result[1] == 1.0 and result[4]["reward_components"][SHAPED_KEY] == 1.0


def test_format_is_the_targets_and_the_generic_milestones(derived_toy):
    env, target = make(derived_toy), gym.make(TOY, disable_env_checker=True).unwrapped
    obs, info = env.reset(seed=4, options={"split": "train"})
    t_obs, t_info = target.reset(seed=info["source"]["seed"], options={"split": "train"})
    for action in target.oracle_actions()[:3]:
        t_obs, *_ = target.step(action)
    assert obs == t_obs and info["tools"] == t_info["tools"] and env.tools == target.tools
    # skip the read the capability is about: the checkout still succeeds, the label is LACKING
    continuation = env.oracle_actions()[1:]
    result = play(env, continuation)
    assert result[4]["requirements"]["precondition-checking"] == "LACKING"
    assert result[4]["reward_components"][SHAPED_KEY] == 0.0  # the first milestone missed
