"""The env contract on trace/retail-v2: check_env, determinism, golden hashes, oracle, degenerate policies."""

from __future__ import annotations

import hashlib
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from tests.retail.conftest import play
from trace_gym.core.validation import DEGENERATE_POLICIES, ValidationConfig, run_policy
from trace_gym.targets.retail.env import RetailEnv
from trace_gym.targets.retail.tasks import CAPABILITIES


def test_registered_and_check_env_without_warnings():
    env = gym.make("trace/retail-v2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
        env.reset(seed=0)
        env.step(env.action_space.sample())
        env.close()
    assert isinstance(env.unwrapped, RetailEnv)
    assert env.unwrapped.default_difficulty == 2 and env.unwrapped.difficulty_levels == (1, 2, 3)


@pytest.mark.parametrize("retired", ["trace/retail-v0", "trace/retail-v1"])
def test_retired_versions_point_to_v2(retired):
    with pytest.raises(gym.error.DeprecatedEnv, match="retail-v2"):
        gym.make(retired)


# sha256 of render_instance(): any change of the generator shows here; bump retail-v2 -> v3 when it does.
GOLDEN = {
    ("train", 0, 1): "e2f4cfcb0a48d6bc884bae31067b23e2950409c9cd04d570d2dbae6fa59f1a3b",
    ("train", 3, 2): "9c0f32c0f79ba7bd1b769fcbc4671d52fd84aafbfa565991270c7e6fee87d102",
    ("test", 0, 2): "b9f5e13eaf6e17ae82ced060799af2586d4cc4492755a28fd7d470d623fcb3e1",
    ("test", 199, 3): "3511eb62d13107d7d0942236be179c7bb6885e59ffee50867ddec0a0b191c829",
}


@pytest.mark.parametrize(("split", "seed", "difficulty"), sorted(GOLDEN))
def test_golden_instances(env, split, seed, difficulty):
    env.reset(seed=seed, options={"split": split, "difficulty": difficulty})
    digest = hashlib.sha256(env.render_instance().encode()).hexdigest()
    assert digest == GOLDEN[(split, seed, difficulty)]


def test_same_seed_same_instance_and_splits_differ(env):
    other = RetailEnv()
    for seed in range(5):
        env.reset(seed=seed, options={"split": "test"})
        other.reset(seed=seed, options={"split": "test"})
        assert env.render_instance() == other.render_instance()
        assert env.oracle_actions() == other.oracle_actions()
        train = RetailEnv()
        train.reset(seed=seed, options={"split": "train"})
        assert train.render_instance() != env.render_instance()


def test_a_seed_drawn_again_is_the_same_task_and_the_same_stream_after_it():
    """A reset to a seed the env drew before takes the kept task (``_generate_task``): it must equal a fresh
    env's, whatever the last episode did to its task, and leave the rng where a fresh draw would."""
    env, fresh = RetailEnv(), RetailEnv()
    for seed, split in [(3, "train"), (7, "test"), (3, "train")]:
        env.reset(seed=seed, options={"split": split})
        for action in env.oracle_actions():
            env.step(action)
        env.task.initial_state["users"].clear()  # an episode that changed its task in place
        env.task.requests.clear()
    kept = len(env._task_memo)
    env.reset(seed=3, options={"split": "train"})
    fresh.reset(seed=3, options={"split": "train"})
    assert len(env._task_memo) == kept  # taken from the memo, not drawn again
    assert env.render_instance() == fresh.render_instance()
    assert env.oracle_actions() == fresh.oracle_actions()
    assert (
        env.np_random.integers(1 << 62, size=4).tolist() == fresh.np_random.integers(1 << 62, size=4).tolist()
    )


@pytest.mark.parametrize("difficulty", [1, 2, 3])
@pytest.mark.parametrize("split", ["train", "test"])
def test_oracle_scores_one_everywhere(env, split, difficulty):
    for seed in range(150):
        env.reset(seed=seed, options={"split": split, "difficulty": difficulty})
        reward, info, ended = play(env, env.oracle_actions())
        assert ended and reward == 1.0, (seed, info.get("reward_components"))
        assert set(info["requirements"]) == set(env.task.capabilities)
        assert set(info["requirements"].values()) == {"PRESENT"}, (seed, info["requirements"])


def test_fixed_evaluation_set_covers_every_capability(env):
    seen = set()
    for seed in range(200):
        env.reset(seed=seed, options={"split": "test"})
        assert env.task.capabilities, "every task requires something"
        seen |= set(env.task.capabilities)
    assert seen == set(CAPABILITIES)


@pytest.mark.parametrize("name", sorted(DEGENERATE_POLICIES))
def test_degenerate_policies_score_zero(env, name):
    config = ValidationConfig(split="train")
    rewards = [run_policy(env, DEGENERATE_POLICIES[name], seed, config) for seed in range(40)]
    assert np.mean(rewards) == 0.0


def test_random_sampled_actions_never_raise(env):
    for seed in range(10):
        env.reset(seed=seed)
        env.action_space.seed(seed)
        for _ in range(60):
            _, reward, terminated, truncated, info = env.step(env.action_space.sample())
            assert 0.0 <= reward <= 1.0
            if terminated or truncated:
                assert set(info["reward_components"]) == {
                    "final_state", "facts", "no_amount_spraying", "informed", "transfer", "policy"
                }  # fmt: skip
                break


def test_hint_and_difficulty_options(env):
    _, info = env.reset(seed=1, options={"hint": True, "difficulty": 3})
    obs = env._observation()
    assert "# Expert advice" in obs[0]["content"] and "# Expert advice" not in info["base_system_prompt"]
    assert info["difficulty"] == 3
    with pytest.raises(ValueError):
        env.reset(seed=1, options={"difficulty": 4})
