"""What emission reads from a target that is a source of derived capability envs (docs/derived.md).

A target is a source when it implements the capability-env protocol (:data:`PROTOCOL`); the capabilities it
declares are its ``capabilities`` attribute where it has one (BFCL), else every capability its train tasks
exercise within the scanned window (retail: ``task_capabilities()`` of train seeds ``0..window-1``). The
facts a spec and a card state (tools, sources per split, the example episode) are read here, by running the
target and :class:`~trace_gym.derived.env.DerivedCapabilityEnv`; all of it is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import gymnasium as gym

from trace_gym.core.env import render_conversation
from trace_gym.derived.env import DerivedCapabilityEnv
from trace_gym.derived.levels import BACK_OFF
from trace_gym.derived.pool import DEFAULT_WINDOW, SOURCE_SPLIT, sources
from trace_gym.worlds.world import canonical_json

PROTOCOL = ("task_capabilities", "decision_points")
EXAMPLE_SEED = 0  # the card's example: this train seed of the derived env, at its default level


def kwargs_key(target_kwargs: dict[str, Any]) -> str:
    """A hashable, canonical form of target kwargs (for the caches)."""
    return canonical_json(target_kwargs)


@cache
def _target(target_id: str, key: str) -> Any:
    import json

    return gym.make(target_id, disable_env_checker=True, **json.loads(key)).unwrapped


def make_target(target_id: str, target_kwargs: dict[str, Any]) -> Any:
    """One cached, unwrapped instance of the target (read-only use: its attributes and tools)."""
    return _target(target_id, kwargs_key(target_kwargs))


def implements_protocol(target: Any) -> bool:
    return all(callable(getattr(target, name, None)) for name in PROTOCOL)


@cache
def _declared(target_id: str, key: str, window: int) -> tuple[str, ...]:
    target = _target(target_id, key)
    known = getattr(target, "capabilities", None)
    if known:
        return tuple(known)
    seen: dict[str, None] = {}  # first appearance order: deterministic
    for seed in range(window):
        target.reset(seed=seed, options={"split": SOURCE_SPLIT})
        seen.update(dict.fromkeys(target.task_capabilities()))
    return tuple(seen)


def declared_capabilities(
    target_id: str, target_kwargs: dict[str, Any], window: int = DEFAULT_WINDOW
) -> tuple[str, ...]:
    """The capabilities a protocol target declares (its ``capabilities``, else those its train tasks exercise)."""
    return _declared(target_id, kwargs_key(target_kwargs), window)


def capability_description(target: Any, capability: str) -> str:
    """The target's own description of the capability, else the general one (trace_gym.analysis)."""
    from trace_gym.analysis.capabilities import describe

    own = getattr(target, "capability_descriptions", None) or {}
    return own.get(capability) or describe(capability) or capability


def level_texts() -> dict[str, str]:
    """The start-depth ladder of :mod:`trace_gym.derived.levels`, one line per level."""
    texts = {}
    for level, back in BACK_OFF.items():
        if back is None:
            text = "the whole target task: no prefix, the agent starts at the beginning"
        elif back == 0:
            text = "at the decision point: the target oracle's actions before it are replayed"
        else:
            text = f"{back} target-oracle actions before the decision point (the ones before those replayed)"
        texts[str(level)] = text
    return texts


def source_counts(target_id: str, target_kwargs: dict[str, Any], capability: str) -> dict[str, int]:
    """How many (task, decision point) sources each split of the derived env draws from (raises
    :class:`~trace_gym.derived.pool.NoSourceTaskError` when a split has none)."""
    hashable = {
        k: tuple(v) if isinstance(v, list) else v for k, v in target_kwargs.items()
    }  # as the env does
    pool = sources(target_id, hashable, capability, DEFAULT_WINDOW)
    return {"window": DEFAULT_WINDOW, "train": len(pool["train"]), "test": len(pool["test"])}


@dataclass(frozen=True)
class Example:
    """The card's example: the derived env at ``level`` on train seed 0, then the target oracle's continuation."""

    level: int
    source: dict[str, Any]
    system_chars: int
    prefix: str  # the conversation the env starts with, system prompt left out
    continuation: str  # what the oracle's continuation adds
    reward: float
    milestones: float
    tools_offered: int  # at reset


def example_episode(
    target_id: str, target_kwargs: dict[str, Any], capability: str, level: int, seed: int = EXAMPLE_SEED
) -> Example:
    env = DerivedCapabilityEnv(target_id, capability, target_kwargs, difficulty=level)
    try:
        obs, info = env.reset(seed=seed, options={"split": "train"})
        start, offered = info["prefix_messages"], len(info.get("tools") or env.tools)
        reward, components = 0.0, {}
        for action in env.oracle_actions():
            obs, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                components = info.get("reward_components", {})
                break
        return Example(
            level=level,
            source=env.source_info(),
            system_chars=len(obs[0]["content"]),
            prefix=render_conversation(obs[1:start]) if start > 1 else "",
            continuation=render_conversation(obs[start:]),
            reward=float(reward),
            milestones=float(components.get(env.shaped_reward_key, 0.0)),
            tools_offered=offered,
        )
    finally:
        env.close()


def python_literal(value: Any) -> str:
    """A JSON-like value as Python source (``None``/``True`` spelled the Python way), sorted keys."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {python_literal(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    return repr(value)
