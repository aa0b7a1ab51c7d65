import gymnasium as gym
import pytest

import trace_gym  # noqa: F401 - registers the built-in envs
from tests import toy_library  # noqa: F401 - registers trace/test-library-v0


@pytest.fixture
def library_env():
    env = gym.make("trace/test-library-v0")
    yield env
    env.close()
