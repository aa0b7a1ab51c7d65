"""The base class of every trace environment: a tool-using conversation as a ``gymnasium.Env``.

Observation
    The whole conversation so far, as OpenAI chat messages (``system``, ``user``, ``assistant`` with
    ``tool_calls``, ``tool`` with ``tool_call_id``); see :class:`~trace_gym.core.spaces.ChatObservationSpace`.
    The tools are OpenAI function schemas in ``info["tools"]`` and on ``env.unwrapped.tools``.
Action
    One assistant turn: ``{"content": str, "tool_calls": [...]}`` or the raw text a model generated (parsed by
    :func:`~trace_gym.core.parsing.parse_action`). A turn with tool calls runs them and answers with ``tool``
    messages; a turn without is a message to the user, whose simulator answers with a ``user`` message.
Invalid actions
    Never raise. The env answers with an error that says what was wrong, ``info["invalid_action"]`` is one of
    ``parse``, ``unknown_tool``, ``schema``, ``precondition`` (``None`` for a valid turn), an invalid call
    changes nothing, and the episode is truncated after ``max_invalid_turns`` invalid turns. Calls of one turn
    run in order and independently, as parallel tool calls do in OpenAI's API: a valid call next to an invalid
    one still takes effect (and the turn still counts as invalid).
Reward
    Terminal, in [0, 1], from the env's algorithmic verifier, with ``info["reward_components"]`` and
    ``info["requirements"]`` (capability -> ``"PRESENT"`` / ``"LACKING"``) on the last step; 0.0 before.
Termination
    ``terminated`` when the user ends the conversation or a ``transfer`` tool is called; ``truncated`` after
    ``max_turns`` agent turns or ``max_invalid_turns`` invalid ones.
Options of ``reset``
    ``hint`` (bool): expert advice appended to the system prompt; ``info["base_system_prompt"]`` is the prompt
    without it. ``split`` (``"train"``/``"test"``): the seed indexes that split's disjoint range (see
    :data:`SPLITS`). Envs with ``content_split = True`` also keep only instances whose :meth:`task_key`
    hashes to that split (without the option: the split of the seed's range), so no test task occurs in the
    train split for any seed (:mod:`trace_gym.core.splits`). ``difficulty`` (int): overrides the constructor's level for this episode.
"""

from __future__ import annotations

import json
import reprlib
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np

from trace_gym.core.parsing import ActionParseError, AssistantTurn, parse_action
from trace_gym.core.spaces import AssistantTurnSpace, ChatObservationSpace
from trace_gym.core.splits import TEST_SHARE, draw_in_split
from trace_gym.worlds.tools import State, Tool
from trace_gym.worlds.user import UserSimulator
from trace_gym.worlds.world import InvalidKind, World, canonical_json, clone

Label = Literal["PRESENT", "LACKING"]

# Disjoint seed ranges: with options={"split": name}, seed i is instance seed start + i, 0 <= i < size.
SPLITS: dict[str, tuple[int, int]] = {"train": (0, 1_000_000), "test": (1_000_000, 100_000)}


RESET_OPTIONS = ("hint", "split", "difficulty")


def reset_options(options: dict[str, Any] | None, known: tuple[str, ...] = RESET_OPTIONS) -> dict[str, Any]:
    """A copy of ``reset``'s options; a key outside ``known`` is a ``ValueError`` that lists the known ones."""
    options = dict(options or {})
    unknown = set(options) - set(known)
    if unknown:
        raise ValueError(f"unknown reset options {sorted(unknown)}; known: {', '.join(known)}")
    return options


def split_of_seed(seed: int | None) -> str:
    """The split whose seed range holds an absolute ``seed`` (``"train"`` for ``None`` and any other seed)."""
    test_start, test_size = SPLITS["test"]
    return "test" if seed is not None and test_start <= seed < test_start + test_size else "train"


def split_seed(seed: int | None, split: str | None) -> int | None:
    """The instance seed of split-relative ``seed`` (``None`` split: ``seed`` as is; ``None`` seed: random)."""
    if split is None:
        return seed
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {sorted(SPLITS)}")
    start, size = SPLITS[split]
    if seed is None:
        seed = int(np.random.default_rng().integers(size))
    if not 0 <= seed < size:
        raise ValueError(f"seed {seed} is outside split {split!r}, which has seeds 0..{size - 1}")
    return start + seed


