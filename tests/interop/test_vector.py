"""gym.make_vec on trace envs: sync and async (default shared memory and pipes) give the single env's results."""

import gymnasium as gym
import pytest

from tests.interop.ids import RETAIL
from trace_gym.interop.vector import SharedConversations, make_vec

ENV_ID = f"trace_gym:{RETAIL}"


def single_run(seed: int, actions: list) -> tuple[list, float]:
    env = gym.make(ENV_ID)
    obs, _ = env.reset(seed=seed)
    reward = 0.0
    for action in actions:
        obs, reward, *_ = env.step(action)
    env.close()
    return obs, reward


def oracles(num: int, seed: int) -> list[list]:
    env = gym.make(ENV_ID)
    plans = []
    for i in range(num):
        env.reset(seed=seed + i)
        plans.append(env.unwrapped.oracle_actions())
    return plans


@pytest.mark.parametrize(
    ("mode", "vector_kwargs"),
    [("sync", {}), ("async", {}), ("async", {"shared_memory": False})],
    ids=["sync", "async-default", "async-pipes"],
)
def test_make_vec_matches_single_envs(mode, vector_kwargs):
    num = 3
    plans = oracles(num, seed=10)
    envs = gym.make_vec(ENV_ID, num_envs=num, vectorization_mode=mode, vector_kwargs=vector_kwargs)
    try:
        obs, infos = envs.reset(seed=10)
        assert isinstance(obs, tuple) and len(obs) == num
        for i in range(num):
            assert obs[i] == single_run(10 + i, [])[0]
            assert infos["tools"][i] == envs.get_attr("tools")[i]
        # Drive each sub-env with its own oracle, replying with a harmless message once it is done.
        steps = max(map(len, plans))
        finals: dict[int, float] = {}
        for t in range(steps):
            actions = tuple(plans[i][t] if t < len(plans[i]) else "ok" for i in range(num))
            obs, rewards, terminated, truncated, infos = envs.step(actions)
            for i in range(num):
                if t == len(plans[i]) - 1:
                    finals[i] = float(rewards[i])
                    assert terminated[i] or truncated[i]
                    expected_obs, expected_reward = single_run(10 + i, plans[i])
                    assert expected_reward == 1.0 and obs[i] == expected_obs
        assert finals == dict.fromkeys(range(num), 1.0)
    finally:
        envs.close()


def test_async_default_returns_plain_tuples_and_live_view():
    envs = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="async", vector_kwargs={"copy": False})
    try:
        obs, _ = envs.reset(seed=0)
        assert isinstance(obs, SharedConversations) and len(obs) == 2
        first = list(obs)
        envs.step(("hello", "hello"))
        assert len(obs[0]) > len(first[0])  # the view follows the workers' writes
    finally:
        envs.close()


def test_make_vec_helper_prefers_pipes_for_async():
    envs = make_vec(ENV_ID, num_envs=2, vectorization_mode="async")
    try:
        assert envs.shared_memory is False
        obs, _ = envs.reset(seed=1)
        assert obs[0][0]["role"] == "system"
    finally:
        envs.close()
