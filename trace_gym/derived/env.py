"""A capability env derived from a target: the target itself, restricted (docs/derived.md).

Observation space, action space, tools, system prompt, user simulator and verifier
    The target's own, unchanged: this env holds one target env and passes every step through it. The
    spaces *are* the target's space objects; ``tools``, ``domain_tools`` and ``world`` are the target's.
Task distribution
    Train-split target tasks that exercise the capability (``task_capabilities()``), one instance per
    distinct start: per decision point of the capability (``decision_points()``) at level 1, per task at
    level 4, where every decision point starts the same whole task (:func:`~trace_gym.derived.pool.level_sources`;
    the capability env's own train/test splits are a content split *of the target's train split*).
Starting point (difficulty)
    The target's reset, then the target oracle's own actions replayed up to the start point
    (:mod:`trace_gym.derived.levels`: level 1, the default, starts at the decision point; level 4 at the
    beginning of the whole task; ``ladder="fine"``: levels 1-7, one oracle action apart near the decision).
    The observation after reset is the conversation so far, prefix included.
Reward
    The target's verdict on the whole episode, prefix included (binary where the target's is).
    ``info["reward_components"]`` is the target's plus :data:`~trace_gym.derived.shaped.SHAPED_KEY`, the
    ordered milestone reward declared by :attr:`DerivedCapabilityEnv.shaped_reward_key`.
Source
    ``info["source"]`` names the target task: target id, target train seed, task key (and task id, the
    decision point and the prefix length). ``oracle_actions()`` is the target oracle's continuation:
    replayed after the prefix it scores 1.0.

The target must implement the capability-env protocol: ``task_capabilities()``, ``decision_points()``,
``oracle_actions()``, ``task_key()``, ``info["requirements"]`` and ``reset(options={"split": "train"})``.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import gymnasium as gym

from trace_gym.core.env import SPLITS, reset_options, split_of_seed, split_seed
from trace_gym.derived.levels import DEFAULT_LADDER, DEFAULT_LEVEL, LEVELS, ladder_levels, prefix_length
from trace_gym.derived.pool import DEFAULT_WINDOW, SOURCE_SPLIT, Source, level_sources
from trace_gym.derived.shaped import SHAPED_KEY, event_milestones, shaped_reward
from trace_gym.worlds.world import canonical_json


class PrefixError(RuntimeError):
    """The target oracle's prefix ended the episode or was refused: the target's protocol is broken."""


class DerivedCapabilityEnv(gym.Env[list, Any]):
    """A target env restricted to train tasks that exercise one capability, started near its decision point."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}
    shaped_reward_key: ClassVar[str] = SHAPED_KEY
    difficulty_levels: ClassVar[tuple[int, ...]] = LEVELS
    default_difficulty: ClassVar[int] = DEFAULT_LEVEL
    supports_splits: ClassVar[bool] = True
    content_split: ClassVar[bool] = True

    def __init__(
        self,
        target_id: str,
        capability: str,
        target_kwargs: dict[str, Any] | None = None,
        render_mode: str | None = None,
        difficulty: int | None = None,
        window: int = DEFAULT_WINDOW,
        ladder: str = DEFAULT_LADDER,
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        self.target_id = target_id
        self.capability = capability
        self.target_kwargs = {
            k: tuple(v) if isinstance(v, list) else v for k, v in (target_kwargs or {}).items()
        }
        self.render_mode = render_mode
        self.ladder = ladder
        self.difficulty_levels = ladder_levels(ladder)  # the class's are the standard ladder's
        self.difficulty = self._check_level(self.default_difficulty if difficulty is None else difficulty)
        self.window = window
        self.target = gym.make(
            target_id, disable_env_checker=True, render_mode=render_mode, **self.target_kwargs
        ).unwrapped
        known = getattr(self.target, "capabilities", None)
        if known is not None and capability not in known:
            raise ValueError(f"{target_id} has no capability {capability!r}; known: {list(known)}")
        # the agent lacking c from the start point on needs the target's ablations from an oracle index on
        takes_start = "start" in inspect.signature(self.target.oracle_actions).parameters
        self.ablatable_capabilities = (
            tuple(getattr(self.target, "ablatable_capabilities", ())) if takes_start else ()
        )
        self._scratch: Any = None  # a second target, where the oracle's own milestone events are recorded
        self._oracle_events: dict[int, list[tuple[int, str]]] = {}
        self.start_turn = 0
        self.observation_space = self.target.observation_space
        self.action_space = self.target.action_space
        self.source: Source | None = None
        self.split = SOURCE_SPLIT
        self.level = self.difficulty
        self.prefix = 0
        self.prefix_messages = 0
        self.first_turn: int | None = None
        self._continuation: list[Any] = []

    @classmethod
    def card(cls, kwargs: dict[str, Any]) -> tuple[str, str]:
        target, capability = kwargs.get("target_id", "?"), kwargs.get("capability", "")
        return (
            capability,
            f"{target} restricted to train tasks exercising {capability}, started at its decision.",
        )

    # ---- the target's format, unchanged -----------------------------------------------------------------------
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
        """The target's limit on agent turns (prefix turns count: they are the target episode's)."""
        return self.target.max_turns

    @max_turns.setter
    def max_turns(self, value: int) -> None:
        self.target.max_turns = value

    @property
    def max_invalid_turns(self) -> int:
        return self.target.max_invalid_turns

    @max_invalid_turns.setter
    def max_invalid_turns(self, value: int) -> None:
        self.target.max_invalid_turns = value

    @property
    def turn(self) -> int:
        return self.target.turn

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far (the target's), prefix included."""
        return self.target.messages

    @property
    def calls(self) -> list[Any]:
        return self.target.calls

    # ---- gymnasium API ----------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        options = reset_options(options)
        split = options.get("split")
        absolute = split_seed(seed, split)
        super().reset(seed=absolute)
        self.split = split or split_of_seed(absolute)
        self.level = self._check_level(options.get("difficulty", self.difficulty))
        # the level's instances: one per start, not per decision point (two that start alike are one episode)
        pool = level_sources(
            self.target_id, self.target_kwargs, self.capability, self.window, self.level, self.ladder
        )[self.split]
        if absolute is None:
            index = int(self.np_random.integers(len(pool)))
        else:
            index = (absolute - SPLITS[self.split][0]) % len(pool)
        self.source = pool[index]
        target_options: dict[str, Any] = {"split": SOURCE_SPLIT}
        if options.get("hint"):
            target_options["hint"] = True
        obs, info = self.target.reset(seed=self.source.target_seed, options=target_options)
        oracle = list(self.target.oracle_actions())
        self.prefix = prefix_length(self.source.decision_point, self.level, self.ladder)
        if not self.source.decision_point < len(oracle):
            raise PrefixError(
                f"decision point {self.source.decision_point} beyond the oracle ({len(oracle)})"
            )
        for action in oracle[: self.prefix]:
            obs, _, terminated, truncated, info = self.target.step(action)
            if terminated or truncated or info.get("invalid_action") not in (None, "precondition"):
                raise PrefixError(f"the target oracle's prefix failed at {self.source} (level {self.level})")
        self._continuation = oracle[self.prefix :]
        self.prefix_messages = len(obs)
        self.first_turn = getattr(self.target, "user_turn", None)
        self.start_turn = self.target.turn
        info = self._info(info)
        info["base_system_prompt"] = info.get("base_system_prompt", obs[0]["content"])
        info["difficulty"] = self.level
        info["prefix_actions"] = self.prefix
        info["prefix_messages"] = self.prefix_messages
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.target.step(action)
        info = self._info(info)
        if terminated or truncated:
            components = dict(info.get("reward_components", {}))
            if hasattr(self.target, "milestone_events"):
                events, violations = self.target.milestone_events()
                components[SHAPED_KEY] = event_milestones(
                    float(reward), self._oracle_milestones(), events, violations, self.start_turn
                )
            else:
                components[SHAPED_KEY] = shaped_reward(
                    float(reward),
                    components,
                    dict(info.get("requirements", {})),
                    tuple(self.target.task_capabilities()),
                    self.first_turn,
                    self._n_turns(),
                )
            info["reward_components"] = components
        return obs, reward, terminated, truncated, info

    def render(self) -> str | None:
        return self.target.render()

    def close(self) -> None:
        self.target.close()
        if self._scratch is not None:
            self._scratch.close()

    # ---- the trace contract -----------------------------------------------------------------------------------
    def oracle_actions(self, without: str | None = None) -> list[Any]:
        """The target oracle's continuation after the prefix (replayed from reset it scores 1.0); with
        ``without=c`` (one of :attr:`ablatable_capabilities`) the target's agent "oracle minus c" from the start
        point on: the prefix stays the oracle's (it is the env's, not the agent's), and what the ablated agent
        does from the oracle's action ``prefix`` on follows (the target's ``oracle_actions(without=c,
        start=prefix)``). Where the ablation would have changed a prefix action (a confirmation the agent
        lacking policy-adherence never asks, asked in the prefix), the change is not made: that agent lacks
        the capability only from where it starts acting."""
        if self.source is None:
            raise RuntimeError("call reset() before oracle_actions()")
        if without is None:
            return list(self._continuation)
        if without not in self.ablatable_capabilities:
            raise ValueError(
                f"cannot remove capability {without!r}; supported: {', '.join(self.ablatable_capabilities)}"
            )
        return list(self.target.oracle_actions(without=without, start=self.prefix))

    def source_info(self) -> dict[str, Any]:
        if self.source is None:
            raise RuntimeError("call reset() first")
        return {
            "target": self.target_id,
            "seed": self.source.target_seed,
            "split": SOURCE_SPLIT,
            "task_key": self.source.task_key,
            "task_id": self.source.task_id,
            "decision_point": self.source.decision_point,
            "prefix_actions": self.prefix,
        }

    def render_instance(self) -> str:
        if self.source is None:
            raise RuntimeError("call reset() before render_instance()")
        return canonical_json(
            {"capability": self.capability, "level": self.level, "source": self.source_info()}
        )

    def task_key(self) -> str:
        """The source target task's key (the capability env's split is by the target task's content)."""
        if self.source is None:
            raise RuntimeError("call reset() before task_key()")
        return self.source.task_key

    def task_capabilities(self) -> tuple[str, ...]:
        return tuple(self.target.task_capabilities())

    # ---- internals --------------------------------------------------------------------------------------------
    def _info(self, info: dict[str, Any]) -> dict[str, Any]:
        info = dict(info)
        info["capability"] = self.capability
        info["source"] = self.source_info()
        return info

    def _oracle_milestones(self) -> list[tuple[int, str]]:
        """The target oracle's own milestone events on the source task (the whole oracle replayed in a second
        target; cached per source seed)."""
        assert self.source is not None
        seed = self.source.target_seed
        if seed not in self._oracle_events:
            if self._scratch is None:
                self._scratch = gym.make(
                    self.target_id, disable_env_checker=True, **self.target_kwargs
                ).unwrapped
            self._scratch.reset(seed=seed, options={"split": SOURCE_SPLIT})
            for action in self._scratch.oracle_actions():
                _, _, terminated, truncated, _ = self._scratch.step(action)
                if terminated or truncated:
                    break
            self._oracle_events[seed] = list(self._scratch.milestone_events()[0])
        return self._oracle_events[seed]

    def _n_turns(self) -> int | None:
        task = getattr(self.target, "task", None)
        turns = getattr(task, "turns", None)
        return len(turns) if turns is not None else None

    def _check_level(self, level: Any) -> int:
        if level not in self.difficulty_levels or isinstance(level, bool):
            raise ValueError(f"difficulty must be one of {list(self.difficulty_levels)}, got {level!r}")
        return int(level)


__all__ = ["DerivedCapabilityEnv", "PrefixError"]