@dataclass
class Episode:
    """Everything one reset draws: the task, the world, the user, and what the verifier needs."""

    system_prompt: str
    state: State
    user: UserSimulator
    instance: dict[str, Any]  # the task as data: rendered for golden hashes and uniqueness checks
    hint: str = ""
    value_pool: dict[str, list[Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Evaluation:
    reward: float
    components: dict[str, float]
    requirements: dict[str, Label] = field(default_factory=dict)


@dataclass(frozen=True)
class CallRecord:
    """One tool call of the trajectory, in order, for verifiers and requirement checks."""

    turn: int
    name: str
    arguments: dict[str, Any]
    error: InvalidKind | None
    output: str


class ChatToolEnv(gym.Env[list, Any]):
    """Base class: subclasses provide tools, ``_new_episode``, ``_evaluate`` and ``oracle_actions``."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}
    capability: ClassVar[str] = ""
    description: ClassVar[str] = ""
    supports_splits: ClassVar[bool] = True  # reset(options={"split": ...}) takes split-relative seeds
    # Opt-in content split (trace_gym.core.splits): no test task key ever occurs in the train split.
    # Off here so that existing envs keep their instances (golden hashes); new envs should turn it on.
    content_split: ClassVar[bool] = False
    test_share: ClassVar[float] = TEST_SHARE
    # Capabilities oracle_actions(without=...) can remove (none by default; see trace/retail-v2).
    ablatable_capabilities: ClassVar[tuple[str, ...]] = ()
    difficulty_levels: ClassVar[tuple[int, ...]] = (1,)
    default_difficulty: ClassVar[int] = 1
    # End an episode once its reward can no longer change (see decided()); an env that can tell sets it from a
    # constructor argument (trace/retail-v2: gym.make(..., stop_when_decided=True))
    stop_when_decided: bool = False
    decided_stop: dict[str, Any] | None = None  # what decided() said when stop_when_decided ended the episode

    def __init__(
        self,
        render_mode: str | None = None,
        difficulty: int | None = None,
        max_turns: int = 30,
        max_invalid_turns: int = 5,
        max_tool_calls_per_turn: int = 8,
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        self.render_mode = render_mode
        self.difficulty = self._check_difficulty(
            self.default_difficulty if difficulty is None else difficulty
        )
        self.max_turns = max_turns
        self.max_invalid_turns = max_invalid_turns
        self.max_tool_calls_per_turn = max_tool_calls_per_turn
        self.domain_tools: list[Tool] = self._make_tools()
        self.tools: list[dict[str, Any]] = [tool.schema for tool in self.domain_tools]
        self.observation_space = ChatObservationSpace()
        self.action_space = AssistantTurnSpace(self.tools)
        self.world: World | None = None
        self.episode: Episode | None = None
        self.messages: list[dict[str, Any]] = []
        self.calls: list[CallRecord] = []
        self.agent_messages: list[str] = []  # what the agent told the user, in order
        self.turn = 0
        self.invalid_turns = 0
        self.over = True
        self.episode_difficulty = self.difficulty

    # ---- subclass hooks -------------------------------------------------------------------------------------
    @abstractmethod
    def _make_tools(self) -> list[Tool]:
        """The domain's tools; fixed for the env so that its action space is fixed."""

    @abstractmethod
    def _new_episode(self, rng: np.random.Generator, difficulty: int) -> Episode:
        """Draw one instance from ``rng`` (the env's ``np_random``) at the given difficulty."""

    @abstractmethod
    def _evaluate(self) -> Evaluation:
        """Score the finished episode from ``self.world``, ``self.calls`` and ``self.agent_messages``."""

    @abstractmethod
    def oracle_actions(self) -> list[dict[str, Any]]:
        """A reference solution of the current instance; replayed from reset it scores 1.0.

        Envs listed in :attr:`ablatable_capabilities` also take ``without="<capability>"``: the scripted
        agent "oracle with exactly that capability removed" (step 1 checks that its labels move on it)."""

    # ---- gymnasium API --------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        options = reset_options(options)
        split = options.get("split")
        seed = split_seed(seed, split)
        super().reset(seed=seed)
        self.episode_difficulty = self._check_difficulty(options.get("difficulty", self.difficulty))
        episode = self._draw_episode(split or split_of_seed(seed))
        self.world = World(self.domain_tools, episode.state)
        self.action_space.set_value_pool(episode.value_pool)
        system = episode.system_prompt
        if options.get("hint") and episode.hint:
            system = f"{system}\n\n# Expert advice\n{episode.hint}"
        self.messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": episode.user.opening()},
        ]
        self.calls, self.agent_messages = [], []
        self.turn, self.invalid_turns, self.over = 0, 0, False
        self.decided_stop = None
        self._episode_tools = clone(self.tools)  # JSON schemas: the plain-data copy, ~5x faster than deepcopy
        info = self._info()
        info["base_system_prompt"] = episode.system_prompt
        info["difficulty"] = self.episode_difficulty
        return self._observation(), info

    def step(self, action: Any):
        if self.over or self.episode is None or self.world is None:
            raise RuntimeError("the episode is over (or was never started): call reset() before step()")
        self.turn += 1
        terminated = False
        try:
            turn = parse_action(action)
            if len(turn.tool_calls) > self.max_tool_calls_per_turn:
                raise ActionParseError(
                    f"{len(turn.tool_calls)} tool calls in one turn; this environment accepts at most "
                    f"{self.max_tool_calls_per_turn}"
                )
        except ActionParseError as err:
            invalid: InvalidKind | None = "parse"
            raw = action if isinstance(action, str) else _dump(action)
            self.messages.append({"role": "assistant", "content": raw})
            self.messages.append(
                {"role": "user", "content": f"[environment] Error: your message could not be read: {err}."}
            )
        else:
            if turn.tool_calls:
                invalid, terminated = self._run_tools(turn)
            else:
                invalid = None
                terminated = self._talk_to_user(
                    turn.content, message={"role": "assistant", "content": turn.content}
                )
        if invalid is not None:
            self.invalid_turns += 1
        terminated = self._stop_if_decided(terminated)
        truncated = not terminated and (
            self.turn >= self.max_turns or self.invalid_turns >= self.max_invalid_turns
        )
        info = self._info()
        info["invalid_action"] = invalid
        reward = 0.0
        if terminated or truncated:
            self.over = True
            evaluation = self._evaluate()
            reward = float(np.clip(evaluation.reward, 0.0, 1.0))
            info["reward_components"] = dict(evaluation.components)
            info["requirements"] = dict(evaluation.requirements)
        return self._observation(), reward, terminated, truncated, info

    def decided(self) -> dict[str, Any] | None:
        """Whether the episode's reward is already fixed whatever the agent does next: ``{"turn", "violation"}``
        of the first breach no continuation repairs, or None. The default cannot tell (None); an env whose verifier
        knows its irreparable failures overrides it, and ``stop_when_decided`` then ends the episode there
        (``terminated``, scored as it stands, ``info["decided"]``): an evaluation spends no turns on an outcome that
        cannot change."""
        return None

    def _stop_if_decided(self, terminated: bool) -> bool:
        """``terminated``, or True where ``stop_when_decided`` ends the episode on a decided outcome (kept in
        ``decided_stop`` for the step's info and the env's verdict)."""
        if self.stop_when_decided and not terminated:
            self.decided_stop = self.decided()
        return terminated or self.decided_stop is not None

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return render_conversation(self.messages)

    def render_instance(self) -> str:
        """The current instance as canonical JSON (same seed, same text, byte for byte)."""
        if self.episode is None:
            raise RuntimeError("call reset() before render_instance()")
        return canonical_json(self.episode.instance)

    def task_key(self) -> str:
        """The current task's canonical key for content splits (see :mod:`trace_gym.core.splits`): two
        instances with one key are the same task. Default: the rendered instance; override to leave out
        what does not change the task (names, wording)."""
        return self.render_instance()

    # ---- internals ------------------------------------------------------------------------------------------
    def _draw_episode(self, split: str) -> Episode:
        """Draw an instance from ``np_random``; with ``content_split``, redraw until its key is in ``split``."""

        def draw() -> Episode:
            self.episode = self._new_episode(self.np_random, self.episode_difficulty)
            return self.episode

        if not self.content_split:
            return draw()
        episode, _ = draw_in_split(draw, lambda _e: self.task_key(), split, self.test_share)
        return episode

    def _run_tools(self, turn: AssistantTurn) -> tuple[InvalidKind | None, bool]:
        assert self.world is not None
        calls = []
        for i, call in enumerate(turn.tool_calls):
            call_id = f"call_{self.turn}_{i}"
            arguments = json.dumps(call.arguments, ensure_ascii=False)
            calls.append(
                {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": arguments}}
            )
        self.messages.append({"role": "assistant", "content": turn.content, "tool_calls": calls})
        first_invalid: InvalidKind | None = None
        terminated = False
        replies: list[str] = []
        for call, wire in zip(turn.tool_calls, calls, strict=True):
            result = self.world.call(call.name, call.arguments)
            self.calls.append(CallRecord(self.turn, call.name, call.arguments, result.error, result.output))
            self.messages.append(
                {"role": "tool", "tool_call_id": wire["id"], "name": call.name, "content": result.output}
            )
            if result.error is not None:
                first_invalid = first_invalid or result.error
                continue
            kind = self.world.tools[call.name].kind
            if kind == "reply":
                replies.append(str(call.arguments.get("message", "")))
            elif kind == "transfer":
                terminated = True
        if replies and not terminated:
            terminated = self._talk_to_user("\n".join(replies), message=None)
        return first_invalid, terminated

    def _talk_to_user(self, text: str, message: dict[str, Any] | None) -> bool:
        assert self.episode is not None
        if message is not None:
            self.messages.append(message)
        self.agent_messages.append(text)
        reply = self.episode.user.reply(text)
        if reply.content:
            self.messages.append({"role": "user", "content": reply.content})
        return reply.done

    def _observation(self) -> list[dict[str, Any]]:
        # Messages are never changed once appended, so a copy of each message (and of its call list) is
        # enough to keep a caller's edits out of the env, without a deep copy of the whole conversation.
        return [
            {**message, "tool_calls": [_copy_call(c) for c in message["tool_calls"]]}
            if "tool_calls" in message
            else dict(message)
            for message in self.messages
        ]

    def _info(self) -> dict[str, Any]:
        info = {"tools": self._episode_tools, "capability": self.capability, "turn": self.turn}
        if self.decided_stop is not None:  # the step that stop_when_decided ended
            info["decided"] = self.decided_stop
        return info

    def _check_difficulty(self, level: int) -> int:
        if level not in self.difficulty_levels:
            raise ValueError(f"difficulty must be one of {list(self.difficulty_levels)}, got {level!r}")
        return int(level)


def _copy_call(call: dict[str, Any]) -> dict[str, Any]:
    return {**call, "function": dict(call["function"])}


def _dump(action: Any) -> str:
    """The text of an unreadable action for the transcript; never raises (any Python value may arrive)."""
    try:
        return json.dumps(action, ensure_ascii=False, default=reprlib.repr)
    except Exception:  # noqa: BLE001 - deep nesting (RecursionError), circular values, odd keys
        try:
            return reprlib.repr(action)
        except Exception:  # noqa: BLE001 - a __repr__ that raises
            return f"<unreadable {type(action).__name__}>"


def render_conversation(messages: list[dict[str, Any]]) -> str:
    """Plain-text transcript of a conversation (for ``render_mode="ansi"``, ``trace play`` and logs)."""
    lines = []
    for message in messages:
        role = message["role"]
        if role == "tool":
            lines.append(
                f"[tool {message.get('name', '')} -> {message.get('tool_call_id')}] {message['content']}"
            )
            continue
        if message.get("content"):
            lines.append(f"[{role}] {message['content']}")
        for call in message.get("tool_calls") or []:
            fn = call["function"]
            lines.append(f"[{role} calls {fn['name']}] {fn['arguments']}")
    return "\n".join(lines) + "\n"
