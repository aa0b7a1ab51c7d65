"""Test-seed isolation, asserted in code: no stage but evaluation may touch the target's test split.

Every stage that resets an env (warm start, rollouts, calibration, training, gate data) declares the split and
seeds it is about to use and calls :func:`refuse_test_seeds` first; stages that read trajectories (analysis,
synthesis examples) call :func:`refuse_test_records`. For envs that honour ``options["split"]`` the split
decides; for third-party envs without split support a seed in the test range (``TEST_SEED_BASE`` and up,
where ``trace evaluate --split test`` draws) is refused too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trace_train.envs import TEST_SEED_BASE


class TestSeedError(RuntimeError):
    """A training-side stage was asked to use test-split data."""

    __test__ = False  # not a pytest test class


def refuse_test_seeds(
    stage: str, env_id: str, split: str, seeds: Iterable[int], honours_splits: bool
) -> None:
    if split != "train":
        raise TestSeedError(f"stage {stage} may only use the train split of {env_id}, not {split!r}")
    if honours_splits:
        return
    bad = [s for s in seeds if s >= TEST_SEED_BASE]
    if bad:
        raise TestSeedError(
            f"stage {stage}: seed {bad[0]} of {env_id} lies in the test range (>= {TEST_SEED_BASE}), "
            f"which only evaluation may use; lower the seed offset"
        )


def refuse_test_records(stage: str, records: Iterable[dict[str, Any]]) -> None:
    for rec in records:
        if rec.get("split", "train") != "train":
            raise TestSeedError(
                f"stage {stage}: a trajectory of seed {rec.get('seed')} comes from the {rec.get('split')!r} "
                "split; only train-split trajectories may be analysed or used as examples"
            )


def env_honours_splits(env_id: str) -> bool:
    from trace_train.envs import honours_splits, make_env

    env = make_env(env_id)
    try:
        return honours_splits(env)
    finally:
        env.close()
