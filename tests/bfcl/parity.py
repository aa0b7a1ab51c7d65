"""Trajectories for the parity test: BFCL's ground truth and three perturbations, as env actions and as the
decoded trajectories BFCL's checker takes (written by BFCL's own decoder function)."""

from __future__ import annotations

import ast
import copy
import json
from collections.abc import Callable
from functools import cache
from typing import Any

from trace_gym.targets.bfcl.data import package_dir
from trace_gym.targets.bfcl.env import BfclMultiTurnEnv

KINDS = ("ground_truth", "call_dropped", "argument_changed", "turn_skipped")
Call = tuple[str, dict[str, Any]]
Trajectory = list[list[list[Call]]]  # per user turn, per step, the calls


@cache
def convert_to_function_call() -> Callable[[Any], list[str]]:
    """BFCL's own ``model_handler.utils.convert_to_function_call``, loaded from its source alone (its module
    imports tree_sitter and other parsers the multi-turn checker does not need)."""
    source = (package_dir() / "model_handler" / "utils.py").read_text(encoding="utf-8")
    node = next(
        n for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef) and n.name == "convert_to_function_call"
    )  # fmt: skip
    namespace: dict[str, Any] = {"json": json}
    exec(compile(ast.Module(body=[node], type_ignores=[]), "bfcl_utils", "exec"), namespace)  # noqa: S102
    return namespace["convert_to_function_call"]


def ground_truth(env: BfclMultiTurnEnv) -> Trajectory:
    """The oracle's calls (BFCL's ground truth), grouped by user turn and step."""
    turns: Trajectory = [[]]
    for action in env.oracle_actions():
        if action.get("tool_calls"):
            step = [
                (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in action["tool_calls"]
            ]
            turns[-1].append(step)
        else:
            turns.append([])
    return turns[:-1]  # the reply to the last turn opens no turn


def _last_turn_with_calls(turns: Trajectory) -> int:
    return max(i for i, turn in enumerate(turns) if turn)


def changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "_changed"
    if isinstance(value, list):
        return value[:-1] if value else ["changed"]
    if isinstance(value, dict):
        return {**value, "changed": 1}
    return "changed"


def perturbed(turns: Trajectory, kind: str) -> Trajectory:
    """``kind`` applied to the last user turn with calls (so earlier turns still pass)."""
    turns = copy.deepcopy(turns)
    last = _last_turn_with_calls(turns)
    if kind == "ground_truth":
        return turns
    if kind == "turn_skipped":
        turns[last] = []
    elif kind == "call_dropped":
        del turns[last][0][0]
        turns[last] = [step for step in turns[last] if step]
    elif kind == "argument_changed":
        with_arguments = [(t, s, c) for t in range(last, -1, -1) for s, step in enumerate(turns[t])
                          for c, (_, arguments) in enumerate(step) if arguments]  # fmt: skip
        if not with_arguments:
            raise ValueError("no call with arguments")
        t, s, c = with_arguments[0]
        name, arguments = turns[t][s][c]
        key = next(iter(arguments))
        turns[t][s][c] = (name, {**arguments, key: changed(arguments[key])})
    else:
        raise ValueError(kind)
    return turns


def actions(turns: Trajectory) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for turn in turns:
        for step in turn:
            calls = [{"function": {"name": n, "arguments": json.dumps(a)}} for n, a in step]
            out.append({"content": "", "tool_calls": calls})
        out.append({"content": "Done."})
    return out


def decoded(turns: Trajectory) -> list[list[list[str]]]:
    convert = convert_to_function_call()
    return [[convert([{name: arguments} for name, arguments in step]) for step in turn] for turn in turns]
