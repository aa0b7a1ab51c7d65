"""The scripted user on paraphrase sets (tests/retail/wordings.py): for each family, the oracle with that
family's message reworded must succeed at >= 0.9 of the oracle's rate, on the tuning half and on the held-out
half and on every fresh round. ``python -m tests.retail.test_wordings [HALF ...]`` prints the table (a
round measured once is printed, not tuned on). Slow-marked: ``pytest -m slow tests/retail/test_wordings.py``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from tests.retail.conftest import play
from tests.retail.wordings import (
    FAMILIES,
    FRESH,
    FRESH_3,
    FRESH_4,
    FRESH_5,
    FRESH_6,
    FRESH_7,
    FRESH_8,
    FRESH_9,
    FRESH_10,
    FRESH_11,
    FRESH_12,
    Family,
    Wording,
)
from trace_gym.targets.retail.tasks import say

SEEDS_PER_FAMILY = 12
SEARCH = range(600)
ROUNDS = {
    "fresh": FRESH,
    "fresh_3": FRESH_3,
    "fresh_4": FRESH_4,
    "fresh_5": FRESH_5,
    "fresh_6": FRESH_6,
    "fresh_7": FRESH_7,
    "fresh_8": FRESH_8,
    "fresh_9": FRESH_9,
    "fresh_10": FRESH_10,
    "fresh_11": FRESH_11,
    "fresh_12": FRESH_12,
}
HALVES = ("tune", "held_out", *ROUNDS)


def _episodes(env, family: Family) -> list[tuple[int, int]]:
    """(seed, difficulty) of train instances whose oracle says a message of the family."""
    found = []
    for difficulty in (2, 3):
        for seed in SEARCH:
            env.reset(seed=seed, options={"split": "train", "difficulty": difficulty})
            if any(family.pattern.search(a.get("content") or "") for a in env.oracle_actions()):
                found.append((seed, difficulty))
                if len(found) >= SEEDS_PER_FAMILY * difficulty // 2:
                    break
    return found


def _reworded(actions: list[dict[str, Any]], family: Family, wording: Wording) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for action in actions:
        match = None if action.get("tool_calls") else family.pattern.search(action.get("content") or "")
        if match is None:
            out.append(action)
            continue
        said = wording(match)
        out += [say(text) for text in ([said] if isinstance(said, str) else said)]
    return out


def success_rate(family: Family, wordings: tuple[Wording, ...]) -> tuple[float, float, int]:
    """(oracle success, reworded success, episodes per wording) over the family's episodes."""
    env = gym.make("trace/retail-v2").unwrapped
    episodes = _episodes(env, family)
    oracle = reworded = 0
    for seed, difficulty in episodes:
        env.reset(seed=seed, options={"split": "train", "difficulty": difficulty})
        oracle += play(env, env.oracle_actions())[0] == 1.0
        for wording in wordings:
            env.reset(seed=seed, options={"split": "train", "difficulty": difficulty})
            reworded += play(env, _reworded(env.oracle_actions(), family, wording))[0] == 1.0
    n = len(episodes)
    return oracle / n, reworded / (n * len(wordings)), n


def _wordings(family: Family, half: str) -> tuple[Wording, ...]:
    if half in ROUNDS:
        return ROUNDS[half][family.name]
    return getattr(family, half)


@pytest.mark.slow  # about 4 s per (family, half), 5 minutes in all; the reader's classes: test_reading.py
@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_reworded_family_succeeds_like_the_oracle(family: Family, half: str):
    oracle, reworded, n = success_rate(family, _wordings(family, half))
    assert n >= 6 and oracle == 1.0
    assert reworded >= 0.9 * oracle, (family.name, half, reworded)


if __name__ == "__main__":
    import sys

    for family in FAMILIES:
        for half in sys.argv[1:] or HALVES:
            oracle, reworded, n = success_rate(family, _wordings(family, half))
            print(
                f"{family.name:14s} {half:9s} episodes {n:3d}  oracle {oracle:.2f}  reworded {reworded:.2f}"
            )
