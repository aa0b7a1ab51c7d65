"""``stop_when_decided`` on BFCL: an episode ends at the first user turn whose check fails, scored 0 as the full
episode is, BFCL's own checker agreeing; the ground truth is never stopped."""

from __future__ import annotations

import gymnasium as gym

from tests.bfcl.conftest import play
from tests.bfcl.parity import KINDS, actions, ground_truth, perturbed

TASKS = range(0, 160, 8)  # train seeds across the categories


def _turns_played(env_id_kwargs: dict, seed: int, kind: str) -> tuple[float, int, dict]:
    env = gym.make("trace/bfcl-multi-turn-v0", **env_id_kwargs).unwrapped
    env.reset(seed=seed, options={"split": "train"})
    turns = perturbed(ground_truth(env), kind)
    env.reset(seed=seed, options={"split": "train"})
    reward, info, _, _ = play(env, actions(turns))
    played = env.turn
    env.close()
    return reward, played, info


def test_a_stopped_episode_scores_what_the_full_one_scores():
    saved = stopped_episodes = 0
    for seed in TASKS:
        for kind in KINDS:
            full = _turns_played({}, seed, kind)
            stopped = _turns_played({"stop_when_decided": True}, seed, kind)
            assert stopped[0] == full[0], (seed, kind)
            assert stopped[1] <= full[1]
            if "decided" in stopped[2]:
                assert stopped[0] == 0.0 and stopped[2]["decided"]["violation"].startswith("user turn ")
                stopped_episodes += 1
            saved += full[1] - stopped[1]
            if kind == "ground_truth":
                assert "decided" not in stopped[2] and stopped[0] == 1.0
    assert stopped_episodes > 0 and saved > 0  # the stop fires (a planted no-op stop fails here)
