"""Making environments from any Gymnasium id, and the seed/split conventions of training and evaluation."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import gymnasium as gym

# Third-party envs may ignore options["split"]; disjoint seed ranges keep test instances out of training anyway.
TRAIN_SEED_BASE = 0
TEST_SEED_BASE = 1_000_000_000


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` for ``ns/name-vN`` and ``module:ns/name-vN``; trace's own envs are registered first."""
    with contextlib.suppress(ImportError):
        importlib.import_module("trace_gym")
    # Environments run for as many turns as the trainer allows; drop the default step cap checks/wrappers
    # that would reject text actions.
    return gym.make(env_id, disable_env_checker=True, **kwargs)


def split_seed(split: str, index: int) -> int:
    return (TEST_SEED_BASE if split == "test" else TRAIN_SEED_BASE) + index


def tools_of(env: gym.Env, info: dict[str, Any]) -> list[dict[str, Any]]:
    tools = info.get("tools")
    if tools is None:
        tools = getattr(env.unwrapped, "tools", None)
    return list(tools or [])
