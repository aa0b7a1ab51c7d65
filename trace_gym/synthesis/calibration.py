"""``trace calibrate``: pick the difficulty level at which the real policy learns the most.

For each difficulty level, G samples (one group) on each of S train seeds, at the sampling temperature. Per
level: mean reward, success (reward 1.0), pass@k (unbiased estimator, k = 1..G), and the shares of groups
that are all-success, all-zero and informative (rewards not all equal; the only groups that carry a GRPO
signal). TRACE's bands: mean reward and success in [0.2, 0.6], informative groups >= 50%. The chosen level is
the one closest to the bands (distance 0 when inside; ties go to the lower level), and it is written into
the env's ``spec.json`` so that the registered id (and so training) uses it.

The statistics are plain functions of the reward groups (:func:`level_stats`, :func:`choose_level`), so
they are tested without a model; ``trace calibrate`` gathers the groups with the real policy.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym


@dataclass(frozen=True)
class Bands:
    low: float = 0.2
    high: float = 0.6
    informative: float = 0.5

    def distance(self, stats: LevelStats) -> float:
        def outside(value: float) -> float:
            return max(0.0, self.low - value, value - self.high)

        return (
            outside(stats.mean_reward)
            + outside(stats.success)
            + max(0.0, self.informative - stats.informative_share)
        )


@dataclass(frozen=True)
class LevelStats:
    level: int
    groups: int
    group_size: int
    mean_reward: float
    success: float
    pass_at_k: dict[str, float]
    all_success_share: float
    all_zero_share: float
    informative_share: float
    mean_turns: float | None = None
    oracle_ceiling: float | None = (
        None  # share of the measured tasks whose oracle fits the caps (None: unknown)
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one group: n samples, c successes (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def level_stats(
    level: int, groups: Sequence[Sequence[float]], turns: Sequence[int] | None = None
) -> LevelStats:
    """Statistics of one level from its reward groups (one group per seed, G rewards each)."""
    if not groups or any(len(g) != len(groups[0]) or not g for g in groups):
        raise ValueError("calibration needs at least one group, all of the same non-zero size")
    size = len(groups[0])
    rewards = [r for g in groups for r in g]
    successes = [sum(r >= 1.0 for r in g) for g in groups]
    return LevelStats(
        level=level,
        groups=len(groups),
        group_size=size,
        mean_reward=sum(rewards) / len(rewards),
        success=sum(successes) / len(rewards),
        pass_at_k={
            str(k): sum(pass_at_k(size, c, k) for c in successes) / len(groups) for k in range(1, size + 1)
        },
        all_success_share=sum(all(r >= 1.0 for r in g) for g in groups) / len(groups),
        all_zero_share=sum(all(r == 0.0 for r in g) for g in groups) / len(groups),
        informative_share=sum(len(set(g)) > 1 for g in groups) / len(groups),
        mean_turns=(sum(turns) / len(turns)) if turns else None,
    )


def choose_level(stats: Sequence[LevelStats], bands: Bands = Bands()) -> LevelStats:
    """The level closest to the bands; the lower level on ties."""
    return min(stats, key=lambda s: (bands.distance(s), s.level))


@dataclass
class Calibration:
    env_id: str
    model: str
    seeds: int
    group_size: int
    bands: Bands
    levels: list[LevelStats]
    chosen: LevelStats
    prompt_tokens: int | None = None

    def to_spec(self) -> dict[str, Any]:
        """The ``calibration`` block of ``spec.json``."""
        return {
            "model": self.model,
            "level": self.chosen.level,
            "groups": self.group_size,
            "seeds": self.seeds,
            "prompt_tokens": self.prompt_tokens,
            "bands": asdict(self.bands),
            "levels": [
                {**asdict(s), "distance": round(self.bands.distance(s), 4)} | _rounded(asdict(s))
                for s in self.levels
            ],
        }


def _rounded(values: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in values.items():
        if isinstance(value, float):
            out[key] = round(value, 4)
        elif isinstance(value, dict):
            out[key] = {k: round(v, 4) for k, v in value.items()}
    return out


def spec_path(env_id: str) -> Path | None:
    """The ``spec.json`` next to a registered env's module (synthesised envs have one), or None."""
    entry = gym.spec(env_id).entry_point
    if not isinstance(entry, str):
        return None
    module = entry.split(":")[0]
    found = importlib.util.find_spec(module)
    if found is None or found.origin is None:
        return None
    path = Path(found.origin).with_name("spec.json")
    return path if path.exists() else None


def write_calibration(path: Path, calibration: Calibration) -> dict[str, Any]:
    """Put the calibration block and the chosen default level into ``spec.json`` (validated)."""
    from trace_gym.synthesis.emit import dump_json, validate_spec

    spec = json.loads(path.read_text())
    spec["calibration"] = calibration.to_spec()
    spec["difficulty"]["default"] = calibration.chosen.level
    validate_spec(spec, str(path))
    path.write_text(dump_json(spec))
    return spec
