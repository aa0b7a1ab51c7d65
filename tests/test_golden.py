"""Golden hashes of rendered instances: any change to a generator shows here (then bump the id's -vN).

Targets keep their own golden tests next to their other tests (e.g. tests/retail/)."""

import hashlib

import gymnasium as gym
import pytest

GOLDEN = {
    (
        "trace/test-library-v0",
        0,
        "train",
        1,
    ): "11b5cb3a39aebba58088e9283ab0a4e95460b3f1ad0eaeee6fd19fef1882f60b",
    (
        "trace/test-library-v0",
        7,
        "train",
        2,
    ): "810623f83b7f8dc524b3218d62103edd4de964981e97cff01a3213d7ef70db85",
    (
        "trace/test-library-v0",
        3,
        "test",
        1,
    ): "8bd4c71cb1d62a2d1c54089fb6a64e1a263e11850f240eee2b3c784973333037",
}


@pytest.mark.parametrize(("env_id", "seed", "split", "difficulty"), sorted(GOLDEN))
def test_golden_instance_hashes(env_id, seed, split, difficulty):
    env = gym.make(env_id)
    env.reset(seed=seed, options={"split": split, "difficulty": difficulty})
    digest = hashlib.sha256(env.unwrapped.render_instance().encode()).hexdigest()
    assert digest == GOLDEN[(env_id, seed, split, difficulty)]
