"""Which seeds and splits a command may touch: the one owner of that decision and of its refusal messages.

trace envs (``supports_splits = True``) take a split-relative seed plus ``options={"split": ...}`` and map it into
the split's own seed range (:func:`trace_gym.core.env.split_seed`; content splits in :mod:`trace_gym.core.splits`).
Third-party envs ignore ``options["split"]``; for them disjoint seed ranges keep test instances out of training:
train seeds from :data:`TRAIN_SEED_BASE`, test seeds from :data:`TEST_SEED_BASE`.

Who may touch what:

* evaluation (``trace evaluate``, the pipeline's evaluation stage): either split, :func:`reset_seed`;
* training (sft, train, warm start, calibration, gate data): the train split only, every seed through
  :func:`train_reset_seed` / :func:`check_train_tasks` / :func:`train_seeds` (:class:`TrainSeedError`);
* analysis (``trace rollout``, ``trace analyze``, synthesis examples): the train split only,
  :func:`refuse_test_split` and :func:`refuse_test_records` (:class:`SplitRefusedError`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gymnasium as gym

from trace_gym.core.env import SPLITS

TRAIN_SEED_BASE = 0
TEST_SEED_BASE = 1_000_000_000


class SplitRefusedError(ValueError):
    """A command was asked for data of a split it may not touch (anything but evaluation: the test split)."""


class TrainSeedError(SplitRefusedError):
    """A training command asked for a seed outside the train split (it could reach evaluation seeds)."""


class TestSeedError(SplitRefusedError):
    """A training-side pipeline stage was asked to use test-split data."""

    __test__ = False  # not a pytest test class


def honours_splits(env: gym.Env) -> bool:
    """True for envs that implement the trace contract's ``options={"split": ...}`` (seed = index in split).

    Such envs say so with a class attribute ``supports_splits = True`` (``ChatToolEnv``, ``ReasoningGymEnv``
    and their subclasses inherit it).
    """
    return bool(getattr(env.unwrapped, "supports_splits", False))


def reset_seed(split: str, index: int, env: gym.Env | None = None) -> int:
    """The reset seed of the ``index``-th task of ``split`` for ``env`` (split-relative for envs that honour
    splits, else from a disjoint range per split). A train seed always goes through :func:`train_reset_seed`."""
    if split == "train" and env is not None:
        return train_reset_seed(index, env)
    if env is not None and honours_splits(env):
        return index
    return (TEST_SEED_BASE if split == "test" else TRAIN_SEED_BASE) + index


def train_reset_seed(index: int, env: gym.Env) -> int:
    """The reset seed of the ``index``-th *training* task of ``env``: the one guard every training command goes
    through, so that no training command can reach a test seed.

    Envs that honour splits are reset with ``options={"split": "train"}`` and a split-relative index, which must
    lie inside the train split; other envs get ``TRAIN_SEED_BASE + index``, which must stay below
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


def train_seeds(stage: str, env: gym.Env | str, offset: int, count: int) -> range:
    """Reset seeds of ``count`` train-split tasks of ``env`` (an env or a registered id) from ``offset``, for
    pipeline stage ``stage``.

    Checked on the range's ends (seeds are affine in the task index), so even an absurd count is refused at
    once, before any model is loaded: a :class:`TestSeedError` naming the stage.
    """
    if isinstance(env, str):
        from trace_gym.registration import make_env

        made = make_env(env)
        try:
            return train_seeds(stage, made, offset, count)
        finally:
            made.close()
    try:
        first = train_reset_seed(offset, env)
        last = train_reset_seed(offset + max(count, 1) - 1, env)
    except TrainSeedError as err:
        raise TestSeedError(f"stage {stage}: {err}") from err
    return range(first, last + 1)


def refuse_test_split(split: str, what: str = "trace rollout") -> None:
    """Analysis commands look at the train split only: raise :class:`SplitRefusedError` for anything else."""
    if split != "train":
        raise SplitRefusedError(
            f"{what} works on the train split only, got split={split!r}: capability analysis must never "
            "see test-split tasks (they are the held-out evaluation set of the trained agent)"
        )


def refuse_test_records(where: str, records: Iterable[dict[str, Any]]) -> None:
    """Trajectory records used for analysis or as examples must all come from the train split."""
    for record in records:
        if record.get("split", "train") != "train":
            line = f":{record['_line']}" if "_line" in record else ""
            raise TestSeedError(
                f"{where}{line}: a trajectory of seed {record.get('seed')} comes from the "
                f"{record.get('split')!r} split; analysis never looks at test-split tasks (only train-split "
                "trajectories may be analysed or used as examples)"
            )
