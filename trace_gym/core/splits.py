"""Content-level train/test splits: a test instance never occurs in the train split, for every seed.

A seed split is not a content split: two seeds can draw the same question (one-digit sums repeat after a few
hundred seeds), so disjoint seed ranges alone leave test questions in the training data. Here every instance
is assigned to a split by a hash of its canonical *task key* (what makes two instances the same task, e.g.
the arithmetic expression without the question's wording), and ``reset`` redraws, deterministically from
the env's ``np_random``, until the instance belongs to the requested split. So:

* isolation holds for *all* seeds, not a sampled range: a key hashes to exactly one split;
* same seed, same instance, byte for byte (the redraws come from the seeded generator);
* the test share of the task space is :data:`TEST_SHARE` (20%) unless the env says otherwise; a test reset
  takes 1 / share draws on average, a train reset 1 / (1 - share).

An env opts in with two class-level declarations ::

    class MyEnv(ChatToolEnv):
        content_split = True          # reset() keeps only instances whose key hashes to the split
        def task_key(self) -> str:    # default: render_instance()
            return canonical_json(self.episode.instance["goal"])

A task family whose key space is tiny still splits correctly, but its test split then holds few distinct
tasks (``trace/rg-arith1-v2``: about 40); :func:`split_overlap` and ``trace check`` report the figures.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

TEST_SHARE = 0.2
SALT = "trace-content-split-v1"  # changing it reshuffles every split: bump the env versions with it
MAX_DRAWS = 10_000


class SplitExhaustedError(RuntimeError):
    """No instance of the requested split within the draw limit (the task family is too small to split)."""


def split_of_key(key: str, test_share: float = TEST_SHARE) -> str:
    """``"test"`` for a ``test_share`` fraction of all keys (by a salted SHA-256 of the key), else ``"train"``."""
    if not 0.0 < test_share < 1.0:
        raise ValueError(f"test_share must be in (0, 1), got {test_share!r}")
    digest = hashlib.sha256(f"{SALT}\x00{key}".encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") < test_share * 2**64 else "train"


def draw_in_split(
    draw: Callable[[], T],
    key: Callable[[T], str],
    split: str,
    test_share: float = TEST_SHARE,
    max_draws: int = MAX_DRAWS,
) -> tuple[T, int]:
    """Call ``draw()`` until ``key(instance)`` belongs to ``split``; returns the instance and the draws taken.

    ``draw`` must take its randomness from the env's seeded generator, so the result is a function of the seed.
    """
    if split not in ("train", "test"):
        raise ValueError(f"unknown split {split!r}; known: ['test', 'train']")
    for n in range(1, max_draws + 1):
        instance = draw()
        if split_of_key(key(instance), test_share) == split:
            return instance, n
    raise SplitExhaustedError(
        f"no {split!r} instance in {max_draws} draws: the task family has too few distinct tasks to split by "
        f"content (test share {test_share})"
    )


@dataclass(frozen=True)
class SplitOverlap:
    """Distinct task keys of each split over the sampled seeds, and the test keys also seen in train."""

    train_keys: int
    test_keys: int
    test_instances: int
    overlapping_keys: int
    overlapping_instances: int  # test instances (with repeats) whose key occurs among the train ones

    @property
    def figure(self) -> str:
        return (
            f"{self.overlapping_instances}/{self.test_instances} test instances in train "
            f"({self.overlapping_keys} of {self.test_keys} distinct test keys; {self.train_keys} train keys)"
        )


def split_overlap(train_keys: Iterable[str], test_keys: Iterable[str]) -> SplitOverlap:
    """Overlap of the task keys of two samples (e.g. keys of train seeds 0..N-1 and test seeds 0..M-1)."""
    train = set(train_keys)
    test = list(test_keys)
    shared = set(test) & train
    return SplitOverlap(
        train_keys=len(train),
        test_keys=len(set(test)),
        test_instances=len(test),
        overlapping_keys=len(shared),
        overlapping_instances=sum(k in shared for k in test),
    )
