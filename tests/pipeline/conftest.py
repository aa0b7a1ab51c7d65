from __future__ import annotations

import gymnasium as gym
import pytest


class NoSplitEnv(gym.Env):
    """A third-party-style text env without split support: seeds are the only train/test separation."""

    observation_space = gym.spaces.Text(64)
    action_space = gym.spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "say hi", {}

    def step(self, action):
        return "", float(action == "hi"), True, False, {}


@pytest.fixture(scope="session", autouse=True)
def no_split_env():
    if "pipelinetest/nosplit-v0" not in gym.registry:
        gym.register("pipelinetest/nosplit-v0", entry_point=NoSplitEnv)
    return "pipelinetest/nosplit-v0"
