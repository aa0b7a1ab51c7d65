"""An example of a generated env built on its target, as the LLM generation agent must write one (issue 26), and
a test fixture.

Product lookup on ``trace/retail-v2``: the target's own train tasks whose oracle reads a product
(``get_product_details``), started at the oracle's first such read. The agent meets the target itself: its
system prompt, all of its tools, its user simulator and its verifier, unchanged (``trace check`` compares them,
:mod:`trace_gym.core.conformity`). What a generated env writes is only which target tasks exercise the
capability and where (:func:`decision_points`); the rest is this module's plumbing. Allowed imports only, so it
passes the static check and ``trace check`` in the sandbox.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym

from trace_gym.core.env import SPLITS, reset_options, split_of_seed, split_seed
from trace_gym.core.splits import split_of_key
from trace_gym.worlds.world import canonical_json

TARGET = "trace/retail-v2"
CAPABILITY = "product-lookup"
WINDOW = 120  # target train seeds scanned for sources
SOURCES: dict[str, dict[str, list[tuple[int, int, str]]]] = {}  # one scan per process


def called(action: Any) -> list[str]:
    calls = (action.get("tool_calls") or []) if isinstance(action, dict) else []
    return [str(call["function"]["name"]) for call in calls]


def decision_points(target: Any) -> list[int]:
    """Where the capability is exercised in the target's current task: indexes into its oracle's actions."""
    return [i for i, action in enumerate(target.oracle_actions()) if "get_product_details" in called(action)]


def sources(target: Any) -> dict[str, list[tuple[int, int, str]]]:
    """(target train seed, first decision point, task key) per split; the env's own splits are a content split
    of the target's train split (by the target's task key), so the target's test tasks are never used."""
    if CAPABILITY not in SOURCES:
        found: dict[str, list[tuple[int, int, str]]] = {"train": [], "test": []}
        for seed in range(WINDOW):
            target.reset(seed=seed, options={"split": "train"})
            points = decision_points(target)
            if points:
                key = target.task_key()
                found[split_of_key(f"{CAPABILITY}\x00{key}")].append((seed, points[0], key))
        SOURCES[CAPABILITY] = found
    return SOURCES[CAPABILITY]


class ProductLookupV0(gym.Env):
    """The target restricted to train tasks whose oracle reads a product, started at that read.

    Observation space, action space, tools, system prompt, user simulator and verifier: the target's own
    (``target_id``). ``info["source"]`` names the target task (seed, split, the oracle actions replayed).
    Reward: the target's verdict on the whole episode, prefix included.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}
    target_id: ClassVar[str] = TARGET
    capability: ClassVar[str] = CAPABILITY
    description: ClassVar[str] = "Read the product a retail request needs before acting on it."
    supports_splits: ClassVar[bool] = True
    content_split: ClassVar[bool] = True
    difficulty_levels: ClassVar[tuple[int, ...]] = (1,)
    default_difficulty: ClassVar[int] = 1
    ablatable_capabilities: ClassVar[tuple[str, ...]] = ()

    def __init__(self, render_mode: str | None = None, difficulty: int | None = None):
        self.render_mode = render_mode
        self.difficulty = 1
        self.target = gym.make(TARGET, disable_env_checker=True, render_mode=render_mode).unwrapped
        self.observation_space = self.target.observation_space
        self.action_space = self.target.action_space
        self.source: tuple[int, int, str] | None = None
        self.continuation: list[Any] = []

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.target.tools

    @property
    def domain_tools(self) -> list[Any]:
        return self.target.domain_tools

    @property
    def world(self) -> Any:
        return self.target.world

    @property
    def max_turns(self) -> int:
        return self.target.max_turns

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        options = reset_options(options)
        absolute = split_seed(seed, options.get("split"))
        super().reset(seed=absolute)
        split = options.get("split") or split_of_seed(absolute)
        pool = sources(self.target)[split]
        if absolute is None:
            index = int(self.np_random.integers(len(pool)))
        else:
            index = (absolute - SPLITS[split][0]) % len(pool)
        self.source = pool[index]
        target_seed, point, _ = self.source
        obs, info = self.target.reset(seed=target_seed, options={"split": "train"})
        oracle = list(self.target.oracle_actions())
        for action in oracle[:point]:
            obs, _, _, _, info = self.target.step(action)
        self.continuation = oracle[point:]
        return obs, {**info, "source": self.source_info()}

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.target.step(action)
        return obs, reward, terminated, truncated, {**info, "source": self.source_info()}

    def source_info(self) -> dict[str, Any]:
        assert self.source is not None
        seed, point, key = self.source
        return {"target": TARGET, "seed": seed, "split": "train", "prefix_actions": point, "task_key": key}

    def oracle_actions(self) -> list[Any]:
        return list(self.continuation)

    def task_key(self) -> str:
        assert self.source is not None
        return self.source[2]

    def render_instance(self) -> str:
        return canonical_json({"capability": CAPABILITY, "source": self.source_info()})

    def render(self) -> str | None:
        return self.target.render()

    def close(self) -> None:
        self.target.close()
