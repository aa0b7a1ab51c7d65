"""``trace/bfcl-multi-turn-v0``: BFCL's multi-turn function-calling tasks as a trace target (docs/bfcl.md).

Observation space
    :class:`~trace_gym.core.spaces.ChatObservationSpace`: the conversation so far as OpenAI chat messages.
    The system message is BFCL's own instructions (its default prompt without the output-format and
    function-list parts, which the chat template's tools replace), then the first turn's user message.
    ``info["tools"]`` holds the tools offered now: every function of the task's classes, less the functions
    a ``miss_func`` task holds out until its later turn. Then they are added to ``info["tools"]``, and that
    turn's user message (empty in BFCL's data) is, as BFCL's prompting handler writes it, their schemas as
    JSON followed by "I have updated some more functions you can choose from. What about now?": a policy
    that fixed its tools at reset (a prompt prefix kept across turns) still sees them.
Action space
    :class:`~trace_gym.core.spaces.AssistantTurnSpace` over all 128 functions of BFCL's eight multi-turn API
    classes (fixed for the env); a function of a class the task does not use is ``unknown_tool`` (a held-out
    function still runs when called by name, as in BFCL). A turn with tool
    calls runs them on BFCL's API class instances (``world.py``) and answers each with a ``tool`` message
    holding BFCL's text of the result. A turn without tool calls is the agent's reply to the user: it ends
    the user's turn, and the next user turn follows (as BFCL's inference loop moves on when a model answers
    without calls).
Rewards
    Terminal, 1.0 or 0.0: BFCL's multi-turn verdict (``verifier.py``): after each user turn with ground truth,
    the instances' state equals the ground truth's, every ground-truth result occurs among the agent's results,
    and the agent called something. ``info["reward_components"]`` has each turn's checks;
    ``info["requirements"]`` labels the capabilities of the turns the agent finished.
Termination
    ``terminated`` after the agent's reply to the last user turn; ``truncated`` after BFCL's step limit in one
    user turn (21 steps with calls: BFCL force-quits), ``max_turns`` agent turns (default 120) or
    ``max_invalid_turns`` (default 5) turns with a call trace rejected (``parse``, ``unknown_tool``,
    ``schema``); a truncated episode scores 0, as BFCL scores a force-terminated entry. The settings are
    :class:`~trace_gym.targets.bfcl.config.BfclConfig`'s (keyword arguments of ``gym.make``). With
    ``stop_when_decided=True`` (off by default), also ``terminated`` at the end of the first user turn whose check
    fails (:meth:`decided`, ``info["decided"]``): the verdict needs every turn, so the reward is 0 from there on,
    and the later turns are not played (their labels are then NA).
Invalid actions
    Never raise; a rejected call runs nothing and the turn goes on (BFCL would end the turn on undecodable
    text; trace's contract keeps the episode going with an error message instead). An API error answer that
    changed nothing (``{"error": ...}``, an exception) is flagged ``precondition`` but, as in BFCL, is a normal
    answer: it does not count toward ``max_invalid_turns``.
Tasks and splits
    One id per category and one for all four (800 tasks). Tasks are split by content, 20% test
    (``data.py``: the variants of a base task, and tasks sharing a user message, stay together). Seed ``i`` of
    a split is task ``i mod n`` of that split in a fixed shuffled order, so consecutive seeds are distinct
    tasks; an absolute seed (no ``split`` option) indexes the split its range belongs to. The instance is a
    function of the seed alone (``np_random`` is seeded, and only draws a task when no seed is given).
Difficulty
    One level (1): BFCL's tasks are fixed.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, ClassVar

import numpy as np

from trace_gym.core.env import SPLITS, CallRecord, ChatToolEnv, Episode, Evaluation, _dump, split_seed
from trace_gym.core.parsing import ActionParseError, AssistantTurn, parse_action
from trace_gym.targets.bfcl.config import BfclConfig
from trace_gym.targets.bfcl.data import (
    CATEGORIES,
    HOLDOUT_PROMPT,
    MAX_STEPS_PER_TURN,
    BfclTask,
    normalise,
    split_ids,
    task_groups,
    tasks_by_id,
)
from trace_gym.targets.bfcl.tools import make_tools
from trace_gym.targets.bfcl.verifier import (
    CAPABILITIES,
    DESCRIPTIONS,
    TurnCheck,
    check_turn,
    evaluate,
    turn_needs,
)
from trace_gym.targets.bfcl.world import BfclWorld, format_call, parse_call
from trace_gym.worlds.tools import Tool
from trace_gym.worlds.user import UserReply, UserSimulator
from trace_gym.worlds.world import InvalidKind, canonical_json

# BFCL's default system prompt (bfcl_eval.constants.default_prompts, style "classic"): persona, task and
# multi-turn behaviour; its output format and function list are what a chat template's tools provide.
SYSTEM_PROMPT = (
    "You are an expert in composing functions. You are given a question and a set of possible functions. "
    "Based on the question, you will need to make one or more function/tool calls to achieve the purpose. "
    "If none of the functions can be used, point it out. If the given question lacks the parameters required "
    "by the function, also point it out.\n\n"
    "At each turn, you should try your best to complete the tasks requested by the user within the current "
    "turn. Continue to output functions to call until you have fulfilled the user's request to the best of "
    "your ability. Once you have no more functions to call, the system will consider the current turn "
    "complete and proceed to the next turn or task."
)
HINT = (
    "Look before you act: read the state a request depends on (the current directory with pwd and ls, a "
    "balance, an order, a login status) before calling a function that changes it, and call the read "
    "functions whose answers the user asks about. Log in or authenticate first where a function needs it. "
    "Use exactly the names and values the user gave. If no function can do what the user asks, or the "
    "request lacks a value a function needs, say so in plain text and call nothing in that turn."
)
DONE = "I have completed this request."
# The oracle's reply to a turn with empty ground truth, by category (BFCL checks no call is made there).
UNABLE = {
    "miss_func": "I cannot do this with the functions I have: it needs a function that is not available.",
    "miss_param": "I cannot do this yet: your request lacks a value that the function needs. "
    "Could you tell me the details?",
    "base": "I cannot do this with the functions and the information I have.",
}


QUOTED = re.compile(r"'([^'\n]{1,80})'|\"([^\"\n]{1,80})\"")


def value_pool(task: BfclTask, tools: list[Tool]) -> dict[str, list[Any]]:
    """The quoted values of the task's user messages (file names, symbols, ids) for every string parameter of
    its tools, so that sampled actions (``action_space.sample()``, random probes) name things that exist."""
    quoted = {a or b for turn in task.turns for m in turn for a, b in QUOTED.findall(m["content"])}
    names = {
        name
        for tool in tools
        for name, schema in tool.parameters.get("properties", {}).items()
        if schema.get("type") == "string"
    }
    return {name: sorted(quoted) for name in sorted(names)} if quoted else {}


class BfclUser(UserSimulator):
    """BFCL's user: the task's turns in order; each reply of the agent moves to the next turn."""

    def __init__(self, env: BfclMultiTurnEnv):
        self.env = env

    def opening(self) -> str:
        return self.env.turn_text(0)

    def reply(self, agent_message: str) -> UserReply:
        return self.env.next_user_turn()


class BfclMultiTurnEnv(ChatToolEnv):
    """BFCL multi-turn (base, missing function, missing parameter, long context): tool calls on BFCL's own API
    classes, scored by BFCL's multi-turn verdict."""

    capability = ""
    description = (
        "BFCL multi-turn function calling (bfcl-eval): stateful API classes, BFCL's own verdict per turn."
    )
    content_split: ClassVar[bool] = True
    ablatable_capabilities: ClassVar[tuple[str, ...]] = ()
    capabilities: ClassVar[tuple[str, ...]] = CAPABILITIES
    capability_descriptions: ClassVar[dict[str, str]] = dict(DESCRIPTIONS)

    def __init__(
        self,
        render_mode: str | None = None,
        difficulty: int | None = None,
        categories: tuple[str, ...] | list[str] = CATEGORIES,
        max_turns: int = BfclConfig.max_turns,
        max_invalid_turns: int = BfclConfig.max_invalid_turns,
        max_tool_calls_per_turn: int = BfclConfig.max_tool_calls_per_turn,
        stop_when_decided: bool = False,
    ):
        self.stop_when_decided = stop_when_decided
        self.config = BfclConfig(tuple(categories), max_turns, max_invalid_turns, max_tool_calls_per_turn)
        self.categories = self.config.categories
        self._bfcl_tools = make_tools()
        self.task: BfclTask | None = None
        self.world: BfclWorld | None = None  # type: ignore[assignment]
        self.ground_truth_world: BfclWorld | None = None
        self._instance_seed: int | None = None
        super().__init__(render_mode, difficulty, max_turns, max_invalid_turns, max_tool_calls_per_turn)
        self.kinds = {tool.name: tool.kind for tool in self.domain_tools}
        self.turn_steps: list[list[list[str]]] = []  # the decoded trajectory, BFCL's format
        self.results: list[str] = []  # BFCL's texts of every call that ran, in order
        self.checks: list[TurnCheck] = []
        self.user_turn = 0
        self.steps_in_turn = 0
        self.force_quit = False

    @classmethod
    def card(cls, kwargs: dict[str, Any]) -> tuple[str, str]:
        categories = kwargs.get("categories", CATEGORIES)
        which = "all four categories" if tuple(categories) == CATEGORIES else ", ".join(categories)
        return "", f"BFCL multi-turn function calling ({which}): BFCL's API classes and verdict."

    # ---- tasks ----------------------------------------------------------------------------------------------
    def split_tasks(self, split: str) -> tuple[str, ...]:
        """The ids of this env's tasks in ``split``, in seed order."""
        tasks = tasks_by_id()
        return tuple(i for i in split_ids()[split] if tasks[i].category in self.categories)

    def _make_tools(self) -> list[Tool]:
        return [tool for _cls, tool in self._bfcl_tools.values()]

    def _draw_episode(self, split: str) -> Episode:
        ids = self.split_tasks(split)
        start, _ = SPLITS[split]
        seed = self._instance_seed
        index = int(self.np_random.integers(len(ids))) if seed is None else (seed - start) % len(ids)
        self.episode = self._episode(tasks_by_id()[ids[index]])
        return self.episode

    def _new_episode(self, rng: np.random.Generator, difficulty: int) -> Episode:
        # Unused by reset (a seed indexes its split's tasks, see _draw_episode); a random train task otherwise.
        ids = self.split_tasks("train")
        return self._episode(tasks_by_id()[ids[int(rng.integers(len(ids)))]])

    def _episode(self, task: BfclTask) -> Episode:
        self.task = task
        return Episode(
            system_prompt=SYSTEM_PROMPT,
            state={},
            user=BfclUser(self),
            instance={
                "id": task.id,
                "turns": [list(turn) for turn in task.turns],
                "ground_truth": [list(calls) for calls in task.ground_truth],
                "initial_config": task.initial_config,
                "involved_classes": list(task.involved_classes),
                "missed_function": {str(k): list(v) for k, v in sorted(task.missed_function.items())},
            },
            hint=HINT,
            value_pool=value_pool(
                task, [tool for cls, tool in self._bfcl_tools.values() if cls in task.involved_classes]
            ),
        )

    def task_key(self) -> str:
        """An independent content key for split checks: the task's classes and its first user message
        (normalised). The split itself is by group (``data.task_groups``), so a test key in train would show
        that the grouping missed a shared task."""
        if self.task is None:
            raise RuntimeError("call reset() before task_key()")
        first = " ".join(normalise(m["content"]) for m in self.task.turns[0])
        return canonical_json({"classes": sorted(self.task.involved_classes), "first": first})

    def group_key(self) -> str:
        """The group the current task was split by (its variants and tasks sharing a user message)."""
        if self.task is None:
            raise RuntimeError("call reset() before group_key()")
        return task_groups()[self.task.id]

    # ---- gymnasium API --------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        options = dict(options or {})
        self._instance_seed = split_seed(seed, options.get("split"))
        super().reset(seed=seed, options=options)  # draws the task and opens turn 0 (text only, no world yet)
        assert self.task is not None
        self.world = BfclWorld(self.task, self._bfcl_tools)
        self.ground_truth_world = BfclWorld(self.task, self._bfcl_tools)
        self.world.offered = self.offered_at(0)
        self._episode_tools = [self.world.tools[name].schema for name in self.world.offered]
        self.turn_steps, self.results, self.checks = [[]], [], []
        self.user_turn, self.steps_in_turn, self.force_quit = 0, 0, False
        info = self._info()
        info["base_system_prompt"] = SYSTEM_PROMPT
        info["difficulty"] = self.episode_difficulty
        return self._observation(), info

    def step(self, action: Any):
        if self.over or self.episode is None or self.world is None:
            raise RuntimeError("the episode is over (or was never started): call reset() before step()")
        self.turn += 1
        terminated = False
        invalid: InvalidKind | None = None
        counted = False  # a rejection by trace's checks (these count toward max_invalid_turns)
        try:
            turn = parse_action(action)
            if len(turn.tool_calls) > self.max_tool_calls_per_turn:
                raise ActionParseError(
                    f"{len(turn.tool_calls)} tool calls in one turn; this environment accepts at most "
                    f"{self.max_tool_calls_per_turn}"
                )
        except ActionParseError as err:
            invalid, counted = "parse", True
            raw = action if isinstance(action, str) else _dump(action)
            self.messages.append({"role": "assistant", "content": raw})
            self.messages.append(
                {"role": "user", "content": f"[environment] Error: your message could not be read: {err}."}
            )
        else:
            if turn.tool_calls:
                invalid, counted = self._run_calls(turn)
            else:
                self.messages.append({"role": "assistant", "content": turn.content})
                self.agent_messages.append(turn.content)
                terminated = self.episode.user.reply(turn.content).done
        if counted:
            self.invalid_turns += 1
        terminated = self._stop_if_decided(terminated)
        truncated = not terminated and (
            self.force_quit or self.turn >= self.max_turns or self.invalid_turns >= self.max_invalid_turns
        )
        info = self._info()
        info["invalid_action"] = invalid
        info["user_turn"] = self.user_turn
        reward = 0.0
        if terminated or truncated:
            self.over = True
            evaluation = self._evaluate()
            reward = float(np.clip(evaluation.reward, 0.0, 1.0))
            info["reward_components"] = dict(evaluation.components)
            info["requirements"] = dict(evaluation.requirements)
        return self._observation(), reward, terminated, truncated, info

    # ---- turns ----------------------------------------------------------------------------------------------
    def _run_calls(self, turn: AssistantTurn) -> tuple[InvalidKind | None, bool]:
        assert self.world is not None
        wires = []
        for i, call in enumerate(turn.tool_calls):
            arguments = json.dumps(call.arguments, ensure_ascii=False)
            wires.append(
                {
                    "id": f"call_{self.turn}_{i}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": arguments},
                }
            )
        self.messages.append({"role": "assistant", "content": turn.content, "tool_calls": wires})
        first_invalid: InvalidKind | None = None
        counted = False
        step: list[str] = []
        for call, wire in zip(turn.tool_calls, wires, strict=True):
            result = self.world.call(call.name, call.arguments)
            self.calls.append(CallRecord(self.turn, call.name, call.arguments, result.error, result.output))
            self.messages.append(
                {"role": "tool", "tool_call_id": wire["id"], "name": call.name, "content": result.output}
            )
            if result.error in (None, "precondition"):  # it ran: part of BFCL's trajectory
                step.append(format_call(call.name, call.arguments))
                self.results.append(result.output)
            if result.error is not None:
                first_invalid = first_invalid or result.error
                counted = counted or result.error != "precondition"
        self.turn_steps[-1].append(step)
        self.steps_in_turn += 1
        self.force_quit = self.steps_in_turn > MAX_STEPS_PER_TURN
        return first_invalid, counted

    def next_user_turn(self) -> UserReply:
        """End the current user turn (check it) and open the next one; ``done`` after the last."""
        assert self.task is not None and self.world is not None and self.ground_truth_world is not None
        index = self.user_turn
        ground_truth = self.task.ground_truth[index]
        gt_results = self.ground_truth_world.run_ground_truth(ground_truth)
        calls = sum(len(step) for step in self.turn_steps[-1])
        self.checks.append(
            check_turn(
                index,
                ground_truth,
                gt_results,
                self.world.instances,
                self.ground_truth_world.instances,
                calls,
                self.results,
            )
        )
        self.user_turn += 1
        self.steps_in_turn = 0
        if self.user_turn >= len(self.task.turns):
            return UserReply("", done=True)
        self.turn_steps.append([])
        added = [self.world.tools[n].schema for n in self.task.missed_function.get(self.user_turn, ())]
        self._episode_tools = self._episode_tools + added
        self.world.offered = self.offered_at(self.user_turn)
        text = self.turn_text(self.user_turn)
        self.messages.append({"role": "user", "content": text})
        return UserReply(text)

    def turn_text(self, index: int) -> str:
        """The user's message(s) of a turn; a held-out function's turn has none in BFCL's data, and gets the
        functions it brings back and BFCL's prompt (``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING``)."""
        assert self.task is not None
        messages = [m["content"] for m in self.task.turns[index]]
        if messages:
            return "\n\n".join(messages)
        assert self.world is not None  # a turn without messages is never the first (checked in the tests)
        added = [self.world.tools[n].schema for n in self.task.missed_function.get(index, ())]
        return f"{json.dumps(added, ensure_ascii=False)}\n{HOLDOUT_PROMPT}"

    def offered_at(self, turn: int) -> list[str]:
        """The tools offered at a user turn: the task's classes' functions (in the task's class order, as BFCL
        lists them), less those held out until a later turn."""
        assert self.task is not None
        held = {n for t, names in self.task.missed_function.items() if t > turn for n in names}
        return [
            name
            for involved in self.task.involved_classes
            for name, (cls, _tool) in self._bfcl_tools.items()
            if cls == involved and name not in held
        ]

    def decided(self) -> dict[str, Any] | None:
        """The first user turn whose check failed (``{"turn": agent turn, "violation": "user turn k: ..."}``), or
        None: the verdict needs every turn to pass, so from a failed one on the reward is 0 whatever follows."""
        failed = next((c for c in self.checks if not c.passed), None)
        if failed is None:
            return None
        why = "no call" if not failed.called else "state" if not failed.state else "response"
        return {"turn": self.turn, "violation": f"user turn {failed.turn} failed ({why})"}

    def bfcl_trajectory(self) -> list[list[list[str]]]:
        """The episode so far as BFCL's decoded trajectory (per user turn, per step, the calls that ran);
        :func:`trace_gym.targets.bfcl.checker.bfcl_verdict` gives BFCL's own verdict on it."""
        finished = self.turn_steps[: len(self.checks)]
        return [[list(step) for step in turn] for turn in finished]

    def _evaluate(self) -> Evaluation:
        assert self.task is not None
        return evaluate(self.task, self.checks, self.kinds)

    # ---- the capability-env protocol ------------------------------------------------------------------------
    def oracle_actions(self) -> list[dict[str, Any]]:
        """BFCL's ground truth, one call per step (fewer steps where a turn has more calls than BFCL's step
        limit), then a reply that ends the turn; a turn with empty ground truth gets only the reply, saying
        what is missing (the function, or a value to ask for)."""
        assert self.world is not None and self.task is not None
        actions: list[dict[str, Any]] = []
        for calls in self.task.ground_truth:
            if not calls:
                actions.append({"content": UNABLE.get(self.task.category, UNABLE["base"])})
                continue
            size = math.ceil(len(calls) / MAX_STEPS_PER_TURN)
            for start in range(0, len(calls), size):
                chunk = calls[start : start + size]
                actions.append({"content": "", "tool_calls": [self._wire(c) for c in chunk]})
            actions.append({"content": DONE})
        return actions

    def _wire(self, text: str) -> dict[str, Any]:
        assert self.world is not None
        name, arguments = parse_call(text, self.world.signature)
        return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}

    def task_capabilities(self) -> tuple[str, ...]:
        """The capabilities the current task exercises (see ``verifier.py``)."""
        assert self.task is not None
        needs = {c for turn in range(len(self.task.turns)) for c in turn_needs(self.task, self.kinds, turn)}
        return tuple(c for c in CAPABILITIES if c in needs)

    def decision_points(self) -> dict[str, list[int]]:
        """For each capability of the task, the indexes into :meth:`oracle_actions` of the oracle's first
        action in each turn that exercises it (a capability env pre-fills the conversation up to one)."""
        assert self.task is not None
        points: dict[str, list[int]] = {}
        position = 0
        for index, calls in enumerate(self.task.ground_truth):
            for capability in turn_needs(self.task, self.kinds, index):
                points.setdefault(capability, []).append(position)
            steps = math.ceil(len(calls) / math.ceil(len(calls) / MAX_STEPS_PER_TURN)) if calls else 0
            position += steps + 1
        return points

    def _info(self) -> dict[str, Any]:
        info = super()._info()
        if self.task is not None:
            info["task_id"] = self.task.id
        return info
