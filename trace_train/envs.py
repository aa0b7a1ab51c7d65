"""Making environments from any Gymnasium id, and the seed/split conventions of training and evaluation."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import gymnasium as gym

# trace envs take a split-relative seed plus options["split"] and map it into the split's own seed range.
# Third-party envs ignore options["split"]; for them disjoint seed ranges keep test instances out of training.
TRAIN_SEED_BASE = 0
TEST_SEED_BASE = 1_000_000_000


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` for ``ns/name-vN`` and ``module:ns/name-vN``; trace's own envs are registered first."""
    with contextlib.suppress(ImportError):
        importlib.import_module("trace_gym")
    # Environments run for as many turns as the trainer allows; drop the default step cap checks/wrappers
    # that would reject text actions.
    return gym.make(env_id, disable_env_checker=True, **kwargs)


def honours_splits(env: gym.Env) -> bool:
    """True for envs that implement the trace contract's ``options={"split": ...}`` (seed = index in split).

    Such envs say so with a class attribute ``supports_splits = True`` (``ChatToolEnv``, ``ReasoningGymEnv``
    and their subclasses inherit it).
    """
    return bool(getattr(env.unwrapped, "supports_splits", False))


def reset_seed(split: str, index: int, env: gym.Env | None = None) -> int:
    """The reset seed of the ``index``-th task of ``split`` for ``env`` (split-relative for envs that honour
    splits, else from a disjoint range per split). Not :func:`trace_gym.core.env.split_seed`, which maps a
    split-relative seed into the split's own seed range inside the env."""
    if env is not None and honours_splits(env):
        return index
    return (TEST_SEED_BASE if split == "test" else TRAIN_SEED_BASE) + index


def tools_of(env: gym.Env, info: dict[str, Any]) -> list[dict[str, Any]]:
    tools = info.get("tools")
    if tools is None:
        tools = getattr(env.unwrapped, "tools", None)
    return list(tools or [])
