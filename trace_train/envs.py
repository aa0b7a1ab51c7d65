"""Making environments from any Gymnasium id, and the seed/split conventions of training and evaluation."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import gymnasium as gym

from trace_gym.core.env import SPLITS

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
    if split == "train" and env is not None:
        return train_reset_seed(index, env)  # the training guard, whoever asks for a train seed
    if env is not None and honours_splits(env):
        return index
    return (TEST_SEED_BASE if split == "test" else TRAIN_SEED_BASE) + index


class TrainSeedError(ValueError):
    """A training command asked for a seed outside the train split (it could reach evaluation seeds)."""


def train_reset_seed(index: int, env: gym.Env) -> int:
    """The reset seed of the ``index``-th *training* task of ``env``: the one guard every training command
    (sft, train, demo, ...) goes through, so that no training command can reach a test seed.

    Envs that honour splits are reset with ``options={"split": "train"}`` and a split-relative index, which
    must lie inside the train split; other envs get ``TRAIN_SEED_BASE + index``, which must stay below
    ``TEST_SEED_BASE`` (where ``trace evaluate --split test`` starts). Anything else is a :class:`TrainSeedError`.
    """
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise TrainSeedError(f"training task index must be a non-negative int, got {index!r}")
    name = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    if honours_splits(env):
        size = SPLITS["train"][1]
        if index >= size:
            raise TrainSeedError(
                f"training task {index} is outside the train split of {name} (tasks 0..{size - 1}); "
                "lower --seed-offset / the number of tasks"
            )
        return index
    seed = TRAIN_SEED_BASE + index
    if seed >= TEST_SEED_BASE:
        raise TrainSeedError(
            f"training seed {seed} of {name} would reach its evaluation seeds ({TEST_SEED_BASE} and up: the env "
            "has no split support, so seeds are the only separation); lower --seed-offset / the number of tasks"
        )
    return seed


def check_train_tasks(env: gym.Env, first: int, count: int) -> None:
    """Refuse, before any work is done, a run whose training tasks ``first..first+count-1`` leave the train
    split (see :func:`train_reset_seed`)."""
    train_reset_seed(first, env)
    if count > 0:
        train_reset_seed(first + count - 1, env)


def tools_of(env: gym.Env, info: dict[str, Any]) -> list[dict[str, Any]]:
    tools = info.get("tools")
    if tools is None:
        tools = getattr(env.unwrapped, "tools", None)
    return list(tools or [])
