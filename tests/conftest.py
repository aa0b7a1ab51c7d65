import pytest

import trace_gym  # noqa: F401 - registers the built-in envs
from trace_gym.registration import register_env

register_env("trace/test-library-v0", entry_point="tests.toy_library:LibraryEnv")


@pytest.fixture
def library_env():
    import gymnasium as gym

    env = gym.make("trace/test-library-v0")
    yield env
    env.close()
