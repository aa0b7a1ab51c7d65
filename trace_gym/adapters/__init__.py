"""Adapters that turn third-party task collections into trace-style Gymnasium envs.

``reasoning_gym``: single-turn procedural datasets of the ``reasoning-gym`` package (imported lazily, only when
an env is made), registered as ``trace/rg-<dataset>-v0``.
"""

from trace_gym.adapters.reasoning_gym import (
    CURATED_DATASETS,
    ReasoningGymEnv,
    make_reasoning_gym_env,
    reasoning_gym_available,
    register_reasoning_gym_envs,
)

__all__ = [
    "CURATED_DATASETS",
    "ReasoningGymEnv",
    "make_reasoning_gym_env",
    "reasoning_gym_available",
    "register_reasoning_gym_envs",
]
