"""Fixtures of the BFCL target tests: the env, seeds by task id, and playing actions to the end."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gymnasium as gym
import pytest

pytest.importorskip("bfcl_eval", reason="the BFCL target needs bfcl-eval (pip install --no-deps bfcl-eval)")

from trace_gym.targets.bfcl.env import BfclMultiTurnEnv  # noqa: E402 - after the skip


@pytest.fixture
def env() -> BfclMultiTurnEnv:
    made = gym.make("trace/bfcl-multi-turn-v0")
    yield made.unwrapped
    made.close()


def reset_to(env: BfclMultiTurnEnv, task_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Reset ``env`` to the seed whose task is ``task_id``."""
    for split in ("train", "test"):
        ids = env.split_tasks(split)
        if task_id in ids:
            return env.reset(seed=ids.index(task_id), options={"split": split})
    raise KeyError(task_id)


def play(env: BfclMultiTurnEnv, actions: Iterable[Any]) -> tuple[float, dict[str, Any], bool, bool]:
    """Step through ``actions`` until the episode ends; returns reward, last info, terminated, truncated."""
    reward, info, terminated, truncated = 0.0, {}, False, False
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return reward, info, terminated, truncated
