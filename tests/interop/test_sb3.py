"""The numeric candidate-action view: SB3's own check_env, real PPO, and PPO beating random (slow)."""

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.env_checker import check_env

from tests.interop.ids import CAPABILITY, RETAIL, newest
from trace_gym.interop.robustness import robust
from trace_gym.interop.sb3 import CandidateActionEnv

LIBRARY = "trace/test-library-v0"


def play(env: CandidateActionEnv, choose, seeds) -> float:
    rewards = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        done, reward = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(choose(obs, env))
            done = terminated or truncated
        rewards.append(reward)
    return float(np.mean(rewards))


def follow_the_plan(env: CandidateActionEnv, seeds) -> float:
    """Play the reference solution through the slots, asserting each of its actions is offered in time
    (diagnostics only: which candidate is the reference one is never in the observation)."""
    rewards = []
    for seed in seeds:
        env.reset(seed=seed)
        plan, done, reward = [c.text for c in env.generator.plan], False, 0.0
        for step, text in enumerate(plan):
            slots = [i for i, c in enumerate(env.current) if c.text == text]
            assert slots, f"seed {seed}: reference action {step} is not offered: {text[:200]}"
            _, reward, terminated, truncated, _ = env.step(slots[0])
            done = terminated or truncated
            if done:
                break
        assert done
        rewards.append(reward)
    return float(np.mean(rewards))


@pytest.mark.parametrize(
    "make",
    [
        lambda: gym.make(LIBRARY),
        lambda: gym.make(RETAIL),
        lambda: robust(gym.make(LIBRARY), seed=1),
    ],
)
def test_sb3_check_env_passes(make):
    check_env(CandidateActionEnv(make()), warn=True)


@pytest.mark.parametrize("env_id", [LIBRARY, RETAIL, CAPABILITY])
def test_candidates_always_contain_a_solution_path(env_id):
    env = CandidateActionEnv(gym.make(env_id))
    assert follow_the_plan(env, range(5)) == 1.0


def test_candidates_hide_what_the_conversation_has_not_shown():
    env = CandidateActionEnv(gym.make(LIBRARY))
    env.reset(seed=3)
    target = env.env.unwrapped.target
    for candidate in env.current:
        if candidate.from_oracle:  # before any lookup, no oracle call may carry the hidden ids
            assert target["member_id"] not in candidate.text and target["book_id"] not in candidate.text


def test_slots_are_fixed_size_and_deterministic():
    a, b = CandidateActionEnv(gym.make(LIBRARY)), CandidateActionEnv(gym.make(LIBRARY))
    obs_a, _ = a.reset(seed=7)
    obs_b, _ = b.reset(seed=7)
    assert np.array_equal(obs_a, obs_b) and len(a.candidate_actions()) == a.action_space.n
    for action in (3, 0, 5):
        assert np.array_equal(a.step(action)[0], b.step(action)[0])
    with pytest.raises(ValueError, match="action must be an int"):
        a.step(a.action_space.n)


@pytest.fixture
def one_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny MLP: intra-op threads only contend with the other processes
    yield
    torch.set_num_threads(threads)


def test_ppo_trains_and_predicts(tmp_path, one_thread):
    env = CandidateActionEnv(gym.make(LIBRARY))
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(128)
    model.save(tmp_path / "ppo")
    loaded = PPO.load(tmp_path / "ppo", device="cpu")
    obs, _ = env.reset(seed=1)
    action, _ = loaded.predict(obs, deterministic=True)
    assert env.action_space.contains(action)


@pytest.mark.slow
def test_ppo_beats_random_on_a_capability_env(one_thread):
    """A step-2 capability env (exact tool arguments). The figures of docs/interop.md come from this setup
    (benchmark-style: 8 to 12 minutes on a loaded 2-core machine)."""
    from stable_baselines3.common.env_util import make_vec_env

    env_id = newest("retail-precise-arguments")
    seeds = range(
        10_000, 10_100
    )  # evaluation seeds, never trained on (training draws seeds from its own rng)
    rng = np.random.default_rng(0)
    random_score = play(
        CandidateActionEnv(gym.make(env_id)), lambda o, e: int(rng.integers(e.action_space.n)), seeds
    )
    venv = make_vec_env(lambda: CandidateActionEnv(gym.make(env_id)), n_envs=8, seed=0)
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=64,
        batch_size=128,
        n_epochs=10,
        gamma=0.95,
        learning_rate=1e-3,
        ent_coef=0.01,
        seed=0,
        device="cpu",
    )
    model.learn(30_000)
    ppo_score = play(
        CandidateActionEnv(gym.make(env_id)), lambda o, e: int(model.predict(o, deterministic=True)[0]), seeds
    )
    print(f"PPO {ppo_score:.2f} vs random {random_score:.2f} on {env_id} (100 held-out seeds)")
    assert ppo_score >= random_score + 0.3 and ppo_score >= 3 * random_score
